// Internal to the Metal backend: choosing the MTLDevice and finding the compiled kernels.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "backend/metal/metal_ref.h"

#include <string>

namespace mpsgrad::metal_backend {

// Whether `device` runs mpsgrad's kernels: they use SIMD-group reductions (simd_sum), which
// Metal offers from the Apple7 family (M1, A14) and on Mac2 GPUs.
bool supportsKernels(MTL::Device* device);

// Why `device` cannot run the kernels of `library` ("" when it can): no SIMD-group reductions
// (supportsKernels), fewer threads per threadgroup than the kernels dispatch, or SIMD groups that
// are not 32 wide (AMD GPUs run 64-wide ones; the reductions assume 32 lanes).
std::string unsuitableReason(MTL::Device* device, MTL::Library* library);

// The system default device if it supportsKernels, else the first capable one of all devices,
// else whatever device there is (the caller reports why it cannot be used); null when the
// machine has no Metal device.
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
