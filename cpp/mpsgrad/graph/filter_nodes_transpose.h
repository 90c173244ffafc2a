// The transposed-convolution nodes (spec §3.1): MPSCNNConvolutionTransposeNode, whose optional
// input state is an upstream convolution node's convolution gradient state (it then gives that
// convolution's source size, spec §2.1.8), and MPSCNNConvolutionTransposeGradientNode, a
// convolution gradient node (MPSNNTrainableNode: the data source updates of the convolution nodes).
#pragma once

#include "graph/filter_nodes.h"
#include "kernels/convolution_transpose.h"

namespace mpsgrad {

// MPSCNNConvolutionTransposeNode (+nodeWithSource:convolutionGradientState:weights:). Unlike MPS it
// is not a CNNConvolutionNode subclass in mpsgrad (its kernel is not a CNNConvolution).
class CNNConvolutionTransposeNode final : public NNFilterNode {
public:
    // convolutionGradientState: null, or the result state of a CNNConvolutionNode.
    CNNConvolutionTransposeNode(const ImageNodePtr& source, const StateNodePtr& convolutionGradientState,
                                std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNConvolutionTransposeNode"; }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    NNConvolutionAccumulatorPrecisionOption accumulatorPrecision = NNConvolutionAccumulatorPrecisionOption::Float;
    const std::shared_ptr<CNNConvolutionDataSource>& dataSource() const { return dataSource_; }
    const std::shared_ptr<CNNConvolutionTranspose>& kernel() const { return kernel_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void reloadFromDataSource() override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    std::shared_ptr<CNNConvolutionTranspose> kernel_;
};

// MPSCNNConvolutionTransposeGradientNode (+nodeWithSourceGradient:sourceImage:
// convolutionTransposeGradientState:weights:; weights null: the forward node's).
class CNNConvolutionTransposeGradientNode final : public CNNConvolutionGradientNode {
public:
    CNNConvolutionTransposeGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                        const StateNodePtr& convolutionTransposeGradientState,
                                        std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNConvolutionTransposeGradientNode"; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    void reloadFromDataSource() override;

protected:
    void createKernels(const Device& device) override;
    std::shared_ptr<CNNConvolutionDataSource> dataSource() const override;
    std::shared_ptr<CNNConvolutionWeightsAndBiasesState> exportForwardWeights(CommandBuffer& cb) override;
    void reloadKernels(CommandBuffer* cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) override;

private:
    CNNConvolutionTransposeNode* forwardTranspose() const;
    std::shared_ptr<CNNConvolutionTransposeGradient> transposeKernel_;
};

}  // namespace mpsgrad
