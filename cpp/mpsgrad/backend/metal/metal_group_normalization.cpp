// Encoding of the group normalization ops (kernels: metal/group_normalization.metal), which also
// serve instance normalization.
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

constexpr unsigned kThreads = 256;  // group_normalization.metal's kThreads

// Checks the images an op reads or writes (same size and channels as the source, every index
// countable in 32-bit ints) and the grouping; returns the values (pixels x channels) of the batch.
int64_t checkImages(const char* op, const GroupNormalizationParams& p, bool gradient) {
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    if (p.batch < 0) throwValueError(op, ": batch must be >= 0, got ", p.batch);
    auto same = [&](const ImageLayout& l, const char* name) {
        if (l.width != p.source.width || l.height != p.source.height || l.channels != p.source.channels)
            throwValueError(op, ": ", name, " and source differ in size or channel count");
    };
    same(p.destination, "destination");
    if (gradient) {
        checkLayout(op, "gradient", p.gradient);
        same(p.gradient, "gradient");
    }
    if (p.groups < 1 || p.source.channels % p.groups != 0)
        throwValueError(op, ": groups ", p.groups, " must be >= 1 and divide the ", p.source.channels, " channels");
    if (!(p.epsilon >= 0.0f)) throwValueError(op, ": epsilon must be >= 0");
    const int64_t values = int64_t(p.batch) * p.source.width * p.source.height * p.source.channels;
    if (values > INT32_MAX) throwValueError(op, ": too many values in one dispatch");
    return values;
}

}  // namespace

void encodeGroupNormalizationForward(MetalContext& ctx, CommandBuffer& cb, GroupNormalizationParams p,
                                     const BufferSlice& source, const Backend::GroupNormalizationVectors& v,
                                     const BufferSlice& destination) {
    const char* op = "group_normalization_forward";
    const int64_t values = checkImages(op, p, false);
    const int64_t C = p.source.channels;
    checkFloats(op, "gamma", v.gamma, C);
    checkFloats(op, "beta", v.beta, C);
    checkFloats(op, "statistics", v.statistics, 2 * int64_t(p.batch) * p.groups);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (values == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("group_normalization_forward", FunctionConstants()));
    dispatch.params(p).buffer(1, src).buffer(2, v.gamma).buffer(3, v.beta).buffer(4, v.statistics).buffer(5, dst);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(NS::UInteger(int64_t(p.batch) * p.groups), 1, 1), kThreads, true);
}

void encodeGroupNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, GroupNormalizationParams p,
                                      const BufferSlice& gradient, const BufferSlice& source,
                                      const Backend::GroupNormalizationVectors& v, const BufferSlice& destination) {
    const char* op = "group_normalization_gradient";
    const int64_t values = checkImages(op, p, true);
    const int64_t C = p.source.channels;
    checkFloats(op, "gamma", v.gamma, C);
    checkFloats(op, "statistics", v.statistics, 2 * int64_t(p.batch) * p.groups);
    checkFloats(op, "gamma gradient", v.gammaGradient, C);
    checkFloats(op, "beta gradient", v.betaGradient, C);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (values == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("group_normalization_gradient", FunctionConstants()));
    dispatch.params(p)
        .buffer(1, g)
        .buffer(2, src)
        .buffer(3, v.gamma)
        .buffer(4, v.statistics)
        .buffer(5, v.gammaGradient)
        .buffer(6, v.betaGradient)
        .buffer(7, dst);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(NS::UInteger(p.groups), 1, 1), kThreads, true);
}

}  // namespace mpsgrad::metal_backend
