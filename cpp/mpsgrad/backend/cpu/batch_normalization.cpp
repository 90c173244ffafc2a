// CPU backend: the batch normalization family (statistics, forward, statistics gradient,
// gradient). Semantics are exactly those written in metal/batch_normalization_params.h.
//
// Every op reads each input once (one pass over memory). The two reductions (statistics and
// statistics gradient) split the channels into blocks of kChannelBlock, one block per task of
// cpu::parallelFor; a task walks every pixel of the batch in memory order and sums its block's
// channels in double precision in that fixed order, so results are bitwise reproducible whatever
// the thread count. The two element-wise ops split the rows of the batch across threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../../../../metal/neuron_math.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using elementwise::invalid;

// Channels one reduction task owns: 16 floats = one 64-byte cache line per pixel when the
// channel slice is aligned, so tasks never share a line.
constexpr int32_t kChannelBlock = 16;

// The per-channel constants of the forward transform z = x·scale + shift, shift = beta - mean·scale.
struct Affine {
    std::vector<float> scale, shift, invStd;
};

Affine affineOf(const char* op, const BatchNormalizationParams& p, const float* gamma, const float* beta,
                const float* mean, const float* variance) {
    const int32_t C = p.source.channels;
    Affine a;
    a.scale.resize(size_t(C));
    a.shift.resize(size_t(C));
    a.invStd.resize(size_t(C));
    for (int32_t c = 0; c < C; ++c) {
        const float denominator = variance[c] + p.epsilon;
        if (!(denominator > 0.0f))
            invalid(op, "variance + epsilon of channel " + std::to_string(c) + " is " + std::to_string(denominator) +
                            ", it must be > 0");
        a.invStd[size_t(c)] = 1.0f / std::sqrt(denominator);
        a.scale[size_t(c)] = gamma[c] * a.invStd[size_t(c)];
        a.shift[size_t(c)] = (beta ? beta[c] : 0.0f) - mean[c] * a.scale[size_t(c)];
    }
    return a;
}

float channelA(const BatchNormalizationParams& p, const float* neuronData, int32_t c) {
    return p.neuron.hasChannelData ? neuronData[c] : 0.0f;
}

// G' = G·f'(z), z = x·scale + shift, for channels [c0, c0 + w) of one pixel (scale/shift indexed from c0).
inline void neuronGradientRow(const BatchNormalizationParams& p, const float* neuronData, int32_t c0, int32_t w,
                              const float* g, const float* x, const float* scale, const float* shift, float* gp) {
    const NeuronParams nr = p.neuron;
    if (nr.type == kNeuronNone) {
        for (int32_t k = 0; k < w; ++k) gp[k] = g[k];
        return;
    }
    for (int32_t k = 0; k < w; ++k)
        gp[k] = g[k] * neuronDerivative(nr.type, nr.a, nr.b, nr.c, channelA(p, neuronData, c0 + k),
                                        x[k] * scale[k] + shift[k]);
}

void checkImages(const char* op, const BatchNormalizationParams& p, bool gradient, bool destination) {
    elementwise::checkLayout(op, "source", p.source);
    if (p.batch < 0) invalid(op, "negative batch");
    auto same = [&](const ImageLayout& l, const char* name) {
        elementwise::checkLayout(op, name, l);
        if (l.width != p.source.width || l.height != p.source.height || l.channels != p.source.channels)
            invalid(op, std::string(name) + " and source differ in size or channel count");
    };
    if (gradient) same(p.gradient, "gradient");
    if (destination) same(p.destination, "destination");
    if (!(p.epsilon >= 0.0f)) invalid(op, "epsilon must be >= 0");
}

// Calls body(n, i, rowPointer offsets) for every pixel of channel block [c0, c1) in memory order.
template <class Body>
void forEachPixel(const BatchNormalizationParams& p, Body&& body) {
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t i = 0; i < pixels; ++i) body(n, i);
}

inline int64_t at(const ImageLayout& l, int64_t n, int64_t i) {
    return n * int64_t(l.imageStride) + i * int64_t(l.pixelStride) + l.channelOffset;
}

// parallelFor over channel blocks.
template <class Body>
void forChannelBlocks(int32_t C, Body&& body) {
    const int64_t blocks = (int64_t(C) + kChannelBlock - 1) / kChannelBlock;
    parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
            body(int32_t(b * kChannelBlock), int32_t(std::min<int64_t>(C, (b + 1) * kChannelBlock)));
    });
}

// parallelFor over rows (image, y) of the batch: body(n, firstPixel, pixelCount).
template <class Body>
void forRows(const BatchNormalizationParams& p, Body&& body) {
    const int64_t rows = int64_t(p.batch) * p.source.height;
    const int64_t W = p.source.width;
    parallelFor(rows, elementwise::rowGrain(W * p.source.channels), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) body(r / p.source.height, (r % p.source.height) * W, W);
    });
}

}  // namespace

void batchNormalizationStatistics(const BatchNormalizationParams& p, const float* source, float* mean,
                                  float* variance) {
    static const char* op = "batchNormalizationStatistics";
    checkImages(op, p, false, false);
    const int32_t C = p.source.channels;
    const int64_t m = int64_t(p.batch) * p.source.width * p.source.height;
    if (C == 0 || m == 0) return;
    if (p.previousCount < 0) invalid(op, "negative previousCount");
    forChannelBlocks(C, [&](int32_t c0, int32_t c1) {
        double s1[kChannelBlock] = {}, s2[kChannelBlock] = {}, shift[kChannelBlock];
        const int32_t w = c1 - c0;
        // Sums around the first pixel's value: no cancellation for data far from zero.
        for (int32_t k = 0; k < w; ++k) shift[k] = source[at(p.source, 0, 0) + c0 + k];
        forEachPixel(p, [&](int64_t n, int64_t i) {
            const float* x = source + at(p.source, n, i) + c0;
            for (int32_t k = 0; k < w; ++k) {
                const double d = double(x[k]) - shift[k];
                s1[k] += d;
                s2[k] += d * d;
            }
        });
        const double n0 = double(p.previousCount), total = n0 + double(m);
        for (int32_t k = 0; k < w; ++k) {
            const double meanB = shift[k] + s1[k] / double(m);
            const double m2B = std::max(0.0, s2[k] - s1[k] * s1[k] / double(m));
            double newMean = meanB, m2 = m2B;
            if (p.previousCount > 0) {
                const double meanA = mean[c0 + k], m2A = double(variance[c0 + k]) * n0;
                const double delta = meanB - meanA;
                newMean = meanA + delta * double(m) / total;
                m2 = m2A + m2B + delta * delta * n0 * double(m) / total;
            }
            mean[c0 + k] = float(newMean);
            variance[c0 + k] = float(m2 / total);
        }
    });
}

void batchNormalizationForward(const BatchNormalizationParams& p, const float* source, const float* gamma,
                               const float* beta, const float* mean, const float* variance,
                               const float* neuronData, float* destination) {
    static const char* op = "batchNormalizationForward";
    checkImages(op, p, false, true);
    const int32_t C = p.source.channels;
    if (C == 0 || p.batch == 0) return;
    const Affine a = affineOf(op, p, gamma, beta, mean, variance);
    const NeuronParams nr = p.neuron;
    forRows(p, [&](int64_t n, int64_t first, int64_t count) {
        for (int64_t i = first; i < first + count; ++i) {
            const float* x = source + at(p.source, n, i);
            float* y = destination + at(p.destination, n, i);
            if (nr.type == kNeuronNone) {
                for (int32_t c = 0; c < C; ++c) y[c] = x[c] * a.scale[size_t(c)] + a.shift[size_t(c)];
            } else {
                for (int32_t c = 0; c < C; ++c)
                    y[c] = neuronForward(nr.type, nr.a, nr.b, nr.c, channelA(p, neuronData, c),
                                         x[c] * a.scale[size_t(c)] + a.shift[size_t(c)]);
            }
        }
    });
}

void batchNormalizationStatisticsGradient(const BatchNormalizationParams& p, const float* gradient,
                                          const float* source, const float* gamma, const float* beta,
                                          const float* mean, const float* variance, const float* neuronData,
                                          float* gammaGradient, float* betaGradient) {
    static const char* op = "batchNormalizationStatisticsGradient";
    checkImages(op, p, true, false);
    const int32_t C = p.source.channels;
    if (C == 0) return;
    const Affine a = affineOf(op, p, gamma, beta, mean, variance);
    forChannelBlocks(C, [&](int32_t c0, int32_t c1) {
        double sumG[kChannelBlock] = {}, sumGX[kChannelBlock] = {};
        float gp[kChannelBlock], xhat[kChannelBlock];
        const int32_t w = c1 - c0;
        const float* scale = a.scale.data() + c0;
        const float* shift = a.shift.data() + c0;
        const float* invStd = a.invStd.data() + c0;
        const float* mu = mean + c0;
        forEachPixel(p, [&](int64_t n, int64_t i) {
            const float* g = gradient + at(p.gradient, n, i) + c0;
            const float* x = source + at(p.source, n, i) + c0;
            neuronGradientRow(p, neuronData, c0, w, g, x, scale, shift, gp);
            for (int32_t k = 0; k < w; ++k) xhat[k] = (x[k] - mu[k]) * invStd[k];
            for (int32_t k = 0; k < w; ++k) {
                sumG[k] += double(gp[k]);
                sumGX[k] += double(gp[k]) * double(xhat[k]);
            }
        });
        for (int32_t k = 0; k < w; ++k) {
            const bool add = p.previousCount != 0;
            betaGradient[c0 + k] = float((add ? double(betaGradient[c0 + k]) : 0.0) + sumG[k]);
            gammaGradient[c0 + k] = float((add ? double(gammaGradient[c0 + k]) : 0.0) + sumGX[k]);
        }
    });
}

void batchNormalizationGradient(const BatchNormalizationParams& p, const float* gradient, const float* source,
                                const float* gamma, const float* beta, const float* mean, const float* variance,
                                const float* neuronData, const float* gammaGradient, const float* betaGradient,
                                float* destination) {
    static const char* op = "batchNormalizationGradient";
    checkImages(op, p, true, true);
    const int32_t C = p.source.channels;
    if (C == 0 || p.batch == 0) return;
    if (p.trainingStatistics && p.totalCount <= 0) invalid(op, "totalCount must be > 0");
    const Affine a = affineOf(op, p, gamma, beta, mean, variance);
    // dX = scale·(G' − dβ/M − x̂·dγ/M) = scale·G' − xCoef·(x − mean) − offset, with
    // xCoef = scale·invStd·dγ/M and offset = scale·dβ/M (both 0 in inference mode).
    std::vector<float> xCoef(size_t(C), 0.0f), offset(size_t(C), 0.0f);
    if (p.trainingStatistics)
        for (size_t c = 0; c < size_t(C); ++c) {
            xCoef[c] = a.scale[c] * a.invStd[c] * (gammaGradient[c] / float(p.totalCount));
            offset[c] = a.scale[c] * (betaGradient[c] / float(p.totalCount));
        }
    forRows(p, [&](int64_t n, int64_t first, int64_t count) {
        std::vector<float> gp(static_cast<size_t>(C));
        for (int64_t i = first; i < first + count; ++i) {
            const float* g = gradient + at(p.gradient, n, i);
            const float* x = source + at(p.source, n, i);
            float* d = destination + at(p.destination, n, i);
            neuronGradientRow(p, neuronData, 0, C, g, x, a.scale.data(), a.shift.data(), gp.data());
            const float* scale = a.scale.data();
            const float* mu = mean;
            const float* xc = xCoef.data();
            const float* off = offset.data();
            for (int32_t c = 0; c < C; ++c) d[c] = scale[c] * gp[size_t(c)] - xc[c] * (x[c] - mu[c]) - off[c];
        }
    });
}

}  // namespace mpsgrad::cpu
