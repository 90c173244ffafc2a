// Helpers shared by the element-wise families (neuron, arithmetic, softmax): edge modes, the
// geometry of a clipped dispatch, read-region validation, forward snapshots, and the identity of
// an image's storage (so a gradient kernel can tell the forward input from the forward output).
// Internal to cpp/mpsgrad/kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/errors.h"
#include "core/float16_shadow.h"
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

// The clip fields every element-wise params struct carries. The structs are shared with the Metal
// shaders, which keeps them plain (no common base), so the fields are set by name.
template <typename Params>
void setClip(Params& p, const Region& clip) {
    p.clipX = checked::toInt32(clip.origin.x, "clip_rect.origin.x");
    p.clipY = checked::toInt32(clip.origin.y, "clip_rect.origin.y");
    p.clipWidth = checked::toInt32(clip.size.width, "clip_rect.size.width");
    p.clipHeight = checked::toInt32(clip.size.height, "clip_rect.size.height");
}

// The geometry of a unary forward dispatch (NeuronForwardParams, SoftmaxParams): the source pixel
// read for the clip origin is `k.offset` moved by the clip shift, so clipping never shifts the data.
template <typename Params>
void setUnaryGeometry(Params& p, const CNNKernel& k, const UnaryDispatch& d, int32_t edge) {
    p.batch = checked::toInt32(d.imageCount, "number of images");
    p.sourceX = checked::toInt32(checked::addSigned(k.offset.x, clipShift(k.clipRect.origin.x, d.clip.origin.x), "offset.x"),
                                 "offset.x");
    p.sourceY = checked::toInt32(checked::addSigned(k.offset.y, clipShift(k.clipRect.origin.y, d.clip.origin.y), "offset.y"),
                                 "offset.y");
    setClip(p, d.clip);
    p.edgeMode = edge;
}

// Where a point-wise gradient kernel (primary G, secondary a forward image, one pixel in per pixel
// out) reads and writes for one batch entry.
struct PointwiseGeometry {
    int64_t gradientX, gradientY;  // G pixel read for the clip origin (primaryOffset + clip shift)
    int64_t sourceX, sourceY;      // secondary pixel read for the clip origin (secondaryOffset + clip shift)
    Region clip;                   // clipRect intersected with the destination
    int32_t batch;                 // images: the clip's depth, capped by what both inputs hold from their z
};

// Resolves k's clipRect against `destination` and validates the reads. `secondaryName` names the
// secondary in its read-region error; nullptr skips that check, as CNNNeuronGradient has never
// bounds-checked its secondary (off-image reads of it follow secondary_edge_mode).
inline PointwiseGeometry resolvePointwiseGeometry(const CNNBinaryKernel& k, const Image& gradient,
                                                  const Image& secondary, const Image& destination,
                                                  const char* secondaryName, const char* kernelName) {
    PointwiseGeometry geo{};
    geo.clip = nonEmptyClip(k.clipRect, destination, "destination_gradient");
    const Region& clip = geo.clip;
    const int64_t shiftX = clipShift(k.clipRect.origin.x, clip.origin.x);
    const int64_t shiftY = clipShift(k.clipRect.origin.y, clip.origin.y);
    geo.gradientX = checked::toInt32(checked::addSigned(k.primaryOffset.x, shiftX, "primary_offset.x"), "primary_offset.x");
    geo.gradientY = checked::toInt32(checked::addSigned(k.primaryOffset.y, shiftY, "primary_offset.y"), "primary_offset.y");
    geo.sourceX = checked::toInt32(checked::addSigned(k.secondaryOffset.x, shiftX, "secondary_offset.x"),
                                   "secondary_offset.x");
    geo.sourceY = checked::toInt32(checked::addSigned(k.secondaryOffset.y, shiftY, "secondary_offset.y"),
                                   "secondary_offset.y");
    checkReadRegion(gradient, geo.gradientX, geo.gradientY, int64_t(clip.size.width), int64_t(clip.size.height),
                    "source_gradient", "primary_offset", kernelName);
    if (secondaryName)
        checkReadRegion(secondary, geo.sourceX, geo.sourceY, int64_t(clip.size.width), int64_t(clip.size.height),
                        secondaryName, "secondary_offset", kernelName);
    const int64_t gz = k.primaryOffset.z, sz = k.secondaryOffset.z;
    if (gz < 0 || gz >= gradient.numberOfImages() || sz < 0 || sz >= secondary.numberOfImages())
        throwValueError("primary_offset / secondary_offset: z selects an image the inputs do not have");
    geo.batch = checked::toInt32(std::min<int64_t>(
        {int64_t(clip.size.depth), gradient.numberOfImages() - gz, secondary.numberOfImages() - sz}), "number of images");
    return geo;
}

// Fills the fields PointwiseGeometry sets in a gradient params struct, all but the secondary's read
// origin, whose field name differs per family (sourceX/Y, outputX/Y).
template <typename Params>
void setGradientGeometry(Params& p, const PointwiseGeometry& geo) {
    p.batch = geo.batch;
    p.gradientX = checked::toInt32(geo.gradientX, "primary_offset.x");
    p.gradientY = checked::toInt32(geo.gradientY, "primary_offset.y");
    setClip(p, geo.clip);
}

// The identity of an image's storage (buffer, byte offset of its first image, first channel).
// Weak: it never keeps memory alive, and a released buffer matches nothing. A float32 shadow of a
// FLOAT16 image has the identity of the image it shadows (core/float16_shadow.h).
struct StorageIdentity {
    std::weak_ptr<Buffer> buffer;
    size_t offset = 0;
    int64_t channelBase = 0;
    bool recorded = false;

    static StorageIdentity of(const Image& image, int64_t imageIndex) {
        StorageIdentity id;
        BufferSlice slice = shadowedStorage(image.storage(imageIndex));
        id.buffer = slice.buffer;
        id.offset = slice.offset;
        id.channelBase = image.storageLayout(0, image.featureChannels()).channelOffset;
        id.recorded = true;
        return id;
    }
    bool matches(const Image& image, int64_t imageIndex) const {
        if (!recorded) return false;
        auto b = buffer.lock();
        if (!b) return false;
        BufferSlice slice = shadowedStorage(image.storage(imageIndex));
        return slice.buffer == b && slice.offset == offset &&
               image.storageLayout(0, image.featureChannels()).channelOffset == channelBase;
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

// True when `a` is a single image directly followed in memory by the single image `b`, both of one
// storage format (kernels that read FLOAT16 natively pass one format per binding to a dispatch).
inline bool singleImagesBackToBack(const Image& a, const Image& b) {
    return a.numberOfImages() == 1 && b.numberOfImages() == 1 && a.isFloat16() == b.isFloat16() &&
           a.isFollowedBy(b);
}

inline bool sameRegion(const Region& a, const Region& b) {
    return a.origin.x == b.origin.x && a.origin.y == b.origin.y && a.size.width == b.size.width &&
           a.size.height == b.size.height;
}

// Runs of unary forward dispatches that one batched dispatch can process: single images stored back
// to back, with the same clip and channel count.
inline std::vector<std::pair<size_t, size_t>> unaryBatchRuns(const std::vector<UnaryDispatch>& dispatches) {
    return batchRuns(dispatches.size(), [&](size_t j) {
        const UnaryDispatch& a = dispatches[j - 1];
        const UnaryDispatch& b = dispatches[j];
        return singleImagesBackToBack(*a.source, *b.source) && singleImagesBackToBack(*a.destination, *b.destination) &&
               sameRegion(a.clip, b.clip) && a.sourceChannels == b.sourceChannels;
    });
}

// True when batch entry j's gradient, secondary and destination images each directly follow entry
// j - 1's (the image half of a gradient kernel's batching test; the geometry half is per family).
inline bool gradientImagesBackToBack(const ImageBatch& gradients, const ImageBatch& secondaries,
                                     const ImageBatch& destinations, size_t j) {
    return singleImagesBackToBack(*gradients[j - 1], *gradients[j]) &&
           singleImagesBackToBack(*secondaries[j - 1], *secondaries[j]) &&
           singleImagesBackToBack(*destinations[j - 1], *destinations[j]);
}

// Records in a unary forward kernel's gradient state what its gradient kernel checks and copies:
// the snapshot of dispatch `d` (read from `p`'s clip-shifted source origin) and the storage of the
// forward input X and output Y, so the gradient can tell which one it was given.
template <typename GradientState, typename Params>
void recordUnaryState(GradientState& state, const CNNKernel& k, const UnaryDispatch& d, const Params& p) {
    recordUnaryForward(state.snapshot, k, d, Offset{p.sourceX, p.sourceY, k.offset.z}, d.sourceChannels,
                       d.imageCount);
    state.forwardSource = StorageIdentity::of(*d.source, d.sourceImageIndex);
    state.forwardDestination = StorageIdentity::of(*d.destination, d.destinationImageIndex);
}

}  // namespace mpsgrad::elementwise
