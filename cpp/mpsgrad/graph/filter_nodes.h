// Forward and gradient filter nodes of the kernel families mpsgrad has (spec §3.1 catalogue):
// convolution, fully connected, batch normalization (filter_nodes_trainable.cpp), neuron,
// pooling, softmax, upsampling, dropout (filter_nodes_unary.cpp), arithmetic, loss and the
// initial gradient (filter_nodes_binary.cpp), reshape and pad (filter_nodes_shape.cpp). Each node
// composes its family's kernel classes only.
#pragma once

#include "graph/graph_fusion.h"
#include "graph/node.h"
#include "kernels/arithmetic.h"
#include "kernels/batch_normalization.h"
#include "kernels/convolution.h"
#include "kernels/dropout.h"
#include "kernels/fully_connected.h"
#include "kernels/loss.h"
#include "kernels/neuron.h"
#include "kernels/pooling.h"
#include "kernels/reshape_pad.h"
#include "kernels/softmax.h"
#include "kernels/upsampling.h"
#include "kernels/yolo_loss.h"

namespace mpsgrad {

// ---- helpers shared by the family files ----------------------------------------------------------
// Encodes a unary forward kernel with the returning form (result states when ctx.wantStates).
NodeEncodeResult encodeUnaryKernel(CNNKernel& kernel, NodeEncodeContext& ctx, const ImageBatch& sources);
// Encodes a gradient kernel: inputs [sourceGradient, sourceImage], states[0] the forward states.
NodeEncodeResult encodeGradientKernel(CNNGradientKernel& kernel, NodeEncodeContext& ctx,
                                      const std::vector<ImageBatch>& images, const std::vector<StateBatch>& states);

// A forward node that runs one kernel with the returning encode form; its result state is an
// NNGradientStateNode. A subclass says which kernel (makeKernel), what to copy into it before each
// encode (configureKernel) and which gradient node differentiates it (makeGradientNodes).
class UnaryKernelNode : public NNFilterNode {
public:
    explicit UnaryKernelNode(const ImageNodePtr& source);  // (abstract: makeKernel)
    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) final { kernel_ = makeKernel(device); }
    virtual std::shared_ptr<CNNKernel> makeKernel(const Device& device) = 0;
    virtual void configureKernel(CNNKernel& kernel) { (void)kernel; }

    std::shared_ptr<CNNKernel> kernel_;
};

// A gradient node that runs one gradient kernel on [sourceGradient, sourceImage] with the forward
// node's result state (an NNGradientStateNode).
class GradientKernelNode : public NNGradientFilterNode {
public:
    // (abstract: makeKernel)
    GradientKernelNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                       const StateNodePtr& gradientState);
    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) final { kernel_ = makeKernel(device); }
    virtual std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) = 0;
    virtual void configureKernel(CNNGradientKernel& kernel) { (void)kernel; }

    std::shared_ptr<CNNGradientKernel> kernel_;
};

// ---- convolution ---------------------------------------------------------------------------------
// Data sources that can take a training step (the optional update methods of
// MPSCNNConvolutionDataSource). The graph calls them for trainable convolution gradient nodes.
class CNNConvolutionUpdatableDataSource {
public:
    virtual ~CNNConvolutionUpdatableDataSource() = default;
    // -updateWithCommandBuffer:gradientState:sourceState: (GPU style). Returns the new weights
    // state to reload the kernels from, or null (then the kernels reload from the data source).
    virtual std::shared_ptr<CNNConvolutionWeightsAndBiasesState> updateWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNConvolutionGradientState>& gradientState,
        const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& sourceState) = 0;
    // -updateWithGradientState:sourceState: (CPU style, after completion). True: reload.
    virtual bool updateWithGradientState(const std::shared_ptr<CNNConvolutionGradientState>& gradientState,
                                         const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& sourceState) = 0;
    // Which of the two the data source implements.
    virtual bool supportsGPUUpdate() const = 0;
    virtual bool supportsCPUUpdate() const = 0;
};

// MPSCNNConvolutionNode (MPSNNTrainableNode). Fuses a following neuron in graphs that allow it
// (graph_fusion.h).
class CNNConvolutionNode : public NNFilterNode, public NeuronFusingNode {
public:
    // +nodeWithSource:weights:
    CNNConvolutionNode(const ImageNodePtr& source, std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNConvolutionNode"; }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    NNConvolutionAccumulatorPrecisionOption accumulatorPrecision = NNConvolutionAccumulatorPrecisionOption::Float;
    // -convolutionGradientState (= resultState)
    StateNodePtr convolutionGradientState() { return resultState(); }
    const std::shared_ptr<CNNConvolutionDataSource>& dataSource() const { return dataSource_; }
    // The forward kernel (null until a graph bound the node).
    const std::shared_ptr<CNNConvolution>& kernel() const { return kernel_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void reloadFromDataSource() override;
    // NeuronFusingNode (graph_fusion.cpp)
    bool canFuseNeuron(const NNNeuronDescriptor& neuron) const override;
    NodeEncodeResult encodeWithNeuron(NodeEncodeContext& ctx, const ImageBatch& sources,
                                      const NNNeuronDescriptor& neuron) override;
    bool fusionPays() const override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

    std::shared_ptr<CNNConvolutionDataSource> dataSource_;
    std::shared_ptr<CNNConvolution> kernel_;  // a CNNFullyConnected for CNNFullyConnectedNode
    // Kernels with a fused neuron, kept in step with kernel_ (graph_fusion.h).
    std::vector<FusedConvolutionKernel> fusedKernels_;
};

// MPSCNNConvolutionGradientNode (MPSNNTrainableNode)
class CNNConvolutionGradientNode : public NNGradientFilterNode {
public:
    // +nodeWithSourceGradient:sourceImage:convolutionGradientState:weights: (weights null: the
    // forward node's data source, once the node is built by gradient_filter_with_source).
    CNNConvolutionGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                               const StateNodePtr& convolutionGradientState,
                               std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNConvolutionGradientNode"; }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    const std::shared_ptr<CNNConvolutionGradient>& kernel() const { return kernel_; }
    // The weights given at construction (null: the forward node's data source).
    const std::shared_ptr<CNNConvolutionDataSource>& explicitWeights() const { return weights_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) override;
    void reloadFromDataSource() override;
    // ValueError unless the data source can take the update this node's training style asks for.
    void checkTrainable() const override;

protected:
    void createKernels(const Device& device) override;
    // The weights: the node's own, else the forward node's data source (the transpose node's
    // override looks up the forward transposed convolution).
    virtual std::shared_ptr<CNNConvolutionDataSource> dataSource() const;
    // GPU style: the forward kernel's current weights (null without a forward kernel).
    virtual std::shared_ptr<CNNConvolutionWeightsAndBiasesState> exportForwardWeights(CommandBuffer& cb);
    // After an update: the forward and gradient kernels take `state` on `cb` (both non-null) or
    // reload from the data source.
    virtual void reloadKernels(CommandBuffer* cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state);

    std::shared_ptr<CNNConvolutionGradient> kernel_;  // a CNNFullyConnectedGradient for the FC node
    std::shared_ptr<CNNConvolutionDataSource> weights_;

private:
    CNNConvolutionNode* forwardConvolution() const;
};

// MPSCNNFullyConnectedNode (a MPSCNNConvolutionNode subclass): the forward kernel is a
// CNNFullyConnected, whose window covers the whole source image; training, data sources and
// training styles are the convolution node's.
class CNNFullyConnectedNode final : public CNNConvolutionNode {
public:
    // +nodeWithSource:weights:
    CNNFullyConnectedNode(const ImageNodePtr& source, std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNFullyConnectedNode"; }

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;
};

// MPSCNNFullyConnectedGradientNode (a MPSCNNConvolutionGradientNode subclass): a
// CNNFullyConnectedGradient kernel.
class CNNFullyConnectedGradientNode final : public CNNConvolutionGradientNode {
public:
    // +nodeWithSourceGradient:sourceImage:convolutionGradientState:weights:
    CNNFullyConnectedGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                  const StateNodePtr& convolutionGradientState,
                                  std::shared_ptr<CNNConvolutionDataSource> weights);
    const char* className() const override { return "CNNFullyConnectedGradientNode"; }

protected:
    void createKernels(const Device& device) override;
};

// ---- batch normalization ----------------------------------------------------------------------------
// MPSCNNBatchNormalizationFlags
enum class CNNBatchNormalizationFlags : uint32_t {
    Default = 0, CalculateStatisticsAutomatic = 0, CalculateStatisticsAlways = 1, CalculateStatisticsNever = 2,
};

// Data sources that can take a training step (optional MPSCNNBatchNormalizationDataSource methods).
class CNNBatchNormalizationUpdatableDataSource {
public:
    virtual ~CNNBatchNormalizationUpdatableDataSource() = default;
    // Which of the optional methods the data source has.
    virtual bool updatesOnCommandBuffer() const = 0;  // gamma and beta, GPU style
    virtual bool updatesMeanAndVarianceOnCommandBuffer() const = 0;
    virtual bool updatesAfterCompletion() const = 0;
    // GPU style (right after the gradient is encoded): -updateGammaAndBetaWithCommandBuffer:
    // batchNormalizationState: and -updateMeanAndVarianceWithCommandBuffer:batchNormalizationState:.
    // A returned state is reloaded on the command buffer; null: the kernel reloads from the data
    // source when the command buffer completes (the data source updates itself).
    virtual std::shared_ptr<CNNNormalizationGammaAndBetaState> updateGammaAndBetaWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNBatchNormalizationState>& state) = 0;
    virtual std::shared_ptr<CNNNormalizationMeanAndVarianceState> updateMeanAndVarianceWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNBatchNormalizationState>& state) = 0;
    // CPU style (after completion): -updateGammaAndBetaWithBatchNormalizationState: and
    // -updateMeanAndVarianceWithBatchNormalizationState:. True: reload the kernel.
    virtual bool updateGammaAndBeta(const std::shared_ptr<CNNBatchNormalizationState>& state) = 0;
    virtual bool updateMeanAndVariance(const std::shared_ptr<CNNBatchNormalizationState>& state) = 0;
};

// MPSCNNBatchNormalizationNode (MPSNNTrainableNode). Fuses a following neuron in graphs that allow
// it (graph_fusion.h).
class CNNBatchNormalizationNode : public NNFilterNode, public NeuronFusingNode {
public:
    // +nodeWithSource:dataSource:
    CNNBatchNormalizationNode(const ImageNodePtr& source, std::shared_ptr<CNNBatchNormalizationDataSource> dataSource);
    const char* className() const override { return "CNNBatchNormalizationNode"; }

    CNNBatchNormalizationFlags flags = CNNBatchNormalizationFlags::Default;
    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    const std::shared_ptr<CNNBatchNormalizationDataSource>& dataSource() const { return dataSource_; }
    const std::shared_ptr<CNNBatchNormalization>& kernel() const { return kernel_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void reloadFromDataSource() override;
    // NeuronFusingNode (graph_fusion.cpp)
    bool canFuseNeuron(const NNNeuronDescriptor& neuron) const override;
    NodeEncodeResult encodeWithNeuron(NodeEncodeContext& ctx, const ImageBatch& sources,
                                      const NNNeuronDescriptor& neuron) override;
    bool fusionPays() const override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    // The node's encode with `kernel` (kernel_ or a fused one).
    NodeEncodeResult encodeWith(CNNBatchNormalization& kernel, NodeEncodeContext& ctx, const ImageBatch& sources);

    std::shared_ptr<CNNBatchNormalizationDataSource> dataSource_;
    std::shared_ptr<CNNBatchNormalization> kernel_;
    std::shared_ptr<CNNBatchNormalizationStatistics> statistics_;
    std::vector<FusedBatchNormalizationKernel> fusedKernels_;  // kept in step with kernel_
};

// MPSCNNBatchNormalizationGradientNode (MPSNNTrainableNode): the statistics gradient over the whole
// batch, then the gradient.
class CNNBatchNormalizationGradientNode : public NNGradientFilterNode {
public:
    CNNBatchNormalizationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                      const StateNodePtr& gradientState);
    const char* className() const override { return "CNNBatchNormalizationGradientNode"; }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) override;
    void checkTrainable() const override;

protected:
    void createKernels(const Device& device) override;

private:
    CNNBatchNormalizationNode* forwardBatchNormalization() const;

    std::shared_ptr<CNNBatchNormalizationStatisticsGradient> statisticsGradient_;
    std::shared_ptr<CNNBatchNormalizationGradient> kernel_;
};

// ---- neuron ----------------------------------------------------------------------------------------
// MPSCNNNeuronNode (+nodeWithSource:descriptor:); the per-type subclasses are this class with a
// descriptor of their type (CNNNeuronReLUNode(source, a) == CNNNeuronNode(source, ReLU(a))).
class CNNNeuronNode : public NNFilterNode {
public:
    CNNNeuronNode(const ImageNodePtr& source, const NNNeuronDescriptor& descriptor, const char* name = "CNNNeuronNode");
    const char* className() const override { return name_; }
    const NNNeuronDescriptor& descriptor() const { return descriptor_; }
    float a() const { return descriptor_.a; }
    float b() const { return descriptor_.b; }
    float c() const { return descriptor_.c; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    NNNeuronDescriptor descriptor_;
    const char* name_;
    std::shared_ptr<CNNNeuron> kernel_;
};

// MPSCNNNeuronPReLUNode (+nodeWithSource:aData:): one slope per feature channel (or one per
// channel of the image), as CNNNeuronPReLU takes them.
class CNNNeuronPReLUNode final : public CNNNeuronNode {
public:
    CNNNeuronPReLUNode(const ImageNodePtr& source, std::vector<float> aData)
        : CNNNeuronNode(source, NNNeuronDescriptor::preluWithData(std::move(aData)), "CNNNeuronPReLUNode") {}
};

// MPSCNNNeuronGradientNode (+nodeWithSourceGradient:sourceImage:gradientState:descriptor:)
class CNNNeuronGradientNode : public GradientKernelNode {
public:
    CNNNeuronGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                          const StateNodePtr& gradientState, const NNNeuronDescriptor& descriptor);
    const char* className() const override { return "CNNNeuronGradientNode"; }
    const NNNeuronDescriptor& descriptor() const { return descriptor_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    NNNeuronDescriptor descriptor_;
};

// ---- pooling -----------------------------------------------------------------------------------------
// MPSCNNPoolingNode and its Max / Average / L2Norm / DilatedMax subclasses (edge mode Clamp).
class CNNPoolingNode : public NNFilterNode {
public:
    // -initWithSource:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY: (and dilation for
    // DilatedMax). filterSize / filterSize:stride: forms are these with equal sizes.
    CNNPoolingNode(const ImageNodePtr& source, PoolingKind kind, int64_t kernelWidth, int64_t kernelHeight,
                   int64_t strideX, int64_t strideY, int64_t dilationX = 1, int64_t dilationY = 1);
    const char* className() const override;
    PoolingKind kind() const { return kind_; }
    int64_t kernelWidth() const { return kw_; }
    int64_t kernelHeight() const { return kh_; }
    int64_t strideInPixelsX() const { return sx_; }
    int64_t strideInPixelsY() const { return sy_; }
    int64_t dilationRateX() const { return dx_; }
    int64_t dilationRateY() const { return dy_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    PoolingKind kind_;
    int64_t kw_, kh_, sx_, sy_, dx_, dy_;
    std::shared_ptr<CNNPooling> kernel_;
};

// MPSCNNPoolingGradientNode (abstract in MPS) and its Max / Average / L2Norm / DilatedMax
// subclasses, which the forward pooling nodes' gradient builders create.
class CNNPoolingGradientNode : public GradientKernelNode {
public:
    CNNPoolingGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                           const StateNodePtr& gradientState, PoolingKind kind, int64_t kernelWidth,
                           int64_t kernelHeight, int64_t strideX, int64_t strideY,
                           std::shared_ptr<NNPadding> paddingPolicy, int64_t dilationX = 1, int64_t dilationY = 1);
    const char* className() const override;
    PoolingKind kind() const { return kind_; }
    int64_t kernelWidth() const { return kw_; }
    int64_t kernelHeight() const { return kh_; }
    int64_t strideInPixelsX() const { return sx_; }
    int64_t strideInPixelsY() const { return sy_; }
    int64_t dilationRateX() const { return dx_; }
    int64_t dilationRateY() const { return dy_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    PoolingKind kind_;
    int64_t kw_, kh_, sx_, sy_, dx_, dy_;
};

// +nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:
// strideInPixelsY:paddingPolicy: of the Max / Average / L2Norm gradient nodes.
template <PoolingKind Kind>
class CNNPoolingGradientNodeOf final : public CNNPoolingGradientNode {
public:
    CNNPoolingGradientNodeOf(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                             const StateNodePtr& gradientState, int64_t kernelWidth, int64_t kernelHeight,
                             int64_t strideX, int64_t strideY, std::shared_ptr<NNPadding> paddingPolicy)
        : CNNPoolingGradientNode(sourceGradient, sourceImage, gradientState, Kind, kernelWidth, kernelHeight, strideX,
                                 strideY, std::move(paddingPolicy)) {}
};
using CNNPoolingMaxGradientNode = CNNPoolingGradientNodeOf<PoolingKind::Max>;
using CNNPoolingAverageGradientNode = CNNPoolingGradientNodeOf<PoolingKind::Average>;
using CNNPoolingL2NormGradientNode = CNNPoolingGradientNodeOf<PoolingKind::L2Norm>;

// MPSCNNDilatedPoolingMaxGradientNode (...strideInPixelsY:dilationRateX:dilationRateY:)
class CNNDilatedPoolingMaxGradientNode final : public CNNPoolingGradientNode {
public:
    CNNDilatedPoolingMaxGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                     const StateNodePtr& gradientState, int64_t kernelWidth, int64_t kernelHeight,
                                     int64_t strideX, int64_t strideY, int64_t dilationX, int64_t dilationY,
                                     std::shared_ptr<NNPadding> paddingPolicy = nullptr)
        : CNNPoolingGradientNode(sourceGradient, sourceImage, gradientState, PoolingKind::DilatedMax, kernelWidth,
                                 kernelHeight, strideX, strideY, std::move(paddingPolicy), dilationX, dilationY) {}
};

// ---- softmax -------------------------------------------------------------------------------------------
// MPSCNNSoftMaxNode / MPSCNNLogSoftMaxNode (+nodeWithSource:)
class CNNSoftMaxNode : public UnaryKernelNode {
public:
    CNNSoftMaxNode(const ImageNodePtr& source, bool logSoftmax = false);
    const char* className() const override { return log_ ? "CNNLogSoftMaxNode" : "CNNSoftMaxNode"; }
    bool isLogSoftMax() const { return log_; }
    bool gradientReadsResult() const override { return true; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    bool log_;
};

// MPSCNNLogSoftMaxNode (+nodeWithSource:)
class CNNLogSoftMaxNode final : public CNNSoftMaxNode {
public:
    explicit CNNLogSoftMaxNode(const ImageNodePtr& source) : CNNSoftMaxNode(source, true) {}
};

// MPSCNNSoftMaxGradientNode: sourceImage is the forward RESULT.
class CNNSoftMaxGradientNode : public GradientKernelNode {
public:
    CNNSoftMaxGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                           const StateNodePtr& gradientState)
        : GradientKernelNode(sourceGradient, sourceImage, gradientState) {}
    const char* className() const override { return "CNNSoftMaxGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// MPSCNNLogSoftMaxGradientNode: sourceImage is the forward RESULT.
class CNNLogSoftMaxGradientNode final : public GradientKernelNode {
public:
    CNNLogSoftMaxGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                              const StateNodePtr& gradientState)
        : GradientKernelNode(sourceGradient, sourceImage, gradientState) {}
    const char* className() const override { return "CNNLogSoftMaxGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// ---- upsampling ---------------------------------------------------------------------------------------
// MPSCNNUpsamplingNearestNode / MPSCNNUpsamplingBilinearNode
class CNNUpsamplingNode : public UnaryKernelNode {
public:
    CNNUpsamplingNode(const ImageNodePtr& source, bool bilinear, int64_t scaleX, int64_t scaleY,
                      bool alignCorners = false);
    const char* className() const override {
        return bilinear_ ? "CNNUpsamplingBilinearNode" : "CNNUpsamplingNearestNode";
    }
    bool isBilinear() const { return bilinear_; }
    int64_t scaleFactorX() const { return sx_; }
    int64_t scaleFactorY() const { return sy_; }
    bool alignCorners() const { return align_; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    bool bilinear_;
    int64_t sx_, sy_;
    bool align_;
};

// The upsampling gradient nodes' shared part (scale factors).
class CNNUpsamplingGradientNode : public GradientKernelNode {
public:
    CNNUpsamplingGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                              const StateNodePtr& gradientState, int64_t scaleX, int64_t scaleY);
    int64_t scaleFactorX() const { return sx_; }
    int64_t scaleFactorY() const { return sy_; }

protected:
    int64_t sx_, sy_;
};

// MPSCNNUpsamplingNearestGradientNode (...gradientState:scaleFactorX:scaleFactorY:)
class CNNUpsamplingNearestGradientNode final : public CNNUpsamplingGradientNode {
public:
    using CNNUpsamplingGradientNode::CNNUpsamplingGradientNode;
    const char* className() const override { return "CNNUpsamplingNearestGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// MPSCNNUpsamplingBilinearGradientNode (...gradientState:scaleFactorX:scaleFactorY:)
class CNNUpsamplingBilinearGradientNode final : public CNNUpsamplingGradientNode {
public:
    using CNNUpsamplingGradientNode::CNNUpsamplingGradientNode;
    const char* className() const override { return "CNNUpsamplingBilinearGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// ---- dropout --------------------------------------------------------------------------------------------
// MPSCNNDropoutNode (+nodeWithSource:[keepProbability:[seed:maskStrideInPixels:]])
class CNNDropoutNode : public UnaryKernelNode {
public:
    CNNDropoutNode(const ImageNodePtr& source, float keepProbability = 0.5f, uint64_t seed = 0,
                   Size3 maskStrideInPixels = {1, 1, 1});
    const char* className() const override { return "CNNDropoutNode"; }
    float keepProbability() const { return keep_; }
    uint64_t seed() const { return seed_; }
    Size3 maskStrideInPixels() const { return stride_; }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    float keep_;
    uint64_t seed_;
    Size3 stride_;
};

// MPSCNNDropoutGradientNode
class CNNDropoutGradientNode : public GradientKernelNode {
public:
    CNNDropoutGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                           const StateNodePtr& gradientState, float keepProbability, uint64_t seed,
                           Size3 maskStrideInPixels);
    const char* className() const override { return "CNNDropoutGradientNode"; }
    float keepProbability() const { return keep_; }
    uint64_t seed() const { return seed_; }
    Size3 maskStrideInPixels() const { return stride_; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;

private:
    float keep_;
    uint64_t seed_;
    Size3 stride_;
};

// ---- reshape and pad (filter_nodes_shape.cpp) ---------------------------------------------------------
// MPSNNReshapeNode (+nodeWithSource:resultWidth:resultHeight:resultFeatureChannels:)
class NNReshapeNode : public NNFilterNode {
public:
    NNReshapeNode(const ImageNodePtr& source, int64_t resultWidth, int64_t resultHeight, int64_t resultFeatureChannels);
    const char* className() const override { return "NNReshapeNode"; }
    int64_t resultWidth() const { return w_; }
    int64_t resultHeight() const { return h_; }
    int64_t resultFeatureChannels() const { return c_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    int64_t w_, h_, c_;
    std::shared_ptr<NNReshape> kernel_;
};

// MPSNNReshapeGradientNode (+nodeWithSourceGradient:sourceImage:gradientState:)
class NNReshapeGradientNode : public GradientKernelNode {
public:
    NNReshapeGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                          const StateNodePtr& gradientState);
    const char* className() const override { return "NNReshapeGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// MPSNNPadNode (+nodeWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:, fillValue)
class NNPadNode : public NNFilterNode {
public:
    NNPadNode(const ImageNodePtr& source, ImageCoordinate paddingSizeBefore, ImageCoordinate paddingSizeAfter,
              ImageEdgeMode edgeMode);
    const char* className() const override { return "NNPadNode"; }
    ImageCoordinate paddingSizeBefore() const { return before_; }
    ImageCoordinate paddingSizeAfter() const { return after_; }
    ImageEdgeMode edgeMode() const { return edge_; }
    float fillValue = 0.0f;  // copied into the kernel at every encode

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    ImageCoordinate before_, after_;
    ImageEdgeMode edge_;
    std::shared_ptr<NNPad> kernel_;
};

// MPSNNPadGradientNode (+nodeWithSourceGradient:sourceImage:gradientState:)
class NNPadGradientNode : public GradientKernelNode {
public:
    NNPadGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                      const StateNodePtr& gradientState);
    const char* className() const override { return "NNPadGradientNode"; }

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override;
};

// ---- arithmetic ------------------------------------------------------------------------------------------
// MPSNNBinaryArithmeticNode and its Addition / Subtraction / Multiplication / Division subclasses
// (op: kArithmeticAdd, ...). Properties are copied into the kernel at every encode.
class NNBinaryArithmeticNode : public NNFilterNode {
public:
    // +nodeWithLeftSource:rightSource: / +nodeWithSources: (exactly two)
    NNBinaryArithmeticNode(std::vector<ImageNodePtr> sources, int32_t op);
    const char* className() const override;
    int32_t opCode() const { return op_; }

    float primaryScale = 1.0f, secondaryScale = 1.0f, bias = 0.0f;
    int64_t primaryStrideInFeatureChannels = 1, secondaryStrideInFeatureChannels = 1;
    float minimumValue = -FLT_MAX, maximumValue = FLT_MAX;

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) override;

protected:
    void createKernels(const Device& device) override;

private:
    int32_t op_;
    std::shared_ptr<CNNArithmetic> kernel_;
};

// MPSNNArithmeticGradientNode and its Addition / Subtraction / Multiplication subclasses (which the
// arithmetic nodes' gradient builders create; division's gradient node is this class with op
// divide). sourceImage is the OTHER forward operand (the kernels' rule; docs/graph.md).
class NNArithmeticGradientNode : public NNGradientFilterNode {
public:
    // +nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter:
    NNArithmeticGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                             const StateNodePtr& gradientState, int32_t op, bool isSecondarySourceFilter);
    const char* className() const override;
    bool isSecondarySourceFilter() const { return secondary_; }
    int32_t opCode() const { return op_; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    // The gradient node of op `op` for one operand (the subclass for add / subtract / multiply).
    static std::shared_ptr<NNArithmeticGradientNode> make(const ImageNodePtr& sourceGradient,
                                                          const ImageNodePtr& sourceImage,
                                                          const StateNodePtr& gradientState, int32_t op,
                                                          bool isSecondarySourceFilter);

protected:
    void createKernels(const Device& device) override;

private:
    int32_t op_;
    bool secondary_;
    std::shared_ptr<CNNArithmeticGradient> kernel_;
};

template <int32_t Op>
class NNArithmeticGradientNodeOf final : public NNArithmeticGradientNode {
public:
    NNArithmeticGradientNodeOf(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                               const StateNodePtr& gradientState, bool isSecondarySourceFilter)
        : NNArithmeticGradientNode(sourceGradient, sourceImage, gradientState, Op, isSecondarySourceFilter) {}
};
using NNAdditionGradientNode = NNArithmeticGradientNodeOf<kArithmeticAdd>;
using NNSubtractionGradientNode = NNArithmeticGradientNodeOf<kArithmeticSubtract>;
using NNMultiplicationGradientNode = NNArithmeticGradientNodeOf<kArithmeticMultiply>;

// ---- loss ------------------------------------------------------------------------------------------------
// MPSCNNLossNode(source, lossDescriptor): its result image is dL/d(source) (it is its own gradient).
// The labels are the node's input state (inputLabels), a graph source state.
class CNNLossNode : public NNFilterNode {
public:
    CNNLossNode(const ImageNodePtr& source, const CNNLossDescriptor& descriptor);
    const char* className() const override { return "CNNLossNode"; }
    const CNNLossDescriptor& descriptor() const { return descriptor_; }
    // -inputLabels
    StateNodePtr inputLabels() const { return sourceStates_.front(); }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) override;

protected:
    void createKernels(const Device& device) override;

private:
    CNNLossDescriptor descriptor_;
    std::shared_ptr<CNNLoss> kernel_;
};

// MPSCNNYOLOLossNode(source, lossDescriptor): the same for CNNYOLOLoss.
class CNNYOLOLossNode : public NNFilterNode {
public:
    CNNYOLOLossNode(const ImageNodePtr& source, const CNNYOLOLossDescriptor& descriptor);
    const char* className() const override { return "CNNYOLOLossNode"; }
    const CNNYOLOLossDescriptor& descriptor() const { return descriptor_; }
    // -inputLabels
    StateNodePtr inputLabels() const { return sourceStates_.front(); }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) override;

protected:
    void createKernels(const Device& device) override;

private:
    CNNYOLOLossDescriptor descriptor_;
    std::shared_ptr<CNNYOLOLoss> kernel_;
};

// MPSNNInitialGradientNode(source): a gradient of ones shaped like the source (a linear neuron
// with a = 0, b = 1).
class NNInitialGradientNode : public NNFilterNode {
public:
    explicit NNInitialGradientNode(const ImageNodePtr& source);
    const char* className() const override { return "NNInitialGradientNode"; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) override;

protected:
    void createKernels(const Device& device) override;

private:
    std::shared_ptr<CNNNeuron> kernel_;
};

}  // namespace mpsgrad
