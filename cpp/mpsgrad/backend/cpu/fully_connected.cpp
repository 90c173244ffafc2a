// CPU backend: convolutions with one output pixel per image (fully connected layers, and any
// convolution whose window fits the source once) as single matrix products over the batch.
//
// With one output pixel per image, the im2col matrix of the batch has one row per image (the
// window's taps, K = kH·kW·Cin floats), so the forward pass, the data gradient and the weight
// gradient are each ONE product of the batch's N rows with the OHWI weights (O x K):
//
//   forward          Y  (N x O) = P (N x K) · Wᵀ
//   data gradient    T  (N x K) = E (N x O) · W,   dX = T scattered onto the window's pixels
//   weight gradient  dW (O x K) = Eᵀ (O x N) · P,  dB = column sums of E
//
// P is the source read in place when the window is exactly the (densely stored) image, else
// gathered once per image. The products are cut into column tiles whose size depends only on
// the problem (never on the thread count); each tile is one single-threaded sgemm over the whole
// reduction, run in parallel. Every result element comes from one sgemm call with the same
// arguments whatever the thread count, so results are bitwise reproducible (and equal on any
// thread count). Tiles are at least 128 columns wide: each tile packs the whole shared operand
// again (64-column tiles packed the 64 x 2048 inputs of the 1x1x2048->1000 layer 16 times), and
// the weight gradient has no row tiles (they repacked P once per 256 output channels).
#include "fully_connected.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blas.h"
#include "conv_epilogue.h"
#include "parallel.h"

namespace mpsgrad::cpu::fc {
namespace {

inline int64_t ceilDiv(int64_t v, int64_t m) { return (v + m - 1) / m; }

// The threads worth using for a product of `macs` multiply-adds: one per two million, as
// convolution.cpp's threadsFor (a hand-off to a pool thread costs tens of microseconds). It
// decides only whether the work is handed out, never how it is cut.
int threadsFor(int64_t macs) {
    constexpr int64_t kMacsPerThread = int64_t(2) << 20;
    return int(std::max<int64_t>(1, std::min<int64_t>(threadCount(), macs / kMacsPerThread)));
}

// Columns per tile of a product with `columns` output columns: at most 16 tiles (enough to
// balance the thread counts this backend sees), at least 128 columns, so that packing the shared
// operand once per tile stays a small part of the tile's product.
int64_t tileColumns(int64_t columns) {
    return std::min(columns, std::max<int64_t>(128, ceilDiv(ceilDiv(columns, 16), 16) * 16));
}

// The window of one output pixel: source pixel (windowTopY + dY·ky, windowLeftX + dX·kx) is tap (ky, kx).
struct Window {
    const ImageLayout& source;
    int32_t left, top, kW, kH, dX, dY, edgeMode;

    // The source pixel of tap (ky, kx) of image n, or null when it reads zero (edge mode zero).
    const float* tap(const float* base, int64_t n, int32_t ky, int32_t kx) const {
        int32_t y = top + dY * ky, x = left + dX * kx;
        if (y < 0 || y >= source.height || x < 0 || x >= source.width) {
            if (edgeMode != kEdgeClamp || source.width <= 0 || source.height <= 0) return nullptr;
            y = std::min(std::max(y, 0), source.height - 1);
            x = std::min(std::max(x, 0), source.width - 1);
        }
        return base + n * int64_t(source.imageStride) + (int64_t(y) * source.width + x) * source.pixelStride +
               source.channelOffset;
    }
    // True when the taps are the image's pixels in memory order with no gap: row n of P is image n.
    bool readsImageInPlace() const {
        return left == 0 && top == 0 && dX == 1 && dY == 1 && kW == source.width && kH == source.height &&
               source.pixelStride == source.channels;
    }
};

// P: the N x K im2col rows (pointer and row stride), in place or gathered into `scratch` on `threads` threads.
const float* im2colRows(const Window& w, const float* source, int64_t N, int threads, std::vector<float>& scratch,
                        int64_t& ld) {
    const int64_t C = w.source.channels, K = int64_t(w.kW) * w.kH * C;
    if (w.readsImageInPlace()) {
        ld = w.source.imageStride;
        return source + w.source.channelOffset;
    }
    scratch.resize(size_t(N * K));
    parallelFor(N, threads > 1 ? 1 : N, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            float* row = scratch.data() + n * K;
            for (int32_t ky = 0; ky < w.kH; ++ky)
                for (int32_t kx = 0; kx < w.kW; ++kx, row += C) {
                    const float* px = w.tap(source, n, ky, kx);
                    if (px) std::memcpy(row, px, sizeof(float) * size_t(C));
                    else std::fill(row, row + C, 0.0f);
                }
        }
    });
    ld = K;
    return scratch.data();
}

}  // namespace

bool forward(const ConvolutionParams& p, const float* source, const float* weights, const float* biases,
             const float* neuronData, float* destination, float* preactivation) {
    if (!handles(p)) return false;
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    const int64_t N = p.batch, O = D.channels, K = int64_t(p.kernelWidth) * p.kernelHeight * S.channels;
    const Window w{S, p.windowLeftX, p.windowTopY, p.kernelWidth, p.kernelHeight, p.dilationX, p.dilationY, p.edgeMode};
    std::vector<float> scratch;
    int64_t ldp = 0;
    const int threads = threadsFor(N * O * K);
    const float* P = im2colRows(w, source, N, threads, scratch, ldp);

    std::vector<float> out(size_t(N * O));
    const int64_t OT = tileColumns(O);
    const Epilogue epilogue = makeEpilogue(p.neuron, p.hasBias ? biases : nullptr, neuronData);
    parallelFor(ceilDiv(O, OT), threads > 1 ? 1 : ceilDiv(O, OT), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t o0 = t * OT, ot = std::min(OT, O - o0);
            // out[n][o] = Σ_k P[n][k]·W[o][k]: the OHWI weights are Bᵀ as stored.
            blas::sgemm(false, true, int(N), int(ot), int(K), 1.0f, P, int(ldp), weights + o0 * K, int(K), 0.0f,
                        out.data() + o0, int(O));
            // Epilogue of this tile: value = bias + sum (as the convolution path), then the neuron.
            for (int64_t n = 0; n < N; ++n) {
                float* v = out.data() + n * O;
                float* dst = destination + n * int64_t(D.imageStride) +
                             (int64_t(p.clipY) * D.width + p.clipX) * D.pixelStride + D.channelOffset;
                float* pre = p.writePreactivation ? preactivation + n * int64_t(p.preactivation.imageStride) +
                                                        p.preactivation.channelOffset
                                                  : nullptr;
                epilogue(v + o0, int(o0), int(ot), dst + o0, pre ? pre + o0 : nullptr);
            }
        }
    });
    return true;
}

bool dataGradient(const ConvolutionDataGradientParams& p, const float* gradient, const float* weights,
                  float* destination) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    if (!handles(p)) return false;
    const int64_t N = p.batch, O = E.channels, C = D.channels;
    const int32_t kW = p.kernelWidth, kH = p.kernelHeight;
    const int64_t K = int64_t(kW) * kH * C;
    // Z (the zero-inserted gradient) is nonzero only at (0, 0), so clip pixel (x, y) meets the
    // rotated tap t with windowOrigin + pixel + dilation·t = 0, i.e. weight tap kH − 1 − t.
    auto weightTap = [](int32_t origin, int32_t pixel, int32_t dilation, int32_t size) -> int32_t {
        const int32_t z = -(origin + pixel);
        if (z < 0 || z % dilation != 0 || z / dilation >= size) return -1;
        return size - 1 - z / dilation;
    };
    // In place: the clip is the whole, densely stored destination and clip pixel (x, y) is weight tap (y, x).
    bool inPlace = p.clipX == 0 && p.clipY == 0 && p.clipWidth == kW && p.clipHeight == kH && D.width == kW &&
                   D.height == kH && D.pixelStride == C;
    for (int32_t y = 0; inPlace && y < kH; ++y) inPlace = weightTap(p.windowTopY, y, p.dilationY, kH) == y;
    for (int32_t x = 0; inPlace && x < kW; ++x) inPlace = weightTap(p.windowLeftX, x, p.dilationX, kW) == x;

    std::vector<float> scratch;
    float* T = inPlace ? destination : (scratch.resize(size_t(N * K)), scratch.data());
    const int64_t ldt = inPlace ? D.imageStride : K;
    const int threads = threadsFor(N * O * K);
    const int64_t KT = tileColumns(K);
    parallelFor(ceilDiv(K, KT), threads > 1 ? 1 : ceilDiv(K, KT), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t k0 = t * KT, kt = std::min(KT, K - k0);
            // T[n][k] = Σ_o E[n][o]·W[o][k]; row n of E is pixel (0, 0) of image n.
            blas::sgemm(false, false, int(N), int(kt), int(O), 1.0f, gradient + E.channelOffset, E.imageStride,
                        weights + k0, int(K), 0.0f, T + k0, int(ldt));
        }
    });
    if (inPlace) return true;
    parallelFor(N * p.clipHeight, threads > 1 ? 1 : N * p.clipHeight, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            const int32_t ty = weightTap(p.windowTopY, y, p.dilationY, kH);
            for (int32_t x = 0; x < p.clipWidth; ++x) {
                const int32_t tx = weightTap(p.windowLeftX, x, p.dilationX, kW);
                float* dst = destination + n * int64_t(D.imageStride) +
                             (int64_t(p.clipY + y) * D.width + p.clipX + x) * D.pixelStride + D.channelOffset;
                if (ty < 0 || tx < 0) std::fill(dst, dst + C, 0.0f);
                else std::memcpy(dst, T + n * K + (int64_t(ty) * kW + tx) * C, sizeof(float) * size_t(C));
            }
        }
    });
    return true;
}

bool weightGradient(const ConvolutionWeightGradientParams& p, const float* gradient, const float* source,
                    float* weightGradient, float* biasGradient) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& S = p.source;
    if (!handles(p)) return false;
    const int64_t N = p.batch, O = E.channels, K = int64_t(p.kernelWidth) * p.kernelHeight * S.channels;
    const bool accumulate = p.accumulate != 0;
    const float* e = gradient + E.channelOffset;  // row n: pixel (0, 0) of image n, stride E.imageStride
    if (p.computeBiases) {
        // dB[o] = Σ_n E[n][o], images in order.
        std::vector<float> sum(size_t(O), 0.0f);
        for (int64_t n = 0; n < N; ++n) {
            const float* row = e + n * int64_t(E.imageStride);
            for (int64_t o = 0; o < O; ++o) sum[size_t(o)] += row[o];
        }
        for (int64_t o = 0; o < O; ++o) biasGradient[o] = accumulate ? biasGradient[o] + sum[size_t(o)] : sum[size_t(o)];
    }
    if (!p.computeWeights) return true;
    const Window w{S, p.windowLeftX, p.windowTopY, p.kernelWidth, p.kernelHeight, p.dilationX, p.dilationY, p.edgeMode};
    std::vector<float> scratch;
    int64_t ldp = 0;
    const int threads = threadsFor(N * O * K);
    const float* P = im2colRows(w, source, N, threads, scratch, ldp);
    const int64_t KT = tileColumns(K);
    parallelFor(ceilDiv(K, KT), threads > 1 ? 1 : ceilDiv(K, KT), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t k0 = t * KT, kt = std::min(KT, K - k0);
            // dW[o][k] (+)= Σ_n E[n][o]·P[n][k]
            blas::sgemm(true, false, int(O), int(kt), int(N), 1.0f, e, E.imageStride, P + k0, int(ldp),
                        accumulate ? 1.0f : 0.0f, weightGradient + k0, int(K));
        }
    });
    return true;
}

}  // namespace mpsgrad::cpu::fc
