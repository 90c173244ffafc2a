// Device: which backend runs the work ("cpu" everywhere, "metal" on Apple GPUs and in the
// Linux emulation build). Copies of a Device refer to the same backend object.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace mpsgrad {

class Backend;

class Device {
public:
    // "cpu" or "metal"; ValueError for a name this build does not have.
    explicit Device(const std::string& name);

    // Metal where the build and the machine have it, else the CPU.
    static Device defaultDevice();
    // Names of the devices this build and machine provide, default first.
    static std::vector<std::string> availableDevices();

    const std::string& name() const { return name_; }
    Backend& backend() const { return *backend_; }

    bool operator==(const Device& other) const { return backend_ == other.backend_; }
    bool operator!=(const Device& other) const { return !(*this == other); }

private:
    std::string name_;
    std::shared_ptr<Backend> backend_;
};

}  // namespace mpsgrad
