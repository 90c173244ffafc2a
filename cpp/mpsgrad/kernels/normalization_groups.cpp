#include "kernels/normalization_groups.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <set>

#include "core/errors.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {
namespace {

size_t floatBytes(int64_t count) { return size_t(count) * sizeof(float); }

// ValueError unless the image provides exactly `channels` channels and is not empty.
void checkChannels(const Image& image, int64_t available, int64_t channels, const char* what, const char* kernel) {
    if (available != channels)
        throwValueError(what, ": provides ", available, " feature channel(s) but ", kernel, " has ", channels,
                        " (number_of_feature_channels of its data source)");
    if (image.width() < 1 || image.height() < 1) throwValueError(what, ": the image is empty");
}

void checkWholeImages(const Offset& offset, const Region& clip, const char* offsetName, const char* kernel) {
    if (offset.x != 0 || offset.y != 0)
        throwValueError(offsetName, ": ", kernel, " works on whole images; the offset must be (0, 0), got (",
                        offset.x, ", ", offset.y, ")");
    const Region d = rectNoClip();
    if (clip.origin.x != d.origin.x || clip.origin.y != d.origin.y || clip.size.width != d.size.width ||
        clip.size.height != d.size.height)
        throwValueError("clip_rect: ", kernel, " works on whole images; leave clip_rect at its default");
}

// ValueError unless `images` images of w x h x channels fit the kernels' 32-bit indices.
void checkValueCount(int64_t images, const Image& image, int64_t channels, const char* what) {
    const int64_t perImage = image.width() * image.height() * std::max<int64_t>(channels, 1);
    if (image.width() > INT32_MAX / image.height() || perImage > INT32_MAX / std::max<int64_t>(images, 1))
        throwValueError(what, ": too many values (the kernels index with 32-bit integers)");
}

}  // namespace

namespace groupnorm {

void checkEpsilon(float value, const char* what) {
    if (!(value > 0.0f) || !std::isfinite(value)) throwValueError(what, ": must be a finite value > 0, got ", value);
}

void checkVectorSize(const std::vector<float>& v, size_t count, const char* what) {
    if (v.size() != count) throwValueError(what, ": expected ", count, " values (one per feature channel), got ", v.size());
}

void sgdUpdateStates(std::vector<float>& gamma, std::vector<float>& beta, float learningRate,
                     const std::vector<GroupNormalizationGradientStateBase*>& states, const char* what) {
    if (states.empty()) throwValueError(what, ": the batch of states is empty");
    std::vector<double> dGamma(gamma.size(), 0.0), dBeta(gamma.size(), 0.0);
    for (const auto* s : states) {
        if (!s) throwTypeError(what, ": expected gradient states, got None in the batch");
        if (size_t(s->numberOfFeatureChannels()) != gamma.size())
            throwValueError(what, ": a state has ", s->numberOfFeatureChannels(), " feature channels but the data "
                            "source has ", gamma.size());
        if (!s->gradientsEncoded)
            throwValueError(what, ": a state holds no gradients yet (encode the gradient kernel with it and wait for "
                            "the command buffer)");
        if (s->isTemporary() && s->readCount() < 1)
            throwValueError(what, ": a temporary state's read_count is 0; it can no longer be read");
    }
    // MPS: the update sums the gradients of every image of the batch.
    for (const auto* s : states) {
        const float* g = s->gradientForGamma().floats();
        const float* b = s->gradientForBeta().floats();
        for (size_t c = 0; c < gamma.size(); ++c) {
            dGamma[c] += g[c];
            dBeta[c] += b[c];
        }
    }
    if (beta.empty()) beta.assign(gamma.size(), 0.0f);
    for (size_t c = 0; c < gamma.size(); ++c) {
        gamma[c] = float(double(gamma[c]) - double(learningRate) * dGamma[c]);
        beta[c] = float(double(beta[c]) - double(learningRate) * dBeta[c]);
    }
    std::set<const State*> seen;
    for (auto* s : states)
        if (seen.insert(s).second) s->noteRead();
}

}  // namespace groupnorm

// ---- state -------------------------------------------------------------------------------------------

GroupNormalizationGradientStateBase::GroupNormalizationGradientStateBase(const Device& device, int64_t channels,
                                                                         int64_t groups, int64_t images,
                                                                         bool temporary, const CommandBuffer* cb)
    : NNGradientState(device, temporary, cb), channels_(channels), groups_(groups), imageCapacity_(images) {
    if (images < 1 || images > INT32_MAX / (2 * groups))
        throwValueError("source_image: number_of_images ", images, " is out of range");
    for (int i = 0; i < 4; ++i) addBuffer(floatBytes(channels));
    addBuffer(floatBytes(2 * images * groups));
}

// ---- forward -----------------------------------------------------------------------------------------

GroupNormalizationKernelBase::GroupNormalizationKernelBase(const Device& device, int64_t channels, int64_t groups,
                                                           const char* what)
    : CNNKernel(device), epsilon_(FLT_MIN), channels_(channels), groups_(groups) {
    if (channels < 1 || channels > INT32_MAX / 4)
        throwValueError(what, ".number_of_feature_channels(): must be in [1, ", INT32_MAX / 4, "], got ", channels);
    if (groups < 1 || channels % groups != 0)
        throwValueError(what, ".number_of_groups(): ", groups, " groups do not divide the ", channels,
                        " feature channels (it must be >= 1 and divide number_of_feature_channels)");
}

void GroupNormalizationKernelBase::setEpsilon(float value) {
    groupnorm::checkEpsilon(value, "epsilon");
    epsilon_ = value;
}

void GroupNormalizationKernelBase::setGammaAndBeta(const float* gamma, const float* beta, const char* what) {
    if (!gamma) throwValueError(what, ".gamma(): returned no data");
    Backend& backend = device_.backend();
    BufferSlice g{backend.newBuffer(floatBytes(channels_)), 0};
    BufferSlice b{backend.newBuffer(floatBytes(channels_)), 0};
    std::memcpy(g.floats(), gamma, floatBytes(channels_));
    if (beta) std::memcpy(b.floats(), beta, floatBytes(channels_));
    else std::memset(b.floats(), 0, floatBytes(channels_));
    gamma_ = g;
    beta_ = b;
}

void GroupNormalizationKernelBase::reloadGammaAndBetaWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNNormalizationGammaAndBetaState>& state) {
    checkCommandBuffer(cb);
    if (!state) throwTypeError("gamma_and_beta_state: expected a CNNNormalizationGammaAndBetaState, got None");
    state->checkUsable(cb, "gamma_and_beta_state");
    if (state->numberOfFeatureChannels() != channels_)
        throwValueError("gamma_and_beta_state: has ", state->numberOfFeatureChannels(), " feature channels but the ",
                        className(), " has ", channels_);
    // New buffers: encodes already in the command buffer keep reading the old values.
    Backend& backend = device_.backend();
    BufferSlice g{backend.newBuffer(floatBytes(channels_)), 0};
    BufferSlice b{backend.newBuffer(floatBytes(channels_)), 0};
    backend.copyBuffer(cb, state->gamma(), g, floatBytes(channels_));
    backend.copyBuffer(cb, state->beta(), b, floatBytes(channels_));
    gamma_ = g;
    beta_ = b;
    state->noteRead();
}

StatePtr GroupNormalizationKernelBase::makeResultState(const Image& source, CommandBuffer* cb) {
    return newState(source.numberOfImages(), cb);
}

void GroupNormalizationKernelBase::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                              const StateBatch& states) {
    checkWholeImages(offset, clipRect, "offset", className());
    std::vector<GroupNormalizationParams> params;
    std::vector<GroupNormalizationGradientStateBase*> familyStates;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        checkChannels(*d.source, d.sourceChannels, channels_, "source_image", className());
        checkDestinationChannels(*d.destination, channels_);
        if (d.destination->width() != d.source->width() || d.destination->height() != d.source->height())
            throwValueError("destination_image: is ", d.destination->width(), "x", d.destination->height(),
                            " but the source image is ", d.source->width(), "x", d.source->height());
        checkValueCount(d.imageCount, *d.source, channels_, "source_image");
        GroupNormalizationGradientStateBase* s = nullptr;
        if (!states.empty()) {
            s = &familyState(states[i], "destination_state");
            if (s->numberOfFeatureChannels() != channels_ || s->numberOfGroups() != groups_)
                throwValueError("destination_state: was made for ", s->numberOfFeatureChannels(), " channels in ",
                                s->numberOfGroups(), " groups but ", className(), " has ", channels_, " in ", groups_);
            if (d.imageCount > s->imageCapacity())
                throwValueError("destination_state: has room for ", s->imageCapacity(), " image(s) but the source "
                                "dispatch has ", d.imageCount);
        }
        GroupNormalizationParams p{};
        p.source = d.source->layout(d.sourceChannelOffset, channels_);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, channels_);
        p.gradient = p.source;
        p.batch = int32_t(d.imageCount);
        p.groups = int32_t(groups_);
        p.epsilon = epsilon_;
        params.push_back(p);
        familyStates.push_back(s);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        GroupNormalizationGradientStateBase* s = familyStates[i];
        Backend::GroupNormalizationVectors v;
        v.gamma = gamma_;
        v.beta = beta_;
        if (s) {
            // The state keeps the values this forward used, for the gradient and the data source.
            backend.copyBuffer(cb, gamma_, s->gamma(), floatBytes(channels_));
            backend.copyBuffer(cb, beta_, s->beta(), floatBytes(channels_));
            v.statistics = s->statistics();
            s->epsilon = epsilon_;
            s->images = d.imageCount;
            s->gradientsEncoded = false;
            elementwise::recordUnaryForward(s->snapshot, *this, d, offset, channels_, d.imageCount);
        } else {
            v.statistics = BufferSlice{backend.newBuffer(floatBytes(2 * d.imageCount * groups_)), 0};
        }
        backend.groupNormalizationForward(cb, params[i], d.source->storage(d.sourceImageIndex), v,
                                          d.destination->storage(d.destinationImageIndex));
    }
}

// ---- gradient ----------------------------------------------------------------------------------------

void GroupNormalizationGradientBase::checkGradientStateType(const State& state) const {
    if (!familyState(const_cast<State&>(state)))
        throwTypeError("gradient_state: ", className(), " needs the ", stateClassName(), " of the forward ",
                       forwardClassName(), ", got ", state.className());
}

void GroupNormalizationGradientBase::configureFromSnapshot(const ForwardSnapshot& s) {
    primaryOffset = secondaryOffset = Offset{0, 0, 0};
    clipRect = rectNoClip();
    primaryEdgeMode = secondaryEdgeMode = ImageEdgeMode::Zero;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void GroupNormalizationGradientBase::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                        const ImageBatch& sourceImages, const StateBatch& states,
                                                        const ImageBatch& destinations) {
    checkWholeImages(primaryOffset, clipRect, "primary_offset", className());
    checkWholeImages(secondaryOffset, clipRect, "secondary_offset", className());
    std::vector<GroupNormalizationParams> params;
    std::vector<GroupNormalizationGradientStateBase*> familyStates;
    for (size_t i = 0; i < states.size(); ++i) {
        GroupNormalizationGradientStateBase* s = familyState(*states[i]);
        for (size_t k = 0; k < i; ++k)
            if (familyStates[k] == s)
                throwValueError("gradient_states: every image needs its own ", stateClassName(), " (the state of its "
                                "forward pass); the same state appears twice");
        const int64_t C = s->numberOfFeatureChannels();
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        checkChannels(x, availableSecondaryChannels(x), C, "source_image", className());
        checkChannels(g, availablePrimaryChannels(g), C, "source_gradient", className());
        checkDestinationChannels(dst, C, "destination_gradient");
        const ForwardSnapshot& f = s->snapshot;
        if (x.width() != f.sourceWidth || x.height() != f.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward pass normalized a ",
                            f.sourceWidth, "x", f.sourceHeight, " image");
        if (g.width() != x.width() || g.height() != x.height() || dst.width() != x.width() ||
            dst.height() != x.height())
            throwValueError("source_gradient / destination_gradient: must be the size of the source image (",
                            x.width(), "x", x.height(), ")");
        // Legacy multi-image images: from the images the forward wrote (G) and read (X, dX).
        if (primaryOffset.z < 0 || secondaryOffset.z < 0 || clipRect.origin.z < 0 ||
            g.numberOfImages() - primaryOffset.z < s->images || x.numberOfImages() - secondaryOffset.z < s->images ||
            dst.numberOfImages() - clipRect.origin.z < s->images)
            throwValueError("source_image: the forward pass normalized ", s->images, " image(s); the gradient (from "
                            "primary_offset.z ", primaryOffset.z, "), source (from secondary_offset.z ",
                            secondaryOffset.z, ") and destination (from clip_rect.origin.z ", clipRect.origin.z,
                            ") must hold as many");
        GroupNormalizationParams p{};
        p.source = x.layout(secondarySourceFeatureChannelOffset, C);
        p.gradient = g.layout(primarySourceFeatureChannelOffset, C);
        p.destination = dst.layout(destinationFeatureChannelOffset, C);
        p.batch = int32_t(s->images);
        p.groups = int32_t(s->numberOfGroups());
        p.epsilon = s->epsilon;
        params.push_back(p);
        familyStates.push_back(s);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < params.size(); ++i) {
        GroupNormalizationGradientStateBase* s = familyStates[i];
        Backend::GroupNormalizationVectors v;
        v.gamma = s->gamma();
        v.beta = s->beta();
        v.statistics = s->statistics();
        v.gammaGradient = s->resourceAtIndex(2);
        v.betaGradient = s->resourceAtIndex(3);
        backend.groupNormalizationGradient(cb, params[i], sourceGradients[i]->storage(primaryOffset.z),
                                           sourceImages[i]->storage(secondaryOffset.z), v,
                                           destinations[i]->storage(clipRect.origin.z));
        s->gradientsEncoded = true;
    }
}

}  // namespace mpsgrad
