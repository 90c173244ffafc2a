#include "core/device.h"

#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "core/errors.h"

#ifdef MPSGRAD_HAS_METAL
#include "backend/metal/metal_backend.h"
#endif

namespace mpsgrad {
namespace {

// One backend object per device kind for the life of the process.
std::shared_ptr<Backend> backendNamed(const std::string& name) {
    static std::mutex mutex;
    static std::shared_ptr<Backend> cpu, metal;
    std::lock_guard<std::mutex> lock(mutex);
    if (name == "cpu") {
        if (!cpu) cpu = makeCpuBackend();
        return cpu;
    }
#ifdef MPSGRAD_HAS_METAL
    if (name == "metal") {
        if (!metal) metal = makeMetalBackend();  // null when no Metal device is present
        return metal;
    }
#endif
    return nullptr;
}

// Why `name` names no usable device, for the error message.
std::string whyUnavailable(const std::string& name) {
    if (name != "metal") return "mpsgrad's devices are 'cpu' and 'metal'";
#ifdef MPSGRAD_HAS_METAL
    std::string reason = metalUnavailableReason();
    return "Metal could not be set up: " + (reason.empty() ? std::string("no Metal device") : reason);
#else
    return "this build has no Metal backend (it is built on macOS, or on Linux with "
           "-DMPSGRAD_METAL_EMULATION=ON; docs/metal.md)";
#endif
}

}  // namespace

Device::Device(const std::string& name) : name_(name), backend_(backendNamed(name)) {
    if (!backend_) {
        std::string available;
        for (const auto& n : availableDevices()) available += (available.empty() ? "" : ", ") + n;
        throwValueError("device: '", name, "' is not available: ", whyUnavailable(name), " (available: ", available,
                        ")");
    }
}

std::vector<std::string> Device::availableDevices() {
    std::vector<std::string> names;
#ifdef MPSGRAD_HAS_METAL
    if (backendNamed("metal")) names.push_back("metal");
#endif
    names.push_back("cpu");
    return names;
}

Device Device::defaultDevice() { return Device(availableDevices().front()); }

}  // namespace mpsgrad
