// The per-cell YOLO loss steps of metal/yolo_loss_params.h, shared by the CPU backend and
// metal/yolo_loss.metal (docs/losses_and_optimizers.md "YOLO loss"). Per anchor a of a cell, with
// raw channels X Y W H C F and labels tx ty tw th tc tF:
//   prediction  x = sigmoid(X), y = sigmoid(Y), w = anchor_w exp(W), h = anchor_h exp(H)
//               (cell units, centre inside the cell)
//   object      the labelled anchor: tc > 0
//   IOU         of the predicted box with a labelled box of the same cell (0 without one);
//               own = with the anchor's own box, best = the largest over the cell's boxes
//   xy part     pred (x, y), label (tx, ty), weight weightXY (objects; else 0)
//   wh part     pred (W, H), label (log(tw / anchor_w), log(th / anchor_h)) (sizes floored at
//               1e-6), weight weightWH (objects; else 0)
//   confidence  pred C (confidenceRaw) or sigmoid(C); object: label rescore ? own : 1, weight
//               weightObject; else best > minIOU: label rescore ? best : 1, weight weightObject;
//               best < maxIOU: label 0, weight weightNoObject; else weight 0
//   classes     pred F, label tF, weight weightClass (objects; else 0)
// Unweighted elements get label 0. The IOU-based labels are constants of the gradient.
#pragma once

#include "yolo_loss_params.h"

#ifdef __METAL_VERSION__
#define MPSGRAD_YOLO_MATH metal
#define MPSGRAD_YOLO_DEVICE device
#else
#include <cmath>
#define MPSGRAD_YOLO_MATH std
#define MPSGRAD_YOLO_DEVICE
#endif

namespace mpsgrad {

// Float index of channel `channelOffset` of pixel (x, y) of image n (as image_indexing.h).
inline int yoloIndex(ImageLayout l, int n, int y, int x) {
    return n * l.imageStride + (y * l.width + x) * l.pixelStride + l.channelOffset;
}

inline float yoloSigmoid(float v) {
    // exp of a non-positive argument only: no overflow for large |v|.
    const float e = MPSGRAD_YOLO_MATH::exp(-MPSGRAD_YOLO_MATH::fabs(v));
    return v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

// IOU of two boxes given by centre and size; 0 when the union is empty.
inline float yoloIOU(float ax, float ay, float aw, float ah, float bx, float by, float bw, float bh) {
    const float iw = MPSGRAD_YOLO_MATH::fmin(ax + 0.5f * aw, bx + 0.5f * bw) -
                     MPSGRAD_YOLO_MATH::fmax(ax - 0.5f * aw, bx - 0.5f * bw);
    const float ih = MPSGRAD_YOLO_MATH::fmin(ay + 0.5f * ah, by + 0.5f * bh) -
                     MPSGRAD_YOLO_MATH::fmax(ay - 0.5f * ah, by - 0.5f * bh);
    const float inter = MPSGRAD_YOLO_MATH::fmax(iw, 0.0f) * MPSGRAD_YOLO_MATH::fmax(ih, 0.0f);
    const float uni = MPSGRAD_YOLO_MATH::fmax(aw, 0.0f) * MPSGRAD_YOLO_MATH::fmax(ah, 0.0f) +
                      MPSGRAD_YOLO_MATH::fmax(bw, 0.0f) * MPSGRAD_YOLO_MATH::fmax(bh, 0.0f) - inter;
    return uni > 0.0f ? inter / uni : 0.0f;
}

// Step 1 for cell (x, y) of image n. Per part: the prediction (P), label (L) and weight (W)
// images (plain pointers: MSL structs of device pointers are avoided).
inline void yoloPrepareCell(YoloPrepareParams p, int n, int y, int x, MPSGRAD_YOLO_DEVICE const float* source,
                            MPSGRAD_YOLO_DEVICE const float* labels, MPSGRAD_YOLO_DEVICE const float* anchors,
                            MPSGRAD_YOLO_DEVICE float* xyP, MPSGRAD_YOLO_DEVICE float* xyL,
                            MPSGRAD_YOLO_DEVICE float* xyW, MPSGRAD_YOLO_DEVICE float* whP,
                            MPSGRAD_YOLO_DEVICE float* whL, MPSGRAD_YOLO_DEVICE float* whW,
                            MPSGRAD_YOLO_DEVICE float* confP, MPSGRAD_YOLO_DEVICE float* confL,
                            MPSGRAD_YOLO_DEVICE float* confW, MPSGRAD_YOLO_DEVICE float* clsP,
                            MPSGRAD_YOLO_DEVICE float* clsL, MPSGRAD_YOLO_DEVICE float* clsW) {
    const int A = p.anchors, K = p.classCount, S = 5 + K;
    const int s0 = yoloIndex(p.source, n, y, x), t0 = yoloIndex(p.labels, n, y, x);
    for (int a = 0; a < A; ++a) {
        const int sa = s0 + a * S, ta = t0 + a * S;
        const float aw = anchors[2 * a], ah = anchors[2 * a + 1];
        const float px = yoloSigmoid(source[sa]), py = yoloSigmoid(source[sa + 1]);
        const float pw = aw * MPSGRAD_YOLO_MATH::exp(source[sa + 2]);
        const float ph = ah * MPSGRAD_YOLO_MATH::exp(source[sa + 3]);
        float own = 0.0f, best = 0.0f;
        for (int j = 0; j < A; ++j) {
            const int tj = t0 + j * S;
            if (!(labels[tj + 4] > 0.0f)) continue;
            const float iou = yoloIOU(px, py, pw, ph, labels[tj], labels[tj + 1], labels[tj + 2], labels[tj + 3]);
            best = MPSGRAD_YOLO_MATH::fmax(best, iou);
            if (j == a) own = iou;
        }
        const bool object = labels[ta + 4] > 0.0f;
        const int q = x * A + a;

        const int ixy = yoloIndex(p.xy, n, y, q);
        xyP[ixy] = px;
        xyP[ixy + 1] = py;
        xyL[ixy] = object ? labels[ta] : 0.0f;
        xyL[ixy + 1] = object ? labels[ta + 1] : 0.0f;
        xyW[ixy] = xyW[ixy + 1] = object ? p.weightXY : 0.0f;

        const int iwh = yoloIndex(p.wh, n, y, q);
        whP[iwh] = source[sa + 2];
        whP[iwh + 1] = source[sa + 3];
        whL[iwh] = object ? MPSGRAD_YOLO_MATH::log(MPSGRAD_YOLO_MATH::fmax(labels[ta + 2], 1e-6f) / aw) : 0.0f;
        whL[iwh + 1] = object ? MPSGRAD_YOLO_MATH::log(MPSGRAD_YOLO_MATH::fmax(labels[ta + 3], 1e-6f) / ah) : 0.0f;
        whW[iwh] = whW[iwh + 1] = object ? p.weightWH : 0.0f;

        const int ic = yoloIndex(p.confidence, n, y, q);
        confP[ic] = p.confidenceRaw != 0 ? source[sa + 4] : yoloSigmoid(source[sa + 4]);
        float target = 0.0f, weight = 0.0f;
        if (object) {
            target = p.rescore != 0 ? own : 1.0f;
            weight = p.weightObject;
        } else if (best > p.minIOUForObjectPresence) {
            target = p.rescore != 0 ? best : 1.0f;
            weight = p.weightObject;
        } else if (best < p.maxIOUForObjectAbsence) {
            weight = p.weightNoObject;
        }
        confL[ic] = target;
        confW[ic] = weight;

        const int ik = yoloIndex(p.classes, n, y, q);
        for (int c = 0; c < K; ++c) {
            clsP[ik + c] = source[sa + 5 + c];
            clsL[ik + c] = object ? labels[ta + 5 + c] : 0.0f;
            clsW[ik + c] = object ? p.weightClass : 0.0f;
        }
    }
}

// Step 3 for cell (x, y) of image n: dL/draw into the destination from the part gradients (G)
// and, per element, the part losses (L) into `loss`.
inline void yoloFinishCell(YoloFinishParams p, int n, int y, int x, MPSGRAD_YOLO_DEVICE const float* source,
                           MPSGRAD_YOLO_DEVICE const float* xyG, MPSGRAD_YOLO_DEVICE const float* whG,
                           MPSGRAD_YOLO_DEVICE const float* confG, MPSGRAD_YOLO_DEVICE const float* clsG,
                           MPSGRAD_YOLO_DEVICE const float* xyL, MPSGRAD_YOLO_DEVICE const float* whL,
                           MPSGRAD_YOLO_DEVICE const float* confL, MPSGRAD_YOLO_DEVICE const float* clsL,
                           MPSGRAD_YOLO_DEVICE float* destination, MPSGRAD_YOLO_DEVICE float* loss) {
    const int A = p.anchors, K = p.classCount, S = 5 + K;
    const int s0 = yoloIndex(p.source, n, y, x), d0 = yoloIndex(p.destination, n, y, x);
    const int l0 = p.perElement != 0 ? yoloIndex(p.loss, n, y, x) : 0;
    for (int a = 0; a < A; ++a) {
        const int sa = s0 + a * S, da = d0 + a * S, q = x * A + a;
        const int ixy = yoloIndex(p.xy, n, y, q), iwh = yoloIndex(p.wh, n, y, q);
        const int ic = yoloIndex(p.confidence, n, y, q), ik = yoloIndex(p.classes, n, y, q);
        const float sx = yoloSigmoid(source[sa]), sy = yoloSigmoid(source[sa + 1]);
        destination[da] = xyG[ixy] * sx * (1.0f - sx);
        destination[da + 1] = xyG[ixy + 1] * sy * (1.0f - sy);
        destination[da + 2] = whG[iwh];
        destination[da + 3] = whG[iwh + 1];
        const float sc = yoloSigmoid(source[sa + 4]);
        destination[da + 4] = p.confidenceRaw != 0 ? confG[ic]
                                                   : confG[ic] * sc * (1.0f - sc);
        for (int c = 0; c < K; ++c) destination[da + 5 + c] = clsG[ik + c];
        if (p.perElement == 0) continue;
        const int la = l0 + a * S;
        loss[la] = xyL[ixy];
        loss[la + 1] = xyL[ixy + 1];
        loss[la + 2] = whL[iwh];
        loss[la + 3] = whL[iwh + 1];
        loss[la + 4] = confL[ic];
        for (int c = 0; c < K; ++c) loss[la + 5 + c] = clsL[ik + c];
    }
}

// Step 3's reduced loss: the four part losses (one float each) added in a fixed order.
inline float yoloTotalLoss(MPSGRAD_YOLO_DEVICE const float* xyL, MPSGRAD_YOLO_DEVICE const float* whL,
                           MPSGRAD_YOLO_DEVICE const float* confL, MPSGRAD_YOLO_DEVICE const float* clsL) {
    return ((xyL[0] + whL[0]) + confL[0]) + clsL[0];
}

}  // namespace mpsgrad
