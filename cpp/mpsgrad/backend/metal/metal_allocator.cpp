#include "backend/metal/metal_allocator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/metal/metal_backend.h"

namespace mpsgrad::metal_backend {

namespace {
constexpr size_t kMinCapacity = 256;
constexpr size_t kLargeStep = size_t(1) << 20;
}  // namespace

size_t BufferPool::bucketCapacity(size_t bytes) {
    if (bytes <= kMinCapacity) return kMinCapacity;
    if (bytes > kLargeStep) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
    size_t capacity = kMinCapacity;
    while (capacity < bytes) capacity *= 2;
    return capacity;
}

size_t BufferPool::capacityFor(size_t bytes) const {
    return exactCapacity_ ? std::max<size_t>(16, (bytes + 15) / 16 * 16) : bucketCapacity(bytes);
}

BufferPool::BufferPool(Ref<MTL::Device> device, size_t maxPooledBytes, bool exactCapacity)
    : device_(std::move(device)), maxPooledBytes_(maxPooledBytes), exactCapacity_(exactCapacity) {}

std::shared_ptr<Buffer> BufferPool::allocate(size_t bytes, BufferFill fill) {
    const size_t capacity = capacityFor(bytes);
    Ref<MTL::Buffer> buffer = takePooled(capacity);
    if (!buffer) buffer = create(capacity);
    auto result = std::make_shared<MetalBuffer>(shared_from_this(), buffer, capacity, bytes);
    // Backend buffers are zero at allocation. A pooled buffer holds old data and Metal does not
    // promise zeroed new buffers, so clear the requested bytes on the host (shared storage: no
    // GPU work, and the buffer is not in use by any command buffer once it reached the pool).
    if (fill == BufferFill::Zero) std::memset(result->contents(), 0, bytes);
    else prepareUnspecifiedBuffer(result->contents(), bytes);
    return result;
}

Ref<MTL::Buffer> BufferPool::takePooled(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto bucket = free_.find(capacity);
    if (bucket == free_.end() || bucket->second.empty()) return {};
    Ref<MTL::Buffer> buffer = bucket->second.back();
    bucket->second.pop_back();
    stats_.pooledBuffers -= 1;
    stats_.pooledBytes -= capacity;
    stats_.reused += 1;
    return buffer;
}

Ref<MTL::Buffer> BufferPool::create(size_t capacity) {
    auto buffer = adopt(device_->newBuffer(capacity, MTL::ResourceStorageModeShared));
    if (!buffer) {
        // Pooled memory counts against the device's budget: give it back and try once more.
        trim();
        buffer = adopt(device_->newBuffer(capacity, MTL::ResourceStorageModeShared));
    }
    if (!buffer) throw MetalError("Metal could not allocate a buffer of " + std::to_string(capacity) + " bytes");
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.created += 1;
    return buffer;
}

void BufferPool::recycle(Ref<MTL::Buffer> buffer, size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.pooledBytes + capacity > maxPooledBytes_) return;  // released with `buffer`
    free_[capacity].push_back(std::move(buffer));
    stats_.pooledBuffers += 1;
    stats_.pooledBytes += capacity;
}

void BufferPool::trim() {
    std::map<size_t, std::vector<Ref<MTL::Buffer>>> released;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        released.swap(free_);
        stats_.pooledBuffers = 0;
        stats_.pooledBytes = 0;
    }
    // `released` goes out of scope here, outside the lock, releasing the MTLBuffers.
}

BufferPool::Stats BufferPool::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

MetalBuffer::MetalBuffer(std::shared_ptr<BufferPool> pool, Ref<MTL::Buffer> buffer, size_t capacity,
                         size_t length)
    : pool_(std::move(pool)),
      buffer_(std::move(buffer)),
      capacity_(capacity),
      length_(length),
      contents_(buffer_->contents()) {}

// Command buffers retain the Buffers they use until they complete (CommandBuffer::retain), so the
// last reference only goes once no GPU work reads or writes this memory.
MetalBuffer::~MetalBuffer() { pool_->recycle(std::move(buffer_), capacity_); }

}  // namespace mpsgrad::metal_backend
