#include "kernels/upsampling.h"

#include <algorithm>
#include <limits>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {
namespace {

using elementwise::clipShift;

constexpr int64_t kMaxScale = int64_t(1) << 16;

void checkScale(int64_t value, const char* name) {
    if (value < 1 || value > kMaxScale)
        throwValueError(name, ": must be an integer in [1, ", kMaxScale, "], got ", value);
}

int32_t coordinateCode(bool alignCorners, UpsamplingCoordinateMode mode) {
    if (alignCorners) return kUpsamplingAlignCorners;
    if (mode == UpsamplingCoordinateMode::HalfPixel) return kUpsamplingHalfPixel;
    if (mode == UpsamplingCoordinateMode::Asymmetric) return kUpsamplingAsymmetric;
    throwValueError("coordinate_mode: expected UpsamplingCoordinateMode.HALF_PIXEL or ASYMMETRIC, got ",
                    static_cast<int32_t>(mode));
}

// Input extent times scale must stay below 2^31 with the input extent (the sampling arithmetic).
void checkInputExtent(int64_t input, int64_t scale, const char* axis) {
    if (input * input * scale >= (int64_t(1) << 31))
        throwValueError("source_image: a ", axis, " of ", input, " pixels is too large to upsample by ", scale);
}

const char* forwardName(bool bilinear) { return bilinear ? "CNNUpsamplingBilinear" : "CNNUpsamplingNearest"; }

}  // namespace

// ---- forward ---------------------------------------------------------------------------------------

CNNUpsampling::CNNUpsampling(const Device& device, bool bilinear, int64_t scaleX, int64_t scaleY, bool alignCorners)
    : CNNKernel(device), bilinear_(bilinear), scaleX_(scaleX), scaleY_(scaleY), alignCorners_(alignCorners) {
    checkScale(scaleX, "integer_scale_factor_x");
    checkScale(scaleY, "integer_scale_factor_y");
}

void CNNUpsampling::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    // The output is the whole source scaled up; the input starts at the source's origin.
    const Image& source = *sourceImages.front();
    descriptor.width = source.width() * scaleX_;
    descriptor.height = source.height() * scaleY_;
    offset.x = 0;
    offset.y = 0;
}

StatePtr CNNUpsampling::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNUpsamplingGradientState>(device_, bilinear_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNUpsampling::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                               const StateBatch& states) {
    const int32_t coordinates = bilinear_ ? coordinateCode(alignCorners_, coordinateMode) : kUpsamplingHalfPixel;
    std::vector<UpsamplingParams> params;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNUpsamplingGradientState*>(states[i].get()))
            throwTypeError("destination_state: ", className(), " writes the CNNUpsamplingGradientState made by its "
                           "result_state, got a ", states[i]->className());
        const int64_t N = d.sourceChannels;
        checkDestinationChannels(*d.destination, N);
        const Image& src = *d.source;
        if (offset.x < 0 || offset.y < 0 || offset.x >= src.width() || offset.y >= src.height())
            throwValueError("offset: (", offset.x, ", ", offset.y, ") is not a pixel of the ", src.width(), "x",
                            src.height(), " source image");
        const int64_t inW = src.width() - offset.x, inH = src.height() - offset.y;
        checkInputExtent(inW, scaleX_, "width");
        checkInputExtent(inH, scaleY_, "height");
        const int64_t ox = clipShift(clipRect.origin.x, d.clip.origin.x);
        const int64_t oy = clipShift(clipRect.origin.y, d.clip.origin.y);
        const int64_t width = std::min<int64_t>(int64_t(d.clip.size.width), inW * scaleX_ - ox);
        const int64_t height = std::min<int64_t>(int64_t(d.clip.size.height), inH * scaleY_ - oy);
        if (width < 1 || height < 1)
            throwValueError("clip_rect: starts beyond the ", inW * scaleX_, "x", inH * scaleY_, " upsampled image");
        UpsamplingParams p{};
        p.source = src.layout(d.sourceChannelOffset, N);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, N);
        p.batch = int32_t(d.imageCount);
        p.mode = bilinear_ ? kUpsamplingBilinear : kUpsamplingNearest;
        p.coordinateMode = coordinates;
        p.scaleX = int32_t(scaleX_);
        p.scaleY = int32_t(scaleY_);
        p.sourceX = int32_t(offset.x);
        p.sourceY = int32_t(offset.y);
        p.inputWidth = int32_t(inW);
        p.inputHeight = int32_t(inH);
        p.outputX = checked::toInt32(ox, "clip_rect.origin.x");
        p.outputY = checked::toInt32(oy, "clip_rect.origin.y");
        p.clipX = int32_t(d.clip.origin.x);
        p.clipY = int32_t(d.clip.origin.y);
        p.clipWidth = int32_t(width);
        p.clipHeight = int32_t(height);
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNUpsamplingGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        const UpsamplingParams& p = params[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, Offset{p.sourceX, p.sourceY, offset.z},
                                        d.sourceChannels, d.imageCount);
        state.snapshot.clipRect.size.width = uint64_t(p.clipWidth);
        state.snapshot.clipRect.size.height = uint64_t(p.clipHeight);
        state.bilinear = bilinear_;
        state.alignCorners = alignCorners_;
        state.coordinateMode = coordinateMode;
        state.scaleFactorX = scaleX_;
        state.scaleFactorY = scaleY_;
        state.inputWidth = p.inputWidth;
        state.inputHeight = p.inputHeight;
        state.gradientOrigin = Offset{p.clipX - p.outputX, p.clipY - p.outputY, 0};
    }
    Backend& backend = device_.backend();
    for (auto [begin, end] : elementwise::unaryBatchRuns(dispatches)) {
        UpsamplingParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const UnaryDispatch& d = dispatches[begin];
        backend.upsamplingForward(cb, p, d.source->storage(d.sourceImageIndex),
                                  d.destination->storage(d.destinationImageIndex));
    }
}

// ---- gradient --------------------------------------------------------------------------------------

CNNUpsamplingGradient::CNNUpsamplingGradient(const Device& device, bool bilinear, int64_t scaleX, int64_t scaleY)
    : CNNGradientKernel(device), bilinear_(bilinear), scaleX_(scaleX), scaleY_(scaleY) {
    checkScale(scaleX, "integer_scale_factor_x");
    checkScale(scaleY, "integer_scale_factor_y");
}

void CNNUpsamplingGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNUpsamplingGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: ", className(), " needs the CNNUpsamplingGradientState made by ",
                       forwardName(bilinear_), ".result_state, got a ", state.className());
    if (s->bilinear != bilinear_)
        throwTypeError("gradient_state: ", className(), " needs the state of a ", forwardName(bilinear_),
                       ", got the state of a ", forwardName(s->bilinear));
    if (s->snapshot.encoded && (s->scaleFactorX != scaleX_ || s->scaleFactorY != scaleY_))
        throwValueError("gradient_state: the forward ", forwardName(bilinear_), " scaled by ", s->scaleFactorX, ", ",
                        s->scaleFactorY, " but this ", className(), " by ", scaleX_, ", ", scaleY_);
}

ImageDescriptor CNNUpsamplingGradient::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                                  const StateBatch& sourceStates) {
    ImageDescriptor descriptor = CNNGradientKernel::destinationImageDescriptor(sourceImages, sourceStates);
    const Offset origin = static_cast<const CNNUpsamplingGradientState&>(*sourceStates.front()).gradientOrigin;
    primaryOffset = Offset{origin.x, origin.y, primaryOffset.z};  // z: the images the forward wrote
    return descriptor;
}

void CNNUpsamplingGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    // The input starts at the forward offset in X (and so in dX); dX covers the whole forward source.
    secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
    clipRect = rectNoClip();
    primaryEdgeMode = secondaryEdgeMode = ImageEdgeMode::Zero;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNUpsamplingGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                               const ImageBatch& sourceImages, const StateBatch& states,
                                               const ImageBatch& destinations) {
    std::vector<UpsamplingGradientParams> params;
    std::vector<Region> clips;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNUpsamplingGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward ", forwardName(bilinear_),
                            " read a ", s.sourceWidth, "x", s.sourceHeight, " source; ", className(),
                            " needs the forward source X (or an image of its size)");
        const int64_t N = s.sourceFeatureChannelCount;
        checkSourceGradientChannels(g, N);
        checkDestinationChannels(dst, N, "destination_gradient");
        const Region clip = nonEmptyClip(clipRect, dst, "destination_gradient");
        const int64_t gz = primaryOffset.z;
        if (gz < 0 || gz >= g.numberOfImages())
            throwValueError("primary_offset: z selects an image the source_gradient does not have");
        UpsamplingGradientParams p{};
        p.gradient = g.layout(primarySourceFeatureChannelOffset, N);
        p.destination = dst.layout(destinationFeatureChannelOffset, N);
        p.batch = int32_t(std::min<int64_t>(int64_t(clip.size.depth), g.numberOfImages() - gz));
        p.mode = bilinear_ ? kUpsamplingBilinear : kUpsamplingNearest;
        p.coordinateMode = bilinear_ ? coordinateCode(state.alignCorners, state.coordinateMode) : kUpsamplingHalfPixel;
        p.scaleX = int32_t(scaleX_);
        p.scaleY = int32_t(scaleY_);
        p.gradientX = checked::toInt32(primaryOffset.x, "primary_offset.x");
        p.gradientY = checked::toInt32(primaryOffset.y, "primary_offset.y");
        p.inputWidth = int32_t(state.inputWidth);
        p.inputHeight = int32_t(state.inputHeight);
        p.inputX = checked::toInt32(clip.origin.x - secondaryOffset.x, "secondary_offset.x");
        p.inputY = checked::toInt32(clip.origin.y - secondaryOffset.y, "secondary_offset.y");
        elementwise::setClip(p, clip);
        params.push_back(p);
        clips.push_back(clip);
    }
    Backend& backend = device_.backend();
    auto runs = elementwise::batchRuns(params.size(), [&](size_t j) {
        const auto& a = params[j - 1];
        const auto& b = params[j];
        return elementwise::singleImagesBackToBack(*sourceGradients[j - 1], *sourceGradients[j]) &&
               elementwise::singleImagesBackToBack(*destinations[j - 1], *destinations[j]) &&
               elementwise::sameRegion(clips[j - 1], clips[j]) && a.inputWidth == b.inputWidth &&
               a.inputHeight == b.inputHeight && a.coordinateMode == b.coordinateMode &&
               a.destination.channels == b.destination.channels;
    });
    for (auto [begin, end] : runs) {
        UpsamplingGradientParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        backend.upsamplingGradient(cb, p, sourceGradients[begin]->storage(primaryOffset.z),
                                   destinations[begin]->storage(clips[begin].origin.z));
    }
}

}  // namespace mpsgrad
