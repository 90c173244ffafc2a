// The reshape and pad nodes (MPSNNReshapeNode, MPSNNPadNode) and their gradient nodes: they
// compose NNReshape / NNPad and their gradient kernels, whose states carry the forward geometry.
#include "core/errors.h"
#include "graph/filter_nodes.h"
#include "kernels/reshape_pad_checks.h"

namespace mpsgrad {

// ---- reshape ---------------------------------------------------------------------------------------------

NNReshapeNode::NNReshapeNode(const ImageNodePtr& source, int64_t resultWidth, int64_t resultHeight,
                             int64_t resultFeatureChannels)
    : NNFilterNode({source}, {}), w_(resultWidth), h_(resultHeight), c_(resultFeatureChannels) {
    // The kernel's check, at the node (under the node's parameter names).
    reshape_pad_checks::checkShape(w_, h_, c_, "result_width, result_height, result_feature_channels");
    addResultState<NNGradientStateNode>();
}

void NNReshapeNode::createKernels(const Device& device) { kernel_ = std::make_shared<NNReshape>(device); }

NodeEncodeResult NNReshapeNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                       const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    NodeEncodeResult result;
    StateBatch states;
    result.images = kernel_->encodeBatch(ctx.cb, images[0], ctx.wantStates ? &states : nullptr, false, w_, h_, c_);
    if (ctx.wantStates) result.states.push_back(std::move(states));
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNReshapeNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<NNReshapeGradientNode>(g, sources_[0], resultState())};
}

NNReshapeGradientNode::NNReshapeGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                             const StateNodePtr& gradientState)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState) {}

std::shared_ptr<CNNGradientKernel> NNReshapeGradientNode::makeKernel(const Device& device) {
    return std::make_shared<NNReshapeGradient>(device);
}

// ---- pad ---------------------------------------------------------------------------------------------------

NNPadNode::NNPadNode(const ImageNodePtr& source, ImageCoordinate paddingSizeBefore, ImageCoordinate paddingSizeAfter,
                     ImageEdgeMode edgeMode)
    : NNFilterNode({source}, {}), before_(paddingSizeBefore), after_(paddingSizeAfter), edge_(edgeMode) {
    // The kernel checks these when it encodes (its properties are writable); the node's are fixed.
    reshape_pad_checks::checkPaddingSizes(before_, after_);
    reshape_pad_checks::checkEdgeMode(edge_);
    addResultState<NNGradientStateNode>();
}

void NNPadNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<NNPad>(device, before_, after_);
}

NodeEncodeResult NNPadNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                   const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    kernel_->edgeMode = edge_;
    kernel_->fillValue = fillValue;
    return encodeUnaryKernel(*kernel_, ctx, images[0]);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNPadNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<NNPadGradientNode>(g, sources_[0], resultState())};
}

NNPadGradientNode::NNPadGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                     const StateNodePtr& gradientState)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState) {}

std::shared_ptr<CNNGradientKernel> NNPadGradientNode::makeKernel(const Device& device) {
    return std::make_shared<NNPadGradient>(device);
}

}  // namespace mpsgrad
