// The optimizers (MPSNNOptimizers.h): NNOptimizerDescriptor, NNOptimizer and the update kernels
// NNOptimizerStochasticGradientDescent, NNOptimizerRMSProp, NNOptimizerAdam (spec §2.13).
//
// Every update preprocesses the gradient (clip, rescale, regularize: metal/optimizer_math.h) and
// applies its rule element by element. The optimizer's own state vectors (momentum, sum of
// squares, velocity, maximum velocity) are read and updated in place; the new values go to the
// result, which may be the input (in-place update). Three encode families are implemented:
//   * plain vectors (Vector, MPSVector);
//   * a convolution's CNNConvolutionGradientState + CNNConvolutionWeightsAndBiasesState, with the
//     state vectors given as [weights] or [weights, biases] (a single vector: the biases are not
//     updated, they are copied to the result unchanged);
//   * batch normalization: a CNNBatchNormalizationState (its gamma/beta and gradient_for_gamma/
//     beta), or a gradient state + a source state, written into a CNNNormalizationGammaAndBetaState;
//     state vectors [gamma] or [gamma, beta].
// Every state family reduces to two ParameterTensors handed to encodeParameters. MPS has no
// optimizer encode for instance or group normalization states (their data sources update γ/β), so
// there is none here either (docs/losses_and_optimizers.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "core/vector.h"
#include "metal/optimizers_params.h"

namespace mpsgrad {

class CNNConvolutionGradientState;
class CNNConvolutionWeightsAndBiasesState;
class CNNBatchNormalizationState;
class CNNNormalizationGammaAndBetaState;

// MPSNNRegularizationType
enum class NNRegularizationType : uint32_t { None = 0, L1 = 1, L2 = 2 };

// MPSNNOptimizerDescriptor. The clip bounds have no documented default: mpsgrad uses
// [-FLT_MAX, FLT_MAX] (clipping enabled without bounds changes nothing).
struct NNOptimizerDescriptor {
    float learningRate = 0.001f;
    float gradientRescale = 1.0f;
    bool applyGradientClipping = false;
    float gradientClipMax = 3.40282347e38f;
    float gradientClipMin = -3.40282347e38f;
    float regularizationScale = 0.0f;
    NNRegularizationType regularizationType = NNRegularizationType::None;

    NNOptimizerDescriptor() = default;
    // -initWithLearningRate:gradientRescale:regularizationType:regularizationScale:
    NNOptimizerDescriptor(float learningRate, float gradientRescale, NNRegularizationType regularizationType,
                          float regularizationScale);
    // -initWithLearningRate:gradientRescale:applyGradientClipping:gradientClipMax:gradientClipMin:
    //  regularizationType:regularizationScale:
    NNOptimizerDescriptor(float learningRate, float gradientRescale, bool applyGradientClipping,
                          float gradientClipMax, float gradientClipMin, NNRegularizationType regularizationType,
                          float regularizationScale);

    // ValueError naming the field: learning rate < 0 or not finite, non-finite rescale or
    // regularization scale, negative regularization scale, clip min > clip max, unknown type.
    void validate() const;
};

// MPSNNOptimizer (abstract)
class NNOptimizer : public Kernel {
public:
    float learningRate() const { return descriptor_.learningRate; }
    // -setLearningRate: (ValueError unless finite and >= 0)
    void setLearningRate(float learningRate);
    float gradientRescale() const { return descriptor_.gradientRescale; }
    bool applyGradientClipping() const { return descriptor_.applyGradientClipping; }
    void setApplyGradientClipping(bool apply) { descriptor_.applyGradientClipping = apply; }
    float gradientClipMax() const { return descriptor_.gradientClipMax; }
    float gradientClipMin() const { return descriptor_.gradientClipMin; }
    float regularizationScale() const { return descriptor_.regularizationScale; }
    NNRegularizationType regularizationType() const { return descriptor_.regularizationType; }

protected:
    NNOptimizer(const Device& device, const NNOptimizerDescriptor& descriptor);
    // The params shared by every rule (kind and rule-specific fields left to the caller).
    OptimizerParams baseParams(int32_t kind) const;

    // One update of vectors: validates devices, lengths and density (ValueError naming the
    // parameter), then encodes. state* may be null where `p` does not read them.
    void encodeVectors(CommandBuffer& cb, OptimizerParams p, const Vector& gradient, const Vector& values,
                       const Vector* state0, const char* state0Name, const Vector* state1, const char* state1Name,
                       const Vector* state2, const char* state2Name, const Vector& result);

    // One update of a convolution's weights and biases. states[k] are the optimizer's vector
    // lists (momentum, velocity...), each empty or of length 1 or 2 ([weights, biases]); all
    // non-empty lists must have the same length. resultState may be null: update in place.
    struct StateVectors {
        const std::vector<VectorPtr>* vectors;  // may be null (not used by the rule)
        const char* name;
    };
    // One parameter tensor of a state family: its gradient, its current values and where the new
    // values go (may equal `values`: in place), `count` floats each.
    struct ParameterTensor {
        BufferSlice gradient, values, result;
        int64_t count;
        const char* name;  // "weights", "gamma"... (error messages)
    };
    // The common part of every state family: validates the state vector lists against the two
    // tensors (each list empty, [first] or [first, second]) and encodes the updates.
    void encodeParameters(CommandBuffer& cb, const OptimizerParams& p, const ParameterTensor (&tensors)[2],
                          const StateVectors (&states)[3], bool statesRequired);
    void encodeConvolution(CommandBuffer& cb, OptimizerParams p, CNNConvolutionGradientState& gradientState,
                           CNNConvolutionWeightsAndBiasesState& sourceState, const StateVectors (&states)[3],
                           bool statesRequired, CNNConvolutionWeightsAndBiasesState* resultState);
    // One update of a batch normalization's gamma and beta: gradients from gradientState, values
    // from sourceState (null: from gradientState too), new values into resultState (required).
    void encodeBatchNormalization(CommandBuffer& cb, const OptimizerParams& p, CNNBatchNormalizationState& gradientState,
                                  CNNBatchNormalizationState* sourceState, const StateVectors (&states)[3],
                                  bool statesRequired, CNNNormalizationGammaAndBetaState* resultState);

    NNOptimizerDescriptor descriptor_;
};

// MPSNNOptimizerStochasticGradientDescent
class NNOptimizerStochasticGradientDescent final : public NNOptimizer {
public:
    // -initWithDevice:learningRate:
    NNOptimizerStochasticGradientDescent(const Device& device, float learningRate);
    // -initWithDevice:momentumScale:useNestrovMomentum:optimizerDescriptor:
    NNOptimizerStochasticGradientDescent(const Device& device, float momentumScale, bool useNesterovMomentum,
                                         const NNOptimizerDescriptor& descriptor);
    const char* className() const override { return "NNOptimizerStochasticGradientDescent"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNOptimizerStochasticGradientDescent> initWithCoder(serial::Reader& reader, const Device& device);

    float momentumScale() const { return momentumScale_; }
    bool useNesterovMomentum() const { return nesterov_; }

    // -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:resultValuesVector:
    // (momentum may be null: w -= lr * g)
    void encode(CommandBuffer& cb, const Vector& gradient, const Vector& values, const Vector* momentum,
                const Vector& result);
    // -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:resultState:
    void encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                CNNConvolutionWeightsAndBiasesState& sourceState, const std::vector<VectorPtr>& momentumVectors,
                CNNConvolutionWeightsAndBiasesState* resultState);
    // -encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:resultState: (sourceState null)
    // -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:
    //  inputMomentumVectors:resultState:
    void encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState, CNNBatchNormalizationState* sourceState,
                const std::vector<VectorPtr>& momentumVectors, CNNNormalizationGammaAndBetaState* resultState);

private:
    OptimizerParams params(bool hasMomentum) const;
    float momentumScale_ = 0.0f;
    bool nesterov_ = false;
};

// MPSNNOptimizerRMSProp
class NNOptimizerRMSProp final : public NNOptimizer {
public:
    // -initWithDevice:learningRate:
    NNOptimizerRMSProp(const Device& device, float learningRate);
    // -initWithDevice:decay:epsilon:optimizerDescriptor:
    NNOptimizerRMSProp(const Device& device, double decay, float epsilon, const NNOptimizerDescriptor& descriptor);
    const char* className() const override { return "NNOptimizerRMSProp"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNOptimizerRMSProp> initWithCoder(serial::Reader& reader, const Device& device);

    double decay() const { return decay_; }
    float epsilon() const { return epsilon_; }

    // -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputSumOfSquaresVector:resultValuesVector:
    void encode(CommandBuffer& cb, const Vector& gradient, const Vector& values, const Vector& sumOfSquares,
                const Vector& result);
    // -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputSumOfSquaresVectors:resultState:
    void encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                CNNConvolutionWeightsAndBiasesState& sourceState, const std::vector<VectorPtr>& sumOfSquaresVectors,
                CNNConvolutionWeightsAndBiasesState* resultState);
    // -encodeToCommandBuffer:batchNormalizationState:inputSumOfSquaresVectors:resultState: (sourceState null)
    // -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:
    //  inputSumOfSquaresVectors:resultState:
    void encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState, CNNBatchNormalizationState* sourceState,
                const std::vector<VectorPtr>& sumOfSquaresVectors, CNNNormalizationGammaAndBetaState* resultState);

private:
    OptimizerParams params() const;
    double decay_ = 0.9;
    float epsilon_ = 1e-8f;
};

// MPSNNOptimizerAdam. timeStep is the number of updates done so far; every encode advances it by
// one before computing lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t) (in double precision).
class NNOptimizerAdam final : public NNOptimizer {
public:
    // -initWithDevice:learningRate:
    NNOptimizerAdam(const Device& device, float learningRate);
    // -initWithDevice:beta1:beta2:epsilon:timeStep:optimizerDescriptor:
    NNOptimizerAdam(const Device& device, double beta1, double beta2, float epsilon, uint64_t timeStep,
                    const NNOptimizerDescriptor& descriptor);
    const char* className() const override { return "NNOptimizerAdam"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNOptimizerAdam> initWithCoder(serial::Reader& reader, const Device& device);

    double beta1() const { return beta1_; }
    double beta2() const { return beta2_; }
    float epsilon() const { return epsilon_; }
    uint64_t timeStep() const { return timeStep_; }
    void setTimeStep(uint64_t t) { timeStep_ = t; }

    // -encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:inputVelocityVector:
    //  [maximumVelocityVector:]resultValuesVector: (maximumVelocity non-null: AMSGrad)
    void encode(CommandBuffer& cb, const Vector& gradient, const Vector& values, const Vector& momentum,
                const Vector& velocity, const Vector* maximumVelocity, const Vector& result);
    // -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:
    //  inputVelocityVectors:[maximumVelocityVectors:]resultState: (maximumVelocityVectors non-empty: AMSGrad)
    void encode(CommandBuffer& cb, CNNConvolutionGradientState& gradientState,
                CNNConvolutionWeightsAndBiasesState& sourceState, const std::vector<VectorPtr>& momentumVectors,
                const std::vector<VectorPtr>& velocityVectors, const std::vector<VectorPtr>& maximumVelocityVectors,
                CNNConvolutionWeightsAndBiasesState* resultState);
    // -encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:inputVelocityVectors:
    //  [maximumVelocityVectors:]resultState: (sourceState null), and the
    //  batchNormalizationGradientState:batchNormalizationSourceState: form.
    void encode(CommandBuffer& cb, CNNBatchNormalizationState& gradientState, CNNBatchNormalizationState* sourceState,
                const std::vector<VectorPtr>& momentumVectors, const std::vector<VectorPtr>& velocityVectors,
                const std::vector<VectorPtr>& maximumVelocityVectors, CNNNormalizationGammaAndBetaState* resultState);

private:
    // The params of the next update (timeStep + 1); the caller advances timeStep after encoding.
    OptimizerParams params(bool amsgrad) const;
    double beta1_ = 0.9, beta2_ = 0.999;
    float epsilon_ = 1e-8f;
    uint64_t timeStep_ = 0;
};

}  // namespace mpsgrad
