// Bindings of the batch helpers of MPSImage.h / MPSState.h, MPSStateResourceList and
// MPSSupportsMTLDevice (core/batch_helpers.h). Every helper touches each distinct object of a
// batch once, in the order of its first appearance (docs/user_guide.md, "Image and state batches").
#include "bindings.h"
#include "core/batch_helpers.h"

namespace mpsgrad::python {

namespace {

// MPSImageBatchIterate's block: iterator(image, index) -> int, negative to stop.
int64_t iterateImages(py::handle batch, py::handle iterator) {
    if (!PyCallable_Check(iterator.ptr()))
        throwTypeError("iterator: expected a callable(image, index) -> int, got ", typeName(iterator));
    ImageBatch images = toImageBatch(batch, "batch");
    return imageBatchIterate(images, [&](const ImagePtr& image, size_t index) {
        py::object result = iterator(image, index);
        return toInt64(result, "iterator: the returned value");
    });
}

std::string listRepr(const StateResourceList& list) {
    std::string out = "StateResourceList(buffer_sizes=[";
    for (size_t i = 0; i < list.bufferSizes().size(); ++i)
        out += (i ? ", " : "") + std::to_string(list.bufferSizes()[i]);
    return out + "])";
}

}  // namespace

void bindBatchHelpers(py::module_& m) {
    m.def("image_batch_synchronize", [](py::handle batch, CommandBuffer& cb) {
        imageBatchSynchronize(toImageBatch(batch, "batch"), cb);
    }, py::arg("batch"), py::arg("command_buffer"),
          "MPSImageBatchSynchronize: synchronize_on_command_buffer(command_buffer) on each distinct image of the "
          "batch (once per image however often it appears); ValueError when an image cannot be used with the "
          "command buffer.");
    m.def("image_batch_resource_size", [](py::handle batch) {
        return imageBatchResourceSize(toImageBatch(batch, "batch"));
    }, py::arg("batch"),
          "MPSImageBatchResourceSize: the sum of resource_size over the distinct images of the batch (an image "
          "that appears several times counts once).");
    m.def("image_batch_iterate", &iterateImages, py::arg("batch"), py::arg("iterator"),
          "MPSImageBatchIterate: calls iterator(image, index) once for each distinct image of the batch, in "
          "order, with the index of its first appearance; a negative return value stops the iteration. Returns "
          "the value of the last call (0 for an empty batch).");
    m.def("state_batch_synchronize", [](py::handle batch, CommandBuffer& cb) {
        stateBatchSynchronize(toStateBatch(batch, "batch"), cb);
    }, py::arg("batch"), py::arg("command_buffer"),
          "MPSStateBatchSynchronize: synchronize_on_command_buffer(command_buffer) on each distinct state of the "
          "batch; ValueError when a state cannot be used with the command buffer.");
    m.def("state_batch_resource_size", [](py::handle batch) {
        return stateBatchResourceSize(toStateBatch(batch, "batch"));
    }, py::arg("batch"),
          "MPSStateBatchResourceSize: the sum of resource_size over the distinct states of the batch (a state "
          "shared by several entries counts once).");

    py::class_<StateResourceList>(m, "StateResourceList",
                                  "MPSStateResourceList: the buffers a new State gets (State(device, "
                                  "resource_list=...), State.temporary(command_buffer, resource_list=...)).")
        .def(py::init([](py::object sizes) {
                 std::vector<size_t> list;
                 if (!sizes.is_none()) {
                     if (!py::isinstance<py::sequence>(sizes) || py::isinstance<py::str>(sizes))
                         throwTypeError("buffer_sizes: expected a list of int, got ", typeName(sizes));
                     for (auto size : sizes) list.push_back(size_t(toUInt64(size, "buffer_sizes")));
                 }
                 return StateResourceList(list);
             }),
             py::arg("buffer_sizes") = py::none(),
             "+[MPSStateResourceList resourceList] (no argument) / +resourceListWithBufferSizes: (a list of byte "
             "sizes, each > 0)")
        .def("append_buffer", [](StateResourceList& list, py::handle size) {
            list.appendBuffer(size_t(toUInt64(size, "size")));
        }, py::arg("size"), "-[MPSStateResourceList appendBuffer:] (size in bytes, > 0)")
        .def_property_readonly("buffer_sizes", &StateResourceList::bufferSizes, "The byte sizes listed, in order.")
        .def("__len__", [](const StateResourceList& list) { return list.bufferSizes().size(); })
        .def("__repr__", &listRepr);

    m.def("supports_mtl_device", [](py::handle device) {
        if (device.is_none()) return supportsMTLDevice(nullptr);
        if (!py::isinstance<Device>(device))
            throwTypeError("device: expected a Device or None, got ", typeName(device));
        return supportsMTLDevice(&device.cast<const Device&>());
    }, py::arg("device"),
          "MPSSupportsMTLDevice: True when mpsgrad runs on `device` (every Device it can create: the CPU, and "
          "Metal where built); False for None.");
}

}  // namespace mpsgrad::python
