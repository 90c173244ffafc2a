// The arithmetic family (MPSCNNMath.h): CNNArithmetic and CNNAdd / CNNSubtract / CNNMultiply /
// CNNDivide, NNCompare, CNNArithmeticGradientState, and the gradient filters CNNAddGradient,
// CNNSubtractGradient, CNNMultiplyGradient plus mpsgrad's extension CNNDivideGradient.
//
// Forward (x = primary, y = secondary, spec §2.10):
//     r = clamp((primary_scale * x) OP (secondary_scale * y) + bias, minimum_value, maximum_value)
// Broadcasting: each input has pixel strides (primary/secondary_stride_in_pixels_x/y, inherited
// from CNNBinaryKernel) and a feature-channel stride (primary/secondary_stride_in_feature_channels),
// each 0 or 1. Stride 1 walks the input with the output; stride 0 repeats one column (x), one row
// (y) or channel 0 of its slice (feature channels): all pixel strides 0 is a scalar per channel.
//
// Gradients (mpsgrad's decisions, docs/neurons.md "Arithmetic"):
//  * One gradient filter per forward input (is_secondary_source_filter), as in MPS.
//  * Exact chain rule through the scales: d r / d x and d r / d y of the forward formula with the
//    filter's primary_scale / secondary_scale, which the returning encode forms copy from the state
//    (so they equal the forward kernel's). add: pS, sS; subtract: pS, -sS; multiply: pS*sS*y,
//    pS*sS*x; divide: pS/(sS*y), -pS*x/(sS*y^2). With the default scales this is MPS's documented
//    result (G, -G, G*y, G*x), and MPS code that sets primary_scale = -1 on the subtract secondary
//    filter still gets -G (the derivative with respect to y does not involve pS).
//  * Broadcast axes are summed so dX has the shape of its input.
//  * The clamp IS differentiated: the forward encode stores the clamp mask (1 where
//    minimum_value <= u <= maximum_value) in the CNNArithmeticGradientState, and the gradient
//    multiplies G by it (torch.clamp semantics; MPS leaves this to the user).
//  * source_image of the gradient filters is the OTHER operand (MPSCNNMultiplyGradient's rule):
//    the primary filter takes y, the secondary filter takes x. Add and subtract do not read it.
//    CNNDivideGradient's secondary filter also needs y, which the forward CNNDivide copies into
//    the state.
#pragma once

#include <cfloat>
#include <cstdint>
#include <memory>

#include "core/kernel.h"
#include "kernels/elementwise_support.h"
#include "metal/arithmetic_params.h"

namespace mpsgrad {

// MPSNNComparisonType (declaration order: 0..5)
enum class NNComparisonType : int32_t {
    Equal = 0, NotEqual = 1, Less = 2, LessOrEqual = 3, Greater = 4, GreaterOrEqual = 5,
};

// MPSCNNArithmeticGradientState: what the forward arithmetic kernel recorded for its gradient
// filters: the forward parameters, the operands' broadcast parameters, the clamp mask (when a
// clamp is set) and, for CNNDivide, a copy of the secondary operand y.
class CNNArithmeticGradientState final : public NNBinaryGradientState {
public:
    CNNArithmeticGradientState(const Device& device, int32_t op, bool temporary, const CommandBuffer* cb)
        : NNBinaryGradientState(device, temporary, cb), op(op) {}
    const char* className() const override { return "CNNArithmeticGradientState"; }

    int32_t op;  // ArithmeticOpCode of the forward kernel
    float primaryScale = 1.0f, secondaryScale = 1.0f, bias = 0.0f;
    float minimumValue = -FLT_MAX, maximumValue = FLT_MAX;
    // The forward operands as the forward op read them (offsets already moved by the clip shift).
    ArithmeticOperand primary{}, secondary{};
    int64_t channels = 0;          // C, the destination channels computed
    int64_t images = 0;            // images encoded with this state
    bool hasClampMask = false;     // resource maskIndex holds the clamp mask
    ImageLayout maskLayout{};
    size_t maskIndex = 0;
    bool hasSecondaryCopy = false;  // CNNDivide: resource secondaryCopyIndex holds y
    ImageLayout secondaryCopyLayout{};
    size_t secondaryCopyIndex = 0;
    elementwise::StorageIdentity forwardPrimary, forwardSecondary;

    // Adds a zero-filled buffer resource of `bytes` bytes; returns its index.
    size_t addResource(size_t bytes) {
        addBuffer(bytes);
        return buffers_.size() - 1;
    }
};

// MPSCNNArithmetic (abstract). See the file comment for the formula and broadcasting rules.
class CNNArithmetic : public CNNBinaryKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can (the CPU backend, docs/float16.md).
    bool readsFloat16Natively() const override;
    float primaryScale = 1.0f;
    float secondaryScale = 1.0f;
    float bias = 0.0f;
    int64_t primaryStrideInFeatureChannels = 1;    // 0 or 1
    int64_t secondaryStrideInFeatureChannels = 1;  // 0 or 1
    float minimumValue = -FLT_MAX;
    float maximumValue = FLT_MAX;

    // -destinationImageDescriptorForSourceImages:sourceStates: ([primary, secondary]). mpsgrad [I]:
    // the size along each axis is that of an input that walks it (stride 1), 1 when both inputs
    // broadcast it; the channels are those of a channel-walking input. Offsets become 0.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

    int32_t opCode() const { return op_; }

    // -initWithCoder:device: for the concrete class T (CNNAdd, ..., NNCompare).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device) {
        auto kernel = std::make_shared<T>(device);
        static_cast<CNNArithmetic&>(*kernel).decodeWithCoder(reader);
        return kernel;
    }

protected:
    CNNArithmetic(const Device& device, int32_t op) : CNNBinaryKernel(device), op_(op) {}

    // Binary kernel properties, then the scales, bias, channel strides and clamp bounds.
    void encodeWithCoder(serial::Writer& writer) const override;
    virtual void decodeWithCoder(serial::Reader& reader);

    int64_t destinationFeatureChannels(const Image& primary, const Image& secondary) const override;
    StatePtr makeResultState(const Image& primary, const Image& secondary, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<BinaryDispatch>& dispatches, const StateBatch& states) override;

    // The validated geometry of one dispatch (shared with NNCompare).
    struct Resolved {
        ArithmeticOperand primary, secondary;
        ImageLayout destination;
        int32_t batch, clipX, clipY, clipWidth, clipHeight;
        int64_t channels;
    };
    Resolved resolve(const BinaryDispatch& d) const;
    void checkProperties() const;

    int32_t op_;
};

// MPSCNNAdd: r = clamp(pS*x + sS*y + bias)
class CNNAdd final : public CNNArithmetic {
public:
    explicit CNNAdd(const Device& device) : CNNArithmetic(device, kArithmeticAdd) {}
    const char* className() const override { return "CNNAdd"; }
};

// MPSCNNSubtract: r = clamp(pS*x - sS*y + bias)
class CNNSubtract final : public CNNArithmetic {
public:
    explicit CNNSubtract(const Device& device) : CNNArithmetic(device, kArithmeticSubtract) {}
    const char* className() const override { return "CNNSubtract"; }
};

// MPSCNNMultiply: r = clamp((pS*x) * (sS*y) + bias)
class CNNMultiply final : public CNNArithmetic {
public:
    explicit CNNMultiply(const Device& device) : CNNArithmetic(device, kArithmeticMultiply) {}
    const char* className() const override { return "CNNMultiply"; }
};

// MPSCNNDivide: r = clamp((pS*x) / (sS*y) + bias) (IEEE division: x/0 = ±inf or NaN)
class CNNDivide final : public CNNArithmetic {
public:
    explicit CNNDivide(const Device& device) : CNNArithmetic(device, kArithmeticDivide) {}
    const char* className() const override { return "CNNDivide"; }
};

// MPSNNCompare: r = clamp((compare(pS*x, sS*y) ? 1 : 0) + bias), forward only (no state).
class NNCompare final : public CNNArithmetic {
public:
    explicit NNCompare(const Device& device) : CNNArithmetic(device, kArithmeticAdd) {}
    const char* className() const override { return "NNCompare"; }

    NNComparisonType comparisonType = NNComparisonType::Equal;
    float threshold = 0.0f;  // used by Equal / NotEqual only: |x - y| <= threshold

protected:
    // The arithmetic payload, then comparison_type and threshold.
    void encodeWithCoder(serial::Writer& writer) const override;
    void decodeWithCoder(serial::Reader& reader) override;
    StatePtr makeResultState(const Image&, const Image&, CommandBuffer*) override { return nullptr; }
    void encodeImpl(CommandBuffer& cb, const std::vector<BinaryDispatch>& dispatches, const StateBatch& states) override;
};

// MPSCNNArithmeticGradient (abstract): the gradient of a forward arithmetic kernel with respect to
// one of its inputs. primary = G = dL/dr, secondary (source_image) = the other forward operand,
// state = the forward kernel's CNNArithmeticGradientState. The scales, strides and clamp bounds
// describe the forward op; the returning encode forms copy them from the state.
class CNNArithmeticGradient : public CNNGradientKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can (the CPU backend, docs/float16.md).
    bool readsFloat16Natively() const override;
    float primaryScale = 1.0f;
    float secondaryScale = 1.0f;
    float bias = 0.0f;  // ignored by the gradient (as in MPS)
    int64_t primaryStrideInFeatureChannels = 1;
    int64_t secondaryStrideInFeatureChannels = 1;
    float minimumValue = -FLT_MAX;  // informational: the clamp is differentiated through the state's mask
    float maximumValue = FLT_MAX;

    // MPSCNNArithmeticGradient.isSecondarySourceFilter
    bool isSecondarySourceFilter() const { return secondaryFilter_; }
    int32_t opCode() const { return op_; }

    // Configures every property from the forward state and sizes the result like the input this
    // filter differentiates (the forward primary, or the secondary for a secondary filter).
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

    // -initWithCoder:device: for the concrete class T (CNNAddGradient, ...).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device) {
        auto kernel = std::make_shared<T>(device, reader.boolean("is_secondary_source_filter"));
        static_cast<CNNArithmeticGradient&>(*kernel).decodeWithCoder(reader);
        return kernel;
    }

protected:
    CNNArithmeticGradient(const Device& device, int32_t op, bool isSecondarySourceFilter)
        : CNNGradientKernel(device), op_(op), secondaryFilter_(isSecondarySourceFilter) {}

    // is_secondary_source_filter, gradient kernel properties, then the arithmetic properties.
    void encodeWithCoder(serial::Writer& writer) const override;
    void decodeWithCoder(serial::Reader& reader);

    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

    int32_t op_;
    bool secondaryFilter_;
};

// MPSCNNAddGradient: primary dX = pS*G, secondary dY = sS*G (summed over broadcast axes).
class CNNAddGradient final : public CNNArithmeticGradient {
public:
    // -initWithDevice:isSecondarySourceFilter:
    CNNAddGradient(const Device& device, bool isSecondarySourceFilter)
        : CNNArithmeticGradient(device, kArithmeticAdd, isSecondarySourceFilter) {}
    const char* className() const override { return "CNNAddGradient"; }
};

// MPSCNNSubtractGradient: primary dX = pS*G, secondary dY = -sS*G.
class CNNSubtractGradient final : public CNNArithmeticGradient {
public:
    CNNSubtractGradient(const Device& device, bool isSecondarySourceFilter)
        : CNNArithmeticGradient(device, kArithmeticSubtract, isSecondarySourceFilter) {}
    const char* className() const override { return "CNNSubtractGradient"; }
};

// MPSCNNMultiplyGradient: primary dX = pS*sS*y*G (source_image = y), secondary dY = pS*sS*x*G
// (source_image = x).
class CNNMultiplyGradient final : public CNNArithmeticGradient {
public:
    CNNMultiplyGradient(const Device& device, bool isSecondarySourceFilter)
        : CNNArithmeticGradient(device, kArithmeticMultiply, isSecondarySourceFilter) {}
    const char* className() const override { return "CNNMultiplyGradient"; }
};

// mpsgrad extension (MPS has no divide gradient): primary dX = G*pS/(sS*y) (source_image = y),
// secondary dY = -G*pS*x/(sS*y^2) (source_image = x; y comes from the copy in the state).
class CNNDivideGradient final : public CNNArithmeticGradient {
public:
    CNNDivideGradient(const Device& device, bool isSecondarySourceFilter)
        : CNNArithmeticGradient(device, kArithmeticDivide, isSecondarySourceFilter) {}
    const char* className() const override { return "CNNDivideGradient"; }
};

// Name of the forward class of an ArithmeticOpCode ("CNNAdd", ...), for messages.
const char* arithmeticClassName(int32_t op);

}  // namespace mpsgrad
