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
// matrix products  M_e = V_e U_e  (V_e: tiles x Cin, U_e: Cin x Cout, e = one of the 4x4 positions).
// That is 16 multiply-adds per tile and channel pair instead of 4 * 9 = 36: 2.25x fewer.
//
//   1. the weights are transformed once per call into U[e][c][o] (16 * Cin * Cout floats);
//   2. the output tiles (2x2 clip pixels, counted across images) are cut into blocks whose size
//      depends only on the problem and the thread count; per block, each tile's 4x4 source
//      pixels are read with the edge mode (as the im2col path does) and transformed into
//      V[e][t][c], then 16 single-threaded sgemms give M[e][t][o];
//   3. A^T m A gives each tile's 2x2 outputs, which go through the convolution's epilogue (bias,
//      preactivation, neuron, destination channels) for the pixels that lie inside the clip.
//
// Blocks run in parallel on the backend's pool; every output comes from one block, so results
// are bitwise reproducible for a given thread count. The transforms add rounding: the measured
// error is in docs/performance.md (a few times that of the im2col product, well within 1e-4).
#include "convolution_winograd.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "blas.h"
#include "conv_epilogue.h"
#include "parallel.h"

namespace mpsgrad::cpu::winograd {
namespace {

constexpr int kTile = 4;                  // source pixels per tile side
constexpr int kOut = 2;                   // output pixels per tile side
constexpr int kPoints = kTile * kTile;    // the 16 transform positions e

inline int64_t ceilDiv64(int64_t v, int64_t m) { return (v + m - 1) / m; }
inline int clampInt(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Offset in floats of element (n, y, x, channel 0) of a layout (as convolution.cpp's).
inline int64_t pixelIndex(const ImageLayout& l, int n, int y, int x) {
    return int64_t(n) * l.imageStride + (int64_t(y) * l.width + x) * l.pixelStride + l.channelOffset;
}

// Source pixel read at (sy, sx) under the edge mode, null for "reads zero" (as convolution.cpp's).
inline const float* sourcePixel(const float* source, const ImageLayout& s, int n, int sy, int sx, int edgeMode) {
    if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) {
        if (edgeMode != kEdgeClamp || s.width <= 0 || s.height <= 0) return nullptr;
        sy = clampInt(sy, 0, s.height - 1);
        sx = clampInt(sx, 0, s.width - 1);
    }
    return source + pixelIndex(s, n, sy, sx);
}

// MPSGRAD_CONV_WINOGRAD=0 switches the path off (A/B measurements, error comparisons).
bool switchedOff() {
    const char* v = std::getenv("MPSGRAD_CONV_WINOGRAD");
    return v && v[0] == '0' && v[1] == '\0';
}

// U[e][c][o] = (G g G^T)[e] for g = W[o][.][.][c] (OHWI). Parallel over input channels, each
// writing its own rows of U.
void transformWeights(const float* weights, int Cin, int Cout, float* U) {
    const size_t plane = size_t(Cin) * Cout;
    parallelFor(Cin, std::max(1, Cin / threadCount()), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c)
            for (int o = 0; o < Cout; ++o) {
                const float* w = weights + size_t(o) * 9 * Cin + size_t(c);
                float g[3][3];
                for (int k = 0; k < 9; ++k) g[k / 3][k % 3] = w[size_t(k) * Cin];
                float t[4][3];  // G g
                for (int j = 0; j < 3; ++j) {
                    t[0][j] = g[0][j];
                    t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
                    t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
                    t[3][j] = g[2][j];
                }
                float* u = U + size_t(c) * Cout + size_t(o);
                for (int i = 0; i < 4; ++i) {  // (G g) G^T
                    u[size_t(i * 4 + 0) * plane] = t[i][0];
                    u[size_t(i * 4 + 1) * plane] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                    u[size_t(i * 4 + 2) * plane] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                    u[size_t(i * 4 + 3) * plane] = t[i][2];
                }
            }
    });
}

// V[e][c] = (B^T d B)[e] for the 16 source pixels d[i*4 + j] (row i, column j), channels [0, C);
// the V rows are `stride` floats apart. Vectorizes along the channels.
void transformInputTile(const float* const* d, int C, float* __restrict V, size_t stride) {
    for (int c = 0; c < C; ++c) {
        float r[4][4];  // B^T d
        for (int j = 0; j < 4; ++j) {
            const float d0 = d[j][c], d1 = d[4 + j][c], d2 = d[8 + j][c], d3 = d[12 + j][c];
            r[0][j] = d0 - d2;
            r[1][j] = d1 + d2;
            r[2][j] = d2 - d1;
            r[3][j] = d1 - d3;
        }
        for (int i = 0; i < 4; ++i) {  // (B^T d) B
            V[size_t(i * 4 + 0) * stride + c] = r[i][0] - r[i][2];
            V[size_t(i * 4 + 1) * stride + c] = r[i][1] + r[i][2];
            V[size_t(i * 4 + 2) * stride + c] = r[i][2] - r[i][1];
            V[size_t(i * 4 + 3) * stride + c] = r[i][1] - r[i][3];
        }
    }
}

// out[(y*2 + x)*C + o] = (A^T m A)[y][x] for m[e] = M[e*stride + o], channels [0, C).
void transformOutputTile(const float* __restrict M, size_t stride, int C, float* __restrict out) {
    for (int o = 0; o < C; ++o) {
        float m[4][4];
        for (int e = 0; e < kPoints; ++e) m[e / 4][e % 4] = M[size_t(e) * stride + o];
        float r[2][4];  // A^T m
        for (int j = 0; j < 4; ++j) {
            r[0][j] = m[0][j] + m[1][j] + m[2][j];
            r[1][j] = m[1][j] - m[2][j] - m[3][j];
        }
        for (int i = 0; i < 2; ++i) {  // (A^T m) A
            out[size_t(i * 2 + 0) * C + o] = r[i][0] + r[i][1] + r[i][2];
            out[size_t(i * 2 + 1) * C + o] = r[i][1] - r[i][2] - r[i][3];
        }
    }
}

// The threads worth using for `macs` multiply-adds (convolution.cpp's threadsFor rule: one per
// two million).
int threadsFor(int64_t macs) {
    constexpr int64_t kMacsPerThread = int64_t(2) << 20;
    return int(std::max<int64_t>(1, std::min<int64_t>(threadCount(), macs / kMacsPerThread)));
}

// Tiles per block: V and M of a block (16 * tiles * (Cin + Cout) floats) about 1 MB, so they
// stay in the cache between the transforms and the products, with at least 32 tiles (the BLAS
// packs U_e once per product: fewer rows would not amortise that) and at most 256; then as many
// blocks as a multiple of the thread count.
int blockTiles(int64_t tiles, int Cin, int Cout, int threads) {
    int64_t tb = (int64_t(1) << 18) / (int64_t(kPoints) * (Cin + Cout));
    tb = std::max<int64_t>(32, std::min<int64_t>(256, tb));
    if (threads > 1) tb = std::min(tb, std::max<int64_t>(16, ceilDiv64(tiles, 2 * int64_t(threads))));
    tb = std::max<int64_t>(1, std::min(tiles, tb));
    if (threads > 1) {
        const int64_t blocks = ceilDiv64(ceilDiv64(tiles, tb), threads) * threads;
        tb = std::max<int64_t>(1, ceilDiv64(tiles, blocks));
    }
    return int(tb);
}

}  // namespace

// Measured on 2 threads (docs/performance.md): the path pays from 16 channels each way on
// layers with a few hundred output tiles; below, the im2col product is as fast and exact.
bool eligible(const ConvolutionParams& p) {
    constexpr int kMinChannels = 16;
    constexpr int64_t kMinTiles = 64;
    if (p.kernelWidth != 3 || p.kernelHeight != 3 || p.strideX != 1 || p.strideY != 1 ||
        p.dilationX != 1 || p.dilationY != 1 || p.groups != 1)
        return false;
    if (p.source.channels < kMinChannels || p.destination.channels < kMinChannels) return false;
    const int64_t tiles = int64_t(p.batch) * ((p.clipHeight + 1) / 2) * ((p.clipWidth + 1) / 2);
    if (tiles < kMinTiles) return false;
    return !switchedOff();
}

void forward(const ConvolutionParams& p, const float* source, const float* weights, const float* biases,
             const float* neuronData, float* destination, float* preactivation) {
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    const int Cin = S.channels, Cout = D.channels;
    const int tilesX = (p.clipWidth + kOut - 1) / kOut, tilesY = (p.clipHeight + kOut - 1) / kOut;
    const int64_t tilesPerImage = int64_t(tilesX) * tilesY;
    const int64_t tiles = int64_t(p.batch) * tilesPerImage;

    std::vector<float> U(size_t(kPoints) * Cin * Cout);
    transformWeights(weights, Cin, Cout, U.data());

    const int threads = threadsFor(tiles * kPoints * Cin * Cout);
    const int TB = blockTiles(tiles, Cin, Cout, threads);
    const int64_t blocks = ceilDiv64(tiles, TB);
    const Epilogue epilogue = makeEpilogue(p.neuron, p.hasBias ? biases : nullptr, neuronData);
    const std::vector<float> zeros(size_t(Cin), 0.0f);  // what a pixel outside reads (edge zero)

    parallelFor(blocks, threads > 1 ? 1 : blocks, [&](int64_t begin, int64_t end) {
        std::vector<float> V(size_t(kPoints) * TB * Cin), M(size_t(kPoints) * TB * Cout);
        std::vector<float> out(size_t(kOut * kOut) * Cout);
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
                for (int i = 0; i < kTile; ++i)
                    for (int j = 0; j < kTile; ++j) {
                        const float* px = sourcePixel(source, S, n, sy0 + i, sx0 + j, p.edgeMode);
                        d[i * kTile + j] = px ? px : zeros.data();
                    }
                transformInputTile(d, Cin, V.data() + size_t(t) * Cin, vStride);
            }

            for (int e = 0; e < kPoints; ++e)
                blas::sgemm(false, false, tb, Cout, Cin, 1.0f, V.data() + size_t(e) * vStride, Cin,
                            U.data() + size_t(e) * Cin * Cout, Cout, 0.0f, M.data() + size_t(e) * mStride, Cout);

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
                        epilogue(out.data() + size_t(i * kOut + j) * Cout, 0, Cout,
                                 destination + pixelIndex(D, n, p.clipY + y, p.clipX + x), pre);
                    }
            }
        }
    });
}

}  // namespace mpsgrad::cpu::winograd
