// MPSCNNFullyConnected and MPSCNNFullyConnectedGradient (MPSCNNConvolution.h, spec §2.1.7):
// a convolution whose kernel covers the whole source image, so the result is one pixel of
// outputFeatureChannels values.
//
// Weights (spec §6.4, decided): OHWI like every other convolution, with kernelWidth = source
// width and kernelHeight = source height: weight[o][y][x][i] multiplies source pixel (x, y),
// channel i. Apple's header text writes [O][srcW][srcH][I]; that order contradicts the OHWI
// layout of MPSCNNConvolutionDataSource and is not used (docs/fully_connected.md).
//
// Both classes are the convolution classes with the fully connected constraints: the forward
// and gradient math, the states (CNNConvolutionGradientState, CNNConvolutionWeightsAndBiasesState)
// and the weight-update flows are those of CNNConvolution / CNNConvolutionGradient.
#pragma once

#include <memory>

#include "kernels/convolution.h"

namespace mpsgrad {

// ValueError unless the descriptor describes a fully connected layer (stride 1, dilation 1,
// groups 1, not depthwise). `kernelName` names the class in the message.
void checkFullyConnectedDescriptor(const CNNConvolutionDescriptor& d, const char* kernelName);

// MPSCNNFullyConnected
class CNNFullyConnected final : public CNNConvolution {
public:
    // -initWithDevice:weights:
    CNNFullyConnected(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNFullyConnected"; }

    // -initWithCoder:device: (the payload of CNNConvolution)
    static std::shared_ptr<CNNFullyConnected> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    // The result is 1x1 whatever the padding policy; the source must be kernel-sized.
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
    // `offset` is ignored: the window always covers the source exactly.
    Offset forwardOffset() const override;
};

// MPSCNNFullyConnectedGradient
class CNNFullyConnectedGradient final : public CNNConvolutionGradient {
public:
    // -initWithDevice:weights: (pass the forward layer's data source)
    CNNFullyConnectedGradient(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource);
    const char* className() const override { return "CNNFullyConnectedGradient"; }

    static std::shared_ptr<CNNFullyConnectedGradient> initWithCoder(serial::Reader& reader, const Device& device);
};

}  // namespace mpsgrad
