// Encoding of the YOLO loss ops (kernels: metal/yolo_loss.metal). The bindings were checked by
// bindings::checkYolo* (backend/binding_checks.h) before.
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// Binds the four part images of `parts` at indices first..first+3 (their layouts moved to
// 16-byte boundaries like every image binding).
void bindParts(KernelDispatch& dispatch, const char* op, int first, const Backend::YoloParts& parts,
               ImageLayout layouts[4]) {
    const BufferSlice* slices[4] = {&parts.xy, &parts.wh, &parts.confidence, &parts.classes};
    for (int i = 0; i < 4; ++i) dispatch.buffer(first + i, bindImage(op, "part image", *slices[i], layouts[i], 1));
}

MTL::Size cellGrid(const ImageLayout& source) {
    return MTL::Size(NS::UInteger(int64_t(source.width) * source.height), 1, 1);
}

}  // namespace

void encodeYoloPrepare(MetalContext& ctx, CommandBuffer& cb, YoloPrepareParams p, const BufferSlice& source,
                       const BufferSlice& labels, const BufferSlice& anchors, const Backend::YoloParts& predictions,
                       const Backend::YoloParts& partLabels, const Backend::YoloParts& weights) {
    const char* op = "yolo_prepare";
    if (int64_t(p.source.width) * p.source.height == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("yolo_prepare", FunctionConstants{}));
    // The three part bindings of a part share one layout: bind each (alignment is per slice, so
    // each gets its own copy) and keep the predictions' copy; the images are allocated alike.
    ImageLayout predictionLayouts[4] = {p.xy, p.wh, p.confidence, p.classes};
    ImageLayout labelLayouts[4] = {p.xy, p.wh, p.confidence, p.classes};
    ImageLayout weightLayouts[4] = {p.xy, p.wh, p.confidence, p.classes};
    dispatch.buffer(1, bindImage(op, "source", source, p.source, 1));
    dispatch.buffer(2, bindImage(op, "labels", labels, p.labels, 1));
    checkFloats(op, "anchors", anchors, 2 * int64_t(p.anchors));
    dispatch.buffer(3, anchors);
    bindParts(dispatch, op, 4, predictions, predictionLayouts);
    bindParts(dispatch, op, 8, partLabels, labelLayouts);
    bindParts(dispatch, op, 12, weights, weightLayouts);
    for (int i = 0; i < 4; ++i)
        if (predictionLayouts[i].channelOffset != labelLayouts[i].channelOffset ||
            predictionLayouts[i].channelOffset != weightLayouts[i].channelOffset)
            throwValueError(op, ": the prediction, label and weight images of a part must be aligned alike");
    p.xy = predictionLayouts[0];
    p.wh = predictionLayouts[1];
    p.confidence = predictionLayouts[2];
    p.classes = predictionLayouts[3];
    dispatch.params(p);
    dispatch.encodeThreads(ctx, cb, cellGrid(p.source));
}

void encodeYoloFinish(MetalContext& ctx, CommandBuffer& cb, YoloFinishParams p, const BufferSlice& source,
                      const Backend::YoloParts& gradients, const Backend::YoloParts& losses,
                      const BufferSlice& destination, const BufferSlice& loss) {
    const char* op = "yolo_finish";
    if (int64_t(p.source.width) * p.source.height == 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get("yolo_finish", FunctionConstants{}));
    dispatch.buffer(1, bindImage(op, "source", source, p.source, 1));
    ImageLayout gradientLayouts[4] = {p.xy, p.wh, p.confidence, p.classes};
    bindParts(dispatch, op, 2, gradients, gradientLayouts);
    if (p.perElement) {
        ImageLayout lossLayouts[4] = {p.xy, p.wh, p.confidence, p.classes};
        bindParts(dispatch, op, 6, losses, lossLayouts);
        for (int i = 0; i < 4; ++i)
            if (lossLayouts[i].channelOffset != gradientLayouts[i].channelOffset)
                throwValueError(op, ": the gradient and loss images of a part must be aligned alike");
        dispatch.buffer(11, bindImage(op, "loss", loss, p.loss, 1));
    } else {
        const BufferSlice* slices[4] = {&losses.xy, &losses.wh, &losses.confidence, &losses.classes};
        for (int i = 0; i < 4; ++i) {
            checkFloats(op, "part loss", *slices[i], 1);
            dispatch.buffer(6 + i, *slices[i]);
        }
        checkFloats(op, "loss", loss, 1);
        dispatch.buffer(11, loss);
    }
    p.xy = gradientLayouts[0];
    p.wh = gradientLayouts[1];
    p.confidence = gradientLayouts[2];
    p.classes = gradientLayouts[3];
    dispatch.buffer(10, bindImage(op, "destination", destination, p.destination, 1));
    dispatch.params(p);
    dispatch.encodeThreads(ctx, cb, cellGrid(p.source));
}

}  // namespace mpsgrad::metal_backend
