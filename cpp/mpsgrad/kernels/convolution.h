// The convolution family (MPSCNNConvolution.h): descriptor, data source protocol, weights
// state, forward kernel, gradient state and gradient kernel.
//
// Weights are OHWI everywhere: weight[o][ky][kx][i], i < inputFeatureChannels / groups.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "kernels/neuron.h"

namespace mpsgrad {

// MPSCNNConvolutionDescriptor (and MPSCNNDepthWiseConvolutionDescriptor when `depthwise`).
class CNNConvolutionDescriptor {
public:
    CNNConvolutionDescriptor() = default;
    // +cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:
    CNNConvolutionDescriptor(int64_t kernelWidth, int64_t kernelHeight, int64_t inputFeatureChannels,
                             int64_t outputFeatureChannels);

    int64_t kernelWidth = 3, kernelHeight = 3;
    int64_t inputFeatureChannels = 0, outputFeatureChannels = 0;
    int64_t strideInPixelsX = 1, strideInPixelsY = 1;
    int64_t groups = 1;
    int64_t dilationRateX = 1, dilationRateY = 1;
    NNNeuronDescriptor fusedNeuronDescriptor;  // type None: no neuron
    bool depthwise = false;                    // MPSCNNDepthWiseConvolutionDescriptor
    // MPSCNNSubPixelConvolutionDescriptor.subPixelScaleFactor r (1: a regular convolution). The
    // convolution computes outputFeatureChannels channels, then shuffles them into r x r pixel
    // blocks of outputFeatureChannels / r^2 channels (kernels/convolution_sub_pixel.h).
    int64_t subPixelScaleFactor = 1;

    // MPSCNNDepthWiseConvolutionDescriptor.channelMultiplier (0 for a regular convolution)
    int64_t channelMultiplier() const { return depthwise && inputFeatureChannels ? outputFeatureChannels / inputFeatureChannels : 0; }
    // The groups the computation uses (inputFeatureChannels for depthwise).
    int64_t effectiveGroups() const { return depthwise ? inputFeatureChannels : groups; }
    // Weights per output channel: kernelHeight * kernelWidth * inputFeatureChannels / groups.
    int64_t weightsPerOutputChannel() const;
    int64_t weightCount() const { return weightsPerOutputChannel() * outputFeatureChannels; }
    // Channels of the destination: outputFeatureChannels / subPixelScaleFactor^2.
    int64_t destinationFeatureChannels() const {
        return outputFeatureChannels / (subPixelScaleFactor * subPixelScaleFactor);
    }

    // -setBatchNormalizationParametersForInferenceWithMean:variance:gamma:beta:epsilon: — folds
    // an inference batch normalization into the weights and biases when they are loaded.
    void setBatchNormalizationParametersForInference(const std::vector<float>& mean, const std::vector<float>& variance,
                                                     const std::vector<float>& gamma, const std::vector<float>& beta,
                                                     float epsilon);
    // Folded BN scale I[o] and shift J[o] (empty: none).
    std::vector<float> foldedScale, foldedShift;

    // ValueError naming the offending property.
    void validate() const;
    // The sub-pixel part of validate() (kernels/convolution_sub_pixel.cpp).
    void validateSubPixel() const;

    // Serialization (docs/serialization.md): every field, including the folded batch norm.
    std::vector<uint8_t> serialize() const;
    static CNNConvolutionDescriptor deserialize(const uint8_t* data, size_t size);
};

// MPSCNNSubPixelConvolutionDescriptor: the descriptor with its scale factor set (the field lives
// in the base class so that the by-value descriptors of data sources keep it).
struct CNNSubPixelConvolutionDescriptor : CNNConvolutionDescriptor {
    CNNSubPixelConvolutionDescriptor() = default;
    CNNSubPixelConvolutionDescriptor(int64_t kernelWidth, int64_t kernelHeight, int64_t inputFeatureChannels,
                                     int64_t outputFeatureChannels, int64_t scaleFactor = 1)
        : CNNConvolutionDescriptor(kernelWidth, kernelHeight, inputFeatureChannels, outputFeatureChannels) {
        subPixelScaleFactor = scaleFactor;
    }
    explicit CNNSubPixelConvolutionDescriptor(const CNNConvolutionDescriptor& descriptor)
        : CNNConvolutionDescriptor(descriptor) {}
};

class CNNConvolutionGradientState;
class CNNConvolutionWeightsAndBiasesState;

// @protocol MPSCNNConvolutionDataSource
class CNNConvolutionDataSource {
public:
    virtual ~CNNConvolutionDataSource() = default;
    // -dataType (only Float32 is supported)
    virtual DataType dataType() { return DataType::Float32; }
    // -descriptor
    virtual CNNConvolutionDescriptor descriptor() = 0;
    // -weights: descriptor().weightCount() floats in OHWI order, valid between load and purge
    virtual const float* weights() = 0;
    // -biasTerms: outputFeatureChannels floats, or null
    virtual const float* biasTerms() = 0;
    // -load / -purge
    virtual bool load() = 0;
    virtual void purge() = 0;
    // -label
    virtual std::string label() { return {}; }
};

// A ready-made data source holding its weights and biases in memory.
class CNNConvolutionWeightsDataSource final : public CNNConvolutionDataSource {
public:
    CNNConvolutionWeightsDataSource(CNNConvolutionDescriptor descriptor, std::vector<float> weights,
                                    std::vector<float> biases = {}, std::string label = {});
    CNNConvolutionDescriptor descriptor() override { return descriptor_; }
    const float* weights() override { return weights_.data(); }
    const float* biasTerms() override { return biases_.empty() ? nullptr : biases_.data(); }
    bool load() override { return true; }
    void purge() override {}
    std::string label() override { return label_; }

    std::vector<float>& weightValues() { return weights_; }
    std::vector<float>& biasValues() { return biases_; }

    // Serialization (docs/serialization.md): descriptor, weights, biases, label.
    std::vector<uint8_t> serialize() const;
    static std::shared_ptr<CNNConvolutionWeightsDataSource> deserialize(const uint8_t* data, size_t size);

private:
    CNNConvolutionDescriptor descriptor_;
    std::vector<float> weights_, biases_;
    std::string label_;
};

// MPSCNNConvolutionWeightsAndBiasesState
class CNNConvolutionWeightsAndBiasesState final : public State {
public:
    // -initWithDevice:cnnConvolutionDescriptor: (allocates zeroed weights and biases)
    CNNConvolutionWeightsAndBiasesState(const Device& device, const CNNConvolutionDescriptor& descriptor);
    // -initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor: (and -initWithWeights:biases:):
    // aliases the slices, each holding its floats at a 4-byte aligned offset (ValueError otherwise);
    // a null `biases` gives zero biases of the state's own.
    CNNConvolutionWeightsAndBiasesState(BufferSlice weights, BufferSlice biases, const Device& device,
                                        const CNNConvolutionDescriptor& descriptor);
    // +temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor:
    static std::shared_ptr<CNNConvolutionWeightsAndBiasesState> temporary(CommandBuffer& cb,
                                                                          const CNNConvolutionDescriptor& descriptor);
    const char* className() const override { return "CNNConvolutionWeightsAndBiasesState"; }

    BufferSlice weights() const;
    BufferSlice biases() const;
    const CNNConvolutionDescriptor& descriptor() const { return descriptor_; }

    // -initWithCoder:device: (a persistent state with the serialized weights and biases)
    static std::shared_ptr<CNNConvolutionWeightsAndBiasesState> initWithCoder(serial::Reader& reader,
                                                                              const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;

private:
    CNNConvolutionWeightsAndBiasesState(const Device& device, const CNNConvolutionDescriptor& descriptor,
                                        bool temporary, const CommandBuffer* cb);
    CNNConvolutionDescriptor descriptor_;
};

// The weights a convolution kernel holds on its device (shared by forward and gradient kernels).
struct ConvolutionWeights {
    CNNConvolutionDescriptor descriptor;
    BufferSlice weights, biases, neuronData;
    bool hasBias = false;
    // The command buffer a reload from a state was encoded into, and whether it has completed:
    // encoding on another buffer before that one is committed would read the fresh, still
    // zero buffers, so it is an error instead (reloadCompleted null: no reload pending).
    std::weak_ptr<CommandBuffer> reloadCommandBuffer;
    uint64_t reloadCommandBufferId = 0;
    std::shared_ptr<std::atomic<bool>> reloadCompleted;

    // ValueError unless encoding on `cb` sees the weights of every reload encoded so far.
    void checkReloadVisible(const CommandBuffer& cb) const;
};

// Shared by the kernels of the family (convolution, fully connected, transposed convolution).
// Reads a data source between load and purge into fresh device buffers (batch norm folded).
ConvolutionWeights loadConvolutionWeights(const Device& device, CNNConvolutionDataSource& source);
// Encodes a copy of a weights state into fresh buffers of `w` (-reloadWeightsAndBiasesWithCommandBuffer:state:).
void reloadConvolutionWeights(CommandBuffer& cb, ConvolutionWeights& w, const char* kernelName,
                              const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);

class CNNConvolution;

// MPSCNNConvolutionGradientState
class CNNConvolutionGradientState : public NNGradientState {
public:
    CNNConvolutionGradientState(std::shared_ptr<CNNConvolution> convolution, const CNNConvolutionDescriptor& descriptor,
                                int64_t sourceWidth, int64_t sourceHeight, bool temporary, const CommandBuffer* cb);
    // On `device` (the state of a transposed convolution, whose upstream `convolution` may be null).
    CNNConvolutionGradientState(const Device& device, std::shared_ptr<CNNConvolution> convolution,
                                const CNNConvolutionDescriptor& descriptor, int64_t sourceWidth,
                                int64_t sourceHeight, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "CNNConvolutionGradientState"; }

    // OHWI float32, summed over the batch.
    BufferSlice gradientForWeights() const;
    // outputFeatureChannels float32, summed over the batch.
    BufferSlice gradientForBiases() const;
    // The producing convolution (null when it was not owned by a shared_ptr).
    std::shared_ptr<CNNConvolution> convolution() const { return convolution_; }
    int64_t gradientForWeightsLayout() const { return 0; }  // MPSCNNConvolutionWeightsLayoutOHWI
    int64_t sourceWidth() const { return snapshot.sourceWidth; }
    int64_t sourceHeight() const { return snapshot.sourceHeight; }
    const CNNConvolutionDescriptor& descriptor() const { return descriptor_; }

    // The values before the fused neuron, one clip-sized image per batch image (fused neuron only).
    BufferSlice preactivation;
    ImageLayout preactivationLayout{};
    NeuronParams neuron{};
    BufferSlice neuronData;
    // Sub-pixel convolutions: the low-resolution grid the forward pass computed (its size, and
    // where the written clip rectangle starts in its first r x r block). A regular convolution
    // has the clip size and phase 0.
    int64_t lowResolutionWidth = 0, lowResolutionHeight = 0;
    int32_t subPixelPhaseX = 0, subPixelPhaseY = 0;

private:
    std::shared_ptr<CNNConvolution> convolution_;
    CNNConvolutionDescriptor descriptor_;
};

// MPSCNNConvolution
// Not final: CNNFullyConnected (kernels/fully_connected.h) is a convolution, as in MPS.
class CNNConvolution : public CNNKernel {
public:
    // -initWithDevice:weights:
    CNNConvolution(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNConvolution"; }

    int64_t inputFeatureChannels() const { return weights_.descriptor.inputFeatureChannels; }
    int64_t outputFeatureChannels() const { return weights_.descriptor.outputFeatureChannels; }
    int64_t groups() const { return weights_.descriptor.groups; }
    int64_t channelMultiplier() const { return weights_.descriptor.channelMultiplier(); }
    int64_t subPixelScaleFactor() const { return weights_.descriptor.subPixelScaleFactor; }
    const NNNeuronDescriptor& fusedNeuronDescriptor() const { return weights_.descriptor.fusedNeuronDescriptor; }
    const CNNConvolutionDescriptor& descriptor() const { return weights_.descriptor; }
    std::shared_ptr<CNNConvolutionDataSource> dataSource() const { return dataSource_; }
    NNConvolutionAccumulatorPrecisionOption accumulatorPrecisionOption = NNConvolutionAccumulatorPrecisionOption::Float;

    int64_t kernelWidth() const override { return weights_.descriptor.kernelWidth; }
    int64_t kernelHeight() const override { return weights_.descriptor.kernelHeight; }
    // Every output pixel of the clip is one product (plus bias and neuron) for every channel.
    bool writesEveryDestinationPixel() const override { return true; }
    int64_t strideInPixelsX() const override { return weights_.descriptor.strideInPixelsX; }
    int64_t strideInPixelsY() const override { return weights_.descriptor.strideInPixelsY; }
    int64_t dilationRateX() const override { return weights_.descriptor.dilationRateX; }
    int64_t dilationRateY() const override { return weights_.descriptor.dilationRateY; }
    bool isResultStateReusedAcrossBatch() const override { return true; }

    // -reloadWeightsAndBiasesFromDataSource
    void reloadWeightsAndBiasesFromDataSource();
    // -reloadWeightsAndBiasesWithCommandBuffer:state: (decrements a temporary state's read count)
    void reloadWeightsAndBiasesWithCommandBuffer(CommandBuffer& cb,
                                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);
    // -exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:
    std::shared_ptr<CNNConvolutionWeightsAndBiasesState> exportWeightsAndBiasesWithCommandBuffer(
        CommandBuffer& cb, bool resultStateCanBeTemporary);

    const ConvolutionWeights& currentWeights() const { return weights_; }

    // -initWithCoder:device: — the weights the kernel computes with (after any batch-norm
    // folding and reload) become a CNNConvolutionWeightsDataSource of the new kernel.
    static std::shared_ptr<CNNConvolution> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image&) const override {
        return weights_.descriptor.destinationFeatureChannels();
    }
    // A sub-pixel convolution's destination is r times the padding policy's low-resolution size.
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    // FLOAT16 images go to the backend as they are when it reads them natively, except for a
    // sub-pixel convolution (its float32 scratch and shuffle); else through float32 shadows.
    bool readsFloat16Natively() const override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
    // The offset the window is centred on (the `offset` property; a fully connected layer
    // ignores it and centres the kernel on the whole source).
    virtual Offset forwardOffset() const { return offset; }

private:
    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    ConvolutionWeights weights_;
};

// MPSCNNConvolutionGradientOption
enum class CNNConvolutionGradientOption : uint32_t { GradientWithData = 1, GradientWithWeightsAndBias = 2, All = 3 };

// MPSCNNConvolutionGradient
// Not final: CNNFullyConnectedGradient is one.
class CNNConvolutionGradient : public CNNGradientKernel {
public:
    // -initWithDevice:weights: (use the forward convolution's data source)
    CNNConvolutionGradient(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNConvolutionGradient"; }

    // The channels of the incoming gradient: outputFeatureChannels / subPixelScaleFactor^2.
    int64_t sourceGradientFeatureChannels() const { return weights_.descriptor.destinationFeatureChannels(); }
    int64_t sourceImageFeatureChannels() const { return weights_.descriptor.inputFeatureChannels; }
    int64_t groups() const { return weights_.descriptor.groups; }
    int64_t channelMultiplier() const { return weights_.descriptor.channelMultiplier(); }
    std::shared_ptr<CNNConvolutionDataSource> dataSource() const { return dataSource_; }
    const CNNConvolutionDescriptor& descriptor() const { return weights_.descriptor; }
    CNNConvolutionGradientOption gradientOption = CNNConvolutionGradientOption::All;

    int64_t secondaryKernelWidth() const override { return weights_.descriptor.kernelWidth; }
    int64_t secondaryKernelHeight() const override { return weights_.descriptor.kernelHeight; }
    int64_t secondaryDilationRateX() const override { return weights_.descriptor.dilationRateX; }
    int64_t secondaryDilationRateY() const override { return weights_.descriptor.dilationRateY; }

    void reloadWeightsAndBiasesFromDataSource();
    void reloadWeightsAndBiasesWithCommandBuffer(CommandBuffer& cb,
                                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);

    // -initWithCoder:device: (weights as for CNNConvolution)
    static std::shared_ptr<CNNConvolutionGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    // As CNNConvolution's (the fused neuron's derivative also reads FLOAT16 gradients natively).
    bool readsFloat16Natively() const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    ConvolutionWeights weights_;
};

}  // namespace mpsgrad
