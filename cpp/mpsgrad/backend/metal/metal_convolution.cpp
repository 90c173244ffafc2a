// Encoding of the convolution family's ops (kernels: metal/convolution.metal).
//
// Each op checks its geometry and bindings, decides which bindings the kernel may access as
// aligned float4 quads (function constants, so each variant is its own pipeline), and encodes the
// general implicit-GEMM kernel or, for depthwise convolutions, the per-channel kernel.
#include <algorithm>
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// Tile sizes of convolution.metal's kernels (its `conv` enum); a threadgroup covers one tile.
constexpr unsigned kGemmThreads = 64;
constexpr int kTileM = 32;  // output pixels
constexpr int kTileN = 32;  // output channels
constexpr unsigned kWeightGradientThreads = 128;
constexpr int kWeightGradientTileO = 8;   // output channels
constexpr int kWeightGradientTileC = 16;  // weight-row columns
constexpr unsigned kReduceThreads = 256;
constexpr int kSimdWidth = 32;            // pixels per weight-gradient step
constexpr int kFloatsPerThread = 4;       // utility.metal's sum_slices

struct Geometry {
    int groups;
    int inPerGroup;   // input channels per group
    int outPerGroup;  // output channels per group
    int taps;         // kernelWidth * kernelHeight
    int rowLength;    // floats of one output channel's weights: taps * inPerGroup
    bool depthwise;   // one input and one output channel per group
};

Geometry checkGeometry(const char* op, int batch, int groups, int inChannels, int outChannels, int kernelWidth,
                       int kernelHeight, int strideX, int strideY, int dilationX, int dilationY) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    if (inChannels < 1 || outChannels < 1)
        throwValueError(op, ": channel counts must be >= 1, got ", inChannels, " in and ", outChannels, " out");
    if (groups < 1 || inChannels % groups != 0 || outChannels % groups != 0)
        throwValueError(op, ": groups (", groups, ") must divide the input (", inChannels, ") and output (",
                        outChannels, ") channel counts");
    if (kernelWidth < 1 || kernelHeight < 1)
        throwValueError(op, ": kernel size must be >= 1, got ", kernelWidth, " x ", kernelHeight);
    if (strideX < 1 || strideY < 1) throwValueError(op, ": strides must be >= 1, got ", strideX, ", ", strideY);
    if (dilationX < 1 || dilationY < 1)
        throwValueError(op, ": dilation rates must be >= 1, got ", dilationX, ", ", dilationY);
    Geometry g;
    g.groups = groups;
    g.inPerGroup = inChannels / groups;
    g.outPerGroup = outChannels / groups;
    g.taps = kernelWidth * kernelHeight;
    g.rowLength = g.taps * g.inPerGroup;
    g.depthwise = g.inPerGroup == 1 && g.outPerGroup == 1;
    return g;
}

void checkNeuron(const char* op, const NeuronParams& n) {
    if (n.type < 0 || n.type >= kNeuronCount) throwValueError(op, ": unknown neuron type ", n.type);
    if (n.type == kNeuronPReLU && !n.hasChannelData)
        throwValueError(op, ": a PReLU neuron needs its per-channel data (hasChannelData = 1)");
}

// Pixels of a clip rectangle over the batch, which the kernels count in 32-bit ints.
int64_t checkedPixels(const char* op, int batch, int width, int height) {
    const int64_t pixels = int64_t(batch) * width * height;
    if (pixels > INT32_MAX) throwValueError(op, ": ", pixels, " pixels in one dispatch; at most 2^31 - 1");
    return pixels;
}

// How the weight gradient's reduction over `pixels` is split across threadgroups when its dW
// tiles alone (`tiles` threadgroups) would leave most of the GPU idle: into slices of at least
// kMinSteps steps of 32 pixels, up to about kTargetThreadgroups threadgroups in all. The split
// depends on the shapes only, never on the device, so results are the same bits everywhere.
ReductionSplit weightGradientSplit(int64_t pixels, int64_t tiles) {
    constexpr int64_t kTargetThreadgroups = 512;
    constexpr int64_t kMinSteps = 8;
    const int64_t steps = (pixels + kSimdWidth - 1) / kSimdWidth;
    const int64_t maxSlices = std::max<int64_t>(1, steps / kMinSteps);
    const int64_t wanted = std::max<int64_t>(1, std::min(maxSlices, kTargetThreadgroups / std::max<int64_t>(tiles, 1)));
    const int64_t stepsPerSlice = std::max<int64_t>(1, (steps + wanted - 1) / wanted);
    ReductionSplit split;
    split.slices = int32_t(std::max<int64_t>(1, (steps + stepsPerSlice - 1) / stepsPerSlice));
    split.pixelsPerSlice = int32_t(stepsPerSlice * kSimdWidth);
    return split;
}

// The general weight gradient, split or not, then (when split) the sum of the slices into dW.
void encodeGeneralWeightGradient(MetalContext& ctx, CommandBuffer& cb, const ConvolutionWeightGradientParams& p,
                                 const Geometry& g, const BufferSlice& grad, const BufferSlice& src,
                                 const BufferSlice& weightGradient, bool alignedGradient) {
    const char* op = "convolution_weight_gradient";
    const MTL::Size tiles(ceilDiv(g.rowLength, kWeightGradientTileC), ceilDiv(g.outPerGroup, kWeightGradientTileO),
                          g.groups);
    const int64_t pixels = int64_t(p.batch) * p.gradient.width * p.gradient.height;
    const ReductionSplit split = weightGradientSplit(pixels, int64_t(tiles.width) * tiles.height * tiles.depth);
    const int64_t weightFloats = int64_t(p.gradient.channels) * g.rowLength;
    if (split.slices * weightFloats > INT32_MAX) throwValueError(op, ": the weight gradient is too large to split");
    const bool alignedWeights = g.rowLength % 4 == 0 && quadAligned(weightGradient);

    FunctionConstants constants;
    constants.setBool(kConstantAlignedInput, g.inPerGroup % 4 == 0 && quadAligned(p.source))
        .setBool(kConstantAlignedConvGradient, alignedGradient)
        .setBool(kConstantAlignedWeights, alignedWeights);
    const Pipeline& pipeline = ctx.pipelines->get("convolution_weight_gradient", constants);
    const Pipeline* sumPipeline = nullptr;
    if (split.slices > 1) {
        FunctionConstants sumConstants;
        sumConstants.setBool(kConstantAlignedSource, weightFloats % 4 == 0)
            .setBool(kConstantAlignedDestination, quadAligned(weightGradient));
        sumPipeline = &ctx.pipelines->get("sum_slices", sumConstants);
    }

    // Partial sums per slice (the kernel writes every element of it).
    const BufferSlice partials =
        split.slices > 1 ? BufferSlice{ctx.buffers->allocate(size_t(split.slices * weightFloats) * sizeof(float)), 0}
                         : BufferSlice{};
    KernelDispatch dispatch(pipeline);
    dispatch.params(p).buffer(1, grad).buffer(2, src).buffer(3, weightGradient).bytes(4, split).buffer(5, partials);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(tiles.width, tiles.height, tiles.depth * split.slices),
                                kWeightGradientThreads, true);
    if (!sumPipeline) return;
    KernelDispatch sum(*sumPipeline);
    sum.params(SumSlicesParams{int32_t(weightFloats), split.slices, p.accumulate}).buffer(1, partials).buffer(2, weightGradient);
    sum.encodeThreads(ctx, cb, MTL::Size(ceilDiv(weightFloats, kFloatsPerThread), 1, 1));
}

}  // namespace

// ------------------------------------------------------------------------------------------

void encodeConvolutionForward(MetalContext& ctx, CommandBuffer& cb, ConvolutionParams p, const BufferSlice& source,
                              const BufferSlice& weights, const BufferSlice& biases, const BufferSlice& neuronData,
                              const BufferSlice& destination, const BufferSlice& preactivation) {
    const char* op = "convolution_forward";
    const Geometry g = checkGeometry(op, p.batch, p.groups, p.source.channels, p.destination.channels,
                                     p.kernelWidth, p.kernelHeight, p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkNeuron(op, p.neuron);
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    if (p.writePreactivation) {
        checkLayout(op, "preactivation", p.preactivation);
        checkRect(op, "preactivation", p.preactivation, 0, 0, p.clipWidth, p.clipHeight);
        if (p.preactivation.channels != p.destination.channels)
            throwValueError(op, ": preactivation has ", p.preactivation.channels, " channels, destination ",
                            p.destination.channels);
    }
    const int64_t pixels = checkedPixels(op, p.batch, p.clipWidth, p.clipHeight);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const BufferSlice pre =
        p.writePreactivation ? bindImage(op, "preactivation", preactivation, p.preactivation, p.batch) : BufferSlice{};
    const int outChannels = p.destination.channels;
    checkFloats(op, "weights", weights, int64_t(outChannels) * g.rowLength);
    if (p.hasBias) checkFloats(op, "biases", biases, outChannels);
    if (p.neuron.hasChannelData) checkFloats(op, "neuron data", neuronData, outChannels);
    if (pixels == 0) {
        metalCommandBuffer(cb);  // still an error to encode into a committed buffer
        return;
    }

    // Quads never straddle groups: the GEMM kernel's channel quads start at multiples of 4
    // within a group, so aligned access needs whole quads per group.
    const bool quadsIn = g.depthwise || g.inPerGroup % 4 == 0;
    const bool quadsOut = g.depthwise || g.outPerGroup % 4 == 0;
    FunctionConstants constants;
    constants.setInt(kConstantNeuronType, p.neuron.type)
        .setBool(kConstantAlignedInput, quadsIn && quadAligned(p.source))
        .setBool(kConstantAlignedOutput, quadsOut && quadAligned(p.destination))
        .setBool(kConstantAlignedPreactivation, p.writePreactivation && quadsOut && quadAligned(p.preactivation));
    if (!g.depthwise)
        constants.setBool(kConstantAlignedWeights, g.rowLength % 4 == 0 && quadAligned(weights));

    const Pipeline& pipeline =
        ctx.pipelines->get(g.depthwise ? "convolution_forward_depthwise" : "convolution_forward", constants);
    KernelDispatch dispatch(pipeline);
    dispatch.params(p)
        .buffer(1, src)
        .buffer(2, weights)
        .buffer(3, p.hasBias ? biases : BufferSlice{})
        .buffer(4, p.neuron.hasChannelData ? neuronData : BufferSlice{})
        .buffer(5, dst)
        .buffer(6, pre);
    if (g.depthwise) {
        dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(outChannels, 4), p.clipWidth, p.batch * p.clipHeight));
    } else {
        dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(pixels, kTileM), ceilDiv(g.outPerGroup, kTileN), g.groups),
                                    kGemmThreads);
    }
}

// ------------------------------------------------------------------------------------------

void encodeConvolutionDataGradient(MetalContext& ctx, CommandBuffer& cb, ConvolutionDataGradientParams p,
                                   const BufferSlice& gradient, const BufferSlice& weights,
                                   const BufferSlice& biases, const BufferSlice& destination) {
    const char* op = "convolution_data_gradient";
    const Geometry g = checkGeometry(op, p.batch, p.groups, p.destination.channels, p.gradient.channels,
                                     p.kernelWidth, p.kernelHeight, p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkedPixels(op, p.batch, p.clipWidth, p.clipHeight);
    const BufferSlice grad = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    checkFloats(op, "weights", weights, int64_t(p.gradient.channels) * g.rowLength);
    if (p.hasBias) checkFloats(op, "biases", biases, p.destination.channels);
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }

    const bool quadsIn = g.depthwise || g.outPerGroup % 4 == 0;   // E's channels are the reduction
    const bool quadsOut = g.depthwise || g.inPerGroup % 4 == 0;
    FunctionConstants constants;
    constants.setBool(kConstantAlignedInput, quadsIn && quadAligned(p.gradient))
        .setBool(kConstantAlignedOutput, quadsOut && quadAligned(p.destination));
    if (!g.depthwise) constants.setBool(kConstantAlignedWeights, g.inPerGroup % 4 == 0 && quadAligned(weights));

    const Pipeline& pipeline =
        ctx.pipelines->get(g.depthwise ? "convolution_data_gradient_depthwise" : "convolution_data_gradient", constants);
    KernelDispatch dispatch(pipeline);
    // Binding 4 is read only when hasBias; the weights stand in for it otherwise.
    dispatch.params(p).buffer(1, grad).buffer(2, weights).buffer(3, dst).buffer(4, p.hasBias ? biases : weights);
    if (g.depthwise) {
        dispatch.encodeThreads(ctx, cb,
                               MTL::Size(ceilDiv(p.destination.channels, 4), p.clipWidth, p.batch * p.clipHeight));
        return;
    }
    // One grid layer per (group, stride phase); the largest phase (0, 0) sizes the x dimension.
    const int64_t phasePixels =
        int64_t(p.batch) * ceilDiv(p.clipHeight, p.strideY) * int64_t(ceilDiv(p.clipWidth, p.strideX));
    const int64_t layers = int64_t(g.groups) * p.strideX * p.strideY;
    if (layers > INT32_MAX) throwValueError(op, ": groups x strideX x strideY is too large");
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(phasePixels, kTileM), ceilDiv(g.inPerGroup, kTileN), layers),
                                kGemmThreads);
}

void encodeConvolutionTransposeWeights(MetalContext& ctx, CommandBuffer& cb, const ConvolutionTransposeWeightsParams& p,
                                       const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "convolution_transpose_weights";
    const Geometry g = checkGeometry(op, 1, p.groups, p.inChannels, p.outChannels, p.kernelWidth, p.kernelHeight,
                                     1, 1, 1, 1);
    checkFloats(op, "source", source, int64_t(p.outChannels) * g.rowLength);
    checkFloats(op, "destination", destination, int64_t(p.outChannels) * g.rowLength);
    KernelDispatch dispatch(ctx.pipelines->get(op, FunctionConstants()));
    dispatch.params(p).buffer(1, source).buffer(2, destination);
    dispatch.encodeThreads(ctx, cb, MTL::Size(g.inPerGroup, g.taps, p.outChannels));
}

// ------------------------------------------------------------------------------------------

void encodeConvolutionWeightGradient(MetalContext& ctx, CommandBuffer& cb, ConvolutionWeightGradientParams p,
                                     const BufferSlice& gradient, const BufferSlice& source,
                                     const BufferSlice& weightGradient, const BufferSlice& biasGradient) {
    const char* op = "convolution_weight_gradient";
    const Geometry g = checkGeometry(op, p.batch, p.groups, p.source.channels, p.gradient.channels,
                                     p.kernelWidth, p.kernelHeight, p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkedPixels(op, p.batch, p.gradient.width, p.gradient.height);
    const BufferSlice grad = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const int outChannels = p.gradient.channels;
    if (p.computeWeights) checkFloats(op, "weight gradient", weightGradient, int64_t(outChannels) * g.rowLength);
    if (p.computeBiases) checkFloats(op, "bias gradient", biasGradient, outChannels);
    metalCommandBuffer(cb);
    // An empty batch still writes: the sums are zero (or leave the accumulated values as they are).

    const bool alignedGradient = (g.depthwise || g.outPerGroup % 4 == 0) && quadAligned(p.gradient);
    if (p.computeWeights && !g.depthwise) {
        encodeGeneralWeightGradient(ctx, cb, p, g, grad, src, weightGradient, alignedGradient);
    } else if (p.computeWeights) {
        FunctionConstants constants;
        constants.setBool(kConstantAlignedInput, quadAligned(p.source))
            .setBool(kConstantAlignedConvGradient, alignedGradient);
        KernelDispatch dispatch(ctx.pipelines->get("convolution_weight_gradient_depthwise", constants));
        dispatch.params(p).buffer(1, grad).buffer(2, src).buffer(3, weightGradient);
        dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(outChannels, 4), g.taps, 1), kReduceThreads, true);
    }
    if (p.computeBiases) {
        FunctionConstants constants;
        // The bias kernel reads E in quads of all channels, whatever the groups (a partial
        // last quad falls back to scalar loads).
        constants.setBool(kConstantAlignedConvGradient, quadAligned(p.gradient));
        const Pipeline& pipeline = ctx.pipelines->get("convolution_bias_gradient", constants);
        KernelDispatch dispatch(pipeline);
        dispatch.params(p).buffer(1, grad).buffer(2, biasGradient);
        dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(outChannels, 4), 1, 1), kReduceThreads, true);
    }
}

}  // namespace mpsgrad::metal_backend
