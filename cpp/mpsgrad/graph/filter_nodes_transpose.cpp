// The transposed-convolution nodes (filter_nodes_transpose.h).
#include "graph/filter_nodes_transpose.h"

#include "core/errors.h"

namespace mpsgrad {

namespace {
std::vector<StateNodePtr> convolutionStateInput(const StateNodePtr& state) {
    if (!state) return {};
    if (!dynamic_cast<CNNConvolutionGradientStateNode*>(state.get()))
        throwTypeError("convolution_gradient_state: expected a CNNConvolutionGradientStateNode (a convolution "
                       "node's result state) or None, got a ", state->className());
    return {state};
}
}  // namespace

CNNConvolutionTransposeNode::CNNConvolutionTransposeNode(const ImageNodePtr& source,
                                                         const StateNodePtr& convolutionGradientState,
                                                         std::shared_ptr<CNNConvolutionDataSource> weights)
    : NNFilterNode({source}, convolutionStateInput(convolutionGradientState)), dataSource_(std::move(weights)) {
    checkNodeNotNull(dataSource_.get(), "weights");
    addResultState<CNNConvolutionTransposeGradientStateNode>();
}

void CNNConvolutionTransposeNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNConvolutionTranspose>(device, dataSource_);
}

void CNNConvolutionTransposeNode::reloadFromDataSource() {
    if (kernel_) kernel_->reloadWeightsAndBiasesFromDataSource();
}

NodeEncodeResult CNNConvolutionTransposeNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                     const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    kernel_->accumulatorPrecisionOption = accumulatorPrecision;
    // The upstream convolution's states size the result (one per image, or none).
    StateBatch sizing = states.empty() ? StateBatch{} : states[0];
    NodeEncodeResult result;
    if (ctx.wantStates) {
        StateBatch out;
        result.images = kernel_->encodeBatch(ctx.cb, images[0], sizing, &out, false);
        result.states.push_back(std::move(out));
    } else {
        result.images = kernel_->encodeBatch(ctx.cb, images[0], sizing);
    }
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNConvolutionTransposeNode::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<CNNConvolutionTransposeGradientNode>(g, sources_[0], resultState(), nullptr)};
}

CNNConvolutionTransposeGradientNode::CNNConvolutionTransposeGradientNode(
    const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
    const StateNodePtr& convolutionTransposeGradientState, std::shared_ptr<CNNConvolutionDataSource> weights)
    : CNNConvolutionGradientNode(sourceGradient, sourceImage, convolutionTransposeGradientState, std::move(weights)) {
    checkStateNode<CNNConvolutionTransposeGradientStateNode>(convolutionTransposeGradientState,
                                                             "convolution_transpose_gradient_state",
                                                             "CNNConvolutionTransposeGradientStateNode");
}

CNNConvolutionTransposeNode* CNNConvolutionTransposeGradientNode::forwardTranspose() const {
    if (auto* node = dynamic_cast<CNNConvolutionTransposeNode*>(forward_.get())) return node;
    return dynamic_cast<CNNConvolutionTransposeNode*>(sourceStates_[0]->producer().get());
}

std::shared_ptr<CNNConvolutionDataSource> CNNConvolutionTransposeGradientNode::dataSource() const {
    if (weights_) return weights_;
    if (auto* forward = forwardTranspose()) return forward->dataSource();
    throwValueError("weights: ", className(), " was given no weights and its gradient state does not come from a "
                    "CNNConvolutionTransposeNode");
}

void CNNConvolutionTransposeGradientNode::createKernels(const Device& device) {
    transposeKernel_ = std::make_shared<CNNConvolutionTransposeGradient>(device, dataSource());
}

NodeEncodeResult CNNConvolutionTransposeGradientNode::encode(NodeEncodeContext& ctx,
                                                             const std::vector<ImageBatch>& images,
                                                             const std::vector<StateBatch>& states) {
    prepareKernel(*transposeKernel_, ctx);
    return encodeGradientKernel(*transposeKernel_, ctx, images, states);
}

void CNNConvolutionTransposeGradientNode::reloadFromDataSource() {
    if (transposeKernel_) transposeKernel_->reloadWeightsAndBiasesFromDataSource();
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolutionTransposeGradientNode::exportForwardWeights(
    CommandBuffer& cb) {
    auto* forward = forwardTranspose();
    if (forward && forward->kernel()) return forward->kernel()->exportWeightsAndBiasesWithCommandBuffer(cb, false);
    return nullptr;
}

void CNNConvolutionTransposeGradientNode::reloadKernels(
    CommandBuffer* cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    auto* forward = forwardTranspose();
    if (state && cb) {
        if (forward && forward->kernel()) forward->kernel()->reloadWeightsAndBiasesWithCommandBuffer(*cb, state);
        transposeKernel_->reloadWeightsAndBiasesWithCommandBuffer(*cb, state);
    } else {
        if (forward) forward->reloadFromDataSource();
        transposeKernel_->reloadWeightsAndBiasesFromDataSource();
    }
}

}  // namespace mpsgrad
