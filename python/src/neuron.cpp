// Bindings of the neuron family (MPSCNNNeuron.h).
#include "bindings.h"
#include "kernels/neuron.h"

namespace mpsgrad::python {

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
                 int64_t t = py::int_(py::reinterpret_borrow<py::object>(type)).cast<int64_t>();
                 if (t < 0 || t >= int64_t(CNNNeuronType::Count))
                     throwValueError("neuron_type: must be a CNNNeuronType in [0, 15], got ", t);
                 auto kind = static_cast<CNNNeuronType>(t);
                 NNNeuronDescriptor d = NNNeuronDescriptor::withType(kind);
                 if (!a.is_none()) d.a = a.cast<float>();
                 if (!b.is_none()) d.b = b.cast<float>();
                 if (!c.is_none()) d.c = c.cast<float>();
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
                          int64_t t = py::int_(py::reinterpret_borrow<py::object>(type)).cast<int64_t>();
                          if (t < 0 || t >= int64_t(CNNNeuronType::Count))
                              throwValueError("neuron_type: must be a CNNNeuronType in [0, 15], got ", t);
                          d.neuronType = static_cast<CNNNeuronType>(t);
                      })
        .def_readwrite("a", &NNNeuronDescriptor::a)
        .def_readwrite("b", &NNNeuronDescriptor::b)
        .def_readwrite("c", &NNNeuronDescriptor::c)
        .def_readwrite("data", &NNNeuronDescriptor::data)
        .def("__repr__", [](const NNNeuronDescriptor& d) {
            return "NNNeuronDescriptor(type=" + std::to_string(int(d.neuronType)) + ", a=" + std::to_string(d.a) +
                   ", b=" + std::to_string(d.b) + ", c=" + std::to_string(d.c) + ")";
        });
}

}  // namespace mpsgrad::python
