// The neuron (activation) functions and their derivatives, shared by the CPU backend
// and the .metal kernels so that both compute exactly the same formulas.
//
// Formulas follow MPSCNNNeuronType (reference spec §2.2), with the corrected derivatives
// where Apple's header text is wrong (HardSigmoid, ReLUN, GeLU). Scalars are passed by
// value (not a NeuronParams reference) so the functions work unchanged whether the
// caller's params live in Metal's constant, device or thread address space.
#pragma once

#include "common_params.h"

#ifdef __METAL_VERSION__
#define MPSGRAD_MATH metal
#else
#include <cmath>
#define MPSGRAD_MATH std
#endif

namespace mpsgrad {

// erfc(x) from Numerical Recipes' Chebyshev fit, fractional error below 1.2e-7 for all x
// (so erfc keeps full relative accuracy in the tail where erf(x) rounds to -1). The Metal
// standard library has no erf/erfc, and using the same formula on the CPU keeps the backends equal.
inline float neuronErfc(float x) {
    float z = MPSGRAD_MATH::fabs(x);
    float t = 1.0f / (1.0f + 0.5f * z);
    float poly = -z * z - 1.26551223f +
                 t * (1.00002368f +
                 t * (0.37409196f +
                 t * (0.09678418f +
                 t * (-0.18628806f +
                 t * (0.27886807f +
                 t * (-1.13520398f +
                 t * (1.48851587f +
                 t * (-0.82215223f +
                 t * 0.17087277f))))))));
    float erfcAbs = t * MPSGRAD_MATH::exp(poly);
    return x >= 0.0f ? erfcAbs : 2.0f - erfcAbs;
}

// erf(x) = 1 - erfc(x), absolute error below 1.2e-7.
inline float neuronErf(float x) {
    float erfcAbs = neuronErfc(MPSGRAD_MATH::fabs(x));
    return x >= 0.0f ? 1.0f - erfcAbs : erfcAbs - 1.0f;
}

// log(1 + u) accurate for small u (Goldberg's trick; Metal has no log1p).
inline float neuronLog1p(float u) {
    float v = 1.0f + u;
    if (v == 1.0f) return u;
    return MPSGRAD_MATH::log(v) * u / (v - 1.0f);
}

// e^x - 1 accurate for small |x| (Kahan's trick; Metal has no expm1).
inline float neuronExpm1(float x) {
    float u = MPSGRAD_MATH::exp(x);
    if (u == 1.0f) return x;
    float um1 = u - 1.0f;
    if (um1 == -1.0f) return -1.0f;
    if (MPSGRAD_MATH::isinf(u)) return u;
    return um1 * x / MPSGRAD_MATH::log(u);
}

// base^exponent that also handles negative bases with integral exponents (Metal's pow is
// undefined for negative bases).
inline float neuronPow(float base, float exponent) {
    if (base >= 0.0f) return MPSGRAD_MATH::pow(base, exponent);
    if (MPSGRAD_MATH::floor(exponent) != exponent) return MPSGRAD_MATH::sqrt(-1.0f);  // NaN, as real pow
    float magnitude = MPSGRAD_MATH::pow(-base, exponent);
    bool odd = MPSGRAD_MATH::fmod(MPSGRAD_MATH::fabs(exponent), 2.0f) == 1.0f;
    return odd ? -magnitude : magnitude;
}

inline float neuronSigmoid(float x) {
    // Written so that neither branch overflows.
    if (x >= 0.0f) return 1.0f / (1.0f + MPSGRAD_MATH::exp(-x));
    float e = MPSGRAD_MATH::exp(x);
    return e / (1.0f + e);
}

// log(1 + e^x) without overflow for large x and without losing e^x for very negative x.
inline float neuronSoftplusUnit(float x) {
    float positive = x > 0.0f ? x : 0.0f;
    return positive + neuronLog1p(MPSGRAD_MATH::exp(-MPSGRAD_MATH::fabs(x)));
}

// min(max(v, lo), hi) that propagates NaN (fmin/fmax would silently replace a NaN input).
inline float neuronClamp(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

// f(x) for a neuron of `type` with parameters a, b, c; channelA is PReLU's a for x's channel.
inline float neuronForward(int32_t type, float a, float b, float c, float channelA, float x) {
    switch (type) {
        case kNeuronReLU: return x >= 0.0f ? x : a * x;
        case kNeuronLinear: return a * x + b;
        case kNeuronSigmoid: return neuronSigmoid(x);
        case kNeuronHardSigmoid: return neuronClamp(a * x + b, 0.0f, 1.0f);
        case kNeuronTanH: return a * MPSGRAD_MATH::tanh(b * x);
        case kNeuronAbsolute: return MPSGRAD_MATH::fabs(x);
        case kNeuronSoftPlus: return a * neuronSoftplusUnit(b * x);
        case kNeuronSoftSign: return x / (1.0f + MPSGRAD_MATH::fabs(x));
        case kNeuronELU: return x >= 0.0f ? x : a * neuronExpm1(x);
        case kNeuronPReLU: return x >= 0.0f ? x : channelA * x;
        case kNeuronReLUN: {
            float pre = x >= 0.0f ? x : a * x;
            return pre > b ? b : pre;  // NaN propagates
        }
        case kNeuronPower: return neuronPow(a * x + b, c);
        case kNeuronExponential:
            return c == -1.0f ? MPSGRAD_MATH::exp(a * x + b) : neuronPow(c, a * x + b);
        case kNeuronLogarithm:
            return c == -1.0f ? MPSGRAD_MATH::log(a * x + b)
                              : MPSGRAD_MATH::log(a * x + b) / MPSGRAD_MATH::log(c);
        // 1 + erf(x/sqrt(2)) = erfc(-x/sqrt(2)), accurate in the negative tail.
        case kNeuronGeLU: return 0.5f * x * neuronErfc(-x * 0.70710678118654752f);
        default: return x;  // kNeuronNone
    }
}

// df/dx at the forward input x. At kinks the value of the branch that includes x = 0 is used,
// as MPS's header states (ReLU, PReLU, ELU: x >= 0 takes the right-hand slope).
inline float neuronDerivative(int32_t type, float a, float b, float c, float channelA, float x) {
    switch (type) {
        case kNeuronReLU: return x >= 0.0f ? 1.0f : a;
        case kNeuronLinear: return a;
        // s(x) * (1 - s(x)) = s(x) * s(-x); the second form keeps precision in both tails.
        case kNeuronSigmoid: return neuronSigmoid(x) * neuronSigmoid(-x);
        case kNeuronHardSigmoid: {
            float y = a * x + b;
            return (y > 0.0f && y < 1.0f) ? a : 0.0f;
        }
        case kNeuronTanH: {
            float t = MPSGRAD_MATH::tanh(b * x);
            return a * b * (1.0f - t * t);
        }
        case kNeuronAbsolute: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
        case kNeuronSoftPlus: return a * b * neuronSigmoid(b * x);
        case kNeuronSoftSign: {
            float d = 1.0f + MPSGRAD_MATH::fabs(x);
            return 1.0f / (d * d);
        }
        case kNeuronELU: return x >= 0.0f ? 1.0f : a * MPSGRAD_MATH::exp(x);
        case kNeuronPReLU: return x >= 0.0f ? 1.0f : channelA;
        case kNeuronReLUN: {
            float pre = x >= 0.0f ? x : a * x;
            if (pre >= b) return 0.0f;
            return x >= 0.0f ? 1.0f : a;
        }
        case kNeuronPower:
            // c = 0 is the constant 1 (avoids 0 * inf at a*x+b = 0).
            return c == 0.0f ? 0.0f : a * c * neuronPow(a * x + b, c - 1.0f);
        case kNeuronExponential:
            return c == -1.0f ? a * MPSGRAD_MATH::exp(a * x + b)
                              : a * MPSGRAD_MATH::log(c) * neuronPow(c, a * x + b);
        case kNeuronLogarithm:
            return c == -1.0f ? a / (a * x + b) : a / (MPSGRAD_MATH::log(c) * (a * x + b));
        case kNeuronGeLU:
            return 0.5f * neuronErfc(-x * 0.70710678118654752f) +
                   x * MPSGRAD_MATH::exp(-0.5f * x * x) * 0.39894228040143268f;
        default: return 1.0f;  // kNeuronNone
    }
}

}  // namespace mpsgrad

#undef MPSGRAD_MATH
