// Bindings of the reshape and pad family (MPSNNReshape.h).
#include "bindings.h"
#include "kernels/reshape_pad.h"

namespace mpsgrad::python {
namespace {

Device shapingDevice(const DeviceArg& device) { return toDevice(device, "device"); }

// An ImageCoordinate from an ImageCoordinate or an (x, y, channel) sequence of ints >= 0.
ImageCoordinate toImageCoordinate(py::handle value, const char* what) {
    if (py::isinstance<ImageCoordinate>(value)) return value.cast<ImageCoordinate>();
    if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value) || py::len(value) != 3)
        throwTypeError(what, ": expected an ImageCoordinate or an (x, y, channel) tuple, got ", typeName(value));
    py::sequence s = value.cast<py::sequence>();
    const uint64_t limit = uint64_t(INT32_MAX);
    return ImageCoordinate{toUInt64(s[0], what, limit), toUInt64(s[1], what, limit), toUInt64(s[2], what, limit)};
}

// The explicit shape of NNReshape's macOS 11 encode forms: all three or none.
bool reshapedShape(py::handle w, py::handle h, py::handle c, int64_t out[3]) {
    const bool any = !w.is_none() || !h.is_none() || !c.is_none();
    if (!any) return false;
    if (w.is_none() || h.is_none() || c.is_none())
        throwValueError("reshaped_width / reshaped_height / reshaped_feature_channels: give all three or none");
    out[0] = toInt64(w, "reshaped_width", 1, INT32_MAX);
    out[1] = toInt64(h, "reshaped_height", 1, INT32_MAX);
    out[2] = toInt64(c, "reshaped_feature_channels", 1, INT32_MAX);
    return true;
}

CommandBuffer& commandBufferArgument(py::handle value) {
    if (value.is_none() || !py::isinstance<CommandBuffer>(value))
        throwTypeError("command_buffer: expected a CommandBuffer, got ", typeName(value));
    return value.cast<CommandBuffer&>();
}

ImagePtr imageArgument(py::handle value, const char* what) {
    if (value.is_none() || !py::isinstance<Image>(value))
        throwTypeError(what, ": expected an Image, got ", typeName(value));
    return value.cast<ImagePtr>();
}

}  // namespace

void bindReshapePad(py::module_& m) {
    py::class_<ImageCoordinate>(m, "ImageCoordinate", "MPSImageCoordinate: a pixel position and feature channel")
        .def(py::init([](py::handle x, py::handle y, py::handle channel) {
                 return toImageCoordinate(py::make_tuple(x, y, channel), "ImageCoordinate");
             }),
             py::arg("x") = 0, py::arg("y") = 0, py::arg("channel") = 0)
        .def_readonly("x", &ImageCoordinate::x)
        .def_readonly("y", &ImageCoordinate::y)
        .def_readonly("channel", &ImageCoordinate::channel)
        .def("__eq__", [](const ImageCoordinate& a, py::handle b) {
            if (!py::isinstance<ImageCoordinate>(b)) return false;
            const auto& o = b.cast<const ImageCoordinate&>();
            return a.x == o.x && a.y == o.y && a.channel == o.channel;
        })
        .def("__repr__", [](const ImageCoordinate& c) {
            return "ImageCoordinate(x=" + std::to_string(c.x) + ", y=" + std::to_string(c.y) +
                   ", channel=" + std::to_string(c.channel) + ")";
        });

    py::class_<NNReshapeGradientState, NNGradientState, std::shared_ptr<NNReshapeGradientState>>(
        m, "NNReshapeGradientState", "The MPSNNGradientState NNReshape writes for NNReshapeGradient (both shapes)");
    py::class_<NNPadGradientState, NNGradientState, std::shared_ptr<NNPadGradientState>>(
        m, "NNPadGradientState",
        "The MPSNNGradientState NNPad writes for NNPadGradient (the source index every written element copied)");

    py::class_<NNReshape, CNNKernel, std::shared_ptr<NNReshape>>(
        m, "NNReshape",
        "MPSNNReshape: copies the whole source (its channels after source_feature_channel_offset / max count) into a "
        "destination of another shape with the same number of elements, in HWC order (docs/reshape_pad.md). offset.x/y "
        "must be 0 and clip_rect must not cut the destination.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNReshape>(shapingDevice(device)); }),
             py::arg("device"), "-[MPSNNReshape initWithDevice:]")
        .def(
            "encode",
            [](NNReshape& k, py::object command_buffer, py::handle source, py::handle destinationState,
               py::handle destinationImage, py::handle stateIsTemporary, py::handle w, py::handle h,
               py::handle c) -> py::object {
                int64_t shape[3];
                if (!reshapedShape(w, h, c, shape))  // MPSCNNKernel's forms
                    return py::type::of<CNNKernel>().attr("encode")(py::cast(&k, py::return_value_policy::reference),
                                                                    command_buffer, source,
                                                                    destinationState, destinationImage,
                                                                    py::arg("destination_state_is_temporary") =
                                                                        stateIsTemporary);
                if (!destinationState.is_none() || !destinationImage.is_none())
                    throwValueError("reshaped_width: the explicit-shape encode forms return the destination; pass "
                                    "neither destination_state nor destination_image");
                CommandBuffer& cb = commandBufferArgument(command_buffer);
                ImagePtr src = imageArgument(source, "source_image");
                if (stateIsTemporary.is_none()) return py::cast(k.encode(cb, src, shape[0], shape[1], shape[2]));
                StatePtr produced;
                ImagePtr dst = k.encode(cb, src, &produced, toBool(stateIsTemporary, "destination_state_is_temporary"),
                                        shape[0], shape[1], shape[2]);
                return py::make_tuple(dst, produced);
            },
            py::arg("command_buffer"), py::arg("source_image"), py::arg("destination_state") = py::none(),
            py::arg("destination_image") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(), py::arg("reshaped_width") = py::none(),
            py::arg("reshaped_height") = py::none(), py::arg("reshaped_feature_channels") = py::none(),
            "MPSCNNKernel's encode forms (see CNNKernel.encode; the returning forms keep the source's shape), and "
            "with reshaped_width/height/feature_channels the macOS 11 forms "
            "-encodeToCommandBuffer:sourceImage:[destinationState:destinationStateIsTemporary:]reshapedWidth:"
            "reshapedHeight:reshapedFeatureChannels: (returns the image, or (image, state) with "
            "destination_state_is_temporary).")
        .def(
            "encode_batch",
            [](NNReshape& k, py::object command_buffer, py::handle sources, py::handle destinationStates,
               py::handle destinationImages, py::handle stateIsTemporary, py::handle w, py::handle h,
               py::handle c) -> py::object {
                int64_t shape[3];
                if (!reshapedShape(w, h, c, shape))
                    return py::type::of<CNNKernel>().attr("encode_batch")(
                        py::cast(&k, py::return_value_policy::reference), command_buffer, sources,
                                                                          destinationStates, destinationImages,
                                                                          py::arg("destination_state_is_temporary") =
                                                                              stateIsTemporary);
                if (!destinationStates.is_none() || !destinationImages.is_none())
                    throwValueError("reshaped_width: the explicit-shape encode forms return the destinations; pass "
                                    "neither destination_states nor destination_images");
                CommandBuffer& cb = commandBufferArgument(command_buffer);
                ImageBatch src = toImageBatch(sources, "source_images");
                if (stateIsTemporary.is_none())
                    return py::cast(k.encodeBatch(cb, src, nullptr, false, shape[0], shape[1], shape[2]));
                StateBatch produced;
                ImageBatch dst = k.encodeBatch(cb, src, &produced,
                                               toBool(stateIsTemporary, "destination_state_is_temporary"), shape[0],
                                               shape[1], shape[2]);
                return py::make_tuple(dst, produced);
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_states") = py::none(),
            py::arg("destination_images") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(), py::arg("reshaped_width") = py::none(),
            py::arg("reshaped_height") = py::none(), py::arg("reshaped_feature_channels") = py::none(),
            "MPSCNNKernel's batch encode forms, and with reshaped_width/height/feature_channels "
            "-encodeBatchToCommandBuffer:sourceImages:[destinationStates:destinationStateIsTemporary:]reshapedWidth:"
            "reshapedHeight:reshapedFeatureChannels: (macOS 11).");

    py::class_<NNReshapeGradient, CNNGradientKernel, std::shared_ptr<NNReshapeGradient>>(
        m, "NNReshapeGradient",
        "MPSNNReshapeGradient: reshapes the incoming gradient back into the forward source's shape. "
        "source_gradient = dL/dY, source_image = the forward source X, gradient_state = NNReshape's result state.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNReshapeGradient>(shapingDevice(device)); }),
             py::arg("device"), "-[MPSNNReshapeGradient initWithDevice:]");

    py::class_<NNPad, CNNKernel, std::shared_ptr<NNPad>>(
        m, "NNPad",
        "MPSNNPad: copies the source into the destination, filling outside the source by edge_mode: ZERO, CONSTANT "
        "(fill_value or the per-channel fill_value_array), CLAMP, MIRROR (np.pad 'reflect'), MIRROR_WITH_EDGE "
        "(np.pad 'symmetric'); also pads feature channels. Destination pixel clip_rect.origin + p reads source pixel "
        "offset + p; the returning encode forms size the destination by padding_size_before/after (docs/reshape_pad.md).")
        .def(py::init([](const DeviceArg& device, py::handle before, py::handle after, py::handle fill) {
                 ImageCoordinate b = before.is_none() ? ImageCoordinate{} : toImageCoordinate(before, "padding_size_before");
                 ImageCoordinate a = after.is_none() ? ImageCoordinate{} : toImageCoordinate(after, "padding_size_after");
                 std::vector<float> values;
                 if (!fill.is_none()) {
                     auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(fill);
                     if (!arr || arr.ndim() != 1)
                         throwTypeError("fill_value_array: expected a 1-D sequence of floats, got ", typeName(fill));
                     values.assign(arr.data(), arr.data() + arr.size());
                 }
                 return std::make_shared<NNPad>(shapingDevice(device), b, a, std::move(values));
             }),
             py::arg("device"), py::arg("padding_size_before") = py::none(), py::arg("padding_size_after") = py::none(),
             py::arg("fill_value_array") = py::none(),
             "-[MPSNNPad initWithDevice:[paddingSizeBefore:paddingSizeAfter:[fillValueArray:]]]: sizes as "
             "ImageCoordinate or (x, y, channel); fill_value_array holds one value per channel written (CONSTANT).")
        .def_property(
            "padding_size_before", [](const NNPad& k) { return k.paddingSizeBefore; },
            [](NNPad& k, py::handle v) { k.paddingSizeBefore = toImageCoordinate(v, "padding_size_before"); },
            "MPSNNPad.paddingSizeBefore (x, y: the returning encode forms; channel: always)")
        .def_property(
            "padding_size_after", [](const NNPad& k) { return k.paddingSizeAfter; },
            [](NNPad& k, py::handle v) { k.paddingSizeAfter = toImageCoordinate(v, "padding_size_after"); },
            "MPSNNPad.paddingSizeAfter")
        .def_property("fill_value", getter(&NNPad::fillValue), setter(&NNPad::fillValue, "fill_value"),
                      "MPSNNPad.fillValue (edge mode CONSTANT; ignored when fill_value_array was given)")
        .def_property_readonly("fill_value_array", &NNPad::fillValueArray,
                               "The initializer's per-channel fill values (empty: fill_value is used)");

    py::class_<NNPadGradient, CNNGradientKernel, std::shared_ptr<NNPadGradient>>(
        m, "NNPadGradient",
        "MPSNNPadGradient: dX = the sum of G over every element the forward NNPad copied from each source element "
        "(a slice of G for ZERO / CONSTANT). Every element of dX is written; those the forward pass did not read get 0.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNPadGradient>(shapingDevice(device)); }),
             py::arg("device"), "-[MPSNNPadGradient initWithDevice:]");
}

}  // namespace mpsgrad::python
