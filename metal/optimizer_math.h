// The per-element optimizer update of spec §2.13, shared by the CPU backend and
// metal/optimizers.metal so that both compute exactly the same float32 operations.
//
// Gradient preprocessing, in this order (spec §2.13; the order is [I], mpsgrad's choice is
// documented in docs/losses_and_optimizers.md):
//     g1 = applyGradientClipping ? clamp(g, clipMin, clipMax) : g
//     g2 = gradientRescale * g1
//     g  = g2 + (L1 ? scale * sign(w) : L2 ? scale * w : 0)      sign(0) = 0
// Update rules (m, s, v, vmax are updated in place; the function returns the new w):
//     SGD, no momentum vector:  w - lr * g
//     SGD:                      m = mu * m + lr * g;  w - m
//     SGD Nesterov:             m = mu * m + g;       w - lr * (g + mu * m)
//     RMSProp:                  s = decay * s + (1 - decay) * g^2;  w - lr * g / (sqrt(s) + eps)
//     Adam:                     m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
//                               AMSGrad: vmax = max(vmax, v), used in place of v
//                               w - lr_t * m / (sqrt(v) + eps)     (lr_t from the host)
// The params are passed by value (a copy in the thread address space) and the state by thread
// reference, so the functions work wherever the caller's params live.
#pragma once

#include "optimizers_params.h"

#ifdef __METAL_VERSION__
#define MPSGRAD_OPT_MATH metal
#define MPSGRAD_THREAD thread
#else
#include <cmath>
#define MPSGRAD_OPT_MATH std
#define MPSGRAD_THREAD
#endif

namespace mpsgrad {

// The preprocessed gradient of one element.
inline float optimizerGradient(OptimizerParams p, float g, float w) {
    float g1 = p.applyGradientClipping != 0 ? MPSGRAD_OPT_MATH::min(MPSGRAD_OPT_MATH::max(g, p.gradientClipMin),
                                                                    p.gradientClipMax)
                                            : g;
    float g2 = p.gradientRescale * g1;
    if (p.regularizationType == kRegularizationL1) {
        float sign = w > 0.0f ? 1.0f : (w < 0.0f ? -1.0f : 0.0f);
        return g2 + p.regularizationScale * sign;
    }
    if (p.regularizationType == kRegularizationL2) return g2 + p.regularizationScale * w;
    return g2;
}

// Updates the state of one element and returns its new value.
inline float optimizerUpdate(OptimizerParams p, float gRaw, float w, MPSGRAD_THREAD float& s0,
                             MPSGRAD_THREAD float& s1, MPSGRAD_THREAD float& s2) {
    const float g = optimizerGradient(p, gRaw, w);
    if (p.kind == kOptimizerSGD) {
        if (p.hasState0 == 0) return w - p.learningRate * g;
        if (p.useNesterov != 0) {
            s0 = p.momentumScale * s0 + g;
            return w - p.learningRate * (g + p.momentumScale * s0);
        }
        s0 = p.momentumScale * s0 + p.learningRate * g;
        return w - s0;
    }
    if (p.kind == kOptimizerRMSProp) {
        s0 = p.decay * s0 + (1.0f - p.decay) * (g * g);
        return w - p.learningRate * g / (MPSGRAD_OPT_MATH::sqrt(s0) + p.epsilon);
    }
    s0 = p.beta1 * s0 + (1.0f - p.beta1) * g;
    s1 = p.beta2 * s1 + (1.0f - p.beta2) * (g * g);
    float v = s1;
    if (p.amsgrad != 0) {
        s2 = MPSGRAD_OPT_MATH::max(s2, s1);
        v = s2;
    }
    return w - p.learningRate * s0 / (MPSGRAD_OPT_MATH::sqrt(v) + p.epsilon);
}

}  // namespace mpsgrad
