// BufferFill::Unspecified support shared by the backends (backend.h).
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"

namespace mpsgrad {

bool poisonUnspecifiedBuffers() {
    static const bool poison = [] {
        const char* value = std::getenv("MPSGRAD_POISON_UNSPECIFIED_BUFFERS");
        return value != nullptr && std::strcmp(value, "1") == 0;
    }();
    return poison;
}

void prepareUnspecifiedBuffer(void* p, size_t bytes) {
    // 0xFFFFFFFF is a quiet NaN: it survives every arithmetic op and fails every comparison.
    if (poisonUnspecifiedBuffers()) std::memset(p, 0xFF, bytes);
}

}  // namespace mpsgrad
