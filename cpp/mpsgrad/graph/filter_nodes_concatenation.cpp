#include "graph/filter_nodes_concatenation.h"

#include "core/errors.h"

namespace mpsgrad {

// ---- NNConcatenationNode ---------------------------------------------------------------------------

NNConcatenationNode::NNConcatenationNode(std::vector<ImageNodePtr> sources) : NNFilterNode(std::move(sources), {}) {
    if (sources_.empty()) throwValueError("sources: a concatenation node needs at least one source image");
    for (const auto& s : sources_) checkNodeNotNull(s.get(), "sources");
    addResultState<NNMultiaryGradientStateNode>();
}

void NNConcatenationNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNConcatenation>(device, sources_.size());
}

NodeEncodeResult NNConcatenationNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                             const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    NodeEncodeResult result;
    if (ctx.wantStates) {
        StateBatch states;
        result.images = kernel_->encodeBatch(ctx.cb, images, &states, false);
        result.states.push_back(std::move(states));
    } else {
        result.images = kernel_->encodeBatch(ctx.cb, images);
    }
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNConcatenationNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>& sourceGradients) {
    if (sourceGradients.size() != 1)
        throwValueError("source_gradients: ", className(), " has one result, so it takes one gradient, got ",
                        sourceGradients.size());
    checkNodeNotNull(sourceGradients[0].get(), "source_gradient");
    auto self = shared_from_this();
    std::vector<std::shared_ptr<NNGradientFilterNode>> nodes;
    for (size_t i = 0; i < sources_.size(); ++i) {
        nodes.push_back(
            std::make_shared<NNConcatenationGradientNode>(sourceGradients[0], sources_[i], resultState(), i));
        nodes.back()->setForwardNode(self);
    }
    return nodes;
}

// ---- NNConcatenationGradientNode ---------------------------------------------------------------------

namespace {

size_t sourceIndexOf(const ImageNodePtr& sourceImage, const StateNodePtr& gradientState) {
    auto producer = gradientState ? gradientState->producer() : nullptr;
    if (!producer || !dynamic_cast<NNConcatenationNode*>(producer.get()))
        throwValueError("gradient_state: expected the result state of an NNConcatenationNode");
    const auto& sources = producer->sourceImages();
    for (size_t i = 0; i < sources.size(); ++i)
        if (sources[i] == sourceImage) return i;
    throwValueError("source_image: is not a source of the NNConcatenationNode that produces gradient_state");
}

}  // namespace

NNConcatenationGradientNode::NNConcatenationGradientNode(const ImageNodePtr& sourceGradient,
                                                         const ImageNodePtr& sourceImage,
                                                         const StateNodePtr& gradientState)
    : NNConcatenationGradientNode(sourceGradient, sourceImage, gradientState,
                                  (checkStateNode<NNMultiaryGradientStateNode>(gradientState, "gradient_state",
                                                                               "NNMultiaryGradientStateNode"),
                                   sourceIndexOf(sourceImage, gradientState))) {}

NNConcatenationGradientNode::NNConcatenationGradientNode(const ImageNodePtr& sourceGradient,
                                                         const ImageNodePtr& sourceImage,
                                                         const StateNodePtr& gradientState, size_t sourceIndex)
    : NNGradientFilterNode(sourceGradient, sourceImage, gradientState), sourceIndex_(sourceIndex) {
    checkStateNode<NNMultiaryGradientStateNode>(gradientState, "gradient_state", "NNMultiaryGradientStateNode");
}

void NNConcatenationGradientNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNConcatenationGradient>(device, sourceIndex_);
}

NodeEncodeResult NNConcatenationGradientNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                     const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    return encodeGradientKernel(*kernel_, ctx, images, states);
}

}  // namespace mpsgrad
