// Internal to the Metal backend: the state one backend object owns, shared by the op files.
// Includes metal-cpp; nothing outside cpp/mpsgrad/backend/metal/ includes this header.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/metal/metal_allocator.h"
#include "backend/metal/metal_pipeline.h"

namespace mpsgrad {
class CommandBuffer;
}

namespace mpsgrad::metal_backend {

// metal-cpp methods that do not start with new/alloc/copy return autoreleased objects. mpsgrad
// runs on threads without a Cocoa run loop, so each entry point that calls them drains its own
// pool instead of leaking into (or depending on) one set up by the caller.
class AutoreleaseScope {
public:
    AutoreleaseScope() : pool_(NS::AutoreleasePool::alloc()->init()) {}
    ~AutoreleaseScope() { pool_->release(); }
    AutoreleaseScope(const AutoreleaseScope&) = delete;
    AutoreleaseScope& operator=(const AutoreleaseScope&) = delete;

private:
    NS::AutoreleasePool* pool_;
};

struct MetalContext {
    Ref<MTL::Device> device;
    std::string deviceName;
    std::unique_ptr<PipelineCache> pipelines;
    std::shared_ptr<BufferPool> buffers;
    // Bound where an op has no buffer for a kernel parameter (no bias, no PReLU data): Metal
    // wants every parameter of a kernel bound, even one the kernel does not read.
    std::shared_ptr<Buffer> placeholder;
};

// The context of a Metal backend; ValueError when `backend` is another kind.
MetalContext& contextOf(Backend& backend);

}  // namespace mpsgrad::metal_backend
