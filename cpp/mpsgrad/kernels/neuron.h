// The neuron family (MPSCNNNeuron.h): NNNeuronDescriptor, the neuron types shared with
// convolution's fused neuron, CNNNeuron, its gradient state and CNNNeuronGradient.
//
// Formulas and derivatives of every type: metal/neuron_math.h and docs/neurons.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "kernels/elementwise_support.h"
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

    // Serialization (docs/serialization.md): type, a, b, c, data.
    std::vector<uint8_t> serialize() const;
    static NNNeuronDescriptor deserialize(const uint8_t* data, size_t size);
};

// Name of a neuron type ("ReLU", "Sigmoid", ...), for messages.
const char* neuronTypeName(CNNNeuronType type);

// Index into PReLU data of the first of `channels` processed channels that start at
// `channelOffset` of an image with `imageChannels` feature channels: PReLU data holds either one
// value per processed channel (index 0) or one per channel of the image (index channelOffset).
// 0 for the other neuron types; ValueError naming `what` for data of any other length.
int32_t preluDataOffset(const NNNeuronDescriptor& d, int64_t channelOffset, int64_t channels,
                        int64_t imageChannels, const char* what, const char* kernelName);

// The state a CNNNeuron writes for its gradient: mpsgrad's concrete MPSNNGradientState. It records
// the forward geometry (snapshot), the neuron type and which images were the forward input and
// output, so CNNNeuronGradient can insist on the forward INPUT X as its secondary.
//
// Extension (MPS has none): for a PReLU neuron the state also holds gradientForData(), one float
// per PReLU value, which CNNNeuronGradient fills with dL/da = sum over the pixels of the images
// encoded with this state of G * min(X, 0) (0 for channels the forward pass did not process).
class CNNNeuronGradientState final : public NNGradientState {
public:
    // dataCount: PReLU values (0 for the other types).
    CNNNeuronGradientState(const Device& device, CNNNeuronType type, size_t dataCount, bool temporary,
                           const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb), neuronType(type), dataCount_(dataCount) {
        if (dataCount_) addBuffer(dataCount_ * sizeof(float));
    }
    const char* className() const override { return "CNNNeuronGradientState"; }

    size_t dataCount() const { return dataCount_; }
    // PReLU's dL/da (empty slice for the other types).
    BufferSlice gradientForData() const { return dataCount_ ? resourceAtIndex(0) : BufferSlice{}; }

    CNNNeuronType neuronType;
    elementwise::StorageIdentity forwardSource, forwardDestination;

private:
    size_t dataCount_;
};

// MPSCNNNeuron: Y = f(X) at every pixel and feature channel (f per neuron type, docs/neurons.md).
// The destination has the channels the source provides after source_feature_channel_offset and
// source_feature_channel_max_count. result_state gives a CNNNeuronGradientState, so the training
// encode forms (destination_state / destination_state_is_temporary) work.
class CNNNeuron : public CNNKernel {
public:
    // -initWithDevice:neuronDescriptor: (ValueError for a type out of range or PReLU without data)
    CNNNeuron(const Device& device, const NNNeuronDescriptor& neuronDescriptor);
    const char* className() const override { return "CNNNeuron"; }
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can (the CPU backend, docs/float16.md).
    bool readsFloat16Natively() const override;

    // Read-only MPSCNNNeuron properties.
    CNNNeuronType neuronType() const { return descriptor_.neuronType; }
    float a() const { return descriptor_.a; }
    float b() const { return descriptor_.b; }
    float c() const { return descriptor_.c; }
    const std::vector<float>& data() const { return descriptor_.data; }
    const NNNeuronDescriptor& neuronDescriptor() const { return descriptor_; }

    // -initWithCoder:device:
    static std::shared_ptr<CNNNeuron> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    // For the per-type subclasses: ValueError naming `what` unless the descriptor has type `type`.
    CNNNeuron(const Device& device, const NNNeuronDescriptor& neuronDescriptor, CNNNeuronType type);

    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    NNNeuronDescriptor descriptor_;
    BufferSlice data_;  // PReLU's per-channel a on the device
};

// ---- the per-type MPSCNNNeuron subclasses ----------------------------------------------------------
// MPSCNNNeuronLinear, ...ReLU, ...PReLU, ...Sigmoid, ...HardSigmoid, ...TanH, ...Absolute, ...SoftPlus,
// ...SoftSign, ...ELU, ...ReLUN, ...Power, ...Exponential, ...Logarithm: CNNNeurons of a fixed type
// built with MPS's per-type initializers (-initWithDevice:[a:[b:[c:]]], deprecated by Apple since
// 10.14 in favour of -initWithDevice:neuronDescriptor:). They compute exactly what CNNNeuron computes
// with NNNeuronDescriptor::withType(type, a, b, c); they serialize under their own class tag with
// CNNNeuron's payload. The constructor taking a descriptor is the decoder's (-initWithCoder:device:)
// and rejects a descriptor of another type.
template <class Derived, CNNNeuronType Type>
class CNNNeuronOfType : public CNNNeuron {
public:
    static constexpr CNNNeuronType kType = Type;
    CNNNeuronOfType(const Device& device, const NNNeuronDescriptor& d) : CNNNeuron(device, d, Type) {}

    // -initWithCoder:device: (SerializationError for a payload of another neuron type)
    static std::shared_ptr<Derived> initWithCoder(serial::Reader& reader, const Device& device);
};

#define MPSGRAD_NEURON_CLASS_NAME(Name) \
    const char* className() const override { return #Name; }

class CNNNeuronAbsolute final : public CNNNeuronOfType<CNNNeuronAbsolute, CNNNeuronType::Absolute> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    explicit CNNNeuronAbsolute(const Device& device) : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType)) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronAbsolute)
};

class CNNNeuronSigmoid final : public CNNNeuronOfType<CNNNeuronSigmoid, CNNNeuronType::Sigmoid> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    explicit CNNNeuronSigmoid(const Device& device) : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType)) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronSigmoid)
};

class CNNNeuronSoftSign final : public CNNNeuronOfType<CNNNeuronSoftSign, CNNNeuronType::SoftSign> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    explicit CNNNeuronSoftSign(const Device& device) : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType)) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronSoftSign)
};

// -initWithDevice:a: (f = x >= 0 ? x : a*x)
class CNNNeuronReLU final : public CNNNeuronOfType<CNNNeuronReLU, CNNNeuronType::ReLU> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    CNNNeuronReLU(const Device& device, float a) : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType, a)) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronReLU)
};

// -initWithDevice:a: (f = x >= 0 ? x : a*(exp(x) - 1))
class CNNNeuronELU final : public CNNNeuronOfType<CNNNeuronELU, CNNNeuronType::ELU> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    CNNNeuronELU(const Device& device, float a) : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType, a)) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronELU)
};

// -initWithDevice:a:count: (one a per feature channel)
class CNNNeuronPReLU final : public CNNNeuronOfType<CNNNeuronPReLU, CNNNeuronType::PReLU> {
public:
    using CNNNeuronOfType::CNNNeuronOfType;
    CNNNeuronPReLU(const Device& device, const float* a, size_t count)
        : CNNNeuronOfType(device, NNNeuronDescriptor::preluWithData(std::vector<float>(a, a + count))) {}
    MPSGRAD_NEURON_CLASS_NAME(CNNNeuronPReLU)
};

// The -initWithDevice:a:b: classes.
#define MPSGRAD_NEURON_AB_CLASS(Name, Type)                                                                  \
    class Name final : public CNNNeuronOfType<Name, CNNNeuronType::Type> {                                    \
    public:                                                                                                   \
        using CNNNeuronOfType::CNNNeuronOfType;                                                               \
        Name(const Device& device, float a, float b)                                                          \
            : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType, a, b)) {}                           \
        MPSGRAD_NEURON_CLASS_NAME(Name)                                                                       \
    };
MPSGRAD_NEURON_AB_CLASS(CNNNeuronLinear, Linear)            // a*x + b
MPSGRAD_NEURON_AB_CLASS(CNNNeuronHardSigmoid, HardSigmoid)  // clamp(a*x + b, 0, 1)
MPSGRAD_NEURON_AB_CLASS(CNNNeuronTanH, TanH)                // a*tanh(b*x)
MPSGRAD_NEURON_AB_CLASS(CNNNeuronSoftPlus, SoftPlus)        // a*log(1 + exp(b*x))
MPSGRAD_NEURON_AB_CLASS(CNNNeuronReLUN, ReLUN)              // min(x >= 0 ? x : a*x, b)
#undef MPSGRAD_NEURON_AB_CLASS

// The -initWithDevice:a:b:c: classes.
#define MPSGRAD_NEURON_ABC_CLASS(Name, Type)                                                                 \
    class Name final : public CNNNeuronOfType<Name, CNNNeuronType::Type> {                                    \
    public:                                                                                                   \
        using CNNNeuronOfType::CNNNeuronOfType;                                                               \
        Name(const Device& device, float a, float b, float c)                                                 \
            : CNNNeuronOfType(device, NNNeuronDescriptor::withType(kType, a, b, c)) {}                        \
        MPSGRAD_NEURON_CLASS_NAME(Name)                                                                       \
    };
MPSGRAD_NEURON_ABC_CLASS(CNNNeuronPower, Power)              // (a*x + b)^c
MPSGRAD_NEURON_ABC_CLASS(CNNNeuronExponential, Exponential)  // c^(a*x + b), c = -1: base e
MPSGRAD_NEURON_ABC_CLASS(CNNNeuronLogarithm, Logarithm)      // log_c(a*x + b), c = -1: natural log
#undef MPSGRAD_NEURON_ABC_CLASS
#undef MPSGRAD_NEURON_CLASS_NAME

// MPSCNNNeuronGradient: dX = G * f'(X), primary G = dL/dY, secondary = the forward INPUT X.
// At the kinks of ReLU, PReLU, ELU and ReLUN the derivative of the x >= 0 branch is used (MPS's
// convention: f'(0) = 1 for ReLU). The returning encode forms copy the forward geometry from the
// state (the generic pointwise mapping: G read where the forward wrote, X read and dX written where
// the forward read).
class CNNNeuronGradient final : public CNNGradientKernel {
public:
    // -initWithDevice:neuronDescriptor:
    CNNNeuronGradient(const Device& device, const NNNeuronDescriptor& neuronDescriptor);
    const char* className() const override { return "CNNNeuronGradient"; }
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can, except PReLU (its dL/da op reads float32).
    bool readsFloat16Natively() const override;

    CNNNeuronType neuronType() const { return descriptor_.neuronType; }
    float a() const { return descriptor_.a; }
    float b() const { return descriptor_.b; }
    float c() const { return descriptor_.c; }
    const std::vector<float>& data() const { return descriptor_.data; }
    const NNNeuronDescriptor& neuronDescriptor() const { return descriptor_; }

    // -initWithCoder:device:
    static std::shared_ptr<CNNNeuronGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    NNNeuronDescriptor descriptor_;
    BufferSlice data_;
};

}  // namespace mpsgrad
