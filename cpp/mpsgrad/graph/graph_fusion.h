// Neuron fusion in NNGraph (docs/graph.md "Fusion"): a convolution-family or batch-normalization
// node whose result image is read by one neuron node and by nothing else runs as ONE kernel with
// that neuron fused (the kernels' fusedNeuronDescriptor), and the neuron node is not encoded.
//
// Which pairs fuse is decided once, when the graph is built (planNeuronFusion): the pre-neuron
// image must be dead outside the pair (one reader in the graph, not exported, not a result), the
// producer's result states unused (so never in a training graph, whose gradient nodes read them
// and the pre-neuron image), the neuron node without a padding policy or used result state, and
// the producer's kernel able to fuse that neuron (NeuronFusingNode::canFuseNeuron).
//
// The fused kernel is a second kernel object of the producer node (one per neuron descriptor),
// because the node's own kernel also serves the graphs that do not fuse (a node is shared by an
// inference graph and its training graph). It never keeps parameters of its own: before every
// fused encode it is brought to exactly what the node's kernel holds (syncFused*), whichever way
// the node's kernel was reloaded (reload_from_data_sources, the training graph's GPU-style
// reload on a command buffer, a CPU-style reload from a completion handler). Reloads replace the
// kernel's parameter buffers, so "the node's kernel changed" is "its buffers are other objects".
#pragma once

#include <memory>
#include <vector>

#include "graph/node.h"
#include "kernels/batch_normalization.h"
#include "kernels/convolution.h"
#include "kernels/neuron.h"

namespace mpsgrad {

// Implemented by the forward nodes whose kernel can fuse a neuron (convolution, fully connected,
// batch normalization).
class NeuronFusingNode {
public:
    virtual ~NeuronFusingNode() = default;
    // True when the node's kernel (bound) can run `neuron` fused with the node's current settings.
    virtual bool canFuseNeuron(const NNNeuronDescriptor& neuron) const = 0;
    // Encodes the node with `neuron` fused; the result is the neuron node's result. No states
    // are produced (the plan only fuses nodes whose states nobody reads).
    virtual NodeEncodeResult encodeWithNeuron(NodeEncodeContext& ctx, const ImageBatch& sources,
                                              const NNNeuronDescriptor& neuron) = 0;
    // True when the fused kernel is faster than the two kernels on the node's device (measured;
    // docs/graph.md "Fusion"): the "auto" mode fuses only these.
    virtual bool fusionPays() const = 0;
};

// NNGraph.neuronFusion: which of the fusable pairs run as one kernel.
enum class NeuronFusion { None, Auto, All };

// One fused pair: the producer at `head` in the graph's encode order and the neuron node at `tail`.
struct FusedNeuronPair {
    size_t head = 0, tail = 0;
    NeuronFusingNode* producer = nullptr;
    NNNeuronDescriptor neuron;
    bool pays = true;  // producer->fusionPays()
};

// The pairs of one graph, looked up by encode-order index.
class NeuronFusionPlan {
public:
    NeuronFusionPlan() = default;
    NeuronFusionPlan(std::vector<FusedNeuronPair> pairs, size_t nodeCount);
    // The pair whose producer is at `index` and that fuses in `mode` (null when none).
    const FusedNeuronPair* headAt(size_t index, NeuronFusion mode) const { return fusing(headOf_, index, mode); }
    // True when the node at `index` is a neuron encoded with its producer in `mode`.
    bool isTail(size_t index, NeuronFusion mode) const { return fusing(tailOf_, index, mode) != nullptr; }
    static bool fuses(const FusedNeuronPair& pair, NeuronFusion mode) {
        return mode == NeuronFusion::All || (mode == NeuronFusion::Auto && pair.pays);
    }
    // Every fusable pair (whether it fuses depends on the mode).
    const std::vector<FusedNeuronPair>& pairs() const { return pairs_; }

private:
    static constexpr size_t kNone = size_t(-1);
    const FusedNeuronPair* fusing(const std::vector<size_t>& pairOf, size_t index, NeuronFusion mode) const {
        if (pairOf.empty() || pairOf[index] == kNone || !fuses(pairs_[pairOf[index]], mode)) return nullptr;
        return &pairs_[pairOf[index]];
    }

    std::vector<FusedNeuronPair> pairs_;
    // Node index -> index in pairs_ of the pair it heads / ends (kNone); indices, so that copies
    // of a plan (and of its graph) stay valid.
    std::vector<size_t> headOf_, tailOf_;
};

// What the plan needs to know about the graph besides its nodes.
struct FusionGraphFacts {
    const std::vector<ImageNodePtr>* results = nullptr;           // every result image
    const std::vector<ImageNodePtr>* exportedImages = nullptr;    // exported intermediates
    const std::vector<const NNStateNode*>* consumedStates = nullptr;  // states some node reads
};

// Chooses the fused pairs of the graph whose nodes (bound to the device) are `order`.
NeuronFusionPlan planNeuronFusion(const std::vector<FilterNodePtr>& order, const FusionGraphFacts& facts);

// ---- the fused kernels of the producer nodes ----------------------------------------------------------
bool sameNeuronDescriptor(const NNNeuronDescriptor& a, const NNNeuronDescriptor& b);

// A convolution (or fully connected) kernel with a fused neuron that computes with the weights of
// the node's kernel `plain`.
struct FusedConvolutionKernel {
    NNNeuronDescriptor neuron;
    std::shared_ptr<CNNConvolution> kernel;
    std::weak_ptr<Buffer> syncedWeights;  // plain's weights buffer the fused kernel holds a copy of
};
// The fused kernel for `neuron` among `kernels` (made on first use), with the weights `plain`
// computes with on `cb` (an encoded copy when plain's last reload is still pending on a command
// buffer, a host copy otherwise), and plain's encode properties.
CNNConvolution& syncedFusedConvolution(std::vector<FusedConvolutionKernel>& kernels,
                                       const std::shared_ptr<CNNConvolution>& plain, const NNNeuronDescriptor& neuron,
                                       CommandBuffer& cb);

// The same for batch normalization (gamma, beta, mean, variance and epsilon of `plain`), always as
// encoded copies on `cb`: the graph reloads BN kernels from their data sources (host copies) or,
// GPU style, on the training step's command buffer, and an encoded copy is right after either.
struct FusedBatchNormalizationKernel {
    NNNeuronDescriptor neuron;
    std::shared_ptr<CNNBatchNormalization> kernel;
    std::weak_ptr<Buffer> syncedGamma, syncedMean;
};
CNNBatchNormalization& syncedFusedBatchNormalization(std::vector<FusedBatchNormalizationKernel>& kernels,
                                                     const std::shared_ptr<CNNBatchNormalization>& plain,
                                                     const NNNeuronDescriptor& neuron, CommandBuffer& cb);

}  // namespace mpsgrad
