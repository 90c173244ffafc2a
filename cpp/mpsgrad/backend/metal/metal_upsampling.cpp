// Encoding of the upsampling family's ops (kernels: metal/upsampling.metal).
#include <cstdint>
#include <cstdlib>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// upsampling.metal's function constants.
enum : unsigned {
    kUpsamplingModeConstant = 0,
    kUpsamplingAlignedSource = 1,
    kUpsamplingAlignedGradient = 2,
    kUpsamplingAlignedDestination = 3,
};

void checkSampling(const char* op, int32_t mode, int32_t coordinateMode, int32_t scaleX, int32_t scaleY,
                   int32_t inputWidth, int32_t inputHeight) {
    if (mode != kUpsamplingNearest && mode != kUpsamplingBilinear) throwValueError(op, ": unknown upsampling mode ", mode);
    if (coordinateMode < kUpsamplingHalfPixel || coordinateMode > kUpsamplingAlignCorners)
        throwValueError(op, ": unknown coordinate mode ", coordinateMode);
    if (scaleX < 1 || scaleY < 1) throwValueError(op, ": scale factors must be >= 1, got ", scaleX, ", ", scaleY);
    if (inputWidth < 1 || inputHeight < 1) throwValueError(op, ": the input is empty");
    // The sampling arithmetic multiplies input and output sizes in 32 bits.
    const int64_t limit = int64_t(1) << 31;
    if (int64_t(inputWidth) * inputWidth * scaleX >= limit || int64_t(inputHeight) * inputHeight * scaleY >= limit)
        throwValueError(op, ": input too large for its scale factor");
}

void checkPixels(const char* op, int64_t batch, int64_t height) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    if (batch * height > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
}

bool alignedQuads(const ImageLayout& l) { return l.channels % 4 == 0 && quadAligned(l); }

}  // namespace

void encodeUpsamplingForward(MetalContext& ctx, CommandBuffer& cb, UpsamplingParams p, const BufferSlice& source,
                             const BufferSlice& destination) {
    const char* op = "upsampling_forward";
    const int N = p.destination.channels;
    checkSampling(op, p.mode, p.coordinateMode, p.scaleX, p.scaleY, p.inputWidth, p.inputHeight);
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkRect(op, "input", p.source, p.sourceX, p.sourceY, p.inputWidth, p.inputHeight);
    checkPixels(op, p.batch, p.clipHeight);
    if (p.outputX < 0 || p.outputY < 0 || int64_t(p.outputX) + p.clipWidth > int64_t(p.inputWidth) * p.scaleX ||
        int64_t(p.outputY) + p.clipHeight > int64_t(p.inputHeight) * p.scaleY)
        throwValueError(op, ": the clip reaches beyond the upsampled image");
    if (p.source.channels != N) throwValueError(op, ": source has ", p.source.channels, " channels, destination ", N);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (N == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }
    FunctionConstants constants;
    constants.setInt(kUpsamplingModeConstant, p.mode)
        .setBool(kUpsamplingAlignedSource, alignedQuads(p.source))
        .setBool(kUpsamplingAlignedGradient, false)
        .setBool(kUpsamplingAlignedDestination, alignedQuads(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("upsampling_forward", constants));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(N, 4), NS::UInteger(p.clipWidth),
                                              NS::UInteger(int64_t(p.batch) * p.clipHeight)));
}

void encodeUpsamplingGradient(MetalContext& ctx, CommandBuffer& cb, UpsamplingGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& destination) {
    const char* op = "upsampling_gradient";
    const int N = p.destination.channels;
    checkSampling(op, p.mode, p.coordinateMode, p.scaleX, p.scaleY, p.inputWidth, p.inputHeight);
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkPixels(op, p.batch, p.clipHeight);
    const int64_t limit = int64_t(1) << 30;
    if (std::llabs(int64_t(p.gradientX)) > limit || std::llabs(int64_t(p.gradientY)) > limit ||
        std::llabs(int64_t(p.inputX)) > limit || std::llabs(int64_t(p.inputY)) > limit)
        throwValueError(op, ": offsets out of range");
    if (p.gradient.channels != N)
        throwValueError(op, ": gradient has ", p.gradient.channels, " channels, destination ", N);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (N == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }
    FunctionConstants constants;
    constants.setInt(kUpsamplingModeConstant, p.mode)
        .setBool(kUpsamplingAlignedSource, false)
        .setBool(kUpsamplingAlignedGradient, alignedQuads(p.gradient))
        .setBool(kUpsamplingAlignedDestination, alignedQuads(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("upsampling_gradient", constants));
    dispatch.params(p).buffer(1, g).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(N, 4), NS::UInteger(p.clipWidth),
                                              NS::UInteger(int64_t(p.batch) * p.clipHeight)));
}

}  // namespace mpsgrad::metal_backend
