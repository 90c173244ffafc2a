// Bindings of the loss family (MPSCNNLoss.h): CNNLossType, CNNReductionType, CNNLossDataDescriptor,
// CNNLossLabels, CNNLossDescriptor, CNNLoss, and the 10.15 split loss: NNForwardLoss, NNLossGradient,
// NNInitialGradient.
#include "loss_bindings.h"
#include "kernels/loss.h"

namespace mpsgrad::python {
namespace {

LossSize toLossSize(py::handle value, const char* what) {
    if (!py::isinstance<py::sequence>(value) || py::len(value) != 3)
        throwTypeError(what, ": expected (width, height, feature_channels)");
    auto seq = py::reinterpret_borrow<py::sequence>(value);
    return LossSize{seq[0].cast<int64_t>(), seq[1].cast<int64_t>(), seq[2].cast<int64_t>()};
}

// data: an array of the layout's shape (HWC: (height, width, channels); CHW: (channels, height,
// width)), or any array of width * height * channels floats with an explicit size.
CNNLossDataDescriptor descriptorFromData(const py::object& data, DataLayout layout, const py::object& size) {
    auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(data);
    if (!array) throwTypeError("data: expected array-like float data");
    LossSize s;
    if (!size.is_none()) {
        s = toLossSize(size, "size");
    } else {
        if (array.ndim() != 3)
            throwValueError("data: without size, expected a 3-D array ((height, width, channels) for HWC, "
                            "(channels, height, width) for CHW), got ", array.ndim(), " dimensions");
        if (layout == DataLayout::HeightxWidthxFeatureChannels)
            s = LossSize{int64_t(array.shape(1)), int64_t(array.shape(0)), int64_t(array.shape(2))};
        else
            s = LossSize{int64_t(array.shape(2)), int64_t(array.shape(1)), int64_t(array.shape(0))};
    }
    std::vector<float> values(array.data(), array.data() + array.size());
    return CNNLossDataDescriptor(std::move(values), layout, s);
}

ImagePtr optionalImage(py::handle value, const char* what) {
    if (value.is_none()) return nullptr;
    if (!py::isinstance<Image>(value))
        throwTypeError(what, ": expected an Image or None, got ", std::string(py::repr(py::type::of(value))));
    return value.cast<ImagePtr>();
}
}  // namespace

std::vector<LossLabelsPtr> toLossLabelsList(py::handle value) {
    if (!py::isinstance<py::sequence>(value)) throwTypeError("labels: expected a list of CNNLossLabels");
    std::vector<LossLabelsPtr> out;
    for (py::handle item : value) {
        if (!py::isinstance<CNNLossLabels>(item))
            throwTypeError("labels: expected a list of CNNLossLabels, got an item of type ",
                           std::string(py::repr(py::type::of(item))));
        out.push_back(item.cast<LossLabelsPtr>());
    }
    return out;
}

namespace {

// Loss gradient states as a list of NNGradientState (their C++ class is not a Python class).
py::list gradientStates(const StateBatch& states) {
    py::list out;
    for (const StatePtr& state : states) out.append(std::static_pointer_cast<NNGradientState>(state));
    return out;
}

// An optional image batch (None: empty).
ImageBatch optionalBatch(py::handle value, const char* what) {
    return value.is_none() ? ImageBatch{} : toImageBatch(value, what);
}

void bindSplitLoss(py::module_& m) {
    py::class_<NNLossKernel, std::shared_ptr<NNLossKernel>>(
        m, "NNLossKernel", "The properties NNForwardLoss (a CNNKernel) and NNLossGradient (a CNNBinaryKernel) share (set: "
        "ValueError if invalid)")
        .def_property_readonly("loss_type", [](const NNLossKernel& k) { return k.descriptor().lossType; })
        .def_property_readonly("reduction_type", [](const NNLossKernel& k) { return k.descriptor().reductionType; })
        .def_property_readonly("number_of_classes",
                               [](const NNLossKernel& k) { return k.descriptor().numberOfClasses; })
        .def_property("weight", [](const NNLossKernel& k) { return k.descriptor().weight; }, &NNLossKernel::setWeight)
        .def_property("label_smoothing", [](const NNLossKernel& k) { return k.descriptor().labelSmoothing; },
                      &NNLossKernel::setLabelSmoothing)
        .def_property("epsilon", [](const NNLossKernel& k) { return k.descriptor().epsilon; },
                      &NNLossKernel::setEpsilon)
        .def_property("delta", [](const NNLossKernel& k) { return k.descriptor().delta; }, &NNLossKernel::setDelta)
        .def_property("reduce_across_batch", [](const NNLossKernel& k) { return k.descriptor().reduceAcrossBatch; },
                      &NNLossKernel::setReduceAcrossBatch, "macOS 11: one loss for the whole batch");

    py::class_<NNForwardLoss, CNNKernel, NNLossKernel, std::shared_ptr<NNForwardLoss>>(
        m, "NNForwardLoss",
        "MPSNNForwardLoss: the loss alone; the destination receives the loss (source-sized for reduction NONE, "
        "else 1x1x1 per image)")
        .def(py::init([](const DeviceArg& device, const CNNLossDescriptor& d) {
                 return std::make_shared<NNForwardLoss>(toDevice(device), d);
             }),
             py::arg("device"), py::arg("loss_descriptor"), "-[MPSNNForwardLoss initWithDevice:lossDescriptor:]")
        .def("encode_batch", [](NNForwardLoss& k, CommandBuffer& cb, py::handle sources, py::handle labels,
                                py::handle weights, py::handle destinations, py::handle destinationStates,
                                py::handle stateIsTemporary) -> py::object {
                 ImageBatch src = toImageBatch(sources, "source_images");
                 ImageBatch lab = toImageBatch(labels, "labels");
                 ImageBatch w = optionalBatch(weights, "weights");
                 StateBatch states = toStateBatch(destinationStates, "destination_states");
                 if (!stateIsTemporary.is_none()) {
                     const bool temporary = toBool(stateIsTemporary, "destination_state_is_temporary");
                     if (!destinations.is_none() || !states.empty())
                         throwValueError("destination_state_is_temporary: applies to the returning form only; with "
                                         "destination_images pass destination_states (from result_state_batch)");
                     StateBatch produced;
                     ImageBatch dst = k.encodeBatch(cb, src, lab, w, &produced, temporary);
                     return py::make_tuple(dst, gradientStates(produced));
                 }
                 if (destinations.is_none()) {
                     if (!states.empty()) throwValueError("destination_states: pass destination_images with them");
                     return py::cast(k.encodeBatch(cb, src, lab, w));
                 }
                 ImageBatch dst = toImageBatch(destinations, "destination_images");
                 k.encodeBatch(cb, src, lab, w, states, dst);
                 return py::cast(dst);
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("labels"), py::arg("weights") = py::none(),
             py::arg("destination_images") = py::none(), py::kw_only(), py::arg("destination_states") = py::none(),
             py::arg("destination_state_is_temporary") = py::none(),
             "-encodeBatchToCommandBuffer:sourceImages:labels:weights:destinationStates:destinationImages: "
             "(labels, weights: image batches; destination_states: from result_state_batch, they receive the "
             "dynamic properties for NNLossGradient; returns the loss images). With "
             "destination_state_is_temporary=True/False: ...weights:destinationStates:destinationStateIsTemporary:, "
             "returns (loss images, states).")
        .def("result_state_batch", [](const NNForwardLoss& k, py::handle sources, py::handle, py::handle) {
                 return gradientStates(k.resultStateBatch(toImageBatch(sources, "source_images")));
             },
             py::arg("source_images"), py::arg("source_states") = py::none(), py::arg("destination_images") = py::none(),
             "-resultStateBatchForSourceImage:sourceStates:destinationImage: (one gradient state per source)")
        .def("temporary_result_state_batch", [](const NNForwardLoss& k, CommandBuffer& cb, py::handle sources,
                                                py::handle, py::handle) {
                 return gradientStates(k.temporaryResultStateBatch(cb, toImageBatch(sources, "source_images")));
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("destination_images") = py::none(),
             "-temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:");

    py::class_<NNLossGradient, CNNBinaryKernel, NNLossKernel, std::shared_ptr<NNLossGradient>>(
        m, "NNLossGradient",
        "MPSNNLossGradient: destination = source_gradient * d(loss)/d(prediction) (compute_label_gradients: "
        "d(loss)/d(labels)); source_gradient is 1x1x1 per image for a reduced loss (broadcast).")
        .def(py::init([](const DeviceArg& device, const CNNLossDescriptor& d) {
                 return std::make_shared<NNLossGradient>(toDevice(device), d);
             }),
             py::arg("device"), py::arg("loss_descriptor"), "-[MPSNNLossGradient initWithDevice:lossDescriptor:]")
        .def_property("compute_label_gradients", &NNLossGradient::computeLabelGradients,
                      [](NNLossGradient& k, py::handle value) {
                          k.setComputeLabelGradients(toBool(value, "compute_label_gradients"));
                      },
                      "MPSNNLossGradient.computeLabelGradients: the destination receives the gradient with respect "
                      "to the labels instead of the predictions [False]")
        .def("encode_batch", [](NNLossGradient& k, CommandBuffer& cb, py::handle gradients, py::handle sources,
                                py::handle labels, py::handle weights, py::handle destinations,
                                py::handle sourceStates) {
                 ImageBatch g = toImageBatch(gradients, "source_gradients");
                 ImageBatch src = toImageBatch(sources, "source_images");
                 ImageBatch lab = toImageBatch(labels, "labels");
                 ImageBatch w = optionalBatch(weights, "weights");
                 StateBatch states = toStateBatch(sourceStates, "source_states");
                 if (destinations.is_none()) return k.encodeBatch(cb, g, src, lab, w, states);
                 ImageBatch dst = toImageBatch(destinations, "destination_gradients");
                 k.encodeBatch(cb, g, src, lab, w, states, dst);
                 return dst;
             },
             py::arg("command_buffer"), py::arg("source_gradients"), py::arg("source_images"), py::arg("labels"),
             py::arg("weights") = py::none(), py::arg("destination_gradients") = py::none(), py::kw_only(),
             py::arg("source_states") = py::none(),
             "-encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:sourceStates:"
             "[destinationGradients:] (source_states: NNForwardLoss's destination states, whose weight, "
             "label_smoothing, epsilon and delta replace the kernel's; returns the gradient images)");

    py::class_<NNInitialGradient, CNNKernel, std::shared_ptr<NNInitialGradient>>(
        m, "NNInitialGradient", "MPSNNInitialGradient: an image of the source's size filled with 1.0")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNInitialGradient>(toDevice(device)); }),
             py::arg("device"), "-[MPSNNInitialGradient initWithDevice:]")
        .def("encode", [](NNInitialGradient& k, CommandBuffer& cb, const ImagePtr& source, py::object destination) {
                 if (destination.is_none()) return k.encodeBatch(cb, {source}).at(0);
                 ImagePtr d = optionalImage(destination, "destination_image");
                 k.encodeBatch(cb, {source}, {d});
                 return d;
             },
             py::arg("command_buffer"), py::arg("source_image"), py::arg("destination_image") = py::none(),
             "-encodeToCommandBuffer:sourceImage:[destinationImage:]")
        .def("encode_batch", [](NNInitialGradient& k, CommandBuffer& cb, py::handle sources, py::handle destinations) {
                 ImageBatch src = toImageBatch(sources, "source_images");
                 if (destinations.is_none()) return k.encodeBatch(cb, src);
                 ImageBatch dst = toImageBatch(destinations, "destination_images");
                 k.encodeBatch(cb, src, dst);
                 return dst;
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_images") = py::none(),
             "-encodeBatchToCommandBuffer:sourceImages:[destinationImages:]");
}

}  // namespace

void bindLoss(py::module_& m) {
    py::enum_<CNNLossType>(m, "CNNLossType", "MPSCNNLossType")
        .value("MEAN_ABSOLUTE_ERROR", CNNLossType::MeanAbsoluteError)
        .value("MEAN_SQUARED_ERROR", CNNLossType::MeanSquaredError)
        .value("SOFTMAX_CROSS_ENTROPY", CNNLossType::SoftMaxCrossEntropy)
        .value("SIGMOID_CROSS_ENTROPY", CNNLossType::SigmoidCrossEntropy)
        .value("CATEGORICAL_CROSS_ENTROPY", CNNLossType::CategoricalCrossEntropy)
        .value("HINGE", CNNLossType::Hinge)
        .value("HUBER", CNNLossType::Huber)
        .value("COSINE_DISTANCE", CNNLossType::CosineDistance)
        .value("LOG", CNNLossType::Log)
        .value("KULLBACK_LEIBLER_DIVERGENCE", CNNLossType::KullbackLeiblerDivergence);
    py::enum_<CNNReductionType>(m, "CNNReductionType", "MPSCNNReductionType")
        .value("NONE", CNNReductionType::None)
        .value("SUM", CNNReductionType::Sum)
        .value("MEAN", CNNReductionType::Mean)
        .value("SUM_BY_NON_ZERO_WEIGHTS", CNNReductionType::SumByNonZeroWeights);

    py::class_<CNNLossDataDescriptor>(
        m, "CNNLossDataDescriptor",
        "MPSCNNLossDataDescriptor: labels or weights data (copied) with its layout, size and strides")
        .def(py::init(&descriptorFromData), py::arg("data"),
             py::arg_v("layout", DataLayout::HeightxWidthxFeatureChannels, "DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS"),
             py::arg("size") = py::none(),
             "+cnnLossDataDescriptorWithData:layout:size: (size (width, height, channels); None: from a 3-D array "
             "of the layout's shape)")
        .def_property_readonly("layout", &CNNLossDataDescriptor::layout)
        .def_property_readonly("size", [](const CNNLossDataDescriptor& d) {
            return py::make_tuple(d.size().width, d.size().height, d.size().channels);
        }, "(width, height, channels)")
        .def_property("bytes_per_row", &CNNLossDataDescriptor::bytesPerRow, &CNNLossDataDescriptor::setBytesPerRow)
        .def_property("bytes_per_image", &CNNLossDataDescriptor::bytesPerImage,
                      &CNNLossDataDescriptor::setBytesPerImage);

    py::class_<CNNLossLabels, State, std::shared_ptr<CNNLossLabels>>(
        m, "CNNLossLabels",
        "MPSCNNLossLabels: the labels (and optional weights) of one image, and the loss image the loss writes")
        .def(py::init([](const DeviceArg& device, py::object labels, py::object lossImageSize, py::object weights) {
                 const Device dev = toDevice(device);
                 const LossSize size = lossImageSize.is_none() ? LossSize{1, 1, 1}
                                                                : toLossSize(lossImageSize, "loss_image_size");
                 if (py::isinstance<Image>(labels))
                     return std::make_shared<CNNLossLabels>(dev, size, labels.cast<ImagePtr>(),
                                                            optionalImage(weights, "weights"));
                 if (!py::isinstance<CNNLossDataDescriptor>(labels))
                     throwTypeError("labels: expected a CNNLossDataDescriptor or an Image, got ",
                                    std::string(py::repr(py::type::of(labels))));
                 if (!weights.is_none() && !py::isinstance<CNNLossDataDescriptor>(weights))
                     throwTypeError("weights: with a labels descriptor, expected a CNNLossDataDescriptor or None");
                 const CNNLossDataDescriptor w = weights.is_none() ? labels.cast<CNNLossDataDescriptor>()
                                                                   : weights.cast<CNNLossDataDescriptor>();
                 return std::make_shared<CNNLossLabels>(dev, size, labels.cast<CNNLossDataDescriptor>(),
                                                        weights.is_none() ? nullptr : &w);
             }),
             py::arg("device"), py::arg("labels"), py::arg("loss_image_size") = py::none(),
             py::arg("weights") = py::none(),
             "-initWithDevice:labelsDescriptor: / -initWithDevice:lossImageSize:labelsDescriptor:weightsDescriptor: "
             "(descriptors: the data is copied) / -initWithDevice:lossImageSize:labelsImage:weightsImage: (images: "
             "retained). loss_image_size: (1, 1, 1) (default) or, for reduction NONE, the labels' width and height with at "
             "most their channels (the source's). Labels and weights may have more channels than the loss source: "
             "the first ones are read")
        .def_property_readonly("loss_image", &CNNLossLabels::lossImage, "MPSCNNLossLabels.lossImage")
        .def_property_readonly("labels_image", &CNNLossLabels::labelsImage, "MPSCNNLossLabels.labelsImage")
        .def_property_readonly("weights_image", &CNNLossLabels::weightsImage, "MPSCNNLossLabels.weightsImage");

    py::class_<CNNLossDescriptor>(m, "CNNLossDescriptor",
                                  "MPSCNNLossDescriptor (+ scale_gradient_by_reduction, mpsgrad, default True)")
        .def(py::init([](CNNLossType type, CNNReductionType reduction) {
                 return CNNLossDescriptor::make(type, reduction);
             }),
             py::arg("loss_type"), py::arg("reduction_type"), "+cnnLossDescriptorWithType:reductionType:")
        .def_readwrite("loss_type", &CNNLossDescriptor::lossType)
        .def_readwrite("reduction_type", &CNNLossDescriptor::reductionType)
        .def_readwrite("weight", &CNNLossDescriptor::weight, "scalar weight when the labels have no weights [1.0]")
        .def_readwrite("label_smoothing", &CNNLossDescriptor::labelSmoothing, "[0.0]")
        .def_readwrite("number_of_classes", &CNNLossDescriptor::numberOfClasses, "[1]")
        .def_readwrite("epsilon", &CNNLossDescriptor::epsilon, "Log loss [1e-7]")
        .def_readwrite("delta", &CNNLossDescriptor::delta, "Huber [1.0]")
        .def_readwrite("reduce_across_batch", &CNNLossDescriptor::reduceAcrossBatch,
                       "one loss value for the whole batch of a batch encode [False]")
        .def_readwrite("scale_gradient_by_reduction", &CNNLossDescriptor::scaleGradientByReduction,
                       "the gradient is that of the reduced loss (MEAN / SUM_BY_NON_ZERO_WEIGHTS divide it) [True]");

    py::class_<CNNLoss, CNNKernel, std::shared_ptr<CNNLoss>> loss(
        m, "CNNLoss",
        "MPSCNNLoss: forward and backward in one encode; the destination receives dL/dy, labels.loss_image the loss");
    loss.def(py::init([](const DeviceArg& device, const CNNLossDescriptor& d) {
                 return std::make_shared<CNNLoss>(toDevice(device), d);
             }),
             py::arg("device"), py::arg("loss_descriptor"), "-[MPSCNNLoss initWithDevice:lossDescriptor:]")
        .def_property_readonly("loss_type", [](const CNNLoss& k) { return k.descriptor().lossType; })
        .def_property_readonly("reduction_type", [](const CNNLoss& k) { return k.descriptor().reductionType; })
        .def_property_readonly("weight", [](const CNNLoss& k) { return k.descriptor().weight; })
        .def_property_readonly("label_smoothing", [](const CNNLoss& k) { return k.descriptor().labelSmoothing; })
        .def_property_readonly("number_of_classes", [](const CNNLoss& k) { return k.descriptor().numberOfClasses; })
        .def_property_readonly("epsilon", [](const CNNLoss& k) { return k.descriptor().epsilon; })
        .def_property_readonly("delta", [](const CNNLoss& k) { return k.descriptor().delta; })
        .def_property_readonly("reduce_across_batch", [](const CNNLoss& k) { return k.descriptor().reduceAcrossBatch; });
    defLabelledLossEncodes<CNNLoss>(loss);

    bindSplitLoss(m);
}

}  // namespace mpsgrad::python
