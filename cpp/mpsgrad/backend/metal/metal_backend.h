// The Metal backend: mpsgrad's ops on Apple GPUs through Apple's metal-cpp, and on Linux
// through the emulation harness of tests/metal_emulation (same host code, fake MTLDevice).
// Compiled only when the build defines MPSGRAD_HAS_METAL (cmake/MetalBackend.cmake).
//
// This header is free of metal-cpp so that any part of the library (and the tests) can use it.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "backend/backend.h"

namespace mpsgrad {

// A failure of the Metal runtime itself: no kernel library, a kernel missing from it, a
// pipeline that cannot be built, device memory exhausted. (Python: RuntimeError.)
class MetalError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The backend of the system's Metal device, or null when there is no usable device or no
// kernel library (metalUnavailableReason() then says why).
//
// Kernel library: $MPSGRAD_METALLIB when set, else mpsgrad.metallib next to the binary that
// contains this code (the Python extension), else the one in the build tree, else the device's
// default library (which, in the Linux emulation, holds every translated kernel).
std::shared_ptr<Backend> makeMetalBackend();

// Why the last makeMetalBackend() returned null; empty after a success.
std::string metalUnavailableReason();

// Counters of a Metal backend, for tests and diagnostics.
struct MetalBackendStats {
    std::string deviceName;
    std::string library;           // where the kernel library came from
    size_t buffersCreated = 0;     // MTLBuffers allocated from the device
    size_t buffersReused = 0;      // allocations served from the pool instead
    size_t pooledBuffers = 0;      // freed buffers waiting in the pool
    size_t pooledBytes = 0;
    size_t pipelines = 0;          // compute pipeline states built so far
};

// ValueError when `backend` is not a Metal backend.
MetalBackendStats metalBackendStats(Backend& backend);

// Builds (or finds in the cache) the pipeline of kernel `kernelName` with no function
// constants, as an op would. MetalError naming the kernel and the library when the library has
// no such kernel. For diagnostics and tests; ops call the cache themselves.
void metalPreparePipeline(Backend& backend, const std::string& kernelName);

// Releases every buffer waiting in the allocator's pool.
void metalTrimBufferPool(Backend& backend);

}  // namespace mpsgrad
