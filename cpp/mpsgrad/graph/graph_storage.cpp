// FormatAllocator and IntermediatePool (graph_storage.h).
#include "graph/graph_storage.h"

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

std::shared_ptr<Buffer> IntermediatePool::take(CommandBuffer& cb, size_t bytes, bool overwritten) {
    // Only a destination the kernel overwrites completely may inherit old contents.
    if (overwritten) {
        auto found = free_.lower_bound(bytes);
        if (found != free_.end()) {
            auto buffer = std::move(found->second);
            free_.erase(found);
            ++statistics_.reusedBuffers;
            return buffer;
        }
    }
    auto buffer = cb.device().backend().newBuffer(bytes, overwritten ? BufferFill::Unspecified : BufferFill::Zero);
    owned_.insert(buffer.get());
    ++statistics_.intermediateBuffers;
    return buffer;
}

ImageBatch IntermediatePool::imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                        const Kernel* kernel, size_t count) {
    cb.checkEncodable();
    descriptor.validate("image_descriptor");
    if (count == 0) throwValueError("count: an image batch needs at least one image");
    size_t each = imageBytes(descriptor);
    auto buffer = take(cb, size_t(checked::mul(uint64_t(each), uint64_t(count), "count")),
                       overwritesCompletely(kernel, descriptor));
    ImageBatch batch;
    for (size_t i = 0; i < count; ++i)
        batch.push_back(Image::wrap(cb.device(), descriptor, BufferSlice{buffer, i * each},
                                    (descriptor.featureChannels + 3) / 4 * 4));
    return batch;
}

ImagePtr IntermediatePool::imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                 const Kernel* kernel) {
    return imageBatchForCommandBuffer(cb, descriptor, kernel, 1).front();
}

void IntermediatePool::release(std::shared_ptr<Buffer> buffer) {
    if (!buffer || !owns(buffer.get())) return;
    size_t length = buffer->length();
    free_.emplace(length, std::move(buffer));
}

}  // namespace mpsgrad
