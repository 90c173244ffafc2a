#include "kernels/neuron.h"

#include "core/errors.h"

namespace mpsgrad {

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type) {
    NNNeuronDescriptor d;
    d.neuronType = type;
    switch (type) {
        case CNNNeuronType::ReLU: d.a = 0.0f; break;
        case CNNNeuronType::Linear: d.a = 1.0f; d.b = 0.0f; break;
        case CNNNeuronType::HardSigmoid: d.a = 0.2f; d.b = 0.5f; break;
        case CNNNeuronType::TanH:
        case CNNNeuronType::SoftPlus: d.a = 1.0f; d.b = 1.0f; break;
        case CNNNeuronType::ELU: d.a = 1.0f; break;
        case CNNNeuronType::ReLUN: d.a = 1.0f; d.b = 6.0f; break;
        case CNNNeuronType::Power: d.a = 1.0f; d.b = 0.0f; d.c = 1.0f; break;
        case CNNNeuronType::Exponential:
        case CNNNeuronType::Logarithm: d.a = 1.0f; d.b = 0.0f; d.c = -1.0f; break;
        default: break;
    }
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a) {
    NNNeuronDescriptor d = withType(type);
    d.a = a;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a, float b) {
    NNNeuronDescriptor d = withType(type, a);
    d.b = b;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a, float b, float c) {
    NNNeuronDescriptor d = withType(type, a, b);
    d.c = c;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::preluWithData(std::vector<float> data) {
    NNNeuronDescriptor d;
    d.neuronType = CNNNeuronType::PReLU;
    d.data = std::move(data);
    return d;
}

void NNNeuronDescriptor::validate(const char* what) const {
    int32_t t = static_cast<int32_t>(neuronType);
    if (t < 0 || t >= static_cast<int32_t>(CNNNeuronType::Count))
        throwValueError(what, ": neuron_type must be a CNNNeuronType in [0, 15], got ", t);
    if (neuronType == CNNNeuronType::PReLU && data.empty())
        throwValueError(what, ": a PReLU neuron needs per-channel data (NNNeuronDescriptor.prelu(data))");
}

NeuronParams NNNeuronDescriptor::params() const {
    NeuronParams p;
    p.type = static_cast<int32_t>(neuronType);
    p.a = a;
    p.b = b;
    p.c = c;
    p.hasChannelData = neuronType == CNNNeuronType::PReLU ? 1 : 0;
    return p;
}

}  // namespace mpsgrad
