// The node objects of the graph API (MPSNNGraphNodes.h, spec §3.1): handles, image nodes, state
// nodes, the filter-node and gradient-filter-node bases and the trainable-node protocol.
//
// A filter node owns its result image node and its result state nodes as members; the pointers
// handed out for them share the filter's ownership (aliasing shared_ptr), so holding a result
// image keeps its producer, and through the producer's inputs the whole upstream graph, alive,
// without a reference cycle. Source image nodes (no producer) are standalone objects.
//
// Nodes describe work; kernels do it. Each filter node creates its kernel(s) for a device the first
// time a graph on that device is built from it (bind()), and encodes them with NNGraph's batches.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/image.h"
#include "core/padding.h"
#include "core/state.h"

namespace mpsgrad {

class NNFilterNode;
class NNGradientFilterNode;

// @protocol MPSHandle: an application object that names an image or state of the graph.
class Handle {
public:
    virtual ~Handle() = default;
    virtual std::string label() const = 0;
};
using HandlePtr = std::shared_ptr<Handle>;

// A handle that is just a label (what the C++ API offers; Python passes its own objects).
class LabelHandle final : public Handle {
public:
    explicit LabelHandle(std::string label) : label_(std::move(label)) {}
    std::string label() const override { return label_; }

private:
    std::string label_;
};

// MPSNNImageNode
class NNImageNode {
public:
    // -initWithHandle: / +nodeWithHandle: (a graph input)
    explicit NNImageNode(HandlePtr handle = nullptr) : handle(std::move(handle)) {}
    // +exportedNodeWithHandle: (export_from_graph = true)
    static std::shared_ptr<NNImageNode> exportedNodeWithHandle(HandlePtr handle);
    virtual ~NNImageNode() = default;

    HandlePtr handle;
    // Storage of this image when a graph makes it (Float16 or Float32). None: the graph chooses,
    // NNGraph.format for intermediates, Float32 for results and exported images.
    ImageFeatureChannelFormat format = ImageFeatureChannelFormat::None;
    // Allocator of the image when it is an intermediate (MPS: MPSTemporaryImage.defaultAllocator).
    std::shared_ptr<ImageAllocator> imageAllocator = ImageAllocator::temporaryAllocator();
    bool exportFromGraph = false;
    bool synchronizeResource = false;  // macOS-only in MPS; storage here is host-coherent
    bool stopGradient = false;

    // The filter node that produces this image (null for a graph input).
    std::shared_ptr<NNFilterNode> producer() const;

private:
    friend class NNFilterNode;
    NNFilterNode* producer_ = nullptr;  // set for the result image a filter node owns
};
using ImageNodePtr = std::shared_ptr<NNImageNode>;

// MPSNNStateNode and subclasses. The class tells what kind of state flows along the edge.
class NNStateNode {
public:
    virtual ~NNStateNode() = default;
    virtual const char* className() const { return "NNStateNode"; }

    HandlePtr handle;
    bool exportFromGraph = false;
    bool synchronizeResource = false;

    // The filter node that produces this state (null for a graph input such as a labels node).
    std::shared_ptr<NNFilterNode> producer() const;

protected:
    NNStateNode() = default;

private:
    friend class NNFilterNode;
    NNFilterNode* producer_ = nullptr;
};
using StateNodePtr = std::shared_ptr<NNStateNode>;

class NNGradientStateNode : public NNStateNode {
public:
    const char* className() const override { return "NNGradientStateNode"; }
};
class CNNConvolutionGradientStateNode : public NNGradientStateNode {
public:
    const char* className() const override { return "CNNConvolutionGradientStateNode"; }
};
class CNNConvolutionTransposeGradientStateNode final : public CNNConvolutionGradientStateNode {
public:
    const char* className() const override { return "CNNConvolutionTransposeGradientStateNode"; }
};
class NNBinaryGradientStateNode : public NNStateNode {
public:
    const char* className() const override { return "NNBinaryGradientStateNode"; }
};
class NNArithmeticGradientStateNode final : public NNBinaryGradientStateNode {
public:
    const char* className() const override { return "NNArithmeticGradientStateNode"; }
};

// MPSNNLabelsNode: the placeholder for the CNNLossLabels a loss node reads (a graph source state).
class NNLabelsNode final : public NNStateNode {
public:
    explicit NNLabelsNode(HandlePtr h = nullptr) { handle = std::move(h); }
    const char* className() const override { return "NNLabelsNode"; }
};

// MPSNNTrainingStyle (exact values)
enum class NNTrainingStyle : uint32_t { UpdateDeviceNone = 0, UpdateDeviceCPU = 1, UpdateDeviceGPU = 2 };

// What a filter node's encode receives from NNGraph: one batch per input image, one per input
// state, and where its destination images come from.
// Synchronized batch normalization in a graph (NNGraph::batchNormalizationSync): which sums of a
// training batch normalization node's state a host point offers to the handler.
enum class BatchNormalizationSyncStage {
    Statistics,  // the batch mean and variance, before the normalization reads them
    Gradients,   // dγ = Σ G'·x̂ and dβ = Σ G', before the input gradient reads them
};
// Called at a host point of the command buffer with the node's CNNBatchNormalizationState, the
// stage, and the number of values per channel the state's sums cover on this process.
using BatchNormalizationSyncHandler =
    std::function<void(const StatePtr& state, BatchNormalizationSyncStage stage, int64_t count)>;

struct NodeEncodeContext {
    CommandBuffer& cb;
    std::shared_ptr<ImageAllocator> allocator;  // for the node's result images
    bool wantStates = false;                    // a consumer in this graph reads the result state(s)
    bool resultIsRead = true;                   // a later node or the caller reads the result image(s)
    // Set while the graph's batchNormalizationSync is set (batch normalization nodes encode host points).
    const BatchNormalizationSyncHandler* batchNormalizationSync = nullptr;
};

// What a filter node's encode produces.
struct NodeEncodeResult {
    ImageBatch images;                // the result image batch
    std::vector<StateBatch> states;   // one batch per result state (empty when not requested)
};

// MPSGradientNodeBlock(gradientNode, inferenceNode, inferenceSource, gradientSource):
// inferenceNode is null for an addition node the builder inserted to sum gradients.
using GradientNodeHandler = std::function<void(const std::shared_ptr<NNFilterNode>& gradientNode,
                                               const std::shared_ptr<NNFilterNode>& inferenceNode,
                                               const ImageNodePtr& inferenceSource,
                                               const ImageNodePtr& gradientSource)>;

// MPSNNFilterNode (abstract)
class NNFilterNode : public std::enable_shared_from_this<NNFilterNode> {
public:
    virtual ~NNFilterNode() = default;
    virtual const char* className() const = 0;

    // -resultImage (a pointer sharing this node's ownership)
    ImageNodePtr resultImage();
    // -resultState (= resultStates[0], or null) / -resultStates
    StateNodePtr resultState();
    std::vector<StateNodePtr> resultStates();

    std::shared_ptr<NNPadding> paddingPolicy;  // null: the kernel's default
    std::string label;

    const std::vector<ImageNodePtr>& sourceImages() const { return sources_; }
    const std::vector<StateNodePtr>& sourceStates() const { return sourceStates_; }

    // ---- gradient builders (spec §3.1). TypeError for nodes without a gradient. ----------------
    // -gradientFilterWithSource: / -gradientFilterWithSources: (single-input nodes)
    std::shared_ptr<NNGradientFilterNode> gradientFilterWithSource(const ImageNodePtr& sourceGradient);
    std::shared_ptr<NNGradientFilterNode> gradientFilterWithSources(const std::vector<ImageNodePtr>& sourceGradients);
    // -gradientFiltersWithSource: / -gradientFiltersWithSources: (one gradient node per input)
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSource(const ImageNodePtr& sourceGradient);
    virtual std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients);
    // -trainingGraphWithSourceGradient:nodeHandler: (graph/training_graph.cpp). Returns the terminal
    // gradient nodes. `sourceGradient` null: this node's result image is the starting gradient.
    std::vector<std::shared_ptr<NNFilterNode>> trainingGraph(const ImageNodePtr& sourceGradient,
                                                            const GradientNodeHandler& nodeHandler = nullptr);

    // ---- for NNGraph ------------------------------------------------------------------------------
    // Creates the node's kernels for `device` (once; ValueError when the node is already bound to
    // another device).
    void bind(const Device& device);
    // Encodes the node for one batch. Every input batch has the same length.
    virtual NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                    const std::vector<StateBatch>& states) = 0;
    // The training style, for nodes that adopt MPSNNTrainableNode (null otherwise).
    virtual NNTrainingStyle* trainingStylePointer() { return nullptr; }
    // Called by NNGraph after the node was encoded on `cb` (trainable gradient nodes update here).
    virtual void afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) { (void)cb, (void)states; }
    // ValueError when the node's training style asks for an update its data source cannot do
    // (trainable gradient nodes; checked when a graph is built).
    virtual void checkTrainable() const {}
    // -reloadFromDataSources for this node's kernels.
    virtual void reloadFromDataSource() {}
    // True for nodes whose gradient reads the forward result instead of the forward source
    // (softmax, log-softmax: spec §3.2 [I]).
    virtual bool gradientReadsResult() const { return false; }

protected:
    // Nodes must be owned by a std::shared_ptr (std::make_shared): the result image shares it.
    NNFilterNode(std::vector<ImageNodePtr> sources, std::vector<StateNodePtr> sourceStates);
    // Adds a result state node of the concrete type T (constructors call this).
    template <class T>
    void addResultState() {
        auto node = std::make_unique<T>();
        node->producer_ = this;
        resultStates_.push_back(std::move(node));
    }
    // Creates the kernels (called once per device by bind()).
    virtual void createKernels(const Device& device) = 0;
    // Sets paddingPolicy (when given) and the allocator on a kernel before encoding.
    template <class K>
    void prepareKernel(K& kernel, const NodeEncodeContext& ctx) const {
        if (paddingPolicy) kernel.padding = paddingPolicy;
        kernel.destinationImageAllocator = ctx.allocator;
        kernel.label = label;
    }
    // The gradient node(s) of this node for the given incoming gradient (default: TypeError).
    virtual std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient);
    // A ValueError unless `images` has `count` entries (node construction checks).
    void checkSourceCount(size_t count) const;

    std::vector<ImageNodePtr> sources_;
    std::vector<StateNodePtr> sourceStates_;
    std::unique_ptr<Device> device_;  // set by bind()

private:
    NNImageNode result_;
    std::vector<std::unique_ptr<NNStateNode>> resultStates_;
};
using FilterNodePtr = std::shared_ptr<NNFilterNode>;

// MPSNNGradientFilterNode: inputs [sourceGradient, sourceImage] and the forward gradient state.
// The four gradient builders are unavailable (TypeError).
class NNGradientFilterNode : public NNFilterNode {
public:
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) final;
    // The forward node this gradient node differentiates (null when built directly).
    std::shared_ptr<NNFilterNode> forwardNode() const { return forward_; }
    void setForwardNode(std::shared_ptr<NNFilterNode> forward) { forward_ = std::move(forward); }

protected:
    NNGradientFilterNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                         const StateNodePtr& gradientState);
    NNGradientFilterNode(std::vector<ImageNodePtr> sources, std::vector<StateNodePtr> states)
        : NNFilterNode(std::move(sources), std::move(states)) {}
    // TypeError unless the gradient state node is of type T (or null when `optional`).
    template <class T>
    static void checkStateNode(const StateNodePtr& state, const char* what, const char* expected) {
        if (!state || !dynamic_cast<T*>(state.get())) throwStateNodeType(state, what, expected);
    }
    [[noreturn]] static void throwStateNodeType(const StateNodePtr& state, const char* what, const char* expected);

    std::shared_ptr<NNFilterNode> forward_;
};

// ValueError unless `node` is non-null.
void checkNodeNotNull(const void* node, const char* what);

}  // namespace mpsgrad
