// Image format conversion of the CPU backend (metal/convert_params.h): float16 or unorm8 / unorm16
// <-> float32 over whole image storage (padding lanes included), for the float32 shadows of
// FLOAT16 and UNORM images (core/float16_shadow.h, docs/float16.md, docs/storage_formats.md).
//
// Half: on x86-64 processors with F16C (every x86-64 CPU since 2012/2013) the conversion runs 8
// lanes at a time with vcvtph2ps / vcvtps2ph, chosen at run time so that the build still targets
// baseline x86-64; elsewhere (and for the tail) the portable scalar code of core/half.h runs. Both
// round float -> half to nearest even with overflow to infinity, so the result is the same bit for
// bit except for the payload bits of NaNs. Unorm: the scalar rules of core/unorm.h.
#include <cstdint>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/half_simd.h"
#include "backend/cpu/parallel.h"
#include "core/half.h"
#include "core/unorm.h"

namespace mpsgrad::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements per parallel chunk: large enough to amortize the fork

void convertHalfChunk(bool toHalf, const void* source, void* destination, int64_t begin, int64_t end) {
    if (toHalf)
        floatsToHalves(static_cast<const float*>(source) + begin, static_cast<uint16_t*>(destination) + begin,
                       end - begin);
    else
        halvesToFloats(static_cast<const uint16_t*>(source) + begin, static_cast<float*>(destination) + begin,
                       end - begin);
}

// Code is uint8_t or uint16_t.
template <class Code>
void convertUnormChunk(bool toUnorm, const void* source, void* destination, int64_t begin, int64_t end) {
    if (toUnorm) {
        const float* in = static_cast<const float*>(source);
        Code* out = static_cast<Code*>(destination);
        for (int64_t i = begin; i < end; ++i)
            out[i] = sizeof(Code) == 1 ? Code(floatToUnorm8(in[i])) : Code(floatToUnorm16(in[i]));
    } else {
        const Code* in = static_cast<const Code*>(source);
        float* out = static_cast<float*>(destination);
        const float maximum = sizeof(Code) == 1 ? 255.0f : 65535.0f;
        for (int64_t i = begin; i < end; ++i) out[i] = float(in[i]) / maximum;  // core/unorm.h's rule
    }
}
}  // namespace

void convertImageFormat(const ConvertFormatParams& p, const void* source, void* destination) {
    const bool toStorage = p.toStorage != 0;
    parallelFor(p.count, kGrain, [&](int64_t begin, int64_t end) {
        switch (p.storage) {
            case kStorageUnorm8: convertUnormChunk<uint8_t>(toStorage, source, destination, begin, end); break;
            case kStorageUnorm16: convertUnormChunk<uint16_t>(toStorage, source, destination, begin, end); break;
            default: convertHalfChunk(toStorage, source, destination, begin, end);
        }
    });
}

}  // namespace mpsgrad::cpu
