#include "backend/metal/metal_command.h"

#include <condition_variable>
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

// The segments of a command buffer split by host points, committed one after another. All are
// enqueued at commit (so that buffers committed later on the queue run after the last one); the
// completed handler of segment i runs host callback i (unless something failed before) and commits
// segment i + 1, the last one's reports the first failure. Every enqueued segment is committed, even
// after a failure: an enqueued buffer that is never committed would stall its queue for good.
struct MetalCommandBuffer::Segments {
    std::vector<Ref<MTL::CommandBuffer>> buffers;
    std::vector<std::function<void()>> callbacks;  // callbacks[i] runs after buffers[i]
    std::mutex mutex;
    std::condition_variable committedMore;
    size_t committed = 0;  // buffers[0 .. committed) are committed
    std::string error;     // the first failure
    std::function<void(const std::string&)> done;

    void completed(size_t i, MTL::CommandBuffer* buffer) {
        std::string failure = completionError(buffer);
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (error.empty()) error = failure;
        }
        if (i + 1 == buffers.size()) {
            std::function<void(const std::string&)> fn;
            std::string result;
            {
                std::lock_guard<std::mutex> lock(mutex);
                fn.swap(done);
                result = error;
            }
            callbacks.clear();
            if (fn) fn(result);
            return;
        }
        runCallback(i);
        {
            std::lock_guard<std::mutex> lock(mutex);
            committed = i + 2;
        }
        buffers[i + 1]->commit();
        committedMore.notify_all();
    }

    void runCallback(size_t i) {
        std::function<void()> fn = std::move(callbacks[i]);
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!error.empty()) return;  // the data it would read may be wrong
        }
        // fn comes wrapped by CommandBuffer::encodeHostCallback, which turns whatever the user's
        // callback throws into a std::runtime_error "host callback failed: ...": nothing else
        // reaches here (a thread's forced unwind passes through and must not be swallowed).
        std::string failure;
        try {
            fn();
        } catch (const std::exception& e) {
            failure = e.what();
        }
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure.empty() && error.empty()) error = "mpsgrad Metal backend: " + failure;
    }

    void waitForCommit(size_t i) {
        std::unique_lock<std::mutex> lock(mutex);
        committedMore.wait(lock, [&] { return committed > i; });
    }
};

void MetalCommandBuffer::encodeHostCallback(std::function<void()> fn) {
    endEncoding();
    AutoreleaseScope pool;
    auto next = retain(queue_->commandBuffer());
    if (!next) throw MetalError("Metal returned no command buffer for a host point (too many command buffers in flight?)");
    closed_.emplace_back(std::move(buffer_), std::move(fn));
    buffer_ = std::move(next);
}

void MetalCommandBuffer::commit(std::function<void(const std::string&)> done) {
    endEncoding();
    if (!closed_.empty()) {
        commitSegments(std::move(done));
        return;
    }
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

void MetalCommandBuffer::commitSegments(std::function<void(const std::string&)> done) {
    auto segments = std::make_shared<Segments>();
    for (auto& [buffer, callback] : closed_) {
        segments->buffers.push_back(std::move(buffer));
        segments->callbacks.push_back(std::move(callback));
    }
    closed_.clear();
    segments->buffers.push_back(buffer_);
    segments->done = std::move(done);
    // The handlers hold the chain weakly (it holds the buffers, which hold the handlers); this
    // object and the chain's `done` (the core command buffer, until it completes) keep it alive.
    std::weak_ptr<Segments> weak = segments;
    for (size_t i = 0; i < segments->buffers.size(); ++i) {
        MTL::CommandBuffer* buffer = segments->buffers[i].get();
        buffer->addCompletedHandler([weak, i](MTL::CommandBuffer* completed) {
            if (auto chain = weak.lock()) {
                try {
                    chain->completed(i, completed);
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "mpsgrad: Metal completion failed: %s\n", e.what());
                } catch (...) {
                    std::fprintf(stderr, "mpsgrad: Metal completion failed\n");
                }
            }
        });
        buffer->enqueue();
    }
    segments_ = segments;
    segments->committed = 1;
    segments->buffers.front()->commit();
    committed_ = true;
}

void MetalCommandBuffer::wait() {
    if (!committed_) return;
    if (!segments_) {
        buffer_->waitUntilCompleted();
        return;
    }
    // Segment i + 1 is committed by segment i's completed handler; a lazy device (the Linux
    // emulation) runs that handler inside the wait on segment i.
    auto segments = segments_;
    for (size_t i = 0; i < segments->buffers.size(); ++i) {
        segments->waitForCommit(i);
        segments->buffers[i]->waitUntilCompleted();
    }
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
