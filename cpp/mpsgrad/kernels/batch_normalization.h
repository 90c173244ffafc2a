// The batch normalization family (MPSCNNBatchNormalization.h, MPSCNNNormalizationWeights.h): the
// data source protocol, the gamma/beta and mean/variance states, CNNBatchNormalizationState, the
// forward kernel, the statistics kernel, the statistics gradient and the gradient (spec §2.5, §4.8;
// the formulas as implemented and every decision on [I] points are in docs/normalization.md).
//
// Every kernel of the family works on whole images (offset (0, 0), the whole clip rectangle), on
// the C = number_of_feature_channels channels that start at the source feature-channel offset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "kernels/neuron.h"

namespace mpsgrad {

class CNNBatchNormalizationState;

// @protocol MPSCNNBatchNormalizationDataSource (the required methods and -epsilon; the optional
// update methods are called by the application, never by the kernels, so they are not part of
// this C++ interface; CNNBatchNormalizationWeightsDataSource implements them).
class CNNBatchNormalizationDataSource {
public:
    virtual ~CNNBatchNormalizationDataSource() = default;
    virtual int64_t numberOfFeatureChannels() = 0;
    // numberOfFeatureChannels floats each, valid between load and purge; beta may be null (no bias).
    virtual const float* gamma() = 0;
    virtual const float* beta() = 0;
    virtual const float* mean() = 0;
    virtual const float* variance() = 0;
    virtual bool load() = 0;
    virtual void purge() = 0;
    virtual std::string label() { return {}; }
    // -epsilon; std::nullopt when not implemented (the kernel then uses FLT_MIN, as MPS).
    virtual std::optional<float> epsilon() { return std::nullopt; }
};

// MPSCNNNormalizationGammaAndBetaState: gamma and beta buffers of C floats.
class CNNNormalizationGammaAndBetaState final : public State {
public:
    // -initWithGamma:beta: (copies the values into new buffers)
    CNNNormalizationGammaAndBetaState(const Device& device, const std::vector<float>& gamma,
                                      const std::vector<float>& beta);
    // -initWithGamma:beta: over existing buffers: aliases them (each holds `channels` floats at a
    // 4-byte aligned offset, ValueError otherwise), so updates through either side are shared.
    CNNNormalizationGammaAndBetaState(const Device& device, int64_t channels, const BufferSlice& gamma,
                                      const BufferSlice& beta);
    // +temporaryStateWithCommandBuffer:numberOfFeatureChannels: (zero-filled)
    static std::shared_ptr<CNNNormalizationGammaAndBetaState> temporary(CommandBuffer& cb, int64_t channels);
    const char* className() const override { return "CNNNormalizationGammaAndBetaState"; }
    int64_t numberOfFeatureChannels() const { return channels_; }
    BufferSlice gamma() const { return resourceAtIndex(0); }
    BufferSlice beta() const { return resourceAtIndex(1); }
    // -initWithCoder:device: (a persistent state with the serialized gamma and beta)
    static std::shared_ptr<CNNNormalizationGammaAndBetaState> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;  // label, gamma, beta

private:
    CNNNormalizationGammaAndBetaState(const Device& device, int64_t channels, bool temporary, const CommandBuffer* cb);
    int64_t channels_;
};

// MPSCNNNormalizationMeanAndVarianceState: mean and variance buffers of C floats.
class CNNNormalizationMeanAndVarianceState final : public State {
public:
    // -initWithMean:variance:
    CNNNormalizationMeanAndVarianceState(const Device& device, const std::vector<float>& mean,
                                         const std::vector<float>& variance);
    // -initWithMean:variance: over existing buffers (aliased, as the gamma / beta state's). The
    // values are not checked: the memory is the caller's and may change until the state is read.
    CNNNormalizationMeanAndVarianceState(const Device& device, int64_t channels, const BufferSlice& mean,
                                         const BufferSlice& variance);
    // +temporaryStateWithCommandBuffer:numberOfFeatureChannels:
    static std::shared_ptr<CNNNormalizationMeanAndVarianceState> temporary(CommandBuffer& cb, int64_t channels);
    const char* className() const override { return "CNNNormalizationMeanAndVarianceState"; }
    int64_t numberOfFeatureChannels() const { return channels_; }
    BufferSlice mean() const { return resourceAtIndex(0); }
    BufferSlice variance() const { return resourceAtIndex(1); }
    // -initWithCoder:device: (a persistent state with the serialized mean and variance)
    static std::shared_ptr<CNNNormalizationMeanAndVarianceState> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;  // label, mean, variance

private:
    CNNNormalizationMeanAndVarianceState(const Device& device, int64_t channels, bool temporary,
                                         const CommandBuffer* cb);
    int64_t channels_;
};

class CNNBatchNormalization;

// MPSCNNBatchNormalizationState: made only by CNNBatchNormalization's result_state /
// temporary_result_state. Buffers (C floats each): gamma, beta (the values the forward used),
// mean, variance (the batch statistics, or the data source's for an inference forward),
// gradient_for_gamma, gradient_for_beta (sums over every pixel of the batch).
class CNNBatchNormalizationState final : public NNGradientState {
public:
    // What the state has seen since it was made or reset (encode order).
    enum class Phase { Empty, Statistics, Forward, StatisticsGradient, Gradient };

    CNNBatchNormalizationState(std::shared_ptr<CNNBatchNormalization> kernel, int64_t channels, bool temporary,
                               const CommandBuffer* cb);
    const char* className() const override { return "CNNBatchNormalizationState"; }

    std::shared_ptr<CNNBatchNormalization> batchNormalization() const { return kernel_; }
    int64_t numberOfFeatureChannels() const { return channels_; }
    BufferSlice gamma() const { return resourceAtIndex(0); }
    BufferSlice beta() const { return resourceAtIndex(1); }
    BufferSlice mean() const { return resourceAtIndex(2); }
    BufferSlice variance() const { return resourceAtIndex(3); }
    // Null slices until a statistics gradient has been encoded with the state.
    BufferSlice gradientForGamma() const { return statisticsGradientCount ? resourceAtIndex(4) : BufferSlice{}; }
    BufferSlice gradientForBeta() const { return statisticsGradientCount ? resourceAtIndex(5) : BufferSlice{}; }
    // -reset: forgets the accumulated statistics and gradients (the next statistics and statistics
    // gradient encodes start afresh).
    void reset();

    // ---- for the kernels of the family
    Phase phase = Phase::Empty;
    int64_t statisticsCount = 0;          // pixels per channel summarised in mean / variance
    int64_t statisticsGradientCount = 0;  // pixels per channel summed into the gradients
    bool batchStatistics = false;         // the forward used the batch statistics
    float epsilon = 0.0f;                 // the forward's epsilon
    NNNeuronDescriptor neuron;            // the forward's fused neuron
    BufferSlice neuronData;               // its PReLU data (C floats)

private:
    std::shared_ptr<CNNBatchNormalization> kernel_;
    int64_t channels_;
};

// A ready-made data source holding its values in memory, with the optional update methods
// implemented as plain SGD on gamma / beta and an exponential running average of the statistics:
//   gamma -= learningRate·dγ, beta -= learningRate·dβ
//   mean = (1 - momentum)·mean + momentum·batchMean
//   variance = (1 - momentum)·variance + momentum·batchVariance·M/(M-1) (unbiasedRunningVariance)
class CNNBatchNormalizationWeightsDataSource final : public CNNBatchNormalizationDataSource {
public:
    CNNBatchNormalizationWeightsDataSource(std::vector<float> gamma, std::vector<float> beta, std::vector<float> mean,
                                           std::vector<float> variance, std::optional<float> epsilon = std::nullopt,
                                           std::string label = {});
    int64_t numberOfFeatureChannels() override { return int64_t(gamma_.size()); }
    const float* gamma() override { return gamma_.data(); }
    const float* beta() override { return beta_.empty() ? nullptr : beta_.data(); }
    const float* mean() override { return mean_.data(); }
    const float* variance() override { return variance_.data(); }
    bool load() override { return true; }
    void purge() override {}
    std::string label() override { return label_; }
    std::optional<float> epsilon() override { return epsilon_; }

    // -updateGammaAndBetaWithBatchNormalizationState: / -updateMeanAndVarianceWithBatchNormalizationState:
    // (CPU style: read the state's buffers, so the command buffer must have completed). Decrement
    // a temporary state's read count, as the protocol requires.
    bool updateGammaAndBetaWithBatchNormalizationState(const std::shared_ptr<CNNBatchNormalizationState>& state);
    bool updateMeanAndVarianceWithBatchNormalizationState(const std::shared_ptr<CNNBatchNormalizationState>& state);

    float learningRate = 0.01f;
    float momentum = 0.1f;
    bool unbiasedRunningVariance = true;
    std::vector<float> gamma_, beta_, mean_, variance_;

private:
    std::optional<float> epsilon_;
    std::string label_;
};

// The values a CNNBatchNormalization holds on its device.
struct BatchNormalizationWeights {
    int64_t channels = 0;
    BufferSlice gamma, beta, mean, variance, neuronData;
};

// MPSCNNBatchNormalization: z = (X - μ)·γ/√(σ² + ε) + β, Y = f(z). μ, σ² are the state's batch
// statistics when a statistics kernel has run on the state, else the data source's (inference).
class CNNBatchNormalization final : public CNNKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    // -initWithDevice:dataSource:[fusedNeuronDescriptor:]
    CNNBatchNormalization(const Device& device, std::shared_ptr<CNNBatchNormalizationDataSource> dataSource,
                          const NNNeuronDescriptor& fusedNeuron = {});
    const char* className() const override { return "CNNBatchNormalization"; }

    int64_t numberOfFeatureChannels() const { return weights_.channels; }
    float epsilon() const { return epsilon_; }
    // ValueError unless epsilon > 0 and finite.
    void setEpsilon(float value);
    std::shared_ptr<CNNBatchNormalizationDataSource> dataSource() const { return dataSource_; }
    const NNNeuronDescriptor& fusedNeuronDescriptor() const { return neuron_; }
    bool isResultStateReusedAcrossBatch() const override { return true; }

    using CNNKernel::encode;
    using CNNKernel::encodeBatch;
    // The returning forms of -encode[Batch]ToCommandBuffer:sourceImage[s]:batchNormalizationState:
    // destinationImage[s]: (state may be null: inference). Destinations come from the
    // destination_image_allocator; like every returning form (docs/api.md) they need sources with
    // number_of_images == 1, since each returns one single-image destination per source.
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, const std::shared_ptr<CNNBatchNormalizationState>& state);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                           const std::shared_ptr<CNNBatchNormalizationState>& state);

    void reloadGammaAndBetaFromDataSource();
    void reloadMeanAndVarianceFromDataSource();
    // Encoded copies of the state's buffers (a temporary state's read count is decremented).
    void reloadGammaAndBetaWithCommandBuffer(CommandBuffer& cb,
                                             const std::shared_ptr<CNNNormalizationGammaAndBetaState>& state);
    void reloadMeanAndVarianceWithCommandBuffer(CommandBuffer& cb,
                                                const std::shared_ptr<CNNNormalizationMeanAndVarianceState>& state);
    // Encoded copies of `from`'s current gamma and beta (mean and variance) into new buffers of this
    // kernel: ordered after any reload of `from` encoded earlier on `cb` (the graph's fused kernels
    // follow their node's kernel this way, docs/graph.md "Fusion").
    void copyGammaAndBetaWithCommandBuffer(CommandBuffer& cb, const CNNBatchNormalization& from);
    void copyMeanAndVarianceWithCommandBuffer(CommandBuffer& cb, const CNNBatchNormalization& from);
    const BatchNormalizationWeights& currentWeights() const { return weights_; }

    // -initWithCoder:device: (docs/serialization.md); the decoded kernel's data source is a
    // CNNBatchNormalizationWeightsDataSource holding the values the kernel computed with.
    static std::shared_ptr<CNNBatchNormalization> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    int64_t destinationFeatureChannels(const Image&) const override { return weights_.channels; }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    std::shared_ptr<CNNBatchNormalizationDataSource> dataSource_;
    NNNeuronDescriptor neuron_;
    BatchNormalizationWeights weights_;
    float epsilon_;
};

// MPSCNNBatchNormalizationStatistics: only encodeBatch(cb, sources, state); successive encodes
// accumulate (sub-batches) until another kernel of the family encodes with the state.
class CNNBatchNormalizationStatistics final : public CNNKernel {
public:
    explicit CNNBatchNormalizationStatistics(const Device& device) : CNNKernel(device) {}
    const char* className() const override { return "CNNBatchNormalizationStatistics"; }
    bool appendBatchBarrier() const override { return true; }

    // -encodeBatchToCommandBuffer:sourceImages:batchNormalizationState:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                     const std::shared_ptr<CNNBatchNormalizationState>& state);
    using CNNKernel::encodeBatch;
    static std::shared_ptr<CNNBatchNormalizationStatistics> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    int64_t destinationFeatureChannels(const Image&) const override { return 0; }
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
};

// MPSCNNBatchNormalizationStatisticsGradient: only encodeBatch(cb, gradients, sources, state);
// successive encodes add into the state's gradients (sub-batches).
class CNNBatchNormalizationStatisticsGradient final : public CNNGradientKernel {
public:
    // -initWithDevice:fusedNeuronDescriptor: (must match the forward's)
    CNNBatchNormalizationStatisticsGradient(const Device& device, const NNNeuronDescriptor& fusedNeuron = {});
    const char* className() const override { return "CNNBatchNormalizationStatisticsGradient"; }
    const NNNeuronDescriptor& fusedNeuronDescriptor() const { return neuron_; }

    // -encodeBatchToCommandBuffer:sourceGradients:sourceImages:batchNormalizationState:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                     const std::shared_ptr<CNNBatchNormalizationState>& state);
    using CNNGradientKernel::encodeBatch;
    static std::shared_ptr<CNNBatchNormalizationStatisticsGradient> initWithCoder(serial::Reader& r,
                                                                                  const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    void checkGradientStateType(const State& state) const override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    NNNeuronDescriptor neuron_;
};

// MPSCNNBatchNormalizationGradient: dX per image, after the statistics gradient (training mode).
class CNNBatchNormalizationGradient final : public CNNGradientKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    CNNBatchNormalizationGradient(const Device& device, const NNNeuronDescriptor& fusedNeuron = {});
    const char* className() const override { return "CNNBatchNormalizationGradient"; }
    const NNNeuronDescriptor& fusedNeuronDescriptor() const { return neuron_; }
    // mpsgrad extension (spec §2.5): false gives the inference-mode gradient γ/√(σ²+ε)·G'.
    bool trainingStatistics = true;
    static std::shared_ptr<CNNBatchNormalizationGradient> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    NNNeuronDescriptor neuron_;
};

}  // namespace mpsgrad
