// Bindings of the instance normalization (MPSCNNInstanceNormalization.h) and group normalization
// (MPSCNNGroupNormalization.h) families, which share their implementation
// (cpp/mpsgrad/kernels/normalization_groups.h) and therefore this file.
#include <cfloat>

#include "bindings.h"
#include "kernels/group_normalization.h"
#include "kernels/instance_normalization.h"

namespace mpsgrad::python {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A 1-D float32 array of `count` values (count < 0: any length) from array-like `value`.
FloatArray floatsOf(py::handle value, int64_t count, const char* what) {
    FloatArray array;
    try {
        array = FloatArray::ensure(value);
    } catch (...) {
    }
    if (!array || array.ndim() != 1) throwTypeError(what, ": expected a 1-D float32 array, got ", typeName(value));
    if (count >= 0 && array.size() != count)
        throwValueError(what, ": expected ", count, " float32 values (one per feature channel), got ", array.size());
    return array;
}

std::vector<float> vectorOf(py::handle value, int64_t count, const char* what) {
    FloatArray a = floatsOf(value, count, what);
    return std::vector<float>(a.data(), a.data() + a.size());
}

std::optional<float> epsilonArg(py::handle value) {
    if (value.is_none()) return std::nullopt;
    return float(toDouble(value, "epsilon"));
}

// The Python side of a duck-typed data source: calls the object's methods under the GIL and keeps
// the arrays it hands out alive until purge(). `protocol` names the MPS protocol in messages.
class PythonSourceCalls {
public:
    PythonSourceCalls(py::object object, std::vector<const char*> required, const char* protocol)
        : object_(std::move(object)) {
        for (const char* name : required)
            if (!py::hasattr(object_, name))
                throwTypeError("data_source: the data source ", typeName(object_), " has no method ", name, "() (",
                               protocol, " protocol)");
    }
    ~PythonSourceCalls() {
        py::gil_scoped_acquire gil;
        held_.clear();
        object_ = py::object();
    }
    int64_t integer(const char* method) {
        py::gil_scoped_acquire gil;
        py::object n = object_.attr(method)();
        const std::string what = std::string("data_source.") + method + "()";
        return toInt64(n, what.c_str());
    }
    const float* values(const char* method, int64_t count, bool optional) {
        py::gil_scoped_acquire gil;
        const std::string what = std::string("data_source.") + method + "()";
        py::object v = object_.attr(method)();
        if (v.is_none()) {
            if (optional) return nullptr;
            throwTypeError(what, ": expected a float32 array, got None");
        }
        FloatArray array = floatsOf(v, count, what.c_str());
        held_.push_back(array);
        return array.data();
    }
    std::string label() {
        py::gil_scoped_acquire gil;
        return py::hasattr(object_, "label") ? py::str(object_.attr("label")()).cast<std::string>() : std::string();
    }
    std::optional<float> epsilon() {
        py::gil_scoped_acquire gil;
        if (!py::hasattr(object_, "epsilon")) return std::nullopt;
        return float(toDouble(object_.attr("epsilon")(), "data_source.epsilon()"));
    }
    bool load() {
        py::gil_scoped_acquire gil;
        return py::hasattr(object_, "load") ? bool(py::bool_(object_.attr("load")())) : true;
    }
    void purge() {
        py::gil_scoped_acquire gil;
        held_.clear();
        if (py::hasattr(object_, "purge")) object_.attr("purge")();
    }
    py::object object() const { return object_; }

private:
    py::object object_;
    std::vector<py::object> held_;
};

// Any Python object with number_of_feature_channels(), gamma(), beta() (optionally label(),
// epsilon(), load(), purge()).
class PythonInstanceNormalizationDataSource final : public CNNInstanceNormalizationDataSource {
public:
    explicit PythonInstanceNormalizationDataSource(py::object object)
        : calls_(std::move(object), {"number_of_feature_channels", "gamma", "beta"},
                 "MPSCNNInstanceNormalizationDataSource") {}
    int64_t numberOfFeatureChannels() override { return channels_ = calls_.integer("number_of_feature_channels"); }
    const float* gamma() override { return calls_.values("gamma", channels_, false); }
    const float* beta() override { return calls_.values("beta", channels_, true); }
    std::string label() override { return calls_.label(); }
    std::optional<float> epsilon() override { return calls_.epsilon(); }
    bool load() override { return calls_.load(); }
    void purge() override { calls_.purge(); }
    py::object object() const { return calls_.object(); }

private:
    PythonSourceCalls calls_;
    int64_t channels_ = 0;
};

// The same plus number_of_groups().
class PythonGroupNormalizationDataSource final : public CNNGroupNormalizationDataSource {
public:
    explicit PythonGroupNormalizationDataSource(py::object object)
        : calls_(std::move(object), {"number_of_feature_channels", "number_of_groups", "gamma", "beta"},
                 "MPSCNNGroupNormalizationDataSource") {}
    int64_t numberOfFeatureChannels() override { return channels_ = calls_.integer("number_of_feature_channels"); }
    int64_t numberOfGroups() override { return calls_.integer("number_of_groups"); }
    const float* gamma() override { return calls_.values("gamma", channels_, false); }
    const float* beta() override { return calls_.values("beta", channels_, true); }
    std::string label() override { return calls_.label(); }
    std::optional<float> epsilon() override { return calls_.epsilon(); }
    bool load() override { return calls_.load(); }
    void purge() override { calls_.purge(); }
    py::object object() const { return calls_.object(); }

private:
    PythonSourceCalls calls_;
    int64_t channels_ = 0;
};

template <class Interface, class PythonSource>
std::shared_ptr<Interface> toDataSource(py::object object, const char* expected) {
    if (object.is_none()) throwTypeError("data_source: expected a ", expected, ", got None");
    if (py::isinstance<Interface>(object)) return object.cast<std::shared_ptr<Interface>>();
    return std::make_shared<PythonSource>(object);
}

template <class PythonSource, class Interface>
py::object dataSourceObject(const std::shared_ptr<Interface>& source) {
    if (auto* python = dynamic_cast<PythonSource*>(source.get())) return python->object();
    return py::cast(source);
}

py::object vectorView(const BufferSlice& slice, int64_t channels) {
    if (!slice) return py::none();
    return floatView(slice, {py::ssize_t(channels)});
}

// A list of the family's states (TypeError naming `what` for anything else).
template <class StateT>
std::vector<std::shared_ptr<StateT>> familyStates(py::handle value, const char* what, const char* expected) {
    if (value.is_none() || py::isinstance<py::str>(value) || !py::isinstance<py::sequence>(value))
        throwTypeError(what, ": expected a list of ", expected, ", got ", typeName(value));
    std::vector<std::shared_ptr<StateT>> states;
    for (py::handle item : value) {
        if (!py::isinstance<StateT>(item))
            throwTypeError(what, ": expected a list of ", expected, ", got ", typeName(item), " in it");
        states.push_back(item.cast<std::shared_ptr<StateT>>());
    }
    return states;
}

template <class StateT, class Class>
void bindStateProperties(Class& c) {
    c.def_property_readonly("number_of_feature_channels", &StateT::numberOfFeatureChannels)
        .def_property_readonly("number_of_groups", &StateT::numberOfGroups,
                               "mpsgrad: the groups the statistics were taken over (channels for instance "
                               "normalization)")
        .def_property_readonly("gamma", [](const StateT& s) { return vectorView(s.gamma(), s.numberOfFeatureChannels()); },
                               "-gamma: the (C,) gamma the forward pass used")
        .def_property_readonly("beta", [](const StateT& s) { return vectorView(s.beta(), s.numberOfFeatureChannels()); },
                               "-beta: the (C,) beta the forward pass used")
        .def_property_readonly("gradient_for_gamma", [](const StateT& s) {
            return vectorView(s.gradientForGamma(), s.numberOfFeatureChannels());
        }, "-gradientForGamma: (C,) sum over the pixels of G·x̂ (None until the gradient kernel has encoded)")
        .def_property_readonly("gradient_for_beta", [](const StateT& s) {
            return vectorView(s.gradientForBeta(), s.numberOfFeatureChannels());
        }, "-gradientForBeta: (C,) sum over the pixels of G (None until the gradient kernel has encoded)");
}

template <class Kernel, class Class>
void bindKernelProperties(Class& c) {
    c.def_property_readonly("number_of_feature_channels", &Kernel::numberOfFeatureChannels)
        .def_property(
            "epsilon", &Kernel::epsilon,
            [](Kernel& k, py::handle value) { k.setEpsilon(float(toDouble(value, "epsilon"))); },
            "epsilon (finite, > 0; the data source's epsilon(), else FLT_MIN)")
        .def("reload_gamma_and_beta_from_data_source", &Kernel::reloadGammaAndBetaFromDataSource,
             "-reloadGammaAndBetaFromDataSource")
        .def("reload_gamma_and_beta_with_command_buffer",
             [](Kernel& k, CommandBuffer& cb, py::handle state) {
                 if (state.is_none() || !py::isinstance<CNNNormalizationGammaAndBetaState>(state))
                     throwTypeError("gamma_and_beta_state: expected a CNNNormalizationGammaAndBetaState, got ",
                                    typeName(state));
                 k.reloadGammaAndBetaWithCommandBuffer(cb, state.cast<std::shared_ptr<CNNNormalizationGammaAndBetaState>>());
             },
             py::arg("command_buffer"), py::arg("gamma_and_beta_state"),
             "-reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (an encoded copy; decrements a temporary "
             "state's read count)");
}

// gamma(), beta(), epsilon(), label(), load(), purge(), learning_rate of a ready-made data source.
template <class DS, class Class>
void bindWeightsDataSource(Class& c) {
    auto view = [](py::object self, std::vector<float> DS::*member) -> py::object {
        auto& v = self.cast<DS&>().*member;
        if (v.empty()) return py::none();
        return py::array(py::dtype::of<float>(), {py::ssize_t(v.size())}, v.data(), self);
    };
    c.def("number_of_feature_channels", &DS::numberOfFeatureChannels, "-numberOfFeatureChannels")
        .def("gamma", [view](py::object self) { return view(self, &DS::gamma_); }, "-gamma (a writable view)")
        .def("beta", [view](py::object self) { return view(self, &DS::beta_); }, "-beta (a writable view, or None)")
        .def("epsilon", [](DS& s) -> float { return s.epsilon().value_or(FLT_MIN); }, "-epsilon")
        .def("label", &DS::label, "-label")
        .def("load", &DS::load, "-load")
        .def("purge", &DS::purge, "-purge")
        .def_property(
            "learning_rate", [](const DS& s) { return s.learningRate; },
            [](DS& s, py::handle v) { s.learningRate = float(toDouble(v, "learning_rate")); },
            "the SGD step of the update method");
}

// Pickle (a pickled graph carries the data source of a node that can train): cls(*constructorArgs(s)),
// learning_rate included. Values round-trip bit for bit (float32 -> float -> float32).
template <class DS, class Class, class Args>
void bindWeightsDataSourcePickle(Class& c, Args constructorArgs) {
    c.def(
        "__reduce_ex__",
        [constructorArgs](py::object self, int) {
            return py::make_tuple(py::type::handle_of(self), constructorArgs(self.cast<DS&>()));
        },
        py::arg("protocol"), "Pickle support: the constructor's arguments (learning_rate included)");
}

template <class DS>
py::object betaOrNone(const DS& s) {
    return s.beta_.empty() ? py::object(py::none()) : py::object(py::cast(s.beta_));
}

template <class DS>
py::object epsilonOrNone(DS& s) {
    const std::optional<float> e = s.epsilon();
    return e ? py::object(py::float_(*e)) : py::object(py::none());
}

void bindInstanceNormalization(py::module_& m) {
    py::class_<CNNInstanceNormalizationDataSource, std::shared_ptr<CNNInstanceNormalizationDataSource>>(
        m, "CNNInstanceNormalizationDataSource",
        "@protocol MPSCNNInstanceNormalizationDataSource. Any Python object with number_of_feature_channels(), "
        "gamma() and beta() (None: no bias) can be passed where a data source is expected; label(), epsilon() "
        "(default FLT_MIN), load() and purge() are optional. The optional update methods "
        "update_gamma_and_beta_with_command_buffer(command_buffer, instance_normalization_state_batch) (GPU style: "
        "return a CNNNormalizationGammaAndBetaState for reload_gamma_and_beta_with_command_buffer) and "
        "update_gamma_and_beta_with_instance_normalization_state_batch(states) (CPU style) are called by the "
        "application; they receive one state per image and should sum the gradients over the batch.");

    using DS = CNNInstanceNormalizationWeightsDataSource;
    py::class_<DS, CNNInstanceNormalizationDataSource, std::shared_ptr<DS>> ds(
        m, "CNNInstanceNormalizationWeightsDataSource",
        "A ready-made MPSCNNInstanceNormalizationDataSource holding gamma and beta in memory (the methods return "
        "writable views: change them, then call the kernel's reload_gamma_and_beta_from_data_source()). Its CPU-style "
        "update applies gamma -= learning_rate·Σ dγ, beta -= learning_rate·Σ dβ, summed over the batch of states.");
    ds.def(py::init([](py::handle gamma, py::handle beta, py::handle epsilon, std::string label,
                       py::handle learningRate) {
               std::vector<float> g = vectorOf(gamma, -1, "gamma");
               std::vector<float> b = beta.is_none() ? std::vector<float>() : vectorOf(beta, int64_t(g.size()), "beta");
               auto source = std::make_shared<DS>(std::move(g), std::move(b), epsilonArg(epsilon), std::move(label));
               source->learningRate = float(toDouble(learningRate, "learning_rate"));
               return source;
           }),
           py::arg("gamma"), py::arg("beta") = py::none(), py::arg("epsilon") = py::none(), py::arg("label") = "",
           py::arg("learning_rate") = 0.01f, "epsilon None: the protocol's default (FLT_MIN)");
    bindWeightsDataSource<DS>(ds);
    bindWeightsDataSourcePickle<DS>(ds, [](DS& s) {
        return py::make_tuple(s.gamma_, betaOrNone(s), epsilonOrNone(s), s.label(), s.learningRate);
    });
    ds.def("update_gamma_and_beta_with_instance_normalization_state_batch",
           [](DS& s, py::handle states) {
               return s.updateGammaAndBetaWithInstanceNormalizationStateBatch(familyStates<CNNInstanceNormalizationGradientState>(
                   states, "instance_normalization_state_batch", "CNNInstanceNormalizationGradientState"));
           },
           py::arg("instance_normalization_state_batch"),
           "-updateGammaAndBetaWithInstanceNormalizationStateBatch: (CPU style; the states' command buffer must have "
           "completed; decrements each temporary state's read count)");

    py::class_<CNNInstanceNormalizationGradientState, NNGradientState,
               std::shared_ptr<CNNInstanceNormalizationGradientState>>
        state(m, "CNNInstanceNormalizationGradientState",
              "MPSCNNInstanceNormalizationGradientState, made by CNNInstanceNormalization.result_state / "
              "temporary_result_state (one per image). Its buffers are (C,) float32 views, valid once the command "
              "buffer that wrote them has completed.");
    state.def_property_readonly(
        "instance_normalization",
        [](const CNNInstanceNormalizationGradientState& s) { return py::cast(s.instanceNormalization()); },
        "-instanceNormalization: the kernel that made the state");
    bindStateProperties<CNNInstanceNormalizationGradientState>(state);

    py::class_<CNNInstanceNormalization, CNNKernel, std::shared_ptr<CNNInstanceNormalization>> k(
        m, "CNNInstanceNormalization",
        "MPSCNNInstanceNormalization: Y = (X - mean)·gamma/sqrt(variance + epsilon) + beta with mean and (biased) "
        "variance per image and channel over the pixels. Encode with a destination_state (from result_state) to "
        "train; CNNInstanceNormalizationGradient then reads it.");
    k.def(py::init([](const DeviceArg& device, py::object dataSource) {
              return std::make_shared<CNNInstanceNormalization>(
                  toDevice(device),
                  toDataSource<CNNInstanceNormalizationDataSource, PythonInstanceNormalizationDataSource>(
                      dataSource, "CNNInstanceNormalizationDataSource"));
          }),
          py::arg("device"), py::arg("data_source"), "-initWithDevice:dataSource:");
    k.def_property_readonly("data_source", [](const CNNInstanceNormalization& k) {
        return dataSourceObject<PythonInstanceNormalizationDataSource>(k.dataSource());
    });
    bindKernelProperties<CNNInstanceNormalization>(k);

    py::class_<CNNInstanceNormalizationGradient, CNNGradientKernel, std::shared_ptr<CNNInstanceNormalizationGradient>>(
        m, "CNNInstanceNormalizationGradient",
        "MPSCNNInstanceNormalizationGradient: dX = r·(gamma·G - mean(gamma·G) - x̂·mean(gamma·G·x̂)) per image and "
        "channel, and the state's gradient_for_gamma / gradient_for_beta. Every CNNGradientKernel encode form; "
        "gradient_state is the image's CNNInstanceNormalizationGradientState.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNInstanceNormalizationGradient>(toDevice(device)); }),
             py::arg("device"), "-initWithDevice:");
}

void bindGroupNormalization(py::module_& m) {
    py::class_<CNNGroupNormalizationDataSource, std::shared_ptr<CNNGroupNormalizationDataSource>>(
        m, "CNNGroupNormalizationDataSource",
        "@protocol MPSCNNGroupNormalizationDataSource. Any Python object with number_of_feature_channels(), "
        "number_of_groups(), gamma() and beta() (None: no bias; both per channel) can be passed where a data source "
        "is expected; label(), epsilon() (default FLT_MIN), load() and purge() are optional. The optional update "
        "methods update_gamma_and_beta_with_command_buffer(command_buffer, group_normalization_state_batch) (GPU "
        "style) and update_gamma_and_beta_with_group_normalization_state_batch(states) (CPU style) are called by the "
        "application.");

    using DS = CNNGroupNormalizationWeightsDataSource;
    py::class_<DS, CNNGroupNormalizationDataSource, std::shared_ptr<DS>> ds(
        m, "CNNGroupNormalizationWeightsDataSource",
        "A ready-made MPSCNNGroupNormalizationDataSource holding gamma, beta (per channel) and the number of groups. "
        "Its CPU-style update applies SGD with the gradients summed over the batch of states.");
    ds.def(py::init([](py::handle gamma, py::handle beta, py::handle groups, py::handle epsilon, std::string label,
                       py::handle learningRate) {
               std::vector<float> g = vectorOf(gamma, -1, "gamma");
               std::vector<float> b = beta.is_none() ? std::vector<float>() : vectorOf(beta, int64_t(g.size()), "beta");
               auto source = std::make_shared<DS>(std::move(g), std::move(b), toInt64(groups, "number_of_groups"),
                                                  epsilonArg(epsilon), std::move(label));
               source->learningRate = float(toDouble(learningRate, "learning_rate"));
               return source;
           }),
           py::arg("gamma"), py::arg("beta") = py::none(), py::arg("number_of_groups") = 1,
           py::arg("epsilon") = py::none(), py::arg("label") = "", py::arg("learning_rate") = 0.01f,
           "number_of_groups must divide len(gamma); epsilon None: the protocol's default (FLT_MIN)");
    bindWeightsDataSource<DS>(ds);
    bindWeightsDataSourcePickle<DS>(ds, [](DS& s) {
        return py::make_tuple(s.gamma_, betaOrNone(s), s.numberOfGroups(), epsilonOrNone(s), s.label(),
                              s.learningRate);
    });
    ds.def("number_of_groups", &DS::numberOfGroups, "-numberOfGroups")
        .def("set_number_of_groups", [](DS& s, py::handle groups) { s.setNumberOfGroups(toInt64(groups, "number_of_groups")); },
             py::arg("number_of_groups"),
             "-setNumberOfGroups: (kernels read the number of groups when they are made)")
        .def("update_gamma_and_beta_with_group_normalization_state_batch",
             [](DS& s, py::handle states) {
                 return s.updateGammaAndBetaWithGroupNormalizationStateBatch(familyStates<CNNGroupNormalizationGradientState>(
                     states, "group_normalization_state_batch", "CNNGroupNormalizationGradientState"));
             },
             py::arg("group_normalization_state_batch"),
             "-updateGammaAndBetaWithGroupNormalizationStateBatch: (CPU style; decrements each temporary state's read "
             "count)");

    py::class_<CNNGroupNormalizationGradientState, NNGradientState, std::shared_ptr<CNNGroupNormalizationGradientState>>
        state(m, "CNNGroupNormalizationGradientState",
              "MPSCNNGroupNormalizationGradientState, made by CNNGroupNormalization.result_state / "
              "temporary_result_state (one per image).");
    state.def_property_readonly(
        "group_normalization",
        [](const CNNGroupNormalizationGradientState& s) { return py::cast(s.groupNormalization()); },
        "-groupNormalization: the kernel that made the state");
    bindStateProperties<CNNGroupNormalizationGradientState>(state);

    py::class_<CNNGroupNormalization, CNNKernel, std::shared_ptr<CNNGroupNormalization>> k(
        m, "CNNGroupNormalization",
        "MPSCNNGroupNormalization: the channels are split into number_of_groups groups of consecutive channels; "
        "Y = (X - mean)·gamma/sqrt(variance + epsilon) + beta with mean and (biased) variance per image and group, "
        "gamma and beta per channel.");
    k.def(py::init([](const DeviceArg& device, py::object dataSource) {
              return std::make_shared<CNNGroupNormalization>(
                  toDevice(device), toDataSource<CNNGroupNormalizationDataSource, PythonGroupNormalizationDataSource>(
                                        dataSource, "CNNGroupNormalizationDataSource"));
          }),
          py::arg("device"), py::arg("data_source"), "-initWithDevice:dataSource:");
    k.def_property_readonly("data_source", [](const CNNGroupNormalization& k) {
        return dataSourceObject<PythonGroupNormalizationDataSource>(k.dataSource());
    });
    k.def_property_readonly("number_of_groups", &CNNGroupNormalization::numberOfGroups,
                            "the data source's number_of_groups() when the kernel was made");
    bindKernelProperties<CNNGroupNormalization>(k);

    py::class_<CNNGroupNormalizationGradient, CNNGradientKernel, std::shared_ptr<CNNGroupNormalizationGradient>>(
        m, "CNNGroupNormalizationGradient",
        "MPSCNNGroupNormalizationGradient: dX per image and group, and the state's gradient_for_gamma / "
        "gradient_for_beta. Every CNNGradientKernel encode form.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNGroupNormalizationGradient>(toDevice(device)); }),
             py::arg("device"), "-initWithDevice:");
}

}  // namespace

std::shared_ptr<CNNInstanceNormalizationDataSource> toInstanceNormalizationDataSource(py::object object) {
    return toDataSource<CNNInstanceNormalizationDataSource, PythonInstanceNormalizationDataSource>(
        std::move(object), "CNNInstanceNormalizationDataSource");
}

std::shared_ptr<CNNGroupNormalizationDataSource> toGroupNormalizationDataSource(py::object object) {
    return toDataSource<CNNGroupNormalizationDataSource, PythonGroupNormalizationDataSource>(
        std::move(object), "CNNGroupNormalizationDataSource");
}

void bindNormalizationGroups(py::module_& m) {
    bindInstanceNormalization(m);
    bindGroupNormalization(m);
}

}  // namespace mpsgrad::python
