// Params of the YOLO loss ops (MPSCNNYOLOLoss, spec §2.12; formulas in metal/yolo_loss_math.h and
// docs/losses_and_optimizers.md "YOLO loss"), shared by C++ and Metal.
//
// The YOLO loss runs in three steps, one grid cell per thread in the two YOLO ops:
//  1. yolo_prepare: from the raw predictions and the labels (W x H x A * (5 + K) channels, per
//     anchor X Y W H C F0..F(K-1)) writes, for each of the four parts (xy, wh, confidence,
//     classes), a prediction, a label and a weight image of (W * A) x H pixels: anchor a of cell
//     (x, y) is part pixel (x * A + a, y), with 2, 2, 1 and K channels.
//  2. the four internal CNNLoss objects run on those images (loss_elements / loss_reduce ops).
//  3. yolo_finish: chains the four part gradients back to the raw channels into the destination
//     and writes the loss: per element into the source-sized loss image (reduction None), or
//     the sum of the four part losses into the 1x1x1 loss image.
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct YoloPrepareParams {
    ImageLayout source;      // raw predictions, W x H x A * (5 + K)
    ImageLayout labels;      // same size
    ImageLayout xy;          // (W * A) x H x 2; the xy prediction, label and weight bindings share it
    ImageLayout wh;          // (W * A) x H x 2
    ImageLayout confidence;  // (W * A) x H x 1
    ImageLayout classes;     // (W * A) x H x K
    int32_t anchors;         // A; the anchor binding holds 2 * A floats (width, height)
    int32_t classCount;      // K >= 1
    int32_t rescore;         // 1: an object's confidence target is its IOU, else 1
    int32_t confidenceRaw;   // 1: the confidence loss gets the raw C (SigmoidCE applies the sigmoid)
    float weightXY;          // scaleXY * the xy descriptor's weight
    float weightWH;          // scaleWH * the wh descriptor's weight
    float weightObject;      // scaleObject * the confidence descriptor's weight
    float weightNoObject;    // scaleNoObject * the confidence descriptor's weight
    float weightClass;       // scaleClass * the classes descriptor's weight
    float minIOUForObjectPresence;
    float maxIOUForObjectAbsence;
};

struct YoloFinishParams {
    ImageLayout source;       // raw predictions (for the sigmoid derivatives)
    ImageLayout destination;  // dL/d(raw predictions), same size
    ImageLayout loss;         // per-element losses, same size (perElement only)
    ImageLayout xy;           // part layouts of the part gradients and (perElement) part losses
    ImageLayout wh;
    ImageLayout confidence;
    ImageLayout classes;
    int32_t anchors;
    int32_t classCount;
    int32_t confidenceRaw;
    int32_t perElement;       // 1: reduction None; else the four part losses are 1 float each
};

}  // namespace mpsgrad
