// Bindings of the neuron family (MPSCNNNeuron.h).
#include "bindings.h"
#include "kernels/neuron.h"

namespace mpsgrad::python {
namespace {

Device neuronDevice(const py::object& device) { return toDevice(device, "device"); }

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
        .def(py::init([](py::object device, py::object descriptor) {
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

    py::class_<CNNNeuronGradient, CNNGradientKernel, std::shared_ptr<CNNNeuronGradient>>(
        m, "CNNNeuronGradient",
        "MPSCNNNeuronGradient: dX = G * f'(X). source_gradient = G (dL/dY), source_image = the forward INPUT X, "
        "gradient_state = the CNNNeuron's result state. At the kinks (ReLU, PReLU, ELU, ReLUN at x = 0) the "
        "derivative of the x >= 0 branch is used, as MPS documents.")
        .def(py::init([](py::object device, py::object descriptor) {
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
