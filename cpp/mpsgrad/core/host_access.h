// Host access rules of the asynchronous model (docs/user_guide.md, "Reading results").
//
// Metal makes a host read of a resource that a command buffer has not finished writing return
// whatever the GPU has produced so far, and a temporary image or state does not exist any more
// once its command buffer completed. The CPU backend would silently return stale data in both
// cases, so code that passes here would fail on a Mac. This registry keeps, per storage buffer,
// the byte ranges that encoded kernels write and the command buffer that writes them, plus the
// storage of temporary images and states; the host read paths (readBytes, to_numpy, DLPack,
// state views) ask it before reading and raise instead of returning stale data.
//
// Kept out of image.h / state.h on purpose: only the files that note writes or check reads
// include it. Internal to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace mpsgrad {

class CommandBuffer;
class Image;
class State;

namespace host_access {

// A kernel encoded into `cb` writes the storage of `image` (all of it: the rule is per image,
// not per pixel) or of every buffer of `state`. Null pointers are ignored.
void noteKernelWrite(const CommandBuffer& cb, const Image* image);
void noteKernelWrite(const CommandBuffer& cb, const State* state);
template <class T>
void noteKernelWrites(const CommandBuffer& cb, const std::vector<std::shared_ptr<T>>& objects) {
    for (const auto& object : objects) noteKernelWrite(cb, object.get());
}

// `buffer` is the storage of a temporary image or state of `cb`: the host may read it only
// until `cb` completes. `kind` names the object in messages ("temporary image").
void noteTemporaryStorage(const CommandBuffer& cb, const std::shared_ptr<Buffer>& buffer, const char* kind);

// Throws CommandBufferError when a command buffer that has not completed writes any of the
// `bytes` bytes at `slice`, and ValueError when `slice` is the storage of a temporary object
// whose command buffer completed. `what` names the read in the message (e.g. "to_numpy").
void checkHostRead(const BufferSlice& slice, size_t bytes, const char* what);
// The same for all the storage of `image` (every image of a multi-image Image).
void checkHostRead(const Image& image, const char* what);

// Host points (CommandBuffer::encodeHostCallback): while one is alive on a thread, reads on that
// thread ignore the writes of command buffer `commandBufferId`. A host callback runs after the
// work encoded before it has completed and before the work encoded after it starts, so none of
// that buffer's writes can race with it (what it reads is the storage as of that point).
class HostCallbackScope {
public:
    explicit HostCallbackScope(uint64_t commandBufferId);
    ~HostCallbackScope();
    HostCallbackScope(const HostCallbackScope&) = delete;
    HostCallbackScope& operator=(const HostCallbackScope&) = delete;

private:
    uint64_t previous_;
};

}  // namespace host_access
}  // namespace mpsgrad
