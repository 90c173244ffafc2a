// FormatAllocator and IntermediatePool (graph_storage.h).
#include "graph/graph_storage.h"

#include <cstring>
#include <stdexcept>

#include "core/checked.h"
#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/kernel.h"

namespace mpsgrad {

ImageDescriptor FormatAllocator::withFormat(const ImageDescriptor& descriptor) const {
    ImageDescriptor d = descriptor;
    d.featureChannelFormat = format_;
    return d;
}

ImagePtr FormatAllocator::imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                const Kernel* kernel) {
    return inner_->imageForCommandBuffer(cb, withFormat(descriptor), kernel);
}

ImageBatch FormatAllocator::imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                       const Kernel* kernel, size_t count) {
    return inner_->imageBatchForCommandBuffer(cb, withFormat(descriptor), kernel, count);
}

namespace {
// Bytes of one image of the descriptor in the NHWC4 layout (every image of numberOfImages).
size_t imageBytes(const ImageDescriptor& d) {
    uint64_t elements = checked::product({(d.featureChannels + 3) / 4 * 4, d.width, d.height, d.numberOfImages},
                                         "image_descriptor");
    return size_t(checked::mul(elements, uint64_t(d.bytesPerElement()), "image_descriptor"));
}


// True when `kernel` writes every float of a destination of `d` (the condition under which the
// kernels' own returning encodes skip the zero fill, core/kernel.cpp): a family that writes every
// destination pixel, no padding lanes, no channel offset, no clip rectangle.
bool overwritesCompletely(const Kernel* kernel, const ImageDescriptor& d) {
    auto whole = [&](bool everyPixel, int64_t channelOffset, const Region& clip) {
        Region none = rectNoClip();
        return everyPixel && d.featureChannels % 4 == 0 && channelOffset == 0 && clip.origin.x == 0 &&
               clip.origin.y == 0 && clip.origin.z == 0 && clip.size.width == none.size.width &&
               clip.size.height == none.size.height && clip.size.depth == none.size.depth;
    };
    if (auto* k = dynamic_cast<const CNNKernel*>(kernel))
        return whole(k->writesEveryDestinationPixel(), k->destinationFeatureChannelOffset, k->clipRect);
    if (auto* k = dynamic_cast<const CNNBinaryKernel*>(kernel))
        return whole(k->writesEveryDestinationPixel(), k->destinationFeatureChannelOffset, k->clipRect);
    return false;
}
}  // namespace

namespace {
bool sameDescriptor(const ImageDescriptor& a, const ImageDescriptor& b) {
    return a.featureChannelFormat == b.featureChannelFormat && a.width == b.width && a.height == b.height &&
           a.featureChannels == b.featureChannels && a.numberOfImages == b.numberOfImages && a.usage == b.usage;
}

// True when `images` is a batch of `count` images of `descriptor` that nobody but the pool holds.
bool reusable(const ImageBatch& images, const ImageDescriptor& descriptor, size_t count) {
    if (images.size() != count) return false;
    for (const auto& image : images)
        if (image.use_count() != 1 || !sameDescriptor(image->descriptor(), descriptor)) return false;
    return true;
}
}  // namespace

void IntermediatePool::beginEncode(GraphEncodeStatistics& statistics) {
    abandonEncode();
    statistics_ = &statistics;
}

void IntermediatePool::abandonEncode() {
    used_.clear();
    released_.clear();
    owned_.clear();
    statistics_ = nullptr;
}

void IntermediatePool::endEncode(CommandBuffer& cb) {
    auto entries = std::make_shared<std::vector<Entry>>(std::move(used_));
    std::weak_ptr<IntermediatePool> pool = shared_from_this();
    // Once the work has run (or failed), nothing reads these buffers any more.
    cb.addInternalCompletion([pool, entries] {
        auto self = pool.lock();
        if (!self) return;
        std::lock_guard<std::mutex> lock(self->idleMutex_);
        for (auto& entry : *entries) {
            size_t length = entry.buffer->length();
            self->idle_.emplace(length, std::move(entry));
        }
    });
    abandonEncode();
}

bool IntermediatePool::takeFrom(Entries& entries, size_t bytes, Entry& taken) {
    auto found = entries.lower_bound(bytes);
    if (found == entries.end()) return false;
    taken = std::move(found->second);
    entries.erase(found);
    return true;
}

IntermediatePool::Entry& IntermediatePool::used(const Buffer* buffer) {
    for (auto& entry : used_)
        if (entry.buffer.get() == buffer) return entry;
    throw std::logic_error("IntermediatePool: a released buffer is not among this encode's buffers");
}

IntermediatePool::Entry& IntermediatePool::take(CommandBuffer& cb, size_t bytes, bool overwritten) {
    Entry entry;
    // A buffer released during this encode still has reads encoded before this write, so only a
    // destination the kernel overwrites completely may have it.
    if (overwritten && takeFrom(released_, bytes, entry)) {
        ++statistics_->reusedBuffers;
        return used(entry.buffer.get());
    }
    bool idle;
    {
        std::lock_guard<std::mutex> lock(idleMutex_);
        idle = takeFrom(idle_, bytes, entry);
    }
    if (idle) {
        // The work that used it has completed: its contents can be cleared now.
        if (!overwritten) std::memset(entry.buffer->contents(), 0, bytes);
        ++statistics_->reusedBuffers;
    } else {
        entry.buffer =
            cb.device().backend().newBuffer(bytes, overwritten ? BufferFill::Unspecified : BufferFill::Zero);
        ++statistics_->intermediateBuffers;
    }
    owned_.insert(entry.buffer.get());
    used_.push_back(std::move(entry));
    return used_.back();
}

ImageBatch IntermediatePool::imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                        const Kernel* kernel, size_t count) {
    cb.checkEncodable();
    descriptor.validate("image_descriptor");
    if (count == 0) throwValueError("count: an image batch needs at least one image");
    if (!statistics_) throw std::logic_error("IntermediatePool: allocation outside an encode");
    size_t each = imageBytes(descriptor);
    Entry& entry = take(cb, size_t(checked::mul(uint64_t(each), uint64_t(count), "count")),
                        overwritesCompletely(kernel, descriptor));
    if (reusable(entry.images, descriptor, count)) {
        for (const auto& image : entry.images) image->label.clear();
        return entry.images;
    }
    ImageBatch batch;
    batch.reserve(count);
    for (size_t i = 0; i < count; ++i)
        batch.push_back(Image::wrap(cb.device(), descriptor, BufferSlice{entry.buffer, i * each},
                                    (descriptor.featureChannels + 3) / 4 * 4));
    entry.images = batch;
    return batch;
}

ImagePtr IntermediatePool::imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                 const Kernel* kernel) {
    return imageBatchForCommandBuffer(cb, descriptor, kernel, 1).front();
}

void IntermediatePool::release(std::shared_ptr<Buffer> buffer) {
    if (!buffer || !owns(buffer.get())) return;
    size_t length = buffer->length();
    released_.emplace(length, Entry{std::move(buffer), {}});
}

}  // namespace mpsgrad
