// Encoding of the loss ops (kernels: metal/loss.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

void checkSameSize(const char* op, const char* name, const ImageLayout& l, const ImageLayout& ref) {
    checkLayout(op, name, l);
    if (l.width != ref.width || l.height != ref.height || l.channels != ref.channels)
        throwValueError(op, ": ", name, " differs in size from the source");
}

int64_t pixelCount(const char* op, const ImageLayout& l, int batch) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    const int64_t pixels = int64_t(batch) * l.width * l.height;
    if (pixels > INT32_MAX / 2) throwValueError(op, ": too many pixels in one dispatch");
    return pixels;
}

}  // namespace

void encodeLossElements(MetalContext& ctx, CommandBuffer& cb, LossElementsParams p, const BufferSlice& source,
                        const BufferSlice& labels, const BufferSlice& weights, const BufferSlice& destination,
                        const BufferSlice& loss, const BufferSlice& partials) {
    const char* op = "loss_elements";
    if (p.lossType < 0 || p.lossType >= kLossTypeCount) throwValueError(op, ": unknown loss type ", p.lossType);
    checkLayout(op, "source", p.source);
    checkSameSize(op, "labels", p.labels, p.source);
    checkSameSize(op, "destination", p.destination, p.source);
    const bool perElement = p.reductionType == kReductionNone;
    if (p.hasWeights) checkSameSize(op, "weights", p.weights, p.source);
    if (perElement) checkSameSize(op, "loss", p.loss, p.source);
    const int64_t pixels = pixelCount(op, p.source, p.batch);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice lab = bindImage(op, "labels", labels, p.labels, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const BufferSlice wts = p.hasWeights ? bindImage(op, "weights", weights, p.weights, p.batch) : BufferSlice{};
    const BufferSlice lss = perElement ? bindImage(op, "loss", loss, p.loss, p.batch) : BufferSlice{};
    if (!perElement) {
        if (p.partialsOffset < 0) throwValueError(op, ": partialsOffset must be >= 0");
        checkFloats(op, "partials", partials, 2 * (int64_t(p.partialsOffset) + pixels));
    }
    if (pixels == 0 || p.source.channels == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("loss_elements", FunctionConstants{}));
    dispatch.params(p).buffer(1, src).buffer(2, lab).buffer(4, dst);
    // Unused bindings (empty slices) get the backend's placeholder buffer: every binding must be set.
    dispatch.buffer(3, wts).buffer(5, lss).buffer(6, perElement ? BufferSlice{} : partials);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(pixels), 1, 1));
}

void encodeLossReduce(MetalContext& ctx, CommandBuffer& cb, const LossReduceParams& p, const BufferSlice& partials,
                      const BufferSlice& results) {
    const char* op = "loss_reduce";
    if (p.images < 0 || p.pixelsPerImage < 0) throwValueError(op, ": negative sizes");
    if (int64_t(p.images) * p.pixelsPerImage > INT32_MAX / 2) throwValueError(op, ": too many pixels");
    if (p.images == 0) {
        metalCommandBuffer(cb);
        return;
    }
    checkFloats(op, "partials", partials, 2 * int64_t(p.images) * p.pixelsPerImage);
    checkFloats(op, "results", results, 2 * int64_t(p.images));
    KernelDispatch dispatch(ctx.pipelines->get("loss_reduce", FunctionConstants{}));
    dispatch.params(p).buffer(1, partials).buffer(2, results);
    dispatch.encodeThreads(ctx, cb, MTL::Size(p.acrossBatch ? 1 : NS::UInteger(p.images), 1, 1));
}

void encodeLossScaleGradient(MetalContext& ctx, CommandBuffer& cb, LossScaleParams p, const BufferSlice& results,
                             const BufferSlice& destination) {
    const char* op = "loss_scale_gradient";
    if (p.resultIndex < 0) throwValueError(op, ": resultIndex must be >= 0");
    checkLayout(op, "destination", p.destination);
    const int64_t pixels = pixelCount(op, p.destination, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (pixels == 0) {
        metalCommandBuffer(cb);
        return;
    }
    checkFloats(op, "results", results, 2 * (int64_t(p.resultIndex) + p.batch));
    KernelDispatch dispatch(ctx.pipelines->get("loss_scale_gradient", FunctionConstants{}));
    dispatch.params(p).buffer(1, results).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(pixels), 1, 1));
}

}  // namespace mpsgrad::metal_backend
