// Bindings of the neuron family (MPSCNNNeuron.h).
#include "bindings.h"
#include "kernels/neuron.h"

namespace mpsgrad::python {
namespace {

Device neuronDevice(const DeviceArg& device) { return toDevice(device, "device"); }

const NNNeuronDescriptor& requireNeuronDescriptor(const py::object& value) {
    if (value.is_none() || !py::isinstance<NNNeuronDescriptor>(value))
        throwTypeError("neuron_descriptor: expected an NNNeuronDescriptor, got ", std::string(py::repr(py::type::of(value))));
    return value.cast<const NNNeuronDescriptor&>();
}

// A CNNNeuronType or its int value; TypeError for anything else (e.g. a name string).
CNNNeuronType neuronTypeArgument(py::handle type) {
    int64_t t;
    if (py::isinstance<CNNNeuronType>(type))
        t = int64_t(type.cast<CNNNeuronType>());
    else
        t = toInt64(type, "neuron_type");
    if (t < 0 || t >= int64_t(CNNNeuronType::Count))
        throwValueError("neuron_type: must be a CNNNeuronType in [0, 15], got ", t);
    return static_cast<CNNNeuronType>(t);
}

// A per-type MPSCNNNeuron subclass (thin: its init fixes the neuron type).
template <class K>
py::class_<K, CNNNeuron, std::shared_ptr<K>> neuronClass(py::module_& m, const char* name, const char* formula) {
    const std::string doc = std::string("MPS") + name + ": the " + neuronTypeName(K::kType) +
                            " neuron, f(x) = " + formula +
                            ". A CNNNeuron with a fixed type (MPS deprecated these initializers in 10.14 in favour of "
                            "CNNNeuron(device, NNNeuronDescriptor)); it computes exactly what that CNNNeuron computes.";
    return py::class_<K, CNNNeuron, std::shared_ptr<K>>(m, name, doc.c_str());
}

// The type's documented default parameters (NNNeuronDescriptor(type) without a, b, c).
NNNeuronDescriptor neuronDefaults(CNNNeuronType type) { return NNNeuronDescriptor::withType(type); }

template <class K>
void bindNoParameterNeuron(py::module_& m, const char* name, const char* formula) {
    neuronClass<K>(m, name, formula)
        .def(py::init([](const DeviceArg& device) { return std::make_shared<K>(neuronDevice(device)); }), py::arg("device"),
             (std::string("-[MPS") + name + " initWithDevice:]").c_str());
}

template <class K>
void bindABNeuron(py::module_& m, const char* name, const char* formula) {
    const NNNeuronDescriptor d = neuronDefaults(K::kType);
    neuronClass<K>(m, name, formula)
        .def(py::init([](const DeviceArg& device, float a, float b) { return std::make_shared<K>(neuronDevice(device), a, b); }),
             py::arg("device"), py::arg("a") = d.a, py::arg("b") = d.b,
             (std::string("-[MPS") + name + " initWithDevice:a:b:] (defaults: docs/neurons.md)").c_str());
}

template <class K>
void bindABCNeuron(py::module_& m, const char* name, const char* formula) {
    const NNNeuronDescriptor d = neuronDefaults(K::kType);
    neuronClass<K>(m, name, formula)
        .def(py::init([](const DeviceArg& device, float a, float b, float c) {
                 return std::make_shared<K>(neuronDevice(device), a, b, c);
             }),
             py::arg("device"), py::arg("a") = d.a, py::arg("b") = d.b, py::arg("c") = d.c,
             (std::string("-[MPS") + name + " initWithDevice:a:b:c:] (defaults: docs/neurons.md)").c_str());
}

void bindNeuronTypes(py::module_& m) {
    bindNoParameterNeuron<CNNNeuronAbsolute>(m, "CNNNeuronAbsolute", "|x|");
    bindNoParameterNeuron<CNNNeuronSigmoid>(m, "CNNNeuronSigmoid", "1 / (1 + exp(-x))");
    bindNoParameterNeuron<CNNNeuronSoftSign>(m, "CNNNeuronSoftSign", "x / (1 + |x|)");
    neuronClass<CNNNeuronReLU>(m, "CNNNeuronReLU", "x >= 0 ? x : a*x")
        .def(py::init([](const DeviceArg& device, float a) {
                 return std::make_shared<CNNNeuronReLU>(neuronDevice(device), a);
             }),
             py::arg("device"), py::arg("a") = neuronDefaults(CNNNeuronType::ReLU).a,
             "-[MPSCNNNeuronReLU initWithDevice:a:] (a = 0: plain ReLU; otherwise leaky ReLU)");
    neuronClass<CNNNeuronELU>(m, "CNNNeuronELU", "x >= 0 ? x : a*(exp(x) - 1)")
        .def(py::init([](const DeviceArg& device, float a) {
                 return std::make_shared<CNNNeuronELU>(neuronDevice(device), a);
             }),
             py::arg("device"), py::arg("a") = neuronDefaults(CNNNeuronType::ELU).a, "-[MPSCNNNeuronELU initWithDevice:a:]");
    neuronClass<CNNNeuronPReLU>(m, "CNNNeuronPReLU", "x >= 0 ? x : a[channel]*x")
        .def(py::init([](const DeviceArg& device, std::vector<float> a) {
                 if (a.empty()) throwValueError("a: PReLU needs at least one per-channel value");
                 return std::make_shared<CNNNeuronPReLU>(neuronDevice(device), a.data(), a.size());
             }),
             py::arg("device"), py::arg("a"),
             "-[MPSCNNNeuronPReLU initWithDevice:a:count:]: `a` holds one value per processed feature channel (or "
             "one per channel of the source image); count is len(a)");
    bindABNeuron<CNNNeuronLinear>(m, "CNNNeuronLinear", "a*x + b");
    bindABNeuron<CNNNeuronHardSigmoid>(m, "CNNNeuronHardSigmoid", "clamp(a*x + b, 0, 1)");
    bindABNeuron<CNNNeuronTanH>(m, "CNNNeuronTanH", "a*tanh(b*x)");
    bindABNeuron<CNNNeuronSoftPlus>(m, "CNNNeuronSoftPlus", "a*log(1 + exp(b*x))");
    bindABNeuron<CNNNeuronReLUN>(m, "CNNNeuronReLUN", "min(x >= 0 ? x : a*x, b)");
    bindABCNeuron<CNNNeuronPower>(m, "CNNNeuronPower", "(a*x + b)^c");
    bindABCNeuron<CNNNeuronExponential>(m, "CNNNeuronExponential", "c^(a*x + b), c = -1 meaning base e");
    bindABCNeuron<CNNNeuronLogarithm>(m, "CNNNeuronLogarithm", "log_c(a*x + b), c = -1 meaning the natural log");
}

}  // namespace

void bindNeuron(py::module_& m) {
    py::enum_<CNNNeuronType>(m, "CNNNeuronType", "MPSCNNNeuronType")
        .value("NONE", CNNNeuronType::None)
        .value("RELU", CNNNeuronType::ReLU)
        .value("LINEAR", CNNNeuronType::Linear)
        .value("SIGMOID", CNNNeuronType::Sigmoid)
        .value("HARD_SIGMOID", CNNNeuronType::HardSigmoid)
        .value("TANH", CNNNeuronType::TanH)
        .value("ABSOLUTE", CNNNeuronType::Absolute)
        .value("SOFT_PLUS", CNNNeuronType::SoftPlus)
        .value("SOFT_SIGN", CNNNeuronType::SoftSign)
        .value("ELU", CNNNeuronType::ELU)
        .value("PRELU", CNNNeuronType::PReLU)
        .value("RELUN", CNNNeuronType::ReLUN)
        .value("POWER", CNNNeuronType::Power)
        .value("EXPONENTIAL", CNNNeuronType::Exponential)
        .value("LOGARITHM", CNNNeuronType::Logarithm)
        .value("GELU", CNNNeuronType::GeLU);

    py::class_<NNNeuronDescriptor>(m, "NNNeuronDescriptor", "MPSNNNeuronDescriptor")
        .def(py::init([](py::handle type, py::object a, py::object b, py::object c) {
                 auto kind = neuronTypeArgument(type);
                 NNNeuronDescriptor d = NNNeuronDescriptor::withType(kind);
                 if (!a.is_none()) d.a = fromPython<float>(a, "a");
                 if (!b.is_none()) d.b = fromPython<float>(b, "b");
                 if (!c.is_none()) d.c = fromPython<float>(c, "c");
                 return d;
             }),
             py::arg("neuron_type"), py::arg("a") = py::none(), py::arg("b") = py::none(), py::arg("c") = py::none(),
             "+[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:b:c:]; omitted parameters take the type's "
             "documented defaults (docs/neurons.md)")
        .def_static("prelu", [](std::vector<float> data) {
            if (data.empty()) throwValueError("data: PReLU needs at least one per-channel value");
            return NNNeuronDescriptor::preluWithData(std::move(data));
        }, py::arg("data"), "+[MPSNNNeuronDescriptor cnnNeuronPReLUDescriptorWithData:noCopy:]")
        .def_property("neuron_type", [](const NNNeuronDescriptor& d) { return d.neuronType; },
                      [](NNNeuronDescriptor& d, py::handle type) {
                          d.neuronType = neuronTypeArgument(type);
                      })
        .def_property("a", getter(&NNNeuronDescriptor::a), setter(&NNNeuronDescriptor::a, "a"))
        .def_property("b", getter(&NNNeuronDescriptor::b), setter(&NNNeuronDescriptor::b, "b"))
        .def_property("c", getter(&NNNeuronDescriptor::c), setter(&NNNeuronDescriptor::c, "c"))
        .def_property("data", getter(&NNNeuronDescriptor::data), setter(&NNNeuronDescriptor::data, "data"))
        .def("__repr__", [](const NNNeuronDescriptor& d) {
            return "NNNeuronDescriptor(type=" + std::to_string(int(d.neuronType)) + ", a=" + std::to_string(d.a) +
                   ", b=" + std::to_string(d.b) + ", c=" + std::to_string(d.c) + ")";
        });

    py::class_<CNNNeuronGradientState, NNGradientState, std::shared_ptr<CNNNeuronGradientState>>(
        m, "CNNNeuronGradientState",
        "The MPSNNGradientState a CNNNeuron writes for CNNNeuronGradient (forward geometry, neuron type, and "
        "which images were the forward input and output)")
        .def_property_readonly("neuron_type", [](const CNNNeuronGradientState& s) { return s.neuronType; })
        .def_property_readonly(
            "gradient_for_data",
            [](const CNNNeuronGradientState& s) -> py::object {
                if (!s.dataCount()) return py::none();
                return floatView(s.gradientForData(), {py::ssize_t(s.dataCount())});
            },
            "mpsgrad extension (MPS has none): PReLU's dL/da, one value per PReLU data value, written by "
            "CNNNeuronGradient: the sum over the pixels of this state's forward image of G * min(X, 0) (0 for "
            "channels the forward pass did not process). None for the other neuron types.");

    py::class_<CNNNeuron, CNNKernel, std::shared_ptr<CNNNeuron>>(
        m, "CNNNeuron",
        "MPSCNNNeuron: Y = f(X) per pixel and feature channel, f given by the NNNeuronDescriptor (formulas in "
        "docs/neurons.md). result_state() returns a CNNNeuronGradientState for CNNNeuronGradient.")
        .def(py::init([](const DeviceArg& device, py::object descriptor) {
                 return std::make_shared<CNNNeuron>(neuronDevice(device), requireNeuronDescriptor(descriptor));
             }),
             py::arg("device"), py::arg("neuron_descriptor"),
             "-[MPSCNNNeuron initWithDevice:neuronDescriptor:]. ValueError for a neuron type out of range or a PReLU "
             "descriptor without data; PReLU data must hold one value per processed channel (or per channel of the "
             "source image), checked at encode.")
        .def_property_readonly("neuron_type", &CNNNeuron::neuronType, "MPSCNNNeuron.neuronType")
        .def_property_readonly("a", &CNNNeuron::a, "MPSCNNNeuron.a")
        .def_property_readonly("b", &CNNNeuron::b, "MPSCNNNeuron.b")
        .def_property_readonly("c", &CNNNeuron::c, "MPSCNNNeuron.c")
        .def_property_readonly("data", &CNNNeuron::data, "MPSCNNNeuron.data (PReLU's per-channel a; empty otherwise)")
        .def_property_readonly("neuron_descriptor", &CNNNeuron::neuronDescriptor);
    bindNeuronTypes(m);

    py::class_<CNNNeuronGradient, CNNGradientKernel, std::shared_ptr<CNNNeuronGradient>>(
        m, "CNNNeuronGradient",
        "MPSCNNNeuronGradient: dX = G * f'(X). source_gradient = G (dL/dY), source_image = the forward INPUT X, "
        "gradient_state = the CNNNeuron's result state. At the kinks (ReLU, PReLU, ELU, ReLUN at x = 0) the "
        "derivative of the x >= 0 branch is used, as MPS documents.")
        .def(py::init([](const DeviceArg& device, py::object descriptor) {
                 return std::make_shared<CNNNeuronGradient>(neuronDevice(device), requireNeuronDescriptor(descriptor));
             }),
             py::arg("device"), py::arg("neuron_descriptor"),
             "-[MPSCNNNeuronGradient initWithDevice:neuronDescriptor:] (the forward neuron's descriptor)")
        .def_property_readonly("neuron_type", &CNNNeuronGradient::neuronType, "MPSCNNNeuronGradient.neuronType")
        .def_property_readonly("a", &CNNNeuronGradient::a, "MPSCNNNeuronGradient.a")
        .def_property_readonly("b", &CNNNeuronGradient::b, "MPSCNNNeuronGradient.b")
        .def_property_readonly("c", &CNNNeuronGradient::c, "MPSCNNNeuronGradient.c")
        .def_property_readonly("data", &CNNNeuronGradient::data, "MPSCNNNeuronGradient.data")
        .def_property_readonly("neuron_descriptor", &CNNNeuronGradient::neuronDescriptor);
}

}  // namespace mpsgrad::python
