// The per-class payloads of graph serialization for the normalization and reduction nodes
// (graph_serialization_coders.h; the format is in docs/serialization.md "Graphs"): the local
// normalization nodes (spatial, local contrast, cross-channel), the instance and group normalization
// nodes, and their gradients, the spatial mean and the Gram matrix nodes and their gradients.
//
// A Gram node's propertyCallBack is an application object with no coder: the blob holds `alpha`
// only and a decoded node has no callback (the caller re-attaches one, as it passes data sources).
#include "graph/filter_nodes_groups.h"
#include "graph/filter_nodes_normalization.h"
#include "graph/graph_serialization_coders.h"

namespace mpsgrad::graph_serial {
namespace {

// alpha, beta, delta, p0, pm, ps (all six for every kind: the node keeps them all).
void writeParameters(serial::Writer& w, const LocalNormalizationParameters& p) {
    for (float v : {p.alpha, p.beta, p.delta, p.p0, p.pm, p.ps}) w.f32(v);
}

LocalNormalizationParameters readParameters(serial::Reader& r) {
    LocalNormalizationParameters p;
    for (float* v : {&p.alpha, &p.beta, &p.delta, &p.p0, &p.pm, &p.ps}) *v = r.f32("node.parameters");
    return p;
}

int64_t readKernelSize(serial::Reader& r, const char* what) { return r.i64InRange(what, 1, int64_t(1) << 31); }

// The payload of the nodes with one kernel size: the size (its getter is `size`), the six parameters.
template <class Node>
auto kernelSizeAndParametersWriter(int64_t (Node::*size)() const) {
    return [size](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
        const auto& n = as<Node>(node);
        w.i64((n.*size)());
        writeParameters(w, n.parameters);
    };
}

template <class Node>
void addForward(NodeCoders& c, const char* name, int64_t (Node::*size)() const) {
    c[name] = {kernelSizeAndParametersWriter(size),
               [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                   int64_t k = readKernelSize(r, "node.kernel_size");
                   auto node = std::make_shared<Node>(ctx.source(0, r), k);
                   node->parameters = readParameters(r);
                   return node;
               }};
}

// The spatial and cross-channel gradient nodes take one kernel size.
template <class Node>
void addGradient(NodeCoders& c, const char* name, int64_t (Node::*size)() const) {
    c[name] = {kernelSizeAndParametersWriter(size),
               [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
                   int64_t k = readKernelSize(r, "node.kernel_size");
                   auto node = std::make_shared<Node>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), k);
                   node->parameters = readParameters(r);
                   return node;
               }};
}

// Instance and group normalization (one template for both families, as filter_nodes_groups.h): the
// forward node writes its data source's index in its family's table (`table`) and its training style;
// the gradient node its training style.
template <class Family>
void addGroupNormalization(NodeCoders& c,
                           std::vector<std::shared_ptr<typename Family::DataSource>> DecodeContext::*table) {
    using Node = GroupNormalizationNodeOf<Family>;
    using GradientNode = GroupNormalizationGradientNodeOf<Family>;
    c[Family::forwardName] = {
        [](serial::Writer& w, const GraphIndex& index, const NNFilterNode& node, const Device&) {
            const auto& n = as<Node>(node);
            w.u64(index.objectIndex.at(n.dataSource().get()));
            w.u32(uint32_t(n.trainingStyle));
        },
        [table](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            uint64_t i = r.u64("node.data_source");
            const auto& sources = ctx.*table;
            if (i >= sources.size()) r.fail("node.data_source", "index past the family's data source table");
            auto node = std::make_shared<Node>(ctx.source(0, r), sources[i]);
            node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
            return node;
        }};
    c[Family::gradientName] = {
        [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            w.u32(uint32_t(as<GradientNode>(node).trainingStyle));
        },
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            auto node = std::make_shared<GradientNode>(ctx.source(0, r), ctx.source(1, r), ctx.state(0, r));
            node->trainingStyle = NNTrainingStyle(readTrainingStyle(r));
            return node;
        }};
}

}  // namespace

void addNormalizationNodeCoders(NodeCoders& c) {
    // instance and group normalization: data source index, training style
    addGroupNormalization<InstanceNormalizationFamily>(c, &DecodeContext::instanceNormalization);
    addGroupNormalization<GroupNormalizationFamily>(c, &DecodeContext::groupNormalization);
    // local normalization: kernel size(s), then the six parameters
    addForward<CNNSpatialNormalizationNode>(c, "CNNSpatialNormalizationNode", &CNNSpatialNormalizationNode::kernelWidth);
    addForward<CNNLocalContrastNormalizationNode>(c, "CNNLocalContrastNormalizationNode",
                                                  &CNNLocalContrastNormalizationNode::kernelWidth);
    addForward<CNNCrossChannelNormalizationNode>(c, "CNNCrossChannelNormalizationNode",
                                                 &CNNCrossChannelNormalizationNode::kernelSizeInFeatureChannels);
    addGradient<CNNSpatialNormalizationGradientNode>(c, "CNNSpatialNormalizationGradientNode",
                                                     &CNNSpatialNormalizationGradientNode::kernelWidth);
    addGradient<CNNCrossChannelNormalizationGradientNode>(c, "CNNCrossChannelNormalizationGradientNode",
                                                          &CNNCrossChannelNormalizationGradientNode::kernelSize);
    c["CNNLocalContrastNormalizationGradientNode"] = {
        [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            const auto& n = as<CNNLocalContrastNormalizationGradientNode>(node);
            w.i64(n.kernelWidth());
            w.i64(n.kernelHeight());
            writeParameters(w, n.parameters);
        },
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            int64_t kw = readKernelSize(r, "node.kernel_width"), kh = readKernelSize(r, "node.kernel_height");
            auto node = std::make_shared<CNNLocalContrastNormalizationGradientNode>(ctx.source(0, r), ctx.source(1, r),
                                                                                    ctx.state(0, r), kw, kh);
            node->parameters = readParameters(r);
            return node;
        }};
    // spatial mean: the clip rectangle (origin, size)
    c["NNReductionSpatialMeanNode"] = {
        [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            const Region& clip = as<NNReductionSpatialMeanNode>(node).clipRectSource;
            for (int64_t v : {clip.origin.x, clip.origin.y, clip.origin.z}) w.i64(v);
            for (uint64_t v : {clip.size.width, clip.size.height, clip.size.depth}) w.u64(v);
        },
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            auto node = std::make_shared<NNReductionSpatialMeanNode>(ctx.source(0, r));
            Region& clip = node->clipRectSource;
            for (int64_t* v : {&clip.origin.x, &clip.origin.y, &clip.origin.z}) *v = r.i64("node.clip_rect_source");
            for (uint64_t* v : {&clip.size.width, &clip.size.height, &clip.size.depth})
                *v = r.u64("node.clip_rect_source");
            return node;
        }};
    c["NNReductionSpatialMeanGradientNode"] = {
        [](serial::Writer&, const GraphIndex&, const NNFilterNode&, const Device&) {},
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            return std::make_shared<NNReductionSpatialMeanGradientNode>(ctx.source(0, r), ctx.source(1, r),
                                                                        ctx.state(0, r));
        }};
    // Gram matrix: alpha. A gradient node whose forward node is a decoded Gram node follows that node's
    // alpha of each encode, as the training graph builder's does.
    c["NNGramMatrixCalculationNode"] = {
        [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            w.f32(as<NNGramMatrixCalculationNode>(node).alpha);
        },
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            float alpha = r.f32("node.alpha");
            return std::make_shared<NNGramMatrixCalculationNode>(ctx.source(0, r), alpha);
        }};
    c["NNGramMatrixCalculationGradientNode"] = {
        [](serial::Writer& w, const GraphIndex&, const NNFilterNode& node, const Device&) {
            w.f32(as<NNGramMatrixCalculationGradientNode>(node).alpha);
        },
        [](serial::Reader& r, DecodeContext& ctx) -> FilterNodePtr {
            float alpha = r.f32("node.alpha");
            auto* forward = dynamic_cast<NNGramMatrixCalculationNode*>(ctx.forward.get());
            return std::make_shared<NNGramMatrixCalculationGradientNode>(
                ctx.source(0, r), ctx.source(1, r), ctx.state(0, r), alpha,
                forward ? forward->encodedAlpha() : nullptr);
        }};
}

}  // namespace mpsgrad::graph_serial
