// CPU backend: convolution weight and bias gradients (MPSCNNConvolutionGradient's weights and
// biases; metal/convolution_params.h), split from convolution.cpp, whose organisation it shares:
// blocks of pixels packed into panels, one single-threaded sgemm per block and group on the
// system BLAS, results bitwise reproducible for a given thread count.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blas.h"
#include "conv_geometry.h"
#include "conv_im2col.h"
#include "conv_operands.h"
#include "cpu_ops.h"
#include "fully_connected.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using conv::ceilDiv64;
using conv::checkCommon;
using conv::checkLayout;
using conv::ConvSource;
using conv::Float32Copy;
using conv::grainFor;
using conv::invalid;
using conv::layoutElements;
using conv::pixelIndex;
using conv::sourcePixel;
using conv::threadsFor;

}  // namespace

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

void convolutionWeightGradient(const ConvolutionWeightGradientParams& p, const HalfBindings& formats,
                               const void* gradientData, const void* sourceData, float* weightGradient,
                               float* biasGradient) {
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
    if (fc::handles(p) || (Cig == 1 && Cog == 1)) {
        // One gradient pixel per image (fully connected: one product over the batch), or one input
        // and one output channel per group. These paths read FLOAT32 storage in place.
        const Float32Copy e(gradientData, formats.gradient, layoutElements(E, p.batch));
        const Float32Copy x(sourceData, formats.source, layoutElements(S, p.batch));
        if (!fc::weightGradient(p, e.floats(), x.floats(), weightGradient, biasGradient))
            weightGradientDepthwise(p, e.floats(), x.floats(), weightGradient, biasGradient);
        return;
    }
    const ConvSource gradient{gradientData, formats.gradient}, source{sourceData, formats.source};
    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;  // weight row length per output channel
    const int C = G * Cog;         // output channels
    const int64_t pixelsPerImage = int64_t(E.width) * E.height;
    const int64_t pixels = int64_t(p.batch) * pixelsPerImage;
    const size_t wSize = doW ? size_t(C) * Kg : 0;

    // The pixels of E are evenly spaced within an image (and across images without gaps). So are
    // the source pixels a 1x1 stride-1 window reads when it starts at column 0 and stays inside.
    // (FLOAT32 only: halves are widened into the packed blocks.)
    const bool evenE = !gradient.half && E.imageStride == pixelsPerImage * E.pixelStride;
    const bool inPlaceX = !source.half && kW == 1 && kH == 1 && p.strideX == 1 && p.strideY == 1 &&
                          p.windowLeftX == 0 && S.width == E.width && p.windowTopY >= 0 &&
                          p.windowTopY + E.height <= S.height;
    const bool evenX = p.windowTopY == 0 && S.imageStride == pixelsPerImage * S.pixelStride;

    // Blocks of PB pixels, taken in order, in `chunks` contiguous runs: each chunk sums its
    // blocks into its own partial sums (the first product overwrites, the next ones add), and
    // the partials are added in chunk order at the end. A single chunk (a small problem: see
    // threadsFor) sums straight into the results.
    const int64_t threads = threadsFor(pixels * Kg * C);
    // Patches of about 1 MB (4 MB made the 5x5 32->32 8x8 layer's weight gradient 1.5-2x slower:
    // the patch no longer stayed in the cache between its packing and the product).
    int64_t PB = std::min<int64_t>(4096, std::max<int64_t>(64, (int64_t(1) << 18) / std::max(Kg, 1)));
    PB = std::max<int64_t>(16, std::min(PB, ceilDiv64(pixels, threads)));
    if (threads > 1 && pixels > 0)  // as many blocks as a multiple of the thread count
        PB = std::max<int64_t>(1, ceilDiv64(pixels, ceilDiv64(ceilDiv64(pixels, PB), threads) * threads));
    const int64_t blocks = ceilDiv64(pixels, PB);
    const int chunks = int(std::min<int64_t>(blocks, threads));
    const bool acc = p.accumulate != 0;
    const bool direct = chunks == 1;
    const size_t partSize = wSize + size_t(C);
    std::vector<float> partial(direct ? 0 : size_t(chunks) * partSize);

    parallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> patch, eblk;
        for (int64_t c = begin; c < end; ++c) {
            float* dW = direct ? weightGradient : partial.data() + size_t(c) * partSize;
            float* dB = direct ? biasGradient : dW + wSize;
            const bool addToResults = direct && acc;  // the first product adds to what is there
            if (doB && !addToResults) std::fill(dB, dB + C, 0.0f);
            const int64_t b0 = blocks * c / chunks, b1 = blocks * (c + 1) / chunks;
            for (int64_t blk = b0; blk < b1; ++blk) {
                const int64_t q0 = blk * PB;
                const int mb = int(std::min<int64_t>(PB, pixels - q0));
                const int n0 = int(q0 / pixelsPerImage);
                const int j0 = int((q0 % pixelsPerImage) / E.width), i0 = int(q0 % E.width);
                const bool oneImage = n0 == int((q0 + mb - 1) / pixelsPerImage);

                // The block of E: mb rows of C gradients.
                const float* eb;
                int lde;
                if (!gradient.half && (oneImage || evenE)) {
                    eb = gradient.floats() + pixelIndex(E, n0, j0, i0);
                    lde = E.pixelStride;
                } else {
                    eblk.resize(size_t(PB) * C);
                    for (int m = 0; m < mb; ++m) {
                        const int64_t q = q0 + m;
                        const int n = int(q / pixelsPerImage);
                        const int j = int((q % pixelsPerImage) / E.width), i = int(q % E.width);
                        gradient.load(pixelIndex(E, n, j, i), C, eblk.data() + size_t(m) * C);
                    }
                    eb = eblk.data();
                    lde = C;
                }
                if (doB)
                    for (int m = 0; m < mb; ++m) {
                        const float* e = eb + int64_t(m) * lde;
                        for (int o = 0; o < C; ++o) dB[o] += e[o];
                    }
                if (!doW) continue;

                for (int g = 0; g < G; ++g) {
                    const float* P;
                    int ldp;
                    if (inPlaceX && (oneImage || evenX)) {
                        P = source.floats() + pixelIndex(S, n0, p.windowTopY + j0, i0) + g * Cig;
                        ldp = S.pixelStride;
                    } else {
                        patch.resize(size_t(PB) * Kg);
                        for (int m = 0; m < mb; ++m) {
                            const int64_t q = q0 + m;
                            const int n = int(q / pixelsPerImage);
                            const int j = int((q % pixelsPerImage) / E.width), i = int(q % E.width);
                            conv::im2colRow(patch.data() + size_t(m) * Kg, source, S, n,
                                      p.windowTopY + p.strideY * j, p.windowLeftX + p.strideX * i,
                                      kW, kH, p.dilationX, p.dilationY, p.edgeMode, g * Cig, Cig);
                        }
                        P = patch.data();
                        ldp = Kg;
                    }
                    // dW_g[oo][k] (+)= sum_m E[m][g*Cog + oo] * P[m][k]
                    blas::sgemm(true, false, Cog, Kg, mb, 1.0f, eb + g * Cog, lde, P, ldp,
                                blk == b0 && !addToResults ? 0.0f : 1.0f, dW + size_t(g) * Cog * Kg, Kg);
                }
            }
        }
    });

    if (direct) return;
    // Add the partials in chunk order (no chunk: an empty sum) and write or accumulate.
    parallelFor(C, grainFor(C, int(threads)), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
            if (doW) {
                float* w = weightGradient + o * Kg;
                for (int k = 0; k < Kg; ++k) {
                    float sum = chunks > 0 ? partial[size_t(o) * Kg + k] : 0.0f;
                    for (int c = 1; c < chunks; ++c) sum += partial[size_t(c) * partSize + size_t(o) * Kg + k];
                    w[k] = acc ? w[k] + sum : sum;
                }
            }
            if (doB) {
                float sum = chunks > 0 ? partial[wSize + size_t(o)] : 0.0f;
                for (int c = 1; c < chunks; ++c) sum += partial[size_t(c) * partSize + wSize + size_t(o)];
                biasGradient[o] = acc ? biasGradient[o] + sum : sum;
            }
        }
    });
}

void convolutionWeightGradient(const ConvolutionWeightGradientParams& p, const float* gradient,
                               const float* source, float* weightGradient, float* biasGradient) {
    convolutionWeightGradient(p, HalfBindings{}, gradient, source, weightGradient, biasGradient);
}

}  // namespace mpsgrad::cpu
