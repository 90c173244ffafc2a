// NNGraph.debugDescription and the VERBOSE print (MPS: -[MPSNNGraph debugDescription],
// MPSKernelOptionsVerbose). docs/graph.md "Debugging a graph".
#include <cstdio>
#include <sstream>
#include <unordered_map>

#include "graph/graph.h"

namespace mpsgrad {
namespace {

const char* storageName(ImageFeatureChannelFormat format) {
    switch (format) {
        case ImageFeatureChannelFormat::Float16: return "FLOAT16";
        case ImageFeatureChannelFormat::Float32: return "FLOAT32";
        case ImageFeatureChannelFormat::Unorm8: return "UNORM8";
        case ImageFeatureChannelFormat::Unorm16: return "UNORM16";
        default: return "NONE";
    }
}

const char* trainingStyleName(NNTrainingStyle style) {
    switch (style) {
        case NNTrainingStyle::UpdateDeviceNone: return "UPDATE_DEVICE_NONE";
        case NNTrainingStyle::UpdateDeviceCPU: return "UPDATE_DEVICE_CPU";
        default: return "UPDATE_DEVICE_GPU";
    }
}

// Names the image and state nodes: the handle's label when there is one, else "image N" /
// "state N" in the order the description first meets them.
class NodeNames {
public:
    std::string image(const ImageNodePtr& node) {
        return name(node.get(), node ? node->handle : nullptr, images_, imageCount_, "image");
    }
    std::string state(const StateNodePtr& node) {
        return name(node.get(), node ? node->handle : nullptr, states_, stateCount_, "state");
    }

private:
    std::string name(const void* node, const HandlePtr& handle, std::unordered_map<const void*, std::string>& names,
                     int& unnamed, const char* kind) {
        if (!node) return "none";
        auto found = names.find(node);
        if (found != names.end()) return found->second;
        std::string label = handle ? handle->label() : std::string();
        std::string text = label.empty() ? std::string(kind) + " " + std::to_string(++unnamed) : "'" + label + "'";
        names.emplace(node, text);
        return text;
    }
    std::unordered_map<const void*, std::string> images_, states_;
    int imageCount_ = 0, stateCount_ = 0;
};

template <class T, class Name>
std::string joined(const std::vector<T>& items, Name name) {
    std::string text;
    for (const auto& item : items) text += (text.empty() ? "" : ", ") + name(item);
    return text;
}

}  // namespace

std::string NNGraph::debugDescription() const {
    NodeNames names;
    auto image = [&](const ImageNodePtr& n) { return names.image(n); };
    auto state = [&](const StateNodePtr& n) { return names.state(n); };
    std::ostringstream out;
    out << "NNGraph";
    if (!label.empty()) out << " '" << label << "'";
    out << " on " << device_.name() << ": " << order_.size() << " filter node(s), intermediates "
        << storageName(format) << "\n";
    out << "  source images: " << (sourceImages_.empty() ? "none" : joined(sourceImages_, image)) << "\n";
    if (!sourceStates_.empty()) out << "  source states: " << joined(sourceStates_, state) << "\n";
    for (size_t i = 0; i < order_.size(); ++i) {
        NNFilterNode& node = *order_[i];
        out << "  [" << i << "] " << node.className();
        if (!node.label.empty()) out << " '" << node.label << "'";
        out << " (" << joined(node.sourceImages(), image);
        if (!node.sourceStates().empty()) out << "; states " << joined(node.sourceStates(), state);
        out << ") -> " << image(node.resultImage());
        const auto results = node.resultStates();
        if (!results.empty()) out << "; states " << joined(results, state);
        if (NNTrainingStyle* style = node.trainingStylePointer()) out << "  training " << trainingStyleName(*style);
        const ImageNodePtr result = node.resultImage();
        if (result->exportFromGraph) out << "  exported";
        if (result->stopGradient) out << "  stop_gradient";
        out << "\n";
    }
    out << "  results: ";
    for (size_t i = 0; i < results_.size(); ++i)
        out << (i ? ", " : "") << image(results_[i]) << (resultsNeeded_[i] ? "" : " (not needed)");
    out << "\n";
    return out.str();
}

void NNGraph::printIfVerbose() {
    if (!(options & KernelOptionsVerbose) || printedVerbose_) return;
    printedVerbose_ = true;
    std::fprintf(stderr, "mpsgrad: %s", debugDescription().c_str());
}

}  // namespace mpsgrad
