// Encoding of the PReLU a-gradient extension (kernel: metal/neuron_prelu.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {
enum : unsigned { kPreluAlignedSource = 1, kPreluAlignedGradient = 2 };  // neuron_prelu.metal's constants
constexpr unsigned kReduceThreads = 128;                                 // neuron_prelu.metal's kReduceThreads

bool alignedQuads(const ImageLayout& l, int channels) { return channels % 4 == 0 && quadAligned(l); }
bool edgeOk(int32_t mode) { return mode == kEdgeZero || mode == kEdgeClamp; }
}  // namespace

void encodeNeuronPReLUWeightGradient(MetalContext& ctx, CommandBuffer& cb, NeuronGradientParams p,
                                     const BufferSlice& gradient, const BufferSlice& source,
                                     const BufferSlice& aGradient) {
    const char* op = "neuron_prelu_weight_gradient";
    const int channels = p.destination.channels;
    if (p.source.channels != channels || p.gradient.channels != channels)
        throwValueError(op, ": gradient (", p.gradient.channels, "), source (", p.source.channels,
                        ") and destination (", channels, ") channel counts differ");
    if (p.batch < 0 || p.clipWidth < 0 || p.clipHeight < 0) throwValueError(op, ": negative clip size or batch");
    if (int64_t(p.batch) * p.clipWidth * p.clipHeight > INT32_MAX) throwValueError(op, ": too many pixels");
    if (!edgeOk(p.gradientEdgeMode) || !edgeOk(p.sourceEdgeMode)) throwValueError(op, ": unknown edge mode");
    if (p.neuronDataOffset < 0) throwValueError(op, ": negative neuronDataOffset ", p.neuronDataOffset);
    checkFloats(op, "a gradient", aGradient, int64_t(p.neuronDataOffset) + channels);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice x = bindImage(op, "source", source, p.source, p.batch);
    if (channels == 0) {
        metalCommandBuffer(cb);
        return;
    }
    // An empty clip still overwrites dA with zeros: the kernel's loop has no pixel to add.
    FunctionConstants constants;
    constants.setBool(kPreluAlignedSource, alignedQuads(p.source, channels))
        .setBool(kPreluAlignedGradient, alignedQuads(p.gradient, channels));
    KernelDispatch dispatch(ctx.pipelines->get("neuron_prelu_weight_gradient", constants));
    dispatch.params(p).buffer(1, g).buffer(2, x).buffer(3, aGradient);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(channels, 4), 1, 1), kReduceThreads, true);
}

}  // namespace mpsgrad::metal_backend
