// The split-loss nodes: NNForwardLossNode and NNLossGradientNode.
#include "graph/filter_nodes_loss.h"

#include "core/errors.h"

namespace mpsgrad {

namespace {
std::vector<ImageNodePtr> lossGradientInputs(const ImageNodePtr& g, const ImageNodePtr& x, const ImageNodePtr& labels,
                                             const ImageNodePtr& weights) {
    checkNodeNotNull(g.get(), "source_gradient");
    checkNodeNotNull(x.get(), "source_image");
    checkNodeNotNull(labels.get(), "labels");
    std::vector<ImageNodePtr> inputs{g, x, labels};
    if (weights) inputs.push_back(weights);
    return inputs;
}

std::vector<StateNodePtr> optionalState(const StateNodePtr& state) {
    if (!state) return {};
    if (!dynamic_cast<NNGradientStateNode*>(state.get()))
        throwTypeError("gradient_state: expected an NNGradientStateNode (the forward loss node's result state) or "
                       "None, got a ", state->className());
    return {state};
}

// The weight of this encode: the callback's, else the descriptor's.
void applyWeight(NNLossKernel& kernel, const CNNLossDescriptor& descriptor, NNLossCallback* callback,
                 const ImagePtr& source, const ImagePtr& destination) {
    kernel.setWeight(callback ? callback->scalarWeight(source, destination) : descriptor.weight);
}

// The destinations of a node whose results are `descriptor`-sized, from the graph's allocator.
ImageBatch allocate(NodeEncodeContext& ctx, const ImageDescriptor& descriptor, const Kernel* kernel, size_t count) {
    return ctx.allocator->imageBatchForCommandBuffer(ctx.cb, descriptor, kernel, count);
}
}  // namespace

// ---- forward loss ------------------------------------------------------------------------------------

NNForwardLossNode::NNForwardLossNode(std::vector<ImageNodePtr> sources, const CNNLossDescriptor& descriptor)
    : NNFilterNode(std::move(sources), {}), descriptor_(descriptor) {
    if (sources_.size() != 2 && sources_.size() != 3)
        throwValueError("sources: a forward loss node takes [predictions, labels] or [predictions, labels, weights], "
                        "got ", sources_.size(), " image nodes");
    descriptor_.validate();
    addResultState<NNGradientStateNode>();
}

void NNForwardLossNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<NNForwardLoss>(device, descriptor_);
}

NodeEncodeResult NNForwardLossNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                           const std::vector<StateBatch>&) {
    kernel_->label = label;
    const ImageBatch& sources = images.at(0);
    ImageBatch weights = images.size() > 2 ? images[2] : ImageBatch{};
    NodeEncodeResult result;
    result.images = allocate(ctx, kernel_->lossImageDescriptor(*sources.at(0)), kernel_.get(), sources.size());
    applyWeight(*kernel_, descriptor_, propertyCallBack.get(), sources.at(0), result.images.at(0));
    StateBatch states;
    if (ctx.wantStates) states = kernel_->temporaryResultStateBatch(ctx.cb, sources);
    kernel_->encodeBatch(ctx.cb, sources, images.at(1), weights, states, result.images);
    if (ctx.wantStates) result.states.push_back(std::move(states));
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNForwardLossNode::makeGradientNodes(const ImageNodePtr& g) {
    ImageNodePtr weights = sources_.size() > 2 ? sources_[2] : nullptr;
    return {std::make_shared<NNLossGradientNode>(g, sources_[0], sources_[1], weights, resultState(), descriptor_,
                                                 false)};
}

// ---- loss gradient -----------------------------------------------------------------------------------

NNLossGradientNode::NNLossGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                       const ImageNodePtr& labels, const ImageNodePtr& weights,
                                       const StateNodePtr& gradientState, const CNNLossDescriptor& descriptor,
                                       bool isLabelsGradientFilter)
    : NNGradientFilterNode(lossGradientInputs(sourceGradient, sourceImage, labels, weights),
                           optionalState(gradientState)),
      descriptor_(descriptor), labelsFilter_(isLabelsGradientFilter) {
    descriptor_.validate();
}

void NNLossGradientNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<NNLossGradient>(device, descriptor_);
    kernel_->setComputeLabelGradients(labelsFilter_);
}

NodeEncodeResult NNLossGradientNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                            const std::vector<StateBatch>& states) {
    kernel_->label = label;
    const ImageBatch& sources = images.at(1);
    // dL/dy (or dL/dlabels) has the predictions' size.
    ImageDescriptor descriptor = sources.at(0)->descriptor();
    NodeEncodeResult result;
    result.images = allocate(ctx, descriptor, kernel_.get(), sources.size());
    applyWeight(*kernel_, descriptor_, propertyCallBack.get(), sources.at(0), result.images.at(0));
    ImageBatch weights = images.size() > 3 ? images[3] : ImageBatch{};
    kernel_->encodeBatch(ctx.cb, images.at(0), sources, images.at(2), weights,
                         states.empty() ? StateBatch{} : states[0], result.images);
    return result;
}

}  // namespace mpsgrad
