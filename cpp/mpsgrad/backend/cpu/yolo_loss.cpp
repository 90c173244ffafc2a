// CPU backend: the YOLO loss ops (metal/yolo_loss_params.h; formulas in metal/yolo_loss_math.h,
// shared with metal/yolo_loss.metal). Grid cells are independent and split across threads; the
// bindings were checked by bindings::checkYolo* before.
#include <cstdint>

#include "../../../../metal/yolo_loss_math.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {

void yoloPrepare(const YoloPrepareParams& p, const float* source, const float* labels, const float* anchors,
                 const YoloPartFloats& predictions, const YoloPartFloats& partLabels, const YoloPartFloats& weights) {
    const int64_t W = p.source.width, cells = W * p.source.height;
    parallelFor(cells, 64, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            yoloPrepareCell(p, 0, int(i / W), int(i % W), source, labels, anchors, predictions.xy, partLabels.xy,
                            weights.xy, predictions.wh, partLabels.wh, weights.wh, predictions.confidence,
                            partLabels.confidence, weights.confidence, predictions.classes, partLabels.classes,
                            weights.classes);
    });
}

void yoloFinish(const YoloFinishParams& p, const float* source, const YoloPartFloats& gradients,
                const YoloPartFloats& losses, float* destination, float* loss) {
    const int64_t W = p.source.width, cells = W * p.source.height;
    parallelFor(cells, 64, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            yoloFinishCell(p, 0, int(i / W), int(i % W), source, gradients.xy, gradients.wh, gradients.confidence,
                           gradients.classes, losses.xy, losses.wh, losses.confidence, losses.classes, destination,
                           loss);
    });
    if (p.perElement == 0) loss[0] = yoloTotalLoss(losses.xy, losses.wh, losses.confidence, losses.classes);
}

}  // namespace mpsgrad::cpu
