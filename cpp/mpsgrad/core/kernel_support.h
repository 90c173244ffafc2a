// Validation and allocation helpers shared by the kernel base classes (core/kernel.cpp) and the
// multiary kernel (core/multiary.cpp). Internal to cpp/mpsgrad/core.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "core/errors.h"
#include "core/image.h"
#include "core/kernel.h"
#include "core/padding.h"

namespace mpsgrad::kernel_support {

template <class T>
inline void requireObject(const std::shared_ptr<T>& object, const char* what, const char* expected) {
    if (!object) throwTypeError(what, ": expected ", expected, ", got None");
}

inline void requireSameLength(size_t a, size_t b, const char* whatA, const char* whatB) {
    if (a != b) throwValueError(whatB, ": has ", b, " entries but ", whatA, " has ", a);
}

template <class T>
inline void noteReadsOfUnique(const std::vector<std::shared_ptr<T>>& objects) {
    std::set<T*> seen;
    for (const auto& o : objects)
        if (o && seen.insert(o.get()).second) o->noteRead();
}

inline int64_t availableChannels(const Image& image, int64_t offset, uint64_t maxCount, const char* offsetName,
                          const char* imageName) {
    checkChannelOffset(offset, offsetName);
    if (offset >= image.featureChannels())
        throwValueError(offsetName, ": ", offset, " is not below the ", imageName, "'s ", image.featureChannels(),
                        " feature channels");
    return int64_t(std::min<uint64_t>(maxCount, uint64_t(image.featureChannels() - offset)));
}

inline std::shared_ptr<ImageAllocator> allocatorOr(const std::shared_ptr<ImageAllocator>& allocator) {
    return allocator ? allocator : ImageAllocator::temporaryAllocator();
}

// True when a kernel that writes every destination pixel inside its clip rect writes every
// float of a destination of `d`: no padding lanes, no channel offset, a clip covering it all.
inline bool writesWholeDestination(const ImageDescriptor& d, int64_t destinationChannelOffset, const Region& clip) {
    auto covers = [](int64_t origin, uint64_t size, int64_t extent) {
        return origin <= 0 && (size == kNoClipSize || int64_t(size) + origin >= extent);
    };
    return d.featureChannels % 4 == 0 && destinationChannelOffset == 0 && covers(clip.origin.x, clip.size.width, d.width) &&
           covers(clip.origin.y, clip.size.height, d.height) && covers(clip.origin.z, clip.size.depth, d.numberOfImages);
}

// The returning encode forms allocate one single-image destination per batch entry (spec §1.2),
// so an input holding several images would silently lose all but the first: every returning form
// (forward, binary, multiary, gradient, and the kernels that allocate through
// allocateDestinationImages) refuses it here. `image` may be null (checked by the caller).
inline void requireSingleImage(const ImagePtr& image, const char* what) {
    if (image && image->numberOfImages() != 1)
        throwValueError(what, ": the returning encode forms need images with number_of_images == 1, got ",
                        image->numberOfImages(), " (use batch_representation() or pass the destination)");
}

inline void requireSingleImages(const ImageBatch& images, const char* what) {
    for (const auto& image : images) requireSingleImage(image, what);
}

// The destinations of a returning encode. Storage the kernel overwrites completely skips the
// zero fill (a whole extra pass over memory), but only from the built-in allocators: a custom
// allocator may create other images while it runs, and those must keep the zero fill.
inline ImageBatch allocateDestinations(CommandBuffer& cb, const std::shared_ptr<ImageAllocator>& allocator,
                                const ImageDescriptor& descriptor, const Kernel* kernel, size_t count,
                                bool overwritten) {
    auto chosen = allocatorOr(allocator);
    const bool builtIn =
        chosen == ImageAllocator::temporaryAllocator() || chosen == ImageAllocator::persistentAllocator();
    UnspecifiedImageStorageScope scope(overwritten && builtIn);
    return chosen->imageBatchForCommandBuffer(cb, descriptor, kernel, count);
}


// Size and offset along one axis under `method`.
inline void paddedAxis(int64_t sourceSize, int64_t stride, int64_t kernelSize, uint32_t method, padding::Axis axis,
                bool reverse, int64_t& size, int64_t& offset) {
    int style = padding::sizeStyle(method);
    size = reverse ? padding::destinationSizeReverse(sourceSize, stride, kernelSize, style)
                   : padding::destinationSize(sourceSize, stride, kernelSize, style);
    offset = padding::offset(sourceSize, stride, kernelSize, method, axis, reverse);
}

}  // namespace mpsgrad::kernel_support
