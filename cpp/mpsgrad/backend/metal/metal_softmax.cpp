// Encoding of the softmax family's ops (kernels: metal/softmax.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// softmax.metal's function constants and sizes.
enum : unsigned {
    kSoftmaxLog = 0,
    kSoftmaxAlignedSource = 1,
    kSoftmaxAlignedGradient = 2,
    kSoftmaxAlignedDestination = 3,
    kSoftmaxAlignedOutput = 4,
};
constexpr int kPixelsPerGroup = 4;  // softmax.metal's kPixelsPerGroup (simdgroups per threadgroup)
constexpr int kSimdWidth = 32;
// Pixels of more channels than this get a simdgroup each; fewer, a thread each.
constexpr int kThreadChannels = 16;

void checkClip(const char* op, const ImageLayout& destination, int x, int y, int width, int height, int batch) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    checkRect(op, "destination clip", destination, x, y, width, height);
    if (int64_t(batch) * width * height > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
}

bool edgeOk(int32_t mode) { return mode == kEdgeZero || mode == kEdgeClamp; }

bool alignedQuads(const ImageLayout& l, int channels) { return channels % 4 == 0 && quadAligned(l); }

// Encodes a thread per clip pixel, or (simd) a simdgroup per clip pixel.
void encodePixels(MetalContext& ctx, CommandBuffer& cb, KernelDispatch& dispatch, bool simd, int64_t pixels) {
    if (simd)
        dispatch.encodeThreadgroups(ctx, cb, MTL::Size(ceilDiv(pixels, kPixelsPerGroup), 1, 1),
                                    kPixelsPerGroup * kSimdWidth, true);
    else
        dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(pixels), 1, 1));
}

}  // namespace

void encodeSoftmaxForward(MetalContext& ctx, CommandBuffer& cb, SoftmaxParams p, const BufferSlice& source,
                          const BufferSlice& destination) {
    const char* op = "softmax_forward";
    const int N = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.source.channels != N) throwValueError(op, ": source has ", p.source.channels, " channels, destination ", N);
    if (!edgeOk(p.edgeMode)) throwValueError(op, ": unknown edge mode ", p.edgeMode);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t pixels = int64_t(p.batch) * p.clipWidth * p.clipHeight;
    if (N == 0 || pixels == 0) {
        metalCommandBuffer(cb);
        return;
    }
    const bool simd = N > kThreadChannels;
    FunctionConstants constants;
    constants.setBool(kSoftmaxLog, p.logSoftmax != 0)
        .setBool(kSoftmaxAlignedSource, alignedQuads(p.source, N))
        .setBool(kSoftmaxAlignedDestination, alignedQuads(p.destination, N));
    KernelDispatch dispatch(ctx.pipelines->get(simd ? "softmax_forward_simd" : "softmax_forward", constants));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    encodePixels(ctx, cb, dispatch, simd, pixels);
}

void encodeSoftmaxGradient(MetalContext& ctx, CommandBuffer& cb, SoftmaxGradientParams p, const BufferSlice& gradient,
                           const BufferSlice& output, const BufferSlice& destination) {
    const char* op = "softmax_gradient";
    const int N = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.gradient.channels != N || p.output.channels != N)
        throwValueError(op, ": gradient (", p.gradient.channels, "), output (", p.output.channels,
                        ") and destination (", N, ") channel counts differ");
    if (!edgeOk(p.gradientEdgeMode) || !edgeOk(p.outputEdgeMode)) throwValueError(op, ": unknown edge mode");
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice y = bindImage(op, "output", output, p.output, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t pixels = int64_t(p.batch) * p.clipWidth * p.clipHeight;
    if (N == 0 || pixels == 0) {
        metalCommandBuffer(cb);
        return;
    }
    const bool simd = N > kThreadChannels;
    FunctionConstants constants;
    constants.setBool(kSoftmaxLog, p.logSoftmax != 0)
        .setBool(kSoftmaxAlignedGradient, alignedQuads(p.gradient, N))
        .setBool(kSoftmaxAlignedOutput, alignedQuads(p.output, N))
        .setBool(kSoftmaxAlignedDestination, alignedQuads(p.destination, N));
    KernelDispatch dispatch(ctx.pipelines->get(simd ? "softmax_gradient_simd" : "softmax_gradient", constants));
    dispatch.params(p).buffer(1, g).buffer(2, y).buffer(3, dst);
    encodePixels(ctx, cb, dispatch, simd, pixels);
}

}  // namespace mpsgrad::metal_backend
