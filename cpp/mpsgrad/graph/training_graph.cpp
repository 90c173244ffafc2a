// NNFilterNode::trainingGraph (-trainingGraphWithSourceGradient:nodeHandler:, spec §3.2).
//
// Walks the inference graph upstream of this node in reverse order (every consumer of an image
// before its producer) and builds the gradient nodes:
//  * each forward node gets its gradient node(s) from gradientFiltersWithSource (one per input for
//    multi-input nodes), wired to the gradient of its result, its forward source (the forward result
//    for softmax / log-softmax) and its result state, which NNGraph then asks the forward node for
//    (the state on demand; a batch-normalization node then uses the batch statistics);
//  * an image with several consumers gets the sum of their gradients from inserted addition nodes
//    (the handler sees a null inference node for those);
//  * gradients are not propagated past images with stopGradient, nor past graph inputs (a graph
//    input read by several nodes still gets the sum of their gradients);
//  * state edges are not followed (MPS's documented limitation);
//  * the handler runs for every gradient node; by default the gradient result takes the handle of
//    the forward source it is the gradient of.
// The loss node and the initial-gradient node are their own gradients: the walk starts at their
// source with their result as its gradient.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "graph/filter_nodes.h"

namespace mpsgrad {

namespace {
// Forward nodes upstream of `start` through image edges, inputs first.
void collectUpstream(const FilterNodePtr& node, std::unordered_set<const NNFilterNode*>& seen,
                     std::vector<FilterNodePtr>& order) {
    if (!seen.insert(node.get()).second) return;
    for (const auto& image : node->sourceImages())
        if (auto producer = image->producer()) collectUpstream(producer, seen, order);
    order.push_back(node);
}

bool isOwnGradient(const NNFilterNode& node) {
    return dynamic_cast<const CNNLossNode*>(&node) || dynamic_cast<const CNNYOLOLossNode*>(&node) ||
           dynamic_cast<const NNInitialGradientNode*>(&node);
}

void defaultHandler(const FilterNodePtr& gradientNode, const FilterNodePtr&, const ImageNodePtr& inferenceSource,
                    const ImageNodePtr&) {
    if (inferenceSource) gradientNode->resultImage()->handle = inferenceSource->handle;
}
}  // namespace

std::vector<FilterNodePtr> NNFilterNode::trainingGraph(const ImageNodePtr& sourceGradient,
                                                      const GradientNodeHandler& nodeHandler) {
    const GradientNodeHandler& handler = nodeHandler ? nodeHandler : GradientNodeHandler(defaultHandler);
    auto self = shared_from_this();
    std::unordered_map<const NNImageNode*, std::vector<ImageNodePtr>> gradients;  // image → incoming gradients
    std::vector<FilterNodePtr> order;
    std::unordered_set<const NNFilterNode*> seen;

    ImageNodePtr start = sourceGradient ? sourceGradient : resultImage();
    if (isOwnGradient(*this)) {
        // Its result already is dL/d(source): continue from the source.
        const ImageNodePtr& source = sources_.front();
        if (source->stopGradient) return {};
        gradients[source.get()].push_back(start);
        if (auto producer = source->producer()) collectUpstream(producer, seen, order);
    } else {
        gradients[resultImage().get()].push_back(start);
        collectUpstream(self, seen, order);
    }

    std::vector<FilterNodePtr> created;
    std::unordered_set<const NNImageNode*> consumedGradients;
    std::vector<ImageNodePtr> inputs;  // graph inputs that receive gradients, in order
    // Several consumers of `image`: their gradients summed by a chain of addition nodes.
    auto sumGradients = [&](const ImageNodePtr& image, const std::vector<ImageNodePtr>& incoming) {
        ImageNodePtr gradient = incoming.front();
        for (size_t i = 1; i < incoming.size(); ++i) {
            auto sum = std::make_shared<NNBinaryArithmeticNode>(std::vector<ImageNodePtr>{gradient, incoming[i]},
                                                                kArithmeticAdd);
            consumedGradients.insert(gradient.get());
            consumedGradients.insert(incoming[i].get());
            handler(sum, nullptr, image, gradient);
            created.push_back(sum);
            gradient = sum->resultImage();
        }
        return gradient;
    };
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const FilterNodePtr& forward = *it;
        auto result = forward->resultImage();
        auto found = gradients.find(result.get());
        if (found == gradients.end() || found->second.empty()) continue;  // no gradient reaches it
        std::vector<ImageNodePtr>& incoming = found->second;

        ImageNodePtr gradient = sumGradients(result, incoming);

        auto gradientNodes = forward->gradientFiltersWithSource(gradient);
        consumedGradients.insert(gradient.get());
        const auto& sources = forward->sourceImages();
        for (size_t i = 0; i < gradientNodes.size(); ++i) {
            // Gradient node i differentiates forward input i.
            const ImageNodePtr& inferenceSource = sources.at(std::min(i, sources.size() - 1));
            handler(gradientNodes[i], forward, inferenceSource, gradient);
            created.push_back(gradientNodes[i]);
            if (inferenceSource->stopGradient) continue;
            auto& list = gradients[inferenceSource.get()];
            if (!inferenceSource->producer() && list.empty()) inputs.push_back(inferenceSource);
            list.push_back(gradientNodes[i]->resultImage());
        }
    }
    // Graph inputs read by several nodes: their gradients are summed too.
    for (const auto& input : inputs) sumGradients(input, gradients[input.get()]);

    // The terminal nodes: those whose result no other created node consumes.
    std::vector<FilterNodePtr> terminal;
    for (const auto& node : created)
        if (!consumedGradients.count(node->resultImage().get())) terminal.push_back(node);
    return terminal;
}

}  // namespace mpsgrad
