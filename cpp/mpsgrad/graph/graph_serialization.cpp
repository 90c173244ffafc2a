// NNGraph serialization (graph_serialization.h; the format is in docs/serialization.md "Graphs").
//
// Encoding walks the graph's nodes in encode order and gives every image and state node a
// reference: a graph input by its index in the blob's input tables, a node's result by the index of
// the node that produces it. Nodes only refer to earlier nodes, so decoding rebuilds the DAG in one
// pass (no cycle can be written) and NNGraph's own construction re-derives everything else.
#include "graph/graph_serialization.h"

#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>

#include "core/serialization.h"
#include "graph/filter_nodes.h"
#include "graph/filter_nodes_groups.h"
#include "graph/filter_nodes_transpose.h"
#include "graph/graph_serialization_coders.h"
#include "kernels/serialization_support.h"

namespace mpsgrad {
namespace {

using graph_serial::as;
using graph_serial::DecodeContext;
using graph_serial::GraphIndex;
using graph_serial::nodeCoders;
using serial_support::asSerializationError;

constexpr const char* kGraphTag = "NNGraph";
// Version 2 added the instance and group normalization data source tables; version 1 blobs still read.
constexpr uint32_t kGraphVersion = 2;
constexpr uint8_t kRefInput = 0, kRefNode = 1;

// ---- the walk shared by encoding and graphObjects() ------------------------------------------------
// The data source a convolution gradient node names itself (null: the forward node's).
std::shared_ptr<CNNConvolutionDataSource> explicitWeights(const NNFilterNode& node) {
    if (auto* gradient = dynamic_cast<const CNNConvolutionGradientNode*>(&node)) return gradient->explicitWeights();
    return nullptr;
}

GraphIndex indexGraph(const NNGraph& graph) {
    GraphIndex index;
    for (const FilterNodePtr& node : graph.nodes()) {
        for (const ImageNodePtr& image : node->sourceImages()) {
            if (image->producer() || index.sourceImageIndex.count(image.get())) continue;
            index.sourceImageIndex[image.get()] = index.sourceImages.size();
            index.sourceImages.push_back(image);
            index.addHandle(image->handle);
        }
        for (const StateNodePtr& state : node->sourceStates()) {
            if (!state || state->producer() || index.sourceStateIndex.count(state.get())) continue;
            index.sourceStateIndex[state.get()] = index.sourceStates.size();
            index.sourceStates.push_back(state);
            index.addHandle(state->handle);
        }
        size_t position = index.nodeIndex.size();
        index.nodeIndex[node.get()] = position;
        index.addHandle(node->resultImage()->handle);
        for (const StateNodePtr& state : node->resultStates()) index.addHandle(state->handle);
        if (auto* conv = dynamic_cast<const CNNConvolutionNode*>(node.get())) index.addConvolution(conv->dataSource(), conv);
        if (auto* transpose = dynamic_cast<const CNNConvolutionTransposeNode*>(node.get()))
            index.addConvolution(transpose->dataSource(), transpose);
        index.addConvolution(explicitWeights(*node), nullptr);
        if (auto* bn = dynamic_cast<const CNNBatchNormalizationNode*>(node.get()))
            index.addNormalization(index.objects.batchNormalization, index.batchNormalizationOwner, bn->dataSource(), bn);
        if (auto* in = dynamic_cast<const CNNInstanceNormalizationNode*>(node.get()))
            index.addNormalization(index.objects.instanceNormalization, index.instanceNormalizationOwner,
                                   in->dataSource(), in);
        if (auto* gn = dynamic_cast<const CNNGroupNormalizationNode*>(node.get()))
            index.addNormalization(index.objects.groupNormalization, index.groupNormalizationOwner, gn->dataSource(), gn);
    }
    return index;
}

// ---- shared records ---------------------------------------------------------------------------------------
void writeHandle(serial::Writer& w, const GraphIndex& index, const HandlePtr& handle) {
    w.u64(handle ? index.objectIndex.at(handle.get()) + 1 : 0);
}

void writePadding(serial::Writer& w, const std::shared_ptr<NNPadding>& padding, const NNFilterNode& node) {
    if (!padding) return w.u8(0);
    auto* builtin = dynamic_cast<const NNDefaultPadding*>(padding.get());
    if (!builtin)
        throwValueError("padding_policy: node ", node.className(), " '", node.label,
                        "' uses a custom NNPadding, which a graph blob cannot hold; use an NNDefaultPadding or None");
    w.u8(1);
    w.u32(builtin->paddingMethod());
}

void writeAllocator(serial::Writer& w, const std::shared_ptr<ImageAllocator>& allocator, const char* where) {
    if (!allocator) return w.u8(0);
    if (allocator == ImageAllocator::temporaryAllocator()) return w.u8(1);
    if (allocator == ImageAllocator::persistentAllocator()) return w.u8(2);
    throwValueError(where, ": a custom ImageAllocator cannot be written in a graph blob; use "
                    "ImageAllocator.temporary() or persistent()");
}

// Properties of an image node (its edges are written by whoever refers to it).
void writeImageNode(serial::Writer& w, const GraphIndex& index, const NNImageNode& image, const char* where) {
    writeHandle(w, index, image.handle);
    w.u32(uint32_t(image.format));
    writeAllocator(w, image.imageAllocator, where);
    w.boolean(image.exportFromGraph);
    w.boolean(image.synchronizeResource);
    w.boolean(image.stopGradient);
}

void writeStateNode(serial::Writer& w, const GraphIndex& index, const NNStateNode& state) {
    writeHandle(w, index, state.handle);
    w.boolean(state.exportFromGraph);
    w.boolean(state.synchronizeResource);
}

void writeImageRef(serial::Writer& w, const GraphIndex& index, const ImageNodePtr& image) {
    if (auto producer = image->producer()) {
        w.u8(kRefNode);
        return w.u64(index.nodeIndex.at(producer.get()));
    }
    w.u8(kRefInput);
    w.u64(index.sourceImageIndex.at(image.get()));
}

void writeStateRef(serial::Writer& w, const GraphIndex& index, const StateNodePtr& state, const NNFilterNode& node) {
    if (!state) throwValueError("graph: node ", node.className(), " has a null state input");
    if (auto producer = state->producer()) {
        w.u8(kRefNode);
        w.u64(index.nodeIndex.at(producer.get()));
        std::vector<StateNodePtr> states = producer->resultStates();
        for (size_t i = 0; i < states.size(); ++i)
            if (states[i].get() == state.get()) return w.u64(i);
        throwValueError("graph: a state input of ", node.className(), " is not among its producer's result states");
    }
    w.u8(kRefInput);
    w.u64(index.sourceStateIndex.at(state.get()));
}


// ---- captured data sources ---------------------------------------------------------------------------------
// Gives `field` the value `value` until the guard goes out of scope.
template <class T>
class Substitute {
public:
    Substitute(T& field, T value) : field_(field), saved_(std::exchange(field, std::move(value))) {}
    ~Substitute() { field_ = std::move(saved_); }
    Substitute(const Substitute&) = delete;
    Substitute& operator=(const Substitute&) = delete;

private:
    T& field_;
    T saved_;
};

// A node's kernel blob with the kernel's per-encode settings at their defaults: at each encode the graph
// sets the node's padding, allocator, label and accumulator precision on the kernel, and the padding
// policy sets its offsets (a transposed convolution's kernel offsets too). None belongs to the weights
// (the node record holds the node's own values), and a blob must not depend on whether the graph has run.
std::vector<uint8_t> weightsBlob(CNNKernel& kernel) {
    Substitute<std::shared_ptr<NNPadding>> padding(kernel.padding, nullptr);
    Substitute<std::shared_ptr<ImageAllocator>> allocator(kernel.destinationImageAllocator, nullptr);
    Substitute<std::string> label(kernel.label, {});
    Substitute<Offset> offset(kernel.offset, {});
    constexpr auto kFloat = NNConvolutionAccumulatorPrecisionOption::Float;
    if (auto* conv = dynamic_cast<CNNConvolution*>(&kernel)) {  // and CNNFullyConnected
        Substitute<NNConvolutionAccumulatorPrecisionOption> precision(conv->accumulatorPrecisionOption, kFloat);
        return kernel.serialize();
    }
    if (auto* transpose = dynamic_cast<CNNConvolutionTranspose*>(&kernel)) {
        Substitute<NNConvolutionAccumulatorPrecisionOption> precision(transpose->accumulatorPrecisionOption, kFloat);
        Substitute<int64_t> x(transpose->kernelOffsetX, 0), y(transpose->kernelOffsetY, 0);
        return kernel.serialize();
    }
    return kernel.serialize();
}

// The weights the owner node's kernel computes with (the kernels' coder), or the data source's own.
std::vector<uint8_t> captureConvolution(const GraphIndex& index, size_t i, const Device& device) {
    if (auto* owner = dynamic_cast<const CNNConvolutionNode*>(index.convolutionOwner[i]))
        if (owner->kernel()) return weightsBlob(*owner->kernel());
    if (auto* owner = dynamic_cast<const CNNConvolutionTransposeNode*>(index.convolutionOwner[i]))
        if (owner->kernel()) return weightsBlob(*owner->kernel());
    return CNNConvolution(device, index.objects.convolution[i]).serialize();
}

std::shared_ptr<CNNConvolutionDataSource> decodeCapturedConvolution(serial::Reader& r, const Device& device) {
    auto [data, size] = r.object("convolution_data_source");
    std::shared_ptr<Kernel> kernel = Kernel::deserialize(data, size, device);
    if (auto* conv = dynamic_cast<CNNConvolution*>(kernel.get())) return conv->dataSource();
    if (auto* transpose = dynamic_cast<CNNConvolutionTranspose*>(kernel.get())) return transpose->dataSource();
    r.fail("convolution_data_source", "expected a serialized CNNConvolution or CNNConvolutionTranspose");
}

std::shared_ptr<CNNBatchNormalizationDataSource> decodeCapturedBatchNormalization(serial::Reader& r,
                                                                                  const Device& device) {
    auto [data, size] = r.object("batch_normalization_data_source");
    return Kernel::deserializeAs<CNNBatchNormalization>(std::vector<uint8_t>(data, data + size), device)->dataSource();
}

// An instance / group normalization kernel blob as a ready-made data source. The kernel coder leaves
// its data source's epsilon unset (the kernel holds it); a node makes its kernel from the data source
// alone, so the source gets the kernel's epsilon here.
std::shared_ptr<CNNInstanceNormalizationDataSource> decodeCapturedInstanceNormalization(serial::Reader& r,
                                                                                        const Device& device) {
    auto [data, size] = r.object("instance_normalization_data_source");
    auto kernel = Kernel::deserializeAs<CNNInstanceNormalization>(std::vector<uint8_t>(data, data + size), device);
    auto& decoded = static_cast<CNNInstanceNormalizationWeightsDataSource&>(*kernel->dataSource());
    return std::make_shared<CNNInstanceNormalizationWeightsDataSource>(decoded.gamma_, decoded.beta_, kernel->epsilon(),
                                                                       decoded.label());
}

std::shared_ptr<CNNGroupNormalizationDataSource> decodeCapturedGroupNormalization(serial::Reader& r,
                                                                                  const Device& device) {
    auto [data, size] = r.object("group_normalization_data_source");
    auto kernel = Kernel::deserializeAs<CNNGroupNormalization>(std::vector<uint8_t>(data, data + size), device);
    auto& decoded = static_cast<CNNGroupNormalizationWeightsDataSource&>(*kernel->dataSource());
    return std::make_shared<CNNGroupNormalizationWeightsDataSource>(
        decoded.gamma_, decoded.beta_, decoded.numberOfGroups(), kernel->epsilon(), decoded.label());
}

// ---- decoding helpers -----------------------------------------------------------------------------------
// A count of records that each take at least `minBytes`: refuses counts the input cannot hold.
uint64_t readCount(serial::Reader& r, const char* what, size_t minBytes) {
    uint64_t n = r.u64(what);
    if (n > r.remaining() / minBytes)
        r.fail(what, detail::concat("declares ", n, " record(s) but only ", r.remaining(), " byte(s) remain"));
    return n;
}

std::shared_ptr<ImageAllocator> readAllocator(serial::Reader& r) {
    switch (r.u8("image_allocator")) {
        case 0: return nullptr;
        case 1: return ImageAllocator::temporaryAllocator();
        case 2: return ImageAllocator::persistentAllocator();
        default: r.fail("image_allocator", "record kind is not 0, 1 or 2");
    }
}

struct Decoder {
    serial::Reader& r;
    const Device& device;
    std::vector<HandlePtr> handles;
    std::vector<ImageNodePtr> sourceImages;
    std::vector<StateNodePtr> sourceStates;  // filled when the loss node that owns each is decoded
    struct StateRecord {
        HandlePtr handle;
        bool exportFromGraph, synchronizeResource;
    };
    std::vector<StateRecord> sourceStateRecords;
    std::vector<FilterNodePtr> nodes;

    HandlePtr handle() {
        uint64_t i = r.u64("handle");
        if (i > handles.size()) r.fail("handle", "index past the handle table");
        return i ? handles[i - 1] : nullptr;
    }
    void imageNode(NNImageNode& image) {
        image.handle = handle();
        image.format = ImageFeatureChannelFormat(r.oneOf("image.format", {0, 3, 4}));
        image.imageAllocator = readAllocator(r);
        image.exportFromGraph = r.boolean("image.export_from_graph");
        image.synchronizeResource = r.boolean("image.synchronize_resource");
        image.stopGradient = r.boolean("image.stop_gradient");
    }
    void stateNode(NNStateNode& state) {
        state.handle = handle();
        state.exportFromGraph = r.boolean("state.export_from_graph");
        state.synchronizeResource = r.boolean("state.synchronize_resource");
    }
    ImageNodePtr imageRef() {
        uint8_t kind = r.u8("image_ref");
        uint64_t i = r.u64("image_ref.index");
        if (kind == kRefInput) {
            if (i >= sourceImages.size()) r.fail("image_ref", "index past the source images");
            return sourceImages[i];
        }
        if (kind != kRefNode) r.fail("image_ref", "kind is not 0 or 1");
        if (i >= nodes.size()) r.fail("image_ref", "refers to a node that is not decoded yet");
        return nodes[i]->resultImage();
    }
    // A state input; graph-input states (labels) are returned as null with their index in `input`.
    StateNodePtr stateRef(int64_t& input) {
        uint8_t kind = r.u8("state_ref");
        uint64_t i = r.u64("state_ref.index");
        input = -1;
        if (kind == kRefInput) {
            if (i >= sourceStateRecords.size()) r.fail("state_ref", "index past the source states");
            input = int64_t(i);
            return nullptr;
        }
        if (kind != kRefNode) r.fail("state_ref", "kind is not 0 or 1");
        if (i >= nodes.size()) r.fail("state_ref", "refers to a node that is not decoded yet");
        uint64_t k = r.u64("state_ref.state");
        std::vector<StateNodePtr> states = nodes[i]->resultStates();
        if (k >= states.size()) r.fail("state_ref.state", "past the producer's result states");
        return states[k];
    }
};

// Lets `adopt` replace the captured data sources and handles (same counts, no null data source).
void adoptObjects(const std::function<void(GraphObjects& captured)>& adopt, DecodeContext& ctx,
                  std::vector<HandlePtr>& handles) {
    GraphObjects objects{ctx.convolution, ctx.batchNormalization, ctx.instanceNormalization, ctx.groupNormalization,
                         handles};
    adopt(objects);
    if (objects.convolution.size() != ctx.convolution.size() ||
        objects.batchNormalization.size() != ctx.batchNormalization.size() ||
        objects.instanceNormalization.size() != ctx.instanceNormalization.size() ||
        objects.groupNormalization.size() != ctx.groupNormalization.size() || objects.handles.size() != handles.size())
        throwValueError("deserializeGraph: adopt may replace entries, not add or remove them");
    auto checkNotNull = [](const auto& table) {
        for (const auto& s : table) checkNodeNotNull(s.get(), "data source");
    };
    checkNotNull(objects.convolution);
    checkNotNull(objects.batchNormalization);
    checkNotNull(objects.instanceNormalization);
    checkNotNull(objects.groupNormalization);
    ctx.convolution = std::move(objects.convolution);
    ctx.batchNormalization = std::move(objects.batchNormalization);
    ctx.instanceNormalization = std::move(objects.instanceNormalization);
    ctx.groupNormalization = std::move(objects.groupNormalization);
    handles = std::move(objects.handles);
}

}  // namespace

// ---- public functions --------------------------------------------------------------------------------------
GraphObjects graphObjects(const NNGraph& graph) { return indexGraph(graph).objects; }

std::vector<uint8_t> serializeGraph(const NNGraph& graph) {
    GraphIndex index = indexGraph(graph);
    const Device& device = graph.device();
    serial::Writer w;
    w.string(graph.label);
    w.u32(uint32_t(graph.format));
    w.boolean(graph.outputStateIsTemporary);
    writeAllocator(w, graph.destinationImageAllocator, "destination_image_allocator");
    w.u64(index.objects.handles.size());
    for (const HandlePtr& handle : index.objects.handles) w.string(handle->label());
    w.u64(index.objects.convolution.size());
    for (size_t i = 0; i < index.objects.convolution.size(); ++i) w.object(captureConvolution(index, i, device));
    w.u64(index.objects.batchNormalization.size());
    for (const NNFilterNode* owner : index.batchNormalizationOwner)
        w.object(weightsBlob(*as<CNNBatchNormalizationNode>(*owner).kernel()));
    w.u64(index.objects.instanceNormalization.size());
    for (const NNFilterNode* owner : index.instanceNormalizationOwner)
        w.object(weightsBlob(*as<CNNInstanceNormalizationNode>(*owner).kernel()));
    w.u64(index.objects.groupNormalization.size());
    for (const NNFilterNode* owner : index.groupNormalizationOwner)
        w.object(weightsBlob(*as<CNNGroupNormalizationNode>(*owner).kernel()));
    w.u64(index.sourceImages.size());
    for (const ImageNodePtr& image : index.sourceImages) writeImageNode(w, index, *image, "source image");
    w.u64(index.sourceStates.size());
    for (const StateNodePtr& state : index.sourceStates) {
        if (!dynamic_cast<const NNLabelsNode*>(state.get()))
            throwValueError("graph: a source state of class ", state->className(),
                            " cannot be written (graph blobs hold labels nodes only)");
        writeStateNode(w, index, *state);
    }
    w.u64(graph.nodes().size());
    for (const FilterNodePtr& node : graph.nodes()) {
        auto coder = nodeCoders().find(node->className());
        if (coder == nodeCoders().end())
            throwValueError("graph: node ", node->className(), " '", node->label,
                            "' has no graph serialization in this build (docs/serialization.md \"Graphs\")");
        w.string(node->className());
        w.u64(node->sourceImages().size());
        for (const ImageNodePtr& image : node->sourceImages()) writeImageRef(w, index, image);
        w.u64(node->sourceStates().size());
        for (const StateNodePtr& state : node->sourceStates()) writeStateRef(w, index, state, *node);
        w.string(node->label);
        writePadding(w, node->paddingPolicy, *node);
        auto* gradient = dynamic_cast<const NNGradientFilterNode*>(node.get());
        auto forward = gradient ? gradient->forwardNode() : nullptr;
        bool forwardInGraph = forward && index.nodeIndex.count(forward.get());
        w.u64(forwardInGraph ? index.nodeIndex.at(forward.get()) + 1 : 0);
        writeImageNode(w, index, *node->resultImage(), node->className());
        std::vector<StateNodePtr> states = node->resultStates();
        w.u64(states.size());
        for (const StateNodePtr& state : states) writeStateNode(w, index, *state);
        coder->second.encode(w, index, *node, device);
    }
    const auto& results = graph.resultImages();
    w.u64(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
        w.u64(index.nodeIndex.at(results[i]->producer().get()));
        w.boolean(graph.resultsAreNeeded()[i]);
    }
    return w.finish(kGraphTag, kGraphVersion);
}

namespace {

FilterNodePtr decodeNode(Decoder& d, DecodeContext& ctx) {
    serial::Reader& r = d.r;
    std::string className = r.string("node.class");
    auto coder = nodeCoders().find(className);
    if (coder == nodeCoders().end()) r.fail("node.class", "'" + className + "' is not a node class a graph blob holds");
    uint64_t nSources = readCount(r, "node.sources", 9);
    ctx.sources.clear();
    for (uint64_t i = 0; i < nSources; ++i) ctx.sources.push_back(d.imageRef());
    uint64_t nStates = readCount(r, "node.states", 9);
    ctx.states.clear();
    std::vector<std::pair<size_t, int64_t>> inputStates;  // (position, source state index)
    for (uint64_t i = 0; i < nStates; ++i) {
        int64_t input;
        ctx.states.push_back(d.stateRef(input));
        if (input >= 0) inputStates.emplace_back(size_t(i), input);
    }
    std::string label = r.string("node.label");
    switch (r.u8("node.padding")) {
        case 0: ctx.padding = nullptr; break;
        case 1: {
            uint32_t method = r.u32("node.padding.method");
            ctx.padding = asSerializationError(r, "node.padding.method",
                                               [&] { return NNDefaultPadding::paddingWithMethod(method); });
            break;
        }
        default: r.fail("node.padding", "record kind is not 0 or 1");
    }
    uint64_t forward = r.u64("node.forward");
    if (forward > d.nodes.size()) r.fail("node.forward", "refers to a node that is not decoded yet");
    // The image and state records come before the class payload; read them into a scratch node.
    ctx.forward = forward ? d.nodes[forward - 1] : nullptr;
    NNImageNode resultRecord;
    d.imageNode(resultRecord);
    uint64_t nResultStates = readCount(r, "node.result_states", 10);
    std::vector<Decoder::StateRecord> resultStateRecords;
    for (uint64_t i = 0; i < nResultStates; ++i) {
        HandlePtr handle = d.handle();
        bool exported = r.boolean("state.export_from_graph"), sync = r.boolean("state.synchronize_resource");
        resultStateRecords.push_back({handle, exported, sync});
    }
    FilterNodePtr node = asSerializationError(r, className.c_str(), [&] { return coder->second.decode(r, ctx); });
    if (node->className() != className) r.fail("node.class", "the payload describes a " + std::string(node->className()));
    if (node->sourceImages().size() != ctx.sources.size() || node->sourceStates().size() != ctx.states.size())
        r.fail("node.sources", className + ": the number of inputs does not match the class");
    // Graph-input states are the labels nodes a loss node creates itself: adopt them.
    for (auto [position, input] : inputStates) {
        if (d.sourceStates[size_t(input)]) r.fail("state_ref", "a labels node feeds one loss node only");
        StateNodePtr state = node->sourceStates()[position];
        const auto& record = d.sourceStateRecords[size_t(input)];
        state->handle = record.handle;
        state->exportFromGraph = record.exportFromGraph;
        state->synchronizeResource = record.synchronizeResource;
        d.sourceStates[size_t(input)] = state;
    }
    for (size_t i = 0; i < ctx.states.size(); ++i)
        if (ctx.states[i] && node->sourceStates()[i].get() != ctx.states[i].get())
            r.fail("node.states", className + ": the state inputs do not match the class");
    node->label = label;
    node->paddingPolicy = ctx.padding;
    if (forward) {
        auto* gradient = dynamic_cast<NNGradientFilterNode*>(node.get());
        if (!gradient) r.fail("node.forward", className + " is not a gradient node");
        gradient->setForwardNode(d.nodes[forward - 1]);
    }
    ImageNodePtr result = node->resultImage();
    result->handle = resultRecord.handle;
    result->format = resultRecord.format;
    result->imageAllocator = resultRecord.imageAllocator;
    result->exportFromGraph = resultRecord.exportFromGraph;
    result->synchronizeResource = resultRecord.synchronizeResource;
    result->stopGradient = resultRecord.stopGradient;
    std::vector<StateNodePtr> states = node->resultStates();
    if (states.size() != resultStateRecords.size()) r.fail("node.result_states", className + ": count does not match");
    for (size_t i = 0; i < states.size(); ++i) {
        states[i]->handle = resultStateRecords[i].handle;
        states[i]->exportFromGraph = resultStateRecords[i].exportFromGraph;
        states[i]->synchronizeResource = resultStateRecords[i].synchronizeResource;
    }
    return node;
}

}  // namespace

std::shared_ptr<NNGraph> deserializeGraph(const uint8_t* data, size_t size, const Device& device,
                                          const std::function<void(GraphObjects& captured)>& adopt) {
    const uint32_t version = serial::open(data, size).classVersion;
    serial::Reader r = serial::openAs(data, size, kGraphTag, kGraphVersion);
    Decoder d{r, device, {}, {}, {}, {}, {}};
    std::string label = r.string("label");
    auto format = ImageFeatureChannelFormat(r.oneOf("format", {3, 4}));
    bool outputStateIsTemporary = r.boolean("output_state_is_temporary");
    std::shared_ptr<ImageAllocator> allocator = readAllocator(r);
    uint64_t nHandles = readCount(r, "handles", 8);
    for (uint64_t i = 0; i < nHandles; ++i) d.handles.push_back(std::make_shared<LabelHandle>(r.string("handle")));
    DecodeContext ctx{device, {}, {}, nullptr, nullptr, {}, {}, {}, {}};
    uint64_t nConv = readCount(r, "convolution_data_sources", 8);
    for (uint64_t i = 0; i < nConv; ++i) ctx.convolution.push_back(decodeCapturedConvolution(r, device));
    uint64_t nBN = readCount(r, "batch_normalization_data_sources", 8);
    for (uint64_t i = 0; i < nBN; ++i) ctx.batchNormalization.push_back(decodeCapturedBatchNormalization(r, device));
    if (version >= 2) {
        uint64_t nIN = readCount(r, "instance_normalization_data_sources", 8);
        for (uint64_t i = 0; i < nIN; ++i)
            ctx.instanceNormalization.push_back(decodeCapturedInstanceNormalization(r, device));
        uint64_t nGN = readCount(r, "group_normalization_data_sources", 8);
        for (uint64_t i = 0; i < nGN; ++i) ctx.groupNormalization.push_back(decodeCapturedGroupNormalization(r, device));
    }
    if (adopt) adoptObjects(adopt, ctx, d.handles);
    uint64_t nImages = readCount(r, "source_images", 16);
    for (uint64_t i = 0; i < nImages; ++i) {
        auto image = std::make_shared<NNImageNode>();
        d.imageNode(*image);
        d.sourceImages.push_back(image);
    }
    uint64_t nStates = readCount(r, "source_states", 10);
    for (uint64_t i = 0; i < nStates; ++i) {
        HandlePtr handle = d.handle();
        bool exported = r.boolean("state.export_from_graph"), sync = r.boolean("state.synchronize_resource");
        d.sourceStateRecords.push_back({handle, exported, sync});
    }
    d.sourceStates.resize(d.sourceStateRecords.size());
    uint64_t nNodes = readCount(r, "nodes", 40);
    for (uint64_t i = 0; i < nNodes; ++i) d.nodes.push_back(decodeNode(d, ctx));
    for (const StateNodePtr& state : d.sourceStates)
        if (!state) r.fail("source_states", "a source state is read by no node");
    uint64_t nResults = readCount(r, "results", 9);
    if (nResults == 0) r.fail("results", "a graph has at least one result");
    std::vector<ImageNodePtr> results;
    std::vector<bool> needed;
    for (uint64_t i = 0; i < nResults; ++i) {
        uint64_t node = r.u64("results.node");
        if (node >= d.nodes.size()) r.fail("results.node", "index past the nodes");
        results.push_back(d.nodes[node]->resultImage());
        needed.push_back(r.boolean("results.needed"));
    }
    r.expectEnd();
    std::shared_ptr<NNGraph> graph;
    try {
        graph = nResults == 1 ? std::make_shared<NNGraph>(device, results[0], bool(needed[0]))
                              : std::make_shared<NNGraph>(device, results, needed);
    } catch (const ValueError& e) {
        // Most often a training graph decoded without data sources that can update.
        throwValueError("data: the decoded nodes do not make a graph: ", e.what(),
                        " (to keep training a decoded training graph, pass data sources that can update: "
                        "data_sources=, or use pickle)");
    } catch (const TypeError& e) {
        r.fail("graph", e.what());
    }
    graph->label = label;
    graph->format = format;
    graph->outputStateIsTemporary = outputStateIsTemporary;
    graph->destinationImageAllocator = allocator;
    return graph;
}

}  // namespace mpsgrad
