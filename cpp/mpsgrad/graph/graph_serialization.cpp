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

#include "core/serialization.h"
#include "graph/filter_nodes.h"
#include "graph/filter_nodes_concatenation.h"
#include "kernels/serialization_support.h"

namespace mpsgrad {
namespace {

using serial_support::asSerializationError;

constexpr const char* kGraphTag = "NNGraph";
constexpr uint8_t kRefInput = 0, kRefNode = 1;

// ---- the walk shared by encoding and graphObjects() ------------------------------------------------
struct GraphIndex {
    std::vector<ImageNodePtr> sourceImages;
    std::vector<StateNodePtr> sourceStates;
    std::unordered_map<const NNImageNode*, size_t> sourceImageIndex;
    std::unordered_map<const NNStateNode*, size_t> sourceStateIndex;
    std::unordered_map<const NNFilterNode*, size_t> nodeIndex;
    GraphObjects objects;
    std::unordered_map<const void*, size_t> objectIndex;  // data source / handle -> index in its table
    // Which node's kernel holds the weights of each captured data source (null: none).
    std::vector<const NNFilterNode*> convolutionOwner, batchNormalizationOwner;

    void addHandle(const HandlePtr& handle) {
        if (handle && objectIndex.emplace(handle.get(), objects.handles.size()).second)
            objects.handles.push_back(handle);
    }
    void addConvolution(const std::shared_ptr<CNNConvolutionDataSource>& source, const NNFilterNode* owner) {
        if (!source) return;
        if (objectIndex.emplace(source.get(), objects.convolution.size()).second) {
            objects.convolution.push_back(source);
            convolutionOwner.push_back(owner);
        } else if (owner && !convolutionOwner[objectIndex[source.get()]]) {
            convolutionOwner[objectIndex[source.get()]] = owner;
        }
    }
};

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
        index.addConvolution(explicitWeights(*node), nullptr);
        if (auto* bn = dynamic_cast<const CNNBatchNormalizationNode*>(node.get())) {
            if (index.objectIndex.emplace(bn->dataSource().get(), index.objects.batchNormalization.size()).second) {
                index.objects.batchNormalization.push_back(bn->dataSource());
                index.batchNormalizationOwner.push_back(bn);
            }
        }
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

// ---- per-class payloads -----------------------------------------------------------------------------------
struct DecodeContext {
    const Device& device;
    std::vector<ImageNodePtr> sources;
    std::vector<StateNodePtr> states;
    std::shared_ptr<NNPadding> padding;
    std::vector<std::shared_ptr<CNNConvolutionDataSource>> convolution;
    std::vector<std::shared_ptr<CNNBatchNormalizationDataSource>> batchNormalization;

    const ImageNodePtr& source(size_t i, serial::Reader& r) const {
        if (i >= sources.size()) r.fail("node.sources", "too few image inputs for the node's class");
        return sources[i];
    }
    const StateNodePtr& state(size_t i, serial::Reader& r) const {
        if (i >= states.size()) r.fail("node.states", "too few state inputs for the node's class");
        return states[i];
    }
};

struct NodeCoder {
    std::function<void(serial::Writer&, const GraphIndex&, const NNFilterNode&, const Device&)> encode;
    std::function<FilterNodePtr(serial::Reader&, DecodeContext&)> decode;
};

template <class T>
const T& as(const NNFilterNode& node) {
    return dynamic_cast<const T&>(node);
}

uint32_t readTrainingStyle(serial::Reader& r) { return r.oneOf("node.training_style", {0, 1, 2}); }

std::shared_ptr<CNNConvolutionDataSource> convolutionSource(serial::Reader& r, DecodeContext& ctx) {
    uint64_t i = r.u64("node.data_source");
    if (i >= ctx.convolution.size()) r.fail("node.data_source", "index past the convolution data source table");
    return ctx.convolution[i];
}

// Optional data source index: 0 none, else index + 1.
std::shared_ptr<CNNConvolutionDataSource> optionalConvolutionSource(serial::Reader& r, DecodeContext& ctx) {
    uint64_t i = r.u64("node.weights");
    if (i == 0) return nullptr;
    if (i > ctx.convolution.size()) r.fail("node.weights", "index past the convolution data source table");
    return ctx.convolution[i - 1];
}

void writeNeuronDescriptor(serial::Writer& w, const NNNeuronDescriptor& d) { w.object(d.serialize()); }
NNNeuronDescriptor readNeuron(serial::Reader& r) { return serial_support::readNeuronDescriptor(r, "node.descriptor"); }

// The per-type neuron node names (their Python classes pass these literals to CNNNeuronNode).
const char* neuronNodeName(const std::string& name) {
    static const char* const names[] = {
        "CNNNeuronNode", "CNNNeuronAbsoluteNode", "CNNNeuronELUNode", "CNNNeuronReLUNNode", "CNNNeuronLinearNode",
        "CNNNeuronReLUNode", "CNNNeuronSigmoidNode", "CNNNeuronHardSigmoidNode", "CNNNeuronSoftPlusNode",
        "CNNNeuronSoftSignNode", "CNNNeuronTanHNode", "CNNNeuronPowerNode", "CNNNeuronExponentialNode",
        "CNNNeuronLogarithmNode", "CNNNeuronGeLUNode"};
    for (const char* n : names)
        if (name == n) return n;
    return nullptr;
}

void writePooling(serial::Writer& w, PoolingKind kind, int64_t kw, int64_t kh, int64_t sx, int64_t sy, int64_t dx,
                  int64_t dy) {
    w.u32(uint32_t(kind));
    for (int64_t v : {kw, kh, sx, sy, dx, dy}) w.i64(v);
}

struct PoolingArgs {
    PoolingKind kind;
    int64_t v[6];
};
PoolingArgs readPooling(serial::Reader& r) {
    PoolingArgs a{PoolingKind(r.oneOf("node.kind", {0, 1, 2, 3})), {}};
    for (int64_t& v : a.v) v = r.i64InRange("node.pooling_geometry", 1, int64_t(1) << 31);
    return a;
}

FilterNodePtr makePoolingGradient(const PoolingArgs& a, DecodeContext& ctx, serial::Reader& r) {
    const auto &g = ctx.source(0, r), &x = ctx.source(1, r);
    const auto& s = ctx.state(0, r);
    const int64_t* v = a.v;
    switch (a.kind) {
        case PoolingKind::Max:
            return std::make_shared<CNNPoolingMaxGradientNode>(g, x, s, v[0], v[1], v[2], v[3], ctx.padding);
        case PoolingKind::Average:
            return std::make_shared<CNNPoolingAverageGradientNode>(g, x, s, v[0], v[1], v[2], v[3], ctx.padding);
        case PoolingKind::L2Norm:
            return std::make_shared<CNNPoolingL2NormGradientNode>(g, x, s, v[0], v[1], v[2], v[3], ctx.padding);
        case PoolingKind::DilatedMax:
            return std::make_shared<CNNDilatedPoolingMaxGradientNode>(g, x, s, v[0], v[1], v[2], v[3], v[4], v[5],
                                                                      ctx.padding);
    }
    r.fail("node.kind", "unknown pooling kind");
}

void writeArithmetic(serial::Writer& w, const NNBinaryArithmeticNode& n) {
    w.i32(n.opCode());
    for (float v : {n.primaryScale, n.secondaryScale, n.bias}) w.f32(v);
    w.i64(n.primaryStrideInFeatureChannels);
    w.i64(n.secondaryStrideInFeatureChannels);
    w.f32(n.minimumValue);
    w.f32(n.maximumValue);
}

FilterNodePtr readArithmetic(serial::Reader& r, DecodeContext& ctx) {
    int32_t op = int32_t(r.oneOf("node.op", {0, 1, 2, 3}));
    auto node = std::make_shared<NNBinaryArithmeticNode>(ctx.sources, op);
    node->primaryScale = r.f32("node.primary_scale");
    node->secondaryScale = r.f32("node.secondary_scale");
    node->bias = r.f32("node.bias");
    node->primaryStrideInFeatureChannels = r.i64InRange("node.primary_stride_in_feature_channels", 0, INT32_MAX);
    node->secondaryStrideInFeatureChannels = r.i64InRange("node.secondary_stride_in_feature_channels", 0, INT32_MAX);
    node->minimumValue = r.f32("node.minimum_value");
    node->maximumValue = r.f32("node.maximum_value");
    return node;
}

// The nested kernel blob of a loss node's descriptor (the kernels' coder validates it on decode).
template <class LossKernel, class Node>
FilterNodePtr readLoss(serial::Reader& r, DecodeContext& ctx) {
    auto [data, size] = r.object("node.loss_descriptor");
    auto kernel = Kernel::deserializeAs<LossKernel>(std::vector<uint8_t>(data, data + size), ctx.device);
    return std::make_shared<Node>(ctx.source(0, r), kernel->descriptor());
}

// Every node class a graph blob can hold, by className().
const std::map<std::string, NodeCoder>& nodeCoders() {
    static const std::map<std::string, NodeCoder> coders = [] {
        std::map<std::string, NodeCoder> c;
        auto none = [](serial::Writer&, const GraphIndex&, const NNFilterNode&, const Device&) {};
        // convolution and fully connected
        auto convEncode = [](serial::Writer& w, const GraphIndex& index, const NNFilterNode& node, const Device&) {
            const auto& n = as<CNNConvolutionNode>(node);
            w.u64(index.objectIndex.at(n.dataSource().get()));
            w.u32(uint32_t(n.trainingStyle));
            w.u32(uint32_t(n.accumulatorPrecision));
        };
        auto convDecode = [](bool fc) {
            return [fc](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                auto source = convolutionSource(r, ctx);
                std::shared_ptr<CNNConvolutionNode> node =
                    fc ? std::make_shared<CNNFullyConnectedNode>(ctx.source(0, r), source)
                       : std::make_shared<CNNConvolutionNode>(ctx.source(0, r), source);
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                node->accumulatorPrecision =
                    NNConvolutionAccumulatorPrecisionOption(r.oneOf("node.accumulator_precision", {0, 1}));
                return node;
            };
        };
        c["CNNConvolutionNode"] = {convEncode, convDecode(false)};
        c["CNNFullyConnectedNode"] = {convEncode, convDecode(true)};
        auto convGradEncode = [](serial::Writer& w, const GraphIndex& index, const NNFilterNode& node, const Device&) {
            const auto& n = as<CNNConvolutionGradientNode>(node);
            auto weights = n.explicitWeights();
            w.u64(weights ? index.objectIndex.at(weights.get()) + 1 : 0);
            w.u32(uint32_t(n.trainingStyle));
        };
        auto convGradDecode = [](bool fc) {
            return [fc](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                auto weights = optionalConvolutionSource(r, ctx);
                const auto &g = ctx.source(0, r), &x = ctx.source(1, r);
                std::shared_ptr<CNNConvolutionGradientNode> node =
                    fc ? std::make_shared<CNNFullyConnectedGradientNode>(g, x, ctx.state(0, r), weights)
                       : std::make_shared<CNNConvolutionGradientNode>(g, x, ctx.state(0, r), weights);
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                return node;
            };
        };
        c["CNNConvolutionGradientNode"] = {convGradEncode, convGradDecode(false)};
        c["CNNFullyConnectedGradientNode"] = {convGradEncode, convGradDecode(true)};
        // batch normalization
        c["CNNBatchNormalizationNode"] = {
            [](serial::Writer& w, const GraphIndex& index, const NNFilterNode& node, const Device&) {
                const auto& n = as<CNNBatchNormalizationNode>(node);
                w.u64(index.objectIndex.at(n.dataSource().get()));
                w.u32(uint32_t(n.flags));
                w.u32(uint32_t(n.trainingStyle));
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                uint64_t i = r.u64("node.data_source");
                if (i >= ctx.batchNormalization.size())
                    r.fail("node.data_source", "index past the batch normalization data source table");
                auto node = std::make_shared<CNNBatchNormalizationNode>(ctx.source(0, r), ctx.batchNormalization[i]);
                node->flags = CNNBatchNormalizationFlags(r.oneOf("node.flags", {0, 1, 2}));
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                return node;
            }};
        c["CNNBatchNormalizationGradientNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                w.u32(uint32_t(as<CNNBatchNormalizationGradientNode>(node).trainingStyle));
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                auto node = std::make_shared<CNNBatchNormalizationGradientNode>(ctx.source(0, r), ctx.source(1, r),
                                                                                ctx.state(0, r));
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                return node;
            }};
        // neurons
        auto neuronEncode = [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            writeNeuronDescriptor(w, as<CNNNeuronNode>(node).descriptor());
        };
        for (const char* name :
             {"CNNNeuronNode", "CNNNeuronAbsoluteNode", "CNNNeuronELUNode", "CNNNeuronReLUNNode", "CNNNeuronLinearNode",
              "CNNNeuronReLUNode", "CNNNeuronSigmoidNode", "CNNNeuronHardSigmoidNode", "CNNNeuronSoftPlusNode",
              "CNNNeuronSoftSignNode", "CNNNeuronTanHNode", "CNNNeuronPowerNode", "CNNNeuronExponentialNode",
              "CNNNeuronLogarithmNode", "CNNNeuronGeLUNode"}) {
            c[name] = {neuronEncode, [name](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                           return std::make_shared<CNNNeuronNode>(ctx.source(0, r), readNeuron(r), neuronNodeName(name));
                       }};
        }
        c["CNNNeuronPReLUNode"] = {neuronEncode, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                       NNNeuronDescriptor d = readNeuron(r);
                                       if (d.neuronType != CNNNeuronType::PReLU || d.data.empty())
                                           r.fail("node.descriptor", "a PReLU node needs a PReLU descriptor with data");
                                       return std::make_shared<CNNNeuronPReLUNode>(ctx.source(0, r), d.data);
                                   }};
        c["CNNNeuronGradientNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                writeNeuronDescriptor(w, as<CNNNeuronGradientNode>(node).descriptor());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                NNNeuronDescriptor d = readNeuron(r);
                return std::make_shared<CNNNeuronGradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), d);
            }};
        // pooling
        for (const char* name : {"CNNPoolingMaxNode", "CNNPoolingAverageNode", "CNNPoolingL2NormNode",
                                 "CNNDilatedPoolingMaxNode"}) {
            c[name] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                           const auto& n = as<CNNPoolingNode>(node);
                           writePooling(w, n.kind(), n.kernelWidth(), n.kernelHeight(), n.strideInPixelsX(),
                                        n.strideInPixelsY(), n.dilationRateX(), n.dilationRateY());
                       },
                       [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                           PoolingArgs a = readPooling(r);
                           return std::make_shared<CNNPoolingNode>(ctx.source(0, r), a.kind, a.v[0], a.v[1], a.v[2],
                                                                   a.v[3], a.v[4], a.v[5]);
                       }};
        }
        for (const char* name : {"CNNPoolingMaxGradientNode", "CNNPoolingAverageGradientNode",
                                 "CNNPoolingL2NormGradientNode", "CNNDilatedPoolingMaxGradientNode"}) {
            c[name] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                           const auto& n = as<CNNPoolingGradientNode>(node);
                           writePooling(w, n.kind(), n.kernelWidth(), n.kernelHeight(), n.strideInPixelsX(),
                                        n.strideInPixelsY(), n.dilationRateX(), n.dilationRateY());
                       },
                       [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                           return makePoolingGradient(readPooling(r), ctx, r);
                       }};
        }
        // softmax
        c["CNNSoftMaxNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                   return std::make_shared<CNNSoftMaxNode>(ctx.source(0, r), false);
                               }};
        c["CNNLogSoftMaxNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                      return std::make_shared<CNNLogSoftMaxNode>(ctx.source(0, r));
                                  }};
        c["CNNSoftMaxGradientNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                           return std::make_shared<CNNSoftMaxGradientNode>(
                                               ctx.source(0, r), ctx.source(1, r), ctx.state(0, r));
                                       }};
        c["CNNLogSoftMaxGradientNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                              return std::make_shared<CNNLogSoftMaxGradientNode>(
                                                  ctx.source(0, r), ctx.source(1, r), ctx.state(0, r));
                                          }};
        // upsampling
        for (const char* name : {"CNNUpsamplingNearestNode", "CNNUpsamplingBilinearNode"}) {
            c[name] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                           const auto& n = as<CNNUpsamplingNode>(node);
                           w.boolean(n.isBilinear());
                           w.i64(n.scaleFactorX());
                           w.i64(n.scaleFactorY());
                           w.boolean(n.alignCorners());
                       },
                       [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                           bool bilinear = r.boolean("node.bilinear");
                           int64_t sx = r.i64("node.scale_factor_x"), sy = r.i64("node.scale_factor_y");
                           bool align = r.boolean("node.align_corners");
                           return std::make_shared<CNNUpsamplingNode>(ctx.source(0, r), bilinear, sx, sy, align);
                       }};
        }
        auto upGradEncode = [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            const auto& n = as<CNNUpsamplingGradientNode>(node);
            w.i64(n.scaleFactorX());
            w.i64(n.scaleFactorY());
        };
        c["CNNUpsamplingNearestGradientNode"] = {upGradEncode, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                                     int64_t sx = r.i64("node.scale_factor_x");
                                                     int64_t sy = r.i64("node.scale_factor_y");
                                                     return std::make_shared<CNNUpsamplingNearestGradientNode>(
                                                         ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), sx, sy);
                                                 }};
        c["CNNUpsamplingBilinearGradientNode"] = {upGradEncode, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                                      int64_t sx = r.i64("node.scale_factor_x");
                                                      int64_t sy = r.i64("node.scale_factor_y");
                                                      return std::make_shared<CNNUpsamplingBilinearGradientNode>(
                                                          ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), sx, sy);
                                                  }};
        // dropout
        auto writeDropout = [](serial::Writer& w, float keep, uint64_t seed, Size3 stride) {
            w.f32(keep);
            w.u64(seed);
            for (uint64_t v : {stride.width, stride.height, stride.depth}) w.u64(v);
        };
        c["CNNDropoutNode"] = {[writeDropout](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                                   const auto& n = as<CNNDropoutNode>(node);
                                   writeDropout(w, n.keepProbability(), n.seed(), n.maskStrideInPixels());
                               },
                               [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                   float keep = r.f32("node.keep_probability");
                                   uint64_t seed = r.u64("node.seed");
                                   Size3 s{r.u64("node.mask_stride"), r.u64("node.mask_stride"), r.u64("node.mask_stride")};
                                   return std::make_shared<CNNDropoutNode>(ctx.source(0, r), keep, seed, s);
                               }};
        c["CNNDropoutGradientNode"] = {
            [writeDropout](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                const auto& n = as<CNNDropoutGradientNode>(node);
                writeDropout(w, n.keepProbability(), n.seed(), n.maskStrideInPixels());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                float keep = r.f32("node.keep_probability");
                uint64_t seed = r.u64("node.seed");
                Size3 s{r.u64("node.mask_stride"), r.u64("node.mask_stride"), r.u64("node.mask_stride")};
                return std::make_shared<CNNDropoutGradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r),
                                                                keep, seed, s);
            }};
        // reshape and pad
        c["NNReshapeNode"] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                                  const auto& n = as<NNReshapeNode>(node);
                                  for (int64_t v : {n.resultWidth(), n.resultHeight(), n.resultFeatureChannels()}) w.i64(v);
                              },
                              [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                  int64_t width = r.i64("node.result_width"), height = r.i64("node.result_height");
                                  int64_t channels = r.i64("node.result_feature_channels");
                                  return std::make_shared<NNReshapeNode>(ctx.source(0, r), width, height, channels);
                              }};
        c["NNReshapeGradientNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                          return std::make_shared<NNReshapeGradientNode>(ctx.source(0, r),
                                                                                         ctx.source(1, r), ctx.state(0, r));
                                      }};
        c["NNPadNode"] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                              const auto& n = as<NNPadNode>(node);
                              for (const ImageCoordinate& p : {n.paddingSizeBefore(), n.paddingSizeAfter()})
                                  for (uint64_t v : {p.x, p.y, p.channel}) w.u64(v);
                              w.u32(uint32_t(n.edgeMode()));
                              w.f32(n.fillValue);
                          },
                          [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                              ImageCoordinate p[2];
                              for (auto& q : p) q = {r.u64("node.padding_size"), r.u64("node.padding_size"),
                                                     r.u64("node.padding_size")};
                              auto edge = ImageEdgeMode(r.oneOf("node.edge_mode", {0, 1, 2, 3, 4}));
                              auto node = std::make_shared<NNPadNode>(ctx.source(0, r), p[0], p[1], edge);
                              node->fillValue = r.f32("node.fill_value");
                              return node;
                          }};
        c["NNPadGradientNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                      return std::make_shared<NNPadGradientNode>(ctx.source(0, r), ctx.source(1, r),
                                                                                 ctx.state(0, r));
                                  }};
        // arithmetic (the builder's gradient sums are addition nodes)
        for (const char* name : {"NNAdditionNode", "NNSubtractionNode", "NNMultiplicationNode", "NNDivisionNode"}) {
            c[name] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                           writeArithmetic(w, as<NNBinaryArithmeticNode>(node));
                       },
                       readArithmetic};
        }
        for (const char* name : {"NNAdditionGradientNode", "NNSubtractionGradientNode", "NNMultiplicationGradientNode",
                                 "NNDivisionGradientNode"}) {
            c[name] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                           const auto& n = as<NNArithmeticGradientNode>(node);
                           w.i32(n.opCode());
                           w.boolean(n.isSecondarySourceFilter());
                       },
                       [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                           int32_t op = int32_t(r.oneOf("node.op", {0, 1, 2, 3}));
                           bool secondary = r.boolean("node.is_secondary_source_filter");
                           return NNArithmeticGradientNode::make(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), op,
                                                                 secondary);
                       }};
        }
        // losses: the descriptor travels as the loss kernel's blob
        c["CNNLossNode"] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device& device) {
                                w.object(CNNLoss(device, as<CNNLossNode>(node).descriptor()).serialize());
                            },
                            readLoss<CNNLoss, CNNLossNode>};
        c["CNNYOLOLossNode"] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device& device) {
                                    w.object(CNNYOLOLoss(device, as<CNNYOLOLossNode>(node).descriptor()).serialize());
                                },
                                readLoss<CNNYOLOLoss, CNNYOLOLossNode>};
        c["NNInitialGradientNode"] = {none, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                          return std::make_shared<NNInitialGradientNode>(ctx.source(0, r));
                                      }};
        // concatenation
        c["NNConcatenationNode"] = {none, [](serial::Reader&, DecodeContext& ctx) -> FilterNodePtr {
                                        return std::make_shared<NNConcatenationNode>(ctx.sources);
                                    }};
        c["NNConcatenationGradientNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                w.u64(as<NNConcatenationGradientNode>(node).sourceIndex());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                uint64_t i = r.u64("node.source_index");
                return std::make_shared<NNConcatenationGradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r),
                                                                     size_t(i));
            }};
        return c;
    }();
    return coders;
}

// ---- captured data sources ---------------------------------------------------------------------------------
// A node's kernel blob without the graph's per-encode policies (the graph sets its own allocator and
// the node's padding on the kernel; neither belongs to the weights).
std::vector<uint8_t> weightsBlob(CNNKernel& kernel) {
    auto padding = std::move(kernel.padding);
    auto allocator = std::move(kernel.destinationImageAllocator);
    kernel.padding = nullptr;
    kernel.destinationImageAllocator = nullptr;
    std::vector<uint8_t> blob;
    try {
        blob = kernel.serialize();
    } catch (...) {
        kernel.padding = std::move(padding);
        kernel.destinationImageAllocator = std::move(allocator);
        throw;
    }
    kernel.padding = std::move(padding);
    kernel.destinationImageAllocator = std::move(allocator);
    return blob;
}

// The weights the owner node's kernel computes with (the kernels' coder), or the data source's own.
std::vector<uint8_t> captureConvolution(const GraphIndex& index, size_t i, const Device& device) {
    if (auto* owner = dynamic_cast<const CNNConvolutionNode*>(index.convolutionOwner[i]))
        if (owner->kernel()) return weightsBlob(*owner->kernel());
    return CNNConvolution(device, index.objects.convolution[i]).serialize();
}

std::shared_ptr<CNNConvolutionDataSource> decodeCapturedConvolution(serial::Reader& r, const Device& device) {
    auto [data, size] = r.object("convolution_data_source");
    std::shared_ptr<Kernel> kernel = Kernel::deserialize(data, size, device);
    if (auto* conv = dynamic_cast<CNNConvolution*>(kernel.get())) return conv->dataSource();
    r.fail("convolution_data_source", "expected a serialized CNNConvolution");
}

std::shared_ptr<CNNBatchNormalizationDataSource> decodeCapturedBatchNormalization(serial::Reader& r,
                                                                                  const Device& device) {
    auto [data, size] = r.object("batch_normalization_data_source");
    return Kernel::deserializeAs<CNNBatchNormalization>(std::vector<uint8_t>(data, data + size), device)->dataSource();
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
    return w.finish(kGraphTag, 1);
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
    serial::Reader r = serial::openAs(data, size, kGraphTag, 1);
    Decoder d{r, device, {}, {}, {}, {}, {}};
    std::string label = r.string("label");
    auto format = ImageFeatureChannelFormat(r.oneOf("format", {3, 4}));
    bool outputStateIsTemporary = r.boolean("output_state_is_temporary");
    std::shared_ptr<ImageAllocator> allocator = readAllocator(r);
    uint64_t nHandles = readCount(r, "handles", 8);
    for (uint64_t i = 0; i < nHandles; ++i) d.handles.push_back(std::make_shared<LabelHandle>(r.string("handle")));
    DecodeContext ctx{device, {}, {}, nullptr, {}, {}};
    uint64_t nConv = readCount(r, "convolution_data_sources", 8);
    for (uint64_t i = 0; i < nConv; ++i) ctx.convolution.push_back(decodeCapturedConvolution(r, device));
    uint64_t nBN = readCount(r, "batch_normalization_data_sources", 8);
    for (uint64_t i = 0; i < nBN; ++i) ctx.batchNormalization.push_back(decodeCapturedBatchNormalization(r, device));
    if (adopt) {
        GraphObjects objects{ctx.convolution, ctx.batchNormalization, d.handles};
        adopt(objects);
        if (objects.convolution.size() != ctx.convolution.size() ||
            objects.batchNormalization.size() != ctx.batchNormalization.size() ||
            objects.handles.size() != d.handles.size())
            throwValueError("deserializeGraph: adopt may replace entries, not add or remove them");
        for (const auto& s : objects.convolution) checkNodeNotNull(s.get(), "data source");
        for (const auto& s : objects.batchNormalization) checkNodeNotNull(s.get(), "data source");
        ctx.convolution = std::move(objects.convolution);
        ctx.batchNormalization = std::move(objects.batchNormalization);
        d.handles = std::move(objects.handles);
    }
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
