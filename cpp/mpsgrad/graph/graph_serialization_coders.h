// The node coders of graph serialization (graph_serialization.h), shared by the files that hold the
// per-class payloads: graph_serialization_nodes.cpp (convolution, batch normalization, neurons,
// pooling, softmax, upsampling, dropout, shape, arithmetic, concatenation, losses) and
// graph_serialization_nodes_normalization.cpp (local normalization, instance and group normalization,
// spatial mean, Gram matrix).
// Internal to the graph serialization files.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "core/serialization.h"
#include "graph/graph_serialization.h"

namespace mpsgrad::graph_serial {

// The graph's inputs, nodes and application objects, each with its index in the blob (the walk shared
// by encoding and graphObjects()).
struct GraphIndex {
    std::vector<ImageNodePtr> sourceImages;
    std::vector<StateNodePtr> sourceStates;
    std::unordered_map<const NNImageNode*, size_t> sourceImageIndex;
    std::unordered_map<const NNStateNode*, size_t> sourceStateIndex;
    std::unordered_map<const NNFilterNode*, size_t> nodeIndex;
    GraphObjects objects;
    std::unordered_map<const void*, size_t> objectIndex;  // data source / handle -> index in its table
    // Which node's kernel holds the weights of each captured data source (null: none).
    std::vector<const NNFilterNode*> convolutionOwner, batchNormalizationOwner, instanceNormalizationOwner,
        groupNormalizationOwner;

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
    // A normalization data source (batch, instance, group), owned by the forward node that names it.
    template <class Source>
    void addNormalization(std::vector<std::shared_ptr<Source>>& table, std::vector<const NNFilterNode*>& owners,
                          const std::shared_ptr<Source>& source, const NNFilterNode* owner) {
        if (objectIndex.emplace(source.get(), table.size()).second) {
            table.push_back(source);
            owners.push_back(owner);
        }
    }
};

// What a node's decoder reads besides its payload: its decoded inputs and padding, the data source
// tables (after the caller's `adopt`).
struct DecodeContext {
    const Device& device;
    std::vector<ImageNodePtr> sources;
    std::vector<StateNodePtr> states;
    std::shared_ptr<NNPadding> padding;
    FilterNodePtr forward;  // the node's forward node (gradient nodes of the graph builder), or null
    std::vector<std::shared_ptr<CNNConvolutionDataSource>> convolution;
    std::vector<std::shared_ptr<CNNBatchNormalizationDataSource>> batchNormalization;
    std::vector<std::shared_ptr<CNNInstanceNormalizationDataSource>> instanceNormalization;
    std::vector<std::shared_ptr<CNNGroupNormalizationDataSource>> groupNormalization;

    const ImageNodePtr& source(size_t i, serial::Reader& r) const {
        if (i >= sources.size()) r.fail("node.sources", "too few image inputs for the node's class");
        return sources[i];
    }
    const StateNodePtr& state(size_t i, serial::Reader& r) const {
        if (i >= states.size()) r.fail("node.states", "too few state inputs for the node's class");
        return states[i];
    }
};

// One node class's payload: what encodeWithCoder writes after the common node record, and the
// decoder that builds the node from it and the context.
struct NodeCoder {
    std::function<void(serial::Writer&, const GraphIndex&, const NNFilterNode&, const Device&)> encode;
    std::function<FilterNodePtr(serial::Reader&, DecodeContext&)> decode;
};

using NodeCoders = std::map<std::string, NodeCoder>;

template <class T>
const T& as(const NNFilterNode& node) {
    return dynamic_cast<const T&>(node);
}

uint32_t readTrainingStyle(serial::Reader& r);
std::shared_ptr<CNNConvolutionDataSource> convolutionSource(serial::Reader& r, DecodeContext& ctx);

// Every node class a graph blob can hold, by className().
const NodeCoders& nodeCoders();
// The local, instance and group normalization and reduction nodes' part of the table
// (graph_serialization_nodes_normalization.cpp).
void addNormalizationNodeCoders(NodeCoders& coders);

}  // namespace mpsgrad::graph_serial
