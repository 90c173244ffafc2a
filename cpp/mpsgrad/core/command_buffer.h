// CommandQueue and CommandBuffer (MTLCommandQueue / MTLCommandBuffer semantics).
//
// Kernels encode work into a command buffer; nothing runs until commit(). commit() is
// asynchronous on every backend; wait_until_completed() blocks. A failure while the work
// runs sets status() to Error and error() to its description; it never crashes.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/device.h"
#include "core/types.h"

namespace mpsgrad {

class CommandBuffer;

class CommandQueue {
public:
    explicit CommandQueue(Device device);
    const Device& device() const { return device_; }
    // -[MTLCommandQueue commandBuffer]
    std::shared_ptr<CommandBuffer> commandBuffer();

    std::string label;

private:
    Device device_;
    uint64_t id_;
    std::shared_ptr<BackendQueue> backend_;
};

class CommandBuffer : public std::enable_shared_from_this<CommandBuffer> {
public:
    using CompletedHandler = std::function<void(CommandBuffer&)>;

    // `queueId` identifies the queue the buffer comes from (0: none), so that a completed
    // handler waiting on a later buffer of its own queue is reported instead of deadlocking.
    CommandBuffer(Device device, std::unique_ptr<BackendCommandBuffer> backend, uint64_t queueId = 0);
    ~CommandBuffer();

    // A process-wide unique identity (never reused, unlike the object's address).
    uint64_t id() const { return id_; }

    const Device& device() const { return device_; }
    CommandBufferStatus status() const;
    // The failure description; empty unless status() == Error.
    std::string error() const;

    // Submits the encoded work; returns at once. Committing twice raises CommandBufferError.
    void commit();
    // Blocks until the work has run (CommandBufferError when the buffer was never committed,
    // or when called from a completed handler on a buffer of the handler's own queue that has not
    // completed yet: that wait could never return, as Metal documents).
    void waitUntilCompleted();
    // Registers a handler run once the work completes (or fails); must precede commit().
    void addCompletedHandler(CompletedHandler handler);
    // mpsgrad extension (docs/metal.md "Host points"): a host point in execution order. `fn` runs
    // on a host thread once all the work encoded before this call has completed, and before any
    // work encoded after it starts; it may read and write the storage of that work (images,
    // states) through host memory. An exception from `fn` fails the command buffer (status Error,
    // error() = "host callback failed: <message>"); the work after it then does not run on the CPU
    // backend, and runs on undefined data on Metal (encoded GPU work cannot be withdrawn). `fn`
    // must not wait for this command buffer or a later one of its queue.
    void encodeHostCallback(std::function<void()> fn);

    std::string label;

    // Test hook (documented in docs/verification.md): when committed, this buffer fails with
    // `message` instead of running its work, through the same path as a real failure (status
    // Error, error(), handlers, CommandBufferError at the wait), so the error path can be
    // exercised on every backend. Must precede commit().
    void failOnCommit(const std::string& message);

    // ---- for kernels and backends -------------------------------------------------------
    // Throws CommandBufferError unless work can still be encoded (not yet committed).
    void checkEncodable() const;
    BackendCommandBuffer& backend() { return *backend_; }
    // Keeps an object alive until the work has completed.
    void retain(std::shared_ptr<const void> object);
    // A completion callback used by the library itself (runs before user handlers).
    void addInternalCompletion(std::function<void()> fn);

private:
    void finish(const std::string& error);

    Device device_;
    uint64_t id_;
    uint64_t queueId_;
    std::unique_ptr<BackendCommandBuffer> backend_;
    mutable std::mutex mutex_;
    std::condition_variable completed_;
    CommandBufferStatus status_ = CommandBufferStatus::NotEnqueued;
    std::string error_;
    std::vector<CompletedHandler> handlers_;
    std::vector<std::function<void()>> internalCompletions_;
    std::vector<std::shared_ptr<const void>> retained_;
    bool handlersDone_ = false;
    std::string injectedFailure_;  // failOnCommit's message
};

}  // namespace mpsgrad
