// The per-pixel loss formulas of spec §2.12 with mpsgrad's corrections, shared by the CPU
// backend and metal/loss.metal (docs/losses_and_optimizers.md):
//   MAE |d|, sign(d) (0 at d = 0)          MSE d^2, 2d                 (d = y - t)
//   SoftMaxCE  l_c = -t_c log softmax(y)_c, dl/dy_k = softmax_k * sum_c w_c t_c - w_k t_k (exact)
//   SigmoidCE  max(y,0) - y t + log(1 + e^-|y|), sigmoid(y) - t
//   CategoricalCE -t log y, -t / y (0 where t = 0)
//   Hinge      t' = 2t - 1: max(1 - t' y, 0), -t' where 1 - t' y > 0
//   Huber      |d| <= delta: d^2 / 2, d; else delta (|d| - delta / 2), delta sign(d)
//   Cosine     per pixel w0 (1 - sum_c y_c t_c), -w0 t_c   (w0: channel 0's weight)
//   Log        -t log(y + eps) - (1 - t) log(1 - y + eps), -t / (y + eps) + (1 - t) / (1 - y + eps)
//   KL         t (log t - y) (0 where t = 0), -t
// Labels are smoothed first (SoftMaxCE: t (1 - ls) + ls / numberOfClasses, SigmoidCE:
// t (1 - ls) + ls / 2, only when ls > 0). Every loss and gradient is multiplied by its weight.
// With labelGradients (NNLossGradient.computeLabelGradients) the gradient is dl/dt instead:
//   MAE, MSE, Huber -dl/dy (functions of y - t)   SigmoidCE -y   CategoricalCE -log y
//   Hinge -2y where 1 - t' y > 0   Log -log(y + eps) + log(1 - y + eps)
//   KL log t + 1 - y (0 where t = 0, where the true derivative is -infinity)
//   SoftMaxCE -w_c (y_c - logsumexp(y))   Cosine -w0 y_c
// times the smoothing's dt'/dt = 1 - ls for SoftMaxCE and SigmoidCE (when ls > 0).
// Channels of a pixel are visited in increasing order (fixed-order sums).
#pragma once

#include "loss_params.h"

#ifdef __METAL_VERSION__
#define MPSGRAD_LOSS_MATH metal
#define MPSGRAD_LOSS_DEVICE device
#define MPSGRAD_LOSS_THREAD thread
#else
#include <cmath>
#define MPSGRAD_LOSS_MATH std
#define MPSGRAD_LOSS_DEVICE
#define MPSGRAD_LOSS_THREAD
#endif

namespace mpsgrad {

inline float lossLabel(LossElementsParams p, float t) {
    if (p.labelSmoothing <= 0.0f) return t;
    if (p.lossType == kLossSoftMaxCrossEntropy)
        return t * (1.0f - p.labelSmoothing) + p.labelSmoothing / p.numberOfClasses;
    if (p.lossType == kLossSigmoidCrossEntropy) return t * (1.0f - p.labelSmoothing) + 0.5f * p.labelSmoothing;
    return t;
}

// Loss and derivative of one element of the element-wise types (everything but SoftMaxCE and Cosine).
inline float lossElement(LossElementsParams p, float y, float t, MPSGRAD_LOSS_THREAD float& g) {
    const float d = y - t;
    switch (p.lossType) {
        case kLossMeanAbsoluteError:
            g = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
            return MPSGRAD_LOSS_MATH::fabs(d);
        case kLossMeanSquaredError:
            g = 2.0f * d;
            return d * d;
        case kLossSigmoidCrossEntropy: {
            const float e = MPSGRAD_LOSS_MATH::exp(-MPSGRAD_LOSS_MATH::fabs(y));
            g = (y >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e)) - t;
            return MPSGRAD_LOSS_MATH::max(y, 0.0f) - y * t + MPSGRAD_LOSS_MATH::log(1.0f + e);
        }
        case kLossCategoricalCrossEntropy:
            if (t == 0.0f) {
                g = 0.0f;
                return 0.0f;
            }
            g = -t / y;
            return -t * MPSGRAD_LOSS_MATH::log(y);
        case kLossHinge: {
            const float tp = 2.0f * t - 1.0f;
            const float margin = 1.0f - tp * y;
            g = margin > 0.0f ? -tp : 0.0f;
            return MPSGRAD_LOSS_MATH::max(margin, 0.0f);
        }
        case kLossHuber: {
            const float a = MPSGRAD_LOSS_MATH::fabs(d);
            if (a <= p.delta) {
                g = d;
                return 0.5f * d * d;
            }
            g = d > 0.0f ? p.delta : -p.delta;
            return p.delta * (a - 0.5f * p.delta);
        }
        case kLossLog:
            g = -t / (y + p.epsilon) + (1.0f - t) / (1.0f - y + p.epsilon);
            return -t * MPSGRAD_LOSS_MATH::log(y + p.epsilon) - (1.0f - t) * MPSGRAD_LOSS_MATH::log(1.0f - y + p.epsilon);
        default:  // kLossKullbackLeiblerDivergence
            g = -t;
            return t > 0.0f ? t * (MPSGRAD_LOSS_MATH::log(t) - y) : 0.0f;
    }
}

// dl/dt of one element of the element-wise types at the smoothed label t, given dl/dy = g.
inline float lossLabelGradient(LossElementsParams p, float y, float t, float g) {
    switch (p.lossType) {
        case kLossSigmoidCrossEntropy: return -y;
        case kLossCategoricalCrossEntropy: return -MPSGRAD_LOSS_MATH::log(y);
        case kLossHinge: return 1.0f - (2.0f * t - 1.0f) * y > 0.0f ? -2.0f * y : 0.0f;  // not g: t = 0.5 has g = 0
        case kLossLog: return MPSGRAD_LOSS_MATH::log(1.0f - y + p.epsilon) - MPSGRAD_LOSS_MATH::log(y + p.epsilon);
        case kLossKullbackLeiblerDivergence: return t > 0.0f ? MPSGRAD_LOSS_MATH::log(t) + 1.0f - y : 0.0f;
        default: return -g;  // MAE, MSE, Huber
    }
}

// dt'/dt of the label smoothing (lossLabel).
inline float lossLabelScale(LossElementsParams p) {
    const bool smoothed = p.labelSmoothing > 0.0f &&
                          (p.lossType == kLossSoftMaxCrossEntropy || p.lossType == kLossSigmoidCrossEntropy);
    return smoothed ? 1.0f - p.labelSmoothing : 1.0f;
}

// One pixel of C channels: writes the weighted gradient to grad[c] and (loss non-null) the weighted
// per-element losses to loss[c]; returns the pixel's loss sum and its non-zero weight count.
inline void lossPixel(LossElementsParams p, int C, MPSGRAD_LOSS_DEVICE const float* y,
                      MPSGRAD_LOSS_DEVICE const float* t, MPSGRAD_LOSS_DEVICE const float* w,
                      MPSGRAD_LOSS_DEVICE float* grad, MPSGRAD_LOSS_DEVICE float* loss, bool writeLoss,
                      MPSGRAD_LOSS_THREAD float& sum, MPSGRAD_LOSS_THREAD float& nonzero) {
    sum = 0.0f;
    nonzero = 0.0f;
    if (p.lossType == kLossSoftMaxCrossEntropy) {
        float m = y[0];
        for (int c = 1; c < C; ++c) m = MPSGRAD_LOSS_MATH::max(m, y[c]);
        float s = 0.0f, wt = 0.0f;
        bool anyWeight = false;
        for (int c = 0; c < C; ++c) {
            const float wc = p.hasWeights != 0 ? w[c] : p.weight;
            s += MPSGRAD_LOSS_MATH::exp(y[c] - m);
            wt += wc * lossLabel(p, t[c]);
            anyWeight = anyWeight || wc != 0.0f;
        }
        const float lse = m + MPSGRAD_LOSS_MATH::log(s);
        for (int c = 0; c < C; ++c) {
            const float wc = p.hasWeights != 0 ? w[c] : p.weight;
            const float tc = lossLabel(p, t[c]);
            const float l = -wc * tc * (y[c] - lse);
            grad[c] = p.labelGradients != 0 ? -wc * (y[c] - lse) * lossLabelScale(p)
                                            : MPSGRAD_LOSS_MATH::exp(y[c] - lse) * wt - wc * tc;
            if (writeLoss) loss[c] = l;
            sum += l;
        }
        nonzero = anyWeight ? 1.0f : 0.0f;
        return;
    }
    if (p.lossType == kLossCosineDistance) {
        const float w0 = p.hasWeights != 0 ? w[0] : p.weight;
        float dot = 0.0f;
        for (int c = 0; c < C; ++c) {
            dot += y[c] * t[c];
            grad[c] = -w0 * (p.labelGradients != 0 ? y[c] : t[c]);
        }
        sum = w0 * (1.0f - dot);
        nonzero = w0 != 0.0f ? 1.0f : 0.0f;
        return;
    }
    for (int c = 0; c < C; ++c) {
        const float wc = p.hasWeights != 0 ? w[c] : p.weight;
        float g = 0.0f;
        const float tc = lossLabel(p, t[c]);
        const float l = wc * lossElement(p, y[c], tc, g);
        grad[c] = wc * (p.labelGradients != 0 ? lossLabelGradient(p, y[c], tc, g) * lossLabelScale(p) : g);
        if (writeLoss) loss[c] = l;
        sum += l;
        nonzero += wc != 0.0f ? 1.0f : 0.0f;
    }
}

// The reduced loss of `count` pixel partials (partials[2 i], partials[2 i + 1]) in pixel order
// and the gradient scale; see LossReduceParams.
inline void lossReduce(LossReduceParams p, MPSGRAD_LOSS_DEVICE const float* partials, int pixels, int images,
                       MPSGRAD_LOSS_THREAD float& loss, MPSGRAD_LOSS_THREAD float& scale) {
    float sum = 0.0f, nonzero = 0.0f;
    for (int i = 0; i < pixels; ++i) {
        sum += partials[2 * i];
        nonzero += partials[2 * i + 1];
    }
    float count = 1.0f;
    if (p.reductionType == kReductionMean) count = p.meanCount * float(images);
    if (p.reductionType == kReductionSumByNonZeroWeights) count = nonzero;
    if (p.reductionType == kReductionSum) {
        loss = sum;
        scale = 1.0f;
        return;
    }
    loss = count > 0.0f ? sum / count : 0.0f;
    scale = p.scaleGradient != 0 ? (count > 0.0f ? 1.0f / count : 0.0f) : 1.0f;
}

}  // namespace mpsgrad
