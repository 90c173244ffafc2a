#include "core/command_buffer.h"

#include <atomic>
#include <cstdio>
#include <cxxabi.h>
#include <exception>
#include <stdexcept>

#include "core/errors.h"
#include "core/host_access.h"

namespace mpsgrad {

namespace {

uint64_t nextId() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
}

// The callbacks this thread is running on behalf of command buffers (completed handlers and host
// callbacks), innermost last; they nest when a callback waits on a buffer of another queue that a
// lazy device then runs on this thread. Until a callback returns, its buffer cannot complete, nor
// can a buffer of its queue that has not completed yet (a queue completes its buffers in commit
// order, so those all come after it): a wait on one of those could never return, so
// waitUntilCompleted raises instead (blockedWaitReason).
struct RunningCallback {
    const CommandBuffer* buffer;
    uint64_t queueId;
    const char* kind;  // "completed handler" or "host callback"
};
thread_local std::vector<RunningCallback> runningCallbacks;

// Marks, for its lifetime, that this thread runs a callback of `buffer`.
class CallbackScope {
public:
    CallbackScope(const CommandBuffer* buffer, uint64_t queueId, const char* kind) {
        runningCallbacks.push_back({buffer, queueId, kind});
    }
    ~CallbackScope() { runningCallbacks.pop_back(); }
    CallbackScope(const CallbackScope&) = delete;
    CallbackScope& operator=(const CallbackScope&) = delete;
};

// Why waiting from this thread on `buffer` (of queue `queueId`, whose handlers have not all run)
// could never return; "" when it can.
std::string blockedWaitReason(const CommandBuffer* buffer, uint64_t queueId) {
    for (auto it = runningCallbacks.rbegin(); it != runningCallbacks.rend(); ++it) {
        if (it->buffer == buffer)
            return detail::concat("called from this command buffer's own ", it->kind, "; the ", it->kind,
                                  " runs as part of the buffer's work, so the wait could never return");
        if (queueId != 0 && it->queueId == queueId)
            return detail::concat("called from a ", it->kind, " of the same command queue on a buffer that runs ",
                                  "after the ", it->kind, "'s own; the queue runs it only once the ", it->kind,
                                  " returns, so the wait could never return (use another queue or wait outside the ",
                                  it->kind, ")");
    }
    return "";
}

}  // namespace

CommandQueue::CommandQueue(Device device)
    : device_(std::move(device)), id_(nextId()), backend_(device_.backend().newQueue()) {}

std::shared_ptr<CommandBuffer> CommandQueue::commandBuffer() {
    return std::make_shared<CommandBuffer>(device_, backend_->newCommandBuffer(), id_);
}

void CommandBuffer::failOnCommit(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != CommandBufferStatus::NotEnqueued)
        throw CommandBufferError("fail_on_commit: the command buffer is already committed");
    injectedFailure_ = message.empty() ? "injected failure (CommandBuffer.fail_on_commit)" : message;
}

CommandBuffer::CommandBuffer(Device device, std::unique_ptr<BackendCommandBuffer> backend, uint64_t queueId)
    : device_(std::move(device)), id_(nextId()), queueId_(queueId), backend_(std::move(backend)) {}

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

void CommandBuffer::encodeHostCallback(std::function<void()> fn) {
    if (!fn) throwValueError("callback: expected a callable, got an empty function");
    checkEncodable();
    // One message on every backend, naming where the failure came from. Every backend runs the
    // callback through this wrapper, so the deadlock guard (CallbackScope) holds on all of them.
    // `this` outlives the callback: the backend holds the buffer until its work has finished.
    backend_->encodeHostCallback([this, fn = std::move(fn)] {
        // The work encoded before this point has completed and the work after it has not started,
        // so the callback may read what this buffer writes (core/host_access.h).
        host_access::HostCallbackScope reads(id_);
        CallbackScope scope(this, queueId_, "host callback");
        try {
            fn();
        } catch (abi::__forced_unwind&) {
            throw;
        } catch (const std::exception& e) {
            throw std::runtime_error(std::string("host callback failed: ") + e.what());
        } catch (...) {
            throw std::runtime_error("host callback failed: unknown exception");
        }
    });
}

void CommandBuffer::commit() {
    std::string injected;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (status_ != CommandBufferStatus::NotEnqueued)
            throw CommandBufferError("commit: the command buffer was already committed");
        status_ = CommandBufferStatus::Committed;
        injected.swap(injectedFailure_);
    }
    // The backend holds the buffer alive until its work has finished.
    auto self = shared_from_this();
    if (!injected.empty()) {
        // The test hook: the work is dropped and the buffer completes with the error at once,
        // through the same completion path (status, error, handlers) as a real failure.
        backend_ = nullptr;
        finish(injected);
        return;
    }
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
    CallbackScope scope(this, queueId_, "completed handler");
    for (auto& handler : handlers) {
        try {
            handler(*this);
        } catch (abi::__forced_unwind&) {
            throw;  // thread cancellation (e.g. interpreter shutdown) must propagate
        } catch (const std::exception& e) {
            std::fprintf(stderr, "mpsgrad: a completed handler raised: %s\n", e.what());
        } catch (...) {
            std::fprintf(stderr, "mpsgrad: a completed handler raised an unknown exception\n");
        }
    }
    // Everything the handlers and the encoded work kept alive is released before a waiter may
    // return. Some of it is Python's (a handler, a data source, the owner of zero-copy memory) and
    // is released under the GIL: after the wait the program may exit, and a thread that takes the
    // GIL while the interpreter finalizes is stopped mid-destructor (std::terminate).
    internal.clear();
    handlers.clear();
    std::vector<std::shared_ptr<const void>> retained;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        retained.swap(retained_);
    }
    retained.clear();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        handlersDone_ = true;
    }
    completed_.notify_all();
}

void CommandBuffer::waitUntilCompleted() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (status_ == CommandBufferStatus::NotEnqueued)
            throw CommandBufferError("wait_until_completed: the command buffer was never committed");
        const std::string reason = handlersDone_ ? std::string() : blockedWaitReason(this, queueId_);
        if (!reason.empty()) throw CommandBufferError("wait_until_completed: " + reason);
    }
    if (backend_) backend_->wait();
    std::unique_lock<std::mutex> lock(mutex_);
    completed_.wait(lock, [this] { return handlersDone_; });
}

}  // namespace mpsgrad
