// Bindings of the split-loss nodes of the graph API (MPSNNForwardLossNode, MPSNNLossGradientNode;
// cpp/mpsgrad/graph/filter_nodes_loss.h, docs/graph.md).
#include "bindings.h"
#include "conversions.h"
#include "graph_callbacks.h"
#include "graph/filter_nodes_loss.h"

namespace mpsgrad::python {

namespace {
// A Python MPSNNLossCallback: scalar_weight_for_source_image(source_image, destination_image) -> float.
class PythonLossCallback final : public NNLossCallback, public PythonImageCallback {
public:
    explicit PythonLossCallback(py::object object)
        : PythonImageCallback(std::move(object), "scalar_weight_for_source_image") {}
    float scalarWeight(const ImagePtr& source, const ImagePtr& destination) override {
        return call(source, destination, "the loss weight");
    }
};

py::object getCallback(const std::shared_ptr<NNLossCallback>& callback) {
    return callbackObject<PythonLossCallback>(callback);
}

std::shared_ptr<NNLossCallback> toCallback(py::object object) {
    return python::toCallback<PythonLossCallback, NNLossCallback>(std::move(object), "scalar_weight_for_source_image");
}

constexpr const char* kCallbackDoc =
    "propertyCallBack (MPSNNLossCallback): None, an object with scalar_weight_for_source_image(source_image, "
    "destination_image) -> float, or such a callable; asked once per encode for the loss weight";
}  // namespace

void bindLossNodes(py::module_& m) {
    py::class_<NNForwardLossNode, NNFilterNode, std::shared_ptr<NNForwardLossNode>>(
        m, "NNForwardLossNode", "MPSNNForwardLossNode: the loss (labels and weights are images)")
        .def(py::init([](const ImageNodePtr& source, const ImageNodePtr& labels, const CNNLossDescriptor& d,
                         const ImageNodePtr& weights) {
                 checkNodeNotNull(labels.get(), "labels");
                 std::vector<ImageNodePtr> sources{source, labels};
                 if (weights) sources.push_back(weights);
                 return std::make_shared<NNForwardLossNode>(std::move(sources), d);
             }),
             py::arg("source"), py::arg("labels"), py::arg("loss_descriptor"), py::arg("weights") = nullptr,
             "+nodeWithSource:labels:[weights:]lossDescriptor:")
        .def_static(
            "node_with_sources",
            [](std::vector<ImageNodePtr> sources, const CNNLossDescriptor& d) {
                return std::make_shared<NNForwardLossNode>(std::move(sources), d);
            },
            py::arg("sources"), py::arg("loss_descriptor"), "+nodeWithSources:lossDescriptor: ([predictions, labels(, weights)])")
        .def_property_readonly("loss_type", [](const NNForwardLossNode& n) { return n.descriptor().lossType; })
        .def_property_readonly("reduction_type", [](const NNForwardLossNode& n) { return n.descriptor().reductionType; })
        .def_property_readonly("number_of_classes", [](const NNForwardLossNode& n) { return n.descriptor().numberOfClasses; })
        .def_property_readonly("weight", [](const NNForwardLossNode& n) { return n.descriptor().weight; })
        .def_property_readonly("label_smoothing", [](const NNForwardLossNode& n) { return n.descriptor().labelSmoothing; })
        .def_property_readonly("epsilon", [](const NNForwardLossNode& n) { return n.descriptor().epsilon; })
        .def_property_readonly("delta", [](const NNForwardLossNode& n) { return n.descriptor().delta; })
        .def_property_readonly("reduce_across_batch",
                               [](const NNForwardLossNode& n) { return n.descriptor().reduceAcrossBatch; })
        .def_property(
            "property_call_back", [](const NNForwardLossNode& n) { return getCallback(n.propertyCallBack); },
            [](NNForwardLossNode& n, py::object o) { n.propertyCallBack = toCallback(std::move(o)); }, kCallbackDoc);
    py::class_<NNLossGradientNode, NNGradientFilterNode, std::shared_ptr<NNLossGradientNode>>(
        m, "NNLossGradientNode", "MPSNNLossGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const ImageNodePtr&, const ImageNodePtr&,
                      const StateNodePtr&, const CNNLossDescriptor&, bool>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("labels"), py::arg("weights"),
             py::arg("gradient_state"), py::arg("loss_descriptor"), py::arg("is_labels_gradient_filter") = false,
             "+nodeWithSourceGradient:sourceImage:labels:weights:gradientState:lossDescriptor:"
             "isLabelsGradientFilter: (weights and gradient_state may be None)")
        .def_property_readonly("is_labels_gradient_filter", &NNLossGradientNode::isLabelsGradientFilter)
        .def_property_readonly("loss_type", [](const NNLossGradientNode& n) { return n.descriptor().lossType; })
        .def_property_readonly("reduction_type", [](const NNLossGradientNode& n) { return n.descriptor().reductionType; })
        .def_property(
            "property_call_back", [](const NNLossGradientNode& n) { return getCallback(n.propertyCallBack); },
            [](NNLossGradientNode& n, py::object o) { n.propertyCallBack = toCallback(std::move(o)); }, kCallbackDoc);
}

}  // namespace mpsgrad::python
