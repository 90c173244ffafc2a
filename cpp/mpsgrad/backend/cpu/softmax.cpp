// CPU backend: softmax / log-softmax across feature channels and their gradients.
//
// Semantics are exactly those written in metal/softmax_params.h. Rows of the clip rectangle
// are split across threads; each pixel's channel reduction (max, sum of exponentials, dot
// product) runs over its contiguous channels in a fixed order (elementwise::fixedOrderSum's), so
// results are bitwise reproducible whatever the thread count. The loops are written eight floats
// at a time (elementwise.h's Floats8 helpers: fastExp8, fixedOrderMax8, fixedOrderSumOfExp), which
// gives the same bits as the scalar helpers in about two thirds of the instructions, and the
// softmax forward makes three passes over a pixel (maximum; exponentials and their sum, written
// straight into Y; scaling) instead of four through a scratch row. The AVX2 clone is chosen once
// per run of pixels (softmaxPixels), not per pixel.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

#if MPSGRAD_FLOATS8
// Σ g_k·y_k with fixedOrderSum's order (each product rounded, then added into its lane).
MPSGRAD_ALWAYS_INLINE float fixedOrderDot(const float* __restrict g, const float* __restrict y, int64_t N) {
    Floats8 sums = {};
    int64_t k = 0;
    for (; k + 8 <= N; k += 8) {
        Floats8 gv, yv;
        load8(gv, g + k), load8(yv, y + k);
        sums += gv * yv;
    }
    float lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = sums[j];
    for (int j = 0; k < N; ++k, ++j) lanes[j] += g[k] * y[k];
    return sumOfLanes(lanes);
}

// d_k = g_k − e^(y_k)·sumG (the log-softmax gradient).
MPSGRAD_ALWAYS_INLINE void logSoftmaxGradientRow(const float* g, const float* y, float sumG, float* d, int64_t N) {
    int64_t k = 0;
    for (; k + 8 <= N; k += 8) {
        Floats8 gv, yv, ev;
        load8(gv, g + k), load8(yv, y + k);
        fastExp8(yv, ev);
        store8(d + k, gv - ev * sumG);
    }
    for (; k < N; ++k) d[k] = g[k] - fastExp(y[k]) * sumG;
}
#endif

// Y = softmax(X) or log-softmax(X) of one pixel of N channels. One pass for the maximum, one for
// the exponentials and their sum (written straight into Y), one to scale Y (softmax) or to subtract
// log Σ (log-softmax, which stores no exponential). Each channel is read before it is written, so
// Y may be X itself (in place). scratch holds N floats (scalar fallback only).
inline __attribute__((always_inline)) void softmaxPixel(const float* x, float* y, int64_t N, bool logSoftmax,
                                                         float* scratch) {
    const float m = fixedOrderMax8(x, N);
    if (logSoftmax) {
#if MPSGRAD_FLOATS8
        const float sum = fixedOrderSumOfExp<false>(x, m, N, nullptr);
#else
        const float sum = fixedOrderSumOfExp<true>(x, m, N, scratch);
#endif
        const float logSum = std::log(sum);
        for (int64_t k = 0; k < N; ++k) y[k] = (x[k] - m) - logSum;
    } else {
        const float sum = fixedOrderSumOfExp<true>(x, m, N, y);
        // One division per pixel, not per channel (a vector division costs as much as the exponential).
        const float inverse = 1.0f / sum;
        for (int64_t k = 0; k < N; ++k) y[k] *= inverse;
    }
    (void)scratch;
}

// dX of one pixel; scratch holds N floats (scalar fallback only).
inline __attribute__((always_inline)) void softmaxGradientPixel(const float* g, const float* y, float* d, int64_t N,
                                                                 bool logSoftmax, float* scratch) {
    if (logSoftmax) {
        const float sumG = fixedOrderSum(g, N);
#if MPSGRAD_FLOATS8
        logSoftmaxGradientRow(g, y, sumG, d, N);
#else
        for (int64_t k = 0; k < N; ++k) d[k] = g[k] - fastExp(y[k]) * sumG;
#endif
    } else {
#if MPSGRAD_FLOATS8
        const float dot = fixedOrderDot(g, y, N);
#else
        for (int64_t k = 0; k < N; ++k) scratch[k] = g[k] * y[k];
        const float dot = fixedOrderSum(scratch, N);
#endif
        for (int64_t k = 0; k < N; ++k) d[k] = y[k] * (g[k] - dot);
    }
    (void)scratch;
}

// `count` consecutive pixels: the vector clone is chosen once per run, not once per pixel.
MPSGRAD_VECTOR_CLONES
void softmaxPixels(const float* x, int64_t xStride, float* y, int64_t yStride, int64_t count, int64_t N,
                   bool logSoftmax, float* scratch) {
    for (int64_t i = 0; i < count; ++i) softmaxPixel(x + i * xStride, y + i * yStride, N, logSoftmax, scratch);
}

MPSGRAD_VECTOR_CLONES
void softmaxGradientPixels(const float* g, int64_t gStride, const float* y, int64_t yStride, float* d,
                           int64_t dStride, int64_t count, int64_t N, bool logSoftmax, float* scratch) {
    for (int64_t i = 0; i < count; ++i)
        softmaxGradientPixel(g + i * gStride, y + i * yStride, d + i * dStride, N, logSoftmax, scratch);
}

}  // namespace

void softmaxForward(const SoftmaxParams& p, const float* source, float* destination) {
    static const char* op = "softmaxForward";
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    const int32_t N = p.destination.channels;
    if (p.source.channels != N) invalid(op, "source and destination channel counts differ");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const bool logSoftmax = p.logSoftmax != 0;

    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N), [&](int64_t r0, int64_t r1) {
        std::vector<float> zeros(size_t(N), 0.0f), scratch(static_cast<size_t>(N));
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            RowRuns in[1] = {rowRuns(p.source, source, n, p.sourceX, saturatedIndex(p.sourceY, y), 1, p.clipWidth,
                                     p.edgeMode, zeros.data())};
            float* dRow = destination + pixelIndex(p.destination, n, p.clipX, p.clipY + y);
            const int64_t ds = p.destination.pixelStride;
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                softmaxPixels(ptrs[0], strides[0], dRow + b * ds, ds, e - b, N, logSoftmax, scratch.data());
            });
        }
    });
}

void softmaxGradient(const SoftmaxGradientParams& p, const float* gradient, const float* output,
                     float* destination) {
    static const char* op = "softmaxGradient";
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "output", p.output);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    const int32_t N = p.destination.channels;
    if (p.gradient.channels != N || p.output.channels != N)
        invalid(op, "gradient, output and destination channel counts differ");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const bool logSoftmax = p.logSoftmax != 0;

    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N), [&](int64_t r0, int64_t r1) {
        std::vector<float> zeros(size_t(N), 0.0f), scratch(static_cast<size_t>(N));
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            RowRuns in[2] = {
                rowRuns(p.gradient, gradient, n, p.gradientX, p.gradientY + y, 1, p.clipWidth,
                        p.gradientEdgeMode, zeros.data()),
                rowRuns(p.output, output, n, p.outputX, p.outputY + y, 1, p.clipWidth, p.outputEdgeMode,
                        zeros.data())};
            float* dRow = destination + pixelIndex(p.destination, n, p.clipX, p.clipY + y);
            const int64_t ds = p.destination.pixelStride;
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                softmaxGradientPixels(ptrs[0], strides[0], ptrs[1], strides[1], dRow + b * ds, ds, e - b, N,
                                      logSoftmax, scratch.data());
            });
        }
    });
}

}  // namespace mpsgrad::cpu
