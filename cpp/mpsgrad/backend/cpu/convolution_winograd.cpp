// CPU backend: Winograd F(2x2, 3x3) convolution forward (Lavin & Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2015).
//
// A 2x2 block of output pixels needs the 4x4 source pixels d under its windows. With
//
//   B^T = | 1  0 -1  0 |    G = | 1    0    0   |    A^T = | 1  1  1  0 |
//         | 0  1  1  0 |        | 1/2  1/2  1/2 |          | 0  1 -1 -1 |
//         | 0 -1  1  0 |        | 1/2 -1/2  1/2 |
//         | 0  1  0 -1 |        | 0    0    1   |
//
// the 2x2 outputs of output channel o are  A^T [ sum_c (G g_oc G^T) .* (B^T d_c B) ] A,  g_oc the
// 3x3 kernel of (o, c): the 16 element-wise products, summed over the input channels, are 16
// matrix products  M_e = V_e U_e  (V_e: tiles x Cin, U_e^T: Cin x Cout, e = one of the 4x4 positions).
// That is 16 multiply-adds per tile and channel pair instead of 4 * 9 = 36: 2.25x fewer.
//
//   1. the weights are transformed once per call into U[e][o][c] (16 * Cout * Cin floats);
//   2. the output tiles (2x2 clip pixels, counted across images) are cut into blocks whose size
//      depends only on the problem and the thread count; per block, each tile's 4x4 source
//      pixels are read with the edge mode (as the im2col path does) and transformed into
//      V[e][t][c], then 16 single-threaded sgemms give M[e][t][o];
//   3. A^T m A gives each tile's 2x2 outputs, which go through the convolution's epilogue (bias,
//      preactivation, neuron, destination channels) for the pixels that lie inside the clip.
//
// Blocks run in parallel on the backend's pool; every output comes from one block, so results
// are bitwise reproducible for a given thread count. The transforms add roundings, the shorter
// sums remove some: against a float64 oracle the error measured 0.5-2x the im2col product's
// (docs/performance.md).
#include "convolution_winograd.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "blas.h"
#include "buffer_cache.h"
#include "conv_epilogue.h"
#include "conv_geometry.h"
#include "half_simd.h"
#include "parallel.h"

namespace mpsgrad::cpu::winograd {
namespace {

constexpr int kTile = 4;                  // source pixels per tile side
constexpr int kOut = 2;                   // output pixels per tile side
constexpr int kPoints = kTile * kTile;    // the 16 transform positions e

using conv::ceilDiv64;
using conv::pixelIndex;
using conv::sourcePixel;
using conv::threadsFor;

using Scratch = ScratchFloats;

// MPSGRAD_CONV_WINOGRAD=0 switches the path off (A/B measurements, error comparisons).
bool switchedOff() {
    const char* v = std::getenv("MPSGRAD_CONV_WINOGRAD");
    return v && v[0] == '0' && v[1] == '\0';
}

// Element-wise passes over `n` channels, written as single loops so that they vectorize.
inline void sub2(const float* __restrict a, const float* __restrict b, float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = a[k] - b[k];
}
inline void add2(const float* __restrict a, const float* __restrict b, float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = a[k] + b[k];
}
inline void addAdd(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                   float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = a[k] + b[k] + c[k];
}
inline void subSub(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                   float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = a[k] - b[k] - c[k];
}

inline void halfSum(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                    float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = 0.5f * (a[k] + b[k] + c[k]);
}
inline void halfAlt(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                    float* __restrict out, int n) {
    for (int k = 0; k < n; ++k) out[k] = 0.5f * (a[k] - b[k] + c[k]);
}

// Channels per pass of the tile transforms: their 16 intermediate rows stay in the L1 cache.
constexpr int kChannelChunk = 64;

// V[e][c] = (B^T d B)[e] for the 16 source pixels d[i*4 + j] (row i, column j), channels [0, C);
// the V rows are `stride` floats apart.
void transformInputTile(const float* const* d, int C, float* V, size_t stride) {
    float r[kPoints][kChannelChunk];  // B^T d, row i*4 + j
    for (int c0 = 0; c0 < C; c0 += kChannelChunk) {
        const int n = std::min(kChannelChunk, C - c0);
        for (int j = 0; j < 4; ++j) {
            const float *d0 = d[j] + c0, *d1 = d[4 + j] + c0, *d2 = d[8 + j] + c0, *d3 = d[12 + j] + c0;
            sub2(d0, d2, r[0 + j], n);
            add2(d1, d2, r[4 + j], n);
            sub2(d2, d1, r[8 + j], n);
            sub2(d1, d3, r[12 + j], n);
        }
        for (int i = 0; i < 4; ++i) {  // (B^T d) B
            const float *r0 = r[i * 4], *r1 = r[i * 4 + 1], *r2 = r[i * 4 + 2], *r3 = r[i * 4 + 3];
            sub2(r0, r2, V + size_t(i * 4 + 0) * stride + c0, n);
            add2(r1, r2, V + size_t(i * 4 + 1) * stride + c0, n);
            sub2(r2, r1, V + size_t(i * 4 + 2) * stride + c0, n);
            sub2(r1, r3, V + size_t(i * 4 + 3) * stride + c0, n);
        }
    }
}

// out[(y*2 + x)*C + o] = (A^T m A)[y][x] for m[e] = M[e*stride + o], channels [0, C).
void transformOutputTile(const float* M, size_t stride, int C, float* out) {
    float r[2 * 4][kChannelChunk];  // A^T m, row i*4 + j
    for (int c0 = 0; c0 < C; c0 += kChannelChunk) {
        const int n = std::min(kChannelChunk, C - c0);
        for (int j = 0; j < 4; ++j) {
            const float* m0 = M + size_t(0 + j) * stride + c0;
            const float* m1 = M + size_t(4 + j) * stride + c0;
            const float* m2 = M + size_t(8 + j) * stride + c0;
            const float* m3 = M + size_t(12 + j) * stride + c0;
            addAdd(m0, m1, m2, r[j], n);
            subSub(m1, m2, m3, r[4 + j], n);
        }
        for (int i = 0; i < 2; ++i) {  // (A^T m) A
            const float *r0 = r[i * 4], *r1 = r[i * 4 + 1], *r2 = r[i * 4 + 2], *r3 = r[i * 4 + 3];
            addAdd(r0, r1, r2, out + size_t(i * 2 + 0) * C + c0, n);
            subSub(r1, r2, r3, out + size_t(i * 2 + 1) * C + c0, n);
        }
    }
}

// U[e][o][c] = (G g G^T)[e] for g[ky][kx] = W[o][ky][kx][c] (OHWI): each output channel's rows
// of U are computed from its own weights, contiguous along c, so the passes vectorize (a scalar
// transform into [e][c][o] cost as much as the products of a 64-tile layer). Output channels are
// split across `threads` threads.
void transformWeights(const float* weights, int Cin, int Cout, int threads, float* U) {
    const size_t plane = size_t(Cin) * Cout;
    parallelFor(Cout, (Cout + threads - 1) / threads, [&](int64_t begin, int64_t end) {
        float t[2][3][kChannelChunk];  // rows 1 and 2 of G g (rows 0 and 3 are rows 0 and 2 of g)
        for (int64_t o = begin; o < end; ++o)
            for (int c0 = 0; c0 < Cin; c0 += kChannelChunk) {
                const int n = std::min(kChannelChunk, Cin - c0);
                auto g = [&](int k) { return weights + (size_t(o) * 9 + size_t(k)) * Cin + size_t(c0); };
                for (int j = 0; j < 3; ++j) {
                    halfSum(g(j), g(3 + j), g(6 + j), t[0][j], n);
                    halfAlt(g(j), g(3 + j), g(6 + j), t[1][j], n);
                }
                for (int i = 0; i < 4; ++i) {  // (G g) G^T, row i of G g
                    const float* r0 = i == 0 ? g(0) : i == 3 ? g(6) : t[i - 1][0];
                    const float* r1 = i == 0 ? g(1) : i == 3 ? g(7) : t[i - 1][1];
                    const float* r2 = i == 0 ? g(2) : i == 3 ? g(8) : t[i - 1][2];
                    float* u = U + size_t(o) * Cin + size_t(c0);
                    std::memcpy(u + size_t(i * 4 + 0) * plane, r0, sizeof(float) * size_t(n));
                    halfSum(r0, r1, r2, u + size_t(i * 4 + 1) * plane, n);
                    halfAlt(r0, r1, r2, u + size_t(i * 4 + 2) * plane, n);
                    std::memcpy(u + size_t(i * 4 + 3) * plane, r2, sizeof(float) * size_t(n));
                }
            }
    });
}

// The source pixels of FLOAT16 tiles, widened to float32 a strip at a time: the 4 source rows
// under a run of up to maxTiles() neighbouring tiles of one tile row (2 * tiles + 2 columns), so
// that a pixel shared by two tiles of the run is widened once, with one conversion call
// (widening each tile's 16 pixels, one call per pixel, made the 32-channel layers 13 % slower
// than on FLOAT32 storage). A strip holds at most kStripFloats floats.
class HalfStrip {
public:
    static constexpr int64_t kStripFloats = int64_t(1) << 15;
    static constexpr int kMaxTiles = 16;

    explicit HalfStrip(int channels)
        : channels_(channels),
          maxTiles_(int(std::max<int64_t>(
              1, std::min<int64_t>(kMaxTiles, (kStripFloats / (int64_t(kTile) * channels) - 2) / 2)))),
          floats_(size_t(kTile) * (2 * maxTiles_ + 2) * channels) {}

    // Widens the strip of `count` (<= maxTiles()) tiles whose first reads source pixel (sy0, sx0) of image n.
    void widen(const conv::ConvSource& source, const ImageLayout& S, int n, int sy0, int sx0, int count,
               int edgeMode) {
        columns_ = 2 * count + 2;
        const uint16_t* px[kTile * (2 * kMaxTiles + 2)];
        for (int i = 0; i < kTile; ++i)
            for (int j = 0; j < columns_; ++j)
                px[i * columns_ + j] = sourcePixel(source.halves(), S, n, sy0 + i, sx0 + j, edgeMode);
        gatherHalvesToFloats(px, kTile * columns_, channels_, floats_.data());
    }
    // d[i*4 + j] of the k-th tile of the strip.
    void tile(int k, const float** d) const {
        for (int i = 0; i < kTile; ++i)
            for (int j = 0; j < kTile; ++j)
                d[i * kTile + j] = floats_.data() + (size_t(i) * columns_ + size_t(2 * k + j)) * channels_;
    }
    int maxTiles() const { return maxTiles_; }

private:
    int channels_, maxTiles_, columns_ = 0;
    std::vector<float> floats_;
};

// Tiles per block: V and M of a block (16 * tiles * (Cin + Cout) floats) about 1 MB, so they
// stay in the cache between the transforms and the products, with at least 64 tiles (the BLAS
// packs U_e once per product: fewer rows do not amortise that; 64 rather than 32 took 9 % off the
// 256->256 14x14 layer) and at most 256; with several threads, small enough to give each thread
// two blocks (down to 16 tiles) and as many blocks as a multiple of the thread count.
int blockTiles(int64_t tiles, int Cin, int Cout, int threads) {
    int64_t tb = (int64_t(1) << 18) / (int64_t(kPoints) * (Cin + Cout));
    tb = std::max<int64_t>(64, std::min<int64_t>(256, tb));
    if (threads > 1) tb = std::min(tb, std::max<int64_t>(16, ceilDiv64(tiles, 2 * int64_t(threads))));
    tb = std::max<int64_t>(1, std::min(tiles, tb));
    if (threads > 1) {
        const int64_t blocks = ceilDiv64(ceilDiv64(tiles, tb), threads) * threads;
        tb = std::max<int64_t>(1, ceilDiv64(tiles, blocks));
    }
    return int(tb);
}

}  // namespace

// Measured on one thread (docs/performance.md): from 16 channels each way the products' savings
// pay for the tile transforms once there are about 32 tiles to share the weight transform; the
// transformed weights (16 * Cin * Cout floats, written then read back by the products) need more
// tiles once they outgrow the cache (256->256 on 32 tiles was 22 % slower, on 64 2-19 % faster;
// 512->512 on 64 tiles 3-5 % slower, on 128 12-17 % faster): Cin * Cout / 1024 tiles, which is
// conservative for 512 channels.
bool eligible(const ConvolutionParams& p) {
    constexpr int kMinChannels = 16;
    if (p.kernelWidth != 3 || p.kernelHeight != 3 || p.strideX != 1 || p.strideY != 1 ||
        p.dilationX != 1 || p.dilationY != 1 || p.groups != 1)
        return false;
    const int Cin = p.source.channels, Cout = p.destination.channels;
    if (Cin < kMinChannels || Cout < kMinChannels) return false;
    const int64_t tiles = int64_t(p.batch) * ((p.clipHeight + 1) / 2) * ((p.clipWidth + 1) / 2);
    if (tiles < std::max<int64_t>(32, int64_t(Cin) * Cout / 1024)) return false;
    return !switchedOff();
}

void forward(const ConvolutionParams& p, const conv::ConvSource& source, const float* weights,
             const Epilogue& epilogue, const conv::ConvDestination& destination, float* preactivation) {
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    const int Cin = S.channels, Cout = D.channels;
    const int tilesX = (p.clipWidth + kOut - 1) / kOut, tilesY = (p.clipHeight + kOut - 1) / kOut;
    const int64_t tilesPerImage = int64_t(tilesX) * tilesY;
    const int64_t tiles = int64_t(p.batch) * tilesPerImage;

    const int threads = threadsFor(tiles * kPoints * Cin * Cout);
    const Scratch U(size_t(kPoints) * Cin * Cout);
    transformWeights(weights, Cin, Cout, threads, U.data());
    const int TB = blockTiles(tiles, Cin, Cout, threads);
    const int64_t blocks = ceilDiv64(tiles, TB);
    const std::vector<float> zeros(size_t(Cin), 0.0f);  // what a pixel outside reads (edge zero)

    parallelFor(blocks, threads > 1 ? 1 : blocks, [&](int64_t begin, int64_t end) {
        const Scratch V(size_t(kPoints) * TB * Cin), M(size_t(kPoints) * TB * Cout);
        std::vector<float> out(size_t(kOut * kOut) * Cout), row(destination.half ? size_t(Cout) : 0);
        // FLOAT16 tiles' pixels, widened (FLOAT32 pixels are read in place).
        HalfStrip strip(source.half ? Cin : 1);
        int stripTx0 = 0, stripEnd = 0;  // the strip holds tiles [stripTx0, stripEnd) of the current tile row
        const float* d[kPoints];
        for (int64_t blk = begin; blk < end; ++blk) {
            const int64_t t0 = blk * TB;
            const int tb = int(std::min<int64_t>(TB, tiles - t0));
            const size_t vStride = size_t(TB) * Cin, mStride = size_t(TB) * Cout;

            for (int t = 0; t < tb; ++t) {
                const int64_t q = t0 + t;
                const int n = int(q / tilesPerImage);
                const int ty = int((q % tilesPerImage) / tilesX), tx = int(q % tilesX);
                const int sy0 = p.windowTopY + kOut * ty, sx0 = p.windowLeftX + kOut * tx;
                if (!source.half) {
                    for (int i = 0; i < kTile; ++i)
                        for (int j = 0; j < kTile; ++j) {
                            const float* px = sourcePixel(source.floats(), S, n, sy0 + i, sx0 + j, p.edgeMode);
                            d[i * kTile + j] = px ? px : zeros.data();
                        }
                } else {
                    if (t == 0 || tx == 0 || tx >= stripEnd) {  // a new run of tiles
                        const int count = std::min({strip.maxTiles(), tilesX - tx, tb - t});
                        strip.widen(source, S, n, sy0, sx0, count, p.edgeMode);
                        stripTx0 = tx;
                        stripEnd = tx + count;
                    }
                    strip.tile(tx - stripTx0, d);
                }
                transformInputTile(d, Cin, V.data() + size_t(t) * Cin, vStride);
            }

            for (int e = 0; e < kPoints; ++e)
                blas::sgemm(false, true, tb, Cout, Cin, 1.0f, V.data() + size_t(e) * vStride, Cin,
                            U.data() + size_t(e) * Cin * Cout, Cin, 0.0f, M.data() + size_t(e) * mStride, Cout);

            for (int t = 0; t < tb; ++t) {
                const int64_t q = t0 + t;
                const int n = int(q / tilesPerImage);
                const int ty = int((q % tilesPerImage) / tilesX), tx = int(q % tilesX);
                transformOutputTile(M.data() + size_t(t) * Cout, mStride, Cout, out.data());
                for (int i = 0; i < kOut; ++i)
                    for (int j = 0; j < kOut; ++j) {
                        const int y = kOut * ty + i, x = kOut * tx + j;
                        if (y >= p.clipHeight || x >= p.clipWidth) continue;  // a partial tile
                        float* pre = p.writePreactivation ? preactivation + pixelIndex(p.preactivation, n, y, x)
                                                          : nullptr;
                        destination.write(epilogue, out.data() + size_t(i * kOut + j) * Cout, 0, Cout,
                                          pixelIndex(D, n, p.clipY + y, p.clipX + x), pre, row.data());
                    }
            }
        }
    });
}

}  // namespace mpsgrad::cpu::winograd
