#include "core/host_access.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/image.h"
#include "core/state.h"

namespace mpsgrad::host_access {

namespace {

// Bytes [begin, end) of one buffer that a kernel of `commandBuffer` writes.
struct WriteRecord {
    std::weak_ptr<Buffer> buffer;  // identity check: a new Buffer may reuse a freed one's address
    size_t begin = 0, end = 0;
    std::weak_ptr<const CommandBuffer> commandBuffer;
    uint64_t commandBufferId = 0;
    const char* kind = "image";
};

// The storage of a temporary image or state and the command buffer it lives on.
struct TemporaryRecord {
    std::weak_ptr<Buffer> buffer;
    std::weak_ptr<const CommandBuffer> commandBuffer;
    const char* kind = "temporary image";
};

struct Registry {
    std::mutex mutex;
    std::unordered_multimap<const Buffer*, WriteRecord> writes;
    std::unordered_map<const Buffer*, TemporaryRecord> temporaries;
    size_t pruneAt = 256;  // prune dead records when the tables outgrow this (amortized O(1))
};

Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: reads may run during static destruction
    return *r;
}

thread_local uint64_t callbackCommandBuffer = 0;  // HostCallbackScope's buffer on this thread (0: none)

bool finished(CommandBufferStatus status) {
    return status == CommandBufferStatus::Completed || status == CommandBufferStatus::Error;
}

// A write is over once its buffer or its command buffer is gone, or the command buffer finished.
bool writeIsOver(const WriteRecord& w) {
    if (w.buffer.expired()) return true;
    auto cb = w.commandBuffer.lock();
    return !cb || finished(cb->status());
}

void pruneLocked(Registry& r) {
    for (auto it = r.writes.begin(); it != r.writes.end();)
        it = writeIsOver(it->second) ? r.writes.erase(it) : std::next(it);
    for (auto it = r.temporaries.begin(); it != r.temporaries.end();)
        it = it->second.buffer.expired() ? r.temporaries.erase(it) : std::next(it);
    r.pruneAt = std::max<size_t>(256, 2 * (r.writes.size() + r.temporaries.size()));
}

void maybePruneLocked(Registry& r) {
    if (r.writes.size() + r.temporaries.size() > r.pruneAt) pruneLocked(r);
}

std::string describe(const CommandBuffer& cb) {
    if (!cb.label.empty()) return "command buffer '" + cb.label + "'";
    return "a command buffer without a label (set its label to see it named here)";
}

const char* statusName(CommandBufferStatus status) {
    switch (status) {
        case CommandBufferStatus::NotEnqueued: return "NOT_ENQUEUED";
        case CommandBufferStatus::Enqueued: return "ENQUEUED";
        case CommandBufferStatus::Committed: return "COMMITTED";
        case CommandBufferStatus::Scheduled: return "SCHEDULED";
        case CommandBufferStatus::Completed: return "COMPLETED";
        case CommandBufferStatus::Error: return "ERROR";
    }
    return "UNKNOWN";
}

void addWrite(const CommandBuffer& cb, const BufferSlice& slice, size_t bytes, const char* kind) {
    if (!slice.buffer || bytes == 0) return;
    auto self = cb.weak_from_this();
    if (self.expired()) return;  // a command buffer not owned by a shared_ptr cannot be tracked
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    maybePruneLocked(r);
    WriteRecord w{slice.buffer, slice.offset, slice.offset + bytes, self, cb.id(), kind};
    r.writes.emplace(slice.buffer.get(), std::move(w));
}

}  // namespace

void noteKernelWrite(const CommandBuffer& cb, const Image* image) {
    if (!image) return;
    addWrite(cb, image->storage(0), image->storageElements() * image->bytesPerElement(), "image");
}

void noteKernelWrite(const CommandBuffer& cb, const State* state) {
    if (!state) return;
    for (size_t i = 0; i < state->resourceCount(); ++i)
        addWrite(cb, state->resourceAtIndex(i), state->bufferSizeAtIndex(i), "state");
}

void noteTemporaryStorage(const CommandBuffer& cb, const std::shared_ptr<Buffer>& buffer, const char* kind) {
    if (!buffer) return;
    auto self = cb.weak_from_this();
    if (self.expired()) return;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    maybePruneLocked(r);
    r.temporaries[buffer.get()] = TemporaryRecord{buffer, self, kind};
}

void checkHostRead(const BufferSlice& slice, size_t bytes, const char* what) {
    if (!slice.buffer) return;
    std::shared_ptr<const CommandBuffer> pending, gone;
    const char* kind = "image";
    const char* temporaryKind = nullptr;
    bool temporaryOwnerGone = false;
    Registry& r = registry();
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        auto range = r.writes.equal_range(slice.buffer.get());
        for (auto it = range.first; it != range.second;) {
            const WriteRecord& w = it->second;
            if (w.buffer.lock() != slice.buffer || writeIsOver(w)) {
                it = r.writes.erase(it);
                continue;
            }
            if (w.commandBufferId != callbackCommandBuffer && w.begin < slice.offset + bytes && slice.offset < w.end) {
                pending = w.commandBuffer.lock();
                kind = w.kind;
                if (pending) break;
            }
            ++it;
        }
        auto t = r.temporaries.find(slice.buffer.get());
        if (!pending && t != r.temporaries.end()) {
            if (t->second.buffer.lock() != slice.buffer) {
                r.temporaries.erase(t);
            } else {
                auto owner = t->second.commandBuffer.lock();
                if (!owner) {
                    temporaryKind = t->second.kind;
                    temporaryOwnerGone = true;
                } else if (finished(owner->status())) {
                    temporaryKind = t->second.kind;
                    gone = owner;
                }
            }
        }
    }
    // Messages are built outside the registry's lock (status() takes the buffer's own lock).
    if (pending) {
        const CommandBufferStatus status = pending->status();
        if (status == CommandBufferStatus::NotEnqueued)
            throw CommandBufferError(detail::concat(
                what, ": a kernel encoded into ", describe(*pending), " writes this ", kind,
                ", and that command buffer has not been committed (status NOT_ENQUEUED); commit() it and call "
                "wait_until_completed() before reading the ", kind, " on the host"));
        throw CommandBufferError(detail::concat(
            what, ": a kernel encoded into ", describe(*pending), " writes this ", kind,
            ", and that command buffer has not completed (status ", statusName(status),
            "); call its wait_until_completed() (or read in its completed handler) before reading the ", kind,
            " on the host, as Metal requires"));
    }
    if (temporaryKind) {
        const std::string owner = temporaryOwnerGone ? std::string("its command buffer, which no longer exists")
                                                     : describe(*gone) + ", which has completed";
        throwValueError(what, ": this ", temporaryKind, " lived on ", owner, "; a ", temporaryKind,
                        " exists only until its command buffer completes (MPS releases its storage then). Read "
                        "it in a host callback encoded into that command buffer (encode_host_callback), or "
                        "use a persistent object (e.g. ImageAllocator.persistent() for kernel results)");
    }
}

void checkHostRead(const Image& image, const char* what) {
    checkHostRead(image.storage(0), image.storageElements() * image.bytesPerElement(), what);
}

HostCallbackScope::HostCallbackScope(uint64_t commandBufferId) : previous_(callbackCommandBuffer) {
    callbackCommandBuffer = commandBufferId;
}

HostCallbackScope::~HostCallbackScope() { callbackCommandBuffer = previous_; }

}  // namespace mpsgrad::host_access
