// Bindings of the kernel hierarchy (MPSKernel, MPSCNNKernel, MPSCNNBinaryKernel,
// MPSCNNGradientKernel) with every encode form, and the padding policies.
#include "bindings.h"

namespace mpsgrad::python {
namespace {

ImagePtr requireImage(py::handle value, const char* what) {
    if (value.is_none() || !py::isinstance<Image>(value))
        throwTypeError(what, ": expected an Image, got ", std::string(py::repr(value.get_type())));
    return value.cast<ImagePtr>();
}

StatePtr optionalState(py::handle value, const char* what) {
    if (value.is_none()) return nullptr;
    if (!py::isinstance<State>(value))
        throwTypeError(what, ": expected a State, got ", std::string(py::repr(value.get_type())));
    return value.cast<StatePtr>();
}

class PyNNPadding : public NNPadding {
public:
    uint32_t paddingMethod() const override {
        PYBIND11_OVERRIDE_PURE_NAME(uint32_t, NNPadding, "padding_method", paddingMethod);
    }
    std::string label() const override { PYBIND11_OVERRIDE_NAME(std::string, NNPadding, "label", label); }
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sources, const StateBatch& states, Kernel& kernel,
                                               const ImageDescriptor& suggested) override {
        py::gil_scoped_acquire gil;
        py::function override = py::get_override(static_cast<const NNPadding*>(this), "destination_image_descriptor");
        if (!override) return suggested;
        py::object kernelObject;
        try {
            kernelObject = py::cast(kernel.shared_from_this());
        } catch (const std::bad_weak_ptr&) {
            kernelObject = py::cast(&kernel, py::return_value_policy::reference);
        }
        py::object result = override(sources, states, kernelObject, suggested);
        if (!py::isinstance<ImageDescriptor>(result))
            throwTypeError("padding.destination_image_descriptor(): expected an ImageDescriptor, got ",
                           std::string(py::repr(result.get_type())));
        return result.cast<ImageDescriptor>();
    }
    std::shared_ptr<NNPadding> inverse() const override {
        PYBIND11_OVERRIDE_NAME(std::shared_ptr<NNPadding>, NNPadding, "inverse", inverse);
    }
};

}  // namespace

void bindKernel(py::module_& m) {
    py::class_<Kernel, std::shared_ptr<Kernel>>(m, "Kernel", "MPSKernel")
        .def_property_readonly("device", &Kernel::device)
        .def_readwrite("options", &Kernel::options, "MPSKernel.options (KernelOptions bits)")
        .def_readwrite("label", &Kernel::label);

    py::class_<NNPadding, PyNNPadding, std::shared_ptr<NNPadding>>(
        m, "NNPadding",
        "@protocol MPSNNPadding. Subclass it and implement padding_method(); with the CUSTOM bit also "
        "destination_image_descriptor(source_images, source_states, kernel, suggested) -> ImageDescriptor.")
        .def(py::init<>())
        .def("padding_method", &NNPadding::paddingMethod, "-paddingMethod")
        .def("label", &NNPadding::label, "-label")
        .def("destination_image_descriptor", &NNPadding::destinationImageDescriptor, py::arg("source_images"),
             py::arg("source_states"), py::arg("kernel"), py::arg("suggested"),
             "-destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:")
        .def("inverse", &NNPadding::inverse, "-inverse");
    py::class_<NNDefaultPadding, NNPadding, std::shared_ptr<NNDefaultPadding>>(m, "NNDefaultPadding",
                                                                               "MPSNNDefaultPadding")
        .def(py::init([](uint32_t method) { return NNDefaultPadding::paddingWithMethod(method); }), py::arg("method"),
             "+[MPSNNDefaultPadding paddingWithMethod:]")
        .def_static("padding_with_method", &NNDefaultPadding::paddingWithMethod, py::arg("method"),
                    "+[MPSNNDefaultPadding paddingWithMethod:]")
        .def_static("padding_for_tensorflow_average_pooling", &NNDefaultPadding::paddingForTensorflowAveragePooling,
                    "+[MPSNNDefaultPadding paddingForTensorflowAveragePooling]")
        .def_static("padding_for_tensorflow_average_pooling_valid_only",
                    &NNDefaultPadding::paddingForTensorflowAveragePoolingValidOnly,
                    "+[MPSNNDefaultPadding paddingForTensorflowAveragePoolingValidOnly]");
    m.def("padding_destination_size", &padding::destinationSize, py::arg("source_size"), py::arg("stride"),
          py::arg("kernel_size"), py::arg("style"), "DestSize of the MPSNNPadding arithmetic (style -1, 0 or 1).");
    m.def("padding_offset", [](int64_t s, int64_t stride, int64_t k, uint32_t method, const std::string& axis, bool reverse) {
        if (axis != "x" && axis != "y") throwValueError("axis: expected 'x' or 'y', got '", axis, "'");
        return padding::offset(s, stride, k, method, axis == "x" ? padding::Axis::X : padding::Axis::Y, reverse);
    }, py::arg("source_size"), py::arg("stride"), py::arg("kernel_size"), py::arg("method"), py::arg("axis") = "x",
          py::arg("reverse") = false, "The window-centre offset the MPSNNPadding arithmetic gives along an axis.");

    py::class_<CNNKernel, Kernel, std::shared_ptr<CNNKernel>>(m, "CNNKernel", "MPSCNNKernel")
        .def_property("offset", [](const CNNKernel& k) { return k.offset; },
                      [](CNNKernel& k, py::handle v) { k.offset = toOffset(v, "offset"); }, "MPSCNNKernel.offset")
        .def_property("clip_rect", [](const CNNKernel& k) { return k.clipRect; },
                      [](CNNKernel& k, py::handle v) { k.clipRect = toRegion(v, "clip_rect"); }, "MPSCNNKernel.clipRect")
        .def_readwrite("destination_feature_channel_offset", &CNNKernel::destinationFeatureChannelOffset)
        .def_readwrite("source_feature_channel_offset", &CNNKernel::sourceFeatureChannelOffset)
        .def_readwrite("source_feature_channel_max_count", &CNNKernel::sourceFeatureChannelMaxCount)
        .def_readwrite("edge_mode", &CNNKernel::edgeMode)
        .def_readwrite("padding", &CNNKernel::padding)
        .def_readwrite("destination_image_allocator", &CNNKernel::destinationImageAllocator)
        .def_property_readonly("kernel_width", &CNNKernel::kernelWidth)
        .def_property_readonly("kernel_height", &CNNKernel::kernelHeight)
        .def_property_readonly("stride_in_pixels_x", &CNNKernel::strideInPixelsX)
        .def_property_readonly("stride_in_pixels_y", &CNNKernel::strideInPixelsY)
        .def_property_readonly("dilation_rate_x", &CNNKernel::dilationRateX)
        .def_property_readonly("dilation_rate_y", &CNNKernel::dilationRateY)
        .def_property_readonly("is_backwards", &CNNKernel::isBackwards)
        .def_property_readonly("is_state_modified", &CNNKernel::isStateModified)
        .def("is_result_state_reused_across_batch", &CNNKernel::isResultStateReusedAcrossBatch)
        .def("append_batch_barrier", &CNNKernel::appendBatchBarrier)
        .def(
            "encode",
            [](CNNKernel& k, CommandBuffer& cb, py::handle source, py::handle destinationState,
               py::handle destinationImage, py::handle stateIsTemporary) -> py::object {
                ImagePtr src = requireImage(source, "source_image");
                StatePtr state = optionalState(destinationState, "destination_state");
                if (!destinationImage.is_none()) {
                    ImagePtr dst = requireImage(destinationImage, "destination_image");
                    k.encode(cb, src, state, dst);
                    return py::cast(dst);
                }
                if (!stateIsTemporary.is_none()) {
                    StatePtr produced;
                    ImagePtr dst = k.encode(cb, src, &produced, stateIsTemporary.cast<bool>());
                    return py::make_tuple(dst, produced);
                }
                if (state) {
                    ImageDescriptor d = k.destinationImageDescriptor({src}, {});
                    ImagePtr dst = (k.destinationImageAllocator ? k.destinationImageAllocator
                                                                : ImageAllocator::temporaryAllocator())
                                       ->imageForCommandBuffer(cb, d, &k);
                    k.encode(cb, src, state, dst);
                    return py::cast(dst);
                }
                return py::cast(k.encode(cb, src));
            },
            py::arg("command_buffer"), py::arg("source_image"), py::arg("destination_state") = py::none(),
            py::arg("destination_image") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "Encode forms of MPSCNNKernel:\n"
            "- destination_image given: -encodeToCommandBuffer:sourceImage:[destinationState:]destinationImage: "
            "(uses `offset` as set, ignores `padding`); returns destination_image.\n"
            "- otherwise -encodeToCommandBuffer:sourceImage: (padding policy applied, result allocated); with "
            "destination_state_is_temporary=True/False it is "
            "-encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary: and returns "
            "(image, state).")
        .def(
            "encode_batch",
            [](CNNKernel& k, CommandBuffer& cb, py::handle sources, py::handle destinationStates,
               py::handle destinationImages, py::handle stateIsTemporary) -> py::object {
                ImageBatch src = toImageBatch(sources, "source_images");
                StateBatch states = toStateBatch(destinationStates, "destination_states");
                if (!destinationImages.is_none()) {
                    ImageBatch dst = toImageBatch(destinationImages, "destination_images");
                    k.encodeBatch(cb, src, states, dst);
                    return py::cast(dst);
                }
                if (!stateIsTemporary.is_none()) {
                    StateBatch produced;
                    ImageBatch dst = k.encodeBatch(cb, src, &produced, stateIsTemporary.cast<bool>());
                    return py::make_tuple(dst, produced);
                }
                if (!states.empty()) throwValueError("destination_states: pass destination_images with them");
                return py::cast(k.encodeBatch(cb, src));
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_states") = py::none(),
            py::arg("destination_images") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "-encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages: and the returning "
            "forms (see encode).")
        .def("result_state", [](CNNKernel& k, py::handle source, py::handle states, py::handle dst) {
            return k.resultState(requireImage(source, "source_image"), toStateBatch(states, "source_states"),
                                 dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("source_image"), py::arg("source_states") = py::none(), py::arg("destination_image") = py::none(),
             "-resultStateForSourceImage:sourceStates:destinationImage:")
        .def("temporary_result_state", [](CNNKernel& k, CommandBuffer& cb, py::handle source, py::handle states,
                                          py::handle dst) {
            return k.temporaryResultState(cb, requireImage(source, "source_image"), toStateBatch(states, "source_states"),
                                          dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("command_buffer"), py::arg("source_image"), py::arg("source_states") = py::none(),
             py::arg("destination_image") = py::none(),
             "-temporaryResultStateForCommandBuffer:sourceImage:sourceStates:destinationImage:")
        .def("result_state_batch", [](CNNKernel& k, py::handle sources, py::handle, py::handle dsts) {
            return k.resultStateBatch(toImageBatch(sources, "source_images"), toImageBatch(dsts, "destination_images"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(), py::arg("destination_images") = py::none(),
             "-resultStateBatchForSourceImage:sourceStates:destinationImage:")
        .def("temporary_result_state_batch", [](CNNKernel& k, CommandBuffer& cb, py::handle sources, py::handle,
                                                py::handle dsts) {
            return k.temporaryResultStateBatch(cb, toImageBatch(sources, "source_images"),
                                               toImageBatch(dsts, "destination_images"));
        }, py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("destination_images") = py::none(),
             "-temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:")
        .def("destination_image_descriptor", [](CNNKernel& k, py::handle sources, py::handle states) {
            return k.destinationImageDescriptor(toImageBatch(sources, "source_images"),
                                                toStateBatch(states, "source_states"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(),
             "-destinationImageDescriptorForSourceImages:sourceStates: (runs the padding policy; sets `offset`)");

    py::class_<CNNBinaryKernel, Kernel, std::shared_ptr<CNNBinaryKernel>>(m, "CNNBinaryKernel", "MPSCNNBinaryKernel")
        .def_property("primary_offset", [](const CNNBinaryKernel& k) { return k.primaryOffset; },
                      [](CNNBinaryKernel& k, py::handle v) { k.primaryOffset = toOffset(v, "primary_offset"); })
        .def_property("secondary_offset", [](const CNNBinaryKernel& k) { return k.secondaryOffset; },
                      [](CNNBinaryKernel& k, py::handle v) { k.secondaryOffset = toOffset(v, "secondary_offset"); })
        .def_property("clip_rect", [](const CNNBinaryKernel& k) { return k.clipRect; },
                      [](CNNBinaryKernel& k, py::handle v) { k.clipRect = toRegion(v, "clip_rect"); })
        .def_readwrite("destination_feature_channel_offset", &CNNBinaryKernel::destinationFeatureChannelOffset)
        .def_readwrite("primary_source_feature_channel_offset", &CNNBinaryKernel::primarySourceFeatureChannelOffset)
        .def_readwrite("secondary_source_feature_channel_offset", &CNNBinaryKernel::secondarySourceFeatureChannelOffset)
        .def_readwrite("primary_source_feature_channel_max_count",
                       &CNNBinaryKernel::primarySourceFeatureChannelMaxCount)
        .def_readwrite("secondary_source_feature_channel_max_count",
                       &CNNBinaryKernel::secondarySourceFeatureChannelMaxCount)
        .def_readwrite("primary_edge_mode", &CNNBinaryKernel::primaryEdgeMode)
        .def_readwrite("secondary_edge_mode", &CNNBinaryKernel::secondaryEdgeMode)
        .def_readwrite("primary_stride_in_pixels_x", &CNNBinaryKernel::primaryStrideInPixelsX)
        .def_readwrite("primary_stride_in_pixels_y", &CNNBinaryKernel::primaryStrideInPixelsY)
        .def_readwrite("secondary_stride_in_pixels_x", &CNNBinaryKernel::secondaryStrideInPixelsX)
        .def_readwrite("secondary_stride_in_pixels_y", &CNNBinaryKernel::secondaryStrideInPixelsY)
        .def_readwrite("padding", &CNNBinaryKernel::padding)
        .def_readwrite("destination_image_allocator", &CNNBinaryKernel::destinationImageAllocator)
        .def_property_readonly("primary_kernel_width", &CNNBinaryKernel::primaryKernelWidth)
        .def_property_readonly("primary_kernel_height", &CNNBinaryKernel::primaryKernelHeight)
        .def_property_readonly("secondary_kernel_width", &CNNBinaryKernel::secondaryKernelWidth)
        .def_property_readonly("secondary_kernel_height", &CNNBinaryKernel::secondaryKernelHeight)
        .def_property_readonly("primary_dilation_rate_x", &CNNBinaryKernel::primaryDilationRateX)
        .def_property_readonly("primary_dilation_rate_y", &CNNBinaryKernel::primaryDilationRateY)
        .def_property_readonly("secondary_dilation_rate_x", &CNNBinaryKernel::secondaryDilationRateX)
        .def_property_readonly("secondary_dilation_rate_y", &CNNBinaryKernel::secondaryDilationRateY)
        .def_property_readonly("is_backwards", &CNNBinaryKernel::isBackwards)
        .def_property_readonly("is_state_modified", &CNNBinaryKernel::isStateModified)
        .def("is_result_state_reused_across_batch", &CNNBinaryKernel::isResultStateReusedAcrossBatch)
        .def("append_batch_barrier", &CNNBinaryKernel::appendBatchBarrier)
        .def("destination_image_descriptor", [](CNNBinaryKernel& k, py::handle sources, py::handle states) {
            return k.destinationImageDescriptor(toImageBatch(sources, "source_images"),
                                                toStateBatch(states, "source_states"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(),
             "-destinationImageDescriptorForSourceImages:sourceStates:")
        .def(
            "encode",
            [](CNNBinaryKernel& k, CommandBuffer& cb, py::handle primary, py::handle secondary,
               py::handle destinationState, py::handle destinationImage, py::handle stateIsTemporary) -> py::object {
                ImagePtr p = requireImage(primary, "primary_image");
                ImagePtr s = requireImage(secondary, "secondary_image");
                StatePtr state = optionalState(destinationState, "destination_state");
                if (!destinationImage.is_none()) {
                    ImagePtr dst = requireImage(destinationImage, "destination_image");
                    k.encode(cb, p, s, state, dst);
                    return py::cast(dst);
                }
                if (!stateIsTemporary.is_none()) {
                    StatePtr produced;
                    ImagePtr dst = k.encode(cb, p, s, &produced, stateIsTemporary.cast<bool>());
                    return py::make_tuple(dst, produced);
                }
                if (state) {
                    ImageDescriptor d = k.destinationImageDescriptor({p, s}, {});
                    ImagePtr dst = (k.destinationImageAllocator ? k.destinationImageAllocator
                                                                : ImageAllocator::temporaryAllocator())
                                       ->imageForCommandBuffer(cb, d, &k);
                    k.encode(cb, p, s, state, dst);
                    return py::cast(dst);
                }
                return py::cast(k.encode(cb, p, s));
            },
            py::arg("command_buffer"), py::arg("primary_image"), py::arg("secondary_image"),
            py::arg("destination_state") = py::none(), py::arg("destination_image") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "Encode forms of MPSCNNBinaryKernel:\n"
            "- destination_image given: -encodeToCommandBuffer:primaryImage:secondaryImage:[destinationState:]"
            "destinationImage: (uses primary_offset / secondary_offset as set, ignores `padding`); returns "
            "destination_image.\n"
            "- otherwise -encodeToCommandBuffer:primaryImage:secondaryImage: (padding policy applied, result "
            "allocated); with destination_state_is_temporary=True/False it is "
            "-encodeToCommandBuffer:primaryImage:secondaryImage:destinationState:destinationStateIsTemporary: and "
            "returns (image, state).")
        .def(
            "encode_batch",
            [](CNNBinaryKernel& k, CommandBuffer& cb, py::handle primaries, py::handle secondaries,
               py::handle destinationStates, py::handle destinationImages, py::handle stateIsTemporary) -> py::object {
                ImageBatch p = toImageBatch(primaries, "primary_images");
                ImageBatch s = toImageBatch(secondaries, "secondary_images");
                StateBatch states = toStateBatch(destinationStates, "destination_states");
                if (!destinationImages.is_none()) {
                    ImageBatch dst = toImageBatch(destinationImages, "destination_images");
                    k.encodeBatch(cb, p, s, states, dst);
                    return py::cast(dst);
                }
                if (!stateIsTemporary.is_none()) {
                    StateBatch produced;
                    ImageBatch dst = k.encodeBatch(cb, p, s, &produced, stateIsTemporary.cast<bool>());
                    return py::make_tuple(dst, produced);
                }
                if (!states.empty()) throwValueError("destination_states: pass destination_images with them");
                return py::cast(k.encodeBatch(cb, p, s));
            },
            py::arg("command_buffer"), py::arg("primary_images"), py::arg("secondary_images"),
            py::arg("destination_states") = py::none(), py::arg("destination_images") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "-encodeBatchToCommandBuffer:primaryImages:secondaryImages:[destinationStates:]destinationImages: and "
            "the returning forms (see encode).")
        .def("result_state", [](CNNBinaryKernel& k, py::handle primary, py::handle secondary, py::handle states,
                                py::handle dst) {
            return k.resultState(requireImage(primary, "primary_image"), requireImage(secondary, "secondary_image"),
                                 toStateBatch(states, "source_states"),
                                 dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("primary_image"), py::arg("secondary_image"), py::arg("source_states") = py::none(),
             py::arg("destination_image") = py::none(),
             "-resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage: (None when the kernel "
             "writes no state)")
        .def("temporary_result_state", [](CNNBinaryKernel& k, CommandBuffer& cb, py::handle primary,
                                          py::handle secondary, py::handle states, py::handle dst) {
            return k.temporaryResultState(cb, requireImage(primary, "primary_image"),
                                          requireImage(secondary, "secondary_image"),
                                          toStateBatch(states, "source_states"),
                                          dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("command_buffer"), py::arg("primary_image"), py::arg("secondary_image"),
             py::arg("source_states") = py::none(), py::arg("destination_image") = py::none(),
             "-temporaryResultStateForCommandBuffer:primaryImage:secondaryImage:sourceStates:destinationImage:");

    py::class_<CNNGradientKernel, CNNBinaryKernel, std::shared_ptr<CNNGradientKernel>>(m, "CNNGradientKernel",
                                                                                      "MPSCNNGradientKernel")
        .def_readwrite("kernel_offset_x", &CNNGradientKernel::kernelOffsetX, "MPSCNNGradientKernel.kernelOffsetX")
        .def_readwrite("kernel_offset_y", &CNNGradientKernel::kernelOffsetY, "MPSCNNGradientKernel.kernelOffsetY")
        .def(
            "encode",
            [](CNNGradientKernel& k, CommandBuffer& cb, py::handle gradient, py::handle source, py::handle state,
               py::handle destination) -> ImagePtr {
                ImagePtr g = requireImage(gradient, "source_gradient");
                ImagePtr x = requireImage(source, "source_image");
                StatePtr s = optionalState(state, "gradient_state");
                if (!s) throwTypeError("gradient_state: expected the forward pass's gradient state, got None");
                if (destination.is_none()) return k.encode(cb, g, x, s);
                ImagePtr d = requireImage(destination, "destination_gradient");
                k.encode(cb, g, x, s, d);
                return d;
            },
            py::arg("command_buffer"), py::arg("source_gradient"), py::arg("source_image"), py::arg("gradient_state"),
            py::arg("destination_gradient") = py::none(),
            "-encodeToCommandBuffer:sourceGradient:sourceImage:gradientState:[destinationGradient:]. Without a "
            "destination the forward parameters are copied from the state and the result is allocated; with one, "
            "the kernel's properties are used as set (call destination_image_descriptor first).")
        .def(
            "encode_batch",
            [](CNNGradientKernel& k, CommandBuffer& cb, py::handle gradients, py::handle sources, py::handle states,
               py::handle destinations) -> ImageBatch {
                ImageBatch g = toImageBatch(gradients, "source_gradients");
                ImageBatch x = toImageBatch(sources, "source_images");
                StateBatch s = toStateBatch(states, "gradient_states");
                if (destinations.is_none()) return k.encodeBatch(cb, g, x, s);
                ImageBatch d = toImageBatch(destinations, "destination_gradients");
                k.encodeBatch(cb, g, x, s, d);
                return d;
            },
            py::arg("command_buffer"), py::arg("source_gradients"), py::arg("source_images"),
            py::arg("gradient_states"), py::arg("destination_gradients") = py::none(),
            "-encodeBatchToCommandBuffer:sourceGradients:sourceImages:gradientStates:[destinationGradients:]");
}

}  // namespace mpsgrad::python
