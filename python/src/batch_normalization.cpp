// Bindings of the batch normalization family (MPSCNNBatchNormalization.h, MPSCNNNormalizationWeights.h).
#include <cfloat>
#include <cstring>

#include "aliasing.h"
#include "bindings.h"
#include "kernels/batch_normalization.h"

namespace mpsgrad::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

Device bnDevice(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (!py::isinstance<Device>(device))
        throwTypeError("device: expected a Device or a device name, got ", std::string(py::repr(py::type::of(device))));
    return device.cast<Device>();
}

std::string typeName(py::handle value) { return std::string(py::repr(py::type::of(value))); }

// A 1-D float32 array of `count` values from array-like `value`; TypeError / ValueError naming `what`.
FloatArray floatsOf(py::handle value, int64_t count, const char* what) {
    FloatArray array;
    try {
        array = FloatArray::ensure(value);
    } catch (...) {
    }
    if (!array) throwTypeError(what, ": expected a float32 array, got ", typeName(value));
    if (count >= 0 && array.size() != count)
        throwValueError(what, ": expected ", count, " float32 values (one per feature channel), got ", array.size());
    return array;
}

std::vector<float> vectorOf(py::handle value, int64_t count, const char* what) {
    FloatArray a = floatsOf(value, count, what);
    return std::vector<float>(a.data(), a.data() + a.size());
}

// Adapts any Python object with the MPSCNNBatchNormalizationDataSource methods
// (number_of_feature_channels(), gamma(), beta(), mean(), variance(), load(), purge(); optional
// label(), epsilon()).
class PythonBatchNormalizationDataSource final : public CNNBatchNormalizationDataSource {
public:
    explicit PythonBatchNormalizationDataSource(py::object object) : object_(std::move(object)) {
        for (const char* name : {"number_of_feature_channels", "gamma", "beta", "mean", "variance", "load", "purge"})
            if (!py::hasattr(object_, name))
                throwTypeError("data_source: the data source ", typeName(object_), " has no method ", name,
                               "() (MPSCNNBatchNormalizationDataSource protocol)");
    }
    ~PythonBatchNormalizationDataSource() override {
        py::gil_scoped_acquire gil;
        held_.clear();
        object_ = py::object();
    }

    int64_t numberOfFeatureChannels() override {
        py::gil_scoped_acquire gil;
        py::object n = object_.attr("number_of_feature_channels")();
        if (!py::isinstance<py::int_>(n))
            throwTypeError("data_source.number_of_feature_channels(): expected an int, got ", typeName(n));
        channels_ = n.cast<int64_t>();
        return channels_;
    }
    const float* gamma() override { return values("gamma", "data_source.gamma()", false); }
    const float* beta() override { return values("beta", "data_source.beta()", true); }
    const float* mean() override { return values("mean", "data_source.mean()", false); }
    const float* variance() override { return values("variance", "data_source.variance()", false); }
    bool load() override {
        py::gil_scoped_acquire gil;
        return py::bool_(object_.attr("load")());
    }
    void purge() override {
        py::gil_scoped_acquire gil;
        held_.clear();
        object_.attr("purge")();
    }
    std::string label() override {
        py::gil_scoped_acquire gil;
        return py::hasattr(object_, "label") ? py::str(object_.attr("label")()).cast<std::string>() : std::string();
    }
    std::optional<float> epsilon() override {
        py::gil_scoped_acquire gil;
        if (!py::hasattr(object_, "epsilon")) return std::nullopt;
        py::object e = object_.attr("epsilon")();
        if (!py::isinstance<py::float_>(e) && !py::isinstance<py::int_>(e))
            throwTypeError("data_source.epsilon(): expected a float, got ", typeName(e));
        return e.cast<float>();
    }
    py::object object() const { return object_; }

private:
    const float* values(const char* method, const char* what, bool optional) {
        py::gil_scoped_acquire gil;
        py::object v = object_.attr(method)();
        if (v.is_none()) {
            if (optional) return nullptr;
            throwTypeError(what, ": expected a float32 array, got None");
        }
        FloatArray array = floatsOf(v, channels_, what);
        held_.push_back(array);
        return array.data();
    }

    py::object object_;
    std::vector<py::object> held_;  // arrays handed out since load(), kept alive until purge()
    int64_t channels_ = 0;
};

std::shared_ptr<CNNBatchNormalizationDataSource> toDataSource(py::object object) {
    if (object.is_none()) throwTypeError("data_source: expected a CNNBatchNormalizationDataSource, got None");
    if (py::isinstance<CNNBatchNormalizationDataSource>(object))
        return object.cast<std::shared_ptr<CNNBatchNormalizationDataSource>>();
    return std::make_shared<PythonBatchNormalizationDataSource>(object);
}

py::object dataSourceObject(const std::shared_ptr<CNNBatchNormalizationDataSource>& source) {
    if (auto* python = dynamic_cast<PythonBatchNormalizationDataSource*>(source.get())) return python->object();
    return py::cast(source);
}

NNNeuronDescriptor neuronOf(py::handle value) {
    if (value.is_none()) return {};
    if (!py::isinstance<NNNeuronDescriptor>(value))
        throwTypeError("fused_neuron_descriptor: expected an NNNeuronDescriptor or None, got ", typeName(value));
    return value.cast<NNNeuronDescriptor>();
}

py::object neuronObject(const NNNeuronDescriptor& d) {
    if (d.neuronType == CNNNeuronType::None) return py::none();
    return py::cast(d);
}

ImagePtr imageOf(py::handle value, const char* what) {
    if (value.is_none() || !py::isinstance<Image>(value))
        throwTypeError(what, ": expected an Image, got ", typeName(value));
    return value.cast<ImagePtr>();
}

std::shared_ptr<CNNBatchNormalizationState> bnStateOf(py::handle value, const char* what, bool allowNone) {
    if (value.is_none()) {
        if (allowNone) return nullptr;
        throwTypeError(what, ": expected a CNNBatchNormalizationState, got None");
    }
    if (!py::isinstance<CNNBatchNormalizationState>(value))
        throwTypeError(what, ": expected a CNNBatchNormalizationState (from CNNBatchNormalization.result_state), got ",
                       typeName(value));
    return value.cast<std::shared_ptr<CNNBatchNormalizationState>>();
}

template <class StateT>
std::shared_ptr<StateT> stateOf(py::handle value, const char* what, const char* expected) {
    if (value.is_none() || !py::isinstance<StateT>(value))
        throwTypeError(what, ": expected a ", expected, ", got ", typeName(value));
    return value.cast<std::shared_ptr<StateT>>();
}

py::object vectorView(const BufferSlice& slice, int64_t channels) {
    if (!slice) return py::none();
    return floatView(slice, {py::ssize_t(channels)});
}

int64_t channelsArg(int64_t channels) {
    if (channels < 1) throwValueError("number_of_feature_channels: must be >= 1, got ", channels);
    return channels;
}

// A two-buffer normalization state (gamma / beta, mean / variance) from `first` and `second`: over
// them, no copy, when both are Vectors (MPS's -initWithGamma:beta: over existing MTLBuffers; offsets
// in bytes from each Vector's first element, `count` None: what the first holds after its offset);
// from a copy of their values when both are array-likes (the state's own buffers on `device`).
template <class StateT>
std::shared_ptr<StateT> pairState(py::handle device, py::handle first, py::handle second, py::handle count,
                                  py::handle firstOffset, py::handle secondOffset, const char* firstName,
                                  const char* secondName, const char* firstOffsetName, const char* secondOffsetName) {
    const bool firstVector = py::isinstance<Vector>(first), secondVector = py::isinstance<Vector>(second);
    if (!firstVector && !secondVector) {
        if (!count.is_none() || byteOffset(firstOffset, firstOffsetName) != 0 ||
            byteOffset(secondOffset, secondOffsetName) != 0)
            throwTypeError(firstOffsetName, ", ", secondOffsetName,
                           ", number_of_feature_channels: only for Vectors (array values are copied)");
        std::vector<float> a = vectorOf(first, -1, firstName);
        const Device target = bnDevice(py::reinterpret_borrow<py::object>(device));
        return std::make_shared<StateT>(target, a, vectorOf(second, int64_t(a.size()), secondName));
    }
    if (!firstVector || !secondVector)
        throwTypeError(firstVector ? secondName : firstName, ": expected a Vector like ",
                       firstVector ? firstName : secondName, " (both are aliased, or both copied)");
    AliasedStorage a = aliasedStorage(first, device, firstName);
    AliasedStorage b = aliasedStorage(second, py::cast(a.device), secondName);
    const size_t aOffset = byteOffset(firstOffset, firstOffsetName);
    const size_t bOffset = byteOffset(secondOffset, secondOffsetName);
    int64_t channels = 0;
    if (count.is_none()) {
        if (aOffset >= a.floats * sizeof(float))
            throwValueError(firstOffsetName, ": ", aOffset, " is at or past the end of ", firstName, " (",
                            a.floats * sizeof(float), " bytes)");
        channels = int64_t(a.floats - aOffset / sizeof(float));
    } else {
        channels = toInt64(count, "number_of_feature_channels", 1, INT32_MAX);
    }
    const size_t bytes = size_t(channels) * sizeof(float);
    return std::make_shared<StateT>(a.device, channels, aliasSlice(a.slice, aOffset, bytes, firstName, firstOffsetName),
                                    aliasSlice(b.slice, bOffset, bytes, secondName, secondOffsetName));
}

std::shared_ptr<CNNNormalizationGammaAndBetaState> gammaBetaState(py::handle device, py::handle gamma, py::handle beta,
                                                                  py::handle count, py::handle gammaOffset,
                                                                  py::handle betaOffset) {
    return pairState<CNNNormalizationGammaAndBetaState>(device, gamma, beta, count, gammaOffset, betaOffset, "gamma",
                                                        "beta", "gamma_offset", "beta_offset");
}

std::shared_ptr<CNNNormalizationMeanAndVarianceState> meanVarianceState(py::handle device, py::handle mean,
                                                                        py::handle variance, py::handle count,
                                                                        py::handle meanOffset,
                                                                        py::handle varianceOffset) {
    return pairState<CNNNormalizationMeanAndVarianceState>(device, mean, variance, count, meanOffset, varianceOffset,
                                                           "mean", "variance", "mean_offset", "variance_offset");
}

constexpr const char* kPairStateDoc =
    " over existing memory when both values are Vectors: the state aliases them (offsets in bytes from each "
    "Vector's first element; number_of_feature_channels None: what the first holds after its offset), so a "
    "reload reads what an optimizer last wrote there. Array-likes are copied into new buffers on `device`.";

void bindStates(py::module_& m) {
    py::class_<CNNNormalizationGammaAndBetaState, State, std::shared_ptr<CNNNormalizationGammaAndBetaState>>(
        m, "CNNNormalizationGammaAndBetaState", "MPSCNNNormalizationGammaAndBetaState: gamma and beta buffers")
        .def(py::init(&gammaBetaState), py::arg("device"), py::arg("gamma"), py::arg("beta"), py::kw_only(),
             py::arg("number_of_feature_channels") = py::none(), py::arg("gamma_offset") = 0,
             py::arg("beta_offset") = 0, (std::string("-initWithGamma:beta:") + kPairStateDoc).c_str())
        .def(py::init([](py::handle gamma, py::handle beta, py::handle count, py::handle gOffset, py::handle bOffset,
                         py::handle device) { return gammaBetaState(device, gamma, beta, count, gOffset, bOffset); }),
             py::kw_only(), py::arg("gamma"), py::arg("beta"), py::arg("number_of_feature_channels") = py::none(),
             py::arg("gamma_offset") = 0, py::arg("beta_offset") = 0, py::arg("device") = py::none(),
             "-initWithGamma:beta: with keywords only (device None: the Vectors', or the default device for arrays)")
        .def_static("temporary", [](CommandBuffer& cb, int64_t channels) {
            return CNNNormalizationGammaAndBetaState::temporary(cb, channelsArg(channels));
        }, py::arg("command_buffer"), py::arg("number_of_feature_channels"),
           "+temporaryStateWithCommandBuffer:numberOfFeatureChannels:")
        .def_property_readonly("number_of_feature_channels", &CNNNormalizationGammaAndBetaState::numberOfFeatureChannels)
        .def_property_readonly("gamma", [](const CNNNormalizationGammaAndBetaState& s) {
            return vectorView(s.gamma(), s.numberOfFeatureChannels());
        }, "-gamma as a writable (C,) view")
        .def_property_readonly("beta", [](const CNNNormalizationGammaAndBetaState& s) {
            return vectorView(s.beta(), s.numberOfFeatureChannels());
        }, "-beta as a writable (C,) view")
        .def_property_readonly("gamma_vector", [](const CNNNormalizationGammaAndBetaState& s) {
            return vectorOver(s, s.gamma(), s.numberOfFeatureChannels());
        }, "A Vector aliasing -gamma (MPSVector initWithBuffer:state.gamma ...)")
        .def_property_readonly("beta_vector", [](const CNNNormalizationGammaAndBetaState& s) {
            return vectorOver(s, s.beta(), s.numberOfFeatureChannels());
        }, "A Vector aliasing -beta");

    py::class_<CNNNormalizationMeanAndVarianceState, State, std::shared_ptr<CNNNormalizationMeanAndVarianceState>>(
        m, "CNNNormalizationMeanAndVarianceState", "MPSCNNNormalizationMeanAndVarianceState: mean and variance buffers")
        .def(py::init(&meanVarianceState), py::arg("device"), py::arg("mean"), py::arg("variance"), py::kw_only(),
             py::arg("number_of_feature_channels") = py::none(), py::arg("mean_offset") = 0,
             py::arg("variance_offset") = 0, (std::string("-initWithMean:variance:") + kPairStateDoc).c_str())
        .def(py::init([](py::handle mean, py::handle variance, py::handle count, py::handle mOffset,
                         py::handle vOffset, py::handle device) {
                 return meanVarianceState(device, mean, variance, count, mOffset, vOffset);
             }),
             py::kw_only(), py::arg("mean"), py::arg("variance"), py::arg("number_of_feature_channels") = py::none(),
             py::arg("mean_offset") = 0, py::arg("variance_offset") = 0, py::arg("device") = py::none(),
             "-initWithMean:variance: with keywords only (device None: the Vectors', or the default device for "
             "arrays)")
        .def_static("temporary", [](CommandBuffer& cb, int64_t channels) {
            return CNNNormalizationMeanAndVarianceState::temporary(cb, channelsArg(channels));
        }, py::arg("command_buffer"), py::arg("number_of_feature_channels"),
           "+temporaryStateWithCommandBuffer:numberOfFeatureChannels:")
        .def_property_readonly("number_of_feature_channels",
                               &CNNNormalizationMeanAndVarianceState::numberOfFeatureChannels)
        .def_property_readonly("mean", [](const CNNNormalizationMeanAndVarianceState& s) {
            return vectorView(s.mean(), s.numberOfFeatureChannels());
        }, "-mean as a writable (C,) view")
        .def_property_readonly("variance", [](const CNNNormalizationMeanAndVarianceState& s) {
            return vectorView(s.variance(), s.numberOfFeatureChannels());
        }, "-variance as a writable (C,) view")
        .def_property_readonly("mean_vector", [](const CNNNormalizationMeanAndVarianceState& s) {
            return vectorOver(s, s.mean(), s.numberOfFeatureChannels());
        }, "A Vector aliasing -mean (MPSVector initWithBuffer:state.mean ...)")
        .def_property_readonly("variance_vector", [](const CNNNormalizationMeanAndVarianceState& s) {
            return vectorOver(s, s.variance(), s.numberOfFeatureChannels());
        }, "A Vector aliasing -variance");

    py::class_<CNNBatchNormalizationState, NNGradientState, std::shared_ptr<CNNBatchNormalizationState>>(
        m, "CNNBatchNormalizationState",
        "MPSCNNBatchNormalizationState, made by CNNBatchNormalization.result_state / temporary_result_state. Its "
        "buffers are (C,) float32 views, valid once the command buffer that wrote them has completed.")
        .def_property_readonly("batch_normalization",
                               [](const CNNBatchNormalizationState& s) { return py::cast(s.batchNormalization()); },
                               "-batchNormalization: the CNNBatchNormalization that made the state")
        .def_property_readonly("number_of_feature_channels", &CNNBatchNormalizationState::numberOfFeatureChannels)
        .def_property_readonly("gamma", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.gamma(), s.numberOfFeatureChannels());
        }, "-gamma: the gamma the forward pass used")
        .def_property_readonly("beta", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.beta(), s.numberOfFeatureChannels());
        }, "-beta: the beta the forward pass used")
        .def_property_readonly("mean", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.mean(), s.numberOfFeatureChannels());
        }, "-mean: the batch mean (or the data source's mean after an inference forward)")
        .def_property_readonly("variance", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.variance(), s.numberOfFeatureChannels());
        }, "-variance: the biased batch variance (or the data source's after an inference forward)")
        .def_property_readonly("gradient_for_gamma", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.gradientForGamma(), s.numberOfFeatureChannels());
        }, "-gradientForGamma: sum over the batch of G'·x̂ (None until a statistics gradient has been encoded)")
        .def_property_readonly("gradient_for_beta", [](const CNNBatchNormalizationState& s) {
            return vectorView(s.gradientForBeta(), s.numberOfFeatureChannels());
        }, "-gradientForBeta: sum over the batch of G' (None until a statistics gradient has been encoded)")
        .def("reset", &CNNBatchNormalizationState::reset,
             "-reset: forget the accumulated statistics and gradients");
    // <buffer>_vector: [[MPSVector alloc] initWithBuffer:state.<buffer> descriptor:(C floats)], a Vector
    // aliasing the buffer (the gradients' too, before a statistics gradient fills them), for an
    // optimizer's vector encode (docs/losses_and_optimizers.md, "Negative learning rates").
    py::object bnState = m.attr("CNNBatchNormalizationState");
    static const char* const names[] = {"gamma_vector", "beta_vector", "mean_vector", "variance_vector",
                                        "gradient_for_gamma_vector", "gradient_for_beta_vector"};
    for (size_t index = 0; index < 6; ++index) {
        py::cpp_function getter([index](const CNNBatchNormalizationState& s) {
            return vectorOver(s, s.resourceAtIndex(index), s.numberOfFeatureChannels());
        });
        const std::string doc = std::string("A Vector aliasing the state's ") +
                                std::string(names[index], std::strlen(names[index]) - 7) + " buffer (C floats)";
        py::setattr(bnState, names[index],
                    py::module_::import("builtins").attr("property")(getter, py::none(), py::none(), doc));
    }
}

void bindDataSources(py::module_& m) {
    py::class_<CNNBatchNormalizationDataSource, std::shared_ptr<CNNBatchNormalizationDataSource>>(
        m, "CNNBatchNormalizationDataSource",
        "@protocol MPSCNNBatchNormalizationDataSource. Any Python object with number_of_feature_channels(), "
        "gamma(), beta() (None: no bias), mean(), variance(), load(), purge() (and optionally label(), epsilon(); "
        "without epsilon() the kernel uses FLT_MIN) can be passed where a data source is expected. The optional "
        "update methods are called by the application.");

    using DS = CNNBatchNormalizationWeightsDataSource;
    auto view = [](py::object self, std::vector<float> DS::*member) -> py::object {
        auto& s = self.cast<DS&>();
        auto& v = s.*member;
        if (v.empty()) return py::none();
        return py::array(py::dtype::of<float>(), {py::ssize_t(v.size())}, v.data(), self);
    };
    py::class_<DS, CNNBatchNormalizationDataSource, std::shared_ptr<DS>>(
        m, "CNNBatchNormalizationWeightsDataSource",
        "A ready-made MPSCNNBatchNormalizationDataSource holding gamma, beta, mean and variance in memory (the "
        "methods return writable views: change them, then call the kernel's reload_*_from_data_source()). Its CPU-"
        "style update methods apply gamma -= learning_rate·dγ, beta -= learning_rate·dβ and the running average "
        "mean = (1-momentum)·mean + momentum·batch_mean, variance likewise (with the batch variance made unbiased, "
        "M/(M-1), when unbiased_running_variance, as torch.nn.BatchNorm2d).")
        .def(py::init([](py::handle gamma, py::handle beta, py::handle mean, py::handle variance, py::object epsilon,
                         std::string label) {
                 std::vector<float> g = vectorOf(gamma, -1, "gamma");
                 const int64_t C = int64_t(g.size());
                 std::vector<float> b = beta.is_none() ? std::vector<float>() : vectorOf(beta, C, "beta");
                 std::vector<float> mu = mean.is_none() ? std::vector<float>(size_t(C), 0.0f) : vectorOf(mean, C, "mean");
                 std::vector<float> var =
                     variance.is_none() ? std::vector<float>(size_t(C), 1.0f) : vectorOf(variance, C, "variance");
                 std::optional<float> e;
                 if (!epsilon.is_none()) e = epsilon.cast<float>();
                 return std::make_shared<DS>(std::move(g), std::move(b), std::move(mu), std::move(var), e,
                                             std::move(label));
             }),
             py::arg("gamma"), py::arg("beta") = py::none(), py::arg("mean") = py::none(),
             py::arg("variance") = py::none(), py::arg("epsilon") = py::none(), py::arg("label") = "",
             "mean defaults to zeros, variance to ones; epsilon None: the protocol's default (FLT_MIN)")
        .def("number_of_feature_channels", &DS::numberOfFeatureChannels, "-numberOfFeatureChannels")
        .def("gamma", [view](py::object self) { return view(self, &DS::gamma_); }, "-gamma (a writable view)")
        .def("beta", [view](py::object self) { return view(self, &DS::beta_); }, "-beta (a writable view, or None)")
        .def("mean", [view](py::object self) { return view(self, &DS::mean_); }, "-mean (a writable view)")
        .def("variance", [view](py::object self) { return view(self, &DS::variance_); }, "-variance (a writable view)")
        .def("epsilon", [](DS& s) -> py::object {
            auto e = s.epsilon();
            return e ? py::cast(*e) : py::cast(FLT_MIN);
        }, "-epsilon")
        .def("load", &DS::load, "-load")
        .def("purge", &DS::purge, "-purge")
        .def("label", &DS::label, "-label")
        .def_readwrite("learning_rate", &DS::learningRate)
        .def_readwrite("momentum", &DS::momentum)
        .def_readwrite("unbiased_running_variance", &DS::unbiasedRunningVariance)
        .def("update_gamma_and_beta_with_batch_normalization_state",
             [](DS& s, py::handle state) {
                 return s.updateGammaAndBetaWithBatchNormalizationState(
                     bnStateOf(state, "batch_normalization_state", false));
             },
             py::arg("batch_normalization_state"),
             "-updateGammaAndBetaWithBatchNormalizationState: (CPU style; the command buffer must have completed; "
             "decrements a temporary state's read count)")
        .def("update_mean_and_variance_with_batch_normalization_state",
             [](DS& s, py::handle state) {
                 return s.updateMeanAndVarianceWithBatchNormalizationState(
                     bnStateOf(state, "batch_normalization_state", false));
             },
             py::arg("batch_normalization_state"),
             "-updateMeanAndVarianceWithBatchNormalizationState: (CPU style; decrements a temporary state's read "
             "count)");
}

void bindKernels(py::module_& m) {
    py::class_<CNNBatchNormalization, CNNKernel, std::shared_ptr<CNNBatchNormalization>>(
        m, "CNNBatchNormalization",
        "MPSCNNBatchNormalization: z = (X - mean)·gamma/sqrt(variance + epsilon) + beta, Y = f(z) with the optional "
        "fused neuron f. With a batch_normalization_state on which CNNBatchNormalizationStatistics has run, mean and "
        "variance are the batch statistics (training); otherwise the data source's (inference).")
        .def(py::init([](const DeviceArg& device, py::object dataSource, py::handle neuron) {
                 return std::make_shared<CNNBatchNormalization>(bnDevice(device), toDataSource(dataSource),
                                                                neuronOf(neuron));
             }),
             py::arg("device"), py::arg("data_source"), py::arg("fused_neuron_descriptor") = py::none(),
             "-initWithDevice:dataSource:[fusedNeuronDescriptor:]")
        .def_property_readonly("number_of_feature_channels", &CNNBatchNormalization::numberOfFeatureChannels)
        .def_property("epsilon", &CNNBatchNormalization::epsilon, &CNNBatchNormalization::setEpsilon,
                      "MPSCNNBatchNormalization.epsilon (> 0; the data source's epsilon(), else FLT_MIN)")
        .def_property_readonly("data_source", [](const CNNBatchNormalization& k) { return dataSourceObject(k.dataSource()); })
        .def_property_readonly("fused_neuron_descriptor",
                               [](const CNNBatchNormalization& k) { return neuronObject(k.fusedNeuronDescriptor()); })
        .def(
            "encode",
            [](CNNBatchNormalization& k, CommandBuffer& cb, py::handle source, py::handle state,
               py::handle destination) -> ImagePtr {
                ImagePtr src = imageOf(source, "source_image");
                auto s = bnStateOf(state, "batch_normalization_state", true);
                if (destination.is_none()) return k.encode(cb, src, s);  // single-image sources only
                ImagePtr dst = imageOf(destination, "destination_image");
                k.encode(cb, src, s, dst);
                return dst;
            },
            py::arg("command_buffer"), py::arg("source_image"), py::arg("batch_normalization_state") = py::none(),
            py::arg("destination_image") = py::none(),
            "-encodeToCommandBuffer:sourceImage:batchNormalizationState:destinationImage: (a temporary state's read "
            "count is decremented). Without a state: inference with the data source's statistics. Without a "
            "destination one is allocated and returned (the source must then have number_of_images == 1).")
        .def(
            "encode_batch",
            [](CNNBatchNormalization& k, CommandBuffer& cb, py::handle sources, py::handle state,
               py::handle destinations) -> ImageBatch {
                ImageBatch src = toImageBatch(sources, "source_images");
                auto s = bnStateOf(state, "batch_normalization_state", true);
                if (destinations.is_none()) return k.encodeBatch(cb, src, s);  // single-image sources only
                ImageBatch dst = toImageBatch(destinations, "destination_images");
                k.encodeBatch(cb, src, s ? StateBatch(src.size(), s) : StateBatch{}, dst);
                return dst;
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("batch_normalization_state") = py::none(),
            py::arg("destination_images") = py::none(),
            "-encodeBatchToCommandBuffer:sourceImages:batchNormalizationState:destinationImages: (without "
            "destination_images they are allocated and returned; the sources must then have number_of_images == 1)")
        .def("reload_gamma_and_beta_from_data_source", &CNNBatchNormalization::reloadGammaAndBetaFromDataSource,
             "-reloadGammaAndBetaFromDataSource")
        .def("reload_mean_and_variance_from_data_source", &CNNBatchNormalization::reloadMeanAndVarianceFromDataSource,
             "-reloadMeanAndVarianceFromDataSource")
        .def("reload_gamma_and_beta_with_command_buffer",
             [](CNNBatchNormalization& k, CommandBuffer& cb, py::handle state) {
                 k.reloadGammaAndBetaWithCommandBuffer(cb, stateOf<CNNNormalizationGammaAndBetaState>(
                                                               state, "gamma_and_beta_state",
                                                               "CNNNormalizationGammaAndBetaState"));
             },
             py::arg("command_buffer"), py::arg("gamma_and_beta_state"),
             "-reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (decrements a temporary state's read count)")
        .def("reload_mean_and_variance_with_command_buffer",
             [](CNNBatchNormalization& k, CommandBuffer& cb, py::handle state) {
                 k.reloadMeanAndVarianceWithCommandBuffer(cb, stateOf<CNNNormalizationMeanAndVarianceState>(
                                                                  state, "mean_and_variance_state",
                                                                  "CNNNormalizationMeanAndVarianceState"));
             },
             py::arg("command_buffer"), py::arg("mean_and_variance_state"),
             "-reloadMeanAndVarianceWithCommandBuffer:meanAndVarianceState: (decrements a temporary state's read "
             "count)");

    py::class_<CNNBatchNormalizationStatistics, CNNKernel, std::shared_ptr<CNNBatchNormalizationStatistics>>(
        m, "CNNBatchNormalizationStatistics",
        "MPSCNNBatchNormalizationStatistics: the per-channel mean and biased variance over every pixel of the batch, "
        "written to the state. Successive encode_batch calls on sub-batches accumulate until another kernel of the "
        "family encodes with the state (or reset()).")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNBatchNormalizationStatistics>(bnDevice(device)); }),
             py::arg("device"), "-initWithDevice:")
        .def(
            "encode_batch",
            [](CNNBatchNormalizationStatistics& k, CommandBuffer& cb, py::handle sources, py::handle state) {
                k.encodeBatch(cb, toImageBatch(sources, "source_images"),
                              bnStateOf(state, "batch_normalization_state", false));
            },
            py::arg("command_buffer"), py::arg("source_images"), py::arg("batch_normalization_state"),
            "-encodeBatchToCommandBuffer:sourceImages:batchNormalizationState: (the only encode MPS provides)")
        .def(
            "encode", [](CNNBatchNormalizationStatistics& k, py::args, py::kwargs) {
                throwTypeError(k.className(), ": only encode_batch(command_buffer, source_images, "
                               "batch_normalization_state) is available (MPS marks the other encodes unavailable)");
            },
            "Unavailable (as in MPS): use encode_batch.");

    py::class_<CNNBatchNormalizationStatisticsGradient, CNNGradientKernel,
               std::shared_ptr<CNNBatchNormalizationStatisticsGradient>>(
        m, "CNNBatchNormalizationStatisticsGradient",
        "MPSCNNBatchNormalizationStatisticsGradient: gradient_for_beta = sum G', gradient_for_gamma = sum G'·x̂ over "
        "the batch, G' = G·f'(z) for the fused neuron (which must match the forward's). Successive encode_batch calls "
        "on sub-batches add into the state.")
        .def(py::init([](const DeviceArg& device, py::handle neuron) {
                 return std::make_shared<CNNBatchNormalizationStatisticsGradient>(bnDevice(device), neuronOf(neuron));
             }),
             py::arg("device"), py::arg("fused_neuron_descriptor") = py::none(),
             "-initWithDevice:fusedNeuronDescriptor:")
        .def_property_readonly("fused_neuron_descriptor", [](const CNNBatchNormalizationStatisticsGradient& k) {
            return neuronObject(k.fusedNeuronDescriptor());
        })
        .def(
            "encode_batch",
            [](CNNBatchNormalizationStatisticsGradient& k, CommandBuffer& cb, py::handle gradients, py::handle sources,
               py::handle state) {
                k.encodeBatch(cb, toImageBatch(gradients, "source_gradients"), toImageBatch(sources, "source_images"),
                              bnStateOf(state, "batch_normalization_state", false));
            },
            py::arg("command_buffer"), py::arg("source_gradients"), py::arg("source_images"),
            py::arg("batch_normalization_state"),
            "-encodeBatchToCommandBuffer:sourceGradients:sourceImages:batchNormalizationState: (a temporary state's "
            "read count is decremented)")
        .def(
            "encode", [](CNNBatchNormalizationStatisticsGradient& k, py::args, py::kwargs) {
                throwTypeError(k.className(), ": only encode_batch(command_buffer, source_gradients, source_images, "
                               "batch_normalization_state) is available (MPS marks the generic gradient encodes "
                               "unavailable)");
            },
            "Unavailable (as in MPS): use encode_batch.");

    py::class_<CNNBatchNormalizationGradient, CNNGradientKernel, std::shared_ptr<CNNBatchNormalizationGradient>>(
        m, "CNNBatchNormalizationGradient",
        "MPSCNNBatchNormalizationGradient: dX = gamma/sqrt(var+eps)·(G' - dβ/M - x̂·dγ/M) with the state's statistics "
        "and the statistics gradient's dγ, dβ (which must have been encoded first). training_statistics=False gives "
        "the inference-mode gradient gamma/sqrt(var+eps)·G'. Every CNNGradientKernel encode form; gradient_state / "
        "gradient_states is the CNNBatchNormalizationState.")
        .def(py::init([](const DeviceArg& device, py::handle neuron) {
                 return std::make_shared<CNNBatchNormalizationGradient>(bnDevice(device), neuronOf(neuron));
             }),
             py::arg("device"), py::arg("fused_neuron_descriptor") = py::none(),
             "-initWithDevice:fusedNeuronDescriptor:")
        .def_property_readonly("fused_neuron_descriptor",
                               [](const CNNBatchNormalizationGradient& k) { return neuronObject(k.fusedNeuronDescriptor()); })
        .def_readwrite("training_statistics", &CNNBatchNormalizationGradient::trainingStatistics,
                       "mpsgrad extension (spec §2.5): True (default, MPS) differentiates through the batch "
                       "statistics; False treats mean and variance as constants");
}

}  // namespace

std::shared_ptr<CNNBatchNormalizationDataSource> toBatchNormalizationDataSource(py::object object) {
    return toDataSource(std::move(object));
}

void bindBatchNormalization(py::module_& m) {
    bindStates(m);
    bindDataSources(m);
    bindKernels(m);
}

}  // namespace mpsgrad::python
