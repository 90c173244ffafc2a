// Internal to the Metal backend: choosing the MTLDevice and finding the compiled kernels.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "backend/metal/metal_ref.h"

#include <string>

namespace mpsgrad::metal_backend {

// The system default device, else the first of all devices (command-line processes on Macs
// with several GPUs may get no default); null when the machine has no Metal device.
Ref<MTL::Device> selectDevice();

struct KernelLibrary {
    Ref<MTL::Library> library;
    std::string description;  // where it came from, for messages
};

// The kernel library, from the first of:
//   1. $MPSGRAD_METALLIB (an error if set but unloadable: the user asked for that file);
//   2. mpsgrad.metallib in the directory of the binary containing this code (the installed
//      Python extension, which the wheel ships the library next to);
//   3. the library the build tree produced (MPSGRAD_METALLIB_BUILD_PATH, for uninstalled test
//      binaries);
//   4. the device's default library (on Apple, the main bundle's default.metallib; in the Linux
//      emulation, every kernel translated into the process).
// MetalError listing what was tried when none loads.
KernelLibrary loadKernelLibrary(MTL::Device* device);

}  // namespace mpsgrad::metal_backend
