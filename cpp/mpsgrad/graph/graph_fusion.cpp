// Neuron fusion: the plan (which pairs of a graph fuse) and the fused kernels of the producer
// nodes, kept in step with the nodes' own kernels (graph_fusion.h).
#include "graph/graph_fusion.h"

#include <algorithm>
#include <unordered_map>

#include "core/errors.h"
#include "graph/filter_nodes.h"
#include "kernels/fully_connected.h"

namespace mpsgrad {

bool sameNeuronDescriptor(const NNNeuronDescriptor& a, const NNNeuronDescriptor& b) {
    return a.neuronType == b.neuronType && a.a == b.a && a.b == b.b && a.c == b.c && a.data == b.data;
}

// ---- the plan -----------------------------------------------------------------------------------------

NeuronFusionPlan::NeuronFusionPlan(std::vector<FusedNeuronPair> pairs, size_t nodeCount)
    : pairs_(std::move(pairs)), headOf_(nodeCount, kNone), tailOf_(nodeCount, kNone) {
    for (size_t i = 0; i < pairs_.size(); ++i) {
        headOf_[pairs_[i].head] = i;
        tailOf_[pairs_[i].tail] = i;
    }
}

namespace {
template <class T>
bool contains(const std::vector<T>& values, const T& value) {
    return std::find(values.begin(), values.end(), value) != values.end();
}

// True when some node of the graph reads one of `node`'s result states, or a state is exported.
bool statesUsed(NNFilterNode& node, const FusionGraphFacts& facts) {
    for (const auto& state : node.resultStates())
        if (state->exportFromGraph || contains(*facts.consumedStates, (const NNStateNode*)state.get())) return true;
    return false;
}
}  // namespace

NeuronFusionPlan planNeuronFusion(const std::vector<FilterNodePtr>& order, const FusionGraphFacts& facts) {
    std::unordered_map<const NNImageNode*, size_t> readers;
    std::unordered_map<const NNFilterNode*, size_t> position;
    for (size_t i = 0; i < order.size(); ++i) {
        position[order[i].get()] = i;
        for (const auto& image : order[i]->sourceImages()) ++readers[image.get()];
    }
    std::vector<FusedNeuronPair> pairs;
    for (size_t tail = 0; tail < order.size(); ++tail) {
        auto* neuron = dynamic_cast<CNNNeuronNode*>(order[tail].get());
        if (!neuron || neuron->paddingPolicy || statesUsed(*neuron, facts)) continue;
        const ImageNodePtr& preNeuron = neuron->sourceImages().front();
        // The pre-neuron image must be dead outside the pair.
        if (readers[preNeuron.get()] != 1 || preNeuron->exportFromGraph || contains(*facts.results, preNeuron) ||
            contains(*facts.exportedImages, preNeuron))
            continue;
        auto producer = preNeuron->producer();
        auto* fusing = dynamic_cast<NeuronFusingNode*>(producer.get());
        if (!fusing || statesUsed(*producer, facts) || !fusing->canFuseNeuron(neuron->descriptor())) continue;
        pairs.push_back({position.at(producer.get()), tail, fusing, neuron->descriptor(), fusing->fusionPays()});
    }
    return NeuronFusionPlan(std::move(pairs), order.size());
}

// ---- convolution and fully connected ----------------------------------------------------------------------

namespace {
// The data source of a fused convolution kernel: the descriptor of the node's kernel with the
// neuron added (its batch norm already folded into the weights), and the weights and biases that
// kernel holds (its device buffers are host-coherent). Read only while no reload of the node's
// kernel is pending on a command buffer.
class KernelWeightsDataSource final : public CNNConvolutionDataSource {
public:
    KernelWeightsDataSource(std::shared_ptr<CNNConvolution> plain, NNNeuronDescriptor neuron)
        : plain_(std::move(plain)), neuron_(std::move(neuron)) {}
    CNNConvolutionDescriptor descriptor() override {
        CNNConvolutionDescriptor d = plain_->descriptor();
        d.fusedNeuronDescriptor = neuron_;
        d.foldedScale.clear();
        d.foldedShift.clear();
        return d;
    }
    const float* weights() override { return plain_->currentWeights().weights.floats(); }
    const float* biasTerms() override { return plain_->currentWeights().biases.floats(); }
    bool load() override { return true; }
    void purge() override {}

private:
    std::shared_ptr<CNNConvolution> plain_;
    NNNeuronDescriptor neuron_;
};

bool reloadPending(const ConvolutionWeights& w) { return w.reloadCompleted && !*w.reloadCompleted; }

// The encode properties a user may have set on the node's kernel (the node sets the padding,
// allocator and label itself; `offset` comes from the padding policy at every encode).
void copyEncodeProperties(const CNNKernel& from, CNNKernel& to) {
    to.clipRect = from.clipRect;
    to.destinationFeatureChannelOffset = from.destinationFeatureChannelOffset;
    to.sourceFeatureChannelOffset = from.sourceFeatureChannelOffset;
    to.sourceFeatureChannelMaxCount = from.sourceFeatureChannelMaxCount;
    to.edgeMode = from.edgeMode;
    to.options = from.options;
}
}  // namespace

CNNConvolution& syncedFusedConvolution(std::vector<FusedConvolutionKernel>& kernels,
                                       const std::shared_ptr<CNNConvolution>& plain, const NNNeuronDescriptor& neuron,
                                       CommandBuffer& cb) {
    auto found = std::find_if(kernels.begin(), kernels.end(),
                              [&](const FusedConvolutionKernel& k) { return sameNeuronDescriptor(k.neuron, neuron); });
    if (found == kernels.end()) {
        auto source = std::make_shared<KernelWeightsDataSource>(plain, neuron);
        FusedConvolutionKernel made{neuron, nullptr, {}};
        if (std::dynamic_pointer_cast<CNNFullyConnected>(plain))
            made.kernel = std::make_shared<CNNFullyConnected>(plain->device(), source);
        else
            made.kernel = std::make_shared<CNNConvolution>(plain->device(), source);
        made.syncedWeights = plain->currentWeights().weights.buffer;
        kernels.push_back(std::move(made));
        found = kernels.end() - 1;
        // Made from host memory: right unless plain's last reload has not run yet.
        if (reloadPending(plain->currentWeights())) found->syncedWeights.reset();
    }
    const ConvolutionWeights& current = plain->currentWeights();
    if (found->syncedWeights.lock() != current.weights.buffer) {
        if (reloadPending(current))
            // An encoded copy, ordered after plain's reload (the same ValueError as plain's own
            // encode when that reload sits on a command buffer that was never committed).
            found->kernel->reloadWeightsAndBiasesWithCommandBuffer(
                cb, plain->exportWeightsAndBiasesWithCommandBuffer(cb, true));
        else
            found->kernel->reloadWeightsAndBiasesFromDataSource();
        found->syncedWeights = current.weights.buffer;
    }
    copyEncodeProperties(*plain, *found->kernel);
    found->kernel->accumulatorPrecisionOption = plain->accumulatorPrecisionOption;
    return *found->kernel;
}

bool CNNConvolutionNode::canFuseNeuron(const NNNeuronDescriptor& neuron) const {
    if (!kernel_ || neuron.neuronType == CNNNeuronType::None) return false;
    const CNNConvolutionDescriptor& d = kernel_->descriptor();
    if (d.fusedNeuronDescriptor.neuronType != CNNNeuronType::None) return false;  // one neuron already
    // The kernel applies PReLU per computed channel: only a regular convolution's channels are
    // the neuron node's channels (sub-pixel shuffles them), and the slopes must be one per channel.
    if (neuron.neuronType == CNNNeuronType::PReLU)
        return d.subPixelScaleFactor == 1 && int64_t(neuron.data.size()) == d.outputFeatureChannels;
    return true;
}

bool CNNConvolutionNode::fusionPays() const {
    // Every device: the fused neuron saves a pass over the result. The CPU convolution's epilogue
    // runs one loop per neuron type (backend/cpu/conv_epilogue.h), so fused is no slower there
    // either (docs/graph.md: three 8x56x56x64 conv + ReLU pairs, 368 ms fused, 378 ms unfused).
    return true;
}

NodeEncodeResult CNNConvolutionNode::encodeWithNeuron(NodeEncodeContext& ctx, const ImageBatch& sources,
                                                      const NNNeuronDescriptor& neuron) {
    CNNConvolution& fused = syncedFusedConvolution(fusedKernels_, kernel_, neuron, ctx.cb);
    prepareKernel(fused, ctx);
    fused.accumulatorPrecisionOption = accumulatorPrecision;
    NodeEncodeResult result;
    result.images = fused.encodeBatch(ctx.cb, sources);
    return result;
}

// ---- batch normalization ------------------------------------------------------------------------------------

namespace {
// The data source of a fused batch normalization: the parameters the node's kernel holds.
class KernelParametersDataSource final : public CNNBatchNormalizationDataSource {
public:
    explicit KernelParametersDataSource(std::shared_ptr<CNNBatchNormalization> plain) : plain_(std::move(plain)) {}
    int64_t numberOfFeatureChannels() override { return plain_->numberOfFeatureChannels(); }
    const float* gamma() override { return plain_->currentWeights().gamma.floats(); }
    const float* beta() override { return plain_->currentWeights().beta.floats(); }
    const float* mean() override { return plain_->currentWeights().mean.floats(); }
    const float* variance() override { return plain_->currentWeights().variance.floats(); }
    bool load() override { return true; }
    void purge() override {}
    std::optional<float> epsilon() override { return plain_->epsilon(); }

private:
    std::shared_ptr<CNNBatchNormalization> plain_;
};
}  // namespace

CNNBatchNormalization& syncedFusedBatchNormalization(std::vector<FusedBatchNormalizationKernel>& kernels,
                                                     const std::shared_ptr<CNNBatchNormalization>& plain,
                                                     const NNNeuronDescriptor& neuron, CommandBuffer& cb) {
    auto found = std::find_if(kernels.begin(), kernels.end(), [&](const FusedBatchNormalizationKernel& k) {
        return sameNeuronDescriptor(k.neuron, neuron);
    });
    const BatchNormalizationWeights& current = plain->currentWeights();
    if (found == kernels.end()) {
        auto source = std::make_shared<KernelParametersDataSource>(plain);
        // Unsynced: plain's buffers may be the target of a reload still pending on `cb`, so the
        // values this constructor read from host memory are replaced by encoded copies below.
        kernels.push_back({neuron, std::make_shared<CNNBatchNormalization>(plain->device(), source, neuron), {}, {}});
        found = kernels.end() - 1;
    }
    if (found->syncedGamma.lock() != current.gamma.buffer) {
        found->kernel->copyGammaAndBetaWithCommandBuffer(cb, *plain);
        found->syncedGamma = current.gamma.buffer;
    }
    if (found->syncedMean.lock() != current.mean.buffer) {
        found->kernel->copyMeanAndVarianceWithCommandBuffer(cb, *plain);
        found->syncedMean = current.mean.buffer;
    }
    found->kernel->setEpsilon(plain->epsilon());
    copyEncodeProperties(*plain, *found->kernel);
    return *found->kernel;
}

bool CNNBatchNormalizationNode::canFuseNeuron(const NNNeuronDescriptor& neuron) const {
    if (!kernel_ || neuron.neuronType == CNNNeuronType::None) return false;
    if (kernel_->fusedNeuronDescriptor().neuronType != CNNNeuronType::None) return false;
    if (neuron.neuronType == CNNNeuronType::PReLU)
        return int64_t(neuron.data.size()) == kernel_->numberOfFeatureChannels();
    return true;
}

bool CNNBatchNormalizationNode::fusionPays() const {
    return true;  // one memory pass instead of two (8x56x56x64 + ReLU on the CPU: 3.7 ms fused, 14.5 ms)
}

NodeEncodeResult CNNBatchNormalizationNode::encodeWithNeuron(NodeEncodeContext& ctx, const ImageBatch& sources,
                                                             const NNNeuronDescriptor& neuron) {
    return encodeWith(syncedFusedBatchNormalization(fusedKernels_, kernel_, neuron, ctx.cb), ctx, sources);
}

}  // namespace mpsgrad
