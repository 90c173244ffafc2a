#include "backend/metal/metal_command.h"

#include <cstdio>
#include <exception>
#include <mutex>

#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_context.h"
#include "core/command_buffer.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

std::unique_ptr<BackendCommandBuffer> MetalQueue::newCommandBuffer() {
    AutoreleaseScope pool;
    // -commandBuffer is autoreleased: retain it for the life of the mpsgrad command buffer.
    auto buffer = retain(queue_->commandBuffer());
    if (!buffer) throw MetalError("Metal returned no command buffer (too many command buffers in flight?)");
    return std::make_unique<MetalCommandBuffer>(queue_, buffer);
}

MetalCommandBuffer::MetalCommandBuffer(Ref<MTL::CommandQueue> queue, Ref<MTL::CommandBuffer> buffer)
    : queue_(std::move(queue)), buffer_(std::move(buffer)) {}

// Metal requires endEncoding before an encoder is released, even when the command buffer is
// dropped without being committed.
MetalCommandBuffer::~MetalCommandBuffer() { endEncoding(); }

MTL::ComputeCommandEncoder* MetalCommandBuffer::computeEncoder() {
    if (!compute_) {
        endEncoding();
        AutoreleaseScope pool;
        compute_ = retain(buffer_->computeCommandEncoder());
        if (!compute_) throw MetalError("Metal returned no compute command encoder");
    }
    return compute_.get();
}

MTL::BlitCommandEncoder* MetalCommandBuffer::blitEncoder() {
    if (!blit_) {
        endEncoding();
        AutoreleaseScope pool;
        blit_ = retain(buffer_->blitCommandEncoder());
        if (!blit_) throw MetalError("Metal returned no blit command encoder");
    }
    return blit_.get();
}

void MetalCommandBuffer::endEncoding() {
    if (compute_) {
        compute_->endEncoding();
        compute_.reset();
    }
    if (blit_) {
        blit_->endEncoding();
        blit_.reset();
    }
}

std::string completionError(MTL::CommandBuffer* buffer) {
    if (buffer->status() == MTL::CommandBufferStatusCompleted) return "";
    AutoreleaseScope pool;
    NS::Error* error = buffer->error();
    NS::String* text = error ? error->localizedDescription() : nullptr;
    std::string description = text && text->utf8String() ? text->utf8String() : "";
    if (description.empty()) description = "status " + std::to_string(long(buffer->status())) + ", no error description";
    return "Metal command buffer failed: " + description;
}

namespace {

// What the completed handler owns. The block Metal keeps holds only this, and the handler
// releases `done` after calling it: `done` holds the mpsgrad command buffer, which holds the
// MTLCommandBuffer, which holds the block; dropping `done` breaks that cycle even if Metal keeps
// its handlers until the MTLCommandBuffer itself goes.
struct Completion {
    std::mutex mutex;
    std::function<void(const std::string&)> done;

    void finish(MTL::CommandBuffer* buffer) {
        std::function<void(const std::string&)> fn;
        {
            std::lock_guard<std::mutex> lock(mutex);
            fn.swap(done);
        }
        if (!fn) return;
        // An exception must not unwind into Metal's dispatch thread; the core reports handler
        // exceptions itself, so anything reaching here is a bug worth printing.
        try {
            fn(completionError(buffer));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "mpsgrad: Metal completion failed: %s\n", e.what());
        } catch (...) {
            std::fprintf(stderr, "mpsgrad: Metal completion failed\n");
        }
    }
};

}  // namespace

void MetalCommandBuffer::commit(std::function<void(const std::string&)> done) {
    endEncoding();
    auto completion = std::make_shared<Completion>();
    completion->done = std::move(done);
    // `keep`: finishing may release the last reference to the MTLCommandBuffer and with it this
    // very handler; the Completion must outlive its own finish().
    buffer_->addCompletedHandler([completion](MTL::CommandBuffer* buffer) {
        std::shared_ptr<Completion> keep = completion;
        keep->finish(buffer);
    });
    buffer_->commit();
    committed_ = true;
}

void MetalCommandBuffer::wait() {
    if (committed_) buffer_->waitUntilCompleted();
}

MetalCommandBuffer& metalCommandBuffer(CommandBuffer& cb) {
    cb.checkEncodable();
    auto* metal = dynamic_cast<MetalCommandBuffer*>(&cb.backend());
    if (!metal)
        throwValueError("command_buffer: belongs to device '", cb.device().name(),
                        "', but the kernel runs on the Metal device");
    return *metal;
}

}  // namespace mpsgrad::metal_backend
