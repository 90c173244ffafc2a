// Arithmetic nodes and their gradient nodes, the loss node and the initial-gradient node.
#include "core/errors.h"
#include "graph/filter_nodes.h"

namespace mpsgrad {

// ---- arithmetic -------------------------------------------------------------------------------------

namespace {
const char* arithmeticNodeName(int32_t op, bool gradient) {
    switch (op) {
        case kArithmeticAdd: return gradient ? "NNAdditionGradientNode" : "NNAdditionNode";
        case kArithmeticSubtract: return gradient ? "NNSubtractionGradientNode" : "NNSubtractionNode";
        case kArithmeticMultiply: return gradient ? "NNMultiplicationGradientNode" : "NNMultiplicationNode";
        case kArithmeticDivide: return gradient ? "NNDivisionGradientNode" : "NNDivisionNode";
    }
    return gradient ? "NNArithmeticGradientNode" : "NNBinaryArithmeticNode";
}

void checkArithmeticOp(int32_t op) {
    if (op < kArithmeticAdd || op > kArithmeticDivide)
        throwValueError("op: expected an arithmetic op code 0..3 (add, subtract, multiply, divide), got ", op);
}
}  // namespace

NNBinaryArithmeticNode::NNBinaryArithmeticNode(std::vector<ImageNodePtr> sources, int32_t op)
    : NNFilterNode(std::move(sources), {}), op_(op) {
    checkArithmeticOp(op_);
    if (sources_.size() != 2)
        throwValueError("sources: an arithmetic node takes exactly two source images (left, right), got ",
                        sources_.size());
    addResultState<NNArithmeticGradientStateNode>();
}

const char* NNBinaryArithmeticNode::className() const { return arithmeticNodeName(op_, false); }

void NNBinaryArithmeticNode::createKernels(const Device& device) {
    switch (op_) {
        case kArithmeticAdd: kernel_ = std::make_shared<CNNAdd>(device); break;
        case kArithmeticSubtract: kernel_ = std::make_shared<CNNSubtract>(device); break;
        case kArithmeticMultiply: kernel_ = std::make_shared<CNNMultiply>(device); break;
        default: kernel_ = std::make_shared<CNNDivide>(device); break;
    }
}

NodeEncodeResult NNBinaryArithmeticNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    kernel_->primaryScale = primaryScale;
    kernel_->secondaryScale = secondaryScale;
    kernel_->bias = bias;
    kernel_->primaryStrideInFeatureChannels = primaryStrideInFeatureChannels;
    kernel_->secondaryStrideInFeatureChannels = secondaryStrideInFeatureChannels;
    kernel_->minimumValue = minimumValue;
    kernel_->maximumValue = maximumValue;
    NodeEncodeResult result;
    if (ctx.wantStates) {
        StateBatch states;
        result.images = kernel_->encodeBatch(ctx.cb, images[0], images[1], &states, false);
        result.states.push_back(std::move(states));
    } else {
        result.images = kernel_->encodeBatch(ctx.cb, images[0], images[1]);
    }
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNBinaryArithmeticNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>& sourceGradients) {
    if (sourceGradients.size() != 1)
        throwValueError("source_gradients: ", className(), " has one result, so it takes one gradient, got ",
                        sourceGradients.size());
    checkNodeNotNull(sourceGradients[0].get(), "source_gradient");
    // One gradient node per input; each reads the OTHER operand (the kernels' rule).
    auto self = shared_from_this();
    std::vector<std::shared_ptr<NNGradientFilterNode>> nodes{
        NNArithmeticGradientNode::make(sourceGradients[0], sources_[1], resultState(), op_, false),
        NNArithmeticGradientNode::make(sourceGradients[0], sources_[0], resultState(), op_, true)};
    for (auto& node : nodes) node->setForwardNode(self);
    return nodes;
}

NNArithmeticGradientNode::NNArithmeticGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                                   const StateNodePtr& gradientState, int32_t op,
                                                   bool isSecondarySourceFilter)
    : NNGradientFilterNode(sourceGradient, sourceImage, gradientState), op_(op), secondary_(isSecondarySourceFilter) {
    checkArithmeticOp(op_);
    checkStateNode<NNBinaryGradientStateNode>(gradientState, "gradient_state", "NNBinaryGradientStateNode");
}

std::shared_ptr<NNArithmeticGradientNode> NNArithmeticGradientNode::make(const ImageNodePtr& g, const ImageNodePtr& x,
                                                                         const StateNodePtr& state, int32_t op,
                                                                         bool secondary) {
    switch (op) {
        case kArithmeticAdd: return std::make_shared<NNAdditionGradientNode>(g, x, state, secondary);
        case kArithmeticSubtract: return std::make_shared<NNSubtractionGradientNode>(g, x, state, secondary);
        case kArithmeticMultiply: return std::make_shared<NNMultiplicationGradientNode>(g, x, state, secondary);
    }
    return std::make_shared<NNArithmeticGradientNode>(g, x, state, op, secondary);
}

const char* NNArithmeticGradientNode::className() const { return arithmeticNodeName(op_, true); }

void NNArithmeticGradientNode::createKernels(const Device& device) {
    switch (op_) {
        case kArithmeticAdd: kernel_ = std::make_shared<CNNAddGradient>(device, secondary_); break;
        case kArithmeticSubtract: kernel_ = std::make_shared<CNNSubtractGradient>(device, secondary_); break;
        case kArithmeticMultiply: kernel_ = std::make_shared<CNNMultiplyGradient>(device, secondary_); break;
        default: kernel_ = std::make_shared<CNNDivideGradient>(device, secondary_); break;
    }
}

NodeEncodeResult NNArithmeticGradientNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                  const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    return encodeGradientKernel(*kernel_, ctx, images, states);
}

// ---- loss ---------------------------------------------------------------------------------------------

CNNLossNode::CNNLossNode(const ImageNodePtr& source, const CNNLossDescriptor& descriptor)
    : NNFilterNode({source}, {std::make_shared<NNLabelsNode>()}), descriptor_(descriptor) {
    descriptor_.validate();
}

void CNNLossNode::createKernels(const Device& device) { kernel_ = std::make_shared<CNNLoss>(device, descriptor_); }

namespace {

std::vector<LossLabelsPtr> lossLabels(const StateBatch& states, const char* node) {
    std::vector<LossLabelsPtr> labels;
    for (const auto& state : states) {
        auto typed = std::dynamic_pointer_cast<CNNLossLabels>(state);
        if (!typed)
            throwTypeError("source_states: the labels of ", node, " must be CNNLossLabels, got ",
                           state ? state->className() : "None");
        labels.push_back(std::move(typed));
    }
    return labels;
}

}  // namespace

NodeEncodeResult CNNLossNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                     const std::vector<StateBatch>& states) {
    std::vector<LossLabelsPtr> labels = lossLabels(states.at(0), className());
    prepareKernel(*kernel_, ctx);  // the result images come from the graph's allocator
    NodeEncodeResult result;
    result.images = kernel_->encodeBatch(ctx.cb, images[0], labels);
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNLossNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>&) {
    throwTypeError(className(), ": the loss node is its own gradient (its result image is dL/d(source)); "
                                "call training_graph() on it instead of building a gradient node");
}

CNNYOLOLossNode::CNNYOLOLossNode(const ImageNodePtr& source, const CNNYOLOLossDescriptor& descriptor)
    : NNFilterNode({source}, {std::make_shared<NNLabelsNode>()}), descriptor_(descriptor) {
    descriptor_.validate();
}

void CNNYOLOLossNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNYOLOLoss>(device, descriptor_);
}

NodeEncodeResult CNNYOLOLossNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                         const std::vector<StateBatch>& states) {
    std::vector<LossLabelsPtr> labels = lossLabels(states.at(0), className());
    prepareKernel(*kernel_, ctx);  // the result images come from the graph's allocator
    NodeEncodeResult result;
    result.images = kernel_->encodeBatch(ctx.cb, images[0], labels);
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNYOLOLossNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>&) {
    throwTypeError(className(), ": the loss node is its own gradient (its result image is dL/d(source)); "
                                "call training_graph() on it instead of building a gradient node");
}

// ---- initial gradient --------------------------------------------------------------------------------

NNInitialGradientNode::NNInitialGradientNode(const ImageNodePtr& source) : NNFilterNode({source}, {}) {}

void NNInitialGradientNode::createKernels(const Device& device) {
    // y = a*x + b with a = 0, b = 1: ones shaped like the source.
    kernel_ = std::make_shared<CNNNeuron>(device, NNNeuronDescriptor::withType(CNNNeuronType::Linear, 0.0f, 1.0f));
}

NodeEncodeResult NNInitialGradientNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                               const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    NodeEncodeResult result;
    result.images = kernel_->encodeBatch(ctx.cb, images[0]);
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNInitialGradientNode::gradientFiltersWithSources(
    const std::vector<ImageNodePtr>&) {
    throwTypeError(className(), ": the initial-gradient node starts a gradient and has no gradient itself");
}

}  // namespace mpsgrad
