// The fake device's configurable capabilities, its variant log and its kernel-library check
// (internal; device_config.cpp).
#pragma once

#include <string>

#include "mtlemu/kernel_runtime.h"
#include "mtlemu/mtlemu.h"
#include "objc_runtime.h"

namespace mtlemu {
namespace metal {

// The first line of a kernel library file of the emulation (an mpsgrad.metallib built by
// mock/make_metallib.py: this header, then one kernel name per line).
constexpr const char* kLibraryManifestHeader = "mtlemu kernel library 1";

DeviceConfig deviceConfig();
// -[MTLDevice supportsFamily:] for the configured family.
bool supportsFamily(long family);
// A pipeline's maxTotalThreadsPerThreadgroup: the kernel's own limit, capped by the device's.
unsigned pipelineMaxThreads(const rt::KernelInfo& kernel);

// Appends "kernel<TAB>constant=value,..." to $MTLEMU_VARIANT_LOG the first time this process
// dispatches that variant (nothing when the variable is unset).
void recordVariant(const rt::KernelInfo& kernel, const rt::ConstantValues& constants);

// Adds one dispatch's counters to its kernel's totals (mtlemu::kernelStats).
void recordKernelStats(const rt::KernelInfo& kernel, const rt::DispatchResult& result);

// Empty if `path` is a kernel library of the emulation listing exactly the kernels linked into
// this process; otherwise why not (missing file, not a library, another build's kernels).
std::string checkLibraryFile(const std::string& path);

}  // namespace metal
}  // namespace mtlemu
