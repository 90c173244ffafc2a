// The local normalization nodes (spatial, local contrast, cross channel) and their gradient nodes.
#include "core/errors.h"
#include "graph/kernel_argument_checks.h"
#include "graph/filter_nodes_normalization.h"

namespace mpsgrad {

CNNNormalizationNode::CNNNormalizationNode(const ImageNodePtr& source, LocalNormalizationKind kind)
    : UnaryKernelNode(source), parameters(LocalNormalizationParameters::defaultsFor(kind)) {}

void CNNNormalizationNode::configureKernel(CNNKernel& kernel) {
    parameters.validate();
    static_cast<CNNLocalNormalizationBase&>(kernel).parameters = parameters;
}

// ---- spatial -----------------------------------------------------------------------------------------

CNNSpatialNormalizationNode::CNNSpatialNormalizationNode(const ImageNodePtr& source, int64_t kernelSize)
    : CNNNormalizationNode(source, LocalNormalizationKind::Spatial), size_(kernelSize) {
    checkKernelArguments("kernel_size", [&](const Device& d) { CNNSpatialNormalizationNode::makeKernel(d); });
}

std::shared_ptr<CNNKernel> CNNSpatialNormalizationNode::makeKernel(const Device& device) {
    return std::make_shared<CNNSpatialNormalization>(device, size_, size_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNSpatialNormalizationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    auto node = std::make_shared<CNNSpatialNormalizationGradientNode>(g, sources_[0], resultState(), size_);
    node->parameters = parameters;
    return {node};
}

// ---- local contrast ------------------------------------------------------------------------------------

LocalNormalizationParameters CNNLocalContrastNormalizationNode::nodeDefaults() {
    LocalNormalizationParameters q = LocalNormalizationParameters::defaultsFor(LocalNormalizationKind::LocalContrast);
    q.alpha = 1.0f;  // the node's alpha; the kernel's is 0 (spec §3.1)
    return q;
}

CNNLocalContrastNormalizationNode::CNNLocalContrastNormalizationNode(const ImageNodePtr& source, int64_t kernelSize)
    : CNNNormalizationNode(source, LocalNormalizationKind::LocalContrast), size_(kernelSize) {
    checkKernelArguments("kernel_size",
                         [&](const Device& d) { CNNLocalContrastNormalizationNode::makeKernel(d); });
    parameters = nodeDefaults();
}

std::shared_ptr<CNNKernel> CNNLocalContrastNormalizationNode::makeKernel(const Device& device) {
    return std::make_shared<CNNLocalContrastNormalization>(device, size_, size_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNLocalContrastNormalizationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    auto node =
        std::make_shared<CNNLocalContrastNormalizationGradientNode>(g, sources_[0], resultState(), size_, size_);
    node->parameters = parameters;
    return {node};
}

// ---- cross channel -------------------------------------------------------------------------------------

CNNCrossChannelNormalizationNode::CNNCrossChannelNormalizationNode(const ImageNodePtr& source, int64_t kernelSize)
    : CNNNormalizationNode(source, LocalNormalizationKind::CrossChannel), size_(kernelSize) {
    checkKernelArguments([&](const Device& d) { CNNCrossChannelNormalizationNode::makeKernel(d); });
}

std::shared_ptr<CNNKernel> CNNCrossChannelNormalizationNode::makeKernel(const Device& device) {
    return std::make_shared<CNNCrossChannelNormalization>(device, size_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNCrossChannelNormalizationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    auto node = std::make_shared<CNNCrossChannelNormalizationGradientNode>(g, sources_[0], resultState(), size_);
    node->parameters = parameters;
    return {node};
}

// ---- gradient nodes --------------------------------------------------------------------------------------

CNNLocalNormalizationGradientNode::CNNLocalNormalizationGradientNode(const ImageNodePtr& sourceGradient,
                                                                     const ImageNodePtr& sourceImage,
                                                                     const StateNodePtr& gradientState,
                                                                     LocalNormalizationParameters parameters)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), parameters(parameters) {}

void CNNLocalNormalizationGradientNode::configureKernel(CNNGradientKernel& kernel) {
    parameters.validate();
    static_cast<CNNLocalNormalizationGradientBase&>(kernel).parameters = parameters;
}

CNNSpatialNormalizationGradientNode::CNNSpatialNormalizationGradientNode(const ImageNodePtr& sourceGradient,
                                                                         const ImageNodePtr& sourceImage,
                                                                         const StateNodePtr& gradientState,
                                                                         int64_t kernelSize)
    : CNNLocalNormalizationGradientNode(sourceGradient, sourceImage, gradientState,
                                        LocalNormalizationParameters::defaultsFor(LocalNormalizationKind::Spatial)),
      size_(kernelSize) {
    checkKernelArguments("kernel_size",
                         [&](const Device& d) { CNNSpatialNormalizationGradientNode::makeKernel(d); });
}

std::shared_ptr<CNNGradientKernel> CNNSpatialNormalizationGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNSpatialNormalizationGradient>(device, size_, size_);
}

CNNLocalContrastNormalizationGradientNode::CNNLocalContrastNormalizationGradientNode(
    const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage, const StateNodePtr& gradientState,
    int64_t kernelWidth, int64_t kernelHeight)
    : CNNLocalNormalizationGradientNode(sourceGradient, sourceImage, gradientState,
                                        CNNLocalContrastNormalizationNode::nodeDefaults()),
      kw_(kernelWidth), kh_(kernelHeight) {
    checkKernelArguments([&](const Device& d) { CNNLocalContrastNormalizationGradientNode::makeKernel(d); });
}

std::shared_ptr<CNNGradientKernel> CNNLocalContrastNormalizationGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNLocalContrastNormalizationGradient>(device, kw_, kh_);
}

CNNCrossChannelNormalizationGradientNode::CNNCrossChannelNormalizationGradientNode(
    const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage, const StateNodePtr& gradientState,
    int64_t kernelSize)
    : CNNLocalNormalizationGradientNode(sourceGradient, sourceImage, gradientState,
                                        LocalNormalizationParameters::defaultsFor(LocalNormalizationKind::CrossChannel)),
      size_(kernelSize) {
    checkKernelArguments([&](const Device& d) { CNNCrossChannelNormalizationGradientNode::makeKernel(d); });
}

std::shared_ptr<CNNGradientKernel> CNNCrossChannelNormalizationGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNCrossChannelNormalizationGradient>(device, size_);
}

}  // namespace mpsgrad
