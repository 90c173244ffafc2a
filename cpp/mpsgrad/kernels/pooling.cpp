#include "kernels/pooling.h"

#include <algorithm>
#include <limits>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {
namespace {

using elementwise::clipShift;

// Sizes beyond this are refused: tap positions are computed in 32-bit ints by the backends.
constexpr int64_t kMaxWindowSize = int64_t(1) << 20;

void checkSize(int64_t value, const char* name) {
    if (value < 1 || value > kMaxWindowSize)
        throwValueError(name, ": must be an integer in [1, ", kMaxWindowSize, "], got ", value);
}

// The backends number a window's taps t = ty * kernel_width + tx (the argmax of max pooling, the
// divisor of average pooling) in 32-bit ints.
constexpr int64_t kMaxWindowTaps = INT32_MAX;

void checkTaps(int64_t kernelWidth, int64_t kernelHeight) {
    if (kernelWidth * kernelHeight > kMaxWindowTaps)
        throwValueError("kernel_width * kernel_height: a window has at most 2**31 - 1 taps, got ", kernelWidth, " x ",
                        kernelHeight);
}

void checkZeroPad(int64_t value, const char* name) {
    if (value < 0 || value > kMaxWindowSize)
        throwValueError(name, ": must be an integer in [0, ", kMaxWindowSize, "], got ", value);
}

int32_t poolingModeOf(PoolingKind kind) {
    switch (kind) {
        case PoolingKind::Average: return kPoolingAverage;
        case PoolingKind::L2Norm: return kPoolingL2;
        default: return kPoolingMax;
    }
}

// The window of the first pixel: center (cx, cy) and the dilated extent's top-left lean.
PoolingWindow makeWindow(PoolingKind kind, int64_t kw, int64_t kh, int64_t sx, int64_t sy, int64_t dx, int64_t dy,
                         int64_t cx, int64_t cy, int32_t edge, bool countInBand, int64_t padX, int64_t padY) {
    PoolingWindow w{};
    w.mode = poolingModeOf(kind);
    w.kernelWidth = int32_t(kw);
    w.kernelHeight = int32_t(kh);
    w.strideX = int32_t(sx);
    w.strideY = int32_t(sy);
    w.dilationX = int32_t(dx);
    w.dilationY = int32_t(dy);
    w.windowLeftX = checked::toInt32(cx - (((kw - 1) * dx + 1) >> 1), "offset.x");
    w.windowTopY = checked::toInt32(cy - (((kh - 1) * dy + 1) >> 1), "offset.y");
    w.edgeMode = edge;
    w.countMode = countInBand ? kPoolingCountInBand : kPoolingCountAll;
    w.zeroPadX = int32_t(padX);
    w.zeroPadY = int32_t(padY);
    return w;
}

}  // namespace

const char* poolingForwardName(PoolingKind kind) {
    switch (kind) {
        case PoolingKind::Max: return "CNNPoolingMax";
        case PoolingKind::Average: return "CNNPoolingAverage";
        case PoolingKind::L2Norm: return "CNNPoolingL2Norm";
        case PoolingKind::DilatedMax: return "CNNDilatedPoolingMax";
    }
    return "CNNPooling";
}

// ---- forward ---------------------------------------------------------------------------------------

CNNPooling::CNNPooling(const Device& device, PoolingKind kind, int64_t kernelWidth, int64_t kernelHeight,
                       int64_t strideX, int64_t strideY, int64_t dilationX, int64_t dilationY)
    : CNNKernel(device), kind_(kind), kernelWidth_(kernelWidth), kernelHeight_(kernelHeight), strideX_(strideX),
      strideY_(strideY), dilationX_(dilationX), dilationY_(dilationY) {
    checkSize(kernelWidth, "kernel_width");
    checkSize(kernelHeight, "kernel_height");
    checkSize(strideX, "stride_in_pixels_x");
    checkSize(strideY, "stride_in_pixels_y");
    checkSize(dilationX, "dilation_rate_x");
    checkSize(dilationY, "dilation_rate_y");
    checkTaps(kernelWidth, kernelHeight);
}

StatePtr CNNPooling::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNPoolingGradientState>(device_, kind_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNPooling::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) {
    const int32_t edge = elementwise::edgeModeCode(edgeMode, "edge_mode");
    checkZeroPad(zeroPadX(), "zero_pad_size_x");
    checkZeroPad(zeroPadY(), "zero_pad_size_y");
    const uint32_t method = padding ? padding->paddingMethod() : 0;
    // Average: N counts the taps inside the zero-pad band under Clamp, or with ExcludeEdges (Caffe).
    const bool countInBand =
        kind_ == PoolingKind::Average && (edge == kEdgeClamp || (method & PaddingMethod::ExcludeEdges) != 0);
    std::vector<PoolingParams> params;
    std::vector<Offset> centers;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNPoolingGradientState*>(states[i].get()))
            throwTypeError("destination_state: ", className(), " writes the CNNPoolingGradientState made by its "
                           "result_state, got a ", states[i]->className());
        const int64_t N = d.sourceChannels;
        checkDestinationChannels(*d.destination, N);
        // Clipping the destination origin moves the first window by whole strides.
        const int64_t cx = offset.x + strideX_ * clipShift(clipRect.origin.x, d.clip.origin.x);
        const int64_t cy = offset.y + strideY_ * clipShift(clipRect.origin.y, d.clip.origin.y);
        PoolingParams p{};
        p.source = d.source->layout(d.sourceChannelOffset, N);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, N);
        p.batch = int32_t(d.imageCount);
        elementwise::setClip(p, d.clip);
        p.window = makeWindow(kind_, kernelWidth_, kernelHeight_, strideX_, strideY_, dilationX_, dilationY_, cx, cy,
                              edge, countInBand, zeroPadX(), zeroPadY());
        params.push_back(p);
        centers.push_back(Offset{cx, cy, offset.z});
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNPoolingGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, centers[i], d.sourceChannels, d.imageCount);
        state.snapshot.kernelWidth = kernelWidth_;
        state.snapshot.kernelHeight = kernelHeight_;
        state.snapshot.strideX = strideX_;
        state.snapshot.strideY = strideY_;
        state.snapshot.dilationX = dilationX_;
        state.snapshot.dilationY = dilationY_;
        state.snapshot.paddingMethod = method;
        state.kind = kind_;
        state.zeroPadSizeX = zeroPadX();
        state.zeroPadSizeY = zeroPadY();
        state.countInBand = countInBand;
    }
    Backend& backend = device_.backend();
    for (auto [begin, end] : elementwise::unaryBatchRuns(dispatches)) {
        PoolingParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const UnaryDispatch& d = dispatches[begin];
        backend.poolingForward(cb, p, d.source->storage(d.sourceImageIndex),
                               d.destination->storage(d.destinationImageIndex));
    }
}

// ---- gradient --------------------------------------------------------------------------------------

CNNPoolingGradient::CNNPoolingGradient(const Device& device, PoolingKind kind, int64_t kernelWidth,
                                       int64_t kernelHeight, int64_t strideX, int64_t strideY, int64_t dilationX,
                                       int64_t dilationY)
    : CNNGradientKernel(device), kind_(kind), kernelWidth_(kernelWidth), kernelHeight_(kernelHeight),
      strideX_(strideX), strideY_(strideY), dilationX_(dilationX), dilationY_(dilationY) {
    checkSize(kernelWidth, "kernel_width");
    checkSize(kernelHeight, "kernel_height");
    checkSize(strideX, "stride_in_pixels_x");
    checkSize(strideY, "stride_in_pixels_y");
    checkSize(dilationX, "dilation_rate_x");
    checkSize(dilationY, "dilation_rate_y");
    checkTaps(kernelWidth, kernelHeight);
    secondaryStrideInPixelsX = strideX;
    secondaryStrideInPixelsY = strideY;
}

void CNNPoolingGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNPoolingGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: ", className(), " needs the CNNPoolingGradientState made by ",
                       poolingForwardName(kind_), ".result_state, got a ", state.className());
    if (s->kind != kind_)
        throwTypeError("gradient_state: ", className(), " needs the state of a ", poolingForwardName(kind_),
                       ", got the state of a ", poolingForwardName(s->kind));
    const ForwardSnapshot& f = s->snapshot;
    if (f.encoded && (f.kernelWidth != kernelWidth_ || f.kernelHeight != kernelHeight_ || f.strideX != strideX_ ||
                      f.strideY != strideY_ || f.dilationX != dilationX_ || f.dilationY != dilationY_))
        throwValueError("gradient_state: the forward ", poolingForwardName(kind_), " had a ", f.kernelWidth, "x",
                        f.kernelHeight, " window, strides ", f.strideX, ", ", f.strideY, " and dilation ", f.dilationX,
                        ", ", f.dilationY, " but this ", className(), " has ", kernelWidth_, "x", kernelHeight_, ", ",
                        strideX_, ", ", strideY_, " and ", dilationX_, ", ", dilationY_);
}

ImageDescriptor CNNPoolingGradient::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                               const StateBatch& sourceStates) {
    ImageDescriptor descriptor = CNNGradientKernel::destinationImageDescriptor(sourceImages, sourceStates);
    const auto& state = static_cast<const CNNPoolingGradientState&>(*sourceStates.front());
    setZeroPad(state.zeroPadSizeX, state.zeroPadSizeY);
    return descriptor;
}

void CNNPoolingGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    // Spec §1.8.2: G is read from the forward clip rectangle, the windows are centered where the
    // forward pass centered them, and dX covers the whole forward source.
    primaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    sourceSize = Size3{s.clipRect.size.width, s.clipRect.size.height, kNoClipSize};
    secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
    clipRect = rectNoClip();
    primaryEdgeMode = ImageEdgeMode::Zero;
    secondaryEdgeMode = s.edgeMode;
    secondaryStrideInPixelsX = s.strideX;
    secondaryStrideInPixelsY = s.strideY;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNPoolingGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                            const ImageBatch& sourceImages, const StateBatch& states,
                                            const ImageBatch& destinations) {
    const int32_t edge = elementwise::edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");
    checkZeroPad(zeroPadX(), "zero_pad_size_x");
    checkZeroPad(zeroPadY(), "zero_pad_size_y");
    const bool readsSource = kind_ != PoolingKind::Average;
    std::vector<PoolingGradientParams> params;
    std::vector<Region> clips;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNPoolingGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward ",
                            poolingForwardName(kind_), " read a ", s.sourceWidth, "x", s.sourceHeight,
                            " source; ", className(), " needs the forward source X (or an image of its size)");
        const int64_t N = s.sourceFeatureChannelCount;
        if (readsSource) checkSourceImageChannels(x, N, "read");
        checkSourceGradientChannels(g, N);
        checkDestinationChannels(dst, N, "destination_gradient");
        const Region clip = nonEmptyClip(clipRect, dst, "destination_gradient");
        if (primaryOffset.x < 0 || primaryOffset.y < 0 || primaryOffset.x >= g.width() || primaryOffset.y >= g.height())
            throwValueError("primary_offset: (", primaryOffset.x, ", ", primaryOffset.y, ") is outside the ", g.width(),
                            "x", g.height(), " source_gradient");
        const int64_t gw = int64_t(std::min<uint64_t>(sourceSize.width, uint64_t(g.width() - primaryOffset.x)));
        const int64_t gh = int64_t(std::min<uint64_t>(sourceSize.height, uint64_t(g.height() - primaryOffset.y)));
        if (gw < 1 || gh < 1) throwValueError("source_size: selects no pixel of the source_gradient");
        const int64_t gz = primaryOffset.z, xz = secondaryOffset.z;
        if (gz < 0 || gz >= g.numberOfImages() || xz < 0 || xz >= x.numberOfImages())
            throwValueError("primary_offset / secondary_offset: z selects an image the inputs do not have");
        PoolingGradientParams p{};
        p.gradient = g.layout(primarySourceFeatureChannelOffset, N);
        p.source = x.layout(readsSource ? secondarySourceFeatureChannelOffset : 0, readsSource ? N : 0);
        p.destination = dst.layout(destinationFeatureChannelOffset, N);
        p.batch = int32_t(std::min<int64_t>(
            {int64_t(clip.size.depth), g.numberOfImages() - gz, x.numberOfImages() - xz}));
        p.gradientX = int32_t(primaryOffset.x);
        p.gradientY = int32_t(primaryOffset.y);
        p.gradientWidth = int32_t(gw);
        p.gradientHeight = int32_t(gh);
        elementwise::setClip(p, clip);
        p.window = makeWindow(kind_, kernelWidth_, kernelHeight_, strideX_, strideY_, dilationX_, dilationY_,
                              secondaryOffset.x, secondaryOffset.y, edge, state.countInBand, zeroPadX(), zeroPadY());
        params.push_back(p);
        clips.push_back(clip);
    }
    Backend& backend = device_.backend();
    auto runs = elementwise::batchRuns(params.size(), [&](size_t j) {
        const auto& a = params[j - 1];
        const auto& b = params[j];
        return elementwise::gradientImagesBackToBack(sourceGradients, sourceImages, destinations, j) &&
               elementwise::sameRegion(clips[j - 1], clips[j]) && a.gradientWidth == b.gradientWidth &&
               a.gradientHeight == b.gradientHeight && a.destination.channels == b.destination.channels &&
               a.source.width == b.source.width && a.source.height == b.source.height &&
               a.window.countMode == b.window.countMode;
    });
    for (auto [begin, end] : runs) {
        PoolingGradientParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const BufferSlice x = readsSource ? sourceImages[begin]->storage(secondaryOffset.z) : BufferSlice{};
        backend.poolingGradient(cb, p, sourceGradients[begin]->storage(primaryOffset.z), x,
                                destinations[begin]->storage(clips[begin].origin.z));
    }
}

}  // namespace mpsgrad
