// CPU backend: softmax / log-softmax across feature channels and their gradients.
//
// Semantics are exactly those written in metal/softmax_params.h. Rows of the clip rectangle
// are split across threads; each pixel's channel reduction (max, sum of exponentials, dot
// product) runs over its contiguous channels in a fixed order (elementwise::fixedOrderSum), so
// results are bitwise reproducible and the sums vectorize. Exponentials use
// elementwise::fastExp, which vectorizes (std::exp does not). The AVX2 clone is chosen once per
// run of pixels (softmaxPixels), not per pixel.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

// Y = softmax(X) or log-softmax(X) of one pixel of N channels; scratch holds N floats.
inline __attribute__((always_inline)) void softmaxPixel(const float* x, float* y, int64_t N, bool logSoftmax,
                                                         float* scratch) {
    const float m = fixedOrderMax(x, N);
    for (int64_t k = 0; k < N; ++k) scratch[k] = fastExp(x[k] - m);
    const float sum = fixedOrderSum(scratch, N);
    if (logSoftmax) {
        const float logSum = std::log(sum);
        for (int64_t k = 0; k < N; ++k) y[k] = (x[k] - m) - logSum;
    } else {
        // One division per pixel, not per channel (a vector division costs as much as the exponential).
        const float inverse = 1.0f / sum;
        for (int64_t k = 0; k < N; ++k) y[k] = scratch[k] * inverse;
    }
}

// dX of one pixel; scratch holds N floats.
inline __attribute__((always_inline)) void softmaxGradientPixel(const float* g, const float* y, float* d, int64_t N,
                                                                 bool logSoftmax, float* scratch) {
    if (logSoftmax) {
        const float sumG = fixedOrderSum(g, N);
        for (int64_t k = 0; k < N; ++k) d[k] = g[k] - fastExp(y[k]) * sumG;
    } else {
        for (int64_t k = 0; k < N; ++k) scratch[k] = g[k] * y[k];
        const float dot = fixedOrderSum(scratch, N);
        for (int64_t k = 0; k < N; ++k) d[k] = y[k] * (g[k] - dot);
    }
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
            RowRuns in[1] = {rowRuns(p.source, source, n, p.sourceX, p.sourceY + y, 1, p.clipWidth,
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
