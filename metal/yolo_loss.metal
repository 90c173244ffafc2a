// The YOLO loss kernels of the Metal backend (metal/yolo_loss_params.h; formulas in
// metal/yolo_loss_math.h, shared with the CPU backend). Host side:
// cpp/mpsgrad/backend/metal/metal_yolo_loss.cpp. A thread per grid cell (its anchors in
// increasing order); no threadgroup memory. The part losses run between the two kernels
// through the loss kernels of metal/loss.metal.
#include <metal_stdlib>

#include "yolo_loss_math.h"
#include "yolo_loss_params.h"

using namespace metal;
using namespace mpsgrad;

// Grid: width * height threads. Bindings: 0 params, 1 source, 2 labels, 3 anchors, 4-7 part
// predictions (xy, wh, confidence, classes), 8-11 part labels, 12-15 part weights.
kernel void yolo_prepare(constant YoloPrepareParams& p [[buffer(0)]],
                         device const float* source [[buffer(1)]],
                         device const float* labels [[buffer(2)]],
                         device const float* anchors [[buffer(3)]],
                         device float* xyP [[buffer(4)]],
                         device float* whP [[buffer(5)]],
                         device float* confP [[buffer(6)]],
                         device float* clsP [[buffer(7)]],
                         device float* xyL [[buffer(8)]],
                         device float* whL [[buffer(9)]],
                         device float* confL [[buffer(10)]],
                         device float* clsL [[buffer(11)]],
                         device float* xyW [[buffer(12)]],
                         device float* whW [[buffer(13)]],
                         device float* confW [[buffer(14)]],
                         device float* clsW [[buffer(15)]],
                         uint gid [[thread_position_in_grid]]) {
    const YoloPrepareParams q = p;
    const int i = int(gid);
    if (i >= q.source.width * q.source.height) return;
    const int y = i / q.source.width, x = i - y * q.source.width;
    yoloPrepareCell(q, 0, y, x, source, labels, anchors, xyP, xyL, xyW, whP, whL, whW, confP, confL, confW, clsP,
                    clsL, clsW);
}

// Grid: width * height threads. Bindings: 0 params, 1 source, 2-5 part gradients (xy, wh,
// confidence, classes), 6-9 part losses, 10 destination, 11 loss. Reduced losses: thread 0 also
// writes the sum of the four part losses.
kernel void yolo_finish(constant YoloFinishParams& p [[buffer(0)]],
                        device const float* source [[buffer(1)]],
                        device const float* xyG [[buffer(2)]],
                        device const float* whG [[buffer(3)]],
                        device const float* confG [[buffer(4)]],
                        device const float* clsG [[buffer(5)]],
                        device const float* xyL [[buffer(6)]],
                        device const float* whL [[buffer(7)]],
                        device const float* confL [[buffer(8)]],
                        device const float* clsL [[buffer(9)]],
                        device float* destination [[buffer(10)]],
                        device float* loss [[buffer(11)]],
                        uint gid [[thread_position_in_grid]]) {
    const YoloFinishParams q = p;
    const int i = int(gid);
    if (i >= q.source.width * q.source.height) return;
    const int y = i / q.source.width, x = i - y * q.source.width;
    yoloFinishCell(q, 0, y, x, source, xyG, whG, confG, clsG, xyL, whL, confL, clsL, destination, loss);
    if (q.perElement == 0 && i == 0) loss[0] = yoloTotalLoss(xyL, whL, confL, clsL);
}
