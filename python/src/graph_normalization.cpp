// Bindings of the normalization and reduction nodes of the graph API (MPSNNGraphNodes.h;
// cpp/mpsgrad/graph/filter_nodes_normalization.h, docs/graph.md).
#include <string>

#include "bindings.h"
#include "conversions.h"
#include "graph_callbacks.h"
#include "graph/filter_nodes_normalization.h"

namespace mpsgrad::python {
namespace {

using FloatArg = Arg<FloatHint>;

// A Python MPSNNGramMatrixCallback: alpha_for_source_image(source_image, destination_image) -> float.
class PythonGramMatrixCallback final : public NNGramMatrixCallback, public PythonImageCallback {
public:
    explicit PythonGramMatrixCallback(py::object object)
        : PythonImageCallback(std::move(object), "alpha_for_source_image") {}
    float alpha(const ImagePtr& source, const ImagePtr& destination) override {
        return call(source, destination, "alpha");
    }
};
using GradientInit = py::detail::initimpl::constructor<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&,
                                                        int64_t>;

// alpha, beta, delta (and p0, pm, ps for local contrast) of a node's LocalNormalizationParameters,
// read/write; the values are checked when the graph encodes the node (ValueError naming them).
template <class Node, class Cls>
void defParameters(Cls& cls, bool contrast) {
    auto one = [&cls](const char* name, float LocalNormalizationParameters::*member) {
        cls.def_property(
            name, [member](const Node& n) { return n.parameters.*member; },
            [member, name](Node& n, FloatArg v) { n.parameters.*member = float(toDouble(v.value, name)); });
    };
    one("alpha", &LocalNormalizationParameters::alpha);
    one("beta", &LocalNormalizationParameters::beta);
    one("delta", &LocalNormalizationParameters::delta);
    if (!contrast) return;
    one("p0", &LocalNormalizationParameters::p0);
    one("pm", &LocalNormalizationParameters::pm);
    one("ps", &LocalNormalizationParameters::ps);
}

void bindLocalNormalizationNodes(py::module_& m) {
    py::class_<CNNNormalizationNode, NNFilterNode, std::shared_ptr<CNNNormalizationNode>> base(
        m, "CNNNormalizationNode", "MPSCNNNormalizationNode (abstract): alpha, beta, delta [1, 5, 1]");
    defParameters<CNNNormalizationNode>(base, false);

    py::class_<CNNSpatialNormalizationNode, CNNNormalizationNode, std::shared_ptr<CNNSpatialNormalizationNode>>(
        m, "CNNSpatialNormalizationNode", "MPSCNNSpatialNormalizationNode")
        .def(py::init<const ImageNodePtr&, int64_t>(), py::arg("source"), py::arg("kernel_size"),
             "+nodeWithSource:kernelSize:")
        .def_property_readonly("kernel_width", &CNNSpatialNormalizationNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNSpatialNormalizationNode::kernelHeight);
    py::class_<CNNLocalContrastNormalizationNode, CNNNormalizationNode,
               std::shared_ptr<CNNLocalContrastNormalizationNode>>
        contrast(m, "CNNLocalContrastNormalizationNode",
                 "MPSCNNLocalContrastNormalizationNode; the node's defaults differ from the kernel's: alpha 1, "
                 "beta 0.5, delta 2^-10, p0 1, pm 0, ps 1");
    contrast
        .def(py::init<const ImageNodePtr&, int64_t>(), py::arg("source"), py::arg("kernel_size"),
             "+nodeWithSource:kernelSize:")
        .def_property_readonly("kernel_width", &CNNLocalContrastNormalizationNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNLocalContrastNormalizationNode::kernelHeight);
    defParameters<CNNLocalContrastNormalizationNode>(contrast, true);
    py::class_<CNNCrossChannelNormalizationNode, CNNNormalizationNode,
               std::shared_ptr<CNNCrossChannelNormalizationNode>>(m, "CNNCrossChannelNormalizationNode",
                                                                  "MPSCNNCrossChannelNormalizationNode")
        .def(py::init<const ImageNodePtr&, int64_t>(), py::arg("source"), py::arg("kernel_size"),
             "+nodeWithSource:kernelSize:")
        .def_property_readonly("kernel_size_in_feature_channels",
                               &CNNCrossChannelNormalizationNode::kernelSizeInFeatureChannels);

    py::class_<CNNLocalNormalizationGradientNode, NNGradientFilterNode,
               std::shared_ptr<CNNLocalNormalizationGradientNode>>
        gradient(m, "CNNLocalNormalizationGradientNode",
                 "the local normalization gradient nodes' base: alpha, beta, delta (the builders copy the forward "
                 "node's; a gradient node whose parameters differ from the forward pass's is refused at encode)");
    defParameters<CNNLocalNormalizationGradientNode>(gradient, false);
    py::class_<CNNSpatialNormalizationGradientNode, CNNLocalNormalizationGradientNode,
               std::shared_ptr<CNNSpatialNormalizationGradientNode>>(m, "CNNSpatialNormalizationGradientNode",
                                                                     "MPSCNNSpatialNormalizationGradientNode")
        .def(GradientInit(), py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"),
             py::arg("kernel_size"), "+nodeWithSourceGradient:sourceImage:gradientState:kernelSize:")
        .def_property_readonly("kernel_width", &CNNSpatialNormalizationGradientNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNSpatialNormalizationGradientNode::kernelHeight);
    py::class_<CNNLocalContrastNormalizationGradientNode, CNNLocalNormalizationGradientNode,
               std::shared_ptr<CNNLocalContrastNormalizationGradientNode>>
        contrastGradient(m, "CNNLocalContrastNormalizationGradientNode",
                         "MPSCNNLocalContrastNormalizationGradientNode (parameters default to the forward node's "
                         "defaults)");
    contrastGradient
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, int64_t, int64_t>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("kernel_width"),
             py::arg("kernel_height"), "+nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:")
        .def_property_readonly("kernel_width", &CNNLocalContrastNormalizationGradientNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNLocalContrastNormalizationGradientNode::kernelHeight);
    defParameters<CNNLocalContrastNormalizationGradientNode>(contrastGradient, true);
    py::class_<CNNCrossChannelNormalizationGradientNode, CNNLocalNormalizationGradientNode,
               std::shared_ptr<CNNCrossChannelNormalizationGradientNode>>(
        m, "CNNCrossChannelNormalizationGradientNode", "MPSCNNCrossChannelNormalizationGradientNode")
        .def(GradientInit(), py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"),
             py::arg("kernel_size"), "+nodeWithSourceGradient:sourceImage:gradientState:kernelSize:")
        .def_property_readonly("kernel_size", &CNNCrossChannelNormalizationGradientNode::kernelSize);
}

void bindReductionNodes(py::module_& m) {
    py::class_<NNUnaryReductionNode, NNFilterNode, std::shared_ptr<NNUnaryReductionNode>>(
        m, "NNUnaryReductionNode", "MPSNNUnaryReductionNode (abstract)")
        .def_property(
            "clip_rect_source", [](const NNUnaryReductionNode& n) { return n.clipRectSource; },
            [](NNUnaryReductionNode& n, py::handle v) { n.clipRectSource = toRegion(v, "clip_rect_source"); },
            "MPSNNUnaryReductionNode.clipRectSource [no clip]: the source region reduced");
    py::class_<NNReductionSpatialMeanNode, NNUnaryReductionNode, std::shared_ptr<NNReductionSpatialMeanNode>>(
        m, "NNReductionSpatialMeanNode", "MPSNNReductionSpatialMeanNode")
        .def(py::init<const ImageNodePtr&>(), py::arg("source"), "+nodeWithSource:");
    py::class_<NNReductionSpatialMeanGradientNode, NNGradientFilterNode,
               std::shared_ptr<NNReductionSpatialMeanGradientNode>>(m, "NNReductionSpatialMeanGradientNode",
                                                                    "MPSNNReductionSpatialMeanGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"), "+nodeWithSourceGradient:sourceImage:gradientState:");

    py::class_<NNGramMatrixCalculationNode, NNFilterNode, std::shared_ptr<NNGramMatrixCalculationNode>>(
        m, "NNGramMatrixCalculationNode", "MPSNNGramMatrixCalculationNode")
        .def(py::init([](const ImageNodePtr& source, FloatArg alpha) {
                 return std::make_shared<NNGramMatrixCalculationNode>(source, float(toDouble(alpha.value, "alpha")));
             }),
             py::arg("source"), py::arg("alpha") = 1.0, "+nodeWithSource:[alpha:]")
        .def_property(
            "alpha", [](const NNGramMatrixCalculationNode& n) { return n.alpha; },
            [](NNGramMatrixCalculationNode& n, FloatArg v) { n.alpha = float(toDouble(v.value, "alpha")); })
        .def_property(
            "property_call_back", [](const NNGramMatrixCalculationNode& n) { return callbackObject<PythonGramMatrixCallback>(n.propertyCallBack); },
            [](NNGramMatrixCalculationNode& n, py::object o) { n.propertyCallBack = toCallback<PythonGramMatrixCallback, NNGramMatrixCallback>(std::move(o), "alpha_for_source_image"); },
            "propertyCallBack (MPSNNGramMatrixCallback): None (use alpha), an object with alpha_for_source_image("
            "source_image, destination_image) -> float, or such a callable; asked once per encode, and the training "
            "graph's gradient node uses the same alpha");
    py::class_<NNGramMatrixCalculationGradientNode, NNGradientFilterNode,
               std::shared_ptr<NNGramMatrixCalculationGradientNode>>(m, "NNGramMatrixCalculationGradientNode",
                                                                     "MPSNNGramMatrixCalculationGradientNode")
        .def(py::init([](const ImageNodePtr& g, const ImageNodePtr& x, const StateNodePtr& state, FloatArg alpha) {
                 return std::make_shared<NNGramMatrixCalculationGradientNode>(g, x, state,
                                                                              float(toDouble(alpha.value, "alpha")));
             }),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("alpha") = 1.0,
             "+nodeWithSourceGradient:sourceImage:gradientState:[alpha:]")
        .def_property(
            "alpha", [](const NNGramMatrixCalculationGradientNode& n) { return n.alpha; },
            [](NNGramMatrixCalculationGradientNode& n, FloatArg v) { n.alpha = float(toDouble(v.value, "alpha")); });
}

}  // namespace

void bindNormalizationNodes(py::module_& m) {
    bindLocalNormalizationNodes(m);
    bindReductionNodes(m);
}

}  // namespace mpsgrad::python
