// CPU backend: convolution forward and data gradient (the weight gradient, organised the same
// way, is convolution_weight_gradient.cpp; images in FLOAT32 or FLOAT16 storage: conv_operands.h).
//
// Semantics are exactly those written in metal/convolution_params.h. The three dense ops are
// matrix products on the system BLAS (blas.h: OpenBLAS or Accelerate), organised alike:
//
//   1. the pixels are cut into blocks whose size depends on the problem (and the thread
//      count, never on timing); a block's operand is either read in place (1x1 stride-1
//      layers whose pixels are evenly spaced in memory) or packed into a small scratch panel
//      (an im2col patch honouring the edge mode, or a block of the incoming gradient);
//   2. one single-threaded sgemm per block and group multiplies it with the OHWI weights,
//      used as they are (no per-call repacking) except by the strided data gradient's
//      per-phase form (its other form, products then scatter-add, is conv_col2im.cpp);
//   3. an epilogue pass adds the bias and applies the neuron while writing only the channels
//      [channelOffset, channelOffset + channels) of the destination pixels.
//
// Blocks run in parallel on the backend's pool, on as many threads as the problem is worth
// (threadsFor: one per two million multiply-adds, so the tiny layers of the digits example run
// on the calling thread without a hand-off). Every forward / data-gradient output element
// comes from exactly one sgemm (or, in col2im, from products added in a fixed order by the one
// work item that owns its row); the weight gradient sums its blocks in a fixed order into one
// partial sum per chunk of blocks and adds the partials in chunk order. So results are bitwise
// reproducible run to run for a given thread count.
#include "cpu_ops.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../../../metal/neuron_math.h"
#include "blas.h"
#include "conv_col2im.h"
#include "conv_epilogue.h"
#include "conv_geometry.h"
#include "conv_im2col.h"
#include "conv_operands.h"
#include "convolution_winograd.h"
#include "elementwise.h"
#include "fully_connected.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

inline int ceilDiv(int v, int m) { return (v + m - 1) / m; }
using conv::ceilDiv64;
using conv::checkCommon;
using conv::checkLayout;
using conv::checkRect;
using conv::clampInt;
using conv::ConvDestination;
using conv::ConvSource;
using conv::Float32Copy;
using conv::grainFor;
using conv::invalid;
using conv::layoutElements;
using conv::pixelIndex;
using conv::sourcePixel;
using conv::threadsFor;
// Mathematical modulo (result in [0, m)) for m > 0.
inline int positiveMod(int v, int m) {
    int r = v % m;
    return r < 0 ? r + m : r;
}

// Rows per block of a product whose packed operand row holds `rowFloats` floats: scratch panels
// of about 1 MB, between 16 rows (so the BLAS gets a real matrix, not a vector) and 512, small
// enough to give each of `threads` threads two blocks when the problem is that large, and as
// many blocks as a multiple of the thread count (7 blocks on 2 threads left one idle a seventh
// of the time).
int blockRows(int64_t rows, int64_t rowFloats, int threads) {
    int64_t mb = std::min<int64_t>(512, (int64_t(1) << 18) / std::max<int64_t>(1, rowFloats));
    if (threads > 1) mb = std::min(mb, ceilDiv64(rows, 2 * int64_t(threads)));
    mb = std::max<int64_t>(1, std::min(rows, std::max<int64_t>(16, mb)));
    if (threads > 1) {
        const int64_t blocks = ceilDiv64(ceilDiv64(rows, mb), threads) * threads;
        mb = std::max<int64_t>(1, ceilDiv64(rows, blocks));
    }
    return int(mb);
}

// ---------------------------------------------------------------------------------------------
// Forward

// sum[c] = sum over the taps t (in order) with a pixel of pixels[t][c] * w[t][c], from 0.0f.
// Channels go in blocks of 32 summed in registers across all taps (a sum in memory paid a load
// and a store per multiply-add), with an AVX2 copy next to the baseline one (no FMA: both round
// alike, so results do not depend on the machine).
MPSGRAD_VECTOR_CLONES
void depthwiseSums(const float* const* pixels, const float* w, int taps, int C, float* sum) {
    constexpr int kBlock = 32;
    int c0 = 0;
    for (; c0 + kBlock <= C; c0 += kBlock) {
        float s[kBlock] = {};
        for (int t = 0; t < taps; ++t) {
            if (!pixels[t]) continue;  // contributes exact zeros
            const float* x = pixels[t] + c0;
            const float* wt = w + size_t(t) * C + c0;
            for (int c = 0; c < kBlock; ++c) s[c] += x[c] * wt[c];
        }
        for (int c = 0; c < kBlock; ++c) sum[c0 + c] = s[c];
    }
    for (int c = c0; c < C; ++c) {
        float s = 0.0f;
        for (int t = 0; t < taps; ++t)
            if (pixels[t]) s += pixels[t][c] * w[size_t(t) * C + c];
        sum[c] = s;
    }
}

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

    const Epilogue epilogue = makeEpilogue(p.neuron, p.hasBias ? biases : nullptr, neuronData);
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    const int64_t grain = std::max<int64_t>(1, 4096 / (int64_t(p.clipWidth) * C * taps + 1));
    parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> acc(static_cast<size_t>(C));
        std::vector<const float*> pixels(static_cast<size_t>(taps));
        for (int64_t r = begin; r < end; ++r) {
            const int n = int(r / p.clipHeight), y = int(r % p.clipHeight);
            for (int x = 0; x < p.clipWidth; ++x) {
                for (int ky = 0; ky < kH; ++ky) {
                    const int sy = p.windowTopY + p.strideY * y + p.dilationY * ky;
                    for (int kx = 0; kx < kW; ++kx) {
                        const int sx = p.windowLeftX + p.strideX * x + p.dilationX * kx;
                        pixels[size_t(ky * kW + kx)] = sourcePixel(source, S, n, sy, sx, p.edgeMode);
                    }
                }
                depthwiseSums(pixels.data(), packed.data(), taps, C, acc.data());
                float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x);
                float* pre = p.writePreactivation
                                 ? preactivation + pixelIndex(p.preactivation, n, y, x)
                                 : nullptr;
                epilogue(acc.data(), 0, C, dst, pre);  // value = bias + sum, as the general path
            }
        }
    });
}

// The im2col product path: any geometry, FLOAT32 or FLOAT16 source and destination.
void forwardProducts(const ConvolutionParams& p, const ConvSource& source, const float* weights,
                     const Epilogue& epilogue, const ConvDestination& destination, float* preactivation) {
    const ImageLayout& S = p.source;
    const ImageLayout& D = p.destination;
    const int G = p.groups, Cig = S.channels / G, Cog = D.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;  // reduction length per group
    const int64_t clipPixels = int64_t(p.clipWidth) * p.clipHeight;
    const int64_t totalPixels = int64_t(p.batch) * clipPixels;
    // 1x1, stride 1, every read inside the image and clip rows as wide as the source: the clip
    // pixels of one image are evenly spaced source pixels (and so are those of consecutive
    // images when the images follow each other without a gap), so the product reads them in place
    // (FLOAT32 only: halves are widened into the patch).
    const bool inPlace = !source.half && kW == 1 && kH == 1 && p.strideX == 1 && p.strideY == 1 &&
                         p.windowLeftX == 0 && S.width == p.clipWidth && p.windowTopY >= 0 &&
                         p.windowTopY + p.clipHeight <= S.height;
    const bool imagesEven = p.windowTopY == 0 && S.imageStride == clipPixels * S.pixelStride;

    // Work item = a block of clip pixels (counted across rows and images, so small images and
    // fully connected layers still fill a block) x a group.
    const int threads = threadsFor(totalPixels * Kg * Cog * G);
    const int MB = blockRows(totalPixels, Kg, threads);
    const int64_t items = ceilDiv64(totalPixels, MB) * G;

    parallelFor(items, grainFor(items, threads), [&](int64_t begin, int64_t end) {
        std::vector<float> patch;
        std::vector<float> out(size_t(MB) * Cog), row(destination.half ? size_t(Cog) : 0);
        std::vector<int64_t> dstAt(static_cast<size_t>(MB)), preAt(static_cast<size_t>(MB));
        for (int64_t item = begin; item < end; ++item) {
            const int g = int(item % G);
            const int64_t q0 = (item / G) * MB;
            const int mb = int(std::min<int64_t>(MB, totalPixels - q0));
            for (int m = 0; m < mb; ++m) {
                const int64_t q = q0 + m;
                const int n = int(q / clipPixels);
                const int y = int((q % clipPixels) / p.clipWidth), x = int(q % p.clipWidth);
                dstAt[size_t(m)] = pixelIndex(D, n, p.clipY + y, p.clipX + x);
                preAt[size_t(m)] = p.writePreactivation ? pixelIndex(p.preactivation, n, y, x) : 0;
            }

            const float* A;
            int lda;
            const int n0 = int(q0 / clipPixels);
            if (inPlace && (n0 == int((q0 + mb - 1) / clipPixels) || imagesEven)) {
                const int y0 = int((q0 % clipPixels) / p.clipWidth), x0 = int(q0 % p.clipWidth);
                A = source.floats() + pixelIndex(S, n0, p.windowTopY + y0, x0) + g * Cig;
                lda = S.pixelStride;
            } else {
                // im2col patch: patch[m][(ky*kW + kx)*Cig + i], for this group's input channels.
                patch.resize(size_t(MB) * Kg);
                for (int m = 0; m < mb; ++m) {
                    const int64_t q = q0 + m;
                    const int n = int(q / clipPixels);
                    const int y = int((q % clipPixels) / p.clipWidth), x = int(q % p.clipWidth);
                    conv::im2colRow(patch.data() + size_t(m) * Kg, source, S, n, p.windowTopY + p.strideY * y,
                                    p.windowLeftX + p.strideX * x, kW, kH, p.dilationX, p.dilationY, p.edgeMode,
                                    g * Cig, Cig);
                }
                A = patch.data();
                lda = Kg;
            }

            // out[m][oo] = sum_k A[m][k] * W[g*Cog + oo][k]: the OHWI weights are B^T as stored.
            blas::sgemm(false, true, mb, Cog, Kg, 1.0f, A, lda, weights + size_t(g) * Cog * Kg, Kg,
                        0.0f, out.data(), Cog);

            // Epilogue: value = bias + sum (the order the depthwise path uses), then the neuron.
            for (int m = 0; m < mb; ++m)
                destination.write(epilogue, out.data() + size_t(m) * Cog, g * Cog, Cog, dstAt[size_t(m)],
                                  p.writePreactivation ? preactivation + preAt[size_t(m)] + g * Cog : nullptr,
                                  row.data());
        }
    });
}

}  // namespace

void convolutionForward(const ConvolutionParams& p, const HalfBindings& formats, const void* source,
                        const float* weights, const float* biases, const float* neuronData, void* destination,
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

    const bool depthwise = S.channels == p.groups && D.channels == p.groups;
    if (fc::handles(p) || depthwise) {
        // One output pixel per image (fully connected: one product over the batch), or one input
        // and one output channel per group. These paths address FLOAT32 storage in place.
        const Float32Copy x(source, formats.source, layoutElements(S, p.batch));
        const Float32Copy y(destination, formats.destination, layoutElements(D, p.batch));
        if (!fc::forward(p, x.floats(), weights, biases, neuronData, y.floats(), preactivation))
            forwardDepthwise(p, x.floats(), weights, biases, neuronData, y.floats(), preactivation);
        y.writeBack();
        return;
    }
    const ConvSource x{source, formats.source};
    const ConvDestination y{destination, formats.destination};
    const Epilogue epilogue = makeEpilogue(p.neuron, p.hasBias ? biases : nullptr, neuronData);
    // 3x3 stride 1 with enough channels and pixels: Winograd F(2x2, 3x3), 2.25x fewer products.
    if (winograd::eligible(p))
        winograd::forward(p, x, weights, epilogue, y, preactivation);
    else
        forwardProducts(p, x, weights, epilogue, y, preactivation);
}

void convolutionForward(const ConvolutionParams& p, const float* source, const float* weights,
                        const float* biases, const float* neuronData, float* destination,
                        float* preactivation) {
    convolutionForward(p, HalfBindings{}, source, weights, biases, neuronData, destination, preactivation);
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

// Stride 1: Z is E itself, so the data gradient is a forward convolution of E (zero outside)
// with the rotated, I/O-transposed weights Wr[g*Cig + c][ty][tx][oo] = W[g*Cog + oo][kH-1-ty][kW-1-tx][c],
// and runs on the forward pass's blocks and products.
void dataGradientAsForward(const ConvolutionDataGradientParams& p, const HalfBindings& formats,
                           const void* gradient, const float* weights, void* destination) {
    const int G = p.groups, Cig = p.destination.channels / G, Cog = p.gradient.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight, taps = kW * kH;
    // A transpose: 16 output channels at a time, so that each write fills a cache line instead
    // of touching one float per line (which made the repacking cost a quarter of the product).
    constexpr int kOB = 16;
    const int oBlocks = ceilDiv(Cog, kOB);
    std::vector<float> rotated(size_t(G) * Cig * taps * Cog);
    const int64_t blocks = int64_t(G) * oBlocks;
    parallelFor(blocks, grainFor(blocks, threadsFor(int64_t(rotated.size()) * 16)), [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int g = int(item / oBlocks), o0 = int(item % oBlocks) * kOB;
            const int o1 = std::min(Cog, o0 + kOB);
            for (int t = 0; t < taps; ++t) {
                const int rt = taps - 1 - t;  // (kH-1-ty, kW-1-tx) flattened
                for (int c = 0; c < Cig; ++c) {
                    float* r = rotated.data() + ((size_t(g) * Cig + size_t(c)) * taps + size_t(rt)) * Cog;
                    const float* w = weights + (size_t(g) * Cog * taps + size_t(t)) * Cig + size_t(c);
                    for (int oo = o0; oo < o1; ++oo) r[oo] = w[size_t(oo) * taps * Cig];  // W[g*Cog+oo][t][c]
                }
            }
        }
    });

    ConvolutionParams f{};
    f.source = p.gradient;
    f.destination = p.destination;
    f.batch = p.batch;
    f.groups = G;
    f.kernelWidth = kW;
    f.kernelHeight = kH;
    f.strideX = f.strideY = 1;
    f.dilationX = p.dilationX;
    f.dilationY = p.dilationY;
    f.windowLeftX = p.windowLeftX;
    f.windowTopY = p.windowTopY;
    f.clipX = p.clipX;
    f.clipY = p.clipY;
    f.clipWidth = p.clipWidth;
    f.clipHeight = p.clipHeight;
    f.edgeMode = kEdgeZero;
    f.neuron.type = kNeuronNone;
    HalfBindings forwardFormats;
    forwardFormats.source = formats.gradient;
    forwardFormats.destination = formats.destination;
    convolutionForward(f, forwardFormats, gradient, rotated.data(), nullptr, nullptr, destination, nullptr);
}

// A 1x1 incoming gradient (a fully connected layer, or any layer with a one-pixel result):
// Z holds one sample, so destination pixel (y, x) meets at most one tap and
// dX[n][y][x][c] = sum_o E[n][o] * W[o][kH-1-ty][kW-1-tx][c] with windowTopY + y + dilationY*ty == 0.
// One product E (images x Cog) * W (Cog x kH*kW*Cig) per group gives every value; the scatter
// then writes them (zero for pixels no tap reaches). Columns are split across the threads.
void dataGradientOnePixel(const ConvolutionDataGradientParams& p, const float* gradient,
                          const float* weights, float* destination) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    const int G = p.groups, Cig = D.channels / G, Cog = E.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight, K = kH * kW * Cig;
    std::vector<float> r(size_t(p.batch) * G * K);  // r[n][g][k]
    constexpr int kColumns = 2048;
    const int chunks = ceilDiv(K, kColumns);
    parallelFor(int64_t(G) * chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int g = int(item / chunks), k0 = int(item % chunks) * kColumns;
            const int nk = std::min(kColumns, K - k0);
            blas::sgemm(false, false, p.batch, nk, Cog, 1.0f, gradient + pixelIndex(E, 0, 0, 0) + g * Cog,
                        E.imageStride, weights + size_t(g) * Cog * K + k0, K, 0.0f,
                        r.data() + size_t(g) * K + k0, G * K);
        }
    });
    // The tap of a destination coordinate (-1: none): windowStart + v + dilation*t == 0.
    auto tapOf = [](int windowStart, int v, int dilation, int taps) {
        const int d = -(windowStart + v);
        if (d < 0 || d % dilation) return -1;
        return d / dilation < taps ? d / dilation : -1;
    };
    parallelFor(int64_t(p.batch) * p.clipHeight, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int n = int(row / p.clipHeight), y = int(row % p.clipHeight);
            const int ty = tapOf(p.windowTopY, y, p.dilationY, kH);
            for (int x = 0; x < p.clipWidth; ++x) {
                const int tx = tapOf(p.windowLeftX, x, p.dilationX, kW);
                float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x);
                if (ty < 0 || tx < 0) {
                    std::fill(dst, dst + D.channels, 0.0f);
                    continue;
                }
                const size_t tap = size_t((kH - 1 - ty) * kW + (kW - 1 - tx)) * Cig;
                for (int g = 0; g < G; ++g)
                    std::memcpy(dst + g * Cig, r.data() + (size_t(n) * G + g) * K + tap, size_t(Cig) * sizeof(float));
            }
        }
    });
}

}  // namespace

namespace {

// Checks the arguments; false when the op writes nothing (no image or an empty clip).
bool checkDataGradient(const ConvolutionDataGradientParams& p) {
    checkCommon(p.batch, p.groups, p.destination.channels, p.gradient.channels, p.kernelWidth, p.kernelHeight,
                p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(p.gradient, "gradient");
    checkLayout(p.destination, "destination");
    checkRect(p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, "destination");
    return p.batch > 0 && p.clipWidth > 0 && p.clipHeight > 0;
}

// Returns true when the biases (null: none) were added along with the products.
bool dataGradientProducts(const ConvolutionDataGradientParams& p, const float* gradient,
                          const float* weights, const float* biases, float* destination);

// dX[..][c] += biases[c] over the clip (the forward pass of a transposed convolution), after
// the products: the order a convolution's epilogue uses (products first, then the bias) is
// not needed here, the transposed convolution has no bitwise-compatibility requirement.
void addBiases(const ConvolutionDataGradientParams& p, const float* biases, float* destination) {
    const ImageLayout& D = p.destination;
    parallelFor(int64_t(p.batch) * p.clipHeight, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int n = int(row / p.clipHeight), y = int(row % p.clipHeight);
            for (int x = 0; x < p.clipWidth; ++x) {
                float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x);
                for (int c = 0; c < D.channels; ++c) dst[c] += biases[c];
            }
        }
    });
}

// True when the data gradient of p reads and writes FLOAT16 storage directly: the stride-1 form,
// a forward convolution (dataGradientProducts picks the same path), without the transposed
// convolution's biases. The other paths work on float32 copies.
bool dataGradientReadsHalf(const ConvolutionDataGradientParams& p) {
    const bool onePixel = p.gradient.width == 1 && p.gradient.height == 1;
    const bool depthwise = p.destination.channels == p.groups && p.gradient.channels == p.groups;
    return p.strideX == 1 && p.strideY == 1 && !onePixel && !depthwise && !p.hasBias;
}

}  // namespace

void convolutionDataGradient(const ConvolutionDataGradientParams& p, const HalfBindings& formats,
                             const void* gradient, const float* weights, const float* biases, void* destination) {
    if (p.hasBias && !biases) invalid("hasBias is set but the bias buffer is null");
    if (formats.any() && dataGradientReadsHalf(p)) {
        if (checkDataGradient(p)) dataGradientAsForward(p, formats, gradient, weights, destination);
        return;
    }
    const Float32Copy e(gradient, formats.gradient, layoutElements(p.gradient, p.batch));
    const Float32Copy x(destination, formats.destination, layoutElements(p.destination, p.batch));
    const bool biasesAdded = dataGradientProducts(p, e.floats(), weights, p.hasBias ? biases : nullptr, x.floats());
    if (p.hasBias && !biasesAdded && p.batch > 0 && p.clipWidth > 0 && p.clipHeight > 0)
        addBiases(p, biases, x.floats());
    x.writeBack();
}

void convolutionDataGradient(const ConvolutionDataGradientParams& p, const float* gradient,
                             const float* weights, const float* biases, float* destination) {
    convolutionDataGradient(p, HalfBindings{}, gradient, weights, biases, destination);
}

void convolutionTransposeWeights(const ConvolutionTransposeWeightsParams& p, const float* source,
                                 float* destination) {
    const int G = p.groups, kW = p.kernelWidth, kH = p.kernelHeight;
    if (G < 1 || kW < 1 || kH < 1 || p.outChannels % G || p.inChannels % G) invalid("bad transpose-weights geometry");
    const int Og = p.outChannels / G, Ig = p.inChannels / G;
    for (int g = 0; g < G; ++g)
        for (int oo = 0; oo < Og; ++oo)
            for (int ky = 0; ky < kH; ++ky)
                for (int kx = 0; kx < kW; ++kx) {
                    const float* s = source + ((size_t(g * Og + oo) * kH + ky) * kW + kx) * Ig;
                    for (int ii = 0; ii < Ig; ++ii)
                        destination[((size_t(g * Ig + ii) * kH + (kH - 1 - ky)) * kW + (kW - 1 - kx)) * Og + oo] = s[ii];
                }
}

namespace {

bool dataGradientProducts(const ConvolutionDataGradientParams& p, const float* gradient,
                          const float* weights, const float* biases, float* destination) {
    const ImageLayout& E = p.gradient;
    const ImageLayout& D = p.destination;
    if (!checkDataGradient(p)) return false;
    if (fc::dataGradient(p, gradient, weights, destination)) return false;  // one gradient pixel per image

    const int G = p.groups, Cig = D.channels / G, Cog = E.channels / G;
    const int kW = p.kernelWidth, kH = p.kernelHeight, sX = p.strideX, sY = p.strideY;
    const int Kfull = kH * kW * Cig;  // row length of one output channel's OHWI weights

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
        return false;
    }
    if (E.width == 1 && E.height == 1) {
        dataGradientOnePixel(p, gradient, weights, destination);
        return false;
    }
    // Products then scatter-add (conv_col2im.cpp) when the destination has no more channels than
    // the gradient: an RGB stem's data gradient, a transposed convolution's forward pass.
    if ((sX > 1 || sY > 1) && Cig <= Cog) {
        const int64_t macs = int64_t(p.batch) * E.width * E.height * E.channels * Kfull;
        col2im::dataGradient(p, gradient, weights, biases, destination, threadsFor(macs));
        return true;
    }
    if (sX == 1 && sY == 1) {
        dataGradientAsForward(p, HalfBindings{}, gradient, weights, destination);
        return false;
    }

    // Strided: packed weights, for phase (py, px) and group g, a [nTaps*Cog][Cig] block with
    // row (t, oo), column cc = W[g*Cog + oo][kH-1-ty][kW-1-tx][cc].
    std::vector<size_t> phaseOffset(size_t(sY) * sX);
    size_t total = 0;
    for (int py = 0; py < sY; ++py)
        for (int px = 0; px < sX; ++px) {
            phaseOffset[size_t(py) * sX + px] = total;
            total += tapsY[py].size() * tapsX[px].size() * size_t(G) * Cog * Cig;
        }
    std::vector<float> wp(total, 0.0f);
    for (int py = 0; py < sY; ++py)
        for (int px = 0; px < sX; ++px) {
            const int nT = int(tapsY[py].size() * tapsX[px].size());
            for (int g = 0; g < G; ++g) {
                float* block = wp.data() + phaseOffset[size_t(py) * sX + px] +
                               size_t(g) * nT * Cog * Cig;
                int t = 0;
                for (int ty : tapsY[py])
                    for (int tx : tapsX[px]) {
                        const int tap = (kH - 1 - ty) * kW + (kW - 1 - tx);
                        for (int oo = 0; oo < Cog; ++oo) {
                            const float* w = weights + size_t(g * Cog + oo) * Kfull + size_t(tap) * Cig;
                            std::memcpy(block + (size_t(t) * Cog + oo) * Cig, w,
                                        sizeof(float) * size_t(Cig));
                        }
                        ++t;
                    }
            }
        }

    const int maxTaps = kH * kW;
    const int MB = clampInt((1 << 18) / std::max(maxTaps * Cog, 1), 16, 512);
    const int perPhase = ceilDiv(ceilDiv(p.clipWidth, sX), MB);  // blocks in the largest class
    const int xPhases = std::min(sX, p.clipWidth);
    const int64_t items = int64_t(p.batch) * p.clipHeight * xPhases * perPhase;

    parallelFor(items, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> panel(size_t(MB) * maxTaps * Cog);
        std::vector<float> out(size_t(MB) * Cig);
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
            const int mb = std::min(MB, count - xi0);
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
                if (K == 0) std::fill(out.begin(), out.begin() + size_t(mb) * Cig, 0.0f);
                if (K > 0) {
                    for (int m = 0; m < mb; ++m) {
                        const int x = px + sX * (xi0 + m);
                        float* dst = panel.data() + size_t(m) * K;
                        for (int a = a0; a < a1; ++a)
                            for (int b = 0; b < nTx; ++b, dst += Cog) {
                                const int zx = p.windowLeftX + x + p.dilationX * tx[size_t(b)];
                                const int ex = zx / sX;
                                const bool inside = zx >= 0 && ex < E.width;
                                const float* e =
                                    inside ? gradient + pixelIndex(E, n, eyOf[size_t(a)], ex) + g * Cog : nullptr;
                                conv::copyChannels(dst, e, Cog);
                            }
                    }
                    // Rows (a, b, oo) of the phase's block, starting at row a0 * nTx * Cog.
                    const float* wblock = wp.data() + phaseOffset[size_t(py) * sX + px] +
                                          (size_t(g) * nT + size_t(a0) * nTx) * Cog * Cig;
                    blas::sgemm(false, false, mb, Cig, K, 1.0f, panel.data(), K, wblock, Cig, 0.0f,
                                out.data(), Cig);
                }
                for (int m = 0; m < mb; ++m) {
                    const int x = px + sX * (xi0 + m);
                    float* dst = destination + pixelIndex(D, n, p.clipY + y, p.clipX + x) + g * Cig;
                    std::memcpy(dst, out.data() + size_t(m) * Cig, sizeof(float) * size_t(Cig));
                }
            }
        }
    });
    return false;
}

}  // namespace

}  // namespace mpsgrad::cpu
