// The split-loss nodes of the graph API (10.15): MPSNNForwardLossNode, whose result is the loss, and
// MPSNNLossGradientNode, the gradient of sum(sourceGradient * loss) with respect to the predictions
// (or, isLabelsGradientFilter, to the labels). Unlike MPSCNNLossNode the labels (and weights) are
// images. A training graph starts at an NNInitialGradientNode on the loss (or at any node after it).
#pragma once

#include "graph/filter_nodes.h"

namespace mpsgrad {

// @protocol MPSNNLossCallback: -scalarWeightForSourceImage:destinationImage: supplies the loss's
// scalar weight when the node is encoded (it replaces the descriptor's `weight` for that encode).
class NNLossCallback {
public:
    virtual ~NNLossCallback() = default;
    // Called once per encode with the first image of the batch: the predictions and the node's result.
    virtual float scalarWeight(const ImagePtr& sourceImage, const ImagePtr& destinationImage) = 0;
};

// MPSNNForwardLossNode (+nodeWithSource:labels:[weights:]lossDescriptor:, +nodeWithSources:lossDescriptor:
// with sources [predictions, labels(, weights)]).
class NNForwardLossNode final : public NNFilterNode {
public:
    NNForwardLossNode(std::vector<ImageNodePtr> sources, const CNNLossDescriptor& descriptor);
    const char* className() const override { return "NNForwardLossNode"; }
    const CNNLossDescriptor& descriptor() const { return descriptor_; }
    // propertyCallBack (null: the descriptor's weight). The gradient nodes the builder makes read
    // the weight of the forward encode through the forward state.
    std::shared_ptr<NNLossCallback> propertyCallBack;

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;
    // One gradient node, for the predictions (MPS: the labels' gradient node is built directly).
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    CNNLossDescriptor descriptor_;
    std::shared_ptr<NNForwardLoss> kernel_;
};

// MPSNNLossGradientNode (+nodeWithSourceGradient:sourceImage:labels:[weights:]gradientState:lossDescriptor:
// isLabelsGradientFilter:): inputs [sourceGradient, predictions, labels(, weights)], the forward
// loss node's result state (or none: the kernel's own properties).
class NNLossGradientNode final : public NNGradientFilterNode {
public:
    NNLossGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage, const ImageNodePtr& labels,
                       const ImageNodePtr& weights, const StateNodePtr& gradientState,
                       const CNNLossDescriptor& descriptor, bool isLabelsGradientFilter);
    const char* className() const override { return "NNLossGradientNode"; }
    const CNNLossDescriptor& descriptor() const { return descriptor_; }
    bool isLabelsGradientFilter() const { return labelsFilter_; }
    // propertyCallBack: the weight when the node has no forward state (a forward state carries the
    // forward encode's weight, which the kernel uses instead).
    std::shared_ptr<NNLossCallback> propertyCallBack;

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;

private:
    CNNLossDescriptor descriptor_;
    bool labelsFilter_;
    std::shared_ptr<NNLossGradient> kernel_;
};

}  // namespace mpsgrad
