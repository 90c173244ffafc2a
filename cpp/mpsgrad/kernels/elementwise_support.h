// Helpers shared by the element-wise families (neuron, arithmetic, softmax): edge modes, the
// geometry of a clipped dispatch, read-region validation, forward snapshots, and the identity of
// an image's storage (so a gradient kernel can tell the forward input from the forward output).
// Internal to cpp/mpsgrad/kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/kernel.h"

namespace mpsgrad::elementwise {

// EdgeModeCode of `mode`; the element-wise kernels support ImageEdgeMode.ZERO and CLAMP.
inline int32_t edgeModeCode(ImageEdgeMode mode, const char* what) {
    if (mode == ImageEdgeMode::Zero) return kEdgeZero;
    if (mode == ImageEdgeMode::Clamp) return kEdgeClamp;
    throwValueError(what, ": element-wise kernels support ImageEdgeMode.ZERO and CLAMP, got ",
                    static_cast<uint32_t>(mode));
}

// How far the clipped origin moved from the requested clip origin along an axis (> 0 only when
// clipRect.origin was negative): every read offset moves by the same amount, so destination pixel
// clipRect.origin + p keeps reading offset + p.
inline int64_t clipShift(int64_t requestedOrigin, int64_t clippedOrigin) {
    return clippedOrigin > requestedOrigin ? clippedOrigin - requestedOrigin : 0;
}

// ValueError unless columns [x, x + width) and rows [y, y + height) lie inside `image`.
inline void checkReadRegion(const Image& image, int64_t x, int64_t y, int64_t width, int64_t height,
                            const char* what, const char* offsetName, const char* kernelName) {
    if (x < 0 || y < 0 || x + width > image.width() || y + height > image.height())
        throwValueError(what, ": is ", image.width(), "x", image.height(), " but ", kernelName, " reads columns [",
                        x, ", ", x + width, ") and rows [", y, ", ", y + height, ") of it (", offsetName, " ", x,
                        ", ", y, ")");
}

// The identity of an image's storage (buffer, byte offset of its first image, first channel).
// Weak: it never keeps memory alive, and a released buffer matches nothing.
struct StorageIdentity {
    std::weak_ptr<Buffer> buffer;
    size_t offset = 0;
    int64_t channelBase = 0;
    bool recorded = false;

    static StorageIdentity of(const Image& image, int64_t imageIndex) {
        StorageIdentity id;
        BufferSlice slice = image.storage(imageIndex);
        id.buffer = slice.buffer;
        id.offset = slice.offset;
        id.channelBase = image.layout(0, image.featureChannels()).channelOffset;
        id.recorded = true;
        return id;
    }
    bool matches(const Image& image, int64_t imageIndex) const {
        if (!recorded) return false;
        auto b = buffer.lock();
        if (!b) return false;
        BufferSlice slice = image.storage(imageIndex);
        return slice.buffer == b && slice.offset == offset &&
               image.layout(0, image.featureChannels()).channelOffset == channelBase;
    }
};

// Fills the snapshot of a unary element-wise forward kernel (no window, stride 1) that wrote
// `channels` channels over `first`'s clip for `images` images, reading the source from `offset`
// (already moved by the clip shift).
inline void recordUnaryForward(ForwardSnapshot& s, const CNNKernel& k, const UnaryDispatch& first, Offset offset,
                               int64_t channels, int64_t images) {
    s.offset = offset;
    s.clipRect = first.clip;
    s.edgeMode = k.edgeMode;
    s.kernelWidth = s.kernelHeight = 1;
    s.strideX = s.strideY = 1;
    s.dilationX = s.dilationY = 1;
    s.sourceWidth = first.source->width();
    s.sourceHeight = first.source->height();
    s.sourceFeatureChannels = first.source->featureChannels();
    s.destinationWidth = first.destination->width();
    s.destinationHeight = first.destination->height();
    s.destinationFeatureChannels = first.destination->featureChannels();
    s.sourceFeatureChannelOffset = first.sourceChannelOffset;
    s.sourceFeatureChannelCount = channels;
    s.destinationFeatureChannelOffset = k.destinationFeatureChannelOffset;
    s.batchSize = images;
    s.paddingMethod = k.padding ? k.padding->paddingMethod() : 0;
    s.encoded = true;
}

// Splits [0, count) into runs of consecutive items that one batched dispatch can process:
// item i joins the run of item i - 1 when canJoin(i) (images stored back to back, same geometry).
inline std::vector<std::pair<size_t, size_t>> batchRuns(size_t count, const std::function<bool(size_t)>& canJoin) {
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t i = 0; i < count;) {
        size_t j = i + 1;
        while (j < count && canJoin(j)) ++j;
        runs.emplace_back(i, j);
        i = j;
    }
    return runs;
}

// True when `a` is a single image directly followed in memory by the single image `b`.
inline bool singleImagesBackToBack(const Image& a, const Image& b) {
    return a.numberOfImages() == 1 && b.numberOfImages() == 1 && a.isFollowedBy(b);
}

inline bool sameRegion(const Region& a, const Region& b) {
    return a.origin.x == b.origin.x && a.origin.y == b.origin.y && a.size.width == b.size.width &&
           a.size.height == b.size.height;
}

}  // namespace mpsgrad::elementwise
