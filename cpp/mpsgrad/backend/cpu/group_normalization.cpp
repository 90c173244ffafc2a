// CPU backend: the group normalization ops (which also serve instance normalization). Semantics
// are exactly those written in metal/group_normalization_params.h.
//
// Each op is a reduction pass and an element-wise pass. The reductions split every image into
// blocks of kChannelBlock channels, one (image, block) per task of cpu::parallelFor; a task walks
// the image's pixels in memory order and sums its channels in double precision, so the per-channel
// sums are bitwise reproducible whatever the thread count. Per-channel results are then combined
// into groups (and, for the parameter gradients, over images) serially in index order. The
// element-wise passes split the rows of the batch across threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using elementwise::invalid;

// Channels one reduction task owns (one 64-byte cache line of an aligned channel slice).
constexpr int32_t kChannelBlock = 16;

void checkParams(const char* op, const GroupNormalizationParams& p, bool gradient) {
    elementwise::checkLayout(op, "source", p.source);
    if (p.batch < 0) invalid(op, "negative batch");
    auto same = [&](const ImageLayout& l, const char* name) {
        elementwise::checkLayout(op, name, l);
        if (l.width != p.source.width || l.height != p.source.height || l.channels != p.source.channels)
            invalid(op, std::string(name) + " and source differ in size or channel count");
    };
    same(p.destination, "destination");
    if (gradient) same(p.gradient, "gradient");
    if (p.groups < 1 || p.source.channels % p.groups) invalid(op, "groups must be >= 1 and divide the channels");
    if (!(p.epsilon >= 0.0f)) invalid(op, "epsilon must be >= 0");
}

inline int64_t at(const ImageLayout& l, int64_t n, int64_t i) {
    return n * int64_t(l.imageStride) + i * int64_t(l.pixelStride) + l.channelOffset;
}

// parallelFor over (image, channel block): body(n, c0, c1).
template <class Body>
void forImageChannelBlocks(const GroupNormalizationParams& p, Body&& body) {
    const int32_t C = p.source.channels;
    const int64_t blocks = (int64_t(C) + kChannelBlock - 1) / kChannelBlock;
    parallelFor(int64_t(p.batch) * blocks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t n = t / blocks, b = t % blocks;
            body(n, int32_t(b * kChannelBlock), int32_t(std::min<int64_t>(C, (b + 1) * kChannelBlock)));
        }
    });
}

// parallelFor over rows (image, y) of the batch: body(n, firstPixel, pixelCount).
template <class Body>
void forRows(const GroupNormalizationParams& p, Body&& body) {
    const int64_t rows = int64_t(p.batch) * p.source.height;
    const int64_t W = p.source.width;
    parallelFor(rows, elementwise::rowGrain(W * p.source.channels), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) body(r / p.source.height, (r % p.source.height) * W, W);
    });
}

// The forward's statistics of group g of image n, as stored (float).
struct GroupStatistics {
    float mean, invStd;
};

GroupStatistics statisticsOf(const GroupNormalizationParams& p, const float* statistics, int64_t n, int32_t g) {
    const float* s = statistics + 2 * (n * p.groups + g);
    return {s[0], 1.0f / std::sqrt(s[1] + p.epsilon)};
}

// The loops below are compiled twice, for AVX2 and for the baseline ISA, picked at load time
// (MPSGRAD_VECTOR_CLONES); every channel sees the same operations in the same order in both, so
// results do not depend on the machine.

// Adds x − shift and (x − shift)² of channels [0, w) of `pixels` pixels (pixelStride apart) into
// s1, s2 (W > 0: a constant channel count instead of w).
template <int32_t W>
MPSGRAD_ALWAYS_INLINE void sumDeviationsOf(const float* x, int64_t pixelStride, int64_t pixels, int32_t w,
                                           const double* shift, double* s1, double* s2) {
    const int32_t width = W ? W : w;
    double a[kChannelBlock], b[kChannelBlock];
    for (int32_t k = 0; k < width; ++k) a[k] = s1[k], b[k] = s2[k];
    for (int64_t i = 0; i < pixels; ++i, x += pixelStride)
        for (int32_t k = 0; k < width; ++k) {
            const double d = double(x[k]) - shift[k];
            a[k] += d;
            b[k] += d * d;
        }
    for (int32_t k = 0; k < width; ++k) s1[k] = a[k], s2[k] = b[k];
}

#if MPSGRAD_FLOATS8
// A whole block of 16 channels with its 32 sums written out as vectors of 4 doubles: GCC left the
// loop above partly scalar, with sums spilled to the stack. Same operations per channel.
typedef double Doubles4 __attribute__((vector_size(32)));
typedef float Floats4 __attribute__((vector_size(16)));

MPSGRAD_ALWAYS_INLINE void load4(Doubles4& v, const float* p) {
    Floats4 f;
    std::memcpy(&f, p, sizeof f);
    v = __builtin_convertvector(f, Doubles4);
}

MPSGRAD_ALWAYS_INLINE void sumDeviationsOfBlock(const float* x, int64_t pixelStride, int64_t pixels,
                                                const double* shift, double* s1, double* s2) {
    Doubles4 a[4], b[4], sh[4];
    std::memcpy(a, s1, sizeof a), std::memcpy(b, s2, sizeof b), std::memcpy(sh, shift, sizeof sh);
    for (int64_t i = 0; i < pixels; ++i, x += pixelStride)
        for (int q = 0; q < 4; ++q) {
            Doubles4 v;
            load4(v, x + 4 * q);
            const Doubles4 d = v - sh[q];
            a[q] += d;
            b[q] += d * d;
        }
    std::memcpy(s1, a, sizeof a), std::memcpy(s2, b, sizeof b);
}
#endif

MPSGRAD_VECTOR_CLONES
void sumDeviations(const float* x, int64_t pixelStride, int64_t pixels, int32_t w, const double* shift, double* s1,
                   double* s2) {
#if MPSGRAD_FLOATS8
    if (w == kChannelBlock) return sumDeviationsOfBlock(x, pixelStride, pixels, shift, s1, s2);
#endif
    sumDeviationsOf<0>(x, pixelStride, pixels, w, shift, s1, s2);
}

// Adds G and G·x̂ (x̂ = (x − mean)·invStd) of channels [0, w) of `pixels` pixels into sG, sGX (W as above).
template <int32_t W>
MPSGRAD_ALWAYS_INLINE void sumGradientsOf(const float* g, int64_t gStride, const float* x, int64_t xStride,
                                          int64_t pixels, int32_t w, const float* mean, const float* invStd,
                                          double* sG, double* sGX) {
    const int32_t width = W ? W : w;
    double a[kChannelBlock], b[kChannelBlock];
    for (int32_t k = 0; k < width; ++k) a[k] = sG[k], b[k] = sGX[k];
    for (int64_t i = 0; i < pixels; ++i, g += gStride, x += xStride)
        for (int32_t k = 0; k < width; ++k) {
            const float xhat = (x[k] - mean[k]) * invStd[k];
            a[k] += double(g[k]);
            b[k] += double(g[k]) * double(xhat);
        }
    for (int32_t k = 0; k < width; ++k) sG[k] = a[k], sGX[k] = b[k];
}

#if MPSGRAD_FLOATS8
// sumGradientsOf for a whole block of 16 channels, written out like sumDeviationsOfBlock.
MPSGRAD_ALWAYS_INLINE void sumGradientsOfBlock(const float* g, int64_t gStride, const float* x, int64_t xStride,
                                               int64_t pixels, const float* mean, const float* invStd, double* sG,
                                               double* sGX) {
    Doubles4 a[4], b[4];
    Floats4 m[4], r[4];
    std::memcpy(a, sG, sizeof a), std::memcpy(b, sGX, sizeof b);
    std::memcpy(m, mean, sizeof m), std::memcpy(r, invStd, sizeof r);
    for (int64_t i = 0; i < pixels; ++i, g += gStride, x += xStride)
        for (int q = 0; q < 4; ++q) {
            Floats4 xv;
            std::memcpy(&xv, x + 4 * q, sizeof xv);
            const Floats4 xhat = (xv - m[q]) * r[q];
            Doubles4 gv;
            load4(gv, g + 4 * q);
            a[q] += gv;
            b[q] += gv * __builtin_convertvector(xhat, Doubles4);
        }
    std::memcpy(sG, a, sizeof a), std::memcpy(sGX, b, sizeof b);
}
#endif

MPSGRAD_VECTOR_CLONES
void sumGradients(const float* g, int64_t gStride, const float* x, int64_t xStride, int64_t pixels, int32_t w,
                  const float* mean, const float* invStd, double* sG, double* sGX) {
#if MPSGRAD_FLOATS8
    if (w == kChannelBlock) return sumGradientsOfBlock(g, gStride, x, xStride, pixels, mean, invStd, sG, sGX);
#endif
    sumGradientsOf<0>(g, gStride, x, xStride, pixels, w, mean, invStd, sG, sGX);
}

// y = (x − mean)·scale + beta over C channels of `count` pixels.
MPSGRAD_VECTOR_CLONES
void normalizePixels(const float* x, int64_t xStride, float* y, int64_t yStride, int64_t count, int32_t C,
                     const float* __restrict mean, const float* __restrict scale, const float* __restrict beta) {
    for (int64_t i = 0; i < count; ++i, x += xStride, y += yStride)
        for (int32_t c = 0; c < C; ++c) y[c] = (x[c] - mean[c]) * scale[c] + beta[c];
}

// Per (image, channel) values of the gradient's element-wise pass: the group's mean, 1/std and
// a = A/M, b = B/M (see groupNormalizationGradient).
struct GradientConstants {
    std::vector<float> mean, invStd, a, b;
};

// dX = invStd·(γ·G − a − x̂·b) over C channels of `count` pixels of the image whose constants start at `nc`.
MPSGRAD_VECTOR_CLONES
void gradientPixels(const float* g, int64_t gStride, const float* x, int64_t xStride, float* d, int64_t dStride,
                    int64_t count, int32_t C, const float* __restrict gamma, const GradientConstants& k, int64_t nc) {
    const float* __restrict mean = k.mean.data() + nc;
    const float* __restrict invStd = k.invStd.data() + nc;
    const float* __restrict a = k.a.data() + nc;
    const float* __restrict b = k.b.data() + nc;
    for (int64_t i = 0; i < count; ++i, g += gStride, x += xStride, d += dStride)
        for (int32_t c = 0; c < C; ++c) {
            const float xhat = (x[c] - mean[c]) * invStd[c];
            d[c] = invStd[c] * (gamma[c] * g[c] - a[c] - xhat * b[c]);
        }
}

}  // namespace

void groupNormalizationForward(const GroupNormalizationParams& p, const float* source, const float* gamma,
                               const float* beta, float* statistics, float* destination) {
    static const char* op = "groupNormalizationForward";
    checkParams(op, p, false);
    const int32_t C = p.source.channels, G = p.groups, K = C / G;
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    if (C == 0 || p.batch == 0 || pixels == 0) return;
    // Per (image, channel): the mean and the sum of squared deviations, from sums around the
    // channel's first value (no cancellation for data far from zero).
    std::vector<double> channelMean(size_t(p.batch) * C), channelM2(size_t(p.batch) * C);
    forImageChannelBlocks(p, [&](int64_t n, int32_t c0, int32_t c1) {
        double s1[kChannelBlock] = {}, s2[kChannelBlock] = {}, shift[kChannelBlock] = {};
        const int32_t w = c1 - c0;
        for (int32_t k = 0; k < w; ++k) shift[k] = source[at(p.source, n, 0) + c0 + k];
        sumDeviations(source + at(p.source, n, 0) + c0, p.source.pixelStride, pixels, w, shift, s1, s2);
        for (int32_t k = 0; k < w; ++k) {
            channelMean[size_t(n * C + c0 + k)] = shift[k] + s1[k] / double(pixels);
            channelM2[size_t(n * C + c0 + k)] = std::max(0.0, s2[k] - s1[k] * s1[k] / double(pixels));
        }
    });
    // Groups: the channels' (mean, M2) merged in channel order with Chan's rule (exact merging of
    // equal-sized parts).
    std::vector<float> groupMean(size_t(p.batch) * G), groupInvStd(size_t(p.batch) * G);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int32_t g = 0; g < G; ++g) {
            double count = 0.0, mean = 0.0, m2 = 0.0;
            for (int32_t c = g * K; c < (g + 1) * K; ++c) {
                const double total = count + double(pixels), delta = channelMean[size_t(n * C + c)] - mean;
                mean += delta * double(pixels) / total;
                m2 += channelM2[size_t(n * C + c)] + delta * delta * count * double(pixels) / total;
                count = total;
            }
            float* s = statistics + 2 * (n * G + g);
            s[0] = float(mean);
            s[1] = float(m2 / count);
            const GroupStatistics st = statisticsOf(p, statistics, n, g);
            groupMean[size_t(n * G + g)] = st.mean;
            groupInvStd[size_t(n * G + g)] = st.invStd;
        }
    // Per (image, channel) constants, so that the row loop has no per-element group lookup.
    std::vector<float> mean(size_t(p.batch) * C), scale(size_t(p.batch) * C);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int32_t c = 0; c < C; ++c) {
            mean[size_t(n * C + c)] = groupMean[size_t(n * G + c / K)];
            scale[size_t(n * C + c)] = groupInvStd[size_t(n * G + c / K)] * gamma[c];
        }
    forRows(p, [&](int64_t n, int64_t first, int64_t count) {
        normalizePixels(source + at(p.source, n, first), p.source.pixelStride,
                        destination + at(p.destination, n, first), p.destination.pixelStride, count, C,
                        mean.data() + n * C, scale.data() + n * C, beta);
    });
}

void groupNormalizationGradient(const GroupNormalizationParams& p, const float* gradient, const float* source,
                                const float* gamma, const float* statistics, float* gammaGradient,
                                float* betaGradient, float* destination) {
    static const char* op = "groupNormalizationGradient";
    checkParams(op, p, true);
    const int32_t C = p.source.channels, G = p.groups, K = C / G;
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    if (C == 0) return;
    if (p.batch == 0 || pixels == 0) {
        std::fill(gammaGradient, gammaGradient + C, 0.0f);
        std::fill(betaGradient, betaGradient + C, 0.0f);
        return;
    }
    std::vector<GroupStatistics> st(size_t(p.batch) * G);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int32_t g = 0; g < G; ++g) {
            st[size_t(n * G + g)] = statisticsOf(p, statistics, n, g);
            if (!std::isfinite(st[size_t(n * G + g)].invStd))
                invalid(op, "variance + epsilon of group " + std::to_string(g) + " is not > 0");
        }
    // Per (image, channel): Σ G and Σ G·x̂ over the pixels.
    std::vector<double> sumG(size_t(p.batch) * C), sumGX(size_t(p.batch) * C);
    forImageChannelBlocks(p, [&](int64_t n, int32_t c0, int32_t c1) {
        double sG[kChannelBlock] = {}, sGX[kChannelBlock] = {};
        float mean[kChannelBlock], invStd[kChannelBlock];
        const int32_t w = c1 - c0;
        for (int32_t k = 0; k < w; ++k) {
            const GroupStatistics& s = st[size_t(n * G + (c0 + k) / K)];
            mean[k] = s.mean;
            invStd[k] = s.invStd;
        }
        sumGradients(gradient + at(p.gradient, n, 0) + c0, p.gradient.pixelStride, source + at(p.source, n, 0) + c0,
                     p.source.pixelStride, pixels, w, mean, invStd, sG, sGX);
        for (int32_t k = 0; k < w; ++k) {
            sumG[size_t(n * C + c0 + k)] = sG[k];
            sumGX[size_t(n * C + c0 + k)] = sGX[k];
        }
    });
    for (int32_t c = 0; c < C; ++c) {
        double b = 0.0, g = 0.0;
        for (int64_t n = 0; n < p.batch; ++n) {
            b += sumG[size_t(n * C + c)];
            g += sumGX[size_t(n * C + c)];
        }
        betaGradient[c] = float(b);
        gammaGradient[c] = float(g);
    }
    // dX = r·(γ·G − A/M − x̂·B/M) with the group sums A = Σ γ_c ΣG, B = Σ γ_c ΣG·x̂.
    const double M = double(K) * double(pixels);
    std::vector<float> a(size_t(p.batch) * G), b(size_t(p.batch) * G);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int32_t g = 0; g < G; ++g) {
            double A = 0.0, B = 0.0;
            for (int32_t c = g * K; c < (g + 1) * K; ++c) {
                A += double(gamma[c]) * sumG[size_t(n * C + c)];
                B += double(gamma[c]) * sumGX[size_t(n * C + c)];
            }
            a[size_t(n * G + g)] = float(A / M);
            b[size_t(n * G + g)] = float(B / M);
        }
    // The group's values spread per (image, channel): the row loop then vectorizes (it looked them up
    // per element, with an integer division, which made it the slowest part of the gradient).
    GradientConstants k{std::vector<float>(size_t(p.batch) * C), std::vector<float>(size_t(p.batch) * C),
                        std::vector<float>(size_t(p.batch) * C), std::vector<float>(size_t(p.batch) * C)};
    for (int64_t n = 0; n < p.batch; ++n)
        for (int32_t c = 0; c < C; ++c) {
            const size_t ng = size_t(n * G + c / K), nc = size_t(n * C + c);
            k.mean[nc] = st[ng].mean;
            k.invStd[nc] = st[ng].invStd;
            k.a[nc] = a[ng];
            k.b[nc] = b[ng];
        }
    forRows(p, [&](int64_t n, int64_t first, int64_t count) {
        gradientPixels(gradient + at(p.gradient, n, first), p.gradient.pixelStride, source + at(p.source, n, first),
                       p.source.pixelStride, destination + at(p.destination, n, first), p.destination.pixelStride,
                       count, C, gamma, k, n * C);
    });
}

}  // namespace mpsgrad::cpu
