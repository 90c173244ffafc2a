// The normalization and reduction nodes of the graph API (spec §3.1 catalogue): the local
// normalization nodes (MPSCNNNormalizationNode and its spatial, local-contrast and cross-channel
// subclasses) and the reduction nodes (MPSNNUnaryReductionNode, the spatial mean, the Gram
// matrix), forward and gradient. Each composes its family's kernel classes only.
#pragma once

#include "graph/filter_nodes.h"
#include "kernels/normalization.h"
#include "kernels/reduction.h"

namespace mpsgrad {

// ---- local normalization (filter_nodes_normalization.cpp) ------------------------------------------
// MPSCNNNormalizationNode (abstract): alpha, beta, delta [1, 5, 1] (read/write, copied into the
// kernel at every encode; the local-contrast node adds p0, pm, ps).
class CNNNormalizationNode : public UnaryKernelNode {
public:
    LocalNormalizationParameters parameters;

protected:
    CNNNormalizationNode(const ImageNodePtr& source, LocalNormalizationKind kind);
    void configureKernel(CNNKernel& kernel) override;
};

// MPSCNNSpatialNormalizationNode (+nodeWithSource:kernelSize:); kernelWidth == kernelHeight.
class CNNSpatialNormalizationNode final : public CNNNormalizationNode {
public:
    CNNSpatialNormalizationNode(const ImageNodePtr& source, int64_t kernelSize);
    const char* className() const override { return "CNNSpatialNormalizationNode"; }
    int64_t kernelWidth() const { return size_; }
    int64_t kernelHeight() const { return size_; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    int64_t size_;
};

// MPSCNNLocalContrastNormalizationNode (+nodeWithSource:kernelSize:). The node's defaults differ
// from the kernel's (spec §3.1): alpha 1, beta 0.5, delta 2^-10, p0 1, pm 0, ps 1.
class CNNLocalContrastNormalizationNode final : public CNNNormalizationNode {
public:
    CNNLocalContrastNormalizationNode(const ImageNodePtr& source, int64_t kernelSize);
    const char* className() const override { return "CNNLocalContrastNormalizationNode"; }
    int64_t kernelWidth() const { return size_; }
    int64_t kernelHeight() const { return size_; }
    static LocalNormalizationParameters nodeDefaults();

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    int64_t size_;
};

// MPSCNNCrossChannelNormalizationNode (+nodeWithSource:kernelSize:)
class CNNCrossChannelNormalizationNode final : public CNNNormalizationNode {
public:
    CNNCrossChannelNormalizationNode(const ImageNodePtr& source, int64_t kernelSize);
    const char* className() const override { return "CNNCrossChannelNormalizationNode"; }
    int64_t kernelSizeInFeatureChannels() const { return size_; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    int64_t size_;
};

// The local normalization gradient nodes' shared part: the parameters, which must equal the
// forward node's (the gradient kernel refuses a state written with other parameters). The
// gradient builders copy them from the forward node.
class CNNLocalNormalizationGradientNode : public GradientKernelNode {
public:
    LocalNormalizationParameters parameters;

protected:
    CNNLocalNormalizationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                      const StateNodePtr& gradientState, LocalNormalizationParameters parameters);
    void configureKernel(CNNGradientKernel& kernel) override;
};

// MPSCNNSpatialNormalizationGradientNode (...gradientState:kernelSize:)
class CNNSpatialNormalizationGradientNode final : public CNNLocalNormalizationGradientNode {
public:
    CNNSpatialNormalizationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                        const StateNodePtr& gradientState, int64_t kernelSize);
    const char* className() const override { return "CNNSpatialNormalizationGradientNode"; }
    int64_t kernelWidth() const { return size_; }
    int64_t kernelHeight() const { return size_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    int64_t size_;
};

// MPSCNNLocalContrastNormalizationGradientNode (...gradientState:kernelWidth:kernelHeight:); the
// parameters default to the forward node's defaults.
class CNNLocalContrastNormalizationGradientNode final : public CNNLocalNormalizationGradientNode {
public:
    CNNLocalContrastNormalizationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                              const StateNodePtr& gradientState, int64_t kernelWidth,
                                              int64_t kernelHeight);
    const char* className() const override { return "CNNLocalContrastNormalizationGradientNode"; }
    int64_t kernelWidth() const { return kw_; }
    int64_t kernelHeight() const { return kh_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    int64_t kw_, kh_;
};

// MPSCNNCrossChannelNormalizationGradientNode (...gradientState:kernelSize:)
class CNNCrossChannelNormalizationGradientNode final : public CNNLocalNormalizationGradientNode {
public:
    CNNCrossChannelNormalizationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                             const StateNodePtr& gradientState, int64_t kernelSize);
    const char* className() const override { return "CNNCrossChannelNormalizationGradientNode"; }
    int64_t kernelSize() const { return size_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    int64_t size_;
};

// ---- reductions (filter_nodes_reduction.cpp) ----------------------------------------------------------
// MPSNNUnaryReductionNode (abstract): clipRectSource [no clip], copied into the kernel at every encode.
class NNUnaryReductionNode : public UnaryKernelNode {
public:
    Region clipRectSource = rectNoClip();

protected:
    using UnaryKernelNode::UnaryKernelNode;
};

// MPSNNReductionSpatialMeanNode (+nodeWithSource:)
class NNReductionSpatialMeanNode final : public NNUnaryReductionNode {
public:
    explicit NNReductionSpatialMeanNode(const ImageNodePtr& source) : NNUnaryReductionNode(source) {}
    const char* className() const override { return "NNReductionSpatialMeanNode"; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    void configureKernel(CNNKernel& kernel) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;
};

// MPSNNReductionSpatialMeanGradientNode (+nodeWithSourceGradient:sourceImage:gradientState:)
class NNReductionSpatialMeanGradientNode final : public GradientKernelNode {
public:
    using GradientKernelNode::GradientKernelNode;
    const char* className() const override { return "NNReductionSpatialMeanGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// @protocol MPSNNGramMatrixCallback: -alphaForSourceImage:destinationImage: supplies the Gram
// node's alpha at every encode (the node's propertyCallBack).
class NNGramMatrixCallback {
public:
    virtual ~NNGramMatrixCallback() = default;
    virtual float alpha(const ImagePtr& source, const ImagePtr& destination) = 0;
};

// MPSNNGramMatrixCalculationNode (+nodeWithSource:[alpha:]); alpha read/write; propertyCallBack
// (null: alpha). The alpha of each encode is shared with the gradient nodes the builder makes, so a
// training graph's gradient always uses the alpha its forward pass used.
class NNGramMatrixCalculationNode final : public UnaryKernelNode {
public:
    explicit NNGramMatrixCalculationNode(const ImageNodePtr& source, float alpha = 1.0f);
    const char* className() const override { return "NNGramMatrixCalculationNode"; }
    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    float alpha;
    std::shared_ptr<NNGramMatrixCallback> propertyCallBack;
    // The alpha of the last encode, which the builder's gradient nodes follow (graph serialization
    // reconnects a decoded gradient node to it).
    std::shared_ptr<const float> encodedAlpha() const { return encodedAlpha_; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    std::shared_ptr<float> encodedAlpha_ = std::make_shared<float>(1.0f);
};

// MPSNNGramMatrixCalculationGradientNode (...gradientState:[alpha:]). A node made by the training
// graph builder follows its forward node's alpha of the same encode (callback included); one made
// by hand uses `alpha`.
class NNGramMatrixCalculationGradientNode final : public GradientKernelNode {
public:
    NNGramMatrixCalculationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                        const StateNodePtr& gradientState, float alpha = 1.0f,
                                        std::shared_ptr<const float> forwardAlpha = nullptr);
    const char* className() const override { return "NNGramMatrixCalculationGradientNode"; }
    float alpha;

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
    void configureKernel(CNNGradientKernel& kernel) override;

private:
    std::shared_ptr<const float> forwardAlpha_;
};

}  // namespace mpsgrad
