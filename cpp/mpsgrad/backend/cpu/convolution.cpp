// CPU backend: convolution forward, data gradient and weight gradient.
//
// Semantics are exactly those written in metal/convolution_params.h. All three ops are
// organised the same way:
//
//   1. pack what the op reads into small contiguous scratch panels (an im2col patch of a
//      block of output pixels, honouring the edge mode, or a block of the incoming gradient);
//   2. multiply the panels with weights packed once per call in the layout the product needs
//      (transposed for the forward pass, rotated and I/O-transposed for the data gradient);
//   3. write the results (bias, neuron, preactivation) only into the channels
//      [channelOffset, channelOffset + channels) of the destination pixels.
//
// The product runs on a register-tiled micro-kernel (MR x NR accumulators, inner loop over NR
// contiguous floats) that compilers vectorize. Every output element is produced by exactly one
// thread, and its sum always runs in the same order whatever the thread count or chunking:
// results are bitwise reproducible. The weight gradient, a reduction over every pixel of the
// batch, sums fixed pixel blocks in order and partitions the threads over weight entries.
#include "cpu_ops.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../../../metal/neuron_math.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

constexpr int kMR = 4;  // micro-kernel rows
constexpr int kNR = 8;  // micro-kernel columns (contiguous in B and C)

inline int roundUp(int v, int m) { return (v + m - 1) / m * m; }
inline int ceilDiv(int v, int m) { return (v + m - 1) / m; }
inline int clampInt(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
// Mathematical modulo (result in [0, m)) for m > 0.
inline int positiveMod(int v, int m) {
    int r = v % m;
    return r < 0 ? r + m : r;
}

// Offset in floats of element (n, y, x, channel 0) of a layout, channel offset included.
inline int64_t pixelIndex(const ImageLayout& l, int n, int y, int x) {
    return int64_t(n) * l.imageStride + (int64_t(y) * l.width + x) * l.pixelStride + l.channelOffset;
}

[[noreturn]] void invalid(const std::string& what) {
    throw std::invalid_argument("mpsgrad cpu convolution: " + what);
}

void checkLayout(const ImageLayout& l, const char* name) {
    if (l.width < 0 || l.height < 0 || l.channels < 0 || l.channelOffset < 0 ||
        l.channelOffset + l.channels > l.pixelStride)
        invalid(std::string(name) + " layout is inconsistent (channelOffset + channels > pixelStride)");
}

void checkCommon(int batch, int groups, int inChannels, int outChannels, int kW, int kH, int sX,
                 int sY, int dX, int dY) {
    if (batch < 0) invalid("batch must be >= 0");
    if (groups < 1 || inChannels % groups != 0 || outChannels % groups != 0)
        invalid("groups must divide the input and output channel counts");
    if (inChannels < 1 || outChannels < 1) invalid("channel counts must be >= 1");
    if (kW < 1 || kH < 1) invalid("kernel size must be >= 1");
    if (sX < 1 || sY < 1) invalid("strides must be >= 1");
    if (dX < 1 || dY < 1) invalid("dilation rates must be >= 1");
}

void checkRect(const ImageLayout& l, int x, int y, int w, int h, const char* name) {
    if (w < 0 || h < 0 || x < 0 || y < 0 || x + w > l.width || y + h > l.height)
        invalid(std::string(name) + " clip rectangle lies outside the image");
}

// C[i][j] += sum_k A[i*rsA + k*csA] * B[k*ldb + j]  for i < kMR, j < kNR.
// The sum is formed in registers from zero and then added to C, always in increasing k.
// GCC and Clang get explicit 4-wide vectors (SSE, NEON; scalar code elsewhere): left to
// itself GCC vectorizes the k loop of the plain version into slow in-order reductions.
#if defined(__GNUC__) || defined(__clang__)
typedef float Vec4 __attribute__((vector_size(16)));
static_assert(kNR % 4 == 0, "kNR must be a multiple of the vector width");

inline Vec4 loadVec(const float* p) {
    Vec4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void storeVec(float* p, Vec4 v) { std::memcpy(p, &v, sizeof v); }

inline void microKernel(int64_t K, const float* A, int64_t rsA, int64_t csA, const float* B,
                        int64_t ldb, float* C, int64_t ldc) {
    constexpr int kV = kNR / 4;
    Vec4 acc[kMR][kV];
    for (int i = 0; i < kMR; ++i)
        for (int v = 0; v < kV; ++v) acc[i][v] = Vec4{0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k = 0; k < K; ++k) {
        const float* b = B + k * ldb;
        const float* a = A + k * csA;
        Vec4 bv[kV];
        for (int v = 0; v < kV; ++v) bv[v] = loadVec(b + 4 * v);
        for (int i = 0; i < kMR; ++i) {
            const float ai = a[i * rsA];
            const Vec4 av = {ai, ai, ai, ai};
            for (int v = 0; v < kV; ++v) acc[i][v] += av * bv[v];
        }
    }
    for (int i = 0; i < kMR; ++i)
        for (int v = 0; v < kV; ++v) {
            float* c = C + i * ldc + 4 * v;
            storeVec(c, loadVec(c) + acc[i][v]);
        }
}
#else
inline void microKernel(int64_t K, const float* A, int64_t rsA, int64_t csA, const float* B,
                        int64_t ldb, float* C, int64_t ldc) {
    float acc[kMR][kNR] = {};
    for (int64_t k = 0; k < K; ++k) {
        const float* b = B + k * ldb;
        const float* a = A + k * csA;
        for (int i = 0; i < kMR; ++i) {
            const float ai = a[i * rsA];
            for (int j = 0; j < kNR; ++j) acc[i][j] += ai * b[j];
        }
    }
    for (int i = 0; i < kMR; ++i) {
        float* c = C + i * ldc;
        for (int j = 0; j < kNR; ++j) c[j] += acc[i][j];
    }
}
#endif

// C[M][N] += A[M][K] * B[K][N] with A row-major (row stride lda), B row stride ldb, C row
// stride ldc. M must be a multiple of kMR and N of kNR (callers pad their scratch panels).
void gemmAdd(int M, int N, int K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc) {
    for (int j = 0; j < N; j += kNR)
        for (int i = 0; i < M; i += kMR)
            microKernel(K, A + i * lda, lda, 1, B + j, ldb, C + i * ldc + j, ldc);
}

// Copies `count` channels of one source pixel, or zeros when `pixel` is null.
inline void copyChannels(float* dst, const float* pixel, int count) {
    if (pixel)
        std::memcpy(dst, pixel, sizeof(float) * size_t(count));
    else
        std::fill(dst, dst + count, 0.0f);
}

// Source pixel read at (sy, sx) under the edge mode: null means "reads zero".
inline const float* sourcePixel(const float* source, const ImageLayout& s, int n, int sy, int sx,
                                int edgeMode) {
    if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) {
        if (edgeMode != kEdgeClamp || s.width <= 0 || s.height <= 0) return nullptr;
        sy = clampInt(sy, 0, s.height - 1);
        sx = clampInt(sx, 0, s.width - 1);
    }
    return source + pixelIndex(s, n, sy, sx);
}

// Writes pre-neuron values v[0..count) of output channels [o0, o0 + count) for one pixel.
inline void writeOutputs(const ConvolutionParams& p, const float* v, int o0, int count,
                         const float* neuronData, float* dst, float* pre) {
    if (pre) std::memcpy(pre + o0, v, sizeof(float) * size_t(count));
    const NeuronParams& nr = p.neuron;
    if (nr.type == kNeuronNone) {
        std::memcpy(dst + o0, v, sizeof(float) * size_t(count));
    } else {
        for (int o = 0; o < count; ++o) {
            float channelA = (nr.hasChannelData && neuronData) ? neuronData[o0 + o] : 0.0f;
            dst[o0 + o] = neuronForward(nr.type, nr.a, nr.b, nr.c, channelA, v[o]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forward

// Depthwise (one input and one output channel per group): per pixel, sum over taps of an
// element-wise product along the channels, with weights packed [tap][channel].
void forwardDepthwise(const ConvolutionParams& p, const float* source, const float* weights,
                      const float* biases, const float* neuronData, float* destination,
                      float* preactivation) {
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    const int C = D.channels, kW = p.kernelWidth, kH = p.kernelHeight, taps = kW * kH;

    std::vector<float> packed(size_t(taps) * C);
    for (int c = 0; c < C; ++c)
        for (int t = 0; t < taps; ++t) packed[size_t(t) * C + c] = weights[size_t(c) * taps + t];

    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    const int64_t grain = std::max<int64_t>(1, 4096 / (int64_t(p.clipWidth) * C * taps + 1));
    parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(C));
        for (int64_t r = begin; r < end; ++r) {
            const int n = int(r / p.clipHeight), y = int(r % p.clipHeight);
            for (int x = 0; x < p.clipWidth; ++x) {
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int ky = 0; ky < kH; ++ky) {
                    const int sy = p.windowTopY + p.strideY * y + p.dilationY * ky;
                    for (int kx = 0; kx < kW; ++kx) {
                        const int sx = p.windowLeftX + p.strideX * x + p.dilationX * kx;
                        const float* px = sourcePixel(source, S, n, sy, sx, p.edgeMode);
                        if (!px) continue;  // contributes exact zeros
                        const float* w = packed.data() + size_t(ky * kW + kx) * C;
                        float* a = acc.data();
                        for (int c = 0; c < C; ++c) a[c] += px[c] * w[c];
                    }
                }
                // value = bias + sum, matching the general path.
                for (int c = 0; c < C; ++c) acc[c] = (p.hasBias ? biases[c] : 0.0f) + acc[c];
                float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x);
                float* pre = p.writePreactivation
                                 ? preactivation + pixelIndex(p.preactivation, n, y, x)
                                 : nullptr;
                writeOutputs(p, acc.data(), 0, C, neuronData, dst, pre);
            }
        }
    });
}

}  // namespace

void convolutionForward(const ConvolutionParams& p, const float* source, const float* weights,
                        const float* biases, const float* neuronData, float* destination,
                        float* preactivation) {
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    checkCommon(p.batch, p.groups, S.channels, D.channels, p.kernelWidth, p.kernelHeight,
                p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(S, "source");
    checkLayout(D, "destination");
    checkRect(D, p.clipX, p.clipY, p.clipWidth, p.clipHeight, "destination");
    if (p.hasBias && !biases) invalid("hasBias is set but the bias buffer is null");
    if (p.neuron.hasChannelData && !neuronData) invalid("neuron channel data buffer is null");
    if (p.writePreactivation) {
        if (!preactivation) invalid("writePreactivation is set but the buffer is null");
        checkLayout(p.preactivation, "preactivation");
        checkRect(p.preactivation, 0, 0, p.clipWidth, p.clipHeight, "preactivation");
    }
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) return;

    const int G = p.groups, Cig = S.channels / G, Cog = D.channels / G;
    if (Cig == 1 && Cog == 1) {
        forwardDepthwise(p, source, weights, biases, neuronData, destination, preactivation);
        return;
    }

    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;          // reduction length per group
    const int CogPad = roundUp(Cog, kNR);  // padded columns of the product

    // Transposed weights, per group: Wt[g][k][oo] = W[g*Cog + oo][k] (zero in padding columns).
    std::vector<float> wt(size_t(G) * Kg * CogPad, 0.0f);
    for (int g = 0; g < G; ++g)
        for (int oo = 0; oo < Cog; ++oo) {
            const float* w = weights + size_t(g * Cog + oo) * Kg;
            float* dst = wt.data() + size_t(g) * Kg * CogPad + oo;
            for (int k = 0; k < Kg; ++k) dst[size_t(k) * CogPad] = w[k];
        }

    // Work item = a block of clip pixels (counted across rows and images, so small images and
    // fully connected layers still fill a block) x a group x a chunk of output columns. Columns
    // are only split when there are too few pixel blocks to occupy the threads; every output
    // element is still summed by one micro-kernel in increasing k, so the split never changes
    // the bits of the result.
    const int MB = roundUp(clampInt(16384 / std::max(Kg, 1), kMR, 64), kMR);
    const int64_t clipPixels = int64_t(p.clipWidth) * p.clipHeight;
    const int64_t totalPixels = int64_t(p.batch) * clipPixels;
    const int64_t pixelBlocks = (totalPixels + MB - 1) / MB;
    const int64_t wanted = int64_t(threadCount()) * 4;
    const int colTiles = CogPad / kNR;
    int colChunks = 1;
    if (pixelBlocks * G < wanted)
        colChunks = int(std::min<int64_t>(colTiles, (wanted + pixelBlocks * G - 1) / (pixelBlocks * G)));
    const int tilesPerChunk = ceilDiv(colTiles, colChunks);
    colChunks = ceilDiv(colTiles, tilesPerChunk);
    const int64_t items = pixelBlocks * G * colChunks;

    parallelFor(items, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> patch(size_t(MB) * Kg);
        std::vector<float> out(size_t(MB) * CogPad);
        std::vector<int64_t> dstAt(static_cast<size_t>(MB)), preAt(static_cast<size_t>(MB));
        for (int64_t item = begin; item < end; ++item) {
            const int chunk = int(item % colChunks);
            const int g = int((item / colChunks) % G);
            const int64_t q0 = (item / colChunks / G) * MB;
            const int mb = int(std::min<int64_t>(MB, totalPixels - q0)), mbPad = roundUp(mb, kMR);
            const int j0 = chunk * tilesPerChunk * kNR;
            const int j1 = std::min(CogPad, j0 + tilesPerChunk * kNR);

            // im2col patch: patch[m][(ky*kW + kx)*Cig + i], for this group's input channels.
            for (int m = 0; m < mb; ++m) {
                const int64_t q = q0 + m;
                const int n = int(q / clipPixels);
                const int y = int((q % clipPixels) / p.clipWidth), x = int(q % p.clipWidth);
                dstAt[size_t(m)] = pixelIndex(D, n, p.clipY + y, p.clipX + x);
                preAt[size_t(m)] = p.writePreactivation ? pixelIndex(p.preactivation, n, y, x) : 0;
                float* dst = patch.data() + size_t(m) * Kg;
                for (int ky = 0; ky < kH; ++ky) {
                    const int sy = p.windowTopY + p.strideY * y + p.dilationY * ky;
                    for (int kx = 0; kx < kW; ++kx, dst += Cig) {
                        const int sx = p.windowLeftX + p.strideX * x + p.dilationX * kx;
                        const float* px = sourcePixel(source, S, n, sy, sx, p.edgeMode);
                        copyChannels(dst, px ? px + g * Cig : nullptr, Cig);
                    }
                }
            }
            std::fill(patch.begin() + size_t(mb) * Kg, patch.begin() + size_t(mbPad) * Kg, 0.0f);

            // out = bias, then out += patch * Wt over columns [j0, j1).
            const int o0 = std::min(Cog, j0), o1 = std::min(Cog, j1);
            for (int m = 0; m < mbPad; ++m) {
                float* o = out.data() + size_t(m) * CogPad;
                if (p.hasBias)
                    std::memcpy(o + o0, biases + g * Cog + o0, sizeof(float) * size_t(o1 - o0));
                else
                    std::fill(o + o0, o + o1, 0.0f);
                std::fill(o + o1, o + j1, 0.0f);
            }
            gemmAdd(mbPad, j1 - j0, Kg, patch.data(), Kg, wt.data() + size_t(g) * Kg * CogPad + j0,
                    CogPad, out.data() + j0, CogPad);

            if (o1 > o0)
                for (int m = 0; m < mb; ++m)
                    writeOutputs(p, out.data() + size_t(m) * CogPad + o0, g * Cog + o0, o1 - o0,
                                 neuronData, destination + dstAt[size_t(m)],
                                 p.writePreactivation ? preactivation + preAt[size_t(m)] : nullptr);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Data gradient
//
// Z, the zero-inserted gradient, is nonzero only where (windowTopY + y + dilationY*ty) is a
// multiple of strideY (and likewise in x). Which taps can hit a sample depends only on the
// phase (y mod strideY, x mod strideX) of the destination pixel, so destination pixels are
// processed by phase class and each class only multiplies its own taps (a strided data
// gradient does 1/(sX*sY) of the dense work). Weights are packed once per call, per phase and
// group, as rows (tap, o) x columns c of the rotated, I/O-transposed kernel.

namespace {

// Depthwise data gradient: per destination pixel, the taps of its phase, each an element-wise
// product along the channels with the rotated weights packed [ty][tx][channel].
void dataGradientDepthwise(const ConvolutionDataGradientParams& p, const float* gradient,
                           const float* weights, float* destination,
                           const std::vector<std::vector<int>>& tapsY,
                           const std::vector<std::vector<int>>& tapsX) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    const int C = D.channels, kW = p.kernelWidth, kH = p.kernelHeight, taps = kW * kH;
    const int sX = p.strideX, sY = p.strideY;

    std::vector<float> rotated(size_t(taps) * C);
    for (int c = 0; c < C; ++c)
        for (int ty = 0; ty < kH; ++ty)
            for (int tx = 0; tx < kW; ++tx)
                rotated[size_t(ty * kW + tx) * C + c] =
                    weights[size_t(c) * taps + (kH - 1 - ty) * kW + (kW - 1 - tx)];

    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(C));
        for (int64_t r = begin; r < end; ++r) {
            const int n = int(r / p.clipHeight), y = int(r % p.clipHeight);
            const std::vector<int>& ty = tapsY[size_t(y % sY)];
            for (int x = 0; x < p.clipWidth; ++x) {
                const std::vector<int>& tx = tapsX[size_t(x % sX)];
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int a : ty) {
                    const int zy = p.windowTopY + y + p.dilationY * a;
                    if (zy < 0 || zy / sY >= E.height) continue;
                    for (int b : tx) {
                        const int zx = p.windowLeftX + x + p.dilationX * b;
                        if (zx < 0 || zx / sX >= E.width) continue;
                        const float* e = gradient + pixelIndex(E, n, zy / sY, zx / sX);
                        const float* w = rotated.data() + size_t(a * kW + b) * C;
                        float* s = acc.data();
                        for (int c = 0; c < C; ++c) s[c] += e[c] * w[c];
                    }
                }
                std::memcpy(destination + pixelIndex(D, n, p.clipY + y, p.clipX + x), acc.data(),
                            sizeof(float) * size_t(C));
            }
        }
    });
}

}  // namespace

void convolutionDataGradient(const ConvolutionDataGradientParams& p, const float* gradient,
                             const float* weights, float* destination) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    checkCommon(p.batch, p.groups, D.channels, E.channels, p.kernelWidth, p.kernelHeight,
                p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(E, "gradient");
    checkLayout(D, "destination");
    checkRect(D, p.clipX, p.clipY, p.clipWidth, p.clipHeight, "destination");
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) return;

    const int G = p.groups, Cig = D.channels / G, Cog = E.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight, sX = p.strideX, sY = p.strideY;
    const int Kfull = kH * kW * Cig;  // row length of one output channel's OHWI weights
    const int CigPad = roundUp(Cig, kNR);

    // Taps per phase: tapsY[py] lists the ty with (windowTopY + py + dilationY*ty) % sY == 0.
    std::vector<std::vector<int>> tapsY(static_cast<size_t>(sY)), tapsX(static_cast<size_t>(sX));
    for (int py = 0; py < sY; ++py)
        for (int ty = 0; ty < kH; ++ty)
            if (positiveMod(p.windowTopY + py + p.dilationY * ty, sY) == 0) tapsY[py].push_back(ty);
    for (int px = 0; px < sX; ++px)
        for (int tx = 0; tx < kW; ++tx)
            if (positiveMod(p.windowLeftX + px + p.dilationX * tx, sX) == 0) tapsX[px].push_back(tx);

    if (Cig == 1 && Cog == 1) {
        dataGradientDepthwise(p, gradient, weights, destination, tapsY, tapsX);
        return;
    }

    // Packed weights: for phase (py, px) and group g, a [nTaps*Cog][CigPad] block with
    // row (t, oo), column cc = W[g*Cog + oo][kH-1-ty][kW-1-tx][cc].
    std::vector<size_t> phaseOffset(size_t(sY) * sX);
    size_t total = 0;
    for (int py = 0; py < sY; ++py)
        for (int px = 0; px < sX; ++px) {
            phaseOffset[size_t(py) * sX + px] = total;
            total += tapsY[py].size() * tapsX[px].size() * size_t(G) * Cog * CigPad;
        }
    std::vector<float> wp(total, 0.0f);
    for (int py = 0; py < sY; ++py)
        for (int px = 0; px < sX; ++px) {
            const int nT = int(tapsY[py].size() * tapsX[px].size());
            for (int g = 0; g < G; ++g) {
                float* block = wp.data() + phaseOffset[size_t(py) * sX + px] +
                               size_t(g) * nT * Cog * CigPad;
                int t = 0;
                for (int ty : tapsY[py])
                    for (int tx : tapsX[px]) {
                        const int tap = (kH - 1 - ty) * kW + (kW - 1 - tx);
                        for (int oo = 0; oo < Cog; ++oo) {
                            const float* w = weights + size_t(g * Cog + oo) * Kfull + size_t(tap) * Cig;
                            std::memcpy(block + (size_t(t) * Cog + oo) * CigPad, w,
                                        sizeof(float) * size_t(Cig));
                        }
                        ++t;
                    }
            }
        }

    const int maxTaps = kH * kW;
    const int MB = roundUp(clampInt(16384 / std::max(maxTaps * Cog, 1), kMR, 64), kMR);
    const int perPhase = ceilDiv(ceilDiv(p.clipWidth, sX), MB);  // blocks in the largest class
    const int xPhases = std::min(sX, p.clipWidth);
    const int64_t items = int64_t(p.batch) * p.clipHeight * xPhases * perPhase;

    parallelFor(items, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> panel(size_t(MB) * maxTaps * Cog);
        std::vector<float> out(size_t(MB) * CigPad);
        std::vector<int> eyOf(static_cast<size_t>(kH));
        for (int64_t item = begin; item < end; ++item) {
            const int blk = int(item % perPhase);
            int64_t rest = item / perPhase;
            const int px = int(rest % xPhases);
            rest /= xPhases;
            const int y = int(rest % p.clipHeight), n = int(rest / p.clipHeight);

            const int count = ceilDiv(p.clipWidth - px, sX);  // pixels x = px + sX*xi
            const int xi0 = blk * MB;
            if (xi0 >= count) continue;
            const int mb = std::min(MB, count - xi0), mbPad = roundUp(mb, kMR);
            const int py = y % sY;
            const std::vector<int>& ty = tapsY[py];
            const std::vector<int>& tx = tapsX[px];
            const int nTx = int(tx.size());
            const int nT = int(ty.size()) * nTx;  // taps of this phase (rows of its weight block)

            // The y taps that land inside E form a contiguous range [a0, a1) (zy grows with ty);
            // the others only read zeros and are left out of the product.
            int a0 = 0, a1 = 0;
            for (int a = 0; a < int(ty.size()); ++a) {
                const int zy = p.windowTopY + y + p.dilationY * ty[size_t(a)];
                const int ey = zy / sY;  // zy is a multiple of sY here
                const bool inside = zy >= 0 && ey < E.height;
                eyOf[size_t(a)] = inside ? ey : -1;
                if (inside) {
                    if (a1 == 0) a0 = a;
                    a1 = a + 1;
                }
            }
            const int K = (a1 - a0) * nTx * Cog;

            for (int g = 0; g < G; ++g) {
                std::fill(out.begin(), out.begin() + size_t(mbPad) * CigPad, 0.0f);
                if (K > 0) {
                    for (int m = 0; m < mb; ++m) {
                        const int x = px + sX * (xi0 + m);
                        float* dst = panel.data() + size_t(m) * K;
                        for (int a = a0; a < a1; ++a)
                            for (int b = 0; b < nTx; ++b, dst += Cog) {
                                const int zx = p.windowLeftX + x + p.dilationX * tx[size_t(b)];
                                const int ex = zx / sX;
                                const bool inside = zx >= 0 && ex < E.width;
                                copyChannels(dst,
                                             inside ? gradient + pixelIndex(E, n, eyOf[size_t(a)], ex) + g * Cog
                                                    : nullptr,
                                             Cog);
                            }
                    }
                    std::fill(panel.begin() + size_t(mb) * K, panel.begin() + size_t(mbPad) * K, 0.0f);
                    // Rows (a, b, oo) of the phase's block, starting at row a0 * nTx * Cog.
                    const float* wblock = wp.data() + phaseOffset[size_t(py) * sX + px] +
                                          (size_t(g) * nT + size_t(a0) * nTx) * Cog * CigPad;
                    gemmAdd(mbPad, CigPad, K, panel.data(), K, wblock, CigPad, out.data(), CigPad);
                }
                for (int m = 0; m < mb; ++m) {
                    const int x = px + sX * (xi0 + m);
                    float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x) + g * Cig;
                    std::memcpy(dst, out.data() + size_t(m) * CigPad, sizeof(float) * size_t(Cig));
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Weight and bias gradients
//
// dW_g = E_g^T * P_g summed over every gradient pixel of the batch, with P the im2col patch of
// X under the weight-gradient geometry. Pixels are taken in fixed blocks: each block packs its
// patches and gradient values (in parallel over pixels), then the threads split the weight
// entries (row tiles of output channels x column chunks of taps) and each adds its block sum
// into a float total. A column of ones appended to P yields the bias gradient in the same pass.

namespace {

// Depthwise weight gradient: the pixels are split into a number of blocks that depends only on
// the problem; blocks form partial sums [tap][channel] (+ bias [channel]) in parallel, then the
// partials are added in block order. Vectorizes along the channels.
void weightGradientDepthwise(const ConvolutionWeightGradientParams& p, const float* gradient,
                             const float* source, float* weightGradient, float* biasGradient) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& S = p.source;
    const bool doW = p.computeWeights != 0, doB = p.computeBiases != 0;
    const int C = E.channels, kW = p.kernelWidth, kH = p.kernelHeight, taps = kW * kH;
    const int64_t pixelsPerImage = int64_t(E.width) * E.height;
    const int64_t pixels = int64_t(p.batch) * pixelsPerImage;
    const int blocks = int(std::max<int64_t>(1, std::min<int64_t>(64, (pixels + 63) / 64)));
    const int64_t perBlock = (pixels + blocks - 1) / blocks;
    const size_t stride = size_t(taps + 1) * C;  // [tap][c] then bias [c]
    std::vector<float> partial(size_t(blocks) * stride, 0.0f);

    parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t blk = begin; blk < end; ++blk) {
            float* part = partial.data() + size_t(blk) * stride;
            float* partB = part + size_t(taps) * C;
            const int64_t m1 = std::min(pixels, (blk + 1) * perBlock);
            for (int64_t m = blk * perBlock; m < m1; ++m) {
                const int n = int(m / pixelsPerImage);
                const int64_t r = m % pixelsPerImage;
                const int j = int(r / E.width), i = int(r % E.width);
                const float* e = gradient + pixelIndex(E, n, j, i);
                if (doB)
                    for (int c = 0; c < C; ++c) partB[c] += e[c];
                if (!doW) continue;
                for (int ky = 0; ky < kH; ++ky) {
                    const int sy = p.windowTopY + p.strideY * j + p.dilationY * ky;
                    for (int kx = 0; kx < kW; ++kx) {
                        const int sx = p.windowLeftX + p.strideX * i + p.dilationX * kx;
                        const float* x = sourcePixel(source, S, n, sy, sx, p.edgeMode);
                        if (!x) continue;
                        float* d = part + size_t(ky * kW + kx) * C;
                        for (int c = 0; c < C; ++c) d[c] += e[c] * x[c];
                    }
                }
            }
        }
    });

    const bool acc = p.accumulate != 0;
    parallelFor(C, 16, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            for (int t = doW ? 0 : taps; t <= (doB ? taps : taps - 1); ++t) {
                float sum = 0.0f;
                for (int blk = 0; blk < blocks; ++blk) sum += partial[size_t(blk) * stride + size_t(t) * C + c];
                float& out = t < taps ? weightGradient[c * taps + t] : biasGradient[c];
                out = acc ? out + sum : sum;
            }
        }
    });
}

}  // namespace

void convolutionWeightGradient(const ConvolutionWeightGradientParams& p, const float* gradient,
                               const float* source, float* weightGradient, float* biasGradient) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& S = p.source;
    checkCommon(p.batch, p.groups, S.channels, E.channels, p.kernelWidth, p.kernelHeight,
                p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(E, "gradient");
    checkLayout(S, "source");
    const bool doW = p.computeWeights != 0, doB = p.computeBiases != 0;
    if (doW && !weightGradient) invalid("computeWeights is set but the weight gradient buffer is null");
    if (doB && !biasGradient) invalid("computeBiases is set but the bias gradient buffer is null");
    if (!doW && !doB) return;

    const int G = p.groups, Cig = S.channels / G, Cog = E.channels / G;
    if (Cig == 1 && Cog == 1) {
        weightGradientDepthwise(p, gradient, source, weightGradient, biasGradient);
        return;
    }
    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;            // weight row length per output channel
    const int nW = doW ? Kg : 0;             // columns of P holding patch values
    const int Ncols = roundUp(nW + (doB ? 1 : 0), kNR);  // + the ones column for biases
    const int CogPad = roundUp(Cog, kMR);

    // total[g][oo][j]: the running sums (float, one owner per entry).
    std::vector<float> total(size_t(G) * CogPad * Ncols, 0.0f);

    const int64_t pixelsPerImage = int64_t(E.width) * E.height;
    const int64_t pixels = int64_t(p.batch) * pixelsPerImage;
    if (pixels > 0) {
        // Blocks are packed as micro-kernel panels so that the product streams contiguously:
        // patches  P[g][column tile][pixel][kNR]   (columns: taps x channels, then the ones column)
        // gradient E[g][row tile][pixel][kMR]      (rows: the group's output channels)
        const int colTiles = Ncols / kNR;
        const int rowTiles = CogPad / kMR;
        const int64_t rowP = int64_t(G) * Ncols;  // floats per pixel in P
        // Pixels per block (~1 MB of patches). It depends on the problem only, never on the
        // thread count, so the order of the reduction is fixed.
        const int PB = int(std::min<int64_t>(4096, std::max<int64_t>(128, (int64_t(1) << 18) / rowP)));
        std::vector<float> pblk(size_t(PB) * rowP);
        std::vector<float> eblk(size_t(PB) * G * CogPad);
        auto pAt = [&](int g, int j, int64_t m) {
            return pblk.data() + ((int64_t(g) * colTiles + j / kNR) * PB + m) * kNR + j % kNR;
        };
        auto eAt = [&](int g, int oo, int64_t m) {
            return eblk.data() + ((int64_t(g) * rowTiles + oo / kMR) * PB + m) * kMR + oo % kMR;
        };

        const int colChunk = 8;  // column tiles per work item
        const int colChunks = ceilDiv(colTiles, colChunk);
        const int64_t gemmItems = int64_t(G) * rowTiles * colChunks;

        for (int64_t base = 0; base < pixels; base += PB) {
            const int mb = int(std::min<int64_t>(PB, pixels - base));
            parallelFor(mb, 8, [&](int64_t begin, int64_t end) {
                std::vector<float> row(static_cast<size_t>(Ncols));
                for (int64_t m = begin; m < end; ++m) {
                    const int64_t pix = base + m;
                    const int n = int(pix / pixelsPerImage);
                    const int64_t r = pix % pixelsPerImage;
                    const int j = int(r / E.width), i = int(r % E.width);
                    const float* e = gradient + pixelIndex(E, n, j, i);
                    for (int g = 0; g < G; ++g) {
                        for (int oo = 0; oo < CogPad; ++oo) *eAt(g, oo, m) = oo < Cog ? e[g * Cog + oo] : 0.0f;
                        // One patch row, then scattered into its column panels.
                        float* dst = row.data();
                        if (doW)
                            for (int ky = 0; ky < kH; ++ky) {
                                const int sy = p.windowTopY + p.strideY * j + p.dilationY * ky;
                                for (int kx = 0; kx < kW; ++kx, dst += Cig) {
                                    const int sx = p.windowLeftX + p.strideX * i + p.dilationX * kx;
                                    const float* px = sourcePixel(source, S, n, sy, sx, p.edgeMode);
                                    copyChannels(dst, px ? px + g * Cig : nullptr, Cig);
                                }
                            }
                        if (doB) *dst++ = 1.0f;
                        std::fill(dst, row.data() + Ncols, 0.0f);
                        for (int t = 0; t < colTiles; ++t)
                            std::memcpy(pAt(g, t * kNR, m), row.data() + t * kNR, sizeof(float) * kNR);
                    }
                }
            });

            parallelFor(gemmItems, 1, [&](int64_t begin, int64_t end) {
                for (int64_t it = begin; it < end; ++it) {
                    const int cc = int(it % colChunks);
                    const int64_t rest = it / colChunks;
                    const int rt = int(rest % rowTiles), g = int(rest / rowTiles);
                    const int t1 = std::min(colTiles, (cc + 1) * colChunk);
                    const float* A = eAt(g, rt * kMR, 0);
                    float* C = total.data() + (size_t(g) * CogPad + size_t(rt) * kMR) * Ncols;
                    for (int t = cc * colChunk; t < t1; ++t)
                        microKernel(mb, A, 1, kMR, pAt(g, t * kNR, 0), kNR, C + t * kNR, Ncols);
                }
            });
        }
    }

    // Write (or add) the results; the partition is over output channels.
    const bool acc = p.accumulate != 0;
    parallelFor(int64_t(G) * Cog, 16, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
            const int g = int(o / Cog), oo = int(o % Cog);
            const float* t = total.data() + (size_t(g) * CogPad + oo) * Ncols;
            if (doW) {
                float* w = weightGradient + o * Kg;
                if (acc)
                    for (int k = 0; k < Kg; ++k) w[k] += t[k];
                else
                    std::memcpy(w, t, sizeof(float) * size_t(Kg));
            }
            if (doB) biasGradient[o] = acc ? biasGradient[o] + t[nW] : t[nW];
        }
    });
}

}  // namespace mpsgrad::cpu
