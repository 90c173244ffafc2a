// MPSCNNConvolutionTranspose, MPSCNNConvolutionTransposeGradientState and
// MPSCNNConvolutionTransposeGradient (MPSCNNConvolution.h, spec §2.1.8).
//
// Forward: Z is the source with strideInPixels - 1 zeros inserted between its pixels (size
// (S - 1) * stride + 1); the result is a stride-1 correlation of Z with the OHWI weights used as
// given (not rotated), plus the biases:
//   Y[y][x][o] = b[o] + sum_{ky,kx,i in group(o)} W[o][ky][kx][i] * Z[T_y + y + dY*ky][T_x + x + dX*kx][i]
// where T = offset * stride + kernelOffset - (dilatedKernel >> 1) is the window's top-left tap in Z
// for the first pixel of the clip rectangle.
//
// It is computed by the convolution family's ops (no kernel of its own): the forward pass is the
// data-gradient op of the convolution whose weights W' are W rotated 180 degrees with input and
// output channels swapped (convolutionTransposeWeights); the data gradient is that convolution's
// forward op, the weight gradient its weight-gradient op (giving dW', swapped back to OHWI).
// docs/convolution_transpose.md derives each step.
#pragma once

#include <memory>

#include "kernels/convolution.h"

namespace mpsgrad {

class CNNConvolutionTranspose;

// MPSCNNConvolutionTransposeGradientState
class CNNConvolutionTransposeGradientState final : public CNNConvolutionGradientState {
public:
    CNNConvolutionTransposeGradientState(const Device& device, std::shared_ptr<CNNConvolutionTranspose> transpose,
                                         std::shared_ptr<CNNConvolution> upstream,
                                         const CNNConvolutionDescriptor& descriptor, int64_t sourceWidth,
                                         int64_t sourceHeight, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "CNNConvolutionTransposeGradientState"; }
    // The producing transposed convolution (`convolution` is the upstream convolution whose
    // gradient state sized the result, if any).
    std::shared_ptr<CNNConvolutionTranspose> convolutionTranspose() const { return transpose_; }

private:
    std::shared_ptr<CNNConvolutionTranspose> transpose_;
};

// The weights of a transposed convolution on its device: OHWI as given (for export and
// serialization) and the rotated, I/O-swapped copy the ops compute with.
struct TransposeWeights {
    ConvolutionWeights given;
    BufferSlice rotated;
};

// MPSCNNConvolutionTranspose
class CNNConvolutionTranspose final : public CNNKernel {
public:
    // -initWithDevice:weights:
    CNNConvolutionTranspose(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNConvolutionTranspose"; }

    int64_t inputFeatureChannels() const { return descriptor().inputFeatureChannels; }
    int64_t outputFeatureChannels() const { return descriptor().outputFeatureChannels; }
    int64_t groups() const { return descriptor().groups; }
    const CNNConvolutionDescriptor& descriptor() const { return weights_.given.descriptor; }
    std::shared_ptr<CNNConvolutionDataSource> dataSource() const { return dataSource_; }
    int64_t kernelOffsetX = 0, kernelOffsetY = 0;
    NNConvolutionAccumulatorPrecisionOption accumulatorPrecisionOption = NNConvolutionAccumulatorPrecisionOption::Float;

    int64_t kernelWidth() const override { return descriptor().kernelWidth; }
    int64_t kernelHeight() const override { return descriptor().kernelHeight; }
    int64_t strideInPixelsX() const override { return descriptor().strideInPixelsX; }
    int64_t strideInPixelsY() const override { return descriptor().strideInPixelsY; }
    int64_t dilationRateX() const override { return descriptor().dilationRateX; }
    int64_t dilationRateY() const override { return descriptor().dilationRateY; }
    bool isBackwards() const override { return true; }
    bool isResultStateReusedAcrossBatch() const override { return true; }

    // -encodeToCommandBuffer:sourceImage:convolutionGradientState: and its training form
    // (…destinationState:destinationStateIsTemporary:): the result gets the paired forward
    // convolution's source size, offset 0 and the kernel offset that makes this the adjoint of
    // that convolution (null state: the padding policy, as the plain encode).
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source,
                    const std::shared_ptr<CNNConvolutionGradientState>& convolutionGradientState,
                    StatePtr* destinationState = nullptr, bool destinationStateIsTemporary = false);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& convolutionGradientStates,
                           StateBatch* destinationStates = nullptr, bool destinationStateIsTemporary = false);
    using CNNKernel::encode;
    using CNNKernel::encodeBatch;

    void reloadWeightsAndBiasesFromDataSource();
    void reloadWeightsAndBiasesWithCommandBuffer(CommandBuffer& cb,
                                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);
    std::shared_ptr<CNNConvolutionWeightsAndBiasesState> exportWeightsAndBiasesWithCommandBuffer(
        CommandBuffer& cb, bool resultStateCanBeTemporary);

    const TransposeWeights& currentWeights() const { return weights_; }

    static std::shared_ptr<CNNConvolutionTranspose> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image&) const override { return outputFeatureChannels(); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    // Window placement in Z: offset 0 and the kernel offset the padding policy gives for a
    // stride-1 window over Z (or the paired convolution's, when sized by its gradient state).
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    TransposeWeights weights_;
    // The convolution gradient state sizing the current returning encode (null otherwise).
    std::shared_ptr<CNNConvolutionGradientState> sizing_;
};

// MPSCNNConvolutionTransposeGradient
class CNNConvolutionTransposeGradient final : public CNNGradientKernel {
public:
    // -initWithDevice:weights: (the forward transposed convolution's data source)
    CNNConvolutionTransposeGradient(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNConvolutionTransposeGradient"; }

    int64_t sourceGradientFeatureChannels() const { return descriptor().outputFeatureChannels; }
    int64_t sourceImageFeatureChannels() const { return descriptor().inputFeatureChannels; }
    int64_t groups() const { return descriptor().groups; }
    const CNNConvolutionDescriptor& descriptor() const { return weights_.given.descriptor; }
    std::shared_ptr<CNNConvolutionDataSource> dataSource() const { return dataSource_; }
    CNNConvolutionGradientOption gradientOption = CNNConvolutionGradientOption::All;

    void reloadWeightsAndBiasesFromDataSource();
    void reloadWeightsAndBiasesWithCommandBuffer(CommandBuffer& cb,
                                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);

    static std::shared_ptr<CNNConvolutionTransposeGradient> initWithCoder(serial::Reader& reader,
                                                                          const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    // secondary_offset = the forward window's top-left tap in Z; primary_offset = 0.
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    TransposeWeights weights_;
};

}  // namespace mpsgrad
