// Internal to the Metal backend: mpsgrad's command queues and command buffers over
// MTL::CommandQueue and MTL::CommandBuffer.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "backend/metal/metal_ref.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace mpsgrad {
class CommandBuffer;
}

namespace mpsgrad::metal_backend {

class MetalQueue final : public BackendQueue {
public:
    explicit MetalQueue(Ref<MTL::CommandQueue> queue) : queue_(std::move(queue)) {}
    // MetalError when Metal has no command buffer to give (too many in flight).
    std::unique_ptr<BackendCommandBuffer> newCommandBuffer() override;

private:
    Ref<MTL::CommandQueue> queue_;
};

class MetalCommandBuffer final : public BackendCommandBuffer {
public:
    MetalCommandBuffer(Ref<MTL::CommandQueue> queue, Ref<MTL::CommandBuffer> buffer);
    ~MetalCommandBuffer() override;

    // The open compute encoder, opened on first use (closing an open blit encoder). Ops share
    // it: a compute encoder runs its dispatches in order, each seeing the previous one's writes.
    MTL::ComputeCommandEncoder* computeEncoder();
    // The open blit encoder, opened on first use (closing an open compute encoder).
    MTL::BlitCommandEncoder* blitEncoder();
    // Closes the open encoder, if any; the next op opens a new one, ordered after it.
    void endEncoding();

    // Registers `done` as the MTLCommandBuffer's completed handler and commits it. `done` gets
    // "" or Metal's description of the failure, once, on a Metal thread. With host points, the
    // segments are enqueued in order (keeping their place in the queue) and each is committed by
    // the completed handler of the one before, after running the host callback between them.
    void commit(std::function<void(const std::string& error)> done) override;
    // -[MTLCommandBuffer waitUntilCompleted] on each segment in turn.
    void wait() override;
    // Ends the current MTLCommandBuffer (a segment) and starts a new one; `fn` runs between them.
    void encodeHostCallback(std::function<void()> fn) override;

    // The host-point chain of a committed buffer (metal_command.cpp).
    struct Segments;

private:
    Ref<MTL::CommandQueue> queue_;  // a command buffer must not outlive its queue
    Ref<MTL::CommandBuffer> buffer_;  // the segment being encoded
    // The segments closed by host points, each with the callback that runs after it.
    std::vector<std::pair<Ref<MTL::CommandBuffer>, std::function<void()>>> closed_;
    std::shared_ptr<Segments> segments_;  // once committed with host points
    void commitSegments(std::function<void(const std::string& error)> done);
    Ref<MTL::ComputeCommandEncoder> compute_;
    Ref<MTL::BlitCommandEncoder> blit_;
    bool committed_ = false;
};

// The Metal side of `cb`, checked: CommandBufferError once committed, ValueError when the
// command buffer belongs to another device.
MetalCommandBuffer& metalCommandBuffer(CommandBuffer& cb);

// "" when `buffer` completed, else the failure as Metal describes it.
std::string completionError(MTL::CommandBuffer* buffer);

}  // namespace mpsgrad::metal_backend
