// Image, state and filter node bases (spec §3.1).
#include "graph/node.h"

#include "core/errors.h"
#include "graph/kernel_argument_checks.h"

namespace mpsgrad {

void checkNodeNotNull(const void* node, const char* what) {
    if (!node) throwValueError(what, ": expected a node, got None");
}

std::shared_ptr<NNImageNode> NNImageNode::exportedNodeWithHandle(HandlePtr handle) {
    auto node = std::make_shared<NNImageNode>(std::move(handle));
    node->exportFromGraph = true;
    return node;
}

std::shared_ptr<NNFilterNode> NNImageNode::producer() const {
    return producer_ ? producer_->shared_from_this() : nullptr;
}

std::shared_ptr<NNFilterNode> NNStateNode::producer() const {
    return producer_ ? producer_->shared_from_this() : nullptr;
}

NNFilterNode::NNFilterNode(std::vector<ImageNodePtr> sources, std::vector<StateNodePtr> sourceStates)
    : sources_(std::move(sources)), sourceStates_(std::move(sourceStates)) {
    for (size_t i = 0; i < sources_.size(); ++i)
        if (!sources_[i]) throwValueError("source: image node ", i, " is None");
    result_.producer_ = this;
}

ImageNodePtr NNFilterNode::resultImage() {
    std::shared_ptr<NNFilterNode> self;
    try {
        self = shared_from_this();
    } catch (const std::bad_weak_ptr&) {
        throwValueError(className(), ": a filter node must be owned by a std::shared_ptr (std::make_shared)");
    }
    return ImageNodePtr(self, &result_);
}

std::vector<StateNodePtr> NNFilterNode::resultStates() {
    std::vector<StateNodePtr> states;
    if (resultStates_.empty()) return states;
    auto self = resultImage();  // ownership of this node (and the ownership check)
    for (auto& state : resultStates_) states.push_back(StateNodePtr(self, state.get()));
    return states;
}

StateNodePtr NNFilterNode::resultState() {
    auto states = resultStates();
    return states.empty() ? nullptr : states.front();
}

const Device& kernelCheckDevice() {
    static const Device cpu("cpu");
    return cpu;
}

void NNFilterNode::checkSourceCount(size_t count) const {
    if (sources_.size() != count)
        throwValueError(className(), ": expected ", count, " source image node(s), got ", sources_.size());
}

void NNFilterNode::bind(const Device& device) {
    if (device_) {
        if (*device_ != device)
            throwValueError(className(), ": the node's kernels were created for device '", device_->name(),
                            "'; a graph on device '", device.name(), "' cannot use it (build the nodes again)");
        return;
    }
    createKernels(device);
    device_ = std::make_unique<Device>(device);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNFilterNode::makeGradientNodes(const ImageNodePtr&) {
    throwTypeError(className(), ": this node has no gradient node");
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNFilterNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>& sourceGradients) {
    if (sourceGradients.size() != 1)
        throwValueError("source_gradients: ", className(), " has one result, so it takes one gradient, got ",
                        sourceGradients.size());
    checkNodeNotNull(sourceGradients[0].get(), "source_gradient");
    auto nodes = makeGradientNodes(sourceGradients[0]);
    for (auto& node : nodes) {
        node->setForwardNode(shared_from_this());
        // MPSNNTrainableNode: the gradient node trains the way the forward node says.
        if (trainingStylePointer() && node->trainingStylePointer())
            *node->trainingStylePointer() = *trainingStylePointer();
    }
    return nodes;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNFilterNode::gradientFiltersWithSource(
    const ImageNodePtr& sourceGradient) {
    return gradientFiltersWithSources({sourceGradient});
}

std::shared_ptr<NNGradientFilterNode> NNFilterNode::gradientFilterWithSources(
    const std::vector<ImageNodePtr>& sourceGradients) {
    auto nodes = gradientFiltersWithSources(sourceGradients);
    if (nodes.size() != 1)
        throwTypeError(className(), ": has one gradient node per input (", nodes.size(),
                       "); use gradient_filters_with_sources");
    return nodes.front();
}

std::shared_ptr<NNGradientFilterNode> NNFilterNode::gradientFilterWithSource(const ImageNodePtr& sourceGradient) {
    return gradientFilterWithSources({sourceGradient});
}

NNGradientFilterNode::NNGradientFilterNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                           const StateNodePtr& gradientState)
    : NNFilterNode({sourceGradient, sourceImage}, {gradientState}) {
    checkNodeNotNull(sourceGradient.get(), "source_gradient");
    checkNodeNotNull(sourceImage.get(), "source_image");
    checkNodeNotNull(gradientState.get(), "gradient_state");
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNGradientFilterNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>&) {
    throwTypeError(className(), ": gradient nodes have no gradient (the gradient builders are unavailable)");
}

void NNGradientFilterNode::throwStateNodeType(const StateNodePtr& state, const char* what, const char* expected) {
    if (!state) throwValueError(what, ": expected a ", expected, ", got None");
    throwTypeError(what, ": expected a ", expected, ", got a ", state->className());
}

}  // namespace mpsgrad
