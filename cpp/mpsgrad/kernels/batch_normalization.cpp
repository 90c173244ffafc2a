#include "kernels/batch_normalization.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <set>

#include "core/float16_shadow.h"
#include "core/errors.h"
#include "core/vector.h"
#include "kernels/data_source_loading.h"

namespace mpsgrad {
namespace {

constexpr const char* kForward = "CNNBatchNormalization";

size_t floatBytes(int64_t channels) { return size_t(channels) * sizeof(float); }

// ValueError unless `channels` is a usable channel count (>= 1, fits the kernels' 32-bit indices).
void checkChannelCount(int64_t channels, const char* what) {
    if (channels < 1 || channels > INT32_MAX / 4)
        throwValueError(what, ": the number of feature channels must be in [1, ", INT32_MAX / 4, "], got ", channels);
}

// Consecutive images of a batch stored back to back (as batch_from_numpy and the built-in
// allocators place them) are encoded as one backend op over all of them: one pass, one fork-join,
// instead of one per image. `follows(i)` says whether entry i continues entry i - 1; `encode(i, j)`
// encodes entries [i, j).
template <class Follows, class Encode>
void forEachRun(size_t count, Follows&& follows, Encode&& encode) {
    for (size_t i = 0; i < count;) {
        size_t j = i + 1;
        while (j < count && follows(j)) ++j;
        encode(i, j);
        i = j;
    }
}

BufferSlice uploadFloats(const Device& device, const float* values, int64_t count) {
    BufferSlice slice{device.backend().newBuffer(floatBytes(count)), 0};
    if (values) std::memcpy(slice.floats(), values, floatBytes(count));
    return slice;
}

void checkVector(const std::vector<float>& v, size_t count, const char* what) {
    if (v.size() != count) throwValueError(what, ": expected ", count, " values (one per feature channel), got ", v.size());
}

void checkVarianceEpsilon(const float* variance, int64_t channels, float epsilon, const char* what) {
    for (int64_t c = 0; c < channels; ++c)
        if (!(variance[c] + epsilon > 0.0f))
            throwValueError(what, ": variance + epsilon of channel ", c, " is ", variance[c] + epsilon,
                            "; it must be > 0");
}

bool sameNeuron(const NNNeuronDescriptor& a, const NNNeuronDescriptor& b) {
    return a.neuronType == b.neuronType && a.a == b.a && a.b == b.b && a.c == b.c && a.data == b.data;
}

void checkSameNeuron(const NNNeuronDescriptor& mine, const CNNBatchNormalizationState& state, const char* kernelName) {
    if (!sameNeuron(mine, state.neuron))
        throwValueError("fused_neuron_descriptor: ", kernelName, " has a ", neuronTypeName(mine.neuronType),
                        " neuron (a=", mine.a, ", b=", mine.b, ", c=", mine.c, ") but the forward ", kForward,
                        " that wrote batch_normalization_state used ", neuronTypeName(state.neuron.neuronType),
                        " (a=", state.neuron.a, ", b=", state.neuron.b, ", c=", state.neuron.c,
                        "); the descriptors must match");
}

void checkNeuron(const NNNeuronDescriptor& neuron, int64_t channels) {
    neuron.validate("fused_neuron_descriptor");
    if (neuron.neuronType == CNNNeuronType::PReLU && int64_t(neuron.data.size()) != channels)
        throwValueError("fused_neuron_descriptor: PReLU data has ", neuron.data.size(), " values but the batch "
                        "normalization has ", channels, " feature channels");
}

CNNBatchNormalizationState& bnState(const std::shared_ptr<State>& state, const char* what, const char* kernelName) {
    auto* s = dynamic_cast<CNNBatchNormalizationState*>(state.get());
    if (!s)
        throwTypeError(what, ": ", kernelName, " needs the CNNBatchNormalizationState made by ", kForward,
                       ".result_state, got ", state ? state->className() : "None");
    return *s;
}

// ValueError unless the image provides exactly `channels` channels at `offset` and the kernel
// covers the whole image (the family works on whole images).
void checkWholeImage(const Image& image, int64_t availableChannels, int64_t channels, const char* what,
                     const char* kernelName) {
    if (availableChannels != channels)
        throwValueError(what, ": provides ", availableChannels, " feature channel(s) but ", kernelName, " has ",
                        channels, " (number_of_feature_channels of its data source / state)");
    if (image.width() < 1 || image.height() < 1) throwValueError(what, ": the image is empty");
}

void checkDefaultGeometry(const Offset& offset, const Region& clip, const Region& defaultClip, const char* offsetName,
                          const char* kernelName) {
    if (offset.x != 0 || offset.y != 0)
        throwValueError(offsetName, ": ", kernelName, " works on whole images; the offset must be (0, 0), got (",
                        offset.x, ", ", offset.y, ")");
    if (clip.origin.x != defaultClip.origin.x || clip.origin.y != defaultClip.origin.y ||
        clip.size.width != defaultClip.size.width || clip.size.height != defaultClip.size.height)
        throwValueError("clip_rect: ", kernelName, " works on whole images; leave clip_rect at its default");
}

// Pixels of `images` images of w x h, checked to fit the kernels' 32-bit counts.
int64_t pixelCount(int64_t images, int64_t w, int64_t h, const char* what) {
    if (w > INT32_MAX / std::max<int64_t>(h, 1)) throwValueError(what, ": too many pixels");
    const int64_t perImage = w * h;
    if (images > INT32_MAX / std::max<int64_t>(perImage, 1)) throwValueError(what, ": too many pixels");
    return images * perImage;
}

Backend::BatchNormalizationVectors stateVectors(const CNNBatchNormalizationState& s) {
    Backend::BatchNormalizationVectors v;
    v.gamma = s.gamma();
    v.beta = s.beta();
    v.mean = s.mean();
    v.variance = s.variance();
    v.neuronData = s.neuronData;
    v.gammaGradient = s.resourceAtIndex(4);
    v.betaGradient = s.resourceAtIndex(5);
    return v;
}

// Every kernel that reads a temporary image decrements its read count once per encode (spec
// §1.5), an image listed twice in the batches included once (as CNNKernel's encodes do).
void noteReadsOnce(std::initializer_list<const ImageBatch*> batches) {
    std::set<const Image*> seen;
    for (const ImageBatch* batch : batches)
        for (const ImagePtr& image : *batch)
            if (image && seen.insert(image.get()).second) image->noteRead();
}

BatchNormalizationParams stateParams(const CNNBatchNormalizationState& s) {
    BatchNormalizationParams p{};
    p.epsilon = s.epsilon;
    p.neuron = s.neuron.params();
    p.trainingStatistics = 1;
    return p;
}

}  // namespace

// ---- states --------------------------------------------------------------------------------------

CNNNormalizationGammaAndBetaState::CNNNormalizationGammaAndBetaState(const Device& device, int64_t channels,
                                                                     bool temporary, const CommandBuffer* cb)
    : State(device, {}, temporary, cb), channels_(channels) {
    checkChannelCount(channels, "number_of_feature_channels");
    addBuffer(floatBytes(channels));
    addBuffer(floatBytes(channels));
}

CNNNormalizationGammaAndBetaState::CNNNormalizationGammaAndBetaState(const Device& device,
                                                                     const std::vector<float>& gamma,
                                                                     const std::vector<float>& beta)
    : CNNNormalizationGammaAndBetaState(device, int64_t(gamma.size()), false, nullptr) {
    checkVector(beta, gamma.size(), "beta");
    std::memcpy(this->gamma().floats(), gamma.data(), floatBytes(channels_));
    std::memcpy(this->beta().floats(), beta.data(), floatBytes(channels_));
}

CNNNormalizationGammaAndBetaState::CNNNormalizationGammaAndBetaState(const Device& device, int64_t channels,
                                                                     const BufferSlice& gamma, const BufferSlice& beta)
    : State(device, {}, false, nullptr), channels_(channels) {
    checkChannelCount(channels, "number_of_feature_channels");
    buffers_.push_back(aliasSlice(gamma, 0, floatBytes(channels), "gamma", "gamma_offset"));
    buffers_.push_back(aliasSlice(beta, 0, floatBytes(channels), "beta", "beta_offset"));
}

std::shared_ptr<CNNNormalizationGammaAndBetaState> CNNNormalizationGammaAndBetaState::temporary(CommandBuffer& cb,
                                                                                                int64_t channels) {
    cb.checkEncodable();
    return std::shared_ptr<CNNNormalizationGammaAndBetaState>(
        new CNNNormalizationGammaAndBetaState(cb.device(), channels, true, &cb));
}

CNNNormalizationMeanAndVarianceState::CNNNormalizationMeanAndVarianceState(const Device& device, int64_t channels,
                                                                           bool temporary, const CommandBuffer* cb)
    : State(device, {}, temporary, cb), channels_(channels) {
    checkChannelCount(channels, "number_of_feature_channels");
    addBuffer(floatBytes(channels));
    addBuffer(floatBytes(channels));
}

CNNNormalizationMeanAndVarianceState::CNNNormalizationMeanAndVarianceState(const Device& device,
                                                                           const std::vector<float>& mean,
                                                                           const std::vector<float>& variance)
    : CNNNormalizationMeanAndVarianceState(device, int64_t(mean.size()), false, nullptr) {
    checkVector(variance, mean.size(), "variance");
    // Epsilon is > 0 on every kernel, so a variance >= 0 keeps variance + epsilon > 0 wherever the state
    // is reloaded (a negative one would only surface when the forward runs: a command-buffer error on the
    // CPU, NaN on a GPU, which cannot raise).
    for (size_t c = 0; c < variance.size(); ++c)
        if (!(variance[c] >= 0.0f))
            throwValueError("variance: channel ", c, " is ", variance[c], "; a variance must be >= 0");
    std::memcpy(this->mean().floats(), mean.data(), floatBytes(channels_));
    std::memcpy(this->variance().floats(), variance.data(), floatBytes(channels_));
}

CNNNormalizationMeanAndVarianceState::CNNNormalizationMeanAndVarianceState(const Device& device, int64_t channels,
                                                                           const BufferSlice& mean,
                                                                           const BufferSlice& variance)
    : State(device, {}, false, nullptr), channels_(channels) {
    checkChannelCount(channels, "number_of_feature_channels");
    buffers_.push_back(aliasSlice(mean, 0, floatBytes(channels), "mean", "mean_offset"));
    buffers_.push_back(aliasSlice(variance, 0, floatBytes(channels), "variance", "variance_offset"));
}

std::shared_ptr<CNNNormalizationMeanAndVarianceState> CNNNormalizationMeanAndVarianceState::temporary(
    CommandBuffer& cb, int64_t channels) {
    cb.checkEncodable();
    return std::shared_ptr<CNNNormalizationMeanAndVarianceState>(
        new CNNNormalizationMeanAndVarianceState(cb.device(), channels, true, &cb));
}

CNNBatchNormalizationState::CNNBatchNormalizationState(std::shared_ptr<CNNBatchNormalization> kernel,
                                                       int64_t channels, bool temporary, const CommandBuffer* cb)
    : NNGradientState(kernel->device(), temporary, cb), kernel_(std::move(kernel)), channels_(channels) {
    for (int i = 0; i < 6; ++i) addBuffer(floatBytes(channels));
}

void CNNBatchNormalizationState::reset() {
    checkAccessible("batch_normalization_state");
    phase = Phase::Empty;
    statisticsCount = 0;
    statisticsGradientCount = 0;
    batchStatistics = false;
    snapshot.encoded = false;
}

// ---- the ready-made data source ------------------------------------------------------------------

CNNBatchNormalizationWeightsDataSource::CNNBatchNormalizationWeightsDataSource(
    std::vector<float> gamma, std::vector<float> beta, std::vector<float> mean, std::vector<float> variance,
    std::optional<float> epsilon, std::string label)
    : gamma_(std::move(gamma)), beta_(std::move(beta)), mean_(std::move(mean)), variance_(std::move(variance)),
      epsilon_(epsilon), label_(std::move(label)) {
    checkChannelCount(int64_t(gamma_.size()), "gamma");
    if (!beta_.empty()) checkVector(beta_, gamma_.size(), "beta");
    checkVector(mean_, gamma_.size(), "mean");
    checkVector(variance_, gamma_.size(), "variance");
}

namespace {

const CNNBatchNormalizationState& readableState(const std::shared_ptr<CNNBatchNormalizationState>& state,
                                                size_t channels) {
    if (!state) throwTypeError("batch_normalization_state: expected a CNNBatchNormalizationState, got None");
    if (size_t(state->numberOfFeatureChannels()) != channels)
        throwValueError("batch_normalization_state: has ", state->numberOfFeatureChannels(),
                        " feature channels but the data source has ", channels);
    return *state;
}

}  // namespace

bool CNNBatchNormalizationWeightsDataSource::updateGammaAndBetaWithBatchNormalizationState(
    const std::shared_ptr<CNNBatchNormalizationState>& state) {
    const auto& s = readableState(state, gamma_.size());
    if (!s.statisticsGradientCount)
        throwValueError("batch_normalization_state: holds no gradients yet (encode "
                        "CNNBatchNormalizationStatisticsGradient with it and wait for the command buffer)");
    const float* dGamma = s.gradientForGamma().floats();
    const float* dBeta = s.gradientForBeta().floats();
    if (beta_.empty()) beta_.assign(gamma_.size(), 0.0f);
    for (size_t c = 0; c < gamma_.size(); ++c) {
        gamma_[c] -= learningRate * dGamma[c];
        beta_[c] -= learningRate * dBeta[c];
    }
    state->noteRead();
    return true;
}

bool CNNBatchNormalizationWeightsDataSource::updateMeanAndVarianceWithBatchNormalizationState(
    const std::shared_ptr<CNNBatchNormalizationState>& state) {
    const auto& s = readableState(state, gamma_.size());
    if (!s.statisticsCount)
        throwValueError("batch_normalization_state: holds no batch statistics (encode "
                        "CNNBatchNormalizationStatistics with it and wait for the command buffer)");
    const float* mean = s.mean().floats();
    const float* variance = s.variance().floats();
    const double M = double(s.statisticsCount);
    const double correction = unbiasedRunningVariance && M > 1 ? M / (M - 1) : 1.0;
    for (size_t c = 0; c < mean_.size(); ++c) {
        mean_[c] = (1.0f - momentum) * mean_[c] + momentum * mean[c];
        variance_[c] = float((1.0 - momentum) * variance_[c] + momentum * double(variance[c]) * correction);
    }
    state->noteRead();
    return true;
}

// ---- forward -------------------------------------------------------------------------------------

CNNBatchNormalization::CNNBatchNormalization(const Device& device,
                                             std::shared_ptr<CNNBatchNormalizationDataSource> dataSource,
                                             const NNNeuronDescriptor& fusedNeuron)
    : CNNKernel(device), dataSource_(std::move(dataSource)), neuron_(fusedNeuron) {
    if (!dataSource_) throwTypeError("data_source: expected a CNNBatchNormalizationDataSource, got None");
    weights_.channels = dataSource_->numberOfFeatureChannels();
    checkChannelCount(weights_.channels, "data_source.number_of_feature_channels()");
    checkNeuron(neuron_, weights_.channels);
    const std::optional<float> e = dataSource_->epsilon();
    epsilon_ = FLT_MIN;
    if (e) setEpsilon(*e);
    if (!neuron_.data.empty()) weights_.neuronData = uploadFloats(device_, neuron_.data.data(), weights_.channels);
    reloadGammaAndBetaFromDataSource();
    reloadMeanAndVarianceFromDataSource();
}

void CNNBatchNormalization::setEpsilon(float value) {
    if (!(value > 0.0f) || !std::isfinite(value))
        throwValueError("epsilon: must be a finite value > 0, got ", value);
    epsilon_ = value;
}

void CNNBatchNormalization::reloadGammaAndBetaFromDataSource() {
    withLoaded(*dataSource_, [&] {
        if (dataSource_->numberOfFeatureChannels() != weights_.channels)
            throwValueError("data_source: number_of_feature_channels() changed from ", weights_.channels, " to ",
                            dataSource_->numberOfFeatureChannels());
        const float* gamma = dataSource_->gamma();
        if (!gamma) throwValueError("data_source: gamma() returned no data");
        BufferSlice g = uploadFloats(device_, gamma, weights_.channels);
        BufferSlice b = uploadFloats(device_, dataSource_->beta(), weights_.channels);  // null beta: zeros
        weights_.gamma = g;
        weights_.beta = b;
    });
}

void CNNBatchNormalization::reloadMeanAndVarianceFromDataSource() {
    withLoaded(*dataSource_, [&] {
        const float* mean = dataSource_->mean();
        const float* variance = dataSource_->variance();
        if (!mean || !variance) throwValueError("data_source: mean() and variance() must return data");
        checkVarianceEpsilon(variance, weights_.channels, epsilon_, "data_source.variance()");
        BufferSlice m = uploadFloats(device_, mean, weights_.channels);
        BufferSlice v = uploadFloats(device_, variance, weights_.channels);
        weights_.mean = m;
        weights_.variance = v;
    });
}

namespace {
// An encoded copy of `count` floats into a new buffer.
BufferSlice encodedCopy(Backend& backend, CommandBuffer& cb, const BufferSlice& from, int64_t count) {
    BufferSlice to{backend.newBuffer(floatBytes(count)), 0};
    backend.copyBuffer(cb, from, to, floatBytes(count));
    return to;
}

// The two copy methods: encoded copies of `from`'s `first` and `second` vectors into new buffers of `to`.
void copyVectorPair(Backend& backend, CommandBuffer& cb, const BatchNormalizationWeights& from,
                    BatchNormalizationWeights& to, BufferSlice BatchNormalizationWeights::*first,
                    BufferSlice BatchNormalizationWeights::*second) {
    if (from.channels != to.channels)
        throwValueError("from: has ", from.channels, " feature channels but this kernel has ", to.channels);
    to.*first = encodedCopy(backend, cb, from.*first, to.channels);
    to.*second = encodedCopy(backend, cb, from.*second, to.channels);
}
}  // namespace

void CNNBatchNormalization::copyGammaAndBetaWithCommandBuffer(CommandBuffer& cb, const CNNBatchNormalization& from) {
    checkCommandBuffer(cb);
    copyVectorPair(device_.backend(), cb, from.weights_, weights_, &BatchNormalizationWeights::gamma,
                   &BatchNormalizationWeights::beta);
}

void CNNBatchNormalization::copyMeanAndVarianceWithCommandBuffer(CommandBuffer& cb, const CNNBatchNormalization& from) {
    checkCommandBuffer(cb);
    copyVectorPair(device_.backend(), cb, from.weights_, weights_, &BatchNormalizationWeights::mean,
                   &BatchNormalizationWeights::variance);
}

void CNNBatchNormalization::reloadGammaAndBetaWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNNormalizationGammaAndBetaState>& state) {
    checkCommandBuffer(cb);
    if (!state) throwTypeError("gamma_and_beta_state: expected a CNNNormalizationGammaAndBetaState, got None");
    state->checkUsable(cb, "gamma_and_beta_state");
    if (state->numberOfFeatureChannels() != weights_.channels)
        throwValueError("gamma_and_beta_state: has ", state->numberOfFeatureChannels(), " feature channels but the ",
                        className(), " has ", weights_.channels);
    Backend& backend = device_.backend();
    BufferSlice g{backend.newBuffer(floatBytes(weights_.channels)), 0};
    BufferSlice b{backend.newBuffer(floatBytes(weights_.channels)), 0};
    backend.copyBuffer(cb, state->gamma(), g, floatBytes(weights_.channels));
    backend.copyBuffer(cb, state->beta(), b, floatBytes(weights_.channels));
    weights_.gamma = g;
    weights_.beta = b;
    state->noteRead();
}

void CNNBatchNormalization::reloadMeanAndVarianceWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNNormalizationMeanAndVarianceState>& state) {
    checkCommandBuffer(cb);
    if (!state) throwTypeError("mean_and_variance_state: expected a CNNNormalizationMeanAndVarianceState, got None");
    state->checkUsable(cb, "mean_and_variance_state");
    if (state->numberOfFeatureChannels() != weights_.channels)
        throwValueError("mean_and_variance_state: has ", state->numberOfFeatureChannels(),
                        " feature channels but the ", className(), " has ", weights_.channels);
    Backend& backend = device_.backend();
    BufferSlice m{backend.newBuffer(floatBytes(weights_.channels)), 0};
    BufferSlice v{backend.newBuffer(floatBytes(weights_.channels)), 0};
    backend.copyBuffer(cb, state->mean(), m, floatBytes(weights_.channels));
    backend.copyBuffer(cb, state->variance(), v, floatBytes(weights_.channels));
    weights_.mean = m;
    weights_.variance = v;
    state->noteRead();
}

StatePtr CNNBatchNormalization::makeResultState(const Image&, CommandBuffer* cb) {
    std::shared_ptr<CNNBatchNormalization> self;
    try {
        self = std::static_pointer_cast<CNNBatchNormalization>(shared_from_this());
    } catch (const std::bad_weak_ptr&) {
        throwValueError(className(), ": result_state needs a kernel owned by a shared_ptr");
    }
    return std::make_shared<CNNBatchNormalizationState>(self, weights_.channels, cb != nullptr, cb);
}

ImagePtr CNNBatchNormalization::encode(CommandBuffer& cb, const ImagePtr& source,
                                       const std::shared_ptr<CNNBatchNormalizationState>& state) {
    return encodeBatch(cb, ImageBatch{source}, state).front();
}

ImageBatch CNNBatchNormalization::encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                                              const std::shared_ptr<CNNBatchNormalizationState>& state) {
    checkCommandBuffer(cb);
    if (sources.empty()) throwValueError("source_images: the batch is empty");
    for (const ImagePtr& source : sources) {
        if (!source) throwTypeError("source_image: expected an Image, got None");
        // A multi-image source would get a one-image destination: image 0 only.
        if (source->numberOfImages() != 1)
            throwValueError("source_image: the returning encode forms need images with number_of_images == 1, got ",
                            source->numberOfImages(), " (use batch_representation() or pass destination_image)");
    }
    ImageBatch destinations = allocateDestinationImages(cb, sources, sources.size());
    encodeBatch(cb, sources, state ? StateBatch(sources.size(), state) : StateBatch{}, destinations);
    return destinations;
}

void CNNBatchNormalization::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                       const StateBatch& states) {
    const int64_t C = weights_.channels;
    CNNBatchNormalizationState* state = nullptr;
    if (!states.empty()) {
        state = &bnState(states.front(), "batch_normalization_state", className());
        if (state->numberOfFeatureChannels() != C)
            throwValueError("batch_normalization_state: has ", state->numberOfFeatureChannels(),
                            " feature channels but the ", className(), " has ", C);
    }
    std::vector<BatchNormalizationParams> params;
    for (const UnaryDispatch& d : dispatches) {
        checkWholeImage(*d.source, d.sourceChannels, C, "source_image", className());
        checkDestinationChannels(*d.destination, C);
        if (d.destination->width() != d.source->width() || d.destination->height() != d.source->height())
            throwValueError("destination_image: is ", d.destination->width(), "x", d.destination->height(),
                            " but the source image is ", d.source->width(), "x", d.source->height());
        checkDefaultGeometry(offset, clipRect, rectNoClip(), "offset", className());
        pixelCount(d.imageCount, d.source->width(), d.source->height(), "source_image");
        BatchNormalizationParams p{};
        p.source = d.source->layout(d.sourceChannelOffset, C);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, C);
        p.gradient = p.source;
        p.batch = int32_t(d.imageCount);
        p.neuron = neuron_.params();
        params.push_back(p);
    }
    // Statistics: the state's batch statistics once a statistics kernel has run on it, else the
    // data source's (inference), which are copied into the state for the gradient kernels.
    Backend& backend = device_.backend();
    Backend::BatchNormalizationVectors v;
    v.gamma = weights_.gamma;
    v.beta = weights_.beta;
    v.mean = weights_.mean;
    v.variance = weights_.variance;
    v.neuronData = weights_.neuronData;
    float epsilon = epsilon_;
    if (state) {
        const size_t bytes = floatBytes(C);
        const bool training = state->statisticsCount > 0 && state->phase == CNNBatchNormalizationState::Phase::Statistics;
        const bool continuing = state->phase == CNNBatchNormalizationState::Phase::Forward;
        if (!continuing) {
            state->batchStatistics = state->statisticsCount > 0 && training;
            if (!state->batchStatistics) {
                backend.copyBuffer(cb, weights_.mean, state->mean(), bytes);
                backend.copyBuffer(cb, weights_.variance, state->variance(), bytes);
            }
            backend.copyBuffer(cb, weights_.gamma, state->gamma(), bytes);
            backend.copyBuffer(cb, weights_.beta, state->beta(), bytes);
            state->epsilon = epsilon_;
            state->neuron = neuron_;
            state->neuronData = weights_.neuronData;
            state->statisticsGradientCount = 0;
        }
        v = stateVectors(*state);
        epsilon = state->epsilon;
        state->phase = CNNBatchNormalizationState::Phase::Forward;
        elementwise::recordUnaryForward(state->snapshot, *this, dispatches.front(), offset, C,
                                        dispatches.front().imageCount);
    }
    auto single = [&](size_t i) {
        return dispatches[i].source->numberOfImages() == 1 && dispatches[i].destination->numberOfImages() == 1;
    };
    forEachRun(
        dispatches.size(),
        [&](size_t j) {
            return single(j - 1) && single(j) && dispatches[j - 1].source->isFollowedBy(*dispatches[j].source) &&
                   dispatches[j - 1].destination->isFollowedBy(*dispatches[j].destination) &&
                   dispatches[j - 1].sourceChannelOffset == dispatches[j].sourceChannelOffset;
        },
        [&](size_t i, size_t j) {
            BatchNormalizationParams p = params[i];
            p.epsilon = epsilon;
            for (size_t k = i + 1; k < j; ++k) p.batch += params[k].batch;
            const UnaryDispatch& d = dispatches[i];
            backend.batchNormalizationForward(cb, p, d.source->storage(d.sourceImageIndex), v,
                                              d.destination->storage(d.destinationImageIndex));
        });
    if (state) state->noteRead();
}

// ---- statistics ----------------------------------------------------------------------------------

void CNNBatchNormalizationStatistics::encodeImpl(CommandBuffer&, const std::vector<UnaryDispatch>&,
                                                 const StateBatch&) {
    throwTypeError(className(), ": only encode_batch(command_buffer, source_images, batch_normalization_state) is "
                   "available (MPS marks the image-producing encodes unavailable)");
}

void CNNBatchNormalizationStatistics::encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                                                  const std::shared_ptr<CNNBatchNormalizationState>& state) {
    checkCommandBuffer(cb);
    if (!state) throwTypeError("batch_normalization_state: expected a CNNBatchNormalizationState, got None");
    state->checkUsable(cb, "batch_normalization_state");
    if (sources.empty()) throwValueError("source_images: the batch is empty");
    const int64_t C = state->numberOfFeatureChannels();
    checkDefaultGeometry(offset, clipRect, rectNoClip(), "offset", className());
    const bool accumulate = state->phase == CNNBatchNormalizationState::Phase::Statistics;
    int64_t count = accumulate ? state->statisticsCount : 0;
    std::vector<BatchNormalizationParams> params;
    Float32Shadows shadows(cb);  // FLOAT16 images: core/float16_shadow.h
    for (const ImagePtr& source : sources)
        if (source) source->checkUsable(cb, "source_image");
    shadows.cover({&sources});  // one conversion per batch block
    ImageBatch sources32;
    for (const ImagePtr& source : sources) {
        if (!source) throwTypeError("source_images: expected a list of Images, got None in it");
        source->checkUsable(cb, "source_image");
        checkWholeImage(*source, availableSourceChannels(*source), C, "source_images", className());
        const int64_t m = pixelCount(source->numberOfImages(), source->width(), source->height(), "source_images");
        sources32.push_back(shadows.read(source));
        BatchNormalizationParams p{};
        p.source = sources32.back()->layout(sourceFeatureChannelOffset, C);
        p.gradient = p.destination = p.source;
        p.batch = int32_t(source->numberOfImages());
        p.previousCount = int32_t(count);
        if (count > INT32_MAX - m) throwValueError("source_images: the batch has more than 2^31 pixels per channel");
        count += m;
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    Backend::BatchNormalizationVectors v;
    v.mean = state->mean();
    v.variance = state->variance();
    forEachRun(
        sources.size(), [&](size_t j) { return sources32[j - 1]->isFollowedBy(*sources32[j]); },
        [&](size_t i, size_t j) {
            BatchNormalizationParams p = params[i];
            for (size_t k = i + 1; k < j; ++k) p.batch += params[k].batch;
            backend.batchNormalizationStatistics(cb, p, sources32[i]->storage(0), v);
        });
    state->statisticsCount = count;
    state->statisticsGradientCount = 0;
    state->phase = CNNBatchNormalizationState::Phase::Statistics;
    noteReadsOnce({&sources});
}

// ---- statistics gradient ---------------------------------------------------------------------------

CNNBatchNormalizationStatisticsGradient::CNNBatchNormalizationStatisticsGradient(const Device& device,
                                                                                 const NNNeuronDescriptor& fusedNeuron)
    : CNNGradientKernel(device), neuron_(fusedNeuron) {
    neuron_.validate("fused_neuron_descriptor");
}

void CNNBatchNormalizationStatisticsGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const CNNBatchNormalizationState*>(&state))
        throwTypeError("gradient_state: ", className(), " needs a CNNBatchNormalizationState, got ", state.className());
}

void CNNBatchNormalizationStatisticsGradient::encodeGradientImpl(CommandBuffer&, const ImageBatch&, const ImageBatch&,
                                                                 const StateBatch&, const ImageBatch&) {
    throwTypeError(className(), ": only encode_batch(command_buffer, source_gradients, source_images, "
                   "batch_normalization_state) is available (MPS marks the generic gradient encodes unavailable)");
}

void CNNBatchNormalizationStatisticsGradient::encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                          const ImageBatch& sourceImages,
                                                          const std::shared_ptr<CNNBatchNormalizationState>& state) {
    checkCommandBuffer(cb);
    if (!state) throwTypeError("batch_normalization_state: expected a CNNBatchNormalizationState, got None");
    state->checkUsable(cb, "batch_normalization_state");
    if (sourceGradients.empty()) throwValueError("source_gradients: the batch is empty");
    if (sourceGradients.size() != sourceImages.size())
        throwValueError("source_images: has ", sourceImages.size(), " images but source_gradients has ",
                        sourceGradients.size());
    using Phase = CNNBatchNormalizationState::Phase;
    if (!state->snapshot.encoded || state->phase == Phase::Empty || state->phase == Phase::Statistics)
        throwValueError("batch_normalization_state: ", className(), " needs a state the forward ", kForward,
                        " has encoded with (after its statistics)");
    checkSameNeuron(neuron_, *state, className());
    checkDefaultGeometry(primaryOffset, clipRect, rectNoClip(), "primary_offset", className());
    checkDefaultGeometry(secondaryOffset, clipRect, rectNoClip(), "secondary_offset", className());
    const int64_t C = state->numberOfFeatureChannels();
    const bool accumulate = state->phase == Phase::StatisticsGradient;
    int64_t count = accumulate ? state->statisticsGradientCount : 0;
    std::vector<BatchNormalizationParams> params;
    Float32Shadows shadows(cb);  // FLOAT16 images: core/float16_shadow.h
    for (size_t i = 0; i < sourceGradients.size() && i < sourceImages.size(); ++i) {
        if (sourceGradients[i]) sourceGradients[i]->checkUsable(cb, "source_gradient");
        if (sourceImages[i]) sourceImages[i]->checkUsable(cb, "source_image");
    }
    shadows.cover({&sourceGradients, &sourceImages});  // one conversion per batch block
    ImageBatch gradients32, images32;
    for (size_t i = 0; i < sourceGradients.size(); ++i) {
        const ImagePtr& g = sourceGradients[i];
        const ImagePtr& x = sourceImages[i];
        if (!g || !x) throwTypeError("source_gradients / source_images: expected lists of Images, got None in them");
        g->checkUsable(cb, "source_gradient");
        x->checkUsable(cb, "source_image");
        gradients32.push_back(shadows.read(g));
        images32.push_back(shadows.read(x));
        checkWholeImage(*x, availableSecondaryChannels(*x), C, "source_images", className());
        checkWholeImage(*g, availablePrimaryChannels(*g), C, "source_gradients", className());
        if (g->width() != x->width() || g->height() != x->height() || g->numberOfImages() != x->numberOfImages())
            throwValueError("source_gradients: image ", i, " is ", g->width(), "x", g->height(), "x",
                            g->numberOfImages(), " but its source image is ", x->width(), "x", x->height(), "x",
                            x->numberOfImages());
        const int64_t m = pixelCount(x->numberOfImages(), x->width(), x->height(), "source_images");
        BatchNormalizationParams p = stateParams(*state);
        p.source = images32.back()->layout(secondarySourceFeatureChannelOffset, C);
        p.gradient = gradients32.back()->layout(primarySourceFeatureChannelOffset, C);
        p.destination = p.source;
        p.batch = int32_t(x->numberOfImages());
        p.previousCount = int32_t(count > 0 ? 1 : 0);
        if (count > INT32_MAX - m) throwValueError("source_images: the batch has more than 2^31 pixels per channel");
        count += m;
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    const Backend::BatchNormalizationVectors v = stateVectors(*state);
    forEachRun(
        params.size(),
        [&](size_t j) {
            return gradients32[j - 1]->isFollowedBy(*gradients32[j]) &&
                   images32[j - 1]->isFollowedBy(*images32[j]);
        },
        [&](size_t i, size_t j) {
            BatchNormalizationParams p = params[i];
            for (size_t k = i + 1; k < j; ++k) p.batch += params[k].batch;
            backend.batchNormalizationStatisticsGradient(cb, p, gradients32[i]->storage(0),
                                                         images32[i]->storage(0), v);
        });
    state->statisticsGradientCount = count;
    state->phase = Phase::StatisticsGradient;
    state->noteRead();
    noteReadsOnce({&sourceGradients, &sourceImages});
}

// ---- gradient --------------------------------------------------------------------------------------

CNNBatchNormalizationGradient::CNNBatchNormalizationGradient(const Device& device,
                                                             const NNNeuronDescriptor& fusedNeuron)
    : CNNGradientKernel(device), neuron_(fusedNeuron) {
    neuron_.validate("fused_neuron_descriptor");
}

void CNNBatchNormalizationGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const CNNBatchNormalizationState*>(&state))
        throwTypeError("gradient_state: ", className(), " needs the CNNBatchNormalizationState of the forward ",
                       kForward, ", got ", state.className());
}

void CNNBatchNormalizationGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    primaryOffset = secondaryOffset = Offset{0, 0, 0};
    clipRect = rectNoClip();
    primaryEdgeMode = secondaryEdgeMode = ImageEdgeMode::Zero;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNBatchNormalizationGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                       const ImageBatch& sourceImages, const StateBatch& states,
                                                       const ImageBatch& destinations) {
    using Phase = CNNBatchNormalizationState::Phase;
    checkDefaultGeometry(primaryOffset, clipRect, rectNoClip(), "primary_offset", className());
    checkDefaultGeometry(secondaryOffset, clipRect, rectNoClip(), "secondary_offset", className());
    std::vector<BatchNormalizationParams> params;
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = bnState(states[i], "gradient_state", className());
        const int64_t C = state.numberOfFeatureChannels();
        checkSameNeuron(neuron_, state, className());
        // The batch-statistics formula differentiates through μ and σ², so it applies only when the
        // forward normalized with the batch's statistics. With constant ones (no statistics kernel
        // ran: the data source's, as CALCULATE_STATISTICS_NEVER in a training graph) dX is
        // γ/√(σ²+ε)·G' (spec §2.5), whatever training_statistics says.
        const bool batchFormula = trainingStatistics && state.batchStatistics;
        const bool haveGradients =
            state.statisticsGradientCount > 0 && (state.phase == Phase::StatisticsGradient || state.phase == Phase::Gradient);
        if (batchFormula && !haveGradients)
            throwValueError("gradient_state: ", className(), " (training_statistics=True) needs "
                            "CNNBatchNormalizationStatisticsGradient to have been encoded with this state first, "
                            "over the whole batch");
        if (state.phase == Phase::Statistics || state.phase == Phase::Empty)
            throwValueError("gradient_state: the forward ", kForward, " has not encoded with this state since its "
                            "statistics");
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        checkWholeImage(x, availableSecondaryChannels(x), C, "source_image", className());
        checkWholeImage(g, availablePrimaryChannels(g), C, "source_gradient", className());
        checkDestinationChannels(dst, C, "destination_gradient");
        if (g.width() != x.width() || g.height() != x.height() || dst.width() != x.width() ||
            dst.height() != x.height())
            throwValueError("source_gradient / destination_gradient: must be the size of the source image (",
                            x.width(), "x", x.height(), ")");
        // Legacy multi-image images: G from the images the forward wrote, X and dX from those it read.
        const int64_t gz = primaryOffset.z, xz = secondaryOffset.z, dz = clipRect.origin.z;
        if (gz < 0 || gz >= g.numberOfImages() || xz < 0 || xz >= x.numberOfImages() || dz < 0 ||
            dz >= dst.numberOfImages())
            throwValueError("primary_offset / secondary_offset / clip_rect: z selects an image the source_gradient, "
                            "source_image or destination_gradient does not have");
        const int64_t images = std::min<int64_t>({int64_t(std::min<uint64_t>(clipRect.size.depth, uint64_t(INT32_MAX))),
                                                  g.numberOfImages() - gz, x.numberOfImages() - xz,
                                                  dst.numberOfImages() - dz});
        pixelCount(images, x.width(), x.height(), "source_image");
        BatchNormalizationParams p = stateParams(state);
        p.source = x.layout(secondarySourceFeatureChannelOffset, C);
        p.gradient = g.layout(primarySourceFeatureChannelOffset, C);
        p.destination = dst.layout(destinationFeatureChannelOffset, C);
        p.batch = int32_t(images);
        p.totalCount = int32_t(state.statisticsGradientCount);
        p.trainingStatistics = batchFormula ? 1 : 0;
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    // Whole Images whose three images hold the same number of images, so that a run's p.batch covers each.
    const Offset gz = primaryOffset, xz = secondaryOffset;
    auto even = [&](size_t i) {
        return gz.z == 0 && xz.z == 0 && clipRect.origin.z == 0 && params[i].batch == sourceImages[i]->numberOfImages() &&
               sourceGradients[i]->numberOfImages() == sourceImages[i]->numberOfImages() &&
               destinations[i]->numberOfImages() == sourceImages[i]->numberOfImages();
    };
    forEachRun(
        params.size(),
        [&](size_t j) {
            return states[j] == states[j - 1] && even(j - 1) && even(j) &&
                   sourceGradients[j - 1]->isFollowedBy(*sourceGradients[j]) &&
                   sourceImages[j - 1]->isFollowedBy(*sourceImages[j]) &&
                   destinations[j - 1]->isFollowedBy(*destinations[j]);
        },
        [&](size_t i, size_t j) {
            auto& state = static_cast<CNNBatchNormalizationState&>(*states[i]);
            BatchNormalizationParams p = params[i];
            for (size_t k = i + 1; k < j; ++k) p.batch += params[k].batch;
            backend.batchNormalizationGradient(cb, p, sourceGradients[i]->storage(gz.z), sourceImages[i]->storage(xz.z),
                                               stateVectors(state), destinations[i]->storage(clipRect.origin.z));
            state.phase = Phase::Gradient;
        });
}

}  // namespace mpsgrad
