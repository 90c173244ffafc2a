// NNGraph (MPSNNGraph, spec §3.3): an executable graph built from result image nodes.
//
// Construction walks from the results through image and state edges, binds every filter node to
// the device (its kernels are created then), orders the nodes (inputs first) and refuses misuse:
// cycles, a trainable gradient node whose data source cannot update, a result that is a graph input.
// Encoding runs the nodes in that order with the caller's source batches.
//
// Read counts (§3.3): a temporary source image or state is decremented exactly once per encode
// however often the graph reads it; exported intermediates come back with read count 1 when they
// are temporary images.
//
// Storage (docs/graph.md "Formats and storage"): intermediates are stored in `format` (FLOAT16 by
// default, as in MPS); results and exported images are FLOAT32 unless their image node's `format`
// says otherwise. Intermediates that are not exported live in the graph's pool (graph_storage.h):
// their storage is reused as soon as the last node reading them was encoded, and by later encodes
// once the command buffer that used it has completed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph_fusion.h"
#include "graph/graph_storage.h"
#include "graph/node.h"

namespace mpsgrad {

class NNGraph {
public:
    // -initWithDevice:resultImage:resultImageIsNeeded:
    NNGraph(const Device& device, const ImageNodePtr& resultImage, bool resultImageIsNeeded = true);
    // -initWithDevice:resultImages:resultsAreNeeded: (the first is returned by encode, the others
    // come back among the intermediate images)
    NNGraph(const Device& device, const std::vector<ImageNodePtr>& resultImages,
            const std::vector<bool>& resultsAreNeeded);

    const Device& device() const { return device_; }
    std::string label;
    // MPSKernel.options: with KernelOptionsVerbose the first encode prints debugDescription to stderr.
    uint32_t options = KernelOptionsNone;
    // -debugDescription: the source images, every filter node in encode order with its inputs,
    // result, states and training style, and the results (graph_description.cpp).
    std::string debugDescription() const;

    // Introspection (handles may be null where the node has none).
    std::vector<HandlePtr> sourceImageHandles() const;
    std::vector<HandlePtr> sourceStateHandles() const;
    std::vector<HandlePtr> intermediateImageHandles() const;
    std::vector<HandlePtr> resultStateHandles() const;
    HandlePtr resultHandle() const;
    size_t sourceImageCount() const { return sourceImages_.size(); }
    size_t sourceStateCount() const { return sourceStates_.size(); }
    // The filter nodes in encode order (inputs first).
    const std::vector<FilterNodePtr>& nodes() const { return order_; }

    bool outputStateIsTemporary = false;
    // MPSImage.defaultAllocator (persistent) by default, unlike the kernels. The result node's own
    // allocator is ignored.
    std::shared_ptr<ImageAllocator> destinationImageAllocator = ImageAllocator::persistentAllocator();
    // Storage of the intermediates (FLOAT16 or FLOAT32); results and exported images are FLOAT32
    // unless their node's `format` is set.
    ImageFeatureChannelFormat format = ImageFeatureChannelFormat::Float16;
    // Which convolution / fully connected / batch normalization nodes run as one kernel with the
    // one neuron node reading their result, where graph_fusion.h allows it (mpsgrad; docs/graph.md
    // "Fusion"): Auto (default) the pairs whose fused kernel is faster on the device, All every
    // such pair, None no pair.
    NeuronFusion neuronFusion = NeuronFusion::Auto;
    // The pairs that fuse in the current neuronFusion mode: (producer, neuron node).
    std::vector<std::pair<FilterNodePtr, FilterNodePtr>> fusedNodePairs() const;
    // What the last encode did (nodes encoded, pooled intermediate buffers allocated and reused).
    const GraphEncodeStatistics& lastEncodeStatistics() const { return lastEncode_; }
    bool resultImageIsNeeded() const { return resultsNeeded_.front(); }
    // The result image nodes and their "needed" flags, as given to the constructor (serialization).
    const std::vector<ImageNodePtr>& resultImages() const { return results_; }
    const std::vector<bool>& resultsAreNeeded() const { return resultsNeeded_; }

    // mpsgrad extension (docs/graph.md "Before the updates", docs/distributed.md): when set, encode
    // registers a completed handler that calls it with the gradient state(s) of every trainable
    // gradient node (in encode order; one entry per state, a batch of per-image states appears
    // image by image) before any of those nodes' data sources update, so that it can change the
    // gradients in place (data-parallel training averages them across processes here). The updates
    // then run from later completed handlers, so every trainable node must train UPDATE_DEVICE_CPU
    // (encode raises ValueError otherwise: a GPU-style update would already have run).
    using BeforeUpdatesHandler = std::function<void(const std::vector<StatePtr>& gradientStates)>;
    BeforeUpdatesHandler beforeUpdates;

    // mpsgrad extension (docs/distributed.md "Synchronized batch normalization in a graph"): when
    // set, every batch normalization node that computes batch statistics encodes a host point
    // (CommandBuffer::encodeHostCallback) right after its statistics, and its gradient node one
    // right after dγ/dβ, each calling this handler with the node's state, so that the handler can
    // replace the sums in place before the normalization / the input gradient read them.
    BatchNormalizationSyncHandler batchNormalizationSync;

    // -reloadFromDataSources (the GPU work must be idle).
    void reloadFromDataSources();

    // -encodeToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:
    // One image per source image handle, one state per source state handle. Returns the result
    // (null when resultImageIsNeeded is false).
    ImagePtr encode(CommandBuffer& cb, const ImageBatch& sourceImages, const StateBatch& sourceStates = {},
                    ImageBatch* intermediateImages = nullptr, StateBatch* destinationStates = nullptr);
    // -encodeBatchToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:
    // One batch per source image handle (all the same length), one per source state handle.
    ImageBatch encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceImages,
                           const std::vector<StateBatch>& sourceStates = {},
                           std::vector<ImageBatch>* intermediateImages = nullptr,
                           std::vector<StateBatch>* destinationStates = nullptr);

    // -executeAsyncWithSourceImages:completionHandler: encodes on a private queue's command buffer
    // and commits it. The handler runs once, with the result and an empty error, or with the
    // failure's description. Returns the result (valid once the handler ran) and the buffer.
    using CompletionHandler = std::function<void(const ImagePtr& result, const std::string& error)>;
    std::pair<ImagePtr, std::shared_ptr<CommandBuffer>> executeAsync(const ImageBatch& sourceImages,
                                                                     CompletionHandler handler,
                                                                     const StateBatch& sourceStates = {});

    // -readCountForSourceImageAtIndex: / -readCountForSourceStateAtIndex: (1: each temporary source
    // is decremented once per encode)
    int64_t readCountForSourceImageAtIndex(size_t index) const;
    int64_t readCountForSourceStateAtIndex(size_t index) const;

private:
    void build(const std::vector<ImageNodePtr>& results);
    void printIfVerbose();  // once per graph, at the first encode with KernelOptionsVerbose
    void visit(const FilterNodePtr& node, std::unordered_map<const NNFilterNode*, int>& marks);
    void noteSourceImage(const ImageNodePtr& image);
    void noteSourceState(const StateNodePtr& state);
    // True for the result and the exported images (they leave the graph).
    bool leavesGraph(const ImageNodePtr& image) const;
    ImageFeatureChannelFormat storageFormat(const NNImageNode& image, bool leavesGraph) const;
    void checkFormats() const;
    // True for a gradient node whose data source updates (its afterEncode is deferred when
    // beforeUpdates is set); ValueError for one that trains UPDATE_DEVICE_GPU then.
    bool defersUpdate(const NNFilterNode& node) const;

    Device device_;
    std::vector<ImageNodePtr> results_;
    std::vector<bool> resultsNeeded_;
    std::vector<FilterNodePtr> order_;
    std::vector<ImageNodePtr> sourceImages_;
    std::vector<StateNodePtr> sourceStates_;
    std::vector<ImageNodePtr> exportedImages_;  // exported intermediates, then results 1..n-1
    std::vector<StateNodePtr> exportedStates_;
    std::vector<const NNStateNode*> consumedStates_;
    std::shared_ptr<CommandQueue> queue_;  // executeAsync's private queue
    std::unordered_map<const NNImageNode*, size_t> lastUse_;  // image -> index in order_ of its last reader
    GraphEncodeStatistics lastEncode_;
    std::shared_ptr<IntermediatePool> pool_;  // pooled intermediates, reused across encodes
    NeuronFusionPlan fusion_;
    bool printedVerbose_ = false;
};

}  // namespace mpsgrad
