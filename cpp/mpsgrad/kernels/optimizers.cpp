#include "kernels/optimizers.h"

#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/host_access.h"
#include "kernels/batch_normalization.h"
#include "kernels/convolution.h"

namespace mpsgrad {
namespace {

void checkFinite(float value, const char* name) {
    if (!std::isfinite(value)) throwValueError(name, ": must be finite, got ", value);
}

// Any finite value, as MPS: a negative learning rate (with a negative L2 scale) turns SGD into the
// moving average that Turi Create keeps batch-normalization statistics with
// (docs/losses_and_optimizers.md, "Negative learning rates").
void checkLearningRate(float learningRate) { checkFinite(learningRate, "learning_rate"); }

// beta1, beta2, decay, momentum: in [0, 1).
void checkUnitInterval(double value, const char* name) {
    if (!(value >= 0.0 && value < 1.0)) throwValueError(name, ": must be in [0, 1), got ", value);
}

void checkEpsilon(float epsilon) {
    checkFinite(epsilon, "epsilon");
    if (epsilon < 0.0f) throwValueError("epsilon: must be >= 0, got ", epsilon);
}

int32_t regularizationCode(NNRegularizationType type) {
    switch (type) {
        case NNRegularizationType::None: return kRegularizationNone;
        case NNRegularizationType::L1: return kRegularizationL1;
        case NNRegularizationType::L2: return kRegularizationL2;
    }
    throwValueError("regularization_type: unknown value ", uint32_t(type));
}

// A vector the optimizer reads or writes: on the optimizer's device, dense, `count` elements.
void checkVector(const Vector& v, const char* name, const Device& device, int64_t count) {
    if (v.device() != device)
        throwValueError(name, ": the vector belongs to device '", v.device().name(), "' but the optimizer to '",
                        device.name(), "'");
    if (!v.descriptor().isDense())
        throwValueError(name, ": the optimizers need dense vectors (vector_bytes == length * 4), got vector_bytes ",
                        v.vectorBytes(), " for length ", v.length());
    if (v.elementCount() != count)
        throwValueError(name, ": has ", v.elementCount(), " elements (length * vectors), expected ", count,
                        " (the input gradient's)");
}

}  // namespace

// ---- descriptor ---------------------------------------------------------------------------------------

NNOptimizerDescriptor::NNOptimizerDescriptor(float learningRate, float gradientRescale,
                                             NNRegularizationType regularizationType, float regularizationScale)
    : learningRate(learningRate),
      gradientRescale(gradientRescale),
      regularizationScale(regularizationScale),
      regularizationType(regularizationType) {
    validate();
}

NNOptimizerDescriptor::NNOptimizerDescriptor(float learningRate, float gradientRescale, bool applyGradientClipping,
                                             float gradientClipMax, float gradientClipMin,
                                             NNRegularizationType regularizationType, float regularizationScale)
    : learningRate(learningRate),
      gradientRescale(gradientRescale),
      applyGradientClipping(applyGradientClipping),
      gradientClipMax(gradientClipMax),
      gradientClipMin(gradientClipMin),
      regularizationScale(regularizationScale),
      regularizationType(regularizationType) {
    validate();
}

void NNOptimizerDescriptor::validate() const {
    checkLearningRate(learningRate);
    checkFinite(gradientRescale, "gradient_rescale");
    checkFinite(regularizationScale, "regularization_scale");  // any sign, as the learning rate
    regularizationCode(regularizationType);
    if (std::isnan(gradientClipMax) || std::isnan(gradientClipMin))
        throwValueError("gradient_clip_max, gradient_clip_min: must not be NaN");
    if (gradientClipMin > gradientClipMax)
        throwValueError("gradient_clip_min: ", gradientClipMin, " is above gradient_clip_max ", gradientClipMax);
}

// ---- NNOptimizer --------------------------------------------------------------------------------------

NNOptimizer::NNOptimizer(const Device& device, const NNOptimizerDescriptor& descriptor)
    : Kernel(device), descriptor_(descriptor) {
    descriptor_.validate();
}

void NNOptimizer::setLearningRate(float learningRate) {
    checkLearningRate(learningRate);
    descriptor_.learningRate = learningRate;
}

OptimizerParams NNOptimizer::baseParams(int32_t kind) const {
    descriptor_.validate();  // the fields are public in C++: re-check what reaches the kernel
    OptimizerParams p{};
    p.kind = kind;
    p.learningRate = descriptor_.learningRate;
    p.gradientRescale = descriptor_.gradientRescale;
    p.applyGradientClipping = descriptor_.applyGradientClipping ? 1 : 0;
    p.gradientClipMax = descriptor_.gradientClipMax;
    p.gradientClipMin = descriptor_.gradientClipMin;
    p.regularizationType = regularizationCode(descriptor_.regularizationType);
    p.regularizationScale = descriptor_.regularizationScale;
    return p;
}

void NNOptimizer::encodeVectors(CommandBuffer& cb, OptimizerParams p, const Vector& gradient, const Vector& values,
                                const Vector* state0, const char* state0Name, const Vector* state1,
                                const char* state1Name, const Vector* state2, const char* state2Name,
                                const Vector& result) {
    checkCommandBuffer(cb);
    const int64_t count = gradient.elementCount();
    checkVector(gradient, "input_gradient_vector", device_, count);
    checkVector(values, "input_values_vector", device_, count);
    checkVector(result, "result_values_vector", device_, count);
    if (state0) checkVector(*state0, state0Name, device_, count);
    if (state1) checkVector(*state1, state1Name, device_, count);
    if (state2) checkVector(*state2, state2Name, device_, count);
    p.count = int32_t(count);  // VectorDescriptor::validate keeps spans below 2^31 floats
    auto slice = [](const Vector* v) { return v ? v->data() : BufferSlice{}; };
    device_.backend().optimizerUpdate(cb, p, gradient.data(), values.data(), slice(state0), slice(state1),
                                      slice(state2), result.data());
}

void NNOptimizer::encodeParameters(CommandBuffer& cb, const OptimizerParams& p, const ParameterTensor (&tensors)[2],
                                   const StateVectors (&states)[3], bool statesRequired) {
    // Number of parameter tensors updated: 2, or 1 when the state vectors are given for the first
    // tensor only (the second is then copied to the result unchanged, as MPS documents).
    size_t updated = 0;
    for (const StateVectors& s : states) {
        if (!s.vectors) continue;
        const size_t n = s.vectors->size();
        if (n == 0 && !statesRequired) continue;
        if (n != 1 && n != 2)
            throwValueError(s.name, ": expected 1 vector [", tensors[0].name, "] or 2 [", tensors[0].name, ", ",
                            tensors[1].name, "], got ", n);
        if (updated != 0 && n != updated)
            throwValueError(s.name, ": has ", n, " vector(s) but the other state lists ", updated);
        updated = n;
        for (size_t k = 0; k < n; ++k) {
            if (!(*s.vectors)[k]) throwValueError(s.name, "[", k, "]: is None");
            const std::string name = std::string(s.name) + "[" + std::to_string(k) + "] (" + tensors[k].name + ")";
            checkVector(*(*s.vectors)[k], name.c_str(), device_, tensors[k].count);
        }
    }
    if (updated == 0) updated = 2;  // no state vectors (SGD without momentum): update both

    Backend& backend = device_.backend();
    for (size_t k = 0; k < 2; ++k) {
        const ParameterTensor& t = tensors[k];
        if (k >= updated) {  // not updated: the result keeps the source's values
            if (t.result.buffer != t.values.buffer || t.result.offset != t.values.offset)
                backend.copyBuffer(cb, t.values, t.result, size_t(t.count) * sizeof(float));
            continue;
        }
        BufferSlice s[3];
        for (int j = 0; j < 3; ++j)
            if (states[j].vectors && states[j].vectors->size() > k) s[j] = (*states[j].vectors)[k]->data();
        OptimizerParams q = p;
        q.count = int32_t(t.count);  // the state classes bound their sizes below 2^31 floats
        if (q.kind == kOptimizerSGD) q.hasState0 = s[0] ? 1 : 0;
        backend.optimizerUpdate(cb, q, t.gradient, t.values, s[0], s[1], s[2], t.result);
    }
}

void NNOptimizer::encodeConvolution(CommandBuffer& cb, OptimizerParams p, CNNConvolutionGradientState& gradientState,
                                    CNNConvolutionWeightsAndBiasesState& sourceState,
                                    const StateVectors (&states)[3], bool statesRequired,
                                    CNNConvolutionWeightsAndBiasesState* resultState) {
    checkCommandBuffer(cb);
    gradientState.checkUsable(cb, "convolution_gradient_state");
    sourceState.checkUsable(cb, "convolution_source_state");
    if (resultState) resultState->checkUsable(cb, "result_state");
    CNNConvolutionWeightsAndBiasesState& result = resultState ? *resultState : sourceState;
    const CNNConvolutionDescriptor& d = gradientState.descriptor();
    const int64_t weightCount = d.weightCount(), biasCount = d.outputFeatureChannels;
    for (const auto* s : {&sourceState, &result}) {
        const char* name = s == &sourceState ? "convolution_source_state" : "result_state";
        if (s->descriptor().weightCount() != weightCount || s->descriptor().outputFeatureChannels != biasCount)
            throwValueError(name, ": holds ", s->descriptor().weightCount(), " weights and ",
                            s->descriptor().outputFeatureChannels, " biases but the gradient state ", weightCount,
                            " and ", biasCount);
    }
    const ParameterTensor tensors[2] = {
        {gradientState.gradientForWeights(), sourceState.weights(), result.weights(), weightCount, "weights"},
        {gradientState.gradientForBiases(), sourceState.biases(), result.biases(), biasCount, "biases"}};
    encodeParameters(cb, p, tensors, states, statesRequired);
    host_access::noteKernelWrite(cb, &result);  // the updated weights (core/host_access.h)
    gradientState.noteRead();
    sourceState.noteRead();
}

void NNOptimizer::encodeBatchNormalization(CommandBuffer& cb, const OptimizerParams& p,
                                           CNNBatchNormalizationState& gradientState,
                                           CNNBatchNormalizationState* sourceState, const StateVectors (&states)[3],
                                           bool statesRequired, CNNNormalizationGammaAndBetaState* resultState) {
    checkCommandBuffer(cb);
    const bool split = sourceState != nullptr;
    const char* gradientName = split ? "batch_normalization_gradient_state" : "batch_normalization_state";
    gradientState.checkUsable(cb, gradientName);
    if (split) sourceState->checkUsable(cb, "batch_normalization_source_state");
    CNNBatchNormalizationState& source = split ? *sourceState : gradientState;
    // MPS writes the new gamma / beta into a gamma-and-beta state (the forward kernel takes them
    // with reload_gamma_and_beta_with_command_buffer); there is no in-place form.
    if (!resultState) throwValueError("result_state: required (a CNNNormalizationGammaAndBetaState)");
    resultState->checkUsable(cb, "result_state");
    if (!gradientState.gradientForGamma() || !gradientState.gradientForBeta())
        throwValueError(gradientName, ": has no gradient_for_gamma / gradient_for_beta yet (encode a "
                        "CNNBatchNormalizationStatisticsGradient with it first)");
    const int64_t channels = gradientState.numberOfFeatureChannels();
    if (source.numberOfFeatureChannels() != channels)
        throwValueError("batch_normalization_source_state: has ", source.numberOfFeatureChannels(),
                        " feature channels but the gradient state ", channels);
    if (resultState->numberOfFeatureChannels() != channels)
        throwValueError("result_state: has ", resultState->numberOfFeatureChannels(),
                        " feature channels but the batch normalization state ", channels);
    const ParameterTensor tensors[2] = {
        {gradientState.gradientForGamma(), source.gamma(), resultState->gamma(), channels, "gamma"},
        {gradientState.gradientForBeta(), source.beta(), resultState->beta(), channels, "beta"}};
    encodeParameters(cb, p, tensors, states, statesRequired);
    host_access::noteKernelWrite(cb, resultState);  // the updated gamma and beta
    gradientState.noteRead();
    if (split && sourceState != &gradientState) sourceState->noteRead();
}

// ---- SGD ----------------------------------------------------------------------------------------------

NNOptimizerStochasticGradientDescent::NNOptimizerStochasticGradientDescent(const Device& device, float learningRate)
    : NNOptimizer(device, NNOptimizerDescriptor(learningRate, 1.0f, NNRegularizationType::None, 0.0f)) {}

NNOptimizerStochasticGradientDescent::NNOptimizerStochasticGradientDescent(const Device& device, float momentumScale,
                                                                           bool useNesterovMomentum,
                                                                           const NNOptimizerDescriptor& descriptor)
    : NNOptimizer(device, descriptor), momentumScale_(momentumScale), nesterov_(useNesterovMomentum) {
    checkUnitInterval(momentumScale, "momentum_scale");
}

OptimizerParams NNOptimizerStochasticGradientDescent::params(bool hasMomentum) const {
    OptimizerParams p = baseParams(kOptimizerSGD);
    p.hasState0 = hasMomentum ? 1 : 0;
    p.useNesterov = nesterov_ ? 1 : 0;
    p.momentumScale = momentumScale_;
    return p;
}

void NNOptimizerStochasticGradientDescent::encode(CommandBuffer& cb, const Vector& gradient, const Vector& values,
                                                  const Vector* momentum, const Vector& result) {
    encodeVectors(cb, params(momentum != nullptr), gradient, values, momentum, "input_momentum_vector", nullptr, "",
                  nullptr, "", result);
}

void NNOptimizerStochasticGradientDescent::encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                                                  CNNConvolutionWeightsAndBiasesState& sourceState,
                                                  const std::vector<VectorPtr>& momentumVectors,
                                                  CNNConvolutionWeightsAndBiasesState* resultState) {
    const StateVectors states[3] = {{&momentumVectors, "input_momentum_vectors"}, {nullptr, ""}, {nullptr, ""}};
    encodeConvolution(cb, params(!momentumVectors.empty()), gradientState, sourceState, states, false, resultState);
}

void NNOptimizerStochasticGradientDescent::encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState,
                                                  CNNBatchNormalizationState* sourceState,
                                                  const std::vector<VectorPtr>& momentumVectors,
                                                  CNNNormalizationGammaAndBetaState* resultState) {
    const StateVectors states[3] = {{&momentumVectors, "input_momentum_vectors"}, {nullptr, ""}, {nullptr, ""}};
    encodeBatchNormalization(cb, params(!momentumVectors.empty()), gradientState, sourceState, states, false,
                             resultState);
}

// ---- RMSProp ------------------------------------------------------------------------------------------

NNOptimizerRMSProp::NNOptimizerRMSProp(const Device& device, float learningRate)
    : NNOptimizer(device, NNOptimizerDescriptor(learningRate, 1.0f, NNRegularizationType::None, 0.0f)) {}

NNOptimizerRMSProp::NNOptimizerRMSProp(const Device& device, double decay, float epsilon,
                                       const NNOptimizerDescriptor& descriptor)
    : NNOptimizer(device, descriptor), decay_(decay), epsilon_(epsilon) {
    checkUnitInterval(decay, "decay");
    checkEpsilon(epsilon);
}

OptimizerParams NNOptimizerRMSProp::params() const {
    OptimizerParams p = baseParams(kOptimizerRMSProp);
    p.decay = float(decay_);
    p.epsilon = epsilon_;
    return p;
}

void NNOptimizerRMSProp::encode(CommandBuffer& cb, const Vector& gradient, const Vector& values,
                                const Vector& sumOfSquares, const Vector& result) {
    encodeVectors(cb, params(), gradient, values, &sumOfSquares, "input_sum_of_squares_vector", nullptr, "", nullptr,
                  "", result);
}

void NNOptimizerRMSProp::encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                                CNNConvolutionWeightsAndBiasesState& sourceState,
                                const std::vector<VectorPtr>& sumOfSquaresVectors,
                                CNNConvolutionWeightsAndBiasesState* resultState) {
    const StateVectors states[3] = {{&sumOfSquaresVectors, "input_sum_of_squares_vectors"}, {nullptr, ""},
                                    {nullptr, ""}};
    encodeConvolution(cb, params(), gradientState, sourceState, states, true, resultState);
}

void NNOptimizerRMSProp::encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState,
                                CNNBatchNormalizationState* sourceState,
                                const std::vector<VectorPtr>& sumOfSquaresVectors,
                                CNNNormalizationGammaAndBetaState* resultState) {
    const StateVectors states[3] = {{&sumOfSquaresVectors, "input_sum_of_squares_vectors"}, {nullptr, ""},
                                    {nullptr, ""}};
    encodeBatchNormalization(cb, params(), gradientState, sourceState, states, true, resultState);
}

// ---- Adam ---------------------------------------------------------------------------------------------

NNOptimizerAdam::NNOptimizerAdam(const Device& device, float learningRate)
    : NNOptimizer(device, NNOptimizerDescriptor(learningRate, 1.0f, NNRegularizationType::None, 0.0f)) {}

NNOptimizerAdam::NNOptimizerAdam(const Device& device, double beta1, double beta2, float epsilon, uint64_t timeStep,
                                 const NNOptimizerDescriptor& descriptor)
    : NNOptimizer(device, descriptor), beta1_(beta1), beta2_(beta2), epsilon_(epsilon), timeStep_(timeStep) {
    checkUnitInterval(beta1, "beta1");
    checkUnitInterval(beta2, "beta2");
    checkEpsilon(epsilon);
}

OptimizerParams NNOptimizerAdam::params(bool amsgrad) const {
    OptimizerParams p = baseParams(kOptimizerAdam);
    const double t = double(timeStep_) + 1.0;
    // lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), in double (1 - beta^t is tiny for small t).
    p.learningRate = float(double(descriptor_.learningRate) * std::sqrt(1.0 - std::pow(beta2_, t)) /
                           (1.0 - std::pow(beta1_, t)));
    p.beta1 = float(beta1_);
    p.beta2 = float(beta2_);
    p.epsilon = epsilon_;
    p.amsgrad = amsgrad ? 1 : 0;
    return p;
}

void NNOptimizerAdam::encode(CommandBuffer& cb, const Vector& gradient, const Vector& values, const Vector& momentum,
                             const Vector& velocity, const Vector* maximumVelocity, const Vector& result) {
    encodeVectors(cb, params(maximumVelocity != nullptr), gradient, values, &momentum, "input_momentum_vector",
                  &velocity, "input_velocity_vector", maximumVelocity, "maximum_velocity_vector", result);
    ++timeStep_;
}

void NNOptimizerAdam::encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                             CNNConvolutionWeightsAndBiasesState& sourceState,
                             const std::vector<VectorPtr>& momentumVectors,
                             const std::vector<VectorPtr>& velocityVectors,
                             const std::vector<VectorPtr>& maximumVelocityVectors,
                             CNNConvolutionWeightsAndBiasesState* resultState) {
    const bool amsgrad = !maximumVelocityVectors.empty();
    const StateVectors states[3] = {{&momentumVectors, "input_momentum_vectors"},
                                    {&velocityVectors, "input_velocity_vectors"},
                                    {amsgrad ? &maximumVelocityVectors : nullptr, "maximum_velocity_vectors"}};
    encodeConvolution(cb, params(amsgrad), gradientState, sourceState, states, true, resultState);
    ++timeStep_;
}

void NNOptimizerAdam::encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState,
                             CNNBatchNormalizationState* sourceState, const std::vector<VectorPtr>& momentumVectors,
                             const std::vector<VectorPtr>& velocityVectors,
                             const std::vector<VectorPtr>& maximumVelocityVectors,
                             CNNNormalizationGammaAndBetaState* resultState) {
    const bool amsgrad = !maximumVelocityVectors.empty();
    const StateVectors states[3] = {{&momentumVectors, "input_momentum_vectors"},
                                    {&velocityVectors, "input_velocity_vectors"},
                                    {amsgrad ? &maximumVelocityVectors : nullptr, "maximum_velocity_vectors"}};
    encodeBatchNormalization(cb, params(amsgrad), gradientState, sourceState, states, true, resultState);
    ++timeStep_;
}

}  // namespace mpsgrad
