// Bindings of the graph API (MPSNNGraphNodes.h, MPSNNGraph.h; cpp/mpsgrad/graph, docs/graph.md).
#include "bindings.h"
#include "graph/filter_nodes.h"
#include "graph/filter_nodes_transpose.h"
#include "graph/graph.h"

namespace mpsgrad::python {

void bindNormalizationNodes(py::module_& m);  // graph_normalization.cpp
void bindLossNodes(py::module_& m);           // graph_loss.cpp
void bindGroupNormalizationNodes(py::module_& m);  // graph_groups.cpp
void bindGraphSerialization(py::module_& m);       // graph_serialization.cpp

namespace {

// @protocol MPSHandle: any Python object with label (a method or an attribute).
class PythonHandle final : public Handle {
public:
    explicit PythonHandle(py::object object) : object_(std::make_shared<PythonReference>(std::move(object))) {}
    std::string label() const override {
        py::gil_scoped_acquire gil;
        py::object label = object_->object.attr("label");
        if (PyCallable_Check(label.ptr())) label = label();
        return py::str(label);
    }
    const py::object& object() const { return object_->object; }

private:
    std::shared_ptr<PythonReference> object_;
};

HandlePtr toHandle(const py::object& object) {
    if (object.is_none()) return nullptr;
    if (!py::hasattr(object, "label"))
        throwTypeError("handle: expected an object with a label() method (MPSHandle), got ", typeName(object));
    return std::make_shared<PythonHandle>(object);
}

py::object fromHandle(const HandlePtr& handle) {
    if (!handle) return py::none();
    if (auto* python = dynamic_cast<PythonHandle*>(handle.get())) return python->object();
    return py::str(handle->label());
}

py::list handleList(const std::vector<HandlePtr>& handles) {
    py::list list;
    for (const auto& handle : handles) list.append(fromHandle(handle));
    return list;
}

// A convolution data source that may also implement the optional update methods.
class UpdatableConvolutionDataSource final : public CNNConvolutionDataSource, public CNNConvolutionUpdatableDataSource {
public:
    explicit UpdatableConvolutionDataSource(py::object object)
        : inner_(toConvolutionDataSource(object)), object_(std::make_shared<PythonReference>(object)),
          gpu_(py::hasattr(object, "update_with_command_buffer")),
          cpu_(py::hasattr(object, "update_with_gradient_state")) {}
    DataType dataType() override { return inner_->dataType(); }
    CNNConvolutionDescriptor descriptor() override { return inner_->descriptor(); }
    const float* weights() override { return inner_->weights(); }
    const float* biasTerms() override { return inner_->biasTerms(); }
    bool load() override { return inner_->load(); }
    void purge() override { inner_->purge(); }
    std::string label() override { return inner_->label(); }

    bool supportsGPUUpdate() const override { return gpu_; }
    bool supportsCPUUpdate() const override { return cpu_; }
    std::shared_ptr<CNNConvolutionWeightsAndBiasesState> updateWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNConvolutionGradientState>& gradientState,
        const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& sourceState) override {
        py::gil_scoped_acquire gil;
        py::object result = object_->object.attr("update_with_command_buffer")(cb.shared_from_this(), gradientState,
                                                                               sourceState);
        if (result.is_none()) return nullptr;
        if (!py::isinstance<CNNConvolutionWeightsAndBiasesState>(result))
            throwTypeError("update_with_command_buffer(): expected a CNNConvolutionWeightsAndBiasesState or None, got ",
                           typeName(result));
        return result.cast<std::shared_ptr<CNNConvolutionWeightsAndBiasesState>>();
    }
    bool updateWithGradientState(const std::shared_ptr<CNNConvolutionGradientState>& gradientState,
                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& sourceState) override {
        if (pythonFinalizing()) return false;
        py::gil_scoped_acquire gil;
        try {
            py::object result = object_->object.attr("update_with_gradient_state")(gradientState, sourceState);
            return !result.is_none() && PyObject_IsTrue(result.ptr()) == 1;
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable("mpsgrad data source update_with_gradient_state()");
            return false;
        }
    }
    py::object object() const { return object_->object; }

private:
    std::shared_ptr<CNNConvolutionDataSource> inner_;
    std::shared_ptr<PythonReference> object_;
    bool gpu_, cpu_;
};

// A batch-normalization data source whose optional update methods the graph calls.
class UpdatableBatchNormalizationDataSource final : public CNNBatchNormalizationDataSource,
                                                    public CNNBatchNormalizationUpdatableDataSource {
public:
    explicit UpdatableBatchNormalizationDataSource(py::object object)
        : inner_(toBatchNormalizationDataSource(object)), object_(std::make_shared<PythonReference>(object)) {}
    int64_t numberOfFeatureChannels() override { return inner_->numberOfFeatureChannels(); }
    const float* gamma() override { return inner_->gamma(); }
    const float* beta() override { return inner_->beta(); }
    const float* mean() override { return inner_->mean(); }
    const float* variance() override { return inner_->variance(); }
    bool load() override { return inner_->load(); }
    void purge() override { inner_->purge(); }
    std::string label() override { return inner_->label(); }
    std::optional<float> epsilon() override { return inner_->epsilon(); }

    bool updatesOnCommandBuffer() const override { return has("update_gamma_and_beta_with_command_buffer"); }
    bool updatesMeanAndVarianceOnCommandBuffer() const override {
        return has("update_mean_and_variance_with_command_buffer");
    }
    bool updatesAfterCompletion() const override {
        return has("update_gamma_and_beta_with_batch_normalization_state");
    }
    std::shared_ptr<CNNNormalizationGammaAndBetaState> updateGammaAndBetaWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNBatchNormalizationState>& state) override {
        return callWithCommandBuffer<CNNNormalizationGammaAndBetaState>("update_gamma_and_beta_with_command_buffer",
                                                                        "CNNNormalizationGammaAndBetaState", cb, state);
    }
    std::shared_ptr<CNNNormalizationMeanAndVarianceState> updateMeanAndVarianceWithCommandBuffer(
        CommandBuffer& cb, const std::shared_ptr<CNNBatchNormalizationState>& state) override {
        return callWithCommandBuffer<CNNNormalizationMeanAndVarianceState>(
            "update_mean_and_variance_with_command_buffer", "CNNNormalizationMeanAndVarianceState", cb, state);
    }
    bool updateGammaAndBeta(const std::shared_ptr<CNNBatchNormalizationState>& state) override {
        return call("update_gamma_and_beta_with_batch_normalization_state", state);
    }
    bool updateMeanAndVariance(const std::shared_ptr<CNNBatchNormalizationState>& state) override {
        return call("update_mean_and_variance_with_batch_normalization_state", state);
    }
    static bool updatable(const py::object& object) {
        return py::hasattr(object, "update_gamma_and_beta_with_batch_normalization_state") ||
               py::hasattr(object, "update_gamma_and_beta_with_command_buffer");
    }
    py::object object() const { return object_->object; }

private:
    bool has(const char* method) const {
        py::gil_scoped_acquire gil;
        return py::hasattr(object_->object, method);
    }
    // GPU style: called while encoding, so errors propagate (TypeError for a wrong return); a
    // missing method (e.g. mean and variance) means "nothing to reload": null.
    template <class StateType>
    std::shared_ptr<StateType> callWithCommandBuffer(const char* method, const char* expected, CommandBuffer& cb,
                                                     const std::shared_ptr<CNNBatchNormalizationState>& state) {
        py::gil_scoped_acquire gil;
        if (!py::hasattr(object_->object, method)) return nullptr;
        py::object result = object_->object.attr(method)(cb.shared_from_this(), state);
        if (result.is_none()) return nullptr;
        if (!py::isinstance<StateType>(result))
            throwTypeError(method, "(): expected a ", expected, " or None, got ", typeName(result));
        return result.cast<std::shared_ptr<StateType>>();
    }
    bool call(const char* method, const std::shared_ptr<CNNBatchNormalizationState>& state) {
        if (pythonFinalizing()) return false;
        py::gil_scoped_acquire gil;
        if (!py::hasattr(object_->object, method)) return false;
        try {
            py::object result = object_->object.attr(method)(state);
            return !result.is_none() && PyObject_IsTrue(result.ptr()) != 0;
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable("mpsgrad batch normalization data source update");
            return false;
        }
    }
    std::shared_ptr<CNNBatchNormalizationDataSource> inner_;
    std::shared_ptr<PythonReference> object_;
};

// Per-type neuron node classes (CNNNeuronReLUNode, ...): CNNNeuronNode with a descriptor of the type.
template <int Type>
class TypedNeuronNode final : public CNNNeuronNode {
public:
    TypedNeuronNode(const ImageNodePtr& source, const NNNeuronDescriptor& d, const char* name)
        : CNNNeuronNode(source, d, name) {}
};

template <int Type>
void bindNeuronNode(py::module_& m, const char* name) {
    constexpr auto type = CNNNeuronType(Type);
    NNNeuronDescriptor defaults = NNNeuronDescriptor::withType(type);
    py::class_<TypedNeuronNode<Type>, CNNNeuronNode, std::shared_ptr<TypedNeuronNode<Type>>>(
        m, name, "MPSCNNNeuron*Node: a CNNNeuronNode of one neuron type; a, b, c default to the type's defaults")
        .def(py::init([name, type](const ImageNodePtr& source, float a, float b, float c) {
                 return std::make_shared<TypedNeuronNode<Type>>(source, NNNeuronDescriptor::withType(type, a, b, c),
                                                                name);
             }),
             py::arg("source"), py::arg("a") = defaults.a, py::arg("b") = defaults.b, py::arg("c") = defaults.c);
}

// The per-kind pooling gradient node classes (...kernelWidth:kernelHeight:strideInPixelsX:
// strideInPixelsY:paddingPolicy:).
template <class Node>
void bindPoolingGradientNode(py::module_& m, const char* name) {
    py::class_<Node, CNNPoolingGradientNode, std::shared_ptr<Node>>(m, name, "MPSCNNPooling*GradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, int64_t, int64_t, int64_t,
                      int64_t, std::shared_ptr<NNPadding>>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("kernel_width"),
             py::arg("kernel_height"), py::arg("stride_in_pixels_x"), py::arg("stride_in_pixels_y"),
             py::arg("padding_policy") = nullptr,
             "+nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:"
             "strideInPixelsY:paddingPolicy:");
}

template <class Node>
void bindUpsamplingGradientNode(py::module_& m, const char* name) {
    py::class_<Node, CNNUpsamplingGradientNode, std::shared_ptr<Node>>(m, name, "MPSCNNUpsampling*GradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, int64_t, int64_t>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"),
             py::arg("scale_factor_x"), py::arg("scale_factor_y"),
             "+nodeWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:");
}

template <class Node>
void bindArithmeticGradientNode(py::module_& m, const char* name) {
    py::class_<Node, NNArithmeticGradientNode, std::shared_ptr<Node>>(m, name, "MPSNN*GradientNode (arithmetic)")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, bool>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"),
             py::arg("is_secondary_source_filter"),
             "+nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter: (source_image: the other "
             "forward operand)");
}

GradientNodeHandler toNodeHandler(const py::object& handler) {
    if (handler.is_none()) return nullptr;
    if (!PyCallable_Check(handler.ptr()))
        throwTypeError("node_handler: expected a callable (gradient_node, inference_node, inference_source, "
                       "gradient_source), got ", typeName(handler));
    return [handler](const FilterNodePtr& gradient, const FilterNodePtr& inference, const ImageNodePtr& source,
                     const ImageNodePtr& gradientSource) { handler(gradient, inference, source, gradientSource); };
}

std::vector<ImageBatch> toImageBatches(const py::handle& value, const char* what) {
    std::vector<ImageBatch> batches;
    for (auto item : py::iter(value)) batches.push_back(toImageBatch(item, what));
    return batches;
}

std::vector<StateBatch> toStateBatches(const py::handle& value, const char* what) {
    std::vector<StateBatch> batches;
    if (value.is_none()) return batches;
    for (auto item : py::iter(value)) batches.push_back(toStateBatch(item, what));
    return batches;
}

void bindNodes(py::module_& m) {
    // The filter-node classes first: the image and state nodes' signatures name them.
    py::class_<NNFilterNode, std::shared_ptr<NNFilterNode>> filter(m, "NNFilterNode", "MPSNNFilterNode (abstract)");
    py::class_<NNGradientFilterNode, NNFilterNode, std::shared_ptr<NNGradientFilterNode>> gradientFilter(
        m, "NNGradientFilterNode", "MPSNNGradientFilterNode (abstract)");
    py::enum_<NNTrainingStyle>(m, "NNTrainingStyle", "MPSNNTrainingStyle")
        .value("UPDATE_DEVICE_NONE", NNTrainingStyle::UpdateDeviceNone)
        .value("UPDATE_DEVICE_CPU", NNTrainingStyle::UpdateDeviceCPU)
        .value("UPDATE_DEVICE_GPU", NNTrainingStyle::UpdateDeviceGPU);
    py::enum_<CNNBatchNormalizationFlags>(m, "CNNBatchNormalizationFlags", "MPSCNNBatchNormalizationFlags")
        .value("DEFAULT", CNNBatchNormalizationFlags::Default)
        .value("CALCULATE_STATISTICS_ALWAYS", CNNBatchNormalizationFlags::CalculateStatisticsAlways)
        .value("CALCULATE_STATISTICS_NEVER", CNNBatchNormalizationFlags::CalculateStatisticsNever);

    py::class_<NNImageNode, std::shared_ptr<NNImageNode>>(m, "NNImageNode", "MPSNNImageNode")
        .def(py::init([](py::object handle) { return std::make_shared<NNImageNode>(toHandle(handle)); }),
             py::arg("handle") = py::none(), "-initWithHandle: / +nodeWithHandle: (a graph input)")
        .def_static("exported_node_with_handle",
                    [](py::object handle) { return NNImageNode::exportedNodeWithHandle(toHandle(handle)); },
                    py::arg("handle") = py::none(), "+exportedNodeWithHandle: (export_from_graph = True)")
        .def_property("handle", [](const NNImageNode& n) { return fromHandle(n.handle); },
                      [](NNImageNode& n, py::object h) { n.handle = toHandle(h); }, "MPSNNImageNode.handle")
        .def_property("format", [](const NNImageNode& n) { return n.format; },
                      [](NNImageNode& n, ImageFeatureChannelFormat f) { n.format = f; }, "MPSNNImageNode.format")
        .def_readwrite("image_allocator", &NNImageNode::imageAllocator, "MPSNNImageNode.imageAllocator")
        .def_readwrite("export_from_graph", &NNImageNode::exportFromGraph, "MPSNNImageNode.exportFromGraph")
        .def_readwrite("synchronize_resource", &NNImageNode::synchronizeResource)
        .def_readwrite("stop_gradient", &NNImageNode::stopGradient, "MPSNNImageNode.stopGradient")
        .def_property_readonly("producer", &NNImageNode::producer, "The filter node producing it (None: an input)");

    py::class_<NNStateNode, std::shared_ptr<NNStateNode>>(m, "NNStateNode", "MPSNNStateNode (from result_state)")
        .def_property("handle", [](const NNStateNode& n) { return fromHandle(n.handle); },
                      [](NNStateNode& n, py::object h) { n.handle = toHandle(h); })
        .def_readwrite("export_from_graph", &NNStateNode::exportFromGraph)
        .def_readwrite("synchronize_resource", &NNStateNode::synchronizeResource)
        .def_property_readonly("producer", &NNStateNode::producer);
    py::class_<NNGradientStateNode, NNStateNode, std::shared_ptr<NNGradientStateNode>>(m, "NNGradientStateNode",
                                                                                       "MPSNNGradientStateNode");
    py::class_<CNNConvolutionGradientStateNode, NNGradientStateNode, std::shared_ptr<CNNConvolutionGradientStateNode>>(
        m, "CNNConvolutionGradientStateNode", "MPSCNNConvolutionGradientStateNode");
    py::class_<NNBinaryGradientStateNode, NNStateNode, std::shared_ptr<NNBinaryGradientStateNode>>(
        m, "NNBinaryGradientStateNode", "MPSNNBinaryGradientStateNode");
    py::class_<NNArithmeticGradientStateNode, NNBinaryGradientStateNode,
               std::shared_ptr<NNArithmeticGradientStateNode>>(m, "NNArithmeticGradientStateNode",
                                                               "MPSNNArithmeticGradientStateNode");
    py::class_<NNLabelsNode, NNStateNode, std::shared_ptr<NNLabelsNode>>(m, "NNLabelsNode", "MPSNNLabelsNode")
        .def(py::init([](py::object handle) { return std::make_shared<NNLabelsNode>(toHandle(handle)); }),
             py::arg("handle") = py::none());

    filter.def_property_readonly("result_image", &NNFilterNode::resultImage, "MPSNNFilterNode.resultImage")
        .def_property_readonly("result_state", &NNFilterNode::resultState, "MPSNNFilterNode.resultState")
        .def_property_readonly("result_states", &NNFilterNode::resultStates, "MPSNNFilterNode.resultStates")
        .def_readwrite("padding_policy", &NNFilterNode::paddingPolicy, "MPSNNFilterNode.paddingPolicy")
        .def_readwrite("label", &NNFilterNode::label, "MPSNNFilterNode.label")
        .def_property_readonly("source_images", &NNFilterNode::sourceImages)
        .def_property_readonly("source_states", &NNFilterNode::sourceStates)
        .def("gradient_filter_with_source", &NNFilterNode::gradientFilterWithSource, py::arg("source_gradient"),
             "-gradientFilterWithSource:")
        .def("gradient_filter_with_sources", &NNFilterNode::gradientFilterWithSources, py::arg("source_gradients"),
             "-gradientFilterWithSources:")
        .def("gradient_filters_with_source", &NNFilterNode::gradientFiltersWithSource, py::arg("source_gradient"),
             "-gradientFiltersWithSource:")
        .def("gradient_filters_with_sources", &NNFilterNode::gradientFiltersWithSources,
             py::arg("source_gradients"), "-gradientFiltersWithSources:")
        .def("training_graph",
             [](NNFilterNode& node, ImageNodePtr sourceGradient, py::object handler) {
                 return node.trainingGraph(sourceGradient, toNodeHandler(handler));
             },
             py::arg("source_gradient") = nullptr, py::arg("node_handler") = py::none(),
             "-trainingGraphWithSourceGradient:nodeHandler: — returns the terminal gradient nodes");
    gradientFilter.def_property_readonly("forward_node", &NNGradientFilterNode::forwardNode);
}

#define MPSGRAD_TRAINING_STYLE(Class) \
    .def_readwrite("training_style", &Class::trainingStyle, "MPSNNTrainableNode.trainingStyle")

void bindTrainableNodes(py::module_& m) {
    py::class_<CNNConvolutionNode, NNFilterNode, std::shared_ptr<CNNConvolutionNode>>(m, "CNNConvolutionNode",
                                                                                     "MPSCNNConvolutionNode")
        .def(py::init([](const ImageNodePtr& source, py::object weights) {
                 return std::make_shared<CNNConvolutionNode>(source,
                                                             std::make_shared<UpdatableConvolutionDataSource>(weights));
             }),
             py::arg("source"), py::arg("weights"), "+nodeWithSource:weights:")
        MPSGRAD_TRAINING_STYLE(CNNConvolutionNode)
        .def_readwrite("accumulator_precision", &CNNConvolutionNode::accumulatorPrecision)
        .def_property_readonly("convolution_gradient_state", &CNNConvolutionNode::convolutionGradientState);
    py::class_<CNNConvolutionGradientNode, NNGradientFilterNode, std::shared_ptr<CNNConvolutionGradientNode>>(
        m, "CNNConvolutionGradientNode", "MPSCNNConvolutionGradientNode")
        .def(py::init([](const ImageNodePtr& g, const ImageNodePtr& x, const StateNodePtr& state, py::object weights) {
                 std::shared_ptr<CNNConvolutionDataSource> ds;
                 if (!weights.is_none()) ds = std::make_shared<UpdatableConvolutionDataSource>(weights);
                 return std::make_shared<CNNConvolutionGradientNode>(g, x, state, ds);
             }),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("convolution_gradient_state"),
             py::arg("weights") = py::none(),
             "+nodeWithSourceGradient:sourceImage:convolutionGradientState:weights: (None: the forward's)")
        MPSGRAD_TRAINING_STYLE(CNNConvolutionGradientNode);
    // The transposed-convolution nodes: the forward node is not a CNNConvolutionNode here (its kernel
    // is not a CNNConvolution); the gradient node is a CNNConvolutionGradientNode, as in MPS.
    py::class_<CNNConvolutionTransposeGradientStateNode, CNNConvolutionGradientStateNode,
               std::shared_ptr<CNNConvolutionTransposeGradientStateNode>>(
        m, "CNNConvolutionTransposeGradientStateNode", "MPSCNNConvolutionTransposeGradientStateNode");
    py::class_<CNNConvolutionTransposeNode, NNFilterNode, std::shared_ptr<CNNConvolutionTransposeNode>>(
        m, "CNNConvolutionTransposeNode", "MPSCNNConvolutionTransposeNode")
        .def(py::init([](const ImageNodePtr& source, const StateNodePtr& state, py::object weights) {
                 return std::make_shared<CNNConvolutionTransposeNode>(
                     source, state, std::make_shared<UpdatableConvolutionDataSource>(weights));
             }),
             py::arg("source"), py::arg("convolution_gradient_state"), py::arg("weights"),
             "+nodeWithSource:convolutionGradientState:weights: (convolution_gradient_state: None, or a "
             "CNNConvolutionNode's result state, which sizes the result like that convolution's source)")
        MPSGRAD_TRAINING_STYLE(CNNConvolutionTransposeNode)
        .def_readwrite("accumulator_precision", &CNNConvolutionTransposeNode::accumulatorPrecision);
    py::class_<CNNConvolutionTransposeGradientNode, CNNConvolutionGradientNode,
               std::shared_ptr<CNNConvolutionTransposeGradientNode>>(m, "CNNConvolutionTransposeGradientNode",
                                                                     "MPSCNNConvolutionTransposeGradientNode")
        .def(py::init([](const ImageNodePtr& g, const ImageNodePtr& x, const StateNodePtr& state, py::object weights) {
                 std::shared_ptr<CNNConvolutionDataSource> ds;
                 if (!weights.is_none()) ds = std::make_shared<UpdatableConvolutionDataSource>(weights);
                 return std::make_shared<CNNConvolutionTransposeGradientNode>(g, x, state, ds);
             }),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("convolution_transpose_gradient_state"),
             py::arg("weights") = py::none(),
             "+nodeWithSourceGradient:sourceImage:convolutionTransposeGradientState:weights: (None: the forward's)");
    // The fully connected nodes are convolution nodes (training_style etc. inherited).
    py::class_<CNNFullyConnectedNode, CNNConvolutionNode, std::shared_ptr<CNNFullyConnectedNode>>(
        m, "CNNFullyConnectedNode", "MPSCNNFullyConnectedNode")
        .def(py::init([](const ImageNodePtr& source, py::object weights) {
                 return std::make_shared<CNNFullyConnectedNode>(
                     source, std::make_shared<UpdatableConvolutionDataSource>(weights));
             }),
             py::arg("source"), py::arg("weights"), "+nodeWithSource:weights:");
    py::class_<CNNFullyConnectedGradientNode, CNNConvolutionGradientNode,
               std::shared_ptr<CNNFullyConnectedGradientNode>>(m, "CNNFullyConnectedGradientNode",
                                                               "MPSCNNFullyConnectedGradientNode")
        .def(py::init([](const ImageNodePtr& g, const ImageNodePtr& x, const StateNodePtr& state, py::object weights) {
                 std::shared_ptr<CNNConvolutionDataSource> ds;
                 if (!weights.is_none()) ds = std::make_shared<UpdatableConvolutionDataSource>(weights);
                 return std::make_shared<CNNFullyConnectedGradientNode>(g, x, state, ds);
             }),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("convolution_gradient_state"),
             py::arg("weights") = py::none(),
             "+nodeWithSourceGradient:sourceImage:convolutionGradientState:weights: (None: the forward's)");

    py::class_<CNNBatchNormalizationNode, NNFilterNode, std::shared_ptr<CNNBatchNormalizationNode>>(
        m, "CNNBatchNormalizationNode", "MPSCNNBatchNormalizationNode")
        .def(py::init([](const ImageNodePtr& source, py::object dataSource) {
                 std::shared_ptr<CNNBatchNormalizationDataSource> ds;
                 if (!dataSource.is_none() && UpdatableBatchNormalizationDataSource::updatable(dataSource))
                     ds = std::make_shared<UpdatableBatchNormalizationDataSource>(dataSource);
                 else
                     ds = toBatchNormalizationDataSource(dataSource);
                 return std::make_shared<CNNBatchNormalizationNode>(source, ds);
             }),
             py::arg("source"), py::arg("data_source"), "+nodeWithSource:dataSource:")
        .def_readwrite("flags", &CNNBatchNormalizationNode::flags) MPSGRAD_TRAINING_STYLE(CNNBatchNormalizationNode);
    py::class_<CNNBatchNormalizationGradientNode, NNGradientFilterNode,
               std::shared_ptr<CNNBatchNormalizationGradientNode>>(m, "CNNBatchNormalizationGradientNode",
                                                                   "MPSCNNBatchNormalizationGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state")) MPSGRAD_TRAINING_STYLE(CNNBatchNormalizationGradientNode);
}

void bindFamilyNodes(py::module_& m) {
    auto neuron = py::class_<CNNNeuronNode, NNFilterNode, std::shared_ptr<CNNNeuronNode>>(m, "CNNNeuronNode",
                                                                                          "MPSCNNNeuronNode");
    neuron.def(py::init([](const ImageNodePtr& source, const NNNeuronDescriptor& d) {
                   return std::make_shared<CNNNeuronNode>(source, d);
               }),
               py::arg("source"), py::arg("descriptor"), "+nodeWithSource:descriptor:")
        .def_property_readonly("a", &CNNNeuronNode::a)
        .def_property_readonly("b", &CNNNeuronNode::b)
        .def_property_readonly("c", &CNNNeuronNode::c)
        .def_property_readonly("descriptor", &CNNNeuronNode::descriptor);
    bindNeuronNode<int(CNNNeuronType::Absolute)>(m, "CNNNeuronAbsoluteNode");
    bindNeuronNode<int(CNNNeuronType::ELU)>(m, "CNNNeuronELUNode");
    bindNeuronNode<int(CNNNeuronType::ReLUN)>(m, "CNNNeuronReLUNNode");
    bindNeuronNode<int(CNNNeuronType::Linear)>(m, "CNNNeuronLinearNode");
    bindNeuronNode<int(CNNNeuronType::ReLU)>(m, "CNNNeuronReLUNode");
    bindNeuronNode<int(CNNNeuronType::Sigmoid)>(m, "CNNNeuronSigmoidNode");
    bindNeuronNode<int(CNNNeuronType::HardSigmoid)>(m, "CNNNeuronHardSigmoidNode");
    bindNeuronNode<int(CNNNeuronType::SoftPlus)>(m, "CNNNeuronSoftPlusNode");
    bindNeuronNode<int(CNNNeuronType::SoftSign)>(m, "CNNNeuronSoftSignNode");
    bindNeuronNode<int(CNNNeuronType::TanH)>(m, "CNNNeuronTanHNode");
    bindNeuronNode<int(CNNNeuronType::Power)>(m, "CNNNeuronPowerNode");
    bindNeuronNode<int(CNNNeuronType::Exponential)>(m, "CNNNeuronExponentialNode");
    bindNeuronNode<int(CNNNeuronType::Logarithm)>(m, "CNNNeuronLogarithmNode");
    bindNeuronNode<int(CNNNeuronType::GeLU)>(m, "CNNNeuronGeLUNode");
    py::class_<CNNNeuronPReLUNode, CNNNeuronNode, std::shared_ptr<CNNNeuronPReLUNode>>(
        m, "CNNNeuronPReLUNode", "MPSCNNNeuronPReLUNode: x >= 0 ? x : a[channel] * x")
        .def(py::init([](const ImageNodePtr& source, std::vector<float> aData) {
                 if (aData.empty()) throwValueError("a_data: PReLU needs at least one per-channel slope");
                 return std::make_shared<CNNNeuronPReLUNode>(source, std::move(aData));
             }),
             py::arg("source"), py::arg("a_data"), "+nodeWithSource:aData: (one slope per feature channel)")
        .def_property_readonly("a_data", [](const CNNNeuronPReLUNode& n) { return n.descriptor().data; });
    py::class_<CNNNeuronGradientNode, NNGradientFilterNode, std::shared_ptr<CNNNeuronGradientNode>>(
        m, "CNNNeuronGradientNode", "MPSCNNNeuronGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, const NNNeuronDescriptor&>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("descriptor"));

    // Pooling: one Python class per MPS class; filter_size / stride forms are keyword defaults.
    py::class_<CNNPoolingNode, NNFilterNode, std::shared_ptr<CNNPoolingNode>> pooling(m, "CNNPoolingNode",
                                                                                     "MPSCNNPoolingNode");
    pooling.def_property_readonly("kernel_width", &CNNPoolingNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNPoolingNode::kernelHeight)
        .def_property_readonly("stride_in_pixels_x", &CNNPoolingNode::strideInPixelsX)
        .def_property_readonly("stride_in_pixels_y", &CNNPoolingNode::strideInPixelsY);
    for (auto [name, kind] : {std::make_pair("CNNPoolingMaxNode", PoolingKind::Max),
                              std::make_pair("CNNPoolingAverageNode", PoolingKind::Average),
                              std::make_pair("CNNPoolingL2NormNode", PoolingKind::L2Norm)}) {
        // The subclasses share the C++ class; the Python name tells the kind.
        PoolingKind k = kind;
        m.def(name,
              [k](const ImageNodePtr& source, int64_t filterSize, py::object stride, py::object kw, py::object kh,
                  py::object sx, py::object sy) {
                  int64_t s = stride.is_none() ? filterSize : toInt64(stride, "stride");
                  return std::make_shared<CNNPoolingNode>(
                      source, k, kw.is_none() ? filterSize : toInt64(kw, "kernel_width"),
                      kh.is_none() ? filterSize : toInt64(kh, "kernel_height"),
                      sx.is_none() ? s : toInt64(sx, "stride_in_pixels_x"),
                      sy.is_none() ? s : toInt64(sy, "stride_in_pixels_y"));
              },
              py::arg("source"), py::arg("filter_size"), py::arg("stride") = py::none(),
              py::arg("kernel_width") = py::none(), py::arg("kernel_height") = py::none(),
              py::arg("stride_in_pixels_x") = py::none(), py::arg("stride_in_pixels_y") = py::none(),
              "MPSCNNPooling*Node: +nodeWithSource:filterSize:[stride:] or kernel_width/height, "
              "stride_in_pixels_x/y (edge mode Clamp)");
    }
    m.def("CNNDilatedPoolingMaxNode",
          [](const ImageNodePtr& source, int64_t filterSize, int64_t stride, int64_t dilationRate) {
              return std::make_shared<CNNPoolingNode>(source, PoolingKind::DilatedMax, filterSize, filterSize, stride,
                                                      stride, dilationRate, dilationRate);
          },
          py::arg("source"), py::arg("filter_size"), py::arg("stride"), py::arg("dilation_rate"),
          "MPSCNNDilatedPoolingMaxNode +nodeWithSource:filterSize:stride:dilationRate:");
    py::class_<CNNPoolingGradientNode, NNGradientFilterNode, std::shared_ptr<CNNPoolingGradientNode>>(
        m, "CNNPoolingGradientNode", "MPSCNNPoolingGradientNode (kind: PoolingKind)")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, PoolingKind, int64_t, int64_t,
                      int64_t, int64_t, std::shared_ptr<NNPadding>, int64_t, int64_t>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("kind"),
             py::arg("kernel_width"), py::arg("kernel_height"), py::arg("stride_in_pixels_x"),
             py::arg("stride_in_pixels_y"), py::arg("padding_policy") = nullptr, py::arg("dilation_rate_x") = 1,
             py::arg("dilation_rate_y") = 1)
        .def_property_readonly("kind", &CNNPoolingGradientNode::kind)
        .def_property_readonly("kernel_width", &CNNPoolingGradientNode::kernelWidth)
        .def_property_readonly("kernel_height", &CNNPoolingGradientNode::kernelHeight)
        .def_property_readonly("stride_in_pixels_x", &CNNPoolingGradientNode::strideInPixelsX)
        .def_property_readonly("stride_in_pixels_y", &CNNPoolingGradientNode::strideInPixelsY);
    bindPoolingGradientNode<CNNPoolingMaxGradientNode>(m, "CNNPoolingMaxGradientNode");
    bindPoolingGradientNode<CNNPoolingAverageGradientNode>(m, "CNNPoolingAverageGradientNode");
    bindPoolingGradientNode<CNNPoolingL2NormGradientNode>(m, "CNNPoolingL2NormGradientNode");
    py::class_<CNNDilatedPoolingMaxGradientNode, CNNPoolingGradientNode,
               std::shared_ptr<CNNDilatedPoolingMaxGradientNode>>(m, "CNNDilatedPoolingMaxGradientNode",
                                                                   "MPSCNNDilatedPoolingMaxGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&, int64_t, int64_t, int64_t,
                      int64_t, int64_t, int64_t, std::shared_ptr<NNPadding>>(),
             py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"), py::arg("kernel_width"),
             py::arg("kernel_height"), py::arg("stride_in_pixels_x"), py::arg("stride_in_pixels_y"),
             py::arg("dilation_rate_x"), py::arg("dilation_rate_y"), py::arg("padding_policy") = nullptr,
             "...strideInPixelsY:dilationRateX:dilationRateY:paddingPolicy:")
        .def_property_readonly("dilation_rate_x", &CNNDilatedPoolingMaxGradientNode::dilationRateX)
        .def_property_readonly("dilation_rate_y", &CNNDilatedPoolingMaxGradientNode::dilationRateY);

    py::class_<CNNSoftMaxNode, NNFilterNode, std::shared_ptr<CNNSoftMaxNode>>(m, "CNNSoftMaxNode", "MPSCNNSoftMaxNode")
        .def(py::init([](const ImageNodePtr& s) { return std::make_shared<CNNSoftMaxNode>(s, false); }),
             py::arg("source"));
    py::class_<CNNLogSoftMaxNode, CNNSoftMaxNode, std::shared_ptr<CNNLogSoftMaxNode>>(m, "CNNLogSoftMaxNode",
                                                                                     "MPSCNNLogSoftMaxNode")
        .def(py::init<const ImageNodePtr&>(), py::arg("source"), "+nodeWithSource:");
    py::class_<CNNSoftMaxGradientNode, NNGradientFilterNode, std::shared_ptr<CNNSoftMaxGradientNode>>(
        m, "CNNSoftMaxGradientNode", "MPSCNNSoftMaxGradientNode (source_image: the forward result)")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"));
    py::class_<CNNLogSoftMaxGradientNode, NNGradientFilterNode, std::shared_ptr<CNNLogSoftMaxGradientNode>>(
        m, "CNNLogSoftMaxGradientNode", "MPSCNNLogSoftMaxGradientNode (source_image: the forward result)")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"));

    py::class_<CNNUpsamplingNode, NNFilterNode, std::shared_ptr<CNNUpsamplingNode>>(m, "CNNUpsamplingNode",
                                                                                   "MPSCNNUpsampling*Node");
    m.def("CNNUpsamplingNearestNode",
          [](const ImageNodePtr& s, int64_t sx, int64_t sy) { return std::make_shared<CNNUpsamplingNode>(s, false, sx, sy); },
          py::arg("source"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"));
    m.def("CNNUpsamplingBilinearNode",
          [](const ImageNodePtr& s, int64_t sx, int64_t sy, bool align) {
              return std::make_shared<CNNUpsamplingNode>(s, true, sx, sy, align);
          },
          py::arg("source"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"),
          py::arg("align_corners") = false);
    py::class_<CNNUpsamplingGradientNode, NNGradientFilterNode, std::shared_ptr<CNNUpsamplingGradientNode>>(
        m, "CNNUpsamplingGradientNode", "the upsampling gradient nodes' base (scale factors)")
        .def_property_readonly("scale_factor_x", &CNNUpsamplingGradientNode::scaleFactorX)
        .def_property_readonly("scale_factor_y", &CNNUpsamplingGradientNode::scaleFactorY);
    bindUpsamplingGradientNode<CNNUpsamplingNearestGradientNode>(m, "CNNUpsamplingNearestGradientNode");
    bindUpsamplingGradientNode<CNNUpsamplingBilinearGradientNode>(m, "CNNUpsamplingBilinearGradientNode");

    py::class_<CNNDropoutNode, NNFilterNode, std::shared_ptr<CNNDropoutNode>>(m, "CNNDropoutNode", "MPSCNNDropoutNode")
        .def(py::init([](const ImageNodePtr& s, double keep, uint64_t seed, std::tuple<uint64_t, uint64_t, uint64_t> st) {
                 if (!(keep > 0.0 && keep < 1.0))
                     throwValueError("keep_probability: must be in the open interval (0, 1), got ", keep);
                 return std::make_shared<CNNDropoutNode>(s, float(keep), seed,
                                                         Size3{std::get<0>(st), std::get<1>(st), std::get<2>(st)});
             }),
             py::arg("source"), py::arg("keep_probability") = 0.5, py::arg("seed") = 0,
             py::arg("mask_stride_in_pixels") = std::make_tuple(1, 1, 1));
    py::class_<CNNDropoutGradientNode, NNGradientFilterNode, std::shared_ptr<CNNDropoutGradientNode>>(
        m, "CNNDropoutGradientNode", "MPSCNNDropoutGradientNode");

    py::class_<NNBinaryArithmeticNode, NNFilterNode, std::shared_ptr<NNBinaryArithmeticNode>>(
        m, "NNBinaryArithmeticNode", "MPSNNBinaryArithmeticNode")
        .def_readwrite("primary_scale", &NNBinaryArithmeticNode::primaryScale)
        .def_readwrite("secondary_scale", &NNBinaryArithmeticNode::secondaryScale)
        .def_readwrite("bias", &NNBinaryArithmeticNode::bias)
        .def_readwrite("minimum_value", &NNBinaryArithmeticNode::minimumValue)
        .def_readwrite("maximum_value", &NNBinaryArithmeticNode::maximumValue);
    for (auto [name, op] : {std::make_pair("NNAdditionNode", kArithmeticAdd),
                            std::make_pair("NNSubtractionNode", kArithmeticSubtract),
                            std::make_pair("NNMultiplicationNode", kArithmeticMultiply),
                            std::make_pair("NNDivisionNode", kArithmeticDivide)}) {
        int32_t code = op;
        m.def(name,
              [code](const ImageNodePtr& left, const ImageNodePtr& right) {
                  return std::make_shared<NNBinaryArithmeticNode>(std::vector<ImageNodePtr>{left, right}, code);
              },
              py::arg("left_source"), py::arg("right_source"), "+nodeWithLeftSource:rightSource:");
    }
    py::class_<NNArithmeticGradientNode, NNGradientFilterNode, std::shared_ptr<NNArithmeticGradientNode>>(
        m, "NNArithmeticGradientNode", "MPSNNArithmeticGradientNode (source_image: the other forward operand)")
        .def_property_readonly("is_secondary_source_filter", &NNArithmeticGradientNode::isSecondarySourceFilter);
    bindArithmeticGradientNode<NNAdditionGradientNode>(m, "NNAdditionGradientNode");
    bindArithmeticGradientNode<NNSubtractionGradientNode>(m, "NNSubtractionGradientNode");
    bindArithmeticGradientNode<NNMultiplicationGradientNode>(m, "NNMultiplicationGradientNode");

    py::class_<CNNLossNode, NNFilterNode, std::shared_ptr<CNNLossNode>>(m, "CNNLossNode", "MPSCNNLossNode")
        .def(py::init<const ImageNodePtr&, const CNNLossDescriptor&>(), py::arg("source"),
             py::arg("loss_descriptor"), "+nodeWithSource:lossDescriptor: (labels: input_labels)")
        .def_property_readonly("input_labels", &CNNLossNode::inputLabels, "MPSCNNLossNode.inputLabels");
    py::class_<CNNYOLOLossNode, NNFilterNode, std::shared_ptr<CNNYOLOLossNode>>(m, "CNNYOLOLossNode",
                                                                              "MPSCNNYOLOLossNode")
        .def(py::init<const ImageNodePtr&, const CNNYOLOLossDescriptor&>(), py::arg("source"),
             py::arg("loss_descriptor"), "+nodeWithSource:lossDescriptor: (labels: input_labels)")
        .def_property_readonly("input_labels", &CNNYOLOLossNode::inputLabels, "MPSCNNYOLOLossNode.inputLabels");
    py::class_<NNInitialGradientNode, NNFilterNode, std::shared_ptr<NNInitialGradientNode>>(
        m, "NNInitialGradientNode", "MPSNNInitialGradientNode (a gradient of ones)")
        .def(py::init<const ImageNodePtr&>(), py::arg("source"));
}

// An ImageCoordinate from an ImageCoordinate or an (x, y, channel) sequence (the ImageCoordinate
// type validates the values).
ImageCoordinate coordinateArgument(py::handle value, const char* what) {
    if (py::isinstance<ImageCoordinate>(value)) return value.cast<ImageCoordinate>();
    if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value) || py::len(value) != 3)
        throwTypeError(what, ": expected an ImageCoordinate or an (x, y, channel) tuple, got ", typeName(value));
    py::sequence s = py::reinterpret_borrow<py::sequence>(value);
    return py::type::of<ImageCoordinate>()(s[0], s[1], s[2]).cast<ImageCoordinate>();
}

void bindShapeNodes(py::module_& m) {
    py::class_<NNReshapeNode, NNFilterNode, std::shared_ptr<NNReshapeNode>>(m, "NNReshapeNode", "MPSNNReshapeNode")
        .def(py::init<const ImageNodePtr&, int64_t, int64_t, int64_t>(), py::arg("source"), py::arg("result_width"),
             py::arg("result_height"), py::arg("result_feature_channels"),
             "+nodeWithSource:resultWidth:resultHeight:resultFeatureChannels:")
        .def_property_readonly("result_width", &NNReshapeNode::resultWidth)
        .def_property_readonly("result_height", &NNReshapeNode::resultHeight)
        .def_property_readonly("result_feature_channels", &NNReshapeNode::resultFeatureChannels);
    py::class_<NNReshapeGradientNode, NNGradientFilterNode, std::shared_ptr<NNReshapeGradientNode>>(
        m, "NNReshapeGradientNode", "MPSNNReshapeGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"), "+nodeWithSourceGradient:sourceImage:gradientState:");
    py::class_<NNPadNode, NNFilterNode, std::shared_ptr<NNPadNode>>(m, "NNPadNode", "MPSNNPadNode")
        .def(py::init([](const ImageNodePtr& source, py::handle before, py::handle after, ImageEdgeMode edgeMode) {
                 return std::make_shared<NNPadNode>(source, coordinateArgument(before, "padding_size_before"),
                                                    coordinateArgument(after, "padding_size_after"), edgeMode);
             }),
             py::arg("source"), py::arg("padding_size_before"), py::arg("padding_size_after"), py::arg("edge_mode"),
             "+nodeWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:")
        .def_property_readonly("padding_size_before", &NNPadNode::paddingSizeBefore)
        .def_property_readonly("padding_size_after", &NNPadNode::paddingSizeAfter)
        .def_property_readonly("edge_mode", &NNPadNode::edgeMode)
        .def_readwrite("fill_value", &NNPadNode::fillValue, "MPSNNPadNode.fillValue (edge mode CONSTANT)");
    py::class_<NNPadGradientNode, NNGradientFilterNode, std::shared_ptr<NNPadGradientNode>>(m, "NNPadGradientNode",
                                                                                           "MPSNNPadGradientNode")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"), "+nodeWithSourceGradient:sourceImage:gradientState:");
}

namespace {
// NNGraph.before_updates: the Python callable, called (with the GIL) from the completed handler
// with the list of gradient states. Its exception becomes a C++ one with the same message, which
// the command buffer reports on stderr; mpsgrad.distributed records and re-raises its own errors.
struct PythonBeforeUpdates {
    std::shared_ptr<PythonReference> callable;
    void operator()(const std::vector<StatePtr>& states) const {
        py::gil_scoped_acquire gil;
        py::list list;
        for (const auto& state : states) list.append(py::cast(state));
        try {
            callable->object(list);
        } catch (py::error_already_set& e) {
            throw std::runtime_error(std::string("before_updates: ") + e.what());
        }
    }
};
// NNGraph.batch_normalization_sync: the Python callable, called (with the GIL) at the host points
// of the batch normalization nodes. Its exception fails the command buffer with its message.
struct PythonBatchNormalizationSync {
    std::shared_ptr<PythonReference> callable;
    void operator()(const StatePtr& state, BatchNormalizationSyncStage stage, int64_t count) const {
        if (pythonFinalizing()) throw std::runtime_error("batch_normalization_sync: the interpreter is shutting down");
        py::gil_scoped_acquire gil;
        const char* name = stage == BatchNormalizationSyncStage::Statistics ? "statistics" : "gradients";
        try {
            callable->object(py::cast(state), name, count);
        } catch (py::error_already_set& e) {
            throw std::runtime_error(std::string("batch_normalization_sync: ") + e.what());
        }
    }
};
// A read-write NNGraph property holding a Python callable in the hook `member` through the
// wrapper Hook (which keeps a PythonReference named `callable`): None clears it, anything else
// that is not callable is a TypeError saying what was `expected`.
template <class Hook, class Function>
void bindHookProperty(py::class_<NNGraph, std::shared_ptr<NNGraph>>& graph, const char* name,
                      Function NNGraph::*member, const char* expected, const char* doc) {
    const std::string prefix = std::string(name) + ": expected None or " + expected + ", got ";
    graph.def_property(
        name,
        [member](const NNGraph& g) -> py::object {
            auto* hook = (g.*member).template target<Hook>();
            return hook ? hook->callable->object : py::none();
        },
        [member, prefix](NNGraph& g, py::object hook) {
            if (hook.is_none()) {
                g.*member = nullptr;
                return;
            }
            if (!PyCallable_Check(hook.ptr())) throwTypeError(prefix, typeName(hook));
            g.*member = Hook{std::make_shared<PythonReference>(std::move(hook))};
        },
        doc);
}

constexpr const char* kBeforeUpdatesDoc =
    "mpsgrad extension (docs/graph.md \"Before the updates\"): None or a callable(gradient_states) run "
    "once the command buffer completed, with the gradient states of every trainable gradient node (a "
    "list), before their data sources update; it may change the gradients in place (mpsgrad.distributed "
    "averages them across processes). The trainable nodes must train UPDATE_DEVICE_CPU.";
constexpr const char* kBatchNormalizationSyncDoc =
    "mpsgrad extension (docs/distributed.md \"Synchronized batch normalization in a graph\"): None or a "
    "callable(state, stage, count) run at host points of the command buffer: stage 'statistics' right "
    "after a batch normalization node computed its batch mean and variance (before the normalization "
    "reads them), stage 'gradients' right after its gradient node summed dgamma and dbeta (before the "
    "input gradient reads them); state is the node's CNNBatchNormalizationState, count the values per "
    "channel summarised on this process. It may replace the values in place (mpsgrad.distributed "
    "synchronizes them across processes). An exception fails the command buffer.";
}  // namespace

void bindNNGraph(py::module_& m) {
    py::class_<NNGraph, std::shared_ptr<NNGraph>> graph(m, "NNGraph", "MPSNNGraph");
    bindHookProperty<PythonBeforeUpdates>(graph, "before_updates", &NNGraph::beforeUpdates,
                                          "a callable(gradient_states)", kBeforeUpdatesDoc);
    bindHookProperty<PythonBatchNormalizationSync>(graph, "batch_normalization_sync",
                                                   &NNGraph::batchNormalizationSync,
                                                   "a callable(state, stage, count)", kBatchNormalizationSyncDoc);
    graph
        .def(py::init([](const DeviceArg& device, py::object result, py::object needed) {
                 Device d = toDevice(device);
                 if (py::isinstance<NNImageNode>(result))
                     return std::make_shared<NNGraph>(d, result.cast<ImageNodePtr>(),
                                                      needed.is_none() ? true : toBool(needed, "result_image_is_needed"));
                 std::vector<ImageNodePtr> results;
                 for (auto item : py::iter(result)) {
                     if (!py::isinstance<NNImageNode>(item))
                         throwTypeError("result_images: expected NNImageNode objects, got ", typeName(item));
                     results.push_back(item.cast<ImageNodePtr>());
                 }
                 std::vector<bool> flags;
                 if (!needed.is_none())
                     for (auto item : py::iter(needed)) flags.push_back(toBool(item, "results_are_needed"));
                 return std::make_shared<NNGraph>(d, results, flags);
             }),
             py::arg("device"), py::arg("result_image"), py::arg("result_image_is_needed") = py::none(),
             "-initWithDevice:resultImage:resultImageIsNeeded: or, with a list of result images, "
             "-initWithDevice:resultImages:resultsAreNeeded: (a list of bools)")
        .def_property_readonly("device", &NNGraph::device)
        .def_readwrite("label", &NNGraph::label)
        .def_property("options", getter(&NNGraph::options), setter(&NNGraph::options, "options"),
                      "MPSKernel.options (KernelOptions bits). VERBOSE: the first encode prints debug_description to "
                      "stderr.")
        .def_property_readonly("debug_description", &NNGraph::debugDescription,
                               "-[MPSNNGraph debugDescription]: the source images, every filter node in encode order "
                               "(class, label, inputs -> result, states, training style) and the results; nodes are "
                               "named by their handle's label, else numbered")
        .def("__repr__", [](const NNGraph& g) {
            std::string text = "<NNGraph";
            if (!g.label.empty()) text += " '" + g.label + "'";
            return text + " on " + g.device().name() + ": " + std::to_string(g.nodes().size()) + " filter node(s), " +
                   std::to_string(g.sourceImageCount()) + " source image(s), " +
                   std::to_string(g.sourceStateCount()) + " source state(s)>";
        })
        .def_property_readonly("source_image_handles", [](const NNGraph& g) { return handleList(g.sourceImageHandles()); })
        .def_property_readonly("source_state_handles", [](const NNGraph& g) { return handleList(g.sourceStateHandles()); })
        .def_property_readonly("intermediate_image_handles",
                               [](const NNGraph& g) { return handleList(g.intermediateImageHandles()); })
        .def_property_readonly("result_state_handles", [](const NNGraph& g) { return handleList(g.resultStateHandles()); })
        .def_property_readonly("result_handle", [](const NNGraph& g) { return fromHandle(g.resultHandle()); })
        .def_property_readonly("result_image_is_needed", &NNGraph::resultImageIsNeeded)
        .def_readwrite("output_state_is_temporary", &NNGraph::outputStateIsTemporary)
        .def_readwrite("destination_image_allocator", &NNGraph::destinationImageAllocator)
        .def_readwrite("format", &NNGraph::format,
                       "Storage of the intermediates: FLOAT16 (default, as MPS) or FLOAT32. Results and exported "
                       "images are FLOAT32 unless their image node's format is set")
        .def_property_readonly(
            "last_encode_statistics",
            [](const NNGraph& g) {
                const GraphEncodeStatistics& s = g.lastEncodeStatistics();
                py::dict d;
                d["encoded_nodes"] = s.encodedNodes;
                d["intermediate_buffers"] = s.intermediateBuffers;
                d["reused_buffers"] = s.reusedBuffers;
                d["peak_live_buffers"] = s.peakLiveBuffers;
                d["fused_pairs"] = s.fusedPairs;
                return d;
            },
            "What the last encode did (mpsgrad): encoded_nodes (filter nodes encoded; a fused pair counts once), "
            "intermediate_buffers (buffers allocated for pooled intermediates), reused_buffers (allocations served "
            "by a released buffer), peak_live_buffers (most pooled buffers holding live images at once), "
            "fused_pairs (producer + neuron node pairs encoded as one kernel)")
        .def_property(
            "neuron_fusion",
            [](const NNGraph& g) {
                return g.neuronFusion == NeuronFusion::All ? "all" : g.neuronFusion == NeuronFusion::None ? "none" : "auto";
            },
            [](NNGraph& g, const std::string& mode) {
                if (mode == "auto") g.neuronFusion = NeuronFusion::Auto;
                else if (mode == "all") g.neuronFusion = NeuronFusion::All;
                else if (mode == "none") g.neuronFusion = NeuronFusion::None;
                else throwValueError("neuron_fusion: expected 'auto', 'all' or 'none', got '", mode, "'");
            },
            "mpsgrad: which convolution / fully connected / batch normalization nodes run as one kernel with the "
            "one neuron node reading their result (docs/graph.md \"Fusion\"): 'auto' (default) the pairs whose "
            "fused kernel is faster on the device, 'all' every fusable pair, 'none' no pair")
        .def_property_readonly("fused_node_pairs", &NNGraph::fusedNodePairs,
                               "mpsgrad: the (producer, neuron node) pairs that run as one kernel in the current "
                               "neuron_fusion mode")
        .def_property_readonly("nodes", &NNGraph::nodes, "The filter nodes in encode order")
        .def("reload_from_data_sources", &NNGraph::reloadFromDataSources)
        .def("read_count_for_source_image_at_index", &NNGraph::readCountForSourceImageAtIndex, py::arg("index"))
        .def("read_count_for_source_state_at_index", &NNGraph::readCountForSourceStateAtIndex, py::arg("index"))
        .def("encode",
             [](NNGraph& g, CommandBuffer& cb, py::object sources, py::object states, bool returnExtras) -> py::object {
                 ImageBatch images = toImageBatch(sources, "source_images");
                 StateBatch sourceStates = states.is_none() ? StateBatch{} : toStateBatch(states, "source_states");
                 ImageBatch intermediates;
                 StateBatch destinationStates;
                 ImagePtr result = g.encode(cb, images, sourceStates, returnExtras ? &intermediates : nullptr,
                                            returnExtras ? &destinationStates : nullptr);
                 if (!returnExtras) return py::cast(result);
                 return py::make_tuple(result, intermediates, destinationStates);
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("return_intermediates") = false,
             "-encodeToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:. Returns the "
             "result (None when not needed), or (result, intermediate_images, destination_states)")
        .def("encode_batch",
             [](NNGraph& g, CommandBuffer& cb, py::object sources, py::object states, bool returnExtras) -> py::object {
                 std::vector<ImageBatch> intermediates;
                 std::vector<StateBatch> destinationStates;
                 ImageBatch result = g.encodeBatch(cb, toImageBatches(sources, "source_images"),
                                                   toStateBatches(states, "source_states"),
                                                   returnExtras ? &intermediates : nullptr,
                                                   returnExtras ? &destinationStates : nullptr);
                 py::object first = result.empty() ? py::object(py::none()) : py::cast(result);
                 if (!returnExtras) return first;
                 return py::make_tuple(first, intermediates, destinationStates);
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("return_intermediates") = false,
             "-encodeBatchToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates: "
             "(one list of images per source handle, one list of states per source state handle)")
        .def("execute_async",
             [](NNGraph& g, py::object sources, py::function handler, py::object states) {
                 auto callback = std::make_shared<PythonReference>(handler);
                 auto [result, cb] = g.executeAsync(
                     toImageBatch(sources, "source_images"),
                     [callback](const ImagePtr& image, const std::string& error) {
                         if (pythonFinalizing()) return;
                         py::gil_scoped_acquire gil;
                         try {
                             if (error.empty())
                                 callback->object(image, py::none());
                             else
                                 callback->object(py::none(), py::str(error));
                         } catch (py::error_already_set& e) {
                             e.discard_as_unraisable("mpsgrad NNGraph.execute_async completion handler");
                         }
                     },
                     states.is_none() ? StateBatch{} : toStateBatch(states, "source_states"));
                 noteCommitted(cb);
                 return result;
             },
             py::arg("source_images"), py::arg("completion_handler"), py::arg("source_states") = py::none(),
             "-executeAsyncWithSourceImages:completionHandler: — the handler is called once with (image, None) "
             "or (None, error message); returns the image (valid once the handler ran)");
}

}  // namespace

// ---- for graph_serialization.cpp ----------------------------------------------------------------
HandlePtr graphHandle(const py::object& object) { return toHandle(object); }
py::object graphHandleObject(const HandlePtr& handle) { return fromHandle(handle); }

py::object dataSourceObject(const std::shared_ptr<CNNConvolutionDataSource>& source, bool onlyUpdatable) {
    if (auto* python = dynamic_cast<UpdatableConvolutionDataSource*>(source.get())) {
        if (!onlyUpdatable || python->supportsGPUUpdate() || python->supportsCPUUpdate()) return python->object();
        return py::none();
    }
    return onlyUpdatable ? py::none() : py::cast(source);
}

py::object dataSourceObject(const std::shared_ptr<CNNBatchNormalizationDataSource>& source, bool onlyUpdatable) {
    if (auto* python = dynamic_cast<UpdatableBatchNormalizationDataSource*>(source.get())) return python->object();
    return onlyUpdatable ? py::none() : py::cast(source);
}

// What CNNConvolutionNode(weights=) / CNNBatchNormalizationNode(data_source=) make of an object.
std::shared_ptr<CNNConvolutionDataSource> graphConvolutionDataSource(const py::object& object) {
    return std::make_shared<UpdatableConvolutionDataSource>(object);
}
std::shared_ptr<CNNBatchNormalizationDataSource> graphBatchNormalizationDataSource(const py::object& object) {
    if (UpdatableBatchNormalizationDataSource::updatable(object))
        return std::make_shared<UpdatableBatchNormalizationDataSource>(object);
    return toBatchNormalizationDataSource(object);
}

void bindGraph(py::module_& m) {
    bindNodes(m);
    bindTrainableNodes(m);
    bindFamilyNodes(m);
    bindShapeNodes(m);
    bindNormalizationNodes(m);
    bindLossNodes(m);
    bindGroupNormalizationNodes(m);
    bindNNGraph(m);
    bindGraphSerialization(m);
}

}  // namespace mpsgrad::python
