// What the bindings of the loss kernels that take labels share (python/src/loss.cpp for CNNLoss,
// python/src/yolo_loss.cpp for CNNYOLOLoss): the labels list and the two labelled encode forms.
#pragma once

#include <vector>

#include "bindings.h"
#include "kernels/loss.h"

namespace mpsgrad::python {

// labels: a list of CNNLossLabels (TypeError naming the parameter otherwise).
std::vector<LossLabelsPtr> toLossLabelsList(py::handle value);

// encode(command_buffer, source_image, labels, destination_image=None) and
// encode_batch(command_buffer, source_images, labels, destination_images=None): the forms of
// MPSCNNLoss and MPSCNNYOLOLoss, both returning the gradient image(s).
template <class Kernel, class PyClass>
void defLabelledLossEncodes(PyClass& cls) {
    cls.def(
           "encode",
           [](Kernel& k, CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels,
              py::object destination) -> ImagePtr {
               if (destination.is_none()) return k.encode(cb, source, labels);
               if (!py::isinstance<Image>(destination))
                   throwTypeError("destination_image: expected an Image or None, got ", typeName(destination));
               ImagePtr dst = destination.cast<ImagePtr>();
               k.encode(cb, source, labels, dst);
               return dst;
           },
           py::arg("command_buffer"), py::arg("source_image"), py::arg("labels"),
           py::arg("destination_image") = py::none(),
           "-encodeToCommandBuffer:sourceImage:labels:[destinationImage:]; returns the gradient image")
        .def(
            "encode_batch",
            [](Kernel& k, CommandBuffer& cb, py::handle sources, py::handle labels, py::handle destinations) {
                ImageBatch src = toImageBatch(sources, "source_images");
                if (destinations.is_none()) return k.encodeBatch(cb, src, toLossLabelsList(labels));
                ImageBatch dst = toImageBatch(destinations, "destination_images");
                k.encodeBatch(cb, src, toLossLabelsList(labels), dst);
                return dst;
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("labels"),
            py::arg("destination_images") = py::none(),
            "-encodeBatchToCommandBuffer:sourceImages:labels:[destinationImages:]; returns the gradient images");
}

}  // namespace mpsgrad::python
