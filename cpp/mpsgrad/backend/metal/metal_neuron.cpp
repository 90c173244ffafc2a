// Encoding of the neuron family's ops (kernels: metal/neuron.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

constexpr int kPixelsPerThread = 4;  // neuron.metal's kPixelsPerThread

void checkNeuron(const char* op, const NeuronParams& n, const BufferSlice& neuronData, int32_t dataOffset,
                 int channels) {
    if (n.type < 0 || n.type >= kNeuronCount) throwValueError(op, ": unknown neuron type ", n.type);
    if (n.type == kNeuronPReLU && !n.hasChannelData)
        throwValueError(op, ": a PReLU neuron needs its per-channel data (hasChannelData = 1)");
    if (!n.hasChannelData) return;
    if (dataOffset < 0) throwValueError(op, ": negative neuronDataOffset ", dataOffset);
    checkFloats(op, "neuron data", neuronData, int64_t(dataOffset) + channels);
}

// The clip rectangle: inside the destination, and countable in 32-bit ints.
void checkClip(const char* op, const ImageLayout& destination, int x, int y, int width, int height, int batch) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    checkRect(op, "destination clip", destination, x, y, width, height);
    if (int64_t(batch) * width * height > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
}

// A grid thread per channel quad of kPixelsPerThread pixels of a clip row.
MTL::Size neuronGrid(int channels, int clipWidth, int clipHeight, int batch) {
    return MTL::Size(ceilDiv(channels, 4), ceilDiv(clipWidth, kPixelsPerThread), NS::UInteger(batch) * clipHeight);
}

// Whole aligned quads: the image's slices start on quads and every quad is full.
bool alignedQuads(const ImageLayout& l, int channels) { return channels % 4 == 0 && quadAligned(l); }

}  // namespace

void encodeNeuronForward(MetalContext& ctx, CommandBuffer& cb, NeuronForwardParams p, const BufferSlice& source,
                         const BufferSlice& neuronData, const BufferSlice& destination) {
    const char* op = "neuron_forward";
    const int channels = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.source.channels != channels)
        throwValueError(op, ": source has ", p.source.channels, " channels, destination ", channels);
    checkNeuron(op, p.neuron, neuronData, p.neuronDataOffset, channels);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (channels == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }

    FunctionConstants constants;
    constants.setInt(kConstantNeuronType, p.neuron.type)
        .setBool(kConstantAlignedSource, alignedQuads(p.source, channels))
        .setBool(kConstantAlignedDestination, alignedQuads(p.destination, channels));
    KernelDispatch dispatch(ctx.pipelines->get("neuron_forward", constants));
    dispatch.params(p).buffer(1, src).buffer(2, p.neuron.hasChannelData ? neuronData : BufferSlice{}).buffer(3, dst);
    dispatch.encodeThreads(ctx, cb, neuronGrid(channels, p.clipWidth, p.clipHeight, p.batch));
}

void encodeNeuronGradient(MetalContext& ctx, CommandBuffer& cb, NeuronGradientParams p, const BufferSlice& gradient,
                          const BufferSlice& source, const BufferSlice& neuronData, const BufferSlice& destination) {
    const char* op = "neuron_gradient";
    const int channels = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.source.channels != channels || p.gradient.channels != channels)
        throwValueError(op, ": gradient (", p.gradient.channels, "), source (", p.source.channels,
                        ") and destination (", channels, ") channel counts differ");
    checkNeuron(op, p.neuron, neuronData, p.neuronDataOffset, channels);
    const BufferSlice grad = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (channels == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }

    FunctionConstants constants;
    constants.setInt(kConstantNeuronType, p.neuron.type)
        .setBool(kConstantAlignedSource, alignedQuads(p.source, channels))
        .setBool(kConstantAlignedGradient, alignedQuads(p.gradient, channels))
        .setBool(kConstantAlignedDestination, alignedQuads(p.destination, channels));
    KernelDispatch dispatch(ctx.pipelines->get("neuron_gradient", constants));
    dispatch.params(p)
        .buffer(1, grad)
        .buffer(2, src)
        .buffer(3, p.neuron.hasChannelData ? neuronData : BufferSlice{})
        .buffer(4, dst);
    dispatch.encodeThreads(ctx, cb, neuronGrid(channels, p.clipWidth, p.clipHeight, p.batch));
}

}  // namespace mpsgrad::metal_backend
