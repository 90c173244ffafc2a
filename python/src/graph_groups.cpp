// Bindings of the instance and group normalization nodes of the graph API (MPSNNGraphNodes.h;
// cpp/mpsgrad/graph/filter_nodes_groups.h, docs/graph.md).
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"
#include "graph/filter_nodes_groups.h"

namespace mpsgrad::python {

// normalization_groups.cpp: a Python or ready-made data source as the C++ protocol object.
std::shared_ptr<CNNInstanceNormalizationDataSource> toInstanceNormalizationDataSource(py::object object);
std::shared_ptr<CNNGroupNormalizationDataSource> toGroupNormalizationDataSource(py::object object);

namespace {

// The Python object's optional update methods (the ready-made data sources have the CPU one).
class PythonStateBatchUpdates {
public:
    PythonStateBatchUpdates(py::object object, const char* cpuMethod)
        : object_(std::make_shared<PythonReference>(object)), cpuMethod_(cpuMethod),
          gpu_(py::hasattr(object, "update_gamma_and_beta_with_command_buffer")),
          cpu_(py::hasattr(object, cpuMethod)) {}
    bool gpu() const { return gpu_; }
    bool cpu() const { return cpu_; }
    py::object object() const { return object_->object; }

    std::shared_ptr<CNNNormalizationGammaAndBetaState> withCommandBuffer(CommandBuffer& cb, const StateBatch& states) {
        py::gil_scoped_acquire gil;
        py::object result =
            object_->object.attr("update_gamma_and_beta_with_command_buffer")(cb.shared_from_this(), stateList(states));
        if (result.is_none()) return nullptr;
        if (!py::isinstance<CNNNormalizationGammaAndBetaState>(result))
            throwTypeError("update_gamma_and_beta_with_command_buffer(): expected a CNNNormalizationGammaAndBetaState "
                           "or None, got ", typeName(result));
        return result.cast<std::shared_ptr<CNNNormalizationGammaAndBetaState>>();
    }
    bool withStateBatch(const StateBatch& states) {
        if (pythonFinalizing()) return false;
        py::gil_scoped_acquire gil;
        try {
            py::object result = object_->object.attr(cpuMethod_)(stateList(states));
            return !result.is_none() && PyObject_IsTrue(result.ptr()) == 1;
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable("mpsgrad normalization data source update");
            return false;
        }
    }

private:
    static py::list stateList(const StateBatch& states) {
        py::list list;
        for (const auto& s : states) list.append(s);
        return list;
    }
    std::shared_ptr<PythonReference> object_;
    const char* cpuMethod_;
    bool gpu_, cpu_;
};

// A family's data source protocol forwarded to the converted object, plus the update methods.
template <class Protocol>
class UpdatableNormalizationDataSource : public Protocol, public NormalizationStateBatchUpdatable {
public:
    UpdatableNormalizationDataSource(std::shared_ptr<Protocol> inner, py::object object, const char* cpuMethod)
        : inner_(std::move(inner)), updates_(object, cpuMethod) {}
    int64_t numberOfFeatureChannels() override { return inner_->numberOfFeatureChannels(); }
    const float* gamma() override { return inner_->gamma(); }
    const float* beta() override { return inner_->beta(); }
    std::string label() override { return inner_->label(); }
    std::optional<float> epsilon() override { return inner_->epsilon(); }
    bool load() override { return inner_->load(); }
    void purge() override { inner_->purge(); }
    bool supportsGPUUpdate() const override { return updates_.gpu(); }
    bool supportsCPUUpdate() const override { return updates_.cpu(); }
    std::shared_ptr<CNNNormalizationGammaAndBetaState> updateGammaAndBetaWithCommandBuffer(
        CommandBuffer& cb, const StateBatch& states) override {
        return updates_.withCommandBuffer(cb, states);
    }
    bool updateGammaAndBetaWithStateBatch(const StateBatch& states) override { return updates_.withStateBatch(states); }
    // The application object this wraps (what graph serialization gives back and pickles).
    py::object object() const { return updates_.object(); }

protected:
    std::shared_ptr<Protocol> inner_;

private:
    PythonStateBatchUpdates updates_;
};

class UpdatableInstanceNormalizationDataSource final
    : public UpdatableNormalizationDataSource<CNNInstanceNormalizationDataSource> {
public:
    explicit UpdatableInstanceNormalizationDataSource(py::object object)
        : UpdatableNormalizationDataSource(toInstanceNormalizationDataSource(object), object,
                                           "update_gamma_and_beta_with_instance_normalization_state_batch") {}
};

class UpdatableGroupNormalizationDataSource final
    : public UpdatableNormalizationDataSource<CNNGroupNormalizationDataSource> {
public:
    explicit UpdatableGroupNormalizationDataSource(py::object object)
        : UpdatableNormalizationDataSource(toGroupNormalizationDataSource(object), object,
                                           "update_gamma_and_beta_with_group_normalization_state_batch") {}
    int64_t numberOfGroups() override { return inner_->numberOfGroups(); }
};

template <class Node, class GradientNode, class Updatable>
void bindFamily(py::module_& m, const char* name, const char* gradientName, const char* doc) {
    py::class_<Node, NNFilterNode, std::shared_ptr<Node>>(m, name, doc)
        .def(py::init([](const ImageNodePtr& source, py::object dataSource) {
                 if (dataSource.is_none()) throwTypeError("data_source: expected a data source, got None");
                 return std::make_shared<Node>(source, std::make_shared<Updatable>(dataSource));
             }),
             py::arg("source"), py::arg("data_source"), "+nodeWithSource:dataSource:")
        .def_readwrite("training_style", &Node::trainingStyle, "MPSNNTrainableNode.trainingStyle [UPDATE_DEVICE_GPU]");
    py::class_<GradientNode, NNGradientFilterNode, std::shared_ptr<GradientNode>>(m, gradientName, doc)
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"), "+nodeWithSourceGradient:sourceImage:gradientState:")
        .def_readwrite("training_style", &GradientNode::trainingStyle,
                       "MPSNNTrainableNode.trainingStyle (copied from the forward node by the builders)");
}

// The data source object of a node (graph.data_sources, pickle): the application object the node
// wraps, or a decoded graph's ready-made one; None when only updatable ones are asked for and it
// cannot update.
template <class Protocol>
py::object normalizationSourceObject(const std::shared_ptr<Protocol>& source, bool onlyUpdatable) {
    if (auto* python = dynamic_cast<UpdatableNormalizationDataSource<Protocol>*>(source.get())) {
        if (!onlyUpdatable || python->supportsGPUUpdate() || python->supportsCPUUpdate()) return python->object();
        return py::none();
    }
    return onlyUpdatable ? py::none() : py::cast(source);
}

}  // namespace

// ---- for graph_serialization.cpp ----------------------------------------------------------------
py::object dataSourceObject(const std::shared_ptr<CNNInstanceNormalizationDataSource>& source, bool onlyUpdatable) {
    return normalizationSourceObject(source, onlyUpdatable);
}
py::object dataSourceObject(const std::shared_ptr<CNNGroupNormalizationDataSource>& source, bool onlyUpdatable) {
    return normalizationSourceObject(source, onlyUpdatable);
}
// What CNNInstanceNormalizationNode(data_source=) / CNNGroupNormalizationNode(data_source=) make of an object.
std::shared_ptr<CNNInstanceNormalizationDataSource> graphInstanceNormalizationDataSource(const py::object& object) {
    return std::make_shared<UpdatableInstanceNormalizationDataSource>(object);
}
std::shared_ptr<CNNGroupNormalizationDataSource> graphGroupNormalizationDataSource(const py::object& object) {
    return std::make_shared<UpdatableGroupNormalizationDataSource>(object);
}

void bindGroupNormalizationNodes(py::module_& m) {
    bindFamily<CNNInstanceNormalizationNode, CNNInstanceNormalizationGradientNode,
               UpdatableInstanceNormalizationDataSource>(
        m, "CNNInstanceNormalizationNode", "CNNInstanceNormalizationGradientNode",
        "MPSCNNInstanceNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's "
        "update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or "
        "update_gamma_and_beta_with_instance_normalization_state_batch(states) (CPU style) is called");
    bindFamily<CNNGroupNormalizationNode, CNNGroupNormalizationGradientNode, UpdatableGroupNormalizationDataSource>(
        m, "CNNGroupNormalizationNode", "CNNGroupNormalizationGradientNode",
        "MPSCNNGroupNormalizationNode / ...GradientNode (MPSNNTrainableNode): the data source's "
        "update_gamma_and_beta_with_command_buffer(command_buffer, states) (GPU style) or "
        "update_gamma_and_beta_with_group_normalization_state_batch(states) (CPU style) is called");
}

}  // namespace mpsgrad::python
