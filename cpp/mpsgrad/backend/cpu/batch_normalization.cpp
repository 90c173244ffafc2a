// CPU backend: the batch normalization family (statistics, forward, statistics gradient,
// gradient). Semantics are exactly those written in metal/batch_normalization_params.h.
//
// Every op is one pass over memory, reading each input once:
// - The two reductions (statistics, statistics gradient) cut the pixels of the batch into chunks
//   that depend only on the image size (at most kChunkPixels pixels of one image each), one chunk
//   per task of cpu::parallelFor. A chunk sums blocks of at most kBlockPixels pixels in float,
//   16 channels at a time with the sums held in vector registers (reduceBlock), and adds each
//   block's sums into its own double partial sums. The partials are then added in
//   chunk order, so results are bitwise reproducible whatever the thread count.
// - The two element-wise ops (forward, gradient) split the rows of the batch across threads and
//   walk them from the last row to the first: the statistics pass that precedes each of them
//   read the batch from first to last, so the rows it read last are still in the cache.
// The fused neuron type is dispatched once per block of pixels to loops instantiated for that
// type, so no per-element switch remains (as in neuron.cpp), and those loops are compiled
// twice, for AVX2 and for the baseline ISA, picked at load time (MPSGRAD_VECTOR_CLONES). Every
// channel is computed by the same sequence of float operations in both copies and whatever the
// thread count, so results stay bitwise reproducible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../../../metal/neuron_math.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using elementwise::invalid;

// Pixels whose sums a reduction accumulates in float before adding them into double: short
// enough that float rounding stays at the level of the inputs' own (64 terms), long enough
// that the double additions cost little.
constexpr int64_t kBlockPixels = 64;
// Largest reduction task: enough work to amortize a task, small enough to balance threads.
constexpr int64_t kChunkPixels = 1024;

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

// The fused neuron's per-channel slope a (PReLU): neuronData, or zeros when there is none.
std::vector<float> channelSlopes(const char* op, const BatchNormalizationParams& p, const float* neuronData) {
    const NeuronParams& n = p.neuron;
    if (n.type < 0 || n.type >= kNeuronCount) invalid(op, "unknown neuron type " + std::to_string(n.type));
    if (n.type == kNeuronPReLU && !n.hasChannelData) invalid(op, "PReLU needs per-channel data (hasChannelData = 1)");
    if (n.hasChannelData && neuronData == nullptr) invalid(op, "neuronData is null but hasChannelData = 1");
    const size_t C = size_t(p.source.channels);
    return n.hasChannelData ? std::vector<float>(neuronData, neuronData + C) : std::vector<float>(C, 0.0f);
}

inline int64_t at(const ImageLayout& l, int64_t n, int64_t i) {
    return n * int64_t(l.imageStride) + i * int64_t(l.pixelStride) + l.channelOffset;
}

// Per-channel sums of two per-pixel quantities over every pixel of the batch, in double.
// block(n, i0, i1, a, b) adds the quantities of pixels [i0, i1) of image n (at most kBlockPixels)
// into the zeroed float arrays a, b of C channels.
template <class Block>
void reduceChannels(const BatchNormalizationParams& p, Block&& block, std::vector<double>& sumA,
                    std::vector<double>& sumB) {
    const int64_t C = p.source.channels;
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    const int64_t perImage = (pixels + kChunkPixels - 1) / kChunkPixels;
    const int64_t chunks = int64_t(p.batch) * perImage;
    sumA.assign(size_t(C), 0.0);
    sumB.assign(size_t(C), 0.0);
    if (chunks == 0 || C == 0) return;
    std::vector<double> partial(size_t(chunks * 2 * C), 0.0);  // per chunk: C sums of a, then C of b
    parallelFor(chunks, 1, [&](int64_t k0, int64_t k1) {
        std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
        for (int64_t k = k0; k < k1; ++k) {
            const int64_t n = k / perImage, j = k % perImage;
            const int64_t first = j * pixels / perImage, end = (j + 1) * pixels / perImage;
            double* __restrict da = partial.data() + k * 2 * C;
            double* __restrict db = da + C;
            for (int64_t i0 = first; i0 < end; i0 += kBlockPixels) {
                std::fill(a.begin(), a.end(), 0.0f);
                std::fill(b.begin(), b.end(), 0.0f);
                block(n, i0, std::min(end, i0 + kBlockPixels), a.data(), b.data());
                for (int64_t c = 0; c < C; ++c) {
                    da[c] += double(a[size_t(c)]);
                    db[c] += double(b[size_t(c)]);
                }
            }
        }
    });
    for (int64_t k = 0; k < chunks; ++k) {  // chunk order: independent of the threads
        const double* da = partial.data() + k * 2 * C;
        for (int64_t c = 0; c < C; ++c) {
            sumA[size_t(c)] += da[c];
            sumB[size_t(c)] += da[C + c];
        }
    }
}

// parallelFor over rows (image, y) of the batch, last row first (see the top of the file):
// body(n, firstPixel, pixelCount).
template <class Body>
void forRowsBackwards(const BatchNormalizationParams& p, Body&& body) {
    const int64_t rows = int64_t(p.batch) * p.source.height;
    const int64_t W = p.source.width;
    parallelFor(rows, elementwise::rowGrain(W * p.source.channels), [&](int64_t r0, int64_t r1) {
        for (int64_t k = r0; k < r1; ++k) {
            const int64_t r = rows - 1 - k;
            body(r / p.source.height, (r % p.source.height) * W, W);
        }
    });
}

// Everything the per-type loops read: the images and the per-channel constants.
struct Pass {
    const BatchNormalizationParams& p;
    const float* gradient;
    const float* source;
    const float* scale;
    const float* shift;
    const float* mean;
    const float* slope;   // PReLU's per-channel a (zeros otherwise)
    const float* xCoef;   // gradient only: dX = scale·G' − xCoef·(x − mean) − offset
    const float* offset;
    float* destination;
};

// The per-type loops are inlined into the cloned dispatchers below, so each clone compiles
// them for its own ISA.
#if defined(__GNUC__) || defined(__clang__)
#define MPSGRAD_BN_INLINE inline __attribute__((always_inline))
#else
#define MPSGRAD_BN_INLINE inline
#endif

// The reductions keep each block's running sums in vector registers: channels are taken 16 at a
// time (two vectors of 8) and, inside such a group, the loop over the block's pixels is outermost,
// so the sums are not loaded and stored again for every pixel (that made the reductions slower than
// the memory; the compilers do not keep a float array in registers by themselves). term(i, c, a, b)
// adds pixel i's quantities of channels [c, c + width) into a, b, where a, b are either a Lanes
// (8 channels) or a float (one channel, the last C % 8). Every channel still adds its pixels in
// increasing order with the same float operations, so the sums do not depend on the grouping or on
// the vector width of the clone.
#if defined(__GNUC__) || defined(__clang__)
typedef float Lanes __attribute__((vector_size(32)));
#else
struct Lanes {  // never used: only compilers with vector extensions take the grouped path
};
#endif

// v = p[0], or the 8 floats from p (unaligned). An out-parameter, not a return value: a vector
// returned by value would change the ABI of the baseline clone.
template <class V>
MPSGRAD_BN_INLINE void load(V& v, const float* p) {
    std::memcpy(&v, p, sizeof v);
}

template <bool Vectors = true, class Term>
MPSGRAD_BN_INLINE void reduceBlock(int64_t C, int64_t i0, int64_t i1, Term&& term, float* a, float* b) {
    int64_t c0 = 0;
#if defined(__GNUC__) || defined(__clang__)
    if constexpr (Vectors) {
        constexpr int64_t L = int64_t(sizeof(Lanes) / sizeof(float));
        for (; c0 + 2 * L <= C; c0 += 2 * L) {
            Lanes a0, a1, b0, b1;
            load(a0, a + c0), load(a1, a + c0 + L), load(b0, b + c0), load(b1, b + c0 + L);
            for (int64_t i = i0; i < i1; ++i) {
                term(i, c0, a0, b0);
                term(i, c0 + L, a1, b1);
            }
            std::memcpy(a + c0, &a0, sizeof a0), std::memcpy(a + c0 + L, &a1, sizeof a1);
            std::memcpy(b + c0, &b0, sizeof b0), std::memcpy(b + c0 + L, &b1, sizeof b1);
        }
        for (; c0 + L <= C; c0 += L) {
            Lanes a0, b0;
            load(a0, a + c0), load(b0, b + c0);
            for (int64_t i = i0; i < i1; ++i) term(i, c0, a0, b0);
            std::memcpy(a + c0, &a0, sizeof a0), std::memcpy(b + c0, &b0, sizeof b0);
        }
    }
#endif
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t c = c0; c < C; ++c) term(i, c, a[c], b[c]);
}

// Adds x − shift and (x − shift)² into a, b for pixels [i0, i1) of image n.
MPSGRAD_VECTOR_CLONES
void statisticsPixels(const BatchNormalizationParams& p, const float* source, const float* shift, int64_t n,
                      int64_t i0, int64_t i1, float* a, float* b) {
    const float* __restrict base = source + at(p.source, n, 0);
    const float* __restrict sh = shift;
    const int64_t stride = p.source.pixelStride;
    reduceBlock(
        p.source.channels, i0, i1,
        [&](int64_t i, int64_t c, auto& sa, auto& sb) {
            using V = std::decay_t<decltype(sa)>;
            V x, shifted;
            load(x, base + i * stride + c), load(shifted, sh + c);
            const V d = x - shifted;
            sa += d;
            sb += d * d;
        },
        a, b);
}

// y = f(x·scale + shift) for pixels [i0, i1) of image n.
template <int32_t Type>
MPSGRAD_BN_INLINE void forwardPixels(const Pass& s, int64_t n, int64_t i0, int64_t i1) {
    const NeuronParams nr = s.p.neuron;
    const int64_t C = s.p.source.channels;
    const float* __restrict scale = s.scale;
    const float* __restrict shift = s.shift;
    const float* __restrict slope = s.slope;
    for (int64_t i = i0; i < i1; ++i) {
        const float* __restrict x = s.source + at(s.p.source, n, i);
        float* __restrict y = s.destination + at(s.p.destination, n, i);
        for (int64_t c = 0; c < C; ++c)
            y[c] = neuronForward(Type, nr.a, nr.b, nr.c, slope[c], x[c] * scale[c] + shift[c]);
    }
}

// Adds G' = G·f'(x·scale + shift) into sumG and G'·(x − mean) into sumGX, pixels [i0, i1) of image n.
template <int32_t Type>
MPSGRAD_BN_INLINE void statisticsGradientPixels(const Pass& s, int64_t n, int64_t i0, int64_t i1, float* sumG,
                                                float* sumGX) {
    const NeuronParams nr = s.p.neuron;
    const float* __restrict scale = s.scale;
    const float* __restrict shift = s.shift;
    const float* __restrict slope = s.slope;
    const float* __restrict mean = s.mean;
    const float* __restrict gBase = s.gradient + at(s.p.gradient, n, 0);
    const float* __restrict xBase = s.source + at(s.p.source, n, 0);
    const int64_t gStride = s.p.gradient.pixelStride, xStride = s.p.source.pixelStride;
    // The sums stay in Lanes (vector registers) for every neuron type, the derivative taken lane by
    // lane from the same scalar function (a select such as ReLU's becomes vector compares and
    // blends). The alternative, a loop across channels per pixel with the sums in memory, measured
    // 20-30x slower (8x56x56x64, 2 threads: ReLU 21-30 ms against 1.3-1.4 ms now, hard sigmoid
    // 29 ms). Every channel sees the same float operations in the same order on both paths, so the
    // results do not depend on the path (the last C % 8 channels still take the scalar one).
    reduceBlock(
        s.p.source.channels, i0, i1,
        [&](int64_t i, int64_t c, auto& a, auto& b) {
            using V = std::decay_t<decltype(a)>;
            V g, x, m;
            load(g, gBase + i * gStride + c), load(x, xBase + i * xStride + c), load(m, mean + c);
            V gp = g;
            if constexpr (std::is_same_v<V, float> && Type != kNeuronNone) {
                gp = g * neuronDerivative(Type, nr.a, nr.b, nr.c, slope[c], x * scale[c] + shift[c]);
            } else if constexpr (Type != kNeuronNone) {
                V sc, sh, derivative;
                load(sc, scale + c), load(sh, shift + c);
                const V z = x * sc + sh;
                for (int l = 0; l < int(sizeof(V) / sizeof(float)); ++l)
                    derivative[l] = neuronDerivative(Type, nr.a, nr.b, nr.c, slope[c + l], z[l]);
                gp = g * derivative;
            }
            a += gp;
            b += gp * (x - m);
        },
        sumG, sumGX);
}

// dX = scale·G' − xCoef·(x − mean) − offset, pixels [i0, i1) of image n.
template <int32_t Type>
MPSGRAD_BN_INLINE void gradientPixels(const Pass& s, int64_t n, int64_t i0, int64_t i1) {
    const NeuronParams nr = s.p.neuron;
    const int64_t C = s.p.source.channels;
    const float* __restrict scale = s.scale;
    const float* __restrict shift = s.shift;
    const float* __restrict slope = s.slope;
    const float* __restrict mean = s.mean;
    const float* __restrict xCoef = s.xCoef;
    const float* __restrict offset = s.offset;
    for (int64_t i = i0; i < i1; ++i) {
        const float* __restrict g = s.gradient + at(s.p.gradient, n, i);
        const float* __restrict x = s.source + at(s.p.source, n, i);
        float* __restrict d = s.destination + at(s.p.destination, n, i);
        for (int64_t c = 0; c < C; ++c) {
            const float gp = Type == kNeuronNone
                                 ? g[c]
                                 : g[c] * neuronDerivative(Type, nr.a, nr.b, nr.c, slope[c], x[c] * scale[c] + shift[c]);
            d[c] = scale[c] * gp - xCoef[c] * (x[c] - mean[c]) - offset[c];
        }
    }
}

// The loop of the pass's neuron type, chosen once per block of pixels.
using NeuronTypes = std::make_integer_sequence<int32_t, kNeuronCount>;

template <int32_t... T>
MPSGRAD_BN_INLINE void forwardByType(std::integer_sequence<int32_t, T...>, const Pass& s, int64_t n, int64_t i0,
                                     int64_t i1) {
    ((s.p.neuron.type == T ? forwardPixels<T>(s, n, i0, i1) : void()), ...);
}
template <int32_t... T>
MPSGRAD_BN_INLINE void gradientByType(std::integer_sequence<int32_t, T...>, const Pass& s, int64_t n, int64_t i0,
                                      int64_t i1) {
    ((s.p.neuron.type == T ? gradientPixels<T>(s, n, i0, i1) : void()), ...);
}
template <int32_t... T>
MPSGRAD_BN_INLINE void statisticsGradientByType(std::integer_sequence<int32_t, T...>, const Pass& s, int64_t n,
                                                int64_t i0, int64_t i1, float* a, float* b) {
    ((s.p.neuron.type == T ? statisticsGradientPixels<T>(s, n, i0, i1, a, b) : void()), ...);
}

MPSGRAD_VECTOR_CLONES
void forwardBlock(const Pass& s, int64_t n, int64_t i0, int64_t i1) { forwardByType(NeuronTypes{}, s, n, i0, i1); }

MPSGRAD_VECTOR_CLONES
void gradientBlock(const Pass& s, int64_t n, int64_t i0, int64_t i1) { gradientByType(NeuronTypes{}, s, n, i0, i1); }

MPSGRAD_VECTOR_CLONES
void statisticsGradientBlock(const Pass& s, int64_t n, int64_t i0, int64_t i1, float* a, float* b) {
    statisticsGradientByType(NeuronTypes{}, s, n, i0, i1, a, b);
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
    // Sums around the first pixel's value: no cancellation for data far from zero.
    const std::vector<float> shift(source + at(p.source, 0, 0), source + at(p.source, 0, 0) + C);
    std::vector<double> s1, s2;
    reduceChannels(
        p,
        [&](int64_t n, int64_t i0, int64_t i1, float* a, float* b) {
            statisticsPixels(p, source, shift.data(), n, i0, i1, a, b);
        },
        s1, s2);
    const double n0 = double(p.previousCount), total = n0 + double(m);
    for (int32_t c = 0; c < C; ++c) {
        const double meanB = double(shift[size_t(c)]) + s1[size_t(c)] / double(m);
        const double m2B = std::max(0.0, s2[size_t(c)] - s1[size_t(c)] * s1[size_t(c)] / double(m));
        double newMean = meanB, m2 = m2B;
        if (p.previousCount > 0) {  // Chan et al.'s merge of the earlier sub-batches' statistics
            const double meanA = mean[c], m2A = double(variance[c]) * n0;
            const double delta = meanB - meanA;
            newMean = meanA + delta * double(m) / total;
            m2 = m2A + m2B + delta * delta * n0 * double(m) / total;
        }
        mean[c] = float(newMean);
        variance[c] = float(m2 / total);
    }
}

void batchNormalizationForward(const BatchNormalizationParams& p, const float* source, const float* gamma,
                               const float* beta, const float* mean, const float* variance,
                               const float* neuronData, float* destination) {
    static const char* op = "batchNormalizationForward";
    checkImages(op, p, false, true);
    const int32_t C = p.source.channels;
    if (C == 0 || p.batch == 0) return;
    const Affine a = affineOf(op, p, gamma, beta, mean, variance);
    const std::vector<float> slope = channelSlopes(op, p, neuronData);
    const Pass s{p, nullptr, source, a.scale.data(), a.shift.data(), mean, slope.data(), nullptr, nullptr,
                 destination};
    forRowsBackwards(p, [&](int64_t n, int64_t first, int64_t count) { forwardBlock(s, n, first, first + count); });
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
    const std::vector<float> slope = channelSlopes(op, p, neuronData);
    const Pass s{p, gradient, source, a.scale.data(), a.shift.data(), mean, slope.data(), nullptr, nullptr, nullptr};
    std::vector<double> sumG, sumGX;
    reduceChannels(
        p, [&](int64_t n, int64_t i0, int64_t i1, float* g, float* gx) { statisticsGradientBlock(s, n, i0, i1, g, gx); },
        sumG, sumGX);
    const bool add = p.previousCount != 0;  // a later sub-batch: accumulate
    for (int32_t c = 0; c < C; ++c) {
        // dγ = Σ G'·x̂ = invStd·Σ G'·(x − mean), dβ = Σ G'.
        const double dGamma = double(a.invStd[size_t(c)]) * sumGX[size_t(c)];
        betaGradient[c] = float((add ? double(betaGradient[c]) : 0.0) + sumG[size_t(c)]);
        gammaGradient[c] = float((add ? double(gammaGradient[c]) : 0.0) + dGamma);
    }
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
    const std::vector<float> slope = channelSlopes(op, p, neuronData);
    // dX = scale·(G' − dβ/M − x̂·dγ/M) = scale·G' − xCoef·(x − mean) − offset, with
    // xCoef = scale·invStd·dγ/M and offset = scale·dβ/M (both 0 in inference mode).
    std::vector<float> xCoef(size_t(C), 0.0f), offset(size_t(C), 0.0f);
    if (p.trainingStatistics)
        for (size_t c = 0; c < size_t(C); ++c) {
            xCoef[c] = a.scale[c] * a.invStd[c] * (gammaGradient[c] / float(p.totalCount));
            offset[c] = a.scale[c] * (betaGradient[c] / float(p.totalCount));
        }
    const Pass s{p,           gradient,    source,        a.scale.data(), a.shift.data(), mean,
                 slope.data(), xCoef.data(), offset.data(), destination};
    forRowsBackwards(p, [&](int64_t n, int64_t first, int64_t count) { gradientBlock(s, n, first, first + count); });
}

}  // namespace mpsgrad::cpu
