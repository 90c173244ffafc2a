#include "kernels/reduction.h"

#include <algorithm>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"
#include "metal/reduction_params.h"

namespace mpsgrad {
namespace {

template <class StateT>
StatePtr makeState(const Device& device, CommandBuffer* cb, Kernel& producer) {
    auto state = std::make_shared<StateT>(device, cb != nullptr, cb);
    state->producer = producer.weak_from_this();  // empty for a kernel no shared_ptr owns (C++ stack object)
    return state;
}

template <class StateT>
void checkStates(const StateBatch& states, const char* kernel) {
    for (const StatePtr& s : states)
        if (!dynamic_cast<StateT*>(s.get()))
            throwTypeError("destination_state: ", kernel, " writes the state made by its result_state, got a ",
                           s->className());
}

// The images a gradient encode reads and writes: from primary_offset.z (G), secondary_offset.z (X)
// and clip_rect.origin.z (dX), as many as clip_rect's depth and all three images allow.
struct GradientImages {
    int64_t gradient = 0, source = 0, destination = 0;
    int32_t count = 1;
};

GradientImages gradientImages(const CNNBinaryKernel& k, const Image& g, const Image& x, const Image& dst) {
    GradientImages z{k.primaryOffset.z, k.secondaryOffset.z, std::max<int64_t>(k.clipRect.origin.z, 0), 1};
    if (z.gradient < 0 || z.gradient >= g.numberOfImages())
        throwValueError("primary_offset: z selects an image the source_gradient does not have");
    if (z.source < 0 || z.source >= x.numberOfImages())
        throwValueError("secondary_offset: z selects an image the source_image does not have");
    if (z.destination >= dst.numberOfImages())
        throwValueError("clip_rect: origin.z selects an image the destination_gradient does not have");
    const uint64_t depth = k.clipRect.size.depth;
    int64_t count = std::min({g.numberOfImages() - z.gradient, x.numberOfImages() - z.source,
                              dst.numberOfImages() - z.destination});
    if (depth < uint64_t(count)) count = int64_t(depth);
    if (count < 1) throwValueError("clip_rect: size.depth selects no image");
    z.count = checked::toInt32(count, "number of images");
    return z;
}

// dX and the forward source X must both be sized like the source the forward pass read.
void checkForwardSourceSize(const ForwardSnapshot& s, const Image& x, const Image& dst, const char* forward) {
    if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
        throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward ", forward, " read a ",
                        s.sourceWidth, "x", s.sourceHeight, " source");
    if (dst.width() != s.sourceWidth || dst.height() != s.sourceHeight)
        throwValueError("destination_gradient: is ", dst.width(), "x", dst.height(), " but must be ", s.sourceWidth,
                        "x", s.sourceHeight, " like the forward source");
}

// The channel bookkeeping both gradients share: G from the forward's destination channel offset,
// X and dX at the forward's source channel offset.
void configureChannelsFromSnapshot(CNNGradientKernel& k, const ForwardSnapshot& s) {
    k.primaryOffset = Offset{0, 0, 0};
    k.secondaryOffset = Offset{0, 0, 0};
    k.clipRect = rectNoClip();
    k.primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    k.primarySourceFeatureChannelMaxCount = UINT64_MAX;
    k.secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    k.secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    k.destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

}  // namespace

// ---- NNGramMatrixCalculation -----------------------------------------------------------------------

NNGramMatrixCalculation::NNGramMatrixCalculation(const Device& device, float a) : CNNKernel(device), alpha(a) {}

int64_t NNGramMatrixCalculation::destinationFeatureChannels(const Image& source) const {
    return availableSourceChannels(source);
}

void NNGramMatrixCalculation::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    // The "special padding policy" of Apple's header: an N x 1 image of N channels.
    descriptor.width = availableSourceChannels(*sourceImages.front());
    descriptor.height = 1;
    offset.x = 0;
    offset.y = 0;
    clipRect = rectNoClip();
}

StatePtr NNGramMatrixCalculation::makeResultState(const Image&, CommandBuffer* cb) {
    return makeState<NNGramMatrixCalculationGradientState>(device_, cb, *this);
}

void NNGramMatrixCalculation::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                         const StateBatch& states) {
    checkStates<NNGramMatrixCalculationGradientState>(states, className());
    if (offset.x != 0 || offset.y != 0)
        throwValueError("offset: NNGramMatrixCalculation reads the whole source; offset.x and offset.y must be 0, got (",
                        offset.x, ", ", offset.y, ")");
    checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
    std::vector<GramMatrixParams> params;
    for (const UnaryDispatch& d : dispatches) {
        const Image& src = *d.source;
        const Image& dst = *d.destination;
        const int64_t n = d.sourceChannels;
        if (n < 1) throwValueError("source_image: NNGramMatrixCalculation reads no feature channel");
        if (dst.width() < n || dst.height() < 1)
            throwValueError("destination_image: is ", dst.width(), "x", dst.height(), " but the Gram matrix of ", n,
                            " feature channels is ", n, "x1");
        if (d.clip.origin.x != 0 || d.clip.origin.y != 0 || int64_t(d.clip.size.width) < n || d.clip.size.height < 1)
            throwValueError("clip_rect: NNGramMatrixCalculation writes pixels [0, ", n, ") of row 0; clip_rect must "
                            "start at (0, 0) and cover them");
        checkDestinationChannels(dst, n);
        checked::product({src.width(), src.height(), n}, "source_image");
        GramMatrixParams p{};
        p.source = src.layout(d.sourceChannelOffset, n);
        p.destination = dst.layout(destinationFeatureChannelOffset, n);
        p.batch = checked::toInt32(d.imageCount, "number of images");
        p.alpha = alpha;
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(static_cast<NNGradientState&>(*states[i]).snapshot, *this, d, Offset{0, 0, offset.z},
                                        d.sourceChannels, d.imageCount);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        backend.gramMatrix(cb, params[i], d.source->storage(d.sourceImageIndex),
                           d.destination->storage(d.destinationImageIndex));
    }
}

// ---- NNGramMatrixCalculationGradient ---------------------------------------------------------------

NNGramMatrixCalculationGradient::NNGramMatrixCalculationGradient(const Device& device, float a)
    : CNNGradientKernel(device), alpha(a) {}

void NNGramMatrixCalculationGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const NNGramMatrixCalculationGradientState*>(&state))
        throwTypeError("gradient_state: NNGramMatrixCalculationGradient needs the NNGramMatrixCalculationGradientState "
                       "made by NNGramMatrixCalculation.result_state, got a ", state.className());
}

void NNGramMatrixCalculationGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    configureChannelsFromSnapshot(*this, s);
}

void NNGramMatrixCalculationGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                         const ImageBatch& sourceImages, const StateBatch& states,
                                                         const ImageBatch& destinations) {
    std::vector<GramMatrixGradientParams> params;
    std::vector<GradientImages> zs;
    for (size_t i = 0; i < states.size(); ++i) {
        const ForwardSnapshot& s = static_cast<NNGradientState&>(*states[i]).snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        const int64_t n = s.sourceFeatureChannelCount;
        checkForwardSourceSize(s, x, dst, "NNGramMatrixCalculation");
        if (primaryOffset.x != 0 || primaryOffset.y != 0 || secondaryOffset.x != 0 || secondaryOffset.y != 0)
            throwValueError("primary_offset / secondary_offset: NNGramMatrixCalculationGradient reads whole images; "
                            "x and y must be 0");
        if (g.width() < n || g.height() < 1)
            throwValueError("source_gradient: is ", g.width(), "x", g.height(), " but the Gram matrix of ", n,
                            " feature channels is ", n, "x1");
        if (availablePrimaryChannels(g) < n)
            throwValueError("source_gradient: provides ", availablePrimaryChannels(g), " feature channel(s) at primary_"
                            "source_feature_channel_offset ", primarySourceFeatureChannelOffset, " but the Gram matrix "
                            "has ", n);
        if (availableSecondaryChannels(x) < n)
            throwValueError("source_image: provides ", availableSecondaryChannels(x), " feature channel(s) at "
                            "secondary_source_feature_channel_offset ", secondarySourceFeatureChannelOffset,
                            " but the forward pass read ", n);
        checkDestinationChannels(dst, n, "destination_gradient");
        zs.push_back(gradientImages(*this, g, x, dst));
        GramMatrixGradientParams p{};
        p.gradient = g.layout(primarySourceFeatureChannelOffset, n);
        p.source = x.layout(secondarySourceFeatureChannelOffset, n);
        p.destination = dst.layout(destinationFeatureChannelOffset, n);
        p.batch = zs.back().count;
        p.alpha = alpha;
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < params.size(); ++i)
        backend.gramMatrixGradient(cb, params[i], sourceGradients[i]->storage(zs[i].gradient),
                                   sourceImages[i]->storage(zs[i].source),
                                   destinations[i]->storage(zs[i].destination));
}

// ---- NNReductionSpatialMean ------------------------------------------------------------------------

NNReductionSpatialMean::NNReductionSpatialMean(const Device& device) : CNNKernel(device) {}

int64_t NNReductionSpatialMean::destinationFeatureChannels(const Image& source) const {
    return availableSourceChannels(source);
}

void NNReductionSpatialMean::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch&) {
    descriptor.width = 1;
    descriptor.height = 1;
    offset.x = 0;
    offset.y = 0;
    clipRect = rectNoClip();
}

StatePtr NNReductionSpatialMean::makeResultState(const Image&, CommandBuffer* cb) {
    return makeState<NNReductionSpatialMeanGradientState>(device_, cb, *this);
}

void NNReductionSpatialMean::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                        const StateBatch& states) {
    checkStates<NNReductionSpatialMeanGradientState>(states, className());
    if (offset.x != 0 || offset.y != 0)
        throwValueError("offset: NNReductionSpatialMean reads the region clip_rect_source selects; offset.x and "
                        "offset.y must be 0, got (", offset.x, ", ", offset.y, ")");
    checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
    std::vector<SpatialMeanParams> params;
    std::vector<Region> regions;
    for (const UnaryDispatch& d : dispatches) {
        const Image& src = *d.source;
        const Region region = clipToImage(clipRectSource, src);
        if (region.size.width == 0 || region.size.height == 0)
            throwValueError("clip_rect_source: selects no pixel of the ", src.width(), "x", src.height(), " source");
        if (d.clip.size.width == 0 || d.clip.size.height == 0)
            throwValueError("clip_rect: selects no pixel of the destination");
        checkDestinationChannels(*d.destination, d.sourceChannels);
        SpatialMeanParams p{};
        p.source = src.layout(d.sourceChannelOffset, d.sourceChannels);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, d.sourceChannels);
        p.batch = checked::toInt32(d.imageCount, "number of images");
        p.regionX = checked::toInt32(region.origin.x, "clip_rect_source.origin.x");
        p.regionY = checked::toInt32(region.origin.y, "clip_rect_source.origin.y");
        p.regionWidth = checked::toInt32(int64_t(region.size.width), "clip_rect_source.size.width");
        p.regionHeight = checked::toInt32(int64_t(region.size.height), "clip_rect_source.size.height");
        p.destinationX = checked::toInt32(d.clip.origin.x, "clip_rect.origin.x");
        p.destinationY = checked::toInt32(d.clip.origin.y, "clip_rect.origin.y");
        params.push_back(p);
        regions.push_back(region);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<NNReductionSpatialMeanGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, Offset{0, 0, offset.z}, d.sourceChannels,
                                        d.imageCount);
        state.sourceRegion = regions[i];
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        backend.spatialMean(cb, params[i], d.source->storage(d.sourceImageIndex),
                            d.destination->storage(d.destinationImageIndex));
    }
}

// ---- NNReductionSpatialMeanGradient ----------------------------------------------------------------

NNReductionSpatialMeanGradient::NNReductionSpatialMeanGradient(const Device& device) : CNNGradientKernel(device) {}

void NNReductionSpatialMeanGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const NNReductionSpatialMeanGradientState*>(&state))
        throwTypeError("gradient_state: NNReductionSpatialMeanGradient needs the NNReductionSpatialMeanGradientState "
                       "made by NNReductionSpatialMean.result_state, got a ", state.className());
}

void NNReductionSpatialMeanGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    configureChannelsFromSnapshot(*this, s);
    writesAllChannels_ = s.sourceFeatureChannelOffset == 0 && s.sourceFeatureChannelCount == s.sourceFeatureChannels;
}

void NNReductionSpatialMeanGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                        const ImageBatch& sourceImages, const StateBatch& states,
                                                        const ImageBatch& destinations) {
    std::vector<SpatialMeanGradientParams> params;
    std::vector<GradientImages> zs;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const NNReductionSpatialMeanGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& dst = *destinations[i];
        const int64_t n = s.sourceFeatureChannelCount;
        checkForwardSourceSize(s, *sourceImages[i], dst, "NNReductionSpatialMean");
        const int64_t gx = checked::addSigned(primaryOffset.x, s.clipRect.origin.x, "primary_offset.x");
        const int64_t gy = checked::addSigned(primaryOffset.y, s.clipRect.origin.y, "primary_offset.y");
        elementwise::checkReadRegion(g, gx, gy, 1, 1, "source_gradient", "primary_offset",
                                     "NNReductionSpatialMeanGradient");
        if (availablePrimaryChannels(g) < n)
            throwValueError("source_gradient: provides ", availablePrimaryChannels(g), " feature channel(s) at primary_"
                            "source_feature_channel_offset ", primarySourceFeatureChannelOffset, " but the forward "
                            "pass wrote ", n);
        checkDestinationChannels(dst, n, "destination_gradient");
        zs.push_back(gradientImages(*this, g, *sourceImages[i], dst));
        SpatialMeanGradientParams p{};
        p.gradient = g.layout(primarySourceFeatureChannelOffset, n);
        p.destination = dst.layout(destinationFeatureChannelOffset, n);
        p.batch = zs.back().count;
        p.regionX = int32_t(state.sourceRegion.origin.x);
        p.regionY = int32_t(state.sourceRegion.origin.y);
        p.regionWidth = int32_t(state.sourceRegion.size.width);
        p.regionHeight = int32_t(state.sourceRegion.size.height);
        p.gradientX = checked::toInt32(gx, "primary_offset.x");
        p.gradientY = checked::toInt32(gy, "primary_offset.y");
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < params.size(); ++i)
        backend.spatialMeanGradient(cb, params[i], sourceGradients[i]->storage(zs[i].gradient),
                                    destinations[i]->storage(zs[i].destination));
}

}  // namespace mpsgrad
