// Bindings of the YOLO loss (MPSCNNLoss.h, macOS 10.14): CNNYOLOLossDescriptor and CNNYOLOLoss.
#include <cstring>

#include "loss_bindings.h"
#include "kernels/yolo_loss.h"

namespace mpsgrad::python {
namespace {

// anchor_boxes: bytes-like float32 (width, height) pairs, as MPS's NSData, or a sequence / array
// of floats.
std::vector<float> toAnchorBoxes(py::handle value) {
    if (py::isinstance<py::bytes>(value) || py::isinstance<py::bytearray>(value) ||
        py::isinstance<py::memoryview>(value)) {
        const std::string raw = py::bytes(py::module_::import("builtins").attr("bytes")(value));
        if (raw.size() % sizeof(float) != 0)
            throwValueError("anchor_boxes: ", raw.size(), " bytes is not a whole number of float32 values");
        std::vector<float> out(raw.size() / sizeof(float));
        std::memcpy(out.data(), raw.data(), raw.size());
        return out;
    }
    auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(value);
    if (!array) throwTypeError("anchor_boxes: expected bytes (float32 width, height pairs) or a sequence of floats");
    return std::vector<float>(array.data(), array.data() + array.size());
}

py::bytes anchorBytes(const std::vector<float>& values) {
    return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

CNNYOLOLossDescriptor makeDescriptor(CNNLossType xy, CNNLossType wh, CNNLossType confidence, CNNLossType classes,
                                     CNNReductionType reduction, py::handle anchors, int64_t count) {
    return CNNYOLOLossDescriptor::make(xy, wh, confidence, classes, reduction, toAnchorBoxes(anchors), count);
}

}  // namespace

void bindYOLOLoss(py::module_& m) {
    using D = CNNYOLOLossDescriptor;
    const char* factoryDoc =
        "+cnnLossDescriptorWithXYLossType:WHLossType:confidenceLossType:classesLossType:reductionType:anchorBoxes:"
        "numberOfAnchorBoxes: (anchor_boxes: bytes of float32 (width, height) pairs, or a sequence of floats; "
        "every part descriptor gets reduction_type)";
    py::class_<D>(m, "CNNYOLOLossDescriptor",
                  "MPSCNNYOLOLossDescriptor: per anchor box X Y W H C F0..F(K-1) channels, K = "
                  "classes_loss_descriptor.number_of_classes (docs/losses_and_optimizers.md, YOLO loss). Validated "
                  "when a CNNYOLOLoss is made (ValueError naming the field).")
        .def(py::init(&makeDescriptor), py::arg("xy_loss_type"), py::arg("wh_loss_type"),
             py::arg("confidence_loss_type"), py::arg("classes_loss_type"), py::arg("reduction_type"),
             py::arg("anchor_boxes"), py::arg("number_of_anchor_boxes"), factoryDoc)
        .def_static("cnn_loss_descriptor_with_xy_loss_type", &makeDescriptor, py::arg("xy_loss_type"),
                    py::arg("wh_loss_type"), py::arg("confidence_loss_type"), py::arg("classes_loss_type"),
                    py::arg("reduction_type"), py::arg("anchor_boxes"), py::arg("number_of_anchor_boxes"), factoryDoc)
        .def_readwrite("xy_loss_descriptor", &D::xyLossDescriptor, "XYLossDescriptor (applied to sigmoid(X), sigmoid(Y))")
        .def_readwrite("wh_loss_descriptor", &D::whLossDescriptor, "WHLossDescriptor (applied to the raw W, H)")
        .def_readwrite("confidence_loss_descriptor", &D::confidenceLossDescriptor,
                       "confidenceLossDescriptor (SIGMOID_CROSS_ENTROPY: raw C, else sigmoid(C))")
        .def_readwrite("classes_loss_descriptor", &D::classesLossDescriptor,
                       "classesLossDescriptor (raw class scores; its number_of_classes is K)")
        .def_readwrite("reduction_type", &D::reductionType, "shared by the four part losses")
        .def_readwrite("reduce_across_batch", &D::reduceAcrossBatch, "macOS 11 [False]")
        .def_readwrite("rescore", &D::rescore, "confidence target = IOU of the prediction (else 1) [True]")
        .def_readwrite("scale_xy", &D::scaleXY, "[10.0]")
        .def_readwrite("scale_wh", &D::scaleWH, "[10.0]")
        .def_readwrite("scale_no_object", &D::scaleNoObject, "[5.0]")
        .def_readwrite("scale_object", &D::scaleObject, "[100.0]")
        .def_readwrite("scale_class", &D::scaleClass, "[2.0]")
        .def_readwrite("min_iou_for_object_presence", &D::minIOUForObjectPresence, "[0.7]")
        .def_readwrite("max_iou_for_object_absence", &D::maxIOUForObjectAbsence, "[0.3]")
        .def_readwrite("number_of_anchor_boxes", &D::numberOfAnchorBoxes)
        .def_property("anchor_boxes", [](const D& d) { return anchorBytes(d.anchorBoxes); },
                      [](D& d, py::handle value) { d.anchorBoxes = toAnchorBoxes(value); },
                      "float32 (width, height) pairs in grid-cell units, as bytes (MPS NSData); set from bytes or "
                      "a sequence of floats");

    py::class_<CNNYOLOLoss, CNNKernel, std::shared_ptr<CNNYOLOLoss>> yolo(
        m, "CNNYOLOLoss",
        "MPSCNNYOLOLoss: forward and backward in one encode; the destination receives dL/d(raw predictions), "
        "labels.loss_image the loss (the sum of the four internal losses)");
    yolo.def(py::init([](const DeviceArg& device, const CNNYOLOLossDescriptor& d) {
                 return std::make_shared<CNNYOLOLoss>(toDevice(device), d);
             }),
             py::arg("device"), py::arg("loss_descriptor"), "-[MPSCNNYOLOLoss initWithDevice:lossDescriptor:]")
        .def_property_readonly("loss_xy", &CNNYOLOLoss::lossXY, "MPSCNNYOLOLoss.lossXY (internal CNNLoss)")
        .def_property_readonly("loss_wh", &CNNYOLOLoss::lossWH, "MPSCNNYOLOLoss.lossWH")
        .def_property_readonly("loss_confidence", &CNNYOLOLoss::lossConfidence, "MPSCNNYOLOLoss.lossConfidence")
        .def_property_readonly("loss_classes", &CNNYOLOLoss::lossClasses, "MPSCNNYOLOLoss.lossClasses")
        .def_property_readonly("reduction_type", [](const CNNYOLOLoss& k) { return k.descriptor().reductionType; })
        .def_property_readonly("reduce_across_batch",
                               [](const CNNYOLOLoss& k) { return k.descriptor().reduceAcrossBatch; })
        .def_property_readonly("rescore", [](const CNNYOLOLoss& k) { return k.descriptor().rescore; })
        .def_property_readonly("scale_xy", [](const CNNYOLOLoss& k) { return k.descriptor().scaleXY; })
        .def_property_readonly("scale_wh", [](const CNNYOLOLoss& k) { return k.descriptor().scaleWH; })
        .def_property_readonly("scale_no_object", [](const CNNYOLOLoss& k) { return k.descriptor().scaleNoObject; })
        .def_property_readonly("scale_object", [](const CNNYOLOLoss& k) { return k.descriptor().scaleObject; })
        .def_property_readonly("scale_class", [](const CNNYOLOLoss& k) { return k.descriptor().scaleClass; })
        .def_property_readonly("min_iou_for_object_presence",
                               [](const CNNYOLOLoss& k) { return k.descriptor().minIOUForObjectPresence; })
        .def_property_readonly("max_iou_for_object_absence",
                               [](const CNNYOLOLoss& k) { return k.descriptor().maxIOUForObjectAbsence; })
        .def_property_readonly("number_of_anchor_boxes",
                               [](const CNNYOLOLoss& k) { return k.descriptor().numberOfAnchorBoxes; })
        .def_property_readonly("anchor_boxes", [](const CNNYOLOLoss& k) { return anchorBytes(k.descriptor().anchorBoxes); })
        .def_property_readonly("number_of_classes", &CNNYOLOLoss::numberOfClasses,
                               "K, from classes_loss_descriptor.number_of_classes");
    defLabelledLossEncodes<CNNYOLOLoss>(yolo);
}

}  // namespace mpsgrad::python
