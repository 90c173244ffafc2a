// Encoding of the batch normalization family's ops (kernels: metal/batch_normalization.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

constexpr unsigned kReduceThreads = 256;  // batch_normalization.metal's kReduceThreads

// Checks the images an op reads or writes (same size and channels as the source, every index
// countable in 32-bit ints) and the neuron; returns the elements (pixels x channels) of the batch.
int64_t checkImages(const char* op, const BatchNormalizationParams& p, bool gradient, bool destination) {
    checkLayout(op, "source", p.source);
    if (p.batch < 0) throwValueError(op, ": batch must be >= 0, got ", p.batch);
    auto same = [&](const ImageLayout& l, const char* name) {
        checkLayout(op, name, l);
        if (l.width != p.source.width || l.height != p.source.height || l.channels != p.source.channels)
            throwValueError(op, ": ", name, " and source differ in size or channel count");
    };
    if (gradient) same(p.gradient, "gradient");
    if (destination) same(p.destination, "destination");
    if (p.neuron.type < 0 || p.neuron.type >= kNeuronCount) throwValueError(op, ": unknown neuron type ", p.neuron.type);
    if (p.neuron.type == kNeuronPReLU && !p.neuron.hasChannelData)
        throwValueError(op, ": a PReLU neuron needs its per-channel data");
    if (!(p.epsilon >= 0.0f)) throwValueError(op, ": epsilon must be >= 0");
    const int64_t elements = int64_t(p.batch) * p.source.width * p.source.height * p.source.channels;
    if (elements > INT32_MAX) throwValueError(op, ": too many elements in one dispatch");
    return elements;
}

// The per-channel vectors the op reads or writes: C floats each.
void checkVectors(const char* op, const BatchNormalizationParams& p, const Backend::BatchNormalizationVectors& v,
                  bool affine, bool statistics, bool gradients) {
    const int64_t C = p.source.channels;
    if (affine) {
        checkFloats(op, "gamma", v.gamma, C);
        checkFloats(op, "beta", v.beta, C);
        if (p.neuron.hasChannelData) checkFloats(op, "neuron data", v.neuronData, C);
    }
    if (statistics) {
        checkFloats(op, "mean", v.mean, C);
        checkFloats(op, "variance", v.variance, C);
    }
    if (gradients) {
        checkFloats(op, "gamma gradient", v.gammaGradient, C);
        checkFloats(op, "beta gradient", v.betaGradient, C);
    }
}

BufferSlice neuronDataOf(const BatchNormalizationParams& p, const Backend::BatchNormalizationVectors& v) {
    return p.neuron.hasChannelData ? v.neuronData : BufferSlice{};
}

}  // namespace

void encodeBatchNormalizationStatistics(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                        const BufferSlice& source, const Backend::BatchNormalizationVectors& v) {
    const char* op = "batch_normalization_statistics";
    const int64_t elements = checkImages(op, p, false, false);
    checkVectors(op, p, v, false, true, false);
    if (p.previousCount < 0) throwValueError(op, ": previousCount must be >= 0");
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    if (elements == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("batch_normalization_statistics", FunctionConstants()));
    dispatch.params(p).buffer(1, src).buffer(2, v.mean).buffer(3, v.variance);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(NS::UInteger(p.source.channels), 1, 1), kReduceThreads, true);
}

void encodeBatchNormalizationForward(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                     const BufferSlice& source, const Backend::BatchNormalizationVectors& v,
                                     const BufferSlice& destination) {
    const char* op = "batch_normalization_forward";
    const int64_t elements = checkImages(op, p, false, true);
    checkVectors(op, p, v, true, true, false);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (elements == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("batch_normalization_forward", FunctionConstants()));
    dispatch.params(p)
        .buffer(1, src)
        .buffer(2, v.gamma)
        .buffer(3, v.beta)
        .buffer(4, v.mean)
        .buffer(5, v.variance)
        .buffer(6, neuronDataOf(p, v))
        .buffer(7, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(elements), 1, 1));
}

void encodeBatchNormalizationStatisticsGradient(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                                const BufferSlice& gradient, const BufferSlice& source,
                                                const Backend::BatchNormalizationVectors& v) {
    const char* op = "batch_normalization_statistics_gradient";
    const int64_t elements = checkImages(op, p, true, false);
    checkVectors(op, p, v, true, true, true);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    if (elements == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("batch_normalization_statistics_gradient", FunctionConstants()));
    dispatch.params(p)
        .buffer(1, g)
        .buffer(2, src)
        .buffer(3, v.gamma)
        .buffer(4, v.beta)
        .buffer(5, v.mean)
        .buffer(6, v.variance)
        .buffer(7, neuronDataOf(p, v))
        .buffer(8, v.gammaGradient)
        .buffer(9, v.betaGradient);
    dispatch.encodeThreadgroups(ctx, cb, MTL::Size(NS::UInteger(p.source.channels), 1, 1), kReduceThreads, true);
}

void encodeBatchNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                      const BufferSlice& gradient, const BufferSlice& source,
                                      const Backend::BatchNormalizationVectors& v, const BufferSlice& destination) {
    const char* op = "batch_normalization_gradient";
    const int64_t elements = checkImages(op, p, true, true);
    checkVectors(op, p, v, true, true, p.trainingStatistics != 0);
    if (p.trainingStatistics && p.totalCount <= 0) throwValueError(op, ": totalCount must be > 0");
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (elements == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("batch_normalization_gradient", FunctionConstants()));
    dispatch.params(p)
        .buffer(1, g)
        .buffer(2, src)
        .buffer(3, v.gamma)
        .buffer(4, v.beta)
        .buffer(5, v.mean)
        .buffer(6, v.variance)
        .buffer(7, neuronDataOf(p, v))
        .buffer(8, p.trainingStatistics ? v.gammaGradient : BufferSlice{})
        .buffer(9, p.trainingStatistics ? v.betaGradient : BufferSlice{})
        .buffer(10, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(elements), 1, 1));
}

}  // namespace mpsgrad::metal_backend
