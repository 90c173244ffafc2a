// Encoding of the cross-channel, spatial and local contrast normalization ops (kernels:
// metal/normalization.metal).
#include <cstdint>
#include <cstdlib>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// normalization.metal's function constant.
enum : unsigned { kNormalizationKindConstant = 0 };

constexpr int64_t kPositionLimit = int64_t(1) << 30;  // every tap position stays far inside int32

// The checks both ops share; false when the dispatch is empty (nothing to run).
bool checkParams(const char* op, const NormalizationParams& p) {
    if (p.kind < kNormalizationCrossChannel || p.kind > kNormalizationLocalContrast)
        throwValueError(op, ": unknown normalization kind ", p.kind);
    if (p.kernelWidth < 1 || p.kernelHeight < 1 || p.channelSize < 1)
        throwValueError(op, ": window sizes must be >= 1, got ", p.kernelWidth, " x ", p.kernelHeight, " x ",
                        p.channelSize);
    checkLayout(op, "destination", p.destination);
    checkLayout(op, "source", p.source);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    if (p.batch < 0) throwValueError(op, ": batch must be >= 0, got ", p.batch);
    if (int64_t(p.batch) * p.clipHeight > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
    if (p.source.channels != p.destination.channels)
        throwValueError(op, ": source has ", p.source.channels, " channels, destination ", p.destination.channels);
    const int64_t reachX = std::llabs(int64_t(p.centerX)) + p.clipWidth + p.kernelWidth;
    const int64_t reachY = std::llabs(int64_t(p.centerY)) + p.clipHeight + p.kernelHeight;
    if (reachX > kPositionLimit || reachY > kPositionLimit || p.channelSize > kPositionLimit)
        throwValueError(op, ": window positions out of range");
    return p.destination.channels > 0 && p.batch > 0 && p.clipWidth > 0 && p.clipHeight > 0;
}

FunctionConstants kindConstants(int kind) {
    FunctionConstants constants;
    constants.setInt(kNormalizationKindConstant, kind);
    return constants;
}

MTL::Size grid(const NormalizationParams& p) {
    return MTL::Size(NS::UInteger(p.destination.channels), NS::UInteger(p.clipWidth),
                     NS::UInteger(int64_t(p.batch) * p.clipHeight));
}

}  // namespace

void encodeNormalizationForward(MetalContext& ctx, CommandBuffer& cb, NormalizationParams p,
                                const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "normalization_forward";
    const bool work = checkParams(op, p);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (!work) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("normalization_forward", kindConstants(p.kind)));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, grid(p));
}

void encodeNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, NormalizationParams p,
                                 const BufferSlice& gradient, const BufferSlice& source,
                                 const BufferSlice& destination) {
    const char* op = "normalization_gradient";
    const bool work = checkParams(op, p);
    checkLayout(op, "gradient", p.gradient);
    if (p.gradient.channels != p.destination.channels)
        throwValueError(op, ": gradient has ", p.gradient.channels, " channels, destination ", p.destination.channels);
    checkRect(op, "gradient", p.gradient, p.gradientX, p.gradientY, p.gradientWidth, p.gradientHeight);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice x = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (!work) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("normalization_gradient", kindConstants(p.kind)));
    dispatch.params(p).buffer(1, g).buffer(2, x).buffer(3, dst);
    dispatch.encodeThreads(ctx, cb, grid(p));
}

}  // namespace mpsgrad::metal_backend
