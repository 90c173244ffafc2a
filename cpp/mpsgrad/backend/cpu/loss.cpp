// CPU backend: the loss ops (metal/loss_params.h; formulas in metal/loss_math.h). Pixels are split
// across threads (each pixel is independent); the reductions run over the pixel partials in
// pixel order on one thread, so every result is bitwise reproducible. Softmax cross-entropy has a
// CPU path of its own (softmaxCrossEntropyPixels): the same formula in loops that vectorize.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../../../../metal/loss_math.h"
#include "backend/backend.h"
#include "core/errors.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using elementwise::checkLayout;
using elementwise::invalid;

inline int64_t at(const ImageLayout& l, int64_t n, int64_t pixel) {
    return n * l.imageStride + pixel * l.pixelStride + l.channelOffset;
}

void checkSameSize(const char* op, const char* name, const ImageLayout& l, const ImageLayout& ref) {
    checkLayout(op, name, l);
    if (l.width != ref.width || l.height != ref.height || l.channels != ref.channels)
        invalid(op, std::string(name) + " differs in size from the source");
}

// Softmax cross-entropy of pixels [i0, i1) of the batch (loss_math.h's lossPixel, same formula, with
// its lossLabel and lossLabelScale for the label smoothing):
//   lse = max + log Σ e^(y_c − max),  l_c = −w_c t_c (y_c − lse),
//   dl/dy_c = e^(y_c − lse) Σ_j w_j t_j − w_c t_c   (labelGradients: dl/dt_c = −w_c (y_c − lse)·(1 − ls)),
// with e^(y_c − lse) taken as e^(y_c − max) / Σ_j e^(y_j − max), so one exponential per element.
// lossPixel's loops call std::exp, a scalar libm call, twice per element (70 % of the loss's time);
// here the exponentials are elementwise::fastExp (relative error ~1e-7, see elementwise.h; its
// inputs are <= 0 here, where the clamp at -87.3 turns e^-100 into 1.2e-38 instead of 0, below
// anything a float32 sum of at least 1 can see) and the sums are fixed-order sums, so every loop
// vectorizes and the results stay independent of the thread count. scratch holds 3 C floats.
MPSGRAD_VECTOR_CLONES
void softmaxCrossEntropyPixels(const LossElementsParams& p, int64_t pixels, int64_t i0, int64_t i1,
                               const float* source, const float* labels, const float* weights, float* destination,
                               float* loss, float* partials, float* scratch) {
    using namespace elementwise;
    const int64_t C = p.source.channels;
    const bool perElement = p.reductionType == kReductionNone;
    const float labelScale = lossLabelScale(p);
    float* __restrict e = scratch;             // e^(y_c - max)
    float* __restrict wt = scratch + C;    // w_c·t_c
    float* __restrict term = scratch + 2 * C;  // l_c
    for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = i / pixels, px = i % pixels;
        const float* __restrict y = source + at(p.source, n, px);
        const float* __restrict t = labels + at(p.labels, n, px);
        const float* __restrict w = p.hasWeights ? weights + at(p.weights, n, px) : nullptr;
        float* __restrict g = destination + at(p.destination, n, px);
        const float m = fixedOrderMax8(y, C);
        const float sumE = fixedOrderSumOfExp<true>(y, m, C, e);  // e[c] = e^(y_c - m) and their sum, one pass
        const float lse = m + std::log(sumE);
        bool anyWeight = false;
        if (w) {
            for (int64_t c = 0; c < C; ++c) wt[c] = w[c] * lossLabel(p, t[c]);
            for (int64_t c = 0; c < C; ++c) anyWeight |= w[c] != 0.0f;
        } else {
            for (int64_t c = 0; c < C; ++c) wt[c] = p.weight * lossLabel(p, t[c]);
            anyWeight = p.weight != 0.0f;
        }
        const float sumWt = fixedOrderSum(wt, C);
        for (int64_t c = 0; c < C; ++c) term[c] = -wt[c] * (y[c] - lse);
        if (p.labelGradients) {
            if (w)
                for (int64_t c = 0; c < C; ++c) g[c] = -w[c] * (y[c] - lse) * labelScale;
            else
                for (int64_t c = 0; c < C; ++c) g[c] = -p.weight * (y[c] - lse) * labelScale;
        } else {
            // e^(y_c − lse) = e^(y_c − max) / Σ: the exponentials already computed, one division per pixel.
            const float factor = sumWt / sumE;
            for (int64_t c = 0; c < C; ++c) g[c] = e[c] * factor - wt[c];
        }
        if (perElement) {
            float* __restrict l = loss + at(p.loss, n, px);
            for (int64_t c = 0; c < C; ++c) l[c] = term[c];
        } else {
            partials[2 * (p.partialsOffset + i)] = fixedOrderSum(term, C);
            partials[2 * (p.partialsOffset + i) + 1] = anyWeight ? 1.0f : 0.0f;
        }
    }
}

}  // namespace

void lossElements(const LossElementsParams& p, const float* source, const float* labels, const float* weights,
                  float* destination, float* loss, float* partials) {
    static const char* op = "lossElements";
    checkLayout(op, "source", p.source);
    checkSameSize(op, "labels", p.labels, p.source);
    checkSameSize(op, "destination", p.destination, p.source);
    if (p.hasWeights) checkSameSize(op, "weights", p.weights, p.source);
    const bool perElement = p.reductionType == kReductionNone;
    if (perElement) checkSameSize(op, "loss", p.loss, p.source);
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    const int C = p.source.channels;
    if (C == 0 || pixels == 0 || p.batch == 0) return;
    if (p.lossType == kLossSoftMaxCrossEntropy) {
        parallelFor(int64_t(p.batch) * pixels, std::max<int64_t>(1, 16384 / C), [&](int64_t i0, int64_t i1) {
            std::vector<float> scratch(size_t(3 * C));
            softmaxCrossEntropyPixels(p, pixels, i0, i1, source, labels, weights, destination, loss, partials,
                                      scratch.data());
        });
        return;
    }
    parallelFor(int64_t(p.batch) * pixels, 256, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t n = i / pixels, px = i % pixels;
            float sum = 0.0f, nonzero = 0.0f;
            lossPixel(p, C, source + at(p.source, n, px), labels + at(p.labels, n, px),
                      p.hasWeights ? weights + at(p.weights, n, px) : nullptr, destination + at(p.destination, n, px),
                      perElement ? loss + at(p.loss, n, px) : nullptr, perElement, sum, nonzero);
            if (!perElement) {
                partials[2 * (p.partialsOffset + i)] = sum;
                partials[2 * (p.partialsOffset + i) + 1] = nonzero;
            }
        }
    });
}

void lossReduce(const LossReduceParams& p, const float* partials, float* results) {
    const int64_t pixels = p.pixelsPerImage;
    if (p.acrossBatch) {
        float loss = 0.0f, scale = 1.0f;
        mpsgrad::lossReduce(p, partials, int(pixels * p.images), p.images, loss, scale);
        for (int32_t n = 0; n < p.images; ++n) {
            results[2 * n] = loss;
            results[2 * n + 1] = scale;
        }
        return;
    }
    for (int32_t n = 0; n < p.images; ++n)
        mpsgrad::lossReduce(p, partials + 2 * n * pixels, int(pixels), 1, results[2 * n], results[2 * n + 1]);
}

void lossScaleGradient(const LossScaleParams& p, const float* results, float* destination) {
    checkLayout("lossScaleGradient", "destination", p.destination);
    const int64_t pixels = int64_t(p.destination.width) * p.destination.height;
    for (int32_t n = 0; n < p.batch; ++n) {
        const float scale = results[2 * (p.resultIndex + n) + 1];
        for (int64_t px = 0; px < pixels; ++px) {
            float* d = destination + at(p.destination, n, px);
            for (int c = 0; c < p.destination.channels; ++c) d[c] *= scale;
        }
    }
}

}  // namespace mpsgrad::cpu
