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
void checkAlpha(float alpha) {
    if (!std::isfinite(alpha)) throwValueError("alpha: must be finite, got ", alpha);
}
}  // namespace

NNGramMatrixCalculationNode::NNGramMatrixCalculationNode(const ImageNodePtr& source, float alpha)
    : UnaryKernelNode(source), alpha(alpha) {
    checkAlpha(alpha);
}

std::shared_ptr<CNNKernel> NNGramMatrixCalculationNode::makeKernel(const Device& device) {
    return std::make_shared<NNGramMatrixCalculation>(device, alpha);
}

void NNGramMatrixCalculationNode::configureKernel(CNNKernel& kernel) {
    checkAlpha(alpha);
    static_cast<NNGramMatrixCalculation&>(kernel).alpha = alpha;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> NNGramMatrixCalculationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<NNGramMatrixCalculationGradientNode>(g, sources_[0], resultState(), alpha)};
}

NNGramMatrixCalculationGradientNode::NNGramMatrixCalculationGradientNode(const ImageNodePtr& sourceGradient,
                                                                         const ImageNodePtr& sourceImage,
                                                                         const StateNodePtr& gradientState,
                                                                         float alpha)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), alpha(alpha) {
    checkAlpha(alpha);
}

std::shared_ptr<CNNGradientKernel> NNGramMatrixCalculationGradientNode::makeKernel(const Device& device) {
    return std::make_shared<NNGramMatrixCalculationGradient>(device, alpha);
}

void NNGramMatrixCalculationGradientNode::configureKernel(CNNGradientKernel& kernel) {
    checkAlpha(alpha);
    static_cast<NNGramMatrixCalculationGradient&>(kernel).alpha = alpha;
}

}  // namespace mpsgrad
