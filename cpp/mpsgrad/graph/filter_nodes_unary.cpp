// Neuron, pooling, softmax, upsampling and dropout nodes and their gradient nodes, plus the
// encode helpers every family file uses.
#include "core/errors.h"
#include "graph/kernel_argument_checks.h"
#include "graph/filter_nodes.h"

namespace mpsgrad {

NodeEncodeResult encodeUnaryKernel(CNNKernel& kernel, NodeEncodeContext& ctx, const ImageBatch& sources) {
    NodeEncodeResult result;
    if (ctx.wantStates) {
        StateBatch states;
        result.images = kernel.encodeBatch(ctx.cb, sources, &states, false);
        result.states.push_back(std::move(states));
    } else {
        result.images = kernel.encodeBatch(ctx.cb, sources);
    }
    return result;
}

NodeEncodeResult encodeGradientKernel(CNNGradientKernel& kernel, NodeEncodeContext& ctx,
                                      const std::vector<ImageBatch>& images, const std::vector<StateBatch>& states) {
    NodeEncodeResult result;
    result.images = kernel.encodeBatch(ctx.cb, images.at(0), images.at(1), states.at(0));
    return result;
}

UnaryKernelNode::UnaryKernelNode(const ImageNodePtr& source) : NNFilterNode({source}, {}) {
    addResultState<NNGradientStateNode>();
}

NodeEncodeResult UnaryKernelNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                         const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    configureKernel(*kernel_);
    return encodeUnaryKernel(*kernel_, ctx, images[0]);
}

GradientKernelNode::GradientKernelNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                       const StateNodePtr& gradientState)
    : NNGradientFilterNode(sourceGradient, sourceImage, gradientState) {
    checkStateNode<NNGradientStateNode>(gradientState, "gradient_state", "NNGradientStateNode");
}

NodeEncodeResult GradientKernelNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                            const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    configureKernel(*kernel_);
    return encodeGradientKernel(*kernel_, ctx, images, states);
}

// ---- neuron ------------------------------------------------------------------------------------------

CNNNeuronNode::CNNNeuronNode(const ImageNodePtr& source, const NNNeuronDescriptor& descriptor, const char* name)
    : NNFilterNode({source}, {}), descriptor_(descriptor), name_(name) {
    descriptor_.validate("descriptor");
    addResultState<NNGradientStateNode>();
}

void CNNNeuronNode::createKernels(const Device& device) { kernel_ = std::make_shared<CNNNeuron>(device, descriptor_); }

NodeEncodeResult CNNNeuronNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                       const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    return encodeUnaryKernel(*kernel_, ctx, images[0]);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNNeuronNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<CNNNeuronGradientNode>(g, sources_[0], resultState(), descriptor_)};
}

CNNNeuronGradientNode::CNNNeuronGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                             const StateNodePtr& gradientState, const NNNeuronDescriptor& descriptor)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), descriptor_(descriptor) {
    descriptor_.validate("descriptor");
}

std::shared_ptr<CNNGradientKernel> CNNNeuronGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNNeuronGradient>(device, descriptor_);
}

// ---- pooling -----------------------------------------------------------------------------------------

namespace {
const char* poolingNodeName(PoolingKind kind, bool gradient) {
    switch (kind) {
        case PoolingKind::Max: return gradient ? "CNNPoolingMaxGradientNode" : "CNNPoolingMaxNode";
        case PoolingKind::Average: return gradient ? "CNNPoolingAverageGradientNode" : "CNNPoolingAverageNode";
        case PoolingKind::L2Norm: return gradient ? "CNNPoolingL2NormGradientNode" : "CNNPoolingL2NormNode";
        case PoolingKind::DilatedMax: return gradient ? "CNNDilatedPoolingMaxGradientNode" : "CNNDilatedPoolingMaxNode";
    }
    return "CNNPoolingNode";
}

std::shared_ptr<CNNPooling> makePooling(const Device& device, PoolingKind kind, int64_t kw, int64_t kh, int64_t sx,
                                        int64_t sy, int64_t dx, int64_t dy) {
    switch (kind) {
        case PoolingKind::Max: return std::make_shared<CNNPoolingMax>(device, kw, kh, sx, sy);
        case PoolingKind::Average: return std::make_shared<CNNPoolingAverage>(device, kw, kh, sx, sy);
        case PoolingKind::L2Norm: return std::make_shared<CNNPoolingL2Norm>(device, kw, kh, sx, sy);
        case PoolingKind::DilatedMax: return std::make_shared<CNNDilatedPoolingMax>(device, kw, kh, dx, dy, sx, sy);
    }
    throwValueError("kind: unknown pooling kind");
}

std::shared_ptr<CNNPoolingGradient> makePoolingGradient(const Device& device, PoolingKind kind, int64_t kw, int64_t kh,
                                                        int64_t sx, int64_t sy, int64_t dx, int64_t dy) {
    switch (kind) {
        case PoolingKind::Max: return std::make_shared<CNNPoolingMaxGradient>(device, kw, kh, sx, sy);
        case PoolingKind::Average: return std::make_shared<CNNPoolingAverageGradient>(device, kw, kh, sx, sy);
        case PoolingKind::L2Norm: return std::make_shared<CNNPoolingL2NormGradient>(device, kw, kh, sx, sy);
        case PoolingKind::DilatedMax:
            return std::make_shared<CNNDilatedPoolingMaxGradient>(device, kw, kh, dx, dy, sx, sy);
    }
    throwValueError("kind: unknown pooling kind");
}
}  // namespace

CNNPoolingNode::CNNPoolingNode(const ImageNodePtr& source, PoolingKind kind, int64_t kernelWidth,
                               int64_t kernelHeight, int64_t strideX, int64_t strideY, int64_t dilationX,
                               int64_t dilationY)
    : NNFilterNode({source}, {}), kind_(kind), kw_(kernelWidth), kh_(kernelHeight), sx_(strideX), sy_(strideY),
      dx_(dilationX), dy_(dilationY) {
    checkKernelArguments([&](const Device& d) { makePooling(d, kind_, kw_, kh_, sx_, sy_, dx_, dy_); });
    addResultState<NNGradientStateNode>();
}

const char* CNNPoolingNode::className() const { return poolingNodeName(kind_, false); }

void CNNPoolingNode::createKernels(const Device& device) {
    kernel_ = makePooling(device, kind_, kw_, kh_, sx_, sy_, dx_, dy_);
    kernel_->edgeMode = ImageEdgeMode::Clamp;  // the graph pooling nodes' default (spec §3.1)
}

NodeEncodeResult CNNPoolingNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                        const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    return encodeUnaryKernel(*kernel_, ctx, images[0]);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNPoolingNode::makeGradientNodes(const ImageNodePtr& g) {
    auto x = sources_[0];
    auto state = resultState();
    switch (kind_) {
        case PoolingKind::Max:
            return {std::make_shared<CNNPoolingMaxGradientNode>(g, x, state, kw_, kh_, sx_, sy_, paddingPolicy)};
        case PoolingKind::Average:
            return {std::make_shared<CNNPoolingAverageGradientNode>(g, x, state, kw_, kh_, sx_, sy_, paddingPolicy)};
        case PoolingKind::L2Norm:
            return {std::make_shared<CNNPoolingL2NormGradientNode>(g, x, state, kw_, kh_, sx_, sy_, paddingPolicy)};
        case PoolingKind::DilatedMax: break;
    }
    return {std::make_shared<CNNDilatedPoolingMaxGradientNode>(g, x, state, kw_, kh_, sx_, sy_, dx_, dy_,
                                                               paddingPolicy)};
}

CNNPoolingGradientNode::CNNPoolingGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                               const StateNodePtr& gradientState, PoolingKind kind,
                                               int64_t kernelWidth, int64_t kernelHeight, int64_t strideX,
                                               int64_t strideY, std::shared_ptr<NNPadding> padding,
                                               int64_t dilationX, int64_t dilationY)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), kind_(kind), kw_(kernelWidth),
      kh_(kernelHeight), sx_(strideX), sy_(strideY), dx_(dilationX), dy_(dilationY) {
    checkKernelArguments([&](const Device& d) { makePoolingGradient(d, kind_, kw_, kh_, sx_, sy_, dx_, dy_); });
    paddingPolicy = std::move(padding);
}

const char* CNNPoolingGradientNode::className() const { return poolingNodeName(kind_, true); }

std::shared_ptr<CNNGradientKernel> CNNPoolingGradientNode::makeKernel(const Device& device) {
    return makePoolingGradient(device, kind_, kw_, kh_, sx_, sy_, dx_, dy_);
}

// ---- softmax -----------------------------------------------------------------------------------------

CNNSoftMaxNode::CNNSoftMaxNode(const ImageNodePtr& source, bool logSoftmax)
    : UnaryKernelNode(source), log_(logSoftmax) {}

std::shared_ptr<CNNKernel> CNNSoftMaxNode::makeKernel(const Device& device) {
    if (log_) return std::make_shared<CNNLogSoftMax>(device);
    return std::make_shared<CNNSoftMax>(device);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNSoftMaxNode::makeGradientNodes(const ImageNodePtr& g) {
    // The softmax gradients read the forward result, not the forward source (spec §3.2).
    if (log_) return {std::make_shared<CNNLogSoftMaxGradientNode>(g, resultImage(), resultState())};
    return {std::make_shared<CNNSoftMaxGradientNode>(g, resultImage(), resultState())};
}

std::shared_ptr<CNNGradientKernel> CNNSoftMaxGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNSoftMaxGradient>(device);
}

std::shared_ptr<CNNGradientKernel> CNNLogSoftMaxGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNLogSoftMaxGradient>(device);
}

// ---- upsampling --------------------------------------------------------------------------------------

CNNUpsamplingNode::CNNUpsamplingNode(const ImageNodePtr& source, bool bilinear, int64_t scaleX, int64_t scaleY,
                                     bool alignCorners)
    : UnaryKernelNode(source), bilinear_(bilinear), sx_(scaleX), sy_(scaleY), align_(alignCorners) {
    checkKernelArguments([&](const Device& d) { CNNUpsamplingNode::makeKernel(d); });
}

std::shared_ptr<CNNKernel> CNNUpsamplingNode::makeKernel(const Device& device) {
    if (bilinear_) return std::make_shared<CNNUpsamplingBilinear>(device, sx_, sy_, align_);
    return std::make_shared<CNNUpsamplingNearest>(device, sx_, sy_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNUpsamplingNode::makeGradientNodes(const ImageNodePtr& g) {
    if (bilinear_) return {std::make_shared<CNNUpsamplingBilinearGradientNode>(g, sources_[0], resultState(), sx_, sy_)};
    return {std::make_shared<CNNUpsamplingNearestGradientNode>(g, sources_[0], resultState(), sx_, sy_)};
}

CNNUpsamplingGradientNode::CNNUpsamplingGradientNode(const ImageNodePtr& sourceGradient,
                                                     const ImageNodePtr& sourceImage,
                                                     const StateNodePtr& gradientState, int64_t scaleX, int64_t scaleY)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), sx_(scaleX), sy_(scaleY) {
    // Both kinds' gradient kernels take the same scale factors (the subclass is not built yet).
    checkKernelArguments([&](const Device& d) { CNNUpsamplingNearestGradient(d, sx_, sy_); });
}

std::shared_ptr<CNNGradientKernel> CNNUpsamplingNearestGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNUpsamplingNearestGradient>(device, sx_, sy_);
}

std::shared_ptr<CNNGradientKernel> CNNUpsamplingBilinearGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNUpsamplingBilinearGradient>(device, sx_, sy_);
}

// ---- dropout -----------------------------------------------------------------------------------------

CNNDropoutNode::CNNDropoutNode(const ImageNodePtr& source, float keepProbability, uint64_t seed,
                               Size3 maskStrideInPixels)
    : UnaryKernelNode(source), keep_(keepProbability), seed_(seed), stride_(maskStrideInPixels) {
    checkKernelArguments([&](const Device& d) { CNNDropoutNode::makeKernel(d); });
}

std::shared_ptr<CNNKernel> CNNDropoutNode::makeKernel(const Device& device) {
    return std::make_shared<CNNDropout>(device, keep_, seed_, stride_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNDropoutNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<CNNDropoutGradientNode>(g, sources_[0], resultState(), keep_, seed_, stride_)};
}

CNNDropoutGradientNode::CNNDropoutGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                               const StateNodePtr& gradientState, float keepProbability,
                                               uint64_t seed, Size3 maskStrideInPixels)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState), keep_(keepProbability), seed_(seed),
      stride_(maskStrideInPixels) {
    checkKernelArguments([&](const Device& d) { CNNDropoutGradientNode::makeKernel(d); });
}

std::shared_ptr<CNNGradientKernel> CNNDropoutGradientNode::makeKernel(const Device& device) {
    return std::make_shared<CNNDropoutGradient>(device, keep_, seed_, stride_);
}

}  // namespace mpsgrad
