// Bindings of the convolution family (MPSCNNConvolution.h).
#include "aliasing.h"
#include "bindings.h"
#include "kernels/convolution.h"
#include "kernels/convolution_transpose.h"
#include "kernels/fully_connected.h"

namespace mpsgrad::python {
namespace {

// Adapts any Python object with the MPSCNNConvolutionDataSource methods (descriptor(),
// weights(), bias_terms(), load(), purge(); optional data_type(), label()).
class PythonDataSource final : public CNNConvolutionDataSource {
public:
    explicit PythonDataSource(py::object object) : object_(std::move(object)) {
        for (const char* name : {"descriptor", "weights", "bias_terms", "load", "purge"})
            if (!py::hasattr(object_, name))
                throwTypeError("weights: the data source ", std::string(py::repr(py::type::of(object_))),
                               " has no method ", name, "() (MPSCNNConvolutionDataSource protocol)");
    }
    ~PythonDataSource() override {
        if (pythonFinalizing()) {  // no Python call is possible any more: leak the references
            weights_.release();
            biases_.release();
            object_.release();
            return;
        }
        py::gil_scoped_acquire gil;
        weights_ = py::object();
        biases_ = py::object();
        object_ = py::object();
    }

    DataType dataType() override {
        py::gil_scoped_acquire gil;
        if (!py::hasattr(object_, "data_type")) return DataType::Float32;
        return fromPython<DataType>(object_.attr("data_type")(), "data_source.data_type()");
    }
    CNNConvolutionDescriptor descriptor() override {
        py::gil_scoped_acquire gil;
        py::object d = object_.attr("descriptor")();
        if (!py::isinstance<CNNConvolutionDescriptor>(d))
            throwTypeError("data_source.descriptor(): expected a CNNConvolutionDescriptor, got ",
                           std::string(py::repr(py::type::of(d))));
        descriptor_ = d.cast<CNNConvolutionDescriptor>();
        return descriptor_;
    }
    const float* weights() override {
        py::gil_scoped_acquire gil;
        auto array = asFloats(object_.attr("weights")(), descriptor_.weightCount(), "data_source.weights()");
        weights_ = array;
        return array.data();
    }
    const float* biasTerms() override {
        py::gil_scoped_acquire gil;
        py::object b = object_.attr("bias_terms")();
        if (b.is_none()) return nullptr;
        auto array = asFloats(b, descriptor_.outputFeatureChannels, "data_source.bias_terms()");
        biases_ = array;
        return array.data();
    }
    bool load() override {
        py::gil_scoped_acquire gil;
        return toBool(object_.attr("load")(), "data_source.load()");
    }
    // Runs from a C++ destructor (after every load), so a Python exception must not escape:
    // it is reported as a RuntimeWarning and the kernel goes on with the weights it copied.
    void purge() override {
        py::gil_scoped_acquire gil;
        weights_ = py::object();
        biases_ = py::object();
        try {
            object_.attr("purge")();
        } catch (py::error_already_set& e) {
            std::string message = "mpsgrad: the data source's purge() raised " + std::string(e.what()) +
                                  "; the kernel keeps the weights it loaded";
            if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) {
                // The warning itself raised (warnings turned into errors): report it as unraisable.
                py::error_already_set warning;
                warning.discard_as_unraisable("mpsgrad data source purge()");
            }
        }
    }
    std::string label() override {
        py::gil_scoped_acquire gil;
        return py::hasattr(object_, "label") ? py::str(object_.attr("label")()).cast<std::string>() : std::string();
    }
    py::object object() const { return object_; }

private:
    static py::array_t<float, py::array::c_style | py::array::forcecast> asFloats(py::handle value, int64_t count,
                                                                                   const char* what) {
        using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
        Array array;
        try {
            array = Array::ensure(value);
        } catch (...) {
        }
        if (!array) throwTypeError(what, ": expected a float32 array, got ", std::string(py::repr(py::type::of(value))));
        if (array.size() != count)
            throwValueError(what, ": expected ", count, " float32 values, got ", array.size());
        return array;
    }

    py::object object_;
    py::object weights_, biases_;
    CNNConvolutionDescriptor descriptor_;
};

std::shared_ptr<CNNConvolutionDataSource> toDataSource(py::object object) {
    if (object.is_none()) throwTypeError("weights: expected a CNNConvolutionDataSource, got None");
    if (py::isinstance<CNNConvolutionDataSource>(object)) return object.cast<std::shared_ptr<CNNConvolutionDataSource>>();
    return std::make_shared<PythonDataSource>(object);
}

py::object dataSourceObject(const std::shared_ptr<CNNConvolutionDataSource>& source) {
    if (auto* python = dynamic_cast<PythonDataSource*>(source.get())) return python->object();
    return py::cast(source);
}

std::vector<py::ssize_t> weightShape(const CNNConvolutionDescriptor& d) {
    return {py::ssize_t(d.outputFeatureChannels), py::ssize_t(d.kernelHeight), py::ssize_t(d.kernelWidth),
            py::ssize_t(d.inputFeatureChannels / d.effectiveGroups())};
}

Device deviceOf(const DeviceArg& device) { return toDevice(device, "device"); }

// The descriptor of a state over existing weights: given, or read off a 4-D (O, kH, kW, I) array
// (groups 1), or, for -initWithWeights:biases: (no descriptor, no offsets), what the two buffers
// say: their float counts, as a 1 x 1 convolution of weights / biases inputs and biases outputs
// (every consumer of the state checks those two counts only).
CNNConvolutionDescriptor aliasedDescriptor(py::handle descriptor, py::handle weights, py::handle biases,
                                           py::handle device, bool offsets) {
    if (!descriptor.is_none()) {
        if (!py::isinstance<CNNConvolutionDescriptor>(descriptor))
            throwTypeError("descriptor: expected a CNNConvolutionDescriptor, got ", typeName(descriptor));
        return descriptor.cast<CNNConvolutionDescriptor>();
    }
    if (py::isinstance<py::array>(weights) && py::reinterpret_borrow<py::array>(weights).ndim() == 4) {
        auto a = py::reinterpret_borrow<py::array>(weights);
        return CNNConvolutionDescriptor(int64_t(a.shape(2)), int64_t(a.shape(1)), int64_t(a.shape(3)),
                                        int64_t(a.shape(0)));
    }
    if (!biases.is_none() && !offsets) {
        const size_t w = aliasedStorage(weights, device, "weights").floats;
        const size_t b = aliasedStorage(biases, device, "biases").floats;
        if (b == 0 || w == 0 || w % b != 0)
            throwValueError("weights: ", w, " floats are not a whole number of filters for the ", b,
                            " biases; pass descriptor= to say the convolution's shape");
        return CNNConvolutionDescriptor(1, 1, int64_t(w / b), int64_t(b));
    }
    throwTypeError("descriptor: required unless weights is a 4-D (O, kH, kW, I) array or biases are given "
                   "without offsets (the two buffers' sizes then give the counts)");
}

// -initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor: over Vectors or
// writable float32 arrays: the state aliases them (offsets in bytes from their first element).
std::shared_ptr<CNNConvolutionWeightsAndBiasesState> weightsStateOver(py::handle weights, py::handle biases,
                                                                       py::handle descriptor, py::handle weightsOffset,
                                                                       py::handle biasesOffset, py::handle device) {
    const bool offsets = !(weightsOffset.is_none() || (py::isinstance<py::int_>(weightsOffset) &&
                                                         weightsOffset.cast<py::ssize_t>() == 0)) ||
                         !(biasesOffset.is_none() || (py::isinstance<py::int_>(biasesOffset) &&
                                                      biasesOffset.cast<py::ssize_t>() == 0));
    const CNNConvolutionDescriptor d = aliasedDescriptor(descriptor, weights, biases, device, offsets);
    d.validate();
    AliasedStorage w = aliasedStorage(weights, device, "weights");
    BufferSlice wSlice = aliasSlice(w.slice, byteOffset(weightsOffset, "weights_offset"),
                                    size_t(d.weightCount()) * sizeof(float), "weights", "weights_offset");
    BufferSlice bSlice;
    const size_t bOffset = byteOffset(biasesOffset, "biases_offset");
    if (!biases.is_none()) {
        // Both buffers on the weights' device (a Vector of another device is a ValueError).
        AliasedStorage b = aliasedStorage(biases, py::cast(w.device), "biases");
        bSlice = aliasSlice(b.slice, bOffset, size_t(d.outputFeatureChannels) * sizeof(float), "biases",
                            "biases_offset");
    } else if (bOffset != 0) {
        throwValueError("biases_offset: must be 0 without biases, got ", bOffset);
    }
    return std::make_shared<CNNConvolutionWeightsAndBiasesState>(wSlice, bSlice, w.device, d);
}

std::shared_ptr<CNNConvolutionGradientState> toConvolutionGradientState(py::handle value, const char* what) {
    if (!py::isinstance<CNNConvolutionGradientState>(value))
        throwTypeError(what, ": expected a CNNConvolutionGradientState, got ", typeName(value));
    return value.cast<std::shared_ptr<CNNConvolutionGradientState>>();
}

// The transposed convolution's encode forms: those of CNNKernel, plus the ones sized by the
// paired convolution's gradient state (returning only, as in MPS).
py::object transposeEncode(py::object self, CommandBuffer& cb, py::handle source, py::handle destinationState,
                           py::handle destinationImage, py::handle convolutionState, py::handle stateIsTemporary,
                           bool batch) {
    const char* name = batch ? "encode_batch" : "encode";
    if (convolutionState.is_none())
        return py::type::of<CNNKernel>().attr(name)(self, cb, source, destinationState, destinationImage,
                                                    py::arg("destination_state_is_temporary") = stateIsTemporary);
    if (!destinationState.is_none() || !destinationImage.is_none())
        throwValueError(batch ? "convolution_gradient_states" : "convolution_gradient_state",
                        ": the forms sized by a convolution gradient state return their result; pass no "
                        "destination state or image");
    auto& k = self.cast<CNNConvolutionTranspose&>();
    const bool wantState = !stateIsTemporary.is_none();
    const bool temporary = wantState && toBool(stateIsTemporary, "destination_state_is_temporary");
    if (!batch) {
        ImagePtr src = toImageBatch(py::make_tuple(source), "source_image").front();
        StatePtr produced;
        ImagePtr dst = k.encode(cb, src, toConvolutionGradientState(convolutionState, "convolution_gradient_state"),
                                wantState ? &produced : nullptr, temporary);
        return wantState ? py::object(py::make_tuple(dst, produced)) : py::cast(dst);
    }
    ImageBatch sources = toImageBatch(source, "source_images");
    StateBatch states;
    for (py::handle s : py::iter(convolutionState))
        states.push_back(toConvolutionGradientState(s, "convolution_gradient_states"));
    StateBatch produced;
    ImageBatch dst = k.encodeBatch(cb, sources, states, wantState ? &produced : nullptr, temporary);
    return wantState ? py::object(py::make_tuple(dst, produced)) : py::cast(dst);
}

}  // namespace

std::shared_ptr<CNNConvolutionDataSource> toConvolutionDataSource(py::object object) {
    return toDataSource(std::move(object));
}

py::object convolutionDescriptorObject(const CNNConvolutionDescriptor& descriptor) {
    if (descriptor.subPixelScaleFactor != 1) return py::cast(CNNSubPixelConvolutionDescriptor(descriptor));
    return py::cast(descriptor);
}

void bindConvolution(py::module_& m) {
    py::enum_<CNNConvolutionGradientOption>(m, "CNNConvolutionGradientOption", "MPSCNNConvolutionGradientOption")
        .value("GRADIENT_WITH_DATA", CNNConvolutionGradientOption::GradientWithData)
        .value("GRADIENT_WITH_WEIGHTS_AND_BIAS", CNNConvolutionGradientOption::GradientWithWeightsAndBias)
        .value("ALL", CNNConvolutionGradientOption::All);
    py::enum_<NNConvolutionAccumulatorPrecisionOption>(m, "NNConvolutionAccumulatorPrecisionOption",
                                                       "MPSNNConvolutionAccumulatorPrecisionOption")
        .value("HALF", NNConvolutionAccumulatorPrecisionOption::Half)
        .value("FLOAT", NNConvolutionAccumulatorPrecisionOption::Float);

    py::class_<CNNConvolutionDescriptor>(m, "CNNConvolutionDescriptor", "MPSCNNConvolutionDescriptor")
        .def(py::init([](IntArg kw, IntArg kh, IntArg in, IntArg out, py::object neuron) {
                 CNNConvolutionDescriptor d(toInt64(kw.value, "kernel_width"), toInt64(kh.value, "kernel_height"),
                                            toInt64(in.value, "input_feature_channels"),
                                            toInt64(out.value, "output_feature_channels"));
                 if (!neuron.is_none()) d.fusedNeuronDescriptor = fromPython<NNNeuronDescriptor>(neuron, "neuron");
                 return d;
             }),
             py::arg("kernel_width") = 3, py::arg("kernel_height") = 3, py::arg("input_feature_channels") = 0,
             py::arg("output_feature_channels") = 0, py::arg("neuron") = py::none(),
             "+[MPSCNNConvolutionDescriptor cnnConvolutionDescriptorWithKernelWidth:kernelHeight:"
             "inputFeatureChannels:outputFeatureChannels:]")
        .def_property("kernel_width", getter(&CNNConvolutionDescriptor::kernelWidth), setter(&CNNConvolutionDescriptor::kernelWidth, "kernel_width"))
        .def_property("kernel_height", getter(&CNNConvolutionDescriptor::kernelHeight), setter(&CNNConvolutionDescriptor::kernelHeight, "kernel_height"))
        .def_property("input_feature_channels", getter(&CNNConvolutionDescriptor::inputFeatureChannels), setter(&CNNConvolutionDescriptor::inputFeatureChannels, "input_feature_channels"))
        .def_property("output_feature_channels", getter(&CNNConvolutionDescriptor::outputFeatureChannels), setter(&CNNConvolutionDescriptor::outputFeatureChannels, "output_feature_channels"))
        .def_property("stride_in_pixels_x", getter(&CNNConvolutionDescriptor::strideInPixelsX), setter(&CNNConvolutionDescriptor::strideInPixelsX, "stride_in_pixels_x"))
        .def_property("stride_in_pixels_y", getter(&CNNConvolutionDescriptor::strideInPixelsY), setter(&CNNConvolutionDescriptor::strideInPixelsY, "stride_in_pixels_y"))
        .def_property("groups", getter(&CNNConvolutionDescriptor::groups), setter(&CNNConvolutionDescriptor::groups, "groups"))
        .def_property("dilation_rate_x", getter(&CNNConvolutionDescriptor::dilationRateX), setter(&CNNConvolutionDescriptor::dilationRateX, "dilation_rate_x"))
        .def_property("dilation_rate_y", getter(&CNNConvolutionDescriptor::dilationRateY), setter(&CNNConvolutionDescriptor::dilationRateY, "dilation_rate_y"))
        .def_property("fused_neuron_descriptor",
                      [](const CNNConvolutionDescriptor& d) -> py::object {
                          if (d.fusedNeuronDescriptor.neuronType == CNNNeuronType::None) return py::none();
                          return py::cast(d.fusedNeuronDescriptor);
                      },
                      [](CNNConvolutionDescriptor& d, py::object n) {
                          d.fusedNeuronDescriptor = n.is_none() ? NNNeuronDescriptor() : fromPython<NNNeuronDescriptor>(n, "fused_neuron_descriptor");
                      },
                      "MPSCNNConvolutionDescriptor.fusedNeuronDescriptor (None: no neuron)")
        .def_property_readonly("channel_multiplier", &CNNConvolutionDescriptor::channelMultiplier)
        .def_property_readonly("is_depthwise", [](const CNNConvolutionDescriptor& d) { return d.depthwise; })
        .def("set_batch_normalization_parameters_for_inference",
             &CNNConvolutionDescriptor::setBatchNormalizationParametersForInference, py::arg("mean"),
             py::arg("variance"), py::arg("gamma"), py::arg("beta"), py::arg("epsilon"),
             "-setBatchNormalizationParametersForInferenceWithMean:variance:gamma:beta:epsilon:")
        .def("validate", &CNNConvolutionDescriptor::validate, "Raises ValueError naming a bad property.")
        .def("__repr__", [](const CNNConvolutionDescriptor& d) {
            return "CNNConvolutionDescriptor(" + std::to_string(d.kernelWidth) + "x" + std::to_string(d.kernelHeight) +
                   ", " + std::to_string(d.inputFeatureChannels) + "->" + std::to_string(d.outputFeatureChannels) +
                   ", stride " + std::to_string(d.strideInPixelsX) + "x" + std::to_string(d.strideInPixelsY) +
                   ", dilation " + std::to_string(d.dilationRateX) + "x" + std::to_string(d.dilationRateY) +
                   ", groups " + std::to_string(d.groups) + (d.depthwise ? ", depthwise" : "") +
                   (d.subPixelScaleFactor != 1 ? ", sub-pixel scale " + std::to_string(d.subPixelScaleFactor) : "") +
                   ")";
        });
    py::class_<CNNSubPixelConvolutionDescriptor, CNNConvolutionDescriptor>(
        m, "CNNSubPixelConvolutionDescriptor",
        "MPSCNNSubPixelConvolutionDescriptor: a convolution that computes output_feature_channels channels, then "
        "shuffles them into sub_pixel_scale_factor x sub_pixel_scale_factor pixel blocks of output_feature_channels / "
        "sub_pixel_scale_factor**2 channels (docs/convolution_sub_pixel.md)")
        .def(py::init([](IntArg kw, IntArg kh, IntArg in, IntArg out, IntArg scale, py::object neuron) {
                 CNNSubPixelConvolutionDescriptor d(
                     toInt64(kw.value, "kernel_width"), toInt64(kh.value, "kernel_height"),
                     toInt64(in.value, "input_feature_channels"), toInt64(out.value, "output_feature_channels"),
                     toInt64(scale.value, "sub_pixel_scale_factor"));
                 if (!neuron.is_none()) d.fusedNeuronDescriptor = fromPython<NNNeuronDescriptor>(neuron, "neuron");
                 return d;
             }),
             py::arg("kernel_width") = 3, py::arg("kernel_height") = 3, py::arg("input_feature_channels") = 0,
             py::arg("output_feature_channels") = 0, py::arg("sub_pixel_scale_factor") = 1,
             py::arg("neuron") = py::none(),
             "+[MPSCNNSubPixelConvolutionDescriptor cnnConvolutionDescriptorWithKernelWidth:kernelHeight:"
             "inputFeatureChannels:outputFeatureChannels:], then subPixelScaleFactor")
        .def_property("sub_pixel_scale_factor", getter(&CNNConvolutionDescriptor::subPixelScaleFactor),
                      setter(&CNNConvolutionDescriptor::subPixelScaleFactor, "sub_pixel_scale_factor"),
                      "MPSCNNSubPixelConvolutionDescriptor.subPixelScaleFactor [1]");
    m.def("CNNDepthWiseConvolutionDescriptor", [](int64_t kw, int64_t kh, int64_t in, int64_t out, py::object neuron) {
        CNNConvolutionDescriptor d(kw, kh, in, out);
        d.depthwise = true;
        if (!neuron.is_none()) d.fusedNeuronDescriptor = fromPython<NNNeuronDescriptor>(neuron, "neuron");
        return d;
    }, py::arg("kernel_width") = 3, py::arg("kernel_height") = 3, py::arg("input_feature_channels") = 0,
          py::arg("output_feature_channels") = 0, py::arg("neuron") = py::none(),
          "MPSCNNDepthWiseConvolutionDescriptor (channel multiplier 1: output == input channels); weights are "
          "(channels, kernel_height, kernel_width, 1)");

    py::class_<CNNConvolutionDataSource, std::shared_ptr<CNNConvolutionDataSource>>(
        m, "CNNConvolutionDataSource",
        "@protocol MPSCNNConvolutionDataSource. Any Python object with descriptor(), weights(), bias_terms(), "
        "load(), purge() (and optionally data_type(), label()) can be passed where a data source is expected.");

    py::class_<CNNConvolutionWeightsDataSource, CNNConvolutionDataSource,
               std::shared_ptr<CNNConvolutionWeightsDataSource>>(
        m, "CNNConvolutionWeightsDataSource",
        "A ready-made data source holding weights (O, kH, kW, I/groups) and biases (O,) in memory. `weights` and "
        "`biases` are writable NumPy views: update them, then call reload_weights_and_biases_from_data_source().")
        .def(py::init([](const CNNConvolutionDescriptor& d, py::handle weights, py::object biases, std::string label) {
                 d.validate();
                 auto w = floatArrayOfShape(weights, weightShape(d), "weights");
                 std::vector<float> b;
                 if (!biases.is_none()) {
                     auto ba = floatArrayOfShape(biases, {py::ssize_t(d.outputFeatureChannels)}, "biases");
                     b.assign(ba.data(), ba.data() + ba.size());
                 }
                 return std::make_shared<CNNConvolutionWeightsDataSource>(
                     d, std::vector<float>(w.data(), w.data() + w.size()), std::move(b), std::move(label));
             }),
             py::arg("descriptor"), py::arg("weights"), py::arg("biases") = py::none(), py::arg("label") = "")
        .def("descriptor", [](CNNConvolutionWeightsDataSource& s) { return convolutionDescriptorObject(s.descriptor()); },
             "-descriptor")
        .def("load", &CNNConvolutionWeightsDataSource::load, "-load")
        .def("purge", &CNNConvolutionWeightsDataSource::purge, "-purge")
        .def("label", &CNNConvolutionWeightsDataSource::label, "-label")
        .def("data_type", &CNNConvolutionWeightsDataSource::dataType, "-dataType")
        .def_property_readonly("weights", [](py::object self) {
            auto& s = self.cast<CNNConvolutionWeightsDataSource&>();
            auto d = s.descriptor();
            return py::array(py::dtype::of<float>(), weightShape(d), s.weightValues().data(), self);
        }, "The weights (O, kH, kW, I/groups), a writable view")
        .def_property_readonly("biases", [](py::object self) -> py::object {
            auto& s = self.cast<CNNConvolutionWeightsDataSource&>();
            if (s.biasValues().empty()) return py::none();
            return py::array(py::dtype::of<float>(), {py::ssize_t(s.biasValues().size())}, s.biasValues().data(), self);
        }, "The biases (O,), a writable view, or None");

    py::class_<CNNConvolutionWeightsAndBiasesState, State, std::shared_ptr<CNNConvolutionWeightsAndBiasesState>>(
        m, "CNNConvolutionWeightsAndBiasesState", "MPSCNNConvolutionWeightsAndBiasesState")
        .def(py::init([](const DeviceArg& device, const CNNConvolutionDescriptor& d) {
                 return std::make_shared<CNNConvolutionWeightsAndBiasesState>(deviceOf(device), d);
             }),
             py::arg("device"), py::arg("descriptor"), "-initWithDevice:cnnConvolutionDescriptor:")
        .def(py::init(&weightsStateOver), py::kw_only(), py::arg("weights"), py::arg("biases") = py::none(),
             py::arg("descriptor") = py::none(), py::arg("weights_offset") = 0, py::arg("biases_offset") = 0,
             py::arg("device") = py::none(),
             "-initWithWeights:biases: / -initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor:"
             ": a state over existing memory, no copy (an update through the state is seen in `weights` / "
             "`biases`, and a write to them in the state). Each is a Vector (offset in bytes from its first "
             "element) or a writable C-contiguous float32 NumPy array (cpu device only). `descriptor` may be left "
             "out for a 4-D (O, kH, kW, I) weights array; biases None gives zero biases of the state's own.")
        .def_static("temporary", &CNNConvolutionWeightsAndBiasesState::temporary, py::arg("command_buffer"),
                    py::arg("descriptor"),
                    "+temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor: (zero "
                    "weights and biases; read count 1, valid on `command_buffer` only)")
        .def_static("temporary_cnn_convolution_weights_and_biases_state",
                    &CNNConvolutionWeightsAndBiasesState::temporary, py::arg("command_buffer"),
                    py::arg("cnn_convolution_descriptor"),
                    "+temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor: under "
                    "its full name (the same as temporary)")
        .def_property_readonly("weights_vector", [](const CNNConvolutionWeightsAndBiasesState& s) {
            return vectorOver(s, s.weights(), s.descriptor().weightCount());
        }, "[[MPSVector alloc] initWithBuffer:state.weights offset:state.weightsOffset descriptor:...]: a Vector "
           "aliasing the weights (for an optimizer's vector encode)")
        .def_property_readonly("biases_vector", [](const CNNConvolutionWeightsAndBiasesState& s) {
            return vectorOver(s, s.biases(), s.descriptor().outputFeatureChannels);
        }, "A Vector aliasing the biases")
        .def_property_readonly("weights", [](const CNNConvolutionWeightsAndBiasesState& s) {
            return floatView(s.weights(), weightShape(s.descriptor()));
        }, "MPSCNNConvolutionWeightsAndBiasesState.weights as a writable (O, kH, kW, I/groups) view")
        .def_property_readonly("biases", [](const CNNConvolutionWeightsAndBiasesState& s) {
            return floatView(s.biases(), {py::ssize_t(s.descriptor().outputFeatureChannels)});
        }, "MPSCNNConvolutionWeightsAndBiasesState.biases as a writable (O,) view")
        .def_property_readonly("weights_offset", [](const CNNConvolutionWeightsAndBiasesState& s) { return s.weights().offset; },
                               "MPSCNNConvolutionWeightsAndBiasesState.weightsOffset: bytes into the weights' buffer")
        .def_property_readonly("biases_offset", [](const CNNConvolutionWeightsAndBiasesState& s) { return s.biases().offset; },
                               "MPSCNNConvolutionWeightsAndBiasesState.biasesOffset: bytes into the biases' buffer");

    py::class_<CNNConvolution, CNNKernel, std::shared_ptr<CNNConvolution>>(m, "CNNConvolution", "MPSCNNConvolution")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNConvolution>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"), "-[MPSCNNConvolution initWithDevice:weights:]")
        .def_property_readonly("input_feature_channels", &CNNConvolution::inputFeatureChannels)
        .def_property_readonly("output_feature_channels", &CNNConvolution::outputFeatureChannels)
        .def_property_readonly("groups", &CNNConvolution::groups)
        .def_property_readonly("channel_multiplier", &CNNConvolution::channelMultiplier)
        .def_property_readonly("sub_pixel_scale_factor", &CNNConvolution::subPixelScaleFactor)
        .def_property_readonly("data_source", [](const CNNConvolution& k) { return dataSourceObject(k.dataSource()); })
        .def_property_readonly("fused_neuron_descriptor", [](const CNNConvolution& k) -> py::object {
            if (k.fusedNeuronDescriptor().neuronType == CNNNeuronType::None) return py::none();
            return py::cast(k.fusedNeuronDescriptor());
        })
        .def_property("accumulator_precision_option", getter(&CNNConvolution::accumulatorPrecisionOption), setter(&CNNConvolution::accumulatorPrecisionOption, "accumulator_precision_option"))
        .def("reload_weights_and_biases_from_data_source", &CNNConvolution::reloadWeightsAndBiasesFromDataSource,
             "-reloadWeightsAndBiasesFromDataSource")
        .def("reload_weights_and_biases_with_command_buffer",
             &CNNConvolution::reloadWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"), py::arg("state"),
             "-reloadWeightsAndBiasesWithCommandBuffer:state: (decrements a temporary state's read count)")
        .def("export_weights_and_biases_with_command_buffer",
             &CNNConvolution::exportWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"),
             py::arg("result_state_can_be_temporary") = false,
             "-exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:");

    py::class_<CNNConvolutionGradientState, NNGradientState, std::shared_ptr<CNNConvolutionGradientState>>(
        m, "CNNConvolutionGradientState", "MPSCNNConvolutionGradientState")
        .def_property_readonly("gradient_for_weights", [](const CNNConvolutionGradientState& s) {
            return floatView(s.gradientForWeights(), weightShape(s.descriptor()));
        }, "MPSCNNConvolutionGradientState.gradientForWeights: (O, kH, kW, I/groups), summed over the batch")
        .def_property_readonly("gradient_for_biases", [](const CNNConvolutionGradientState& s) {
            return floatView(s.gradientForBiases(), {py::ssize_t(s.descriptor().outputFeatureChannels)});
        }, "MPSCNNConvolutionGradientState.gradientForBiases: (O,), summed over the batch")
        .def_property_readonly("gradient_for_weights_vector", [](const CNNConvolutionGradientState& s) {
            return vectorOver(s, s.gradientForWeights(), s.descriptor().weightCount());
        }, "[[MPSVector alloc] initWithBuffer:state.gradientForWeights descriptor:...]: a Vector aliasing the weight "
           "gradients (for an optimizer's vector encode)")
        .def_property_readonly("gradient_for_biases_vector", [](const CNNConvolutionGradientState& s) {
            return vectorOver(s, s.gradientForBiases(), s.descriptor().outputFeatureChannels);
        }, "A Vector aliasing the bias gradients")
        .def_property_readonly("convolution", &CNNConvolutionGradientState::convolution,
                               "MPSCNNConvolutionGradientState.convolution")
        .def_property_readonly("gradient_for_weights_layout", &CNNConvolutionGradientState::gradientForWeightsLayout)
        .def_property_readonly("source_width", &CNNConvolutionGradientState::sourceWidth)
        .def_property_readonly("source_height", &CNNConvolutionGradientState::sourceHeight);

    py::class_<CNNConvolutionGradient, CNNGradientKernel, std::shared_ptr<CNNConvolutionGradient>>(
        m, "CNNConvolutionGradient", "MPSCNNConvolutionGradient")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNConvolutionGradient>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"),
             "-[MPSCNNConvolutionGradient initWithDevice:weights:] (pass the forward convolution's data source)")
        .def_property_readonly("source_gradient_feature_channels", &CNNConvolutionGradient::sourceGradientFeatureChannels)
        .def_property_readonly("source_image_feature_channels", &CNNConvolutionGradient::sourceImageFeatureChannels)
        .def_property_readonly("groups", &CNNConvolutionGradient::groups)
        .def_property_readonly("channel_multiplier", &CNNConvolutionGradient::channelMultiplier)
        .def_property_readonly("data_source", [](const CNNConvolutionGradient& k) { return dataSourceObject(k.dataSource()); })
        .def_property("gradient_option", getter(&CNNConvolutionGradient::gradientOption), [](CNNConvolutionGradient& k, py::handle value) {
                          auto option = fromPython<CNNConvolutionGradientOption>(value, "gradient_option");
                          if (uint32_t(option) < 1 || uint32_t(option) > 3)
                              throwValueError("gradient_option: must be GRADIENT_WITH_DATA, "
                                              "GRADIENT_WITH_WEIGHTS_AND_BIAS or ALL, got ", uint32_t(option));
                          k.gradientOption = option;
                      },
                       "MPSCNNConvolutionGradient.gradientOption")
        .def("reload_weights_and_biases_from_data_source",
             &CNNConvolutionGradient::reloadWeightsAndBiasesFromDataSource, "-reloadWeightsAndBiasesFromDataSource")
        .def("reload_weights_and_biases_with_command_buffer",
             &CNNConvolutionGradient::reloadWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"),
             py::arg("state"), "-reloadWeightsAndBiasesWithCommandBuffer:state:");

    // Fully connected: the convolution classes with a source-sized kernel (docs/fully_connected.md).
    py::class_<CNNFullyConnected, CNNConvolution, std::shared_ptr<CNNFullyConnected>>(
        m, "CNNFullyConnected",
        "MPSCNNFullyConnected: a convolution whose kernel (kernel_width x kernel_height) covers the whole source; "
        "the result is 1x1 x output_feature_channels. Weights (O, srcH, srcW, I) (OHWI).")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNFullyConnected>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"), "-[MPSCNNFullyConnected initWithDevice:weights:]");
    py::class_<CNNFullyConnectedGradient, CNNConvolutionGradient, std::shared_ptr<CNNFullyConnectedGradient>>(
        m, "CNNFullyConnectedGradient", "MPSCNNFullyConnectedGradient")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNFullyConnectedGradient>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"),
             "-[MPSCNNFullyConnectedGradient initWithDevice:weights:] (pass the forward layer's data source)");

    // Transposed convolution (docs/convolution_transpose.md).
    // The state class first (the kernel's encodes return it); its property naming the kernel class
    // is added once that class is registered, so that the stubs know the property's type.
    py::class_<CNNConvolutionTransposeGradientState, CNNConvolutionGradientState,
               std::shared_ptr<CNNConvolutionTransposeGradientState>>
        transposeState(m, "CNNConvolutionTransposeGradientState",
                       "MPSCNNConvolutionTransposeGradientState: `convolution` is the upstream convolution whose "
                       "gradient state sized the result (or None)");
    py::class_<CNNConvolutionTranspose, CNNKernel, std::shared_ptr<CNNConvolutionTranspose>>(
        m, "CNNConvolutionTranspose",
        "MPSCNNConvolutionTranspose: zero-insert the source (stride - 1 zeros between pixels), then a stride-1 "
        "correlation with the OHWI weights used as given (not rotated)")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNConvolutionTranspose>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"), "-[MPSCNNConvolutionTranspose initWithDevice:weights:]")
        .def_property_readonly("input_feature_channels", &CNNConvolutionTranspose::inputFeatureChannels)
        .def_property_readonly("output_feature_channels", &CNNConvolutionTranspose::outputFeatureChannels)
        .def_property_readonly("groups", &CNNConvolutionTranspose::groups)
        .def_property_readonly("data_source", [](const CNNConvolutionTranspose& k) { return dataSourceObject(k.dataSource()); })
        .def_property("kernel_offset_x", getter(&CNNConvolutionTranspose::kernelOffsetX), setter(&CNNConvolutionTranspose::kernelOffsetX, "kernel_offset_x"))
        .def_property("kernel_offset_y", getter(&CNNConvolutionTranspose::kernelOffsetY), setter(&CNNConvolutionTranspose::kernelOffsetY, "kernel_offset_y"))
        .def_property("accumulator_precision_option", getter(&CNNConvolutionTranspose::accumulatorPrecisionOption), setter(&CNNConvolutionTranspose::accumulatorPrecisionOption, "accumulator_precision_option"))
        .def("encode",
             [](py::object self, CommandBuffer& cb, py::handle source, py::handle destinationState,
                py::handle destinationImage, py::handle convolutionState, py::handle stateIsTemporary) {
                 return transposeEncode(self, cb, source, destinationState, destinationImage, convolutionState,
                                        stateIsTemporary, false);
             },
             py::arg("command_buffer"), py::arg("source_image"), py::arg("destination_state") = py::none(),
             py::arg("destination_image") = py::none(), py::kw_only(),
             py::arg("convolution_gradient_state") = py::none(), py::arg("destination_state_is_temporary") = py::none(),
             "The CNNKernel encode forms, and with convolution_gradient_state "
             "-encodeToCommandBuffer:sourceImage:convolutionGradientState:[destinationState:"
             "destinationStateIsTemporary:] (result sized to that convolution's source; returns the image, or "
             "(image, state) with destination_state_is_temporary)")
        .def("encode_batch",
             [](py::object self, CommandBuffer& cb, py::handle sources, py::handle destinationStates,
                py::handle destinationImages, py::handle convolutionStates, py::handle stateIsTemporary) {
                 return transposeEncode(self, cb, sources, destinationStates, destinationImages, convolutionStates,
                                        stateIsTemporary, true);
             },
             py::arg("command_buffer"), py::arg("source_images"), py::arg("destination_states") = py::none(),
             py::arg("destination_images") = py::none(), py::kw_only(),
             py::arg("convolution_gradient_states") = py::none(),
             py::arg("destination_state_is_temporary") = py::none(),
             "The CNNKernel batch encode forms, and with convolution_gradient_states "
             "-encodeBatchToCommandBuffer:sourceImages:convolutionGradientStates:[destinationStates:"
             "destinationStateIsTemporary:]")
        .def("reload_weights_and_biases_from_data_source",
             &CNNConvolutionTranspose::reloadWeightsAndBiasesFromDataSource, "-reloadWeightsAndBiasesFromDataSource")
        .def("reload_weights_and_biases_with_command_buffer",
             &CNNConvolutionTranspose::reloadWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"),
             py::arg("state"), "-reloadWeightsAndBiasesWithCommandBuffer:state:")
        .def("export_weights_and_biases_with_command_buffer",
             &CNNConvolutionTranspose::exportWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"),
             py::arg("result_state_can_be_temporary") = false,
             "-exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:");
    transposeState.def_property_readonly("convolution_transpose",
                                         &CNNConvolutionTransposeGradientState::convolutionTranspose,
                                         "MPSCNNConvolutionTransposeGradientState.convolutionTranspose");
    py::class_<CNNConvolutionTransposeGradient, CNNGradientKernel, std::shared_ptr<CNNConvolutionTransposeGradient>>(
        m, "CNNConvolutionTransposeGradient", "MPSCNNConvolutionTransposeGradient")
        .def(py::init([](const DeviceArg& device, py::object weights) {
                 return std::make_shared<CNNConvolutionTransposeGradient>(deviceOf(device), toDataSource(weights));
             }),
             py::arg("device"), py::arg("weights"),
             "-[MPSCNNConvolutionTransposeGradient initWithDevice:weights:] (pass the forward kernel's data source)")
        .def_property_readonly("source_gradient_feature_channels",
                               &CNNConvolutionTransposeGradient::sourceGradientFeatureChannels)
        .def_property_readonly("source_image_feature_channels",
                               &CNNConvolutionTransposeGradient::sourceImageFeatureChannels)
        .def_property_readonly("groups", &CNNConvolutionTransposeGradient::groups)
        .def_property_readonly("data_source",
                               [](const CNNConvolutionTransposeGradient& k) { return dataSourceObject(k.dataSource()); })
        .def_property("gradient_option", getter(&CNNConvolutionTransposeGradient::gradientOption),
                      [](CNNConvolutionTransposeGradient& k, py::handle value) {
                          auto option = fromPython<CNNConvolutionGradientOption>(value, "gradient_option");
                          if (uint32_t(option) < 1 || uint32_t(option) > 3)
                              throwValueError("gradient_option: must be GRADIENT_WITH_DATA, "
                                              "GRADIENT_WITH_WEIGHTS_AND_BIAS or ALL, got ", uint32_t(option));
                          k.gradientOption = option;
                      },
                      "MPSCNNConvolutionTransposeGradient.gradientOption")
        .def("reload_weights_and_biases_from_data_source",
             &CNNConvolutionTransposeGradient::reloadWeightsAndBiasesFromDataSource,
             "-reloadWeightsAndBiasesFromDataSource")
        .def("reload_weights_and_biases_with_command_buffer",
             &CNNConvolutionTransposeGradient::reloadWeightsAndBiasesWithCommandBuffer, py::arg("command_buffer"),
             py::arg("state"), "-reloadWeightsAndBiasesWithCommandBuffer:state:");
}

}  // namespace mpsgrad::python
