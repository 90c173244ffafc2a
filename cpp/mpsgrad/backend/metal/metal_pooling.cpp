// Encoding of the pooling family's ops (kernels: metal/pooling.metal).
#include <cstdint>
#include <cstdlib>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// pooling.metal's function constants.
enum : unsigned {
    kPoolingModeConstant = 0,
    kPoolingAlignedSource = 1,
    kPoolingAlignedGradient = 2,
    kPoolingAlignedDestination = 3,
};

constexpr int64_t kPositionLimit = int64_t(1) << 30;  // every tap position stays far inside int32

void checkWindow(const char* op, const PoolingWindow& w, int64_t windowsX, int64_t windowsY) {
    if (w.mode < kPoolingMax || w.mode > kPoolingL2) throwValueError(op, ": unknown pooling mode ", w.mode);
    if (w.kernelWidth < 1 || w.kernelHeight < 1)
        throwValueError(op, ": kernel sizes must be >= 1, got ", w.kernelWidth, " x ", w.kernelHeight);
    if (w.strideX < 1 || w.strideY < 1) throwValueError(op, ": strides must be >= 1, got ", w.strideX, ", ", w.strideY);
    if (w.dilationX < 1 || w.dilationY < 1)
        throwValueError(op, ": dilation rates must be >= 1, got ", w.dilationX, ", ", w.dilationY);
    if (w.edgeMode != kEdgeZero && w.edgeMode != kEdgeClamp) throwValueError(op, ": unknown edge mode ", w.edgeMode);
    if (w.countMode != kPoolingCountAll && w.countMode != kPoolingCountInBand)
        throwValueError(op, ": unknown count mode ", w.countMode);
    if (w.zeroPadX < 0 || w.zeroPadY < 0 || w.zeroPadX > kPositionLimit || w.zeroPadY > kPositionLimit)
        throwValueError(op, ": zero pad sizes out of range");
    const int64_t reachX = int64_t(w.windowLeftX) + int64_t(w.strideX) * windowsX + int64_t(w.kernelWidth) * w.dilationX;
    const int64_t reachY = int64_t(w.windowTopY) + int64_t(w.strideY) * windowsY + int64_t(w.kernelHeight) * w.dilationY;
    if (std::llabs(int64_t(w.windowLeftX)) > kPositionLimit || std::llabs(int64_t(w.windowTopY)) > kPositionLimit ||
        std::llabs(reachX) > kPositionLimit || std::llabs(reachY) > kPositionLimit)
        throwValueError(op, ": window positions out of range");
}

void checkPixels(const char* op, int64_t batch, int64_t width, int64_t height) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    if (batch * height > INT32_MAX || width > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
}

bool alignedQuads(const ImageLayout& l) { return l.channels % 4 == 0 && quadAligned(l); }

FunctionConstants poolingConstants(int mode) {
    FunctionConstants constants;
    constants.setInt(kPoolingModeConstant, mode);
    return constants;
}

}  // namespace

void encodePoolingForward(MetalContext& ctx, CommandBuffer& cb, PoolingParams p, const BufferSlice& source,
                          const BufferSlice& destination) {
    const char* op = "pooling_forward";
    const int N = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkPixels(op, p.batch, p.clipWidth, p.clipHeight);
    checkWindow(op, p.window, p.clipWidth, p.clipHeight);
    if (p.source.channels != N) throwValueError(op, ": source has ", p.source.channels, " channels, destination ", N);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (N == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }
    if (p.source.width <= 0 || p.source.height <= 0) throwValueError(op, ": the source image is empty");
    FunctionConstants constants = poolingConstants(p.window.mode);
    constants.setBool(kPoolingAlignedSource, alignedQuads(p.source))
        .setBool(kPoolingAlignedGradient, false)
        .setBool(kPoolingAlignedDestination, alignedQuads(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("pooling_forward", constants));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(N, 4), NS::UInteger(p.clipWidth),
                                              NS::UInteger(int64_t(p.batch) * p.clipHeight)));
}

void encodePoolingGradient(MetalContext& ctx, CommandBuffer& cb, PoolingGradientParams p, const BufferSlice& gradient,
                           const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "pooling_gradient";
    const int N = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "source", p.source);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkRect(op, "gradient", p.gradient, p.gradientX, p.gradientY, p.gradientWidth, p.gradientHeight);
    checkPixels(op, p.batch, p.clipWidth, p.clipHeight);
    checkWindow(op, p.window, p.gradientWidth, p.gradientHeight);
    const bool readsSource = p.window.mode != kPoolingAverage;
    if (p.gradient.channels != N || (readsSource && p.source.channels != N))
        throwValueError(op, ": gradient (", p.gradient.channels, "), source (", p.source.channels,
                        ") and destination (", N, ") channel counts differ");
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    // Average pooling needs only the source's size: its binding is never read.
    const BufferSlice x = readsSource ? bindImage(op, "source", source, p.source, p.batch) : BufferSlice{};
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (N == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }
    if (p.source.width <= 0 || p.source.height <= 0) throwValueError(op, ": the source image is empty");
    FunctionConstants constants = poolingConstants(p.window.mode);
    constants.setBool(kPoolingAlignedSource, readsSource && alignedQuads(p.source))
        .setBool(kPoolingAlignedGradient, alignedQuads(p.gradient))
        .setBool(kPoolingAlignedDestination, alignedQuads(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("pooling_gradient", constants));
    dispatch.params(p).buffer(1, g).buffer(2, x).buffer(3, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(N, 4), NS::UInteger(p.clipWidth),
                                              NS::UInteger(int64_t(p.batch) * p.clipHeight)));
}

}  // namespace mpsgrad::metal_backend
