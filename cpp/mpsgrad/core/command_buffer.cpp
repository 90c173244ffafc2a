#include "core/command_buffer.h"

#include <cstdio>
#include <exception>

#include "core/errors.h"

namespace mpsgrad {

CommandQueue::CommandQueue(Device device) : device_(std::move(device)), backend_(device_.backend().newQueue()) {}

std::shared_ptr<CommandBuffer> CommandQueue::commandBuffer() {
    return std::make_shared<CommandBuffer>(device_, backend_->newCommandBuffer());
}

CommandBuffer::CommandBuffer(Device device, std::unique_ptr<BackendCommandBuffer> backend)
    : device_(std::move(device)), backend_(std::move(backend)) {}

CommandBuffer::~CommandBuffer() = default;

CommandBufferStatus CommandBuffer::status() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
}

std::string CommandBuffer::error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
}

void CommandBuffer::checkEncodable() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != CommandBufferStatus::NotEnqueued)
        throw CommandBufferError("command_buffer: already committed; encode into a new command buffer");
}

void CommandBuffer::retain(std::shared_ptr<const void> object) {
    std::lock_guard<std::mutex> lock(mutex_);
    retained_.push_back(std::move(object));
}

void CommandBuffer::addInternalCompletion(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    internalCompletions_.push_back(std::move(fn));
}

void CommandBuffer::addCompletedHandler(CompletedHandler handler) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != CommandBufferStatus::NotEnqueued)
        throw CommandBufferError("add_completed_handler: the command buffer is already committed");
    handlers_.push_back(std::move(handler));
}

void CommandBuffer::commit() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (status_ != CommandBufferStatus::NotEnqueued)
            throw CommandBufferError("commit: the command buffer was already committed");
        status_ = CommandBufferStatus::Committed;
    }
    // The backend holds the buffer alive until its work has finished.
    auto self = shared_from_this();
    backend_->commit([self](const std::string& error) { self->finish(error); });
}

void CommandBuffer::finish(const std::string& error) {
    std::vector<std::function<void()>> internal;
    std::vector<CompletedHandler> handlers;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        internal.swap(internalCompletions_);
        handlers.swap(handlers_);
        error_ = error;
    }
    for (auto& fn : internal) fn();
    {
        // Status turns final before the user handlers run, as in Metal.
        std::lock_guard<std::mutex> lock(mutex_);
        status_ = error.empty() ? CommandBufferStatus::Completed : CommandBufferStatus::Error;
    }
    for (auto& handler : handlers) {
        try {
            handler(*this);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "mpsgrad: a completed handler raised: %s\n", e.what());
        } catch (...) {
            std::fprintf(stderr, "mpsgrad: a completed handler raised an unknown exception\n");
        }
    }
    std::vector<std::shared_ptr<const void>> retained;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        retained.swap(retained_);
        handlersDone_ = true;
    }
    completed_.notify_all();
}

void CommandBuffer::waitUntilCompleted() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (status_ == CommandBufferStatus::NotEnqueued)
            throw CommandBufferError("wait_until_completed: the command buffer was never committed");
    }
    backend_->wait();
    std::unique_lock<std::mutex> lock(mutex_);
    completed_.wait(lock, [this] { return handlersDone_; });
}

}  // namespace mpsgrad
