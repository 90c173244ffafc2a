// The neuron family (MPSCNNNeuron.h): NNNeuronDescriptor, and the neuron types shared with
// convolution's fused neuron.
#pragma once

#include <cstdint>
#include <vector>

#include "metal/common_params.h"

namespace mpsgrad {

// MPSCNNNeuronType (exact values)
enum class CNNNeuronType : int32_t {
    None = 0, ReLU = 1, Linear = 2, Sigmoid = 3, HardSigmoid = 4, TanH = 5, Absolute = 6, SoftPlus = 7,
    SoftSign = 8, ELU = 9, PReLU = 10, ReLUN = 11, Power = 12, Exponential = 13, Logarithm = 14, GeLU = 15,
    Count = 16,
};

// MPSNNNeuronDescriptor
class NNNeuronDescriptor {
public:
    CNNNeuronType neuronType = CNNNeuronType::None;
    float a = 0.0f;
    float b = 0.0f;
    float c = 0.0f;
    std::vector<float> data;  // PReLU's per-channel a

    // +cnnNeuronDescriptorWithType: — parameters take mpsgrad's documented defaults for the type
    // (ReLU a=0; Linear a=1 b=0; HardSigmoid a=0.2 b=0.5; TanH/SoftPlus a=1 b=1; ELU a=1;
    // ReLUN a=1 b=6; Power a=1 b=0 c=1; Exponential/Logarithm a=1 b=0 c=-1 (base e)).
    static NNNeuronDescriptor withType(CNNNeuronType type);
    // +cnnNeuronDescriptorWithType:a:[b:[c:]] (unspecified parameters keep the type's defaults)
    static NNNeuronDescriptor withType(CNNNeuronType type, float a);
    static NNNeuronDescriptor withType(CNNNeuronType type, float a, float b);
    static NNNeuronDescriptor withType(CNNNeuronType type, float a, float b, float c);
    // +cnnNeuronPReLUDescriptorWithData:noCopy:
    static NNNeuronDescriptor preluWithData(std::vector<float> data);

    // ValueError naming `what` for a type out of range or PReLU without data.
    void validate(const char* what) const;
    // The params struct the backend ops take.
    NeuronParams params() const;
};

}  // namespace mpsgrad
