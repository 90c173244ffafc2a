// Internal to the Metal backend: device memory. Every Buffer is a shared-storage MTLBuffer
// (host-visible, so contents() is the MTLBuffer's own memory on Apple's unified memory).
// Creating MTLBuffers is slow next to a small dispatch, and training loops allocate the same
// sizes every step, so freed buffers go back to a pool bucketed by capacity.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "backend/metal/metal_ref.h"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace mpsgrad::metal_backend {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
public:
    struct Stats {
        size_t created = 0;
        size_t reused = 0;
        size_t pooledBuffers = 0;
        size_t pooledBytes = 0;
    };

    // Keeps at most `maxPooledBytes` of freed buffers; larger frees go back to Metal.
    // `exactCapacity`: size every MTLBuffer to the request (rounded to 16 bytes) instead of its
    // bucket, so that a memory checker (ASan in the Linux emulation) sees a kernel that reads or
    // writes past the end of a binding; reuse then needs the same size.
    BufferPool(Ref<MTL::Device> device, size_t maxPooledBytes, bool exactCapacity = false);

    // A buffer of `bytes` bytes, zero-filled unless `fill` is Unspecified (its MTLBuffer may be
    // larger: the bucket's capacity).
    // MetalError when the device cannot allocate it even after the pool was emptied.
    std::shared_ptr<Buffer> allocate(size_t bytes, BufferFill fill = BufferFill::Zero);
    // Releases every pooled buffer.
    void trim();
    Stats stats() const;

    // The capacity of the bucket serving `bytes`: powers of two up to 1 MiB (at least 256 B),
    // then whole MiB, so a request wastes at most half of a small buffer and 1 MiB of a large one.
    static size_t bucketCapacity(size_t bytes);
    // The capacity this pool allocates for `bytes`.
    size_t capacityFor(size_t bytes) const;

    // Called by a MetalBuffer when its last reference goes: keeps `buffer` for reuse.
    void recycle(Ref<MTL::Buffer> buffer, size_t capacity);

private:
    Ref<MTL::Buffer> takePooled(size_t capacity);
    Ref<MTL::Buffer> create(size_t capacity);

    Ref<MTL::Device> device_;
    size_t maxPooledBytes_;
    bool exactCapacity_;
    mutable std::mutex mutex_;
    std::map<size_t, std::vector<Ref<MTL::Buffer>>> free_;  // by capacity
    Stats stats_;
};

// A Buffer backed by (part of) a pooled MTLBuffer.
class MetalBuffer final : public Buffer {
public:
    MetalBuffer(std::shared_ptr<BufferPool> pool, Ref<MTL::Buffer> buffer, size_t capacity, size_t length);
    ~MetalBuffer() override;

    void* contents() override { return contents_; }
    size_t length() const override { return length_; }
    MTL::Buffer* mtlBuffer() const { return buffer_.get(); }

private:
    std::shared_ptr<BufferPool> pool_;
    Ref<MTL::Buffer> buffer_;
    size_t capacity_;
    size_t length_;
    void* contents_;
};

}  // namespace mpsgrad::metal_backend
