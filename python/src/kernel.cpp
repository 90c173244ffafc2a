// Bindings of the kernel hierarchy (MPSKernel, MPSCNNKernel, MPSCNNBinaryKernel,
// MPSCNNGradientKernel) with every encode form, and the padding policies.
#include <optional>

#include "bindings.h"
#include "core/multiary.h"

namespace mpsgrad::python {
namespace {

ImagePtr requireImage(py::handle value, const char* what) {
    if (value.is_none() || !py::isinstance<Image>(value))
        throwTypeError(what, ": expected an Image, got ", std::string(py::repr(py::type::of(value))));
    return value.cast<ImagePtr>();
}

StatePtr optionalState(py::handle value, const char* what) {
    if (value.is_none()) return nullptr;
    if (!py::isinstance<State>(value))
        throwTypeError(what, ": expected a State, got ", std::string(py::repr(py::type::of(value))));
    return value.cast<StatePtr>();
}

// A shared_ptr to the C++ part of `value` that also keeps the Python object alive: a Python
// subclass of NNPadding or ImageAllocator must live as long as the kernel holding it, even
// when the caller keeps no reference (its methods are looked up on the Python object).
template <class T>
std::shared_ptr<T> keepingPythonAlive(py::handle value, const char* what, const char* expected) {
    if (!py::isinstance<T>(value))
        throwTypeError(what, ": expected ", expected, " or None, got ", typeName(value));
    auto cpp = value.cast<std::shared_ptr<T>>();
    struct Owner {
        Owner(std::shared_ptr<T> c, py::object o) : cpp(std::move(c)), python(std::move(o)) {}
        std::shared_ptr<T> cpp;
        PythonReference python;
    };
    auto owner = std::make_shared<Owner>(cpp, py::reinterpret_borrow<py::object>(value));
    return std::shared_ptr<T>(owner, cpp.get());  // aliasing: owns both, points at the C++ part
}

// kernel.padding: the object that was set, or the kernel's default policy (never None).
template <class K>
auto paddingGetter() {
    return [](const K& k) -> std::shared_ptr<NNPadding> {
        if (k.padding) return k.padding;
        return NNDefaultPadding::paddingWithMethod(defaultPaddingMethod());
    };
}
template <class K>
auto paddingSetter() {
    return [](K& k, Arg<OptionalPaddingHint> value) {
        k.padding = value.is_none() ? nullptr : keepingPythonAlive<NNPadding>(value, "padding", "an NNPadding");
    };
}
// kernel.destination_image_allocator: the object that was set, or the default (temporary images).
template <class K>
auto allocatorGetter() {
    return [](const K& k) {
        return k.destinationImageAllocator ? k.destinationImageAllocator : ImageAllocator::temporaryAllocator();
    };
}
template <class K>
auto allocatorSetter() {
    return [](K& k, Arg<OptionalAllocatorHint> value) {
        k.destinationImageAllocator =
            value.is_none() ? nullptr
                            : keepingPythonAlive<ImageAllocator>(value, "destination_image_allocator",
                                                                 "an ImageAllocator");
    };
}

// destination_state_is_temporary selects the returning encode forms; with a destination image
// it would be silently ignored, so that combination is rejected.
std::optional<bool> stateIsTemporaryArgument(py::handle value, bool hasDestination) {
    if (value.is_none()) return std::nullopt;
    bool temporary = toBool(value, "destination_state_is_temporary");
    if (hasDestination)
        throwValueError("destination_state_is_temporary: applies to the returning encode forms only; with "
                        "destination_image(s) pass destination_state(s) (from result_state) instead");
    return temporary;
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
                           std::string(py::repr(py::type::of(result))));
        return result.cast<ImageDescriptor>();
    }
    std::shared_ptr<NNPadding> inverse() const override {
        PYBIND11_OVERRIDE_NAME(std::shared_ptr<NNPadding>, NNPadding, "inverse", inverse);
    }
};


// The per-index accessors of MPSCNNMultiaryKernel: `<name>_at_index(index)` and `set_<name>(value, index)`.
template <class T>
void bindPerIndex(py::class_<CNNMultiaryKernel, Kernel, std::shared_ptr<CNNMultiaryKernel>>& c, const char* name,
                  T (CNNMultiaryKernel::*get)(size_t) const, void (CNNMultiaryKernel::*set)(T, size_t),
                  const char* mps) {
    const std::string getName = std::string(name) + "_at_index", setName = std::string("set_") + name;
    c.def(getName.c_str(), [get](const CNNMultiaryKernel& k, Arg<IntHint> index) {
        return (k.*get)(size_t(toUInt64(index, "index")));
    }, py::arg("index"), (std::string("-") + mps + "AtIndex:").c_str());
    c.def(setName.c_str(), [set, name](CNNMultiaryKernel& k, py::handle value, Arg<IntHint> index) {
        (k.*set)(fromPython<T>(value, name), size_t(toUInt64(index, "index")));
    }, py::arg("value"), py::arg("index"), (std::string("-set") + mps + ":atIndex:").c_str());
}

std::vector<ImageBatch> toSourceBatches(py::handle value, const char* what) {
    if (value.is_none() || !py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value))
        throwTypeError(what, ": expected a list with one list of Images per source index, got ", typeName(value));
    std::vector<ImageBatch> batches;
    for (auto item : value.cast<py::sequence>()) batches.push_back(toImageBatch(item, what));
    return batches;
}

void bindMultiaryKernel(py::module_& m) {
    py::class_<NNMultiaryGradientState, State, std::shared_ptr<NNMultiaryGradientState>>(
        m, "NNMultiaryGradientState",
        "MPSNNMultiaryGradientState: what a multiary forward kernel recorded about each of its sources for the "
        "gradient kernels; read count as any temporary state (one per gradient kernel that reads it).")
        .def_property_readonly("source_count", &NNMultiaryGradientState::sourceCount);
    py::class_<CNNMultiaryKernel, Kernel, std::shared_ptr<CNNMultiaryKernel>> c(
        m, "CNNMultiaryKernel",
        "MPSCNNMultiaryKernel (macOS 10.15): a kernel with source_count sources and per-index properties.");
    c.def_property_readonly("source_count", &CNNMultiaryKernel::sourceCount)
        .def("offset_at_index", [](const CNNMultiaryKernel& k, Arg<IntHint> index) {
            return k.offsetAtIndex(size_t(toUInt64(index, "index")));
        }, py::arg("index"), "-offsetAtIndex:")
        .def("set_offset", [](CNNMultiaryKernel& k, Arg<OffsetHint> offset, Arg<IntHint> index) {
            k.setOffset(toOffset(offset, "offset"), size_t(toUInt64(index, "index")));
        }, py::arg("offset"), py::arg("index"), "-setOffset:atIndex:");
    bindPerIndex<int64_t>(c, "source_feature_channel_offset", &CNNMultiaryKernel::sourceFeatureChannelOffsetAtIndex,
                          &CNNMultiaryKernel::setSourceFeatureChannelOffset, "sourceFeatureChannelOffset");
    bindPerIndex<uint64_t>(c, "source_feature_channel_max_count",
                           &CNNMultiaryKernel::sourceFeatureChannelMaxCountAtIndex,
                           &CNNMultiaryKernel::setSourceFeatureChannelMaxCount, "sourceFeatureChannelMaxCount");
    bindPerIndex<ImageEdgeMode>(c, "edge_mode", &CNNMultiaryKernel::edgeModeAtIndex, &CNNMultiaryKernel::setEdgeMode,
                                "edgeMode");
    bindPerIndex<int64_t>(c, "kernel_width", &CNNMultiaryKernel::kernelWidthAtIndex,
                          &CNNMultiaryKernel::setKernelWidth, "kernelWidth");
    bindPerIndex<int64_t>(c, "kernel_height", &CNNMultiaryKernel::kernelHeightAtIndex,
                          &CNNMultiaryKernel::setKernelHeight, "kernelHeight");
    bindPerIndex<int64_t>(c, "stride_in_pixels_x", &CNNMultiaryKernel::strideInPixelsXAtIndex,
                          &CNNMultiaryKernel::setStrideInPixelsX, "strideInPixelsX");
    bindPerIndex<int64_t>(c, "stride_in_pixels_y", &CNNMultiaryKernel::strideInPixelsYAtIndex,
                          &CNNMultiaryKernel::setStrideInPixelsY, "strideInPixelsY");
    bindPerIndex<int64_t>(c, "dilation_rate_x", &CNNMultiaryKernel::dilationRateXAtIndex,
                          &CNNMultiaryKernel::setDilationRateX, "dilationRateX");
    bindPerIndex<int64_t>(c, "dilation_rate_y", &CNNMultiaryKernel::dilationRateYAtIndex,
                          &CNNMultiaryKernel::setDilationRateY, "dilationRateY");
    c.def_property("clip_rect", [](const CNNMultiaryKernel& k) { return k.clipRect; },
                   [](CNNMultiaryKernel& k, Arg<RegionHint> v) { k.clipRect = toRegion(v, "clip_rect"); })
        .def_property("destination_feature_channel_offset",
                      getter(&CNNMultiaryKernel::destinationFeatureChannelOffset),
                      setter(&CNNMultiaryKernel::destinationFeatureChannelOffset, "destination_feature_channel_offset"))
        .def_property("padding", paddingGetter<CNNMultiaryKernel>(), paddingSetter<CNNMultiaryKernel>())
        .def_property("destination_image_allocator", allocatorGetter<CNNMultiaryKernel>(),
                      allocatorSetter<CNNMultiaryKernel>())
        .def_property_readonly("is_backwards", &CNNMultiaryKernel::isBackwards)
        .def_property_readonly("is_state_modified", &CNNMultiaryKernel::isStateModified)
        .def("is_result_state_reused_across_batch", &CNNMultiaryKernel::isResultStateReusedAcrossBatch)
        .def("append_batch_barrier", &CNNMultiaryKernel::appendBatchBarrier)
        .def("destination_image_descriptor", [](CNNMultiaryKernel& k, Arg<ImageListHint> sources,
                                                Arg<OptionalStateListHint> states) {
            return k.destinationImageDescriptor(toImageBatch(sources, "source_images"),
                                                toStateBatch(states, "source_states"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(),
             "-destinationImageDescriptorForSourceImages:sourceStates: (one image per source index)")
        .def(
            "encode",
            [](CNNMultiaryKernel& k, CommandBuffer& cb, Arg<ImageListHint> sources,
               Arg<OptionalStateHint> destinationState,
               Arg<OptionalImageHint> destinationImage, Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                ImageBatch x = toImageBatch(sources, "source_images");
                StatePtr state = optionalState(destinationState, "destination_state");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImage.is_none());
                if (!destinationImage.is_none()) {
                    ImagePtr dst = requireImage(destinationImage, "destination_image");
                    k.encode(cb, x, state, dst);
                    return py::cast(dst);
                }
                if (state) throwValueError("destination_state: pass destination_image with it");
                if (temporary) {
                    StatePtr produced;
                    ImagePtr dst = k.encode(cb, x, &produced, *temporary);
                    return py::make_tuple(dst, produced);
                }
                return py::cast(k.encode(cb, x));
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_state") = py::none(),
            py::arg("destination_image") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "Encode forms of MPSCNNMultiaryKernel (source_images: one Image per source index):\n"
            "- destination_image given: -encodeToCommandBuffer:sourceImages:[destinationState:]destinationImage:; "
            "returns destination_image.\n"
            "- otherwise -encodeToCommandBuffer:sourceImages: (result allocated); with "
            "destination_state_is_temporary=True/False it is "
            "-encodeToCommandBuffer:sourceImages:destinationState:destinationStateIsTemporary: and returns "
            "(image, state).")
        .def(
            "encode_batch",
            [](CNNMultiaryKernel& k, CommandBuffer& cb, Arg<ImageListsHint> sources,
               Arg<OptionalStateListHint> destinationStates,
               Arg<OptionalImageListHint> destinationImages, Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                std::vector<ImageBatch> x = toSourceBatches(sources, "source_images");
                StateBatch states = toStateBatch(destinationStates, "destination_states");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImages.is_none());
                if (!destinationImages.is_none()) {
                    ImageBatch dst = toImageBatch(destinationImages, "destination_images");
                    k.encodeBatch(cb, x, states, dst);
                    return py::cast(dst);
                }
                if (!states.empty()) throwValueError("destination_states: pass destination_images with them");
                if (temporary) {
                    StateBatch produced;
                    ImageBatch dst = k.encodeBatch(cb, x, &produced, *temporary);
                    return py::make_tuple(dst, produced);
                }
                return py::cast(k.encodeBatch(cb, x));
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_states") = py::none(),
            py::arg("destination_images") = py::none(), py::kw_only(),
            py::arg("destination_state_is_temporary") = py::none(),
            "-encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages: and the returning "
            "forms; source_images[i] is the batch (list of Images) of source index i.")
        .def("result_state", [](CNNMultiaryKernel& k, Arg<ImageListHint> sources, Arg<OptionalStateListHint> states,
                                Arg<OptionalImageHint> dst) {
            return k.resultState(toImageBatch(sources, "source_images"), toStateBatch(states, "source_states"),
                                 dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(), py::arg("destination_image") = py::none(),
             "-resultStateForSourceImages:sourceStates:destinationImage:")
        .def("temporary_result_state", [](CNNMultiaryKernel& k, CommandBuffer& cb, Arg<ImageListHint> sources,
                                          Arg<OptionalStateListHint> states, Arg<OptionalImageHint> dst) {
            return k.temporaryResultState(cb, toImageBatch(sources, "source_images"),
                                          toStateBatch(states, "source_states"),
                                          dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("destination_image") = py::none(),
             "-temporaryResultStateForCommandBuffer:sourceImages:sourceStates:destinationImage:");
}
}  // namespace

void bindKernel(py::module_& m) {
    py::class_<Kernel, std::shared_ptr<Kernel>>(m, "Kernel", "MPSKernel")
        .def_property_readonly("device", &Kernel::device)
        .def_property("options", getter(&Kernel::options), setter(&Kernel::options, "options"), "MPSKernel.options (KernelOptions bits)")
        .def_property("label", getter(&Kernel::label), setter(&Kernel::label, "label"));

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
                    "+[MPSNNDefaultPadding paddingForTensorflowAveragePooling]: TF SAME (SIZE_SAME | ALIGN_CENTERED | "
                    "ADD_REMAINDER_TO_BOTTOM_RIGHT) that also sets the kernel's edge_mode to CLAMP (average pooling "
                    "over the in-image pixels) in its custom step; the method carries CUSTOM | "
                    "CUSTOM_WHITELIST_FOR_NODE_FUSION")
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
                      [](CNNKernel& k, Arg<OffsetHint> v) { k.offset = toOffset(v, "offset"); },
                      "MPSCNNKernel.offset")
        .def_property("clip_rect", [](const CNNKernel& k) { return k.clipRect; },
                      [](CNNKernel& k, Arg<RegionHint> v) { k.clipRect = toRegion(v, "clip_rect"); },
                      "MPSCNNKernel.clipRect")
        .def_property("destination_feature_channel_offset", getter(&CNNKernel::destinationFeatureChannelOffset), setter(&CNNKernel::destinationFeatureChannelOffset, "destination_feature_channel_offset"))
        .def_property("source_feature_channel_offset", getter(&CNNKernel::sourceFeatureChannelOffset), setter(&CNNKernel::sourceFeatureChannelOffset, "source_feature_channel_offset"))
        .def_property("source_feature_channel_max_count", getter(&CNNKernel::sourceFeatureChannelMaxCount), setter(&CNNKernel::sourceFeatureChannelMaxCount, "source_feature_channel_max_count"))
        .def_property("edge_mode", getter(&CNNKernel::edgeMode), setter(&CNNKernel::edgeMode, "edge_mode"))
        .def_property("padding", paddingGetter<CNNKernel>(), paddingSetter<CNNKernel>())
        .def_property("destination_image_allocator", allocatorGetter<CNNKernel>(), allocatorSetter<CNNKernel>())
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
            [](CNNKernel& k, CommandBuffer& cb, Arg<ImageHint> source, Arg<OptionalStateHint> destinationState,
               Arg<OptionalImageHint> destinationImage, Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                ImagePtr src = requireImage(source, "source_image");
                StatePtr state = optionalState(destinationState, "destination_state");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImage.is_none());
                if (!destinationImage.is_none()) {
                    ImagePtr dst = requireImage(destinationImage, "destination_image");
                    k.encode(cb, src, state, dst);
                    return py::cast(dst);
                }
                if (temporary) {
                    StatePtr produced;
                    ImagePtr dst = k.encode(cb, src, &produced, *temporary);
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
            [](CNNKernel& k, CommandBuffer& cb, Arg<ImageListHint> sources,
               Arg<OptionalStateListHint> destinationStates,
               Arg<OptionalImageListHint> destinationImages, Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                ImageBatch src = toImageBatch(sources, "source_images");
                StateBatch states = toStateBatch(destinationStates, "destination_states");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImages.is_none());
                if (!destinationImages.is_none()) {
                    ImageBatch dst = toImageBatch(destinationImages, "destination_images");
                    k.encodeBatch(cb, src, states, dst);
                    return py::cast(dst);
                }
                if (temporary) {
                    StateBatch produced;
                    ImageBatch dst = k.encodeBatch(cb, src, &produced, *temporary);
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
        .def("result_state", [](CNNKernel& k, Arg<ImageHint> source, Arg<OptionalStateListHint> states,
                                Arg<OptionalImageHint> dst) {
            return k.resultState(requireImage(source, "source_image"), toStateBatch(states, "source_states"),
                                 dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("source_image"), py::arg("source_states") = py::none(), py::arg("destination_image") = py::none(),
             "-resultStateForSourceImage:sourceStates:destinationImage:")
        .def("temporary_result_state", [](CNNKernel& k, CommandBuffer& cb, Arg<ImageHint> source,
                                          Arg<OptionalStateListHint> states,
                                          Arg<OptionalImageHint> dst) {
            return k.temporaryResultState(cb, requireImage(source, "source_image"), toStateBatch(states, "source_states"),
                                          dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("command_buffer"), py::arg("source_image"), py::arg("source_states") = py::none(),
             py::arg("destination_image") = py::none(),
             "-temporaryResultStateForCommandBuffer:sourceImage:sourceStates:destinationImage:")
        .def("result_state_batch", [](CNNKernel& k, Arg<ImageListHint> sources, Arg<OptionalStateListHint>,
                                      Arg<OptionalImageListHint> dsts) {
            return k.resultStateBatch(toImageBatch(sources, "source_images"), toImageBatch(dsts, "destination_images"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(), py::arg("destination_images") = py::none(),
             "-resultStateBatchForSourceImage:sourceStates:destinationImage:")
        .def("temporary_result_state_batch", [](CNNKernel& k, CommandBuffer& cb, Arg<ImageListHint> sources,
                                                Arg<OptionalStateListHint>,
                                                Arg<OptionalImageListHint> dsts) {
            return k.temporaryResultStateBatch(cb, toImageBatch(sources, "source_images"),
                                               toImageBatch(dsts, "destination_images"));
        }, py::arg("command_buffer"), py::arg("source_images"), py::arg("source_states") = py::none(),
             py::arg("destination_images") = py::none(),
             "-temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:")
        .def("destination_image_descriptor", [](CNNKernel& k, Arg<ImageListHint> sources,
                                                Arg<OptionalStateListHint> states) {
            return k.destinationImageDescriptor(toImageBatch(sources, "source_images"),
                                                toStateBatch(states, "source_states"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(),
             "-destinationImageDescriptorForSourceImages:sourceStates: (runs the padding policy; sets `offset`)");

    py::class_<CNNBinaryKernel, Kernel, std::shared_ptr<CNNBinaryKernel>>(m, "CNNBinaryKernel", "MPSCNNBinaryKernel")
        .def_property("primary_offset", [](const CNNBinaryKernel& k) { return k.primaryOffset; },
                      [](CNNBinaryKernel& k, Arg<OffsetHint> v) { k.primaryOffset = toOffset(v, "primary_offset"); })
        .def_property("secondary_offset", [](const CNNBinaryKernel& k) { return k.secondaryOffset; },
                      [](CNNBinaryKernel& k, Arg<OffsetHint> v) { k.secondaryOffset = toOffset(v,
                         "secondary_offset"); })
        .def_property("clip_rect", [](const CNNBinaryKernel& k) { return k.clipRect; },
                      [](CNNBinaryKernel& k, Arg<RegionHint> v) { k.clipRect = toRegion(v, "clip_rect"); })
        .def_property("destination_feature_channel_offset", getter(&CNNBinaryKernel::destinationFeatureChannelOffset), setter(&CNNBinaryKernel::destinationFeatureChannelOffset, "destination_feature_channel_offset"))
        .def_property("primary_source_feature_channel_offset", getter(&CNNBinaryKernel::primarySourceFeatureChannelOffset), setter(&CNNBinaryKernel::primarySourceFeatureChannelOffset, "primary_source_feature_channel_offset"))
        .def_property("secondary_source_feature_channel_offset", getter(&CNNBinaryKernel::secondarySourceFeatureChannelOffset), setter(&CNNBinaryKernel::secondarySourceFeatureChannelOffset, "secondary_source_feature_channel_offset"))
        .def_property("primary_source_feature_channel_max_count", getter(&CNNBinaryKernel::primarySourceFeatureChannelMaxCount), setter(&CNNBinaryKernel::primarySourceFeatureChannelMaxCount, "primary_source_feature_channel_max_count"))
        .def_property("secondary_source_feature_channel_max_count", getter(&CNNBinaryKernel::secondarySourceFeatureChannelMaxCount), setter(&CNNBinaryKernel::secondarySourceFeatureChannelMaxCount, "secondary_source_feature_channel_max_count"))
        .def_property("primary_edge_mode", getter(&CNNBinaryKernel::primaryEdgeMode), setter(&CNNBinaryKernel::primaryEdgeMode, "primary_edge_mode"))
        .def_property("secondary_edge_mode", getter(&CNNBinaryKernel::secondaryEdgeMode), setter(&CNNBinaryKernel::secondaryEdgeMode, "secondary_edge_mode"))
        .def_property("primary_stride_in_pixels_x", getter(&CNNBinaryKernel::primaryStrideInPixelsX), setter(&CNNBinaryKernel::primaryStrideInPixelsX, "primary_stride_in_pixels_x"))
        .def_property("primary_stride_in_pixels_y", getter(&CNNBinaryKernel::primaryStrideInPixelsY), setter(&CNNBinaryKernel::primaryStrideInPixelsY, "primary_stride_in_pixels_y"))
        .def_property("secondary_stride_in_pixels_x", getter(&CNNBinaryKernel::secondaryStrideInPixelsX), setter(&CNNBinaryKernel::secondaryStrideInPixelsX, "secondary_stride_in_pixels_x"))
        .def_property("secondary_stride_in_pixels_y", getter(&CNNBinaryKernel::secondaryStrideInPixelsY), setter(&CNNBinaryKernel::secondaryStrideInPixelsY, "secondary_stride_in_pixels_y"))
        .def_property("padding", paddingGetter<CNNBinaryKernel>(), paddingSetter<CNNBinaryKernel>())
        .def_property("destination_image_allocator", allocatorGetter<CNNBinaryKernel>(), allocatorSetter<CNNBinaryKernel>())
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
        .def("destination_image_descriptor", [](CNNBinaryKernel& k, Arg<ImageListHint> sources,
                                                Arg<OptionalStateListHint> states) {
            return k.destinationImageDescriptor(toImageBatch(sources, "source_images"),
                                                toStateBatch(states, "source_states"));
        }, py::arg("source_images"), py::arg("source_states") = py::none(),
             "-destinationImageDescriptorForSourceImages:sourceStates:")
        .def(
            "encode",
            [](CNNBinaryKernel& k, CommandBuffer& cb, Arg<ImageHint> primary, Arg<ImageHint> secondary,
               Arg<OptionalStateHint> destinationState, Arg<OptionalImageHint> destinationImage,
               Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                ImagePtr p = requireImage(primary, "primary_image");
                ImagePtr s = requireImage(secondary, "secondary_image");
                StatePtr state = optionalState(destinationState, "destination_state");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImage.is_none());
                if (!destinationImage.is_none()) {
                    ImagePtr dst = requireImage(destinationImage, "destination_image");
                    k.encode(cb, p, s, state, dst);
                    return py::cast(dst);
                }
                if (temporary) {
                    StatePtr produced;
                    ImagePtr dst = k.encode(cb, p, s, &produced, *temporary);
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
            [](CNNBinaryKernel& k, CommandBuffer& cb, Arg<ImageListHint> primaries, Arg<ImageListHint> secondaries,
               Arg<OptionalStateListHint> destinationStates, Arg<OptionalImageListHint> destinationImages,
               Arg<OptionalBoolHint> stateIsTemporary) -> py::object {
                ImageBatch p = toImageBatch(primaries, "primary_images");
                ImageBatch s = toImageBatch(secondaries, "secondary_images");
                StateBatch states = toStateBatch(destinationStates, "destination_states");
                auto temporary = stateIsTemporaryArgument(stateIsTemporary, !destinationImages.is_none());
                if (!destinationImages.is_none()) {
                    ImageBatch dst = toImageBatch(destinationImages, "destination_images");
                    k.encodeBatch(cb, p, s, states, dst);
                    return py::cast(dst);
                }
                if (temporary) {
                    StateBatch produced;
                    ImageBatch dst = k.encodeBatch(cb, p, s, &produced, *temporary);
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
        .def("result_state", [](CNNBinaryKernel& k, Arg<ImageHint> primary, Arg<ImageHint> secondary,
                                Arg<OptionalStateListHint> states,
                                Arg<OptionalImageHint> dst) {
            return k.resultState(requireImage(primary, "primary_image"), requireImage(secondary, "secondary_image"),
                                 toStateBatch(states, "source_states"),
                                 dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("primary_image"), py::arg("secondary_image"), py::arg("source_states") = py::none(),
             py::arg("destination_image") = py::none(),
             "-resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage: (None when the kernel "
             "writes no state)")
        .def("temporary_result_state", [](CNNBinaryKernel& k, CommandBuffer& cb, Arg<ImageHint> primary,
                                          Arg<ImageHint> secondary, Arg<OptionalStateListHint> states,
                                          Arg<OptionalImageHint> dst) {
            return k.temporaryResultState(cb, requireImage(primary, "primary_image"),
                                          requireImage(secondary, "secondary_image"),
                                          toStateBatch(states, "source_states"),
                                          dst.is_none() ? nullptr : requireImage(dst, "destination_image"));
        }, py::arg("command_buffer"), py::arg("primary_image"), py::arg("secondary_image"),
             py::arg("source_states") = py::none(), py::arg("destination_image") = py::none(),
             "-temporaryResultStateForCommandBuffer:primaryImage:secondaryImage:sourceStates:destinationImage:");

    py::class_<CNNGradientKernel, CNNBinaryKernel, std::shared_ptr<CNNGradientKernel>>(m, "CNNGradientKernel",
                                                                                      "MPSCNNGradientKernel")
        .def_property("kernel_offset_x", getter(&CNNGradientKernel::kernelOffsetX), setter(&CNNGradientKernel::kernelOffsetX, "kernel_offset_x"), "MPSCNNGradientKernel.kernelOffsetX")
        .def_property("kernel_offset_y", getter(&CNNGradientKernel::kernelOffsetY), setter(&CNNGradientKernel::kernelOffsetY, "kernel_offset_y"), "MPSCNNGradientKernel.kernelOffsetY")
        .def(
            "encode",
            [](CNNGradientKernel& k, CommandBuffer& cb, Arg<ImageHint> gradient, Arg<ImageHint> source,
               Arg<StateHint> state,
               Arg<OptionalImageHint> destination) -> ImagePtr {
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
            [](CNNGradientKernel& k, CommandBuffer& cb, Arg<ImageListHint> gradients, Arg<ImageListHint> sources,
               Arg<StateListHint> states,
               Arg<OptionalImageListHint> destinations) -> ImageBatch {
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
    bindMultiaryKernel(m);  // core/multiary.h
}

}  // namespace mpsgrad::python
