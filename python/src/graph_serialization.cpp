// Python side of graph serialization (cpp/mpsgrad/graph/graph_serialization.h; docs/serialization.md
// "Graphs"): NNGraph.to_bytes(), NNGraph.from_bytes(data, device=None, data_sources=None, handles=None),
// NNGraph.data_sources and pickle.
//
// to_bytes() captures the weights of the graph's data sources; pickle carries, next to those bytes,
// the application data source objects that can update (so a training graph keeps training after a
// round trip) and the handle objects, which Python pickles itself.
#include "bindings.h"
#include "graph/filter_nodes.h"
#include "graph/filter_nodes_groups.h"
#include "graph/filter_nodes_transpose.h"
#include "graph/graph_serialization.h"

namespace mpsgrad::python {

// graph.cpp
HandlePtr graphHandle(const py::object& object);
py::object graphHandleObject(const HandlePtr& handle);
py::object dataSourceObject(const std::shared_ptr<CNNConvolutionDataSource>& source, bool onlyUpdatable);
py::object dataSourceObject(const std::shared_ptr<CNNBatchNormalizationDataSource>& source, bool onlyUpdatable);
std::shared_ptr<CNNConvolutionDataSource> graphConvolutionDataSource(const py::object& object);
std::shared_ptr<CNNBatchNormalizationDataSource> graphBatchNormalizationDataSource(const py::object& object);
// graph_groups.cpp
py::object dataSourceObject(const std::shared_ptr<CNNInstanceNormalizationDataSource>& source, bool onlyUpdatable);
py::object dataSourceObject(const std::shared_ptr<CNNGroupNormalizationDataSource>& source, bool onlyUpdatable);
std::shared_ptr<CNNInstanceNormalizationDataSource> graphInstanceNormalizationDataSource(const py::object& object);
std::shared_ptr<CNNGroupNormalizationDataSource> graphGroupNormalizationDataSource(const py::object& object);

namespace {

// The bytes of a bytes-like argument (bytes, bytearray, memoryview, uint8 array).
std::string bytesArgument(py::handle data) {
    if (data.is_none() || py::isinstance<py::str>(data) || !PyObject_CheckBuffer(data.ptr()))
        throwTypeError("data: expected a bytes-like object (bytes, bytearray, memoryview), got ", typeName(data));
    return py::bytes(py::reinterpret_borrow<py::object>(data)).cast<std::string>();
}

Device deviceArgument(const py::object& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (py::isinstance<Device>(device)) return device.cast<Device>();
    throwTypeError("device: expected a Device, a device name ('cpu', 'metal') or None, got ", typeName(device));
}

// The data sources of the graph as Python objects in blob order: convolution, batch, instance, then
// group normalization ones.
py::list dataSourceList(const GraphObjects& objects, bool onlyUpdatable) {
    py::list list;
    auto append = [&](const auto& table) {
        for (const auto& source : table) list.append(dataSourceObject(source, onlyUpdatable));
    };
    append(objects.convolution);
    append(objects.batchNormalization);
    append(objects.instanceNormalization);
    append(objects.groupNormalization);
    return list;
}

// The data source pointers in the same order (to name the node of an entry).
std::vector<const void*> dataSourcePointers(const GraphObjects& objects) {
    std::vector<const void*> pointers;
    auto append = [&](const auto& table) {
        for (const auto& source : table) pointers.push_back(source.get());
    };
    append(objects.convolution);
    append(objects.batchNormalization);
    append(objects.instanceNormalization);
    append(objects.groupNormalization);
    return pointers;
}

// The node that holds `source` (for error messages).
std::string nodeHolding(const NNGraph& graph, const void* source) {
    for (const FilterNodePtr& node : graph.nodes()) {
        const void* held = nullptr;
        if (auto* conv = dynamic_cast<const CNNConvolutionNode*>(node.get())) held = conv->dataSource().get();
        if (auto* grad = dynamic_cast<const CNNConvolutionGradientNode*>(node.get())) held = grad->explicitWeights().get();
        if (auto* bn = dynamic_cast<const CNNBatchNormalizationNode*>(node.get())) held = bn->dataSource().get();
        if (auto* t = dynamic_cast<const CNNConvolutionTransposeNode*>(node.get())) held = t->dataSource().get();
        if (auto* in = dynamic_cast<const CNNInstanceNormalizationNode*>(node.get())) held = in->dataSource().get();
        if (auto* gn = dynamic_cast<const CNNGroupNormalizationNode*>(node.get())) held = gn->dataSource().get();
        if (held == source) return std::string(node->className()) + " '" + node->label + "'";
    }
    return "a node";
}

// from_bytes' hook: the caller's data sources and handles in place of the captured ones.
void adopt(GraphObjects& captured, const py::object& dataSources, const py::object& handles) {
    if (!dataSources.is_none()) {
        py::list list(dataSources);
        size_t nConv = captured.convolution.size(), nBN = captured.batchNormalization.size();
        size_t nIN = captured.instanceNormalization.size(), nGN = captured.groupNormalization.size();
        if (list.size() != nConv + nBN + nIN + nGN)
            throwValueError("data_sources: the serialized graph has ", nConv + nBN + nIN + nGN, " data source(s) (",
                            nConv, " convolution, then ", nBN, " batch, ", nIN, " instance and ", nGN,
                            " group normalization), got ", list.size(), " entries");
        size_t next = 0;  // entries in the order of dataSourceList; None keeps the captured one
        auto replace = [&](auto& table, auto convert) {
            for (auto& entry : table) {
                py::object object = list[next++];
                if (!object.is_none()) entry = convert(object);
            }
        };
        replace(captured.convolution, graphConvolutionDataSource);
        replace(captured.batchNormalization, graphBatchNormalizationDataSource);
        replace(captured.instanceNormalization, graphInstanceNormalizationDataSource);
        replace(captured.groupNormalization, graphGroupNormalizationDataSource);
    }
    if (!handles.is_none()) {
        py::list list(handles);
        if (list.size() != captured.handles.size())
            throwValueError("handles: the serialized graph has ", captured.handles.size(), " handle(s), got ",
                            list.size(), " entries");
        for (size_t i = 0; i < list.size(); ++i)
            if (!list[i].is_none()) captured.handles[i] = graphHandle(list[i]);
    }
}

// Pickle: the bytes, the device's name, the data sources that can update and the handle objects.
// An updatable data source that pickle refuses is a ValueError naming its node; a handle that pickle
// refuses travels as its label.
py::tuple reduceGraph(const py::object& self) {
    const NNGraph& graph = self.cast<const NNGraph&>();
    py::object dumps = py::module_::import("pickle").attr("dumps");
    GraphObjects objects = graphObjects(graph);
    py::list sources = dataSourceList(objects, true);
    std::vector<const void*> pointers = dataSourcePointers(objects);
    for (size_t i = 0; i < sources.size(); ++i) {
        if (sources[i].is_none()) continue;
        try {
            dumps(sources[i]);
        } catch (py::error_already_set& e) {
            throwValueError("data_sources: the data source of ", nodeHolding(graph, pointers[i]),
                            " can update, so pickle must carry it, but pickle refused it (", e.what(),
                            "); make it picklable or use to_bytes() (weights only)");
        }
    }
    py::list handles;
    for (const HandlePtr& handle : objects.handles) {
        py::object object = graphHandleObject(handle);
        try {
            dumps(object);
            handles.append(object);
        } catch (py::error_already_set&) {
            handles.append(py::none());
        }
    }
    py::bytes blob = [&] {
        std::vector<uint8_t> data = serializeGraph(graph);
        return py::bytes(reinterpret_cast<const char*>(data.data()), data.size());
    }();
    return py::make_tuple(py::type::handle_of(self).attr("from_bytes"),
                          py::make_tuple(blob, graph.device().name(), sources, handles));
}

}  // namespace

void bindGraphSerialization(py::module_& m) {
    py::object cls = m.attr("NNGraph");
    py::setattr(cls, "to_bytes", py::cpp_function(
        [](const NNGraph& graph) {
            std::vector<uint8_t> data = serializeGraph(graph);
            return py::bytes(reinterpret_cast<const char*>(data.data()), data.size());
        },
        py::name("to_bytes"), py::is_method(cls),
        "-encodeWithCoder: the graph as bytes: every node, its parameters and properties, handles (as labels) and "
        "the weights of its data sources (docs/serialization.md \"Graphs\"). Call it when the graph's work has "
        "completed. ValueError naming the node for a node class or custom policy a graph blob cannot hold."));
    py::object classmethod = py::module_::import("builtins").attr("classmethod");
    py::setattr(cls, "from_bytes", classmethod(py::cpp_function(
        [](py::object, py::handle data, py::object device, py::object dataSources, py::object handles) {
            std::string bytes = bytesArgument(data);
            Device d = deviceArgument(device);
            auto graph = deserializeGraph(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), d,
                                          [&](GraphObjects& captured) { adopt(captured, dataSources, handles); });
            return graph;
        },
        py::name("from_bytes"), py::arg("cls"), py::arg("data"), py::arg("device") = py::none(),
        py::arg("data_sources") = py::none(), py::arg("handles") = py::none(),
        "-initWithCoder:device: a graph from to_bytes() data on `device` (a Device, 'cpu', 'metal' or None). Data "
        "sources are ready-made ones holding the captured weights unless `data_sources` (one entry per entry of "
        "the original's `data_sources`, None to keep the captured one) gives objects back; a training graph "
        "needs data sources that can update. `handles`: objects replacing the handles, in blob order (pickle "
        "passes them). SerializationError (a ValueError) for malformed data.")));
    py::setattr(cls, "data_sources", py::module_::import("builtins").attr("property")(py::cpp_function(
        [](const NNGraph& graph) { return dataSourceList(graphObjects(graph), false); }, py::is_method(cls),
        "The data sources of the graph's nodes, each once: convolution / fully connected ones in node order, then "
        "batch, instance, then group normalization ones (the order of from_bytes' data_sources)")));
    auto reduce = [](py::object self) { return reduceGraph(self); };
    py::setattr(cls, "__reduce_ex__", py::cpp_function([reduce](py::object self, int) { return reduce(self); },
                                                       py::name("__reduce_ex__"), py::is_method(cls),
                                                       py::arg("protocol")));
    py::setattr(cls, "__reduce__", py::cpp_function(reduce, py::name("__reduce__"), py::is_method(cls)));
}

}  // namespace mpsgrad::python
