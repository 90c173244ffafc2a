#include "kernels/arithmetic.h"

#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/errors.h"

namespace mpsgrad {

const char* arithmeticClassName(int32_t op) {
    switch (op) {
        case kArithmeticAdd: return "CNNAdd";
        case kArithmeticSubtract: return "CNNSubtract";
        case kArithmeticMultiply: return "CNNMultiply";
        case kArithmeticDivide: return "CNNDivide";
        default: return "?";
    }
}

namespace {

using elementwise::clipShift;
using elementwise::edgeModeCode;

void checkStride(int64_t value, const char* name) {
    if (value != 0 && value != 1)
        throwValueError(name, ": must be 0 (broadcast) or 1, got ", value);
}

void checkClampBounds(float lo, float hi) {
    if (std::isnan(lo) || std::isnan(hi) || lo > hi)
        throwValueError("minimum_value / maximum_value: need minimum_value <= maximum_value, got ", lo, " and ", hi);
}

// Validates that an operand read at `offset` with 0/1 strides covers a clip of width x height
// pixels, and returns its ArithmeticOperand (layout: `channels` channels from `channelOffset`).
ArithmeticOperand makeOperand(const Image& image, int64_t channelOffset, int64_t channels, int64_t offsetX,
                              int64_t offsetY, int64_t strideX, int64_t strideY, int64_t strideChannels,
                              int32_t edge, int64_t width, int64_t height, const char* name, const char* side,
                              const char* kernelName) {
    auto axis = [&](int64_t offset, int64_t stride, int64_t extent, int64_t size, const char* what, char xy) {
        int64_t end = stride ? offset + extent : offset + 1;
        if (offset < 0 || end > size)
            throwValueError(name, ": is ", image.width(), "x", image.height(), " but ", kernelName, " reads ", what,
                            " [", offset, ", ", end, ") of it (", side, "_offset.", xy, " ", offset, ", ", side,
                            "_stride_in_pixels_", xy, " ", stride, "); the inputs' sizes must match unless an input "
                            "broadcasts (stride 0 along that axis reads a single ", xy == 'x' ? "column" : "row",
                            ")");
    };
    axis(offsetX, strideX, width, image.width(), "columns", 'x');
    axis(offsetY, strideY, height, image.height(), "rows", 'y');
    ArithmeticOperand o{};
    o.image = image.storageLayout(channelOffset, channels);  // FLOAT16 as it is when read natively
    o.offsetX = checked::toInt32(offsetX, "offset.x");
    o.offsetY = checked::toInt32(offsetY, "offset.y");
    o.strideX = checked::toInt32(strideX, "stride_in_pixels_x");
    o.strideY = checked::toInt32(strideY, "stride_in_pixels_y");
    o.strideChannels = checked::toInt32(strideChannels, "stride_in_feature_channels");
    o.strideImages = 1;
    o.edgeMode = edge;
    return o;
}

// The fields ArithmeticParams and CompareParams share: a dispatch's resolved operands and clip, and
// the formula's scales, bias and clamp bounds. The two shader structs have no common base.
template <typename Params, typename Resolved>
void setResolvedFormula(Params& p, const Resolved& r, const CNNArithmetic& k) {
    p.primary = r.primary;
    p.secondary = r.secondary;
    p.destination = r.destination;
    p.batch = r.batch;
    p.primaryScale = k.primaryScale;
    p.secondaryScale = k.secondaryScale;
    p.bias = k.bias;
    p.minimumValue = k.minimumValue;
    p.maximumValue = k.maximumValue;
    p.clipX = r.clipX;
    p.clipY = r.clipY;
    p.clipWidth = r.clipWidth;
    p.clipHeight = r.clipHeight;
}

// The storage formats of a forward dispatch's images (FLOAT16 ones reach the ops as they are when
// the kernel reads them natively; shadows are FLOAT32).
HalfBindings operandFormats(const BinaryDispatch& d) {
    HalfBindings f;
    f.source = d.primary->isFloat16();
    f.secondary = d.secondary->isFloat16();
    f.destination = d.destination->isFloat16();
    return f;
}

}  // namespace

// ---- CNNArithmetic ------------------------------------------------------------------------------------

bool CNNArithmetic::readsFloat16Natively() const { return device_.backend().readsHalfNatively(HalfOp::Arithmetic); }

bool CNNArithmeticGradient::readsFloat16Natively() const {
    return device_.backend().readsHalfNatively(HalfOp::Arithmetic);
}

void CNNArithmetic::checkProperties() const {
    checkStride(primaryStrideInPixelsX, "primary_stride_in_pixels_x");
    checkStride(primaryStrideInPixelsY, "primary_stride_in_pixels_y");
    checkStride(secondaryStrideInPixelsX, "secondary_stride_in_pixels_x");
    checkStride(secondaryStrideInPixelsY, "secondary_stride_in_pixels_y");
    checkStride(primaryStrideInFeatureChannels, "primary_stride_in_feature_channels");
    checkStride(secondaryStrideInFeatureChannels, "secondary_stride_in_feature_channels");
    checkClampBounds(minimumValue, maximumValue);
}

int64_t CNNArithmetic::destinationFeatureChannels(const Image& primary, const Image& secondary) const {
    checkStride(primaryStrideInFeatureChannels, "primary_stride_in_feature_channels");
    checkStride(secondaryStrideInFeatureChannels, "secondary_stride_in_feature_channels");
    const int64_t pc = availablePrimaryChannels(primary), sc = availableSecondaryChannels(secondary);
    if (primaryStrideInFeatureChannels && secondaryStrideInFeatureChannels) {
        if (pc != sc)
            throwValueError("secondary_image: provides ", sc, " feature channel(s) but primary_image provides ", pc,
                            "; they must match unless one input broadcasts a single channel "
                            "(primary/secondary_stride_in_feature_channels = 0)");
        return pc;
    }
    if (primaryStrideInFeatureChannels) return pc;
    if (secondaryStrideInFeatureChannels) return sc;
    return 1;
}

ImageDescriptor CNNArithmetic::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                          const StateBatch& sourceStates) {
    if (sourceImages.size() != 2)
        throwValueError("source_images: expected [primary, secondary], got ", sourceImages.size(), " image(s)");
    if (!sourceImages[0]) throwTypeError("source_images[0]: expected an Image, got None");
    if (!sourceImages[1]) throwTypeError("source_images[1]: expected an Image, got None");
    checkProperties();
    const Image& p = *sourceImages[0];
    const Image& s = *sourceImages[1];
    const int64_t width = primaryStrideInPixelsX ? p.width() : (secondaryStrideInPixelsX ? s.width() : 1);
    const int64_t height = primaryStrideInPixelsY ? p.height() : (secondaryStrideInPixelsY ? s.height() : 1);
    primaryOffset.x = primaryOffset.y = 0;
    secondaryOffset.x = secondaryOffset.y = 0;
    ImageDescriptor descriptor =
        ImageDescriptor::make(p.featureChannelFormat(), width, height, destinationFeatureChannels(p, s));  // docs/float16.md
    if (padding && (padding->paddingMethod() & PaddingMethod::Custom))
        descriptor = padding->destinationImageDescriptor(sourceImages, sourceStates, *this, descriptor);
    descriptor.validate("padding");
    return descriptor;
}

StatePtr CNNArithmetic::makeResultState(const Image&, const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNArithmeticGradientState>(device_, op_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

CNNArithmetic::Resolved CNNArithmetic::resolve(const BinaryDispatch& d) const {
    const int32_t pEdge = edgeModeCode(primaryEdgeMode, "primary_edge_mode");
    const int32_t sEdge = edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");
    const int64_t pc = d.primaryChannels, sc = d.secondaryChannels;
    int64_t C;
    if (primaryStrideInFeatureChannels && secondaryStrideInFeatureChannels) {
        if (pc != sc)
            throwValueError("secondary_image: provides ", sc, " feature channel(s) at secondary_source_feature_"
                            "channel_offset ", d.secondaryChannelOffset, " but primary_image provides ", pc,
                            "; they must match unless one input broadcasts a single channel "
                            "(primary/secondary_stride_in_feature_channels = 0)");
        C = pc;
    } else if (primaryStrideInFeatureChannels) {
        C = pc;
    } else if (secondaryStrideInFeatureChannels) {
        C = sc;
    } else {
        C = d.destination->featureChannels() - destinationFeatureChannelOffset;  // both broadcast: fill the destination
        if (C < 1) C = 1;
    }
    checkDestinationChannels(*d.destination, C, "destination_image");

    Resolved r{};
    r.channels = C;
    elementwise::setClip(r, d.clip);
    r.batch = checked::toInt32(d.imageCount, "number of images");
    const int64_t shiftX = clipShift(clipRect.origin.x, d.clip.origin.x);
    const int64_t shiftY = clipShift(clipRect.origin.y, d.clip.origin.y);
    r.primary = makeOperand(*d.primary, d.primaryChannelOffset, primaryStrideInFeatureChannels ? C : 1,
                            primaryOffset.x + (primaryStrideInPixelsX ? shiftX : 0),
                            primaryOffset.y + (primaryStrideInPixelsY ? shiftY : 0), primaryStrideInPixelsX,
                            primaryStrideInPixelsY, primaryStrideInFeatureChannels, pEdge, r.clipWidth, r.clipHeight,
                            "primary_image", "primary", className());
    r.secondary = makeOperand(*d.secondary, d.secondaryChannelOffset, secondaryStrideInFeatureChannels ? C : 1,
                              secondaryOffset.x + (secondaryStrideInPixelsX ? shiftX : 0),
                              secondaryOffset.y + (secondaryStrideInPixelsY ? shiftY : 0), secondaryStrideInPixelsX,
                              secondaryStrideInPixelsY, secondaryStrideInFeatureChannels, sEdge, r.clipWidth,
                              r.clipHeight, "secondary_image", "secondary", className());
    r.destination = d.destination->storageLayout(destinationFeatureChannelOffset, C);
    return r;
}

void CNNArithmetic::encodeImpl(CommandBuffer& cb, const std::vector<BinaryDispatch>& dispatches,
                               const StateBatch& states) {
    checkProperties();
    std::vector<Resolved> resolved;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        if (!states.empty() && !dynamic_cast<CNNArithmeticGradientState*>(states[i].get()))
            throwTypeError("destination_state: ", className(), " writes the CNNArithmeticGradientState made by its "
                           "result_state, got a ", states[i]->className());
        resolved.push_back(resolve(dispatches[i]));
    }
    const bool clamped = minimumValue != -FLT_MAX || maximumValue != FLT_MAX;

    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const BinaryDispatch& d = dispatches[i];
        const Resolved& r = resolved[i];
        ArithmeticParams p{};
        setResolvedFormula(p, r, *this);
        p.op = op_;
        p.stateMode = kArithmeticClampNone;
        BufferSlice mask;
        if (!states.empty()) {
            auto& state = static_cast<CNNArithmeticGradientState&>(*states[i]);
            ForwardSnapshot& s = state.snapshot;
            s.offset = Offset{r.primary.offsetX, r.primary.offsetY, primaryOffset.z};
            s.secondaryOffset = Offset{r.secondary.offsetX, r.secondary.offsetY, secondaryOffset.z};
            s.clipRect = d.clip;
            s.edgeMode = primaryEdgeMode;
            s.secondaryEdgeMode = secondaryEdgeMode;
            s.strideX = primaryStrideInPixelsX;
            s.strideY = primaryStrideInPixelsY;
            s.secondaryStrideX = secondaryStrideInPixelsX;
            s.secondaryStrideY = secondaryStrideInPixelsY;
            s.sourceWidth = d.primary->width();
            s.sourceHeight = d.primary->height();
            s.sourceFeatureChannels = d.primary->featureChannels();
            s.secondaryWidth = d.secondary->width();
            s.secondaryHeight = d.secondary->height();
            s.secondaryFeatureChannels = d.secondary->featureChannels();
            s.destinationWidth = d.destination->width();
            s.destinationHeight = d.destination->height();
            s.destinationFeatureChannels = d.destination->featureChannels();
            s.sourceFeatureChannelOffset = d.primaryChannelOffset;
            s.sourceFeatureChannelCount = r.primary.image.channels;
            s.secondaryFeatureChannelOffset = d.secondaryChannelOffset;
            s.secondaryFeatureChannelCount = r.secondary.image.channels;
            s.destinationFeatureChannelOffset = destinationFeatureChannelOffset;
            s.batchSize = r.batch;
            s.paddingMethod = padding ? padding->paddingMethod() : 0;
            s.encoded = true;
            state.op = op_;
            state.primaryScale = primaryScale;
            state.secondaryScale = secondaryScale;
            state.bias = bias;
            state.minimumValue = minimumValue;
            state.maximumValue = maximumValue;
            state.primary = r.primary;
            state.secondary = r.secondary;
            state.channels = r.channels;
            state.images = r.batch;
            state.forwardPrimary = elementwise::StorageIdentity::of(*d.primary, d.primaryImageIndex);
            state.forwardSecondary = elementwise::StorageIdentity::of(*d.secondary, d.secondaryImageIndex);
            state.hasClampMask = clamped;
            if (clamped) {
                ImageLayout& l = state.maskLayout;
                l.width = r.clipWidth;
                l.height = r.clipHeight;
                l.pixelStride = int32_t(roundUpTo4(r.channels));
                l.imageStride = l.width * l.height * l.pixelStride;
                l.channelOffset = 0;
                l.channels = int32_t(r.channels);
                state.maskIndex = state.addResource(size_t(l.imageStride) * size_t(r.batch) * sizeof(float));
                mask = state.resourceAtIndex(state.maskIndex);
                p.clampState = l;
                p.stateMode = kArithmeticClampMask;
            }
            state.hasSecondaryCopy = op_ == kArithmeticDivide;
            if (state.hasSecondaryCopy) {
                // y for CNNDivideGradient's secondary filter, copied before the forward op runs (the
                // destination may alias it).
                // The copy is float32 whatever the secondary's storage (a FLOAT16 one is converted).
                const size_t elements = size_t(d.secondary->imageStride()) * size_t(r.batch);
                state.secondaryCopyIndex = state.addResource(elements * sizeof(float));
                state.secondaryCopyLayout = r.secondary.image;
                if (d.secondary->isFloat16())
                    backend.convertImageFormat(cb,
                                               ConvertFormatParams{checked::toInt32(int64_t(elements), "secondary"
                                                                                                       " elements"),
                                                                   0, kStorageFloat16},
                                               d.secondary->storage(d.secondaryImageIndex),
                                               state.resourceAtIndex(state.secondaryCopyIndex));
                else
                    backend.copyBuffer(cb, d.secondary->storage(d.secondaryImageIndex),
                                       state.resourceAtIndex(state.secondaryCopyIndex), elements * sizeof(float));
            }
        }
        const HalfBindings formats = operandFormats(d);
        if (formats.any())
            backend.arithmeticForwardHalf(cb, p, formats, d.primary->storage(d.primaryImageIndex),
                                          d.secondary->storage(d.secondaryImageIndex),
                                          d.destination->storage(d.destinationImageIndex), mask);
        else
            backend.arithmeticForward(cb, p, d.primary->storage(d.primaryImageIndex),
                                      d.secondary->storage(d.secondaryImageIndex),
                                      d.destination->storage(d.destinationImageIndex), mask);
    }
}

// ---- NNCompare -------------------------------------------------------------------------------------------

void NNCompare::encodeImpl(CommandBuffer& cb, const std::vector<BinaryDispatch>& dispatches, const StateBatch& states) {
    if (!states.empty())
        throwTypeError("destination_state: NNCompare has no gradient and writes no state; pass None");
    checkProperties();
    const int32_t comparison = static_cast<int32_t>(comparisonType);
    if (comparison < kCompareEqual || comparison > kCompareGreaterOrEqual)
        throwValueError("comparison_type: must be an NNComparisonType in [0, 5], got ", comparison);
    std::vector<Resolved> resolved;
    for (const auto& d : dispatches) resolved.push_back(resolve(d));
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const BinaryDispatch& d = dispatches[i];
        const Resolved& r = resolved[i];
        CompareParams p{};
        setResolvedFormula(p, r, *this);
        p.comparison = comparison;
        p.threshold = threshold;
        const HalfBindings formats = operandFormats(d);
        if (formats.any())
            backend.compareForwardHalf(cb, p, formats, d.primary->storage(d.primaryImageIndex),
                                       d.secondary->storage(d.secondaryImageIndex),
                                       d.destination->storage(d.destinationImageIndex));
        else
            backend.compareForward(cb, p, d.primary->storage(d.primaryImageIndex),
                                   d.secondary->storage(d.secondaryImageIndex),
                                   d.destination->storage(d.destinationImageIndex));
    }
}

// ---- CNNArithmeticGradient -------------------------------------------------------------------------------

void CNNArithmeticGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNArithmeticGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: ", className(), " needs the CNNArithmeticGradientState made by ",
                       arithmeticClassName(op_), ".result_state, got a ", state.className());
    if (s->op != op_)
        throwTypeError("gradient_state: ", className(), " needs the state of a ", arithmeticClassName(op_),
                       ", got the state of a ", arithmeticClassName(s->op));
}

void CNNArithmeticGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    // G is read where the forward wrote; source_image (the other operand) where the forward read it;
    // dX is written where the forward read this filter's input.
    primaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    primaryStrideInPixelsX = s.strideX;
    primaryStrideInPixelsY = s.strideY;
    secondaryStrideInPixelsX = s.secondaryStrideX;
    secondaryStrideInPixelsY = s.secondaryStrideY;
    primaryEdgeMode = ImageEdgeMode::Zero;
    if (secondaryFilter_) {
        secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
        secondaryEdgeMode = s.edgeMode;
        secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
        secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
        clipRect = Region{{s.secondaryOffset.x, s.secondaryOffset.y, 0}, {kNoClipSize, kNoClipSize, kNoClipSize}};
        destinationFeatureChannelOffset = s.secondaryFeatureChannelOffset;
    } else {
        secondaryOffset = Offset{s.secondaryOffset.x, s.secondaryOffset.y, 0};
        secondaryEdgeMode = s.secondaryEdgeMode;
        secondarySourceFeatureChannelOffset = s.secondaryFeatureChannelOffset;
        secondarySourceFeatureChannelMaxCount = uint64_t(s.secondaryFeatureChannelCount);
        clipRect = Region{{s.offset.x, s.offset.y, 0}, {kNoClipSize, kNoClipSize, kNoClipSize}};
        destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
    }
}

ImageDescriptor CNNArithmeticGradient::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                                  const StateBatch& sourceStates) {
    ImageDescriptor d = CNNGradientKernel::destinationImageDescriptor(sourceImages, sourceStates);
    const auto& state = static_cast<const CNNArithmeticGradientState&>(*sourceStates.front());
    {
        // source_image is the other operand; dX goes to the images this gradient's operand came from.
        const ForwardSnapshot& s = state.snapshot;
        secondaryOffset.z = secondaryFilter_ ? s.offset.z : s.secondaryOffset.z;
        clipRect.origin.z = secondaryFilter_ ? s.secondaryOffset.z : s.offset.z;
    }
    primaryScale = state.primaryScale;
    secondaryScale = state.secondaryScale;
    bias = state.bias;
    minimumValue = state.minimumValue;
    maximumValue = state.maximumValue;
    primaryStrideInFeatureChannels = state.primary.strideChannels;
    secondaryStrideInFeatureChannels = state.secondary.strideChannels;
    if (secondaryFilter_) {
        const ForwardSnapshot& s = state.snapshot;
        d.width = s.secondaryWidth;
        d.height = s.secondaryHeight;
        d.featureChannels = s.secondaryFeatureChannels;
    }
    return d;
}

void CNNArithmeticGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                               const ImageBatch& sourceImages, const StateBatch& states,
                                               const ImageBatch& destinations) {
    checkStride(primaryStrideInFeatureChannels, "primary_stride_in_feature_channels");
    checkStride(secondaryStrideInFeatureChannels, "secondary_stride_in_feature_channels");
    checkStride(primaryStrideInPixelsX, "primary_stride_in_pixels_x");
    checkStride(primaryStrideInPixelsY, "primary_stride_in_pixels_y");
    checkStride(secondaryStrideInPixelsX, "secondary_stride_in_pixels_x");
    checkStride(secondaryStrideInPixelsY, "secondary_stride_in_pixels_y");
    const bool readsOther = op_ == kArithmeticMultiply || op_ == kArithmeticDivide;
    const char* inputName = secondaryFilter_ ? "secondary y" : "primary x";
    const char* otherName = secondaryFilter_ ? "primary x" : "secondary y";
    const int32_t otherEdge = edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");

    struct Work {
        ArithmeticGradientParams p;
        BufferSlice gradient, primary, secondary, mask, destination;
        HalfBindings formats;  // FLOAT16 bindings (read natively)
    };
    std::vector<Work> work;
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNArithmeticGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& other = *sourceImages[i];
        const Image& dst = *destinations[i];
        auto sameStride = [&](int64_t mine, int64_t forward, const char* name) {
            if (mine != forward)
                throwValueError(name, ": is ", mine, " but the forward ", arithmeticClassName(state.op), " used ",
                                forward, "; a gradient filter's broadcast parameters must equal the forward kernel's "
                                "(the returning encode forms and destination_image_descriptor copy them from the "
                                "state)");
        };
        sameStride(primaryStrideInPixelsX, state.primary.strideX, "primary_stride_in_pixels_x");
        sameStride(primaryStrideInPixelsY, state.primary.strideY, "primary_stride_in_pixels_y");
        sameStride(secondaryStrideInPixelsX, state.secondary.strideX, "secondary_stride_in_pixels_x");
        sameStride(secondaryStrideInPixelsY, state.secondary.strideY, "secondary_stride_in_pixels_y");
        sameStride(primaryStrideInFeatureChannels, state.primary.strideChannels, "primary_stride_in_feature_channels");
        sameStride(secondaryStrideInFeatureChannels, state.secondary.strideChannels,
                   "secondary_stride_in_feature_channels");

        const int64_t C = state.channels;
        const int64_t W = s.clipRect.size.width, H = s.clipRect.size.height;
        const int64_t gChannels = availablePrimaryChannels(g);
        if (gChannels < C)
            throwValueError("source_gradient: provides ", gChannels, " feature channel(s) at primary_source_feature_"
                            "channel_offset ", primarySourceFeatureChannelOffset, " but the forward ",
                            arithmeticClassName(state.op), " wrote ", C);
        elementwise::checkReadRegion(g, primaryOffset.x, primaryOffset.y, W, H, "source_gradient", "primary_offset",
                                     className());
        const ArithmeticOperand& input = secondaryFilter_ ? state.secondary : state.primary;
        const int64_t DC = input.strideChannels ? C : 1;
        const int64_t DW = input.strideX ? W : 1, DH = input.strideY ? H : 1;
        checkDestinationChannels(dst, DC, "destination_gradient");
        if (clipRect.origin.x < 0 || clipRect.origin.y < 0 || clipRect.origin.x + DW > dst.width() ||
            clipRect.origin.y + DH > dst.height())
            throwValueError("destination_gradient: is ", dst.width(), "x", dst.height(), " but the gradient for the ",
                            inputName, " input covers columns [", clipRect.origin.x, ", ", clipRect.origin.x + DW,
                            ") and rows [", clipRect.origin.y, ", ", clipRect.origin.y + DH, ") (clip_rect.origin)");
        const int64_t count = state.images;
        auto checkImages = [&](const Image& image, int64_t z, const char* what) {
            if (z < 0 || z + count > image.numberOfImages())
                throwValueError(what, ": has ", image.numberOfImages(), " image(s) but the forward pass encoded ",
                                count, " from index ", z);
        };
        checkImages(g, primaryOffset.z, "source_gradient");
        checkImages(dst, clipRect.origin.z, "destination_gradient");

        Work w{};
        ArithmeticGradientParams& p = w.p;
        p.gradient = g.storageLayout(primarySourceFeatureChannelOffset, C);
        w.formats.gradient = g.isFloat16();
        p.primary = state.primary;
        p.secondary = state.secondary;
        if (readsOther) {
            checkImages(other, secondaryOffset.z, "source_image");
            const bool otherIsPrimary = secondaryFilter_;
            const int64_t ow = otherIsPrimary ? s.sourceWidth : s.secondaryWidth;
            const int64_t oh = otherIsPrimary ? s.sourceHeight : s.secondaryHeight;
            const int64_t oc = otherIsPrimary ? s.sourceFeatureChannels : s.secondaryFeatureChannels;
            const auto& ownId = secondaryFilter_ ? state.forwardSecondary : state.forwardPrimary;
            const auto& otherId = secondaryFilter_ ? state.forwardPrimary : state.forwardSecondary;
            if (ownId.matches(other, secondaryOffset.z) && !otherId.matches(other, secondaryOffset.z))
                throwValueError("source_image: is the forward ", inputName, " itself; ", className(), "'s ",
                                secondaryFilter_ ? "secondary" : "primary", " filter needs the other operand (the "
                                "forward ", otherName, ") as source_image");
            if (other.width() != ow || other.height() != oh || other.featureChannels() != oc)
                throwValueError("source_image: is ", other.width(), "x", other.height(), "x", other.featureChannels(),
                                " but the forward ", otherName, " operand was ", ow, "x", oh, "x", oc, "; ",
                                className(), "'s ", secondaryFilter_ ? "secondary" : "primary",
                                " filter needs the other operand (the forward ", otherName, ") as source_image");
            const ArithmeticOperand& forwardOther = otherIsPrimary ? state.primary : state.secondary;
            const int64_t otherChannels = forwardOther.strideChannels ? C : 1;
            const int64_t available = availableSecondaryChannels(other);
            if (available < otherChannels)
                throwValueError("source_image: provides ", available, " feature channel(s) at secondary_source_"
                                "feature_channel_offset ", secondarySourceFeatureChannelOffset, " but the forward ",
                                otherName, " operand supplied ", otherChannels);
            ArithmeticOperand o = makeOperand(other, secondarySourceFeatureChannelOffset, otherChannels,
                                              secondaryOffset.x, secondaryOffset.y, forwardOther.strideX,
                                              forwardOther.strideY, forwardOther.strideChannels, otherEdge, W, H,
                                              "source_image", "secondary", className());
            if (otherIsPrimary) {
                p.primary = o;
                w.primary = other.storage(secondaryOffset.z);
                w.formats.source = other.isFloat16();
            } else {
                p.secondary = o;
                w.secondary = other.storage(secondaryOffset.z);
                w.formats.secondary = other.isFloat16();
            }
            if (op_ == kArithmeticDivide && secondaryFilter_) {
                if (!state.hasSecondaryCopy)
                    throwValueError("gradient_state: holds no copy of the forward secondary y (it was not written by "
                                    "a CNNDivide)");
                p.secondary.image = state.secondaryCopyLayout;
                w.secondary = state.resourceAtIndex(state.secondaryCopyIndex);
                w.formats.secondary = false;  // the state's copy is float32
            }
        }
        p.destination = dst.storageLayout(destinationFeatureChannelOffset, DC);
        w.formats.destination = dst.isFloat16();
        p.batch = checked::toInt32(count, "number of images");
        p.width = checked::toInt32(W, "width");
        p.height = checked::toInt32(H, "height");
        p.gradientX = checked::toInt32(primaryOffset.x, "primary_offset.x");
        p.gradientY = checked::toInt32(primaryOffset.y, "primary_offset.y");
        p.destinationX = checked::toInt32(clipRect.origin.x, "clip_rect.origin.x");
        p.destinationY = checked::toInt32(clipRect.origin.y, "clip_rect.origin.y");
        p.op = op_;
        p.forSecondary = secondaryFilter_ ? 1 : 0;
        p.primaryScale = primaryScale;
        p.secondaryScale = secondaryScale;
        p.minimumValue = state.minimumValue;
        p.maximumValue = state.maximumValue;
        p.clampMode = kArithmeticClampNone;
        if (state.hasClampMask) {
            p.clampState = state.maskLayout;
            p.clampMode = kArithmeticClampMask;
            w.mask = state.resourceAtIndex(state.maskIndex);
        }
        w.gradient = g.storage(primaryOffset.z);
        w.destination = dst.storage(clipRect.origin.z);
        work.push_back(w);
    }

    Backend& backend = device_.backend();
    for (const Work& w : work) {
        if (w.formats.any())
            backend.arithmeticGradientHalf(cb, w.p, w.formats, w.gradient, w.primary, w.secondary, w.mask,
                                           w.destination);
        else
            backend.arithmeticGradient(cb, w.p, w.gradient, w.primary, w.secondary, w.mask, w.destination);
    }
}

}  // namespace mpsgrad
