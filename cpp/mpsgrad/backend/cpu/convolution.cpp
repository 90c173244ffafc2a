// CPU backend: convolution forward, data gradient and weight gradient.
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
#include "convolution_winograd.h"
#include "elementwise.h"
#include "fully_connected.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

inline int ceilDiv(int v, int m) { return (v + m - 1) / m; }
using conv::ceilDiv64;
using conv::clampInt;
using conv::pixelIndex;
using conv::sourcePixel;
using conv::threadsFor;
// Mathematical modulo (result in [0, m)) for m > 0.
inline int positiveMod(int v, int m) {
    int r = v % m;
    return r < 0 ? r + m : r;
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

// The grain for parallelFor over `items` work items on `threads` threads: all of them in one
// chunk (no hand-off at all) when one thread is worth using.
inline int64_t grainFor(int64_t items, int threads) { return threads > 1 ? 1 : std::max<int64_t>(1, items); }

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

// Copies `count` channels of one source pixel, or zeros when `pixel` is null. A few channels (a
// grey-scale or RGB input layer) are plain loads: a memcpy call per pixel cost more than the
// copy (the RGB stem's im2col spent as long in memcpy calls of 12 bytes as in the product).
inline void copyChannels(float* dst, const float* pixel, int count) {
    if (count <= 4) {
        for (int c = 0; c < count; ++c) dst[c] = pixel ? pixel[c] : 0.0f;
    } else if (pixel) {
        std::memcpy(dst, pixel, sizeof(float) * size_t(count));
    } else {
        std::fill(dst, dst + count, 0.0f);
    }
}

// Copies `count` channels of each of kW taps, `tapStep` floats apart, one after the other. Up to
// four channels take a copy of a fixed size (two moves for an RGB pixel): the variable-length
// loop per tap cost the stem's im2col as much as its product.
template <int N>
inline void copyTapsOf(float* dst, const float* px, int64_t tapStep, int kW) {
    for (int kx = 0; kx < kW; ++kx, dst += N) std::memcpy(dst, px + kx * tapStep, sizeof(float) * N);
}
inline void copyTaps(float* dst, const float* px, int64_t tapStep, int kW, int count) {
    switch (count) {
        case 1: return copyTapsOf<1>(dst, px, tapStep, kW);
        case 2: return copyTapsOf<2>(dst, px, tapStep, kW);
        case 3: return copyTapsOf<3>(dst, px, tapStep, kW);
        case 4: return copyTapsOf<4>(dst, px, tapStep, kW);
        default:
            for (int kx = 0; kx < kW; ++kx, dst += count)
                std::memcpy(dst, px + kx * tapStep, sizeof(float) * size_t(count));
    }
}

// One im2col row: the kH x kW taps of the window whose top-left tap reads source pixel
// (sy0, sx0) of image n, channels [c0, c0 + count) of each, tap after tap.
inline void im2colRow(float* dst, const float* source, const ImageLayout& S, int n, int sy0,
                      int sx0, int kW, int kH, int dilationX, int dilationY, int edgeMode, int c0,
                      int count) {
    // A tap row that lies inside the image needs no edge handling; when the taps are adjacent and
    // the channels fill the pixels, it is one run of kW * count floats.
    const bool columnsInside = sx0 >= 0 && sx0 + dilationX * (kW - 1) < S.width;
    const bool oneRun = dilationX == 1 && count == S.pixelStride;
    const int64_t tapStep = int64_t(dilationX) * S.pixelStride;
    for (int ky = 0; ky < kH; ++ky) {
        const int sy = sy0 + dilationY * ky;
        if (columnsInside && sy >= 0 && sy < S.height) {
            const float* px = source + pixelIndex(S, n, sy, sx0) + c0;
            if (oneRun) {
                std::memcpy(dst, px, sizeof(float) * size_t(kW) * size_t(count));
                dst += size_t(kW) * size_t(count);
            } else {
                copyTaps(dst, px, tapStep, kW, count);
                dst += size_t(kW) * size_t(count);
            }
            continue;
        }
        for (int kx = 0; kx < kW; ++kx, dst += count) {
            const float* px = sourcePixel(source, S, n, sy, sx0 + dilationX * kx, edgeMode);
            copyChannels(dst, px ? px + c0 : nullptr, count);
        }
    }
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

    // One output pixel per image (fully connected): one product over the batch.
    if (fc::forward(p, source, weights, biases, neuronData, destination, preactivation)) return;
    const int G = p.groups, Cig = S.channels / G, Cog = D.channels / G;
    if (Cig == 1 && Cog == 1) {
        forwardDepthwise(p, source, weights, biases, neuronData, destination, preactivation);
        return;
    }
    // 3x3 stride 1 with enough channels and pixels: Winograd F(2x2, 3x3), 2.25x fewer products.
    if (winograd::eligible(p)) {
        winograd::forward(p, source, weights, biases, neuronData, destination, preactivation);
        return;
    }

    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;  // reduction length per group
    const int64_t clipPixels = int64_t(p.clipWidth) * p.clipHeight;
    const int64_t totalPixels = int64_t(p.batch) * clipPixels;
    // 1x1, stride 1, every read inside the image and clip rows as wide as the source: the clip
    // pixels of one image are evenly spaced source pixels (and so are those of consecutive
    // images when the images follow each other without a gap), so the product reads them in place.
    const bool inPlace = kW == 1 && kH == 1 && p.strideX == 1 && p.strideY == 1 &&
                         p.windowLeftX == 0 && S.width == p.clipWidth && p.windowTopY >= 0 &&
                         p.windowTopY + p.clipHeight <= S.height;
    const bool imagesEven = p.windowTopY == 0 && S.imageStride == clipPixels * S.pixelStride;

    // Work item = a block of clip pixels (counted across rows and images, so small images and
    // fully connected layers still fill a block) x a group.
    const int threads = threadsFor(totalPixels * Kg * Cog * G);
    const int MB = blockRows(totalPixels, Kg, threads);
    const int64_t items = ceilDiv64(totalPixels, MB) * G;
    const Epilogue epilogue = makeEpilogue(p.neuron, p.hasBias ? biases : nullptr, neuronData);

    parallelFor(items, grainFor(items, threads), [&](int64_t begin, int64_t end) {
        std::vector<float> patch;
        std::vector<float> out(size_t(MB) * Cog);
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
                A = source + pixelIndex(S, n0, p.windowTopY + y0, x0) + g * Cig;
                lda = S.pixelStride;
            } else {
                // im2col patch: patch[m][(ky*kW + kx)*Cig + i], for this group's input channels.
                patch.resize(size_t(MB) * Kg);
                for (int m = 0; m < mb; ++m) {
                    const int64_t q = q0 + m;
                    const int n = int(q / clipPixels);
                    const int y = int((q % clipPixels) / p.clipWidth), x = int(q % p.clipWidth);
                    im2colRow(patch.data() + size_t(m) * Kg, source, S, n,
                              p.windowTopY + p.strideY * y, p.windowLeftX + p.strideX * x, kW, kH,
                              p.dilationX, p.dilationY, p.edgeMode, g * Cig, Cig);
                }
                A = patch.data();
                lda = Kg;
            }

            // out[m][oo] = sum_k A[m][k] * W[g*Cog + oo][k]: the OHWI weights are B^T as stored.
            blas::sgemm(false, true, mb, Cog, Kg, 1.0f, A, lda, weights + size_t(g) * Cog * Kg, Kg,
                        0.0f, out.data(), Cog);

            // Epilogue: value = bias + sum (the order the depthwise path uses), then the neuron.
            for (int m = 0; m < mb; ++m)
                epilogue(out.data() + size_t(m) * Cog, g * Cog, Cog, destination + dstAt[size_t(m)],
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

// Stride 1: Z is E itself, so the data gradient is a forward convolution of E (zero outside)
// with the rotated, I/O-transposed weights Wr[g*Cig + c][ty][tx][oo] = W[g*Cog + oo][kH-1-ty][kW-1-tx][c],
// and runs on the forward pass's blocks and products.
void dataGradientAsForward(const ConvolutionDataGradientParams& p, const float* gradient,
                           const float* weights, float* destination) {
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
    convolutionForward(f, gradient, rotated.data(), nullptr, nullptr, destination, nullptr);
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

}  // namespace

void convolutionDataGradient(const ConvolutionDataGradientParams& p, const float* gradient,
                             const float* weights, const float* biases, float* destination) {
    if (p.hasBias && !biases) invalid("hasBias is set but the bias buffer is null");
    const bool biasesAdded = dataGradientProducts(p, gradient, weights, p.hasBias ? biases : nullptr, destination);
    if (p.hasBias && !biasesAdded && p.batch > 0 && p.clipWidth > 0 && p.clipHeight > 0)
        addBiases(p, biases, destination);
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
    checkCommon(p.batch, p.groups, D.channels, E.channels, p.kernelWidth, p.kernelHeight,
                p.strideX, p.strideY, p.dilationX, p.dilationY);
    checkLayout(E, "gradient");
    checkLayout(D, "destination");
    checkRect(D, p.clipX, p.clipY, p.clipWidth, p.clipHeight, "destination");
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) return false;
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
        dataGradientAsForward(p, gradient, weights, destination);
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
                                copyChannels(dst,
                                             inside ? gradient + pixelIndex(E, n, eyOf[size_t(a)], ex) + g * Cog
                                                    : nullptr,
                                             Cog);
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
    // One gradient pixel per image (fully connected): one product over the batch.
    if (fc::weightGradient(p, gradient, source, weightGradient, biasGradient)) return;

    const int G = p.groups, Cig = S.channels / G, Cog = E.channels / G;
    if (Cig == 1 && Cog == 1) {
        weightGradientDepthwise(p, gradient, source, weightGradient, biasGradient);
        return;
    }
    const int kW = p.kernelWidth, kH = p.kernelHeight;
    const int Kg = kH * kW * Cig;  // weight row length per output channel
    const int C = G * Cog;         // output channels
    const int64_t pixelsPerImage = int64_t(E.width) * E.height;
    const int64_t pixels = int64_t(p.batch) * pixelsPerImage;
    const size_t wSize = doW ? size_t(C) * Kg : 0;

    // The pixels of E are evenly spaced within an image (and across images without gaps). So are
    // the source pixels a 1x1 stride-1 window reads when it starts at column 0 and stays inside.
    const bool evenE = E.imageStride == pixelsPerImage * E.pixelStride;
    const bool inPlaceX = kW == 1 && kH == 1 && p.strideX == 1 && p.strideY == 1 &&
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
                if (oneImage || evenE) {
                    eb = gradient + pixelIndex(E, n0, j0, i0);
                    lde = E.pixelStride;
                } else {
                    eblk.resize(size_t(PB) * C);
                    for (int m = 0; m < mb; ++m) {
                        const int64_t q = q0 + m;
                        const int n = int(q / pixelsPerImage);
                        const int j = int((q % pixelsPerImage) / E.width), i = int(q % E.width);
                        std::memcpy(eblk.data() + size_t(m) * C, gradient + pixelIndex(E, n, j, i),
                                    sizeof(float) * size_t(C));
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
                        P = source + pixelIndex(S, n0, p.windowTopY + j0, i0) + g * Cig;
                        ldp = S.pixelStride;
                    } else {
                        patch.resize(size_t(PB) * Kg);
                        for (int m = 0; m < mb; ++m) {
                            const int64_t q = q0 + m;
                            const int n = int(q / pixelsPerImage);
                            const int j = int((q % pixelsPerImage) / E.width), i = int(q % E.width);
                            im2colRow(patch.data() + size_t(m) * Kg, source, S, n,
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

}  // namespace mpsgrad::cpu
