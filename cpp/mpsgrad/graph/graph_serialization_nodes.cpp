// The per-class payloads of graph serialization (graph_serialization_coders.h; the format is in
// docs/serialization.md "Graphs"): convolution and fully connected, batch normalization, neurons,
// pooling, softmax, upsampling, dropout, reshape and pad, arithmetic, losses (the loss node and the
// split forward / gradient loss nodes), concatenation, transposed convolution.
//
// A split loss node's propertyCallBack is an application object with no coder: the blob holds the
// descriptor only and a decoded node has no callback (the caller re-attaches one).
#include <map>

#include "graph/filter_nodes.h"
#include "graph/filter_nodes_concatenation.h"
#include "graph/filter_nodes_loss.h"
#include "graph/filter_nodes_transpose.h"
#include "graph/graph_serialization_coders.h"
#include "kernels/serialization_support.h"

namespace mpsgrad::graph_serial {

uint32_t readTrainingStyle(serial::Reader& r) { return r.oneOf("node.training_style", {0, 1, 2}); }

std::shared_ptr<CNNConvolutionDataSource> convolutionSource(serial::Reader& r, DecodeContext& ctx) {
    uint64_t i = r.u64("node.data_source");
    if (i >= ctx.convolution.size()) r.fail("node.data_source", "index past the convolution data source table");
    return ctx.convolution[i];
}

namespace {

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

void writeDropout(serial::Writer& w, float keep, uint64_t seed, Size3 stride) {
    w.f32(keep);
    w.u64(seed);
    for (uint64_t v : {stride.width, stride.height, stride.depth}) w.u64(v);
}

struct DropoutArgs {
    float keep;
    uint64_t seed;
    Size3 stride;
};
DropoutArgs readDropout(serial::Reader& r) {
    DropoutArgs a{r.f32("node.keep_probability"), r.u64("node.seed"), {}};
    a.stride.width = r.u64("node.mask_stride");
    a.stride.height = r.u64("node.mask_stride");
    a.stride.depth = r.u64("node.mask_stride");
    return a;
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

// The descriptor of a nested CNNLoss blob (the kernels' coder validates it on decode).
CNNLossDescriptor readLossDescriptor(serial::Reader& r, DecodeContext& ctx) {
    auto [data, size] = r.object("node.loss_descriptor");
    return Kernel::deserializeAs<CNNLoss>(std::vector<uint8_t>(data, data + size), ctx.device)->descriptor();
}

// The nested kernel blob of a loss node's descriptor (the kernels' coder validates it on decode).
template <class LossKernel, class Node>
FilterNodePtr readLoss(serial::Reader& r, DecodeContext& ctx) {
    auto [data, size] = r.object("node.loss_descriptor");
    auto kernel = Kernel::deserializeAs<LossKernel>(std::vector<uint8_t>(data, data + size), ctx.device);
    return std::make_shared<Node>(ctx.source(0, r), kernel->descriptor());
}

// Every node class a graph blob can hold, by className().
}  // namespace

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
        // transposed convolution: like convolution; the optional state input is the upstream convolution's
        c["CNNConvolutionTransposeNode"] = {
            [](serial::Writer& w, const GraphIndex& index, const NNFilterNode& node, const Device&) {
                const auto& n = as<CNNConvolutionTransposeNode>(node);
                w.u64(index.objectIndex.at(n.dataSource().get()));
                w.u32(uint32_t(n.trainingStyle));
                w.u32(uint32_t(n.accumulatorPrecision));
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                auto source = convolutionSource(r, ctx);
                StateNodePtr state = ctx.states.empty() ? nullptr : ctx.state(0, r);
                auto node = std::make_shared<CNNConvolutionTransposeNode>(ctx.source(0, r), state, source);
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                node->accumulatorPrecision =
                    NNConvolutionAccumulatorPrecisionOption(r.oneOf("node.accumulator_precision", {0, 1}));
                return node;
            }};
        c["CNNConvolutionTransposeGradientNode"] = {
            convGradEncode, [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                auto weights = optionalConvolutionSource(r, ctx);
                auto node = std::make_shared<CNNConvolutionTransposeGradientNode>(ctx.source(0, r), ctx.source(1, r),
                                                                                  ctx.state(0, r), weights);
                node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
                return node;
            }};
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
        // dropout: keep probability, seed, mask stride (writeDropout / readDropout)
        c["CNNDropoutNode"] = {[](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                                   const auto& n = as<CNNDropoutNode>(node);
                                   writeDropout(w, n.keepProbability(), n.seed(), n.maskStrideInPixels());
                               },
                               [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                                   DropoutArgs a = readDropout(r);
                                   return std::make_shared<CNNDropoutNode>(ctx.source(0, r), a.keep, a.seed, a.stride);
                               }};
        c["CNNDropoutGradientNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
                const auto& n = as<CNNDropoutGradientNode>(node);
                writeDropout(w, n.keepProbability(), n.seed(), n.maskStrideInPixels());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                DropoutArgs a = readDropout(r);
                return std::make_shared<CNNDropoutGradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r),
                                                                a.keep, a.seed, a.stride);
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
        // split loss nodes: the descriptor as a loss kernel blob; the gradient node adds isLabelsGradientFilter
        c["NNForwardLossNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device& device) {
                w.object(CNNLoss(device, as<NNForwardLossNode>(node).descriptor()).serialize());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                return std::make_shared<NNForwardLossNode>(ctx.sources, readLossDescriptor(r, ctx));
            }};
        c["NNLossGradientNode"] = {
            [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device& device) {
                const auto& n = as<NNLossGradientNode>(node);
                w.object(CNNLoss(device, n.descriptor()).serialize());
                w.boolean(n.isLabelsGradientFilter());
            },
            [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                CNNLossDescriptor descriptor = readLossDescriptor(r, ctx);
                bool labels = r.boolean("node.is_labels_gradient_filter");
                ImageNodePtr weights = ctx.sources.size() > 3 ? ctx.sources[3] : nullptr;
                StateNodePtr state = ctx.states.empty() ? nullptr : ctx.state(0, r);
                return std::make_shared<NNLossGradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.source(2, r),
                                                            weights, state, descriptor, labels);
            }};
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
        addNormalizationNodeCoders(c);
        return c;
    }();
    return coders;
}

}  // namespace mpsgrad::graph_serial
