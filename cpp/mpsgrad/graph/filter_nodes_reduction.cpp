// The reduction nodes: the spatial mean and the Gram matrix, and their gradient nodes.
#include <cmath>

#include "core/errors.h"
#include "graph/filter_nodes_normalization.h"

namespace mpsgrad {

// ---- spatial mean ------------------------------------------------------------------------------------

std::shared_ptr<CNNKernel> NNReductionSpatialMeanNode::makeKernel(const Device& device) {
    return std::make_shared<NNReductionSpatialMean>(device);
}

void NNReductionSpatialMeanNode::configureKernel(CNNKernel& kernel) {
    static_cast<NNReductionSpatialMean&>(kernel).clipRectSource = clipRectSource;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNReductionSpatialMeanNode::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<NNReductionSpatialMeanGradientNode>(g, sources_[0], resultState())};
}

std::shared_ptr<CNNGradientKernel> NNReductionSpatialMeanGradientNode::makeKernel(const Device& device) {
    return std::make_shared<NNReductionSpatialMeanGradient>(device);
}

// ---- Gram matrix -------------------------------------------------------------------------------------

namespace {
void checkAlpha(float alpha, const char* name = "alpha") {
    if (!std::isfinite(alpha)) throwValueError(name, ": must be finite, got ", alpha);
}
}  // namespace

NNGramMatrixCalculationNode::NNGramMatrixCalculationNode(const ImageNodePtr& source, float alpha)
    : UnaryKernelNode(source), alpha(alpha) {
    checkAlpha(alpha);
}

std::shared_ptr<CNNKernel> NNGramMatrixCalculationNode::makeKernel(const Device& device) {
    return std::make_shared<NNGramMatrixCalculation>(device, alpha);
}

NodeEncodeResult NNGramMatrixCalculationNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                     const std::vector<StateBatch>&) {
    auto& kernel = static_cast<NNGramMatrixCalculation&>(*kernel_);
    prepareKernel(kernel, ctx);
    const ImageBatch& sources = images.at(0);
    NodeEncodeResult result;
    // The callback sees the destination it describes, so it is allocated before alpha is known.
    result.images = kernel.allocateDestinationImages(ctx.cb, sources, sources.size());
    float encodeAlpha = alpha;
    if (propertyCallBack) encodeAlpha = propertyCallBack->alpha(sources.at(0), result.images.at(0));
    checkAlpha(encodeAlpha, propertyCallBack ? "property_call_back: the returned alpha" : "alpha");
    kernel.alpha = *encodedAlpha_ = encodeAlpha;
    StateBatch states;
    if (ctx.wantStates) states = kernel.resultStateBatch(sources, result.images);
    kernel.encodeBatch(ctx.cb, sources, states, result.images);
    if (ctx.wantStates) result.states.push_back(std::move(states));
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNGramMatrixCalculationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<NNGramMatrixCalculationGradientNode>(g, sources_[0], resultState(), alpha,
                                                                  encodedAlpha_)};
}

NNGramMatrixCalculationGradientNode::NNGramMatrixCalculationGradientNode(const ImageNodePtr& sourceGradient,
                                                                         const ImageNodePtr& sourceImage,
                                                                         const StateNodePtr& gradientState,
                                                                         float alpha,
                                                                         std::shared_ptr<const float> forwardAlpha)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), alpha(alpha),
      forwardAlpha_(std::move(forwardAlpha)) {
    checkAlpha(alpha);
}

std::shared_ptr<CNNGradientKernel> NNGramMatrixCalculationGradientNode::makeKernel(const Device& device) {
    return std::make_shared<NNGramMatrixCalculationGradient>(device, alpha);
}

void NNGramMatrixCalculationGradientNode::configureKernel(CNNGradientKernel& kernel) {
    if (forwardAlpha_) alpha = *forwardAlpha_;
    checkAlpha(alpha);
    static_cast<NNGramMatrixCalculationGradient&>(kernel).alpha = alpha;
}

}  // namespace mpsgrad
