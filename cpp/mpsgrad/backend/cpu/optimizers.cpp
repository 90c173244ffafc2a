// CPU backend: the optimizer update (metal/optimizer_math.h, one element at a time, split across
// threads in contiguous ranges; every element is independent, so results do not depend on the split).
//
// Adam without gradient clipping or regularization (the common case) has a 4-lane SSE loop: the
// scalar loop does not vectorize (std::sqrt may set errno, and the state references are chosen per
// element). It performs exactly the float32 operations of optimizer_math.h in the same order (no
// fused multiply-add: the scalar code is built for baseline x86-64 too), so both paths give the
// same bits; the tail and every other case use optimizer_math.h directly.
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "../../../../metal/optimizer_math.h"
#include "backend/backend.h"
#include "core/errors.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

void scalarUpdate(const OptimizerParams& p, const float* gradient, const float* values, float* state0,
                  float* state1, float* state2, float* result, int64_t i0, int64_t i1) {
    float unused = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
        float& s0 = state0 ? state0[i] : unused;
        float& s1 = state1 ? state1[i] : unused;
        float& s2 = state2 ? state2[i] : unused;
        result[i] = mpsgrad::optimizerUpdate(p, gradient[i], values[i], s0, s1, s2);
    }
}

// True when adamVector computes the update (see the file comment).
bool hasAdamVectorPath(const OptimizerParams& p, const float* state0, const float* state1, const float* state2) {
#if defined(__SSE2__)
    return p.kind == kOptimizerAdam && p.applyGradientClipping == 0 && p.regularizationType == kRegularizationNone &&
           state0 && state1 && (p.amsgrad == 0 || state2);
#else
    (void)p, (void)state0, (void)state1, (void)state2;
    return false;
#endif
}

// Adam on elements [i0, i1) four at a time; returns the first element it did not update.
int64_t adamVector(const OptimizerParams& p, const float* gradient, const float* values, float* state0,
                   float* state1, float* state2, float* result, int64_t i0, int64_t i1) {
#if defined(__SSE2__)
    const __m128 rescale = _mm_set1_ps(p.gradientRescale);
    const __m128 beta1 = _mm_set1_ps(p.beta1), oneMinusBeta1 = _mm_set1_ps(1.0f - p.beta1);
    const __m128 beta2 = _mm_set1_ps(p.beta2), oneMinusBeta2 = _mm_set1_ps(1.0f - p.beta2);
    const __m128 rate = _mm_set1_ps(p.learningRate), epsilon = _mm_set1_ps(p.epsilon);
    const bool amsgrad = p.amsgrad != 0;
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
        const __m128 g = _mm_mul_ps(rescale, _mm_loadu_ps(gradient + i));
        const __m128 m = _mm_add_ps(_mm_mul_ps(beta1, _mm_loadu_ps(state0 + i)), _mm_mul_ps(oneMinusBeta1, g));
        const __m128 s = _mm_add_ps(_mm_mul_ps(beta2, _mm_loadu_ps(state1 + i)),
                                    _mm_mul_ps(oneMinusBeta2, _mm_mul_ps(g, g)));
        _mm_storeu_ps(state0 + i, m);
        _mm_storeu_ps(state1 + i, s);
        __m128 v = s;
        if (amsgrad) {  // _mm_max_ps(s, vmax) == std::max(vmax, s), NaNs and signed zeros included
            v = _mm_max_ps(s, _mm_loadu_ps(state2 + i));
            _mm_storeu_ps(state2 + i, v);
        }
        const __m128 step = _mm_div_ps(_mm_mul_ps(rate, m), _mm_add_ps(_mm_sqrt_ps(v), epsilon));
        _mm_storeu_ps(result + i, _mm_sub_ps(_mm_loadu_ps(values + i), step));
    }
    return i;
#else
    (void)p, (void)gradient, (void)values, (void)state0, (void)state1, (void)state2, (void)result, (void)i1;
    return i0;
#endif
}

}  // namespace

void optimizerUpdate(const OptimizerParams& p, const float* gradient, const float* values, float* state0,
                     float* state1, float* state2, float* result) {
    const bool vector = hasAdamVectorPath(p, state0, state1, state2);
    parallelFor(p.count, 1 << 14, [&](int64_t i0, int64_t i1) {
        const int64_t done = vector ? adamVector(p, gradient, values, state0, state1, state2, result, i0, i1) : i0;
        scalarUpdate(p, gradient, values, state0, state1, state2, result, done, i1);
    });
}

}  // namespace mpsgrad::cpu
