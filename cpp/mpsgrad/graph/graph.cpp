// NNGraph: construction (ordering, binding, misuse checks) and encoding.
#include "graph/graph.h"

#include <algorithm>
#include <unordered_set>

#include "core/errors.h"
#include "core/profiler.h"
#include "graph/graph_storage.h"

namespace mpsgrad {

namespace {
// Added to a temporary source's read count while the graph encodes, so that no number of reads
// can exhaust it; the count is then set to what it was minus one (one decrement per encode).
constexpr int64_t kReadCountReserve = int64_t(1) << 40;

template <class T>
bool contains(const std::vector<T>& values, const T& value) {
    return std::find(values.begin(), values.end(), value) != values.end();
}

// How the profiler names a node: its class, its label if it has one, and "+ neuron" when a fused
// neuron runs with it.
std::string profileLabel(const NNFilterNode& node, bool fusedNeuron) {
    std::string label = node.className();
    if (!node.label.empty()) label += " " + node.label;
    if (fusedNeuron) label += " + neuron";
    return label;
}
}  // namespace

NNGraph::NNGraph(const Device& device, const ImageNodePtr& resultImage, bool resultImageIsNeeded)
    : device_(device), resultsNeeded_{resultImageIsNeeded} {
    checkNodeNotNull(resultImage.get(), "result_image");
    build({resultImage});
}

NNGraph::NNGraph(const Device& device, const std::vector<ImageNodePtr>& resultImages,
                 const std::vector<bool>& resultsAreNeeded)
    : device_(device), resultsNeeded_(resultsAreNeeded) {
    if (resultImages.empty()) throwValueError("result_images: expected at least one result image node");
    if (resultsAreNeeded.empty()) resultsNeeded_.assign(resultImages.size(), true);
    if (resultsNeeded_.size() != resultImages.size())
        throwValueError("results_are_needed: expected one flag per result image (", resultImages.size(), "), got ",
                        resultsAreNeeded.size());
    for (size_t i = 0; i < resultImages.size(); ++i) checkNodeNotNull(resultImages[i].get(), "result_images");
    build(resultImages);
}

void NNGraph::noteSourceImage(const ImageNodePtr& image) {
    if (!contains(sourceImages_, image)) sourceImages_.push_back(image);
}

void NNGraph::noteSourceState(const StateNodePtr& state) {
    if (!contains(sourceStates_, state)) sourceStates_.push_back(state);
}

// Depth-first, inputs before the node: the source handles come out in the order the graph first
// meets them, walking each node's images left to right, then its states.
void NNGraph::visit(const FilterNodePtr& node, std::unordered_map<const NNFilterNode*, int>& marks) {
    int& mark = marks[node.get()];
    if (mark == 2) return;
    if (mark == 1)
        throwValueError("result_image: the graph has a cycle through ", node->className(),
                        node->label.empty() ? "" : " '" + node->label + "'");
    mark = 1;
    for (const auto& image : node->sourceImages()) {
        if (auto producer = image->producer())
            visit(producer, marks);
        else
            noteSourceImage(image);
    }
    for (const auto& state : node->sourceStates()) {
        if (!state) throwValueError(node->className(), ": a source state node is None");
        consumedStates_.push_back(state.get());
        if (auto producer = state->producer())
            visit(producer, marks);
        else
            noteSourceState(state);
    }
    marks[node.get()] = 2;
    order_.push_back(node);
}

void NNGraph::build(const std::vector<ImageNodePtr>& results) {
    results_ = results;
    std::unordered_map<const NNFilterNode*, int> marks;
    for (size_t i = 0; i < results.size(); ++i) {
        auto producer = results[i]->producer();
        if (!producer)
            throwValueError("result_image: result ", i, " is a graph input (no filter node produces it); "
                            "there is nothing to compute");
        visit(producer, marks);
    }
    for (const auto& node : order_) {
        node->bind(device_);
        node->checkTrainable();
        for (const auto& state : node->resultStates())
            if (state->exportFromGraph) exportedStates_.push_back(state);
        auto image = node->resultImage();
        if (image->exportFromGraph && image != results_.front()) exportedImages_.push_back(image);
    }
    for (size_t i = 1; i < results_.size(); ++i)
        if (!contains(exportedImages_, results_[i])) exportedImages_.push_back(results_[i]);
    // Liveness: the position of the last node that reads each image.
    for (size_t i = 0; i < order_.size(); ++i)
        for (const auto& image : order_[i]->sourceImages()) lastUse_[image.get()] = i;
    // Neuron fusion (graph_fusion.h): decided once, with the nodes bound.
    fusion_ = planNeuronFusion(order_, FusionGraphFacts{&results_, &exportedImages_, &consumedStates_});
}

std::vector<std::pair<FilterNodePtr, FilterNodePtr>> NNGraph::fusedNodePairs() const {
    std::vector<std::pair<FilterNodePtr, FilterNodePtr>> pairs;
    for (const auto& pair : fusion_.pairs())
        if (NeuronFusionPlan::fuses(pair, neuronFusion)) pairs.emplace_back(order_[pair.head], order_[pair.tail]);
    return pairs;
}

bool NNGraph::leavesGraph(const ImageNodePtr& image) const {
    return image == results_.front() || contains(exportedImages_, image);
}

ImageFeatureChannelFormat NNGraph::storageFormat(const NNImageNode& image, bool leavesGraph) const {
    if (image.format != ImageFeatureChannelFormat::None) return image.format;
    return leavesGraph ? ImageFeatureChannelFormat::Float32 : format;
}

void NNGraph::checkFormats() const {
    auto supported = [](ImageFeatureChannelFormat f) {
        return f == ImageFeatureChannelFormat::Float32 || f == ImageFeatureChannelFormat::Float16;
    };
    if (!supported(format))
        throwValueError("format: the graph's intermediates can be FLOAT16 or FLOAT32, got ",
                        featureChannelFormatName(format));
    for (const auto& node : order_)
        if (node->resultImage()->format != ImageFeatureChannelFormat::None && !supported(node->resultImage()->format))
            throwValueError("format: the result image of ", node->className(),
                            " asks for an unsupported storage format (",
                            featureChannelFormatName(node->resultImage()->format), "); use NONE, FLOAT16 or FLOAT32");
}

std::vector<HandlePtr> NNGraph::sourceImageHandles() const {
    std::vector<HandlePtr> handles;
    for (const auto& image : sourceImages_) handles.push_back(image->handle);
    return handles;
}

std::vector<HandlePtr> NNGraph::sourceStateHandles() const {
    std::vector<HandlePtr> handles;
    for (const auto& state : sourceStates_) handles.push_back(state->handle);
    return handles;
}

std::vector<HandlePtr> NNGraph::intermediateImageHandles() const {
    std::vector<HandlePtr> handles;
    for (const auto& image : exportedImages_) handles.push_back(image->handle);
    return handles;
}

std::vector<HandlePtr> NNGraph::resultStateHandles() const {
    std::vector<HandlePtr> handles;
    for (const auto& state : exportedStates_) handles.push_back(state->handle);
    return handles;
}

HandlePtr NNGraph::resultHandle() const { return results_.front()->handle; }

void NNGraph::reloadFromDataSources() {
    for (const auto& node : order_) node->reloadFromDataSource();
}

int64_t NNGraph::readCountForSourceImageAtIndex(size_t index) const {
    if (index >= sourceImages_.size())
        throwValueError("index: the graph has ", sourceImages_.size(), " source image(s), got index ", index);
    return 1;
}

int64_t NNGraph::readCountForSourceStateAtIndex(size_t index) const {
    if (index >= sourceStates_.size())
        throwValueError("index: the graph has ", sourceStates_.size(), " source state(s), got index ", index);
    return 1;
}

namespace {
// Holds the read counts of the temporary sources up during an encode, then leaves each one
// decremented once (or untouched when the encode failed).
// Abandons the pool's encode when encoding fails (endEncode already ended it on success).
struct PoolEncodeGuard {
    IntermediatePool* pool;
    ~PoolEncodeGuard() {
        if (pool->encoding()) pool->abandonEncode();
    }
};

class SourceReadCountGuard {
public:
    void hold(const ImagePtr& image) {
        auto* temporary = dynamic_cast<TemporaryImage*>(image.get());
        if (!temporary || seen_.count(temporary)) return;
        seen_.insert(temporary);
        images_.push_back({temporary, temporary->readCount()});
        temporary->setReadCount(temporary->readCount() + kReadCountReserve);
    }
    void hold(const StatePtr& state) {
        if (!state || !state->isTemporary() || seen_.count(state.get())) return;
        seen_.insert(state.get());
        states_.push_back({state.get(), state->readCount()});
        state->setReadCount(state->readCount() + kReadCountReserve);
    }
    void commit() { consumed_ = true; }
    ~SourceReadCountGuard() {
        int64_t decrement = consumed_ ? 1 : 0;
        for (auto& [image, count] : images_)
            if (image->readCount() > 0) image->setReadCount(std::max<int64_t>(count - decrement, 0));
        for (auto& [state, count] : states_)
            if (state->readCount() > 0) state->setReadCount(std::max<int64_t>(count - decrement, 0));
    }

private:
    std::unordered_set<const void*> seen_;
    std::vector<std::pair<TemporaryImage*, int64_t>> images_;
    std::vector<std::pair<State*, int64_t>> states_;
    bool consumed_ = false;
};

void checkSourceBatches(const std::vector<ImageBatch>& images, size_t expectedImages,
                        const std::vector<StateBatch>& states, size_t expectedStates) {
    if (images.size() != expectedImages)
        throwValueError("source_images: the graph has ", expectedImages, " source image handle(s), got ",
                        images.size(), " source(s)");
    if (states.size() != expectedStates)
        throwValueError("source_states: the graph has ", expectedStates, " source state handle(s) (labels), got ",
                        states.size());
    size_t n = images.empty() ? 0 : images.front().size();
    if (!images.empty() && n == 0) throwValueError("source_images: the batches are empty");
    for (size_t i = 0; i < images.size(); ++i) {
        if (images[i].size() != n)
            throwValueError("source_images: every source batch must have the same length; batch 0 has ", n,
                            ", batch ", i, " has ", images[i].size());
        for (const auto& image : images[i]) {
            if (!image) throwValueError("source_images: batch ", i, " holds None");
            // Every node's result holds one image per batch entry: more would be dropped silently.
            if (image->numberOfImages() != 1)
                throwValueError("source_images: batch ", i, " holds an image with number_of_images == ",
                                image->numberOfImages(), "; the graph needs number_of_images == 1 (pass the images "
                                "of a batch as separate entries: batch_representation())");
        }
    }
    for (size_t i = 0; i < states.size(); ++i)
        if (states[i].size() != n)
            throwValueError("source_states: state batch ", i, " has ", states[i].size(), " state(s); the image "
                            "batches have ", n);
}
// Records the pooled buffers the images of `node` live in (each buffer once per image node).
void notePooled(const IntermediatePool& pool, const NNImageNode* node, const ImageBatch& images,
                std::unordered_map<const Buffer*, std::pair<std::shared_ptr<Buffer>, size_t>>& live,
                std::unordered_map<const NNImageNode*, std::vector<const Buffer*>>& pooledBuffers) {
    auto& buffers = pooledBuffers[node];
    for (const auto& image : images) {
        std::shared_ptr<Buffer> buffer = image->storage(0).buffer;
        if (!buffer || !pool.owns(buffer.get()) || contains(buffers, (const Buffer*)buffer.get())) continue;
        buffers.push_back(buffer.get());
        auto& entry = live[buffer.get()];
        entry.first = buffer;
        ++entry.second;
    }
}
}  // namespace

bool NNGraph::defersUpdate(const NNFilterNode& node) const {
    auto* style = const_cast<NNFilterNode&>(node).trainingStylePointer();
    if (!style || *style == NNTrainingStyle::UpdateDeviceNone || !dynamic_cast<const NNGradientFilterNode*>(&node))
        return false;
    if (*style == NNTrainingStyle::UpdateDeviceGPU)
        throwValueError("before_updates: ", node.className(), " trains with UPDATE_DEVICE_GPU, whose update is "
                        "encoded before the hook could run; set its training_style to UPDATE_DEVICE_CPU");
    return true;
}

namespace {
// The handler that calls the hook, registered before the deferred nodes register their update
// handlers (completed handlers run in the order they were added).
void encodeBeforeUpdates(CommandBuffer& cb, const NNGraph::BeforeUpdatesHandler& hook,
                         std::vector<std::pair<FilterNodePtr, std::vector<StateBatch>>>& deferred) {
    std::vector<StatePtr> gradients;
    for (const auto& [node, states] : deferred)
        if (!states.empty())
            for (const auto& state : states.front())
                if (std::find(gradients.begin(), gradients.end(), state) == gradients.end())
                    gradients.push_back(state);
    cb.addCompletedHandler([hook, gradients](CommandBuffer& done) {
        if (done.status() != CommandBufferStatus::Error) hook(gradients);
    });
    for (auto& [node, states] : deferred) node->afterEncode(cb, states);
}
}  // namespace

ImageBatch NNGraph::encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceImages,
                                const std::vector<StateBatch>& sourceStates,
                                std::vector<ImageBatch>* intermediateImages,
                                std::vector<StateBatch>* destinationStates) {
    checkSourceBatches(sourceImages, sourceImages_.size(), sourceStates, sourceStates_.size());
    checkFormats();
    printIfVerbose();
    if (cb.device() != device_)
        throwValueError("command_buffer: is on device '", cb.device().name(), "', the graph on '", device_.name(),
                        "'");
    std::unordered_map<const NNImageNode*, ImageBatch> images;
    std::unordered_map<const NNStateNode*, StateBatch> states;
    SourceReadCountGuard guard;
    for (size_t i = 0; i < sourceImages_.size(); ++i) {
        images[sourceImages_[i].get()] = sourceImages[i];
        for (const auto& image : sourceImages[i]) guard.hold(image);
    }
    for (size_t i = 0; i < sourceStates_.size(); ++i) {
        states[sourceStates_[i].get()] = sourceStates[i];
        for (const auto& state : sourceStates[i]) guard.hold(state);
    }

    std::vector<TemporaryImage*> intermediates;  // temporaries the graph made, released at the end
    std::vector<std::pair<FilterNodePtr, std::vector<StateBatch>>> deferredUpdates;  // with beforeUpdates
    lastEncode_ = GraphEncodeStatistics{};
    // The graph's pool (graph_storage.h); an encode started while another is under way (from a
    // callback) gets a pool of its own.
    if (!pool_) pool_ = std::make_shared<IntermediatePool>();
    auto pool = pool_->encoding() ? std::make_shared<IntermediatePool>() : pool_;
    pool->beginEncode(lastEncode_);
    PoolEncodeGuard poolGuard{pool.get()};
    // Pooled buffers -> how many image nodes still to be read hold images in them.
    std::unordered_map<const Buffer*, std::pair<std::shared_ptr<Buffer>, size_t>> live;
    std::unordered_map<const NNImageNode*, std::vector<const Buffer*>> pooledBuffers;
    auto retire = [&](const NNImageNode* image) {
        auto found = pooledBuffers.find(image);
        if (found == pooledBuffers.end()) return;
        for (const Buffer* buffer : found->second) {
            auto& entry = live.at(buffer);
            if (--entry.second == 0) {
                pool->release(std::move(entry.first));
                live.erase(buffer);
            }
        }
        pooledBuffers.erase(found);
    };
    for (size_t index = 0; index < order_.size(); ++index) {
        const auto& node = order_[index];
        // A fused neuron ran with its producer; its source image never existed.
        if (fusion_.isTail(index, neuronFusion)) continue;
        const FusedNeuronPair* fused = fusion_.headAt(index, neuronFusion);
        std::vector<ImageBatch> inputs;
        for (const auto& image : node->sourceImages()) inputs.push_back(images.at(image.get()));
        std::vector<StateBatch> inputStates;
        for (const auto& state : node->sourceStates()) inputStates.push_back(states.at(state.get()));

        // A fused pair makes the neuron node's result.
        auto result = fused ? order_[fused->tail]->resultImage() : node->resultImage();
        bool isResult = result == results_.front();
        auto resultStates = fused ? std::vector<StateNodePtr>{} : node->resultStates();
        bool wantStates = false;
        for (const auto& state : resultStates)
            wantStates |= state->exportFromGraph || contains(consumedStates_, (const NNStateNode*)state.get());
        bool leaves = leavesGraph(result);
        auto nodeAllocator = result->imageAllocator ? result->imageAllocator : ImageAllocator::temporaryAllocator();
        // Intermediates nobody outside sees, on the default allocator, live in the pool.
        bool pooled = !leaves && nodeAllocator == ImageAllocator::temporaryAllocator();
        std::shared_ptr<ImageAllocator> allocator =
            isResult ? destinationImageAllocator : pooled ? std::shared_ptr<ImageAllocator>(pool) : nodeAllocator;
        NodeEncodeContext ctx{cb, std::make_shared<FormatAllocator>(allocator, storageFormat(*result, leaves)),
                              wantStates};
        if (batchNormalizationSync) ctx.batchNormalizationSync = &batchNormalizationSync;
        // Unread: no later node reads it, it is not exported, and it is the result nobody asked for.
        ctx.resultIsRead = lastUse_.count(result.get()) || contains(exportedImages_, result) ||
                           (isResult && (resultsNeeded_.front() || result->exportFromGraph));
        // The profiler files the node's backend ops under it (core/profiler.h).
        profiler::EncodeScope scope(profiler::enabled() ? profileLabel(*node, fused) : std::string());
        NodeEncodeResult encoded = fused ? fused->producer->encodeWithNeuron(ctx, inputs.at(0), fused->neuron)
                                         : node->encode(ctx, inputs, inputStates);
        if (beforeUpdates && defersUpdate(*node))
            deferredUpdates.emplace_back(node, std::move(inputStates));
        else
            node->afterEncode(cb, inputStates);
        ++lastEncode_.encodedNodes;
        if (fused) ++lastEncode_.fusedPairs;

        if (pooled) notePooled(*pool, result.get(), encoded.images, live, pooledBuffers);
        lastEncode_.peakLiveBuffers = std::max(lastEncode_.peakLiveBuffers, live.size());
        // Inputs read for the last time, and a result nothing reads, are dead from here on.
        for (const auto& image : node->sourceImages())
            if (lastUse_.at(image.get()) == index) retire(image.get());
        if (!lastUse_.count(result.get())) retire(result.get());

        for (const auto& image : encoded.images)
            if (auto* temporary = dynamic_cast<TemporaryImage*>(image.get())) {
                temporary->setReadCount(kReadCountReserve);
                intermediates.push_back(temporary);
            }
        images[result.get()] = std::move(encoded.images);
        for (size_t i = 0; i < encoded.states.size() && i < resultStates.size(); ++i)
            states[resultStates[i].get()] = std::move(encoded.states[i]);
    }
    guard.commit();
    pool->endEncode(cb);
    if (beforeUpdates) encodeBeforeUpdates(cb, beforeUpdates, deferredUpdates);

    // Read counts of what the graph made: exported temporaries 1 (2 for a result that is also
    // exported), everything else released now.
    const ImageBatch& resultBatch = images.at(results_.front().get());
    bool resultExported = results_.front()->exportFromGraph;
    for (auto* temporary : intermediates) {
        bool exported = false;
        for (const auto& node : exportedImages_)
            for (const auto& image : images.at(node.get())) exported |= image.get() == temporary;
        bool result = false;
        for (const auto& image : resultBatch) result |= image.get() == temporary;
        int64_t count = (exported ? 1 : 0) + (result ? (resultExported ? 2 : 1) - (exported ? 1 : 0) : 0);
        temporary->setReadCount(count);
    }
    if (intermediateImages) {
        intermediateImages->clear();
        for (const auto& node : exportedImages_) intermediateImages->push_back(images.at(node.get()));
    }
    if (destinationStates) {
        destinationStates->clear();
        for (const auto& node : exportedStates_) {
            auto found = states.find(node.get());
            destinationStates->push_back(found == states.end() ? StateBatch{} : found->second);
        }
    }
    return resultsNeeded_.front() ? resultBatch : ImageBatch{};
}

ImagePtr NNGraph::encode(CommandBuffer& cb, const ImageBatch& sourceImages, const StateBatch& sourceStates,
                         ImageBatch* intermediateImages, StateBatch* destinationStates) {
    std::vector<ImageBatch> imageBatches;
    for (const auto& image : sourceImages) imageBatches.push_back({image});
    std::vector<StateBatch> stateBatches;
    for (const auto& state : sourceStates) stateBatches.push_back({state});
    std::vector<ImageBatch> intermediates;
    std::vector<StateBatch> states;
    ImageBatch result = encodeBatch(cb, imageBatches, stateBatches, intermediateImages ? &intermediates : nullptr,
                                    destinationStates ? &states : nullptr);
    if (intermediateImages) {
        intermediateImages->clear();
        for (auto& batch : intermediates) intermediateImages->push_back(batch.empty() ? nullptr : batch.front());
    }
    if (destinationStates) {
        destinationStates->clear();
        for (auto& batch : states) destinationStates->push_back(batch.empty() ? nullptr : batch.front());
    }
    return result.empty() ? nullptr : result.front();
}

std::pair<ImagePtr, std::shared_ptr<CommandBuffer>> NNGraph::executeAsync(const ImageBatch& sourceImages,
                                                                          CompletionHandler handler,
                                                                          const StateBatch& sourceStates) {
    if (!handler) throwValueError("completion_handler: expected a callable");
    if (!queue_) queue_ = std::make_shared<CommandQueue>(device_);  // the graph's private queue
    auto cb = queue_->commandBuffer();
    ImagePtr result = encode(*cb, sourceImages, sourceStates);
    cb->addCompletedHandler([result, handler](CommandBuffer& done) {
        if (done.status() == CommandBufferStatus::Error)
            handler(nullptr, done.error());
        else
            handler(result, std::string());
    });
    cb->commit();
    return {result, cb};
}

}  // namespace mpsgrad
