// Serialization of NNGraph (MPSNNGraph's NSSecureCoding; docs/serialization.md "Graphs").
//
// A graph blob (class tag "NNGraph") holds the node DAG in encode order: the graph inputs (image
// nodes and labels nodes), every filter node with its class, its input edges, its properties and
// its result image / state nodes' properties, the results, the handle labels and the graph's own
// properties. Kernel parameters that have a coder already (loss descriptors, neuron descriptors)
// are nested kernel or descriptor blobs.
//
// Data sources are application objects (MPS requires them to support NSSecureCoding). Here the
// blob captures the weights each trainable node's kernel computes with, as the kernels' own coder
// does: decoding alone gives ready-made data sources holding those weights
// (CNNConvolutionWeightsDataSource, CNNBatchNormalizationWeightsDataSource,
// CNNInstanceNormalizationWeightsDataSource, CNNGroupNormalizationWeightsDataSource), enough to run the
// graph. To keep TRAINING a decoded graph, the caller passes back data sources that can update
// (pickle does so with the pickled application objects) through deserializeGraph's `adopt`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "graph/graph.h"
#include "kernels/batch_normalization.h"
#include "kernels/convolution.h"
#include "kernels/group_normalization.h"
#include "kernels/instance_normalization.h"

namespace mpsgrad {

// The application objects a graph blob only describes: its data sources (each once, in node
// order) and its handles (each once, in the order the blob lists them).
struct GraphObjects {
    std::vector<std::shared_ptr<CNNConvolutionDataSource>> convolution;
    std::vector<std::shared_ptr<CNNBatchNormalizationDataSource>> batchNormalization;
    std::vector<std::shared_ptr<CNNInstanceNormalizationDataSource>> instanceNormalization;
    std::vector<std::shared_ptr<CNNGroupNormalizationDataSource>> groupNormalization;
    std::vector<HandlePtr> handles;
};

// The objects of `graph` in blob order (what pickle carries next to the blob).
GraphObjects graphObjects(const NNGraph& graph);

// -encodeWithCoder: the graph as a blob. ValueError naming the node for what cannot be written:
// a node class without a graph coder, a custom NNPadding or ImageAllocator, a source state that is
// not a labels node. Run it when the graph's GPU work is idle (weights are read from the kernels).
std::vector<uint8_t> serializeGraph(const NNGraph& graph);

// -initWithCoder:device: a new graph on `device`. `adopt`, when given, sees the captured data sources
// and handles (blob order) once they are read and may replace entries (not resize the lists) before
// the nodes are built. SerializationError (a ValueError) for malformed data.
std::shared_ptr<NNGraph> deserializeGraph(const uint8_t* data, size_t size, const Device& device,
                                          const std::function<void(GraphObjects& captured)>& adopt = nullptr);

}  // namespace mpsgrad
