// The convolution family's kernels: forward (bias and neuron fused), data gradient, weight
// gradient, bias gradient. Semantics are exactly those of metal/convolution_params.h; the host
// side is cpp/mpsgrad/backend/metal/metal_convolution.cpp.
//
// General convolutions run as implicit GEMMs. A threadgroup owns a kTileM x kTileN block of
// outputs (pixels x channels of one group) and walks the reduction in kTileK slices: its threads
// stage the im2col patch of the block's pixels (edge mode applied) and the matching weights in
// threadgroup memory, then each thread multiplies the staged tiles into a 4 x 4 micro-tile kept
// in registers. Every output is summed by one thread in increasing reduction order, so results
// are bitwise reproducible run to run.
//
// Weight and bias gradients reduce over every pixel of the batch: the lanes of a simdgroup split
// the pixels (lane l always takes pixels l, l + 32, ...), simd_sum combines the lanes, and where
// several simdgroups share an output their partials are added in simdgroup order. No atomics:
// the reduction order is fixed by the geometry alone.
//
// Depthwise convolutions (one input and one output channel per group) have kernels of their
// own: a GEMM tile would waste all but one of its columns.
//
// Function constants (set by the host per pipeline; the untaken branches compile away):
//   kNeuronType            NeuronTypeCode of the fused neuron (forward only)
//   kAligned*              the binding is read or written as aligned float4 quads; the host
//                          sets it only when every access of the dispatch is 16-byte aligned
#include <metal_stdlib>

#include "convolution_params.h"
#include "image_indexing.h"
#include "neuron_math.h"
#include "utility_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant int kNeuronType [[function_constant(0)]];
constant bool kAlignedInput [[function_constant(1)]];          // the image the patches are gathered from
constant bool kAlignedWeights [[function_constant(2)]];        // weights (or the weight gradient)
constant bool kAlignedOutput [[function_constant(3)]];         // the destination image
constant bool kAlignedPreactivation [[function_constant(4)]];  // forward: the preactivation image
constant bool kAlignedGradient [[function_constant(5)]];       // weight/bias gradients: E

namespace conv {

enum : int {
    kTileM = 32,        // GEMM rows per threadgroup: output pixels
    kTileN = 32,        // GEMM columns per threadgroup: output channels
    kTileK = 16,        // reduction elements staged per step
    kGemmThreads = 64,  // 8 x 8 threads, each owning a 4 x 4 micro-tile
    kQuadsM = kTileM / 4,
    kQuadsN = kTileN / 4,

    kWgTileO = 8,       // weight gradient: output channels per threadgroup
    kWgTileC = 16,      // weight gradient: weight-row columns per threadgroup (4 simdgroups x 4)
    kWgThreads = 128,
    kWgPixels = 32,     // pixels staged per step: one per lane

    kReduceThreads = 256,  // bias and depthwise weight gradients
    kSimdWidth = 32,
};

// ------------------------------------------------------------------------------------------
// Shared pieces

// One reduction element's row of a staged GEMM tile: the A tile is [kTileK] PixelQuads (4 output
// pixels per float4), the B tile [kTileK] ChannelQuads (4 output channels per float4).
typedef float4 PixelQuads[kQuadsM];
typedef float4 ChannelQuads[kQuadsN];

// acc[r] += sum_k A[k][4*tm + r] * B[k][4*tn .. 4*tn + 3] over the staged slice, in increasing k.
inline void multiplyStagedTiles(threadgroup const PixelQuads* tileA,
                                threadgroup const ChannelQuads* tileB, int tm, int tn,
                                thread float4* acc) {
    for (int k = 0; k < kTileK; ++k) {
        float4 a = tileA[k][tm];
        float4 b = tileB[k][tn];
        acc[0] += a.x * b;
        acc[1] += a.y * b;
        acc[2] += a.z * b;
        acc[3] += a.w * b;
    }
}

// Scatters the four values of reduction elements k..k+3 of GEMM row `row` into tile column-major
// storage tile[k][row / 4][row % 4] (the layout multiplyStagedTiles reads as float4 quads).
inline void stageColumn4(threadgroup PixelQuads* tile, int kk, int row, float4 v) {
    for (int j = 0; j < 4; ++j) tile[kk + j][row / 4][row % 4] = v[j];
}

// Input taps (ky, kx, i) of weight-row element k: k = (ky * kernelWidth + kx) * channels + i.
struct Tap {
    int ky;
    int kx;
    int i;
};

inline Tap tapOf(int k, int channels, int kernelWidth) {
    Tap t;
    int tap = k / channels;
    t.i = k - tap * channels;
    t.ky = tap / kernelWidth;
    t.kx = tap - t.ky * kernelWidth;
    return t;
}

// The kernel taps t < kernelSize with (base + dilation * t) % stride == 0: first, first + step, ...
// These are the taps of a data-gradient window that land on samples of the zero-inserted
// gradient; all others multiply inserted zeros and are skipped.
struct PhaseTaps {
    int first;
    int step;
    int count;
};

inline PhaseTaps phaseTaps(int base, int dilation, int stride, int kernelSize) {
    PhaseTaps s;
    s.first = -1;
    // The solutions repeat with period stride / gcd(dilation, stride) <= stride.
    for (int t = 0; t < kernelSize && t < stride; ++t) {
        if (positiveMod(base + dilation * t, stride) == 0) {
            s.first = t;
            break;
        }
    }
    s.step = stride / greatestCommonDivisor(dilation, stride);
    s.count = s.first < 0 ? 0 : (kernelSize - 1 - s.first) / s.step + 1;
    return s;
}

// ------------------------------------------------------------------------------------------
// Forward

// Source coordinates of the top-left tap of the window of clip pixel m.
struct Window {
    int n;
    int top;
    int left;
    bool valid;  // m is a pixel of the dispatch
};

inline Window forwardWindow(constant ConvolutionParams& p, int m, int pixels) {
    Window w;
    w.valid = m < pixels;
    FlatPixel q = unflattenPixel(w.valid ? m : 0, p.clipHeight, p.clipWidth);
    w.n = q.n;
    w.top = p.windowTopY + p.strideY * q.y;
    w.left = p.windowLeftX + p.strideX * q.x;
    return w;
}

// The source value (or float4 of 4 consecutive input channels) of weight-row element k for window w.
inline int forwardSourceIndex(constant ConvolutionParams& p, Window w, int k, int cig, int g) {
    Tap t = tapOf(k, cig, p.kernelWidth);
    int idx = edgePixelIndex(p.source, p.edgeMode, w.n, w.top + p.dilationY * t.ky,
                             w.left + p.dilationX * t.kx);
    return idx < 0 ? -1 : idx + g * cig + t.i;
}

// A[k][m] for k in [k0, k0 + kTileK): the im2col patch of the block's pixels. Thread `tid`
// stages row am = tid % kTileM, every (kGemmThreads / kTileM)-th k.
inline void stageForwardPatch(constant ConvolutionParams& p, device const float* source, Window w,
                              int am, int tid, int k0, int kg, int cig, int g,
                              threadgroup PixelQuads* tileA) {
    const int kStep = kGemmThreads / kTileM;
    if (kAlignedInput) {
        // cig % 4 == 0: four consecutive k are four consecutive channels of one tap.
        for (int kq = tid / kTileM; kq < kTileK / 4; kq += kStep) {
            int k = k0 + 4 * kq;
            float4 v = 0.0f;
            if (w.valid && k < kg) {
                int idx = forwardSourceIndex(p, w, k, cig, g);
                if (idx >= 0) v = *reinterpret_cast<device const float4*>(source + idx);
            }
            stageColumn4(tileA, 4 * kq, am, v);
        }
    } else {
        for (int kk = tid / kTileM; kk < kTileK; kk += kStep) {
            int k = k0 + kk;
            float v = 0.0f;
            if (w.valid && k < kg) {
                int idx = forwardSourceIndex(p, w, k, cig, g);
                if (idx >= 0) v = source[idx];
            }
            tileA[kk][am / 4][am % 4] = v;
        }
    }
}

// B[k][nn] = W[g*cog + n0 + nn][k0 + k]: weight rows are contiguous along k.
inline void stageForwardWeights(device const float* weights, int tid, int k0, int n0, int kg, int cog,
                                int g, threadgroup ChannelQuads* tileB) {
    const int nn = tid % kTileN;
    const int o = n0 + nn;
    const int kStep = kGemmThreads / kTileN;
    device const float* row = weights + (g * cog + o) * kg;
    if (kAlignedWeights) {
        for (int kq = tid / kTileN; kq < kTileK / 4; kq += kStep) {
            int k = k0 + 4 * kq;
            float4 v = 0.0f;
            if (o < cog && k < kg) v = *reinterpret_cast<device const float4*>(row + k);
            stageColumn4(tileB, 4 * kq, nn, v);
        }
    } else {
        for (int kk = tid / kTileN; kk < kTileK; kk += kStep) {
            int k = k0 + kk;
            tileB[kk][nn / 4][nn % 4] = (o < cog && k < kg) ? row[k] : 0.0f;
        }
    }
}

// Writes bias + sum for `count` output channels starting at oBase of clip pixel q: the
// preactivation first (when asked), then the neuron's value to the destination.
inline void writeForwardQuad(constant ConvolutionParams& p, FlatPixel q, int oBase, int count, float4 sum,
                             device const float* biases, device const float* neuronData,
                             device float* destination, device float* preactivation) {
    float4 value = p.hasBias ? loadFloat4(biases, oBase, count, false) + sum : sum;
    if (p.writePreactivation)
        storeFloat4(preactivation, pixelIndex(p.preactivation, q.n, q.y, q.x) + oBase, value, count,
                    kAlignedPreactivation);
    if (kNeuronType != kNeuronNone) {
        float4 channelA = p.neuron.hasChannelData ? loadFloat4(neuronData, oBase, count, false) : float4(0.0f);
        for (int j = 0; j < 4; ++j)
            value[j] = neuronForward(kNeuronType, p.neuron.a, p.neuron.b, p.neuron.c, channelA[j], value[j]);
    }
    storeFloat4(destination, pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x) + oBase, value,
                count, kAlignedOutput);
}

// ------------------------------------------------------------------------------------------
// Data gradient

// Clip pixels are processed by stride phase (y mod strideY, x mod strideX): within a phase the
// same kernel taps hit gradient samples, so the reduction only runs over those taps.
struct Phase {
    int py;
    int px;
    int rows;     // clip rows of this phase
    int cols;     // clip columns of this phase
    PhaseTaps ty;
    PhaseTaps tx;
};

inline Phase dataGradientPhase(constant ConvolutionDataGradientParams& p, int phase) {
    Phase ph;
    ph.py = phase / p.strideX;
    ph.px = phase - ph.py * p.strideX;
    ph.rows = ph.py < p.clipHeight ? ceilDiv(p.clipHeight - ph.py, p.strideY) : 0;
    ph.cols = ph.px < p.clipWidth ? ceilDiv(p.clipWidth - ph.px, p.strideX) : 0;
    ph.ty = phaseTaps(p.windowTopY + ph.py, p.dilationY, p.strideY, p.kernelHeight);
    ph.tx = phaseTaps(p.windowLeftX + ph.px, p.dilationX, p.strideX, p.kernelWidth);
    return ph;
}

// Clip pixel (y, x) of the m-th pixel of a phase, with its image.
inline FlatPixel phasePixel(constant ConvolutionDataGradientParams& p, Phase ph, int m) {
    FlatPixel q = unflattenPixel(m, ph.rows, ph.cols);
    q.y = ph.py + p.strideY * q.y;
    q.x = ph.px + p.strideX * q.x;
    return q;
}

// Reduction element k = (tap index t, output channel o) of a phase, with k = t * cog + o.
struct GradientTap {
    int ty;
    int tx;
    int o;
};

inline GradientTap gradientTapOf(Phase ph, int k, int cog) {
    GradientTap t;
    int tap = k / cog;
    t.o = k - tap * cog;
    int a = tap / ph.tx.count;
    t.ty = ph.ty.first + a * ph.ty.step;
    t.tx = ph.tx.first + (tap - a * ph.tx.count) * ph.tx.step;
    return t;
}

// Index into E of channel o of the zero-inserted gradient Z at the tap, or -1 for an inserted
// zero or a position outside E.
inline int zeroInsertedIndex(constant ConvolutionDataGradientParams& p, FlatPixel q, GradientTap t, int g,
                             int cog) {
    int zy = p.windowTopY + q.y + p.dilationY * t.ty;
    int zx = p.windowLeftX + q.x + p.dilationX * t.tx;
    if (zy < 0 || zx < 0) return -1;
    int ey = zy / p.strideY;  // zy is a multiple of strideY for a phase tap
    int ex = zx / p.strideX;
    if (ey >= p.gradient.height || ex >= p.gradient.width) return -1;
    return pixelIndex(p.gradient, q.n, ey, ex) + g * cog + t.o;
}

inline void stageDataGradientPatch(constant ConvolutionDataGradientParams& p, device const float* gradient,
                                   Phase ph, FlatPixel q, bool valid, int am, int tid, int k0, int kTotal,
                                   int cog, int g, threadgroup PixelQuads* tileA) {
    const int kStep = kGemmThreads / kTileM;
    if (kAlignedInput) {
        // cog % 4 == 0: four consecutive k are four consecutive channels of one tap.
        for (int kq = tid / kTileM; kq < kTileK / 4; kq += kStep) {
            int k = k0 + 4 * kq;
            float4 v = 0.0f;
            if (valid && k < kTotal) {
                int idx = zeroInsertedIndex(p, q, gradientTapOf(ph, k, cog), g, cog);
                if (idx >= 0) v = *reinterpret_cast<device const float4*>(gradient + idx);
            }
            stageColumn4(tileA, 4 * kq, am, v);
        }
    } else {
        for (int kk = tid / kTileM; kk < kTileK; kk += kStep) {
            int k = k0 + kk;
            float v = 0.0f;
            if (valid && k < kTotal) {
                int idx = zeroInsertedIndex(p, q, gradientTapOf(ph, k, cog), g, cog);
                if (idx >= 0) v = gradient[idx];
            }
            tileA[kk][am / 4][am % 4] = v;
        }
    }
}

// B[k][c] = W[g*cog + o][kH-1-ty][kW-1-tx][n0 + c]: the rotated, I/O-transposed kernel,
// contiguous along c.
inline void stageDataGradientWeights(constant ConvolutionDataGradientParams& p, device const float* weights,
                                     Phase ph, int tid, int k0, int n0, int kTotal, int cig, int cog, int g,
                                     threadgroup ChannelQuads* tileB) {
    const int kFull = p.kernelHeight * p.kernelWidth * cig;
    if (kAlignedWeights) {
        // cig % 4 == 0: thread stages whole channel quads.
        const int nq = tid % kQuadsN;
        const int c = n0 + 4 * nq;
        for (int kk = tid / kQuadsN; kk < kTileK; kk += kGemmThreads / kQuadsN) {
            int k = k0 + kk;
            float4 v = 0.0f;
            if (k < kTotal && c < cig) {
                GradientTap t = gradientTapOf(ph, k, cog);
                int tap = (p.kernelHeight - 1 - t.ty) * p.kernelWidth + (p.kernelWidth - 1 - t.tx);
                v = *reinterpret_cast<device const float4*>(weights + (g * cog + t.o) * kFull + tap * cig + c);
            }
            tileB[kk][nq] = v;
        }
    } else {
        const int nn = tid % kTileN;
        const int c = n0 + nn;
        for (int kk = tid / kTileN; kk < kTileK; kk += kGemmThreads / kTileN) {
            int k = k0 + kk;
            float v = 0.0f;
            if (k < kTotal && c < cig) {
                GradientTap t = gradientTapOf(ph, k, cog);
                int tap = (p.kernelHeight - 1 - t.ty) * p.kernelWidth + (p.kernelWidth - 1 - t.tx);
                v = weights[(g * cog + t.o) * kFull + tap * cig + c];
            }
            tileB[kk][nn / 4][nn % 4] = v;
        }
    }
}

// ------------------------------------------------------------------------------------------
// Weight and bias gradients

// dW[o][col .. col + count) = sum (+ the old value when accumulating).
inline void writeWeightGradient(constant ConvolutionWeightGradientParams& p, device float* weightGradient,
                                int index, int count, float4 sum) {
    if (p.accumulate) sum += loadFloat4(weightGradient, index, count, kAlignedWeights);
    storeFloat4(weightGradient, index, sum, count, kAlignedWeights);
}

// Sums the kReduceThreads partial float4s of a threadgroup in a fixed order: simd_sum within each
// simdgroup, then the simdgroups' results in simdgroup order. The total is valid in thread 0.
inline float4 reduceThreadgroup(float4 partial, threadgroup float4* simdSums, uint lane, uint simd, uint tid) {
    float4 s = simd_sum(partial);
    if (lane == 0) simdSums[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float4 total = 0.0f;
    if (tid == 0) {
        total = simdSums[0];
        for (int i = 1; i < kReduceThreads / kSimdWidth; ++i) total += simdSums[i];
    }
    return total;
}

}  // namespace conv

using namespace conv;

// ==========================================================================================
// Forward: grid (ceil(pixels / kTileM), ceil(cog / kTileN), groups) x kGemmThreads.
// Bindings: 0 params, 1 source, 2 weights (OHWI), 3 biases, 4 neuron data (PReLU a),
// 5 destination, 6 preactivation.

[[max_total_threads_per_threadgroup(64)]]
kernel void convolution_forward(constant ConvolutionParams& p [[buffer(0)]],
                                device const float* source [[buffer(1)]],
                                device const float* weights [[buffer(2)]],
                                device const float* biases [[buffer(3)]],
                                device const float* neuronData [[buffer(4)]],
                                device float* destination [[buffer(5)]],
                                device float* preactivation [[buffer(6)]],
                                uint3 group [[threadgroup_position_in_grid]],
                                uint threadIndex [[thread_index_in_threadgroup]]) {
    threadgroup float4 tileA[kTileK][kQuadsM];  // [k][pixel quad]: im2col patch
    threadgroup float4 tileB[kTileK][kQuadsN];  // [k][channel quad]: weights

    const int tid = int(threadIndex);
    const int g = int(group.z);
    const int cig = p.source.channels / p.groups;
    const int cog = p.destination.channels / p.groups;
    const int kg = p.kernelHeight * p.kernelWidth * cig;
    const int pixels = p.batch * p.clipHeight * p.clipWidth;
    const int m0 = int(group.x) * kTileM;
    const int n0 = int(group.y) * kTileN;

    const int am = tid % kTileM;  // the GEMM row this thread stages
    const Window w = forwardWindow(p, m0 + am, pixels);
    const int tm = tid / kQuadsN, tn = tid % kQuadsN;  // the micro-tile this thread owns

    float4 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    for (int k0 = 0; k0 < kg; k0 += kTileK) {
        stageForwardPatch(p, source, w, am, tid, k0, kg, cig, g, tileA);
        stageForwardWeights(weights, tid, k0, n0, kg, cog, g, tileB);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        multiplyStagedTiles(tileA, tileB, tm, tn, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    const int c = n0 + 4 * tn;
    if (c >= cog) return;
    const int count = min(4, cog - c);
    for (int r = 0; r < 4; ++r) {
        int m = m0 + 4 * tm + r;
        if (m >= pixels) break;
        FlatPixel q = unflattenPixel(m, p.clipHeight, p.clipWidth);
        writeForwardQuad(p, q, g * cog + c, count, acc[r], biases, neuronData, destination, preactivation);
    }
}

// Depthwise forward: one thread per (channel quad, clip pixel); the reduction is the kernel
// window only. Grid (ceil(channels / 4), clipWidth, batch * clipHeight) threads. Bindings as
// convolution_forward.
kernel void convolution_forward_depthwise(constant ConvolutionParams& p [[buffer(0)]],
                                          device const float* source [[buffer(1)]],
                                          device const float* weights [[buffer(2)]],
                                          device const float* biases [[buffer(3)]],
                                          device const float* neuronData [[buffer(4)]],
                                          device float* destination [[buffer(5)]],
                                          device float* preactivation [[buffer(6)]],
                                          uint3 gid [[thread_position_in_grid]]) {
    const int channels = p.destination.channels;
    const int c = 4 * int(gid.x);
    const int x = int(gid.y), row = int(gid.z);
    if (c >= channels || x >= p.clipWidth || row >= p.batch * p.clipHeight) return;
    const int count = min(4, channels - c);
    const int taps = p.kernelHeight * p.kernelWidth;

    FlatPixel q;
    q.n = row / p.clipHeight;
    q.y = row - q.n * p.clipHeight;
    q.x = x;
    const int top = p.windowTopY + p.strideY * q.y;
    const int left = p.windowLeftX + p.strideX * q.x;

    float4 sum = 0.0f;
    for (int ky = 0; ky < p.kernelHeight; ++ky) {
        for (int kx = 0; kx < p.kernelWidth; ++kx) {
            int idx = edgePixelIndex(p.source, p.edgeMode, q.n, top + p.dilationY * ky, left + p.dilationX * kx);
            if (idx < 0) continue;  // zero padding contributes exact zeros
            float4 s = loadFloat4(source, idx + c, count, kAlignedInput);
            float4 wv = 0.0f;
            for (int j = 0; j < 4; ++j)
                if (j < count) wv[j] = weights[(c + j) * taps + ky * p.kernelWidth + kx];
            sum += s * wv;
        }
    }
    writeForwardQuad(p, q, c, count, sum, biases, neuronData, destination, preactivation);
}

// ==========================================================================================
// Data gradient: grid (ceil(phase-0 pixels / kTileM), ceil(cig / kTileN), groups * strideY *
// strideX) x kGemmThreads. Bindings: 0 params, 1 gradient E, 2 weights, 3 destination dX.

[[max_total_threads_per_threadgroup(64)]]
kernel void convolution_data_gradient(constant ConvolutionDataGradientParams& p [[buffer(0)]],
                                      device const float* gradient [[buffer(1)]],
                                      device const float* weights [[buffer(2)]],
                                      device float* destination [[buffer(3)]],
                                      device const float* biases [[buffer(4)]],
                                      uint3 group [[threadgroup_position_in_grid]],
                                      uint threadIndex [[thread_index_in_threadgroup]]) {
    threadgroup float4 tileA[kTileK][kQuadsM];  // [k][pixel quad]: zero-inserted gradient patch
    threadgroup float4 tileB[kTileK][kQuadsN];  // [k][channel quad]: rotated weights

    const int tid = int(threadIndex);
    const int phases = p.strideX * p.strideY;
    const int g = int(group.z) / phases;
    const Phase ph = dataGradientPhase(p, int(group.z) - g * phases);
    const int pixels = p.batch * ph.rows * ph.cols;
    const int m0 = int(group.x) * kTileM;
    if (m0 >= pixels) return;  // the whole threadgroup leaves: smaller phases need fewer blocks

    const int cig = p.destination.channels / p.groups;
    const int cog = p.gradient.channels / p.groups;
    const int kTotal = ph.ty.count * ph.tx.count * cog;
    const int n0 = int(group.y) * kTileN;

    const int am = tid % kTileM;
    const bool valid = m0 + am < pixels;
    const FlatPixel aq = phasePixel(p, ph, valid ? m0 + am : m0);
    const int tm = tid / kQuadsN, tn = tid % kQuadsN;

    float4 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    for (int k0 = 0; k0 < kTotal; k0 += kTileK) {
        stageDataGradientPatch(p, gradient, ph, aq, valid, am, tid, k0, kTotal, cog, g, tileA);
        stageDataGradientWeights(p, weights, ph, tid, k0, n0, kTotal, cig, cog, g, tileB);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        multiplyStagedTiles(tileA, tileB, tm, tn, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    // Pixels of a phase with no tap on a gradient sample get the zeros they sum to.
    const int c = n0 + 4 * tn;
    if (c >= cig) return;
    const int count = min(4, cig - c);
    // A transposed convolution's forward pass adds its biases (hasBias is 0 for a data gradient).
    const float4 bias = p.hasBias ? loadFloat4(biases, g * cig + c, count, false) : float4(0.0f);
    for (int r = 0; r < 4; ++r) {
        int m = m0 + 4 * tm + r;
        if (m >= pixels) break;
        FlatPixel q = phasePixel(p, ph, m);
        int idx = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x) + g * cig + c;
        storeFloat4(destination, idx, acc[r] + bias, count, kAlignedOutput);
    }
}

// Depthwise data gradient: one thread per (channel quad, clip pixel) summing its phase's taps.
// Grid (ceil(channels / 4), clipWidth, batch * clipHeight) threads. Bindings as above.
kernel void convolution_data_gradient_depthwise(constant ConvolutionDataGradientParams& p [[buffer(0)]],
                                                device const float* gradient [[buffer(1)]],
                                                device const float* weights [[buffer(2)]],
                                                device float* destination [[buffer(3)]],
                                                device const float* biases [[buffer(4)]],
                                                uint3 gid [[thread_position_in_grid]]) {
    const int channels = p.destination.channels;
    const int c = 4 * int(gid.x);
    const int x = int(gid.y), row = int(gid.z);
    if (c >= channels || x >= p.clipWidth || row >= p.batch * p.clipHeight) return;
    const int count = min(4, channels - c);
    const int taps = p.kernelHeight * p.kernelWidth;
    const int n = row / p.clipHeight;
    const int y = row - n * p.clipHeight;

    const PhaseTaps ty = phaseTaps(p.windowTopY + y, p.dilationY, p.strideY, p.kernelHeight);
    const PhaseTaps tx = phaseTaps(p.windowLeftX + x, p.dilationX, p.strideX, p.kernelWidth);
    float4 sum = 0.0f;
    for (int a = 0; a < ty.count; ++a) {
        int kyT = ty.first + a * ty.step;
        int zy = p.windowTopY + y + p.dilationY * kyT;
        if (zy < 0 || zy / p.strideY >= p.gradient.height) continue;
        for (int b = 0; b < tx.count; ++b) {
            int kxT = tx.first + b * tx.step;
            int zx = p.windowLeftX + x + p.dilationX * kxT;
            if (zx < 0 || zx / p.strideX >= p.gradient.width) continue;
            float4 e = loadFloat4(gradient, pixelIndex(p.gradient, n, zy / p.strideY, zx / p.strideX) + c, count,
                                  kAlignedInput);
            int tap = (p.kernelHeight - 1 - kyT) * p.kernelWidth + (p.kernelWidth - 1 - kxT);
            float4 wv = 0.0f;
            for (int j = 0; j < 4; ++j)
                if (j < count) wv[j] = weights[(c + j) * taps + tap];
            sum += e * wv;
        }
    }
    if (p.hasBias) sum += loadFloat4(biases, c, count, false);
    storeFloat4(destination, pixelIndex(p.destination, n, p.clipY + y, p.clipX + x) + c, sum, count,
                kAlignedOutput);
}

// The rotated, I/O-swapped weights of a transposed convolution (ConvolutionTransposeWeightsParams).
// One thread per source element: grid (inChannels / groups, kernelWidth * kernelHeight, outChannels).
// Bindings: 0 params, 1 source, 2 destination.
kernel void convolution_transpose_weights(constant ConvolutionTransposeWeightsParams& p [[buffer(0)]],
                                          device const float* source [[buffer(1)]],
                                          device float* destination [[buffer(2)]],
                                          uint3 gid [[thread_position_in_grid]]) {
    const int og = p.outChannels / p.groups, ig = p.inChannels / p.groups;
    const int ii = int(gid.x), tap = int(gid.y), o = int(gid.z);
    const int taps = p.kernelWidth * p.kernelHeight;
    if (ii >= ig || tap >= taps || o >= p.outChannels) return;
    const int g = o / og, oo = o - g * og;
    const int i = g * ig + ii;
    destination[(i * taps + (taps - 1 - tap)) * og + oo] = source[(o * taps + tap) * ig + ii];
}

// ==========================================================================================
// Weight gradient: grid (ceil(kg / kWgTileC), ceil(cog / kWgTileO), groups * split.slices) x
// kWgThreads. A threadgroup owns dW[o0 .. o0+8)[c0 .. c0+16) of one group and reduces over the
// pixels of its slice of E (all of them when split.slices == 1). Per step it stages 32 pixels'
// gradient values and input patches; simdgroup s owns columns c0 + 4s .. c0 + 4s + 3 of all 8
// rows, lane l accumulates pixel l of every step, and simd_sum adds the lanes at the end.
// Small layers have few tiles, so the host splits their pixels into slices (more threadgroups);
// each slice then writes its sums to `partials` ([slice][cout][kg]) and sum_slices
// (utility.metal) adds them in slice order.
// Bindings: 0 params, 1 gradient E, 2 source X, 3 weight gradient dW, 4 split, 5 partials.

[[max_total_threads_per_threadgroup(128)]]
kernel void convolution_weight_gradient(constant ConvolutionWeightGradientParams& p [[buffer(0)]],
                                        device const float* gradient [[buffer(1)]],
                                        device const float* source [[buffer(2)]],
                                        device float* weightGradient [[buffer(3)]],
                                        constant ReductionSplit& split [[buffer(4)]],
                                        device float* partials [[buffer(5)]],
                                        uint3 group [[threadgroup_position_in_grid]],
                                        uint threadIndex [[thread_index_in_threadgroup]],
                                        uint lane [[thread_index_in_simdgroup]],
                                        uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float4 tileE[kWgPixels][kWgTileO / 4];  // [pixel][output quad]
    threadgroup float4 tileX[kWgPixels][kWgTileC / 4];  // [pixel][column quad]

    const int tid = int(threadIndex);
    const int g = int(group.z) % p.groups;
    const int sliceIndex = int(group.z) / p.groups;
    const int cig = p.source.channels / p.groups;
    const int cog = p.gradient.channels / p.groups;
    const int kg = p.kernelHeight * p.kernelWidth * cig;
    const int o0 = int(group.y) * kWgTileO;
    const int c0 = int(group.x) * kWgTileC;
    const int pixels = min(p.batch * p.gradient.height * p.gradient.width, (sliceIndex + 1) * split.pixelsPerSlice);
    const int slot = tid % kWgPixels;  // the staged pixel this thread loads for

    float4 acc[kWgTileO];  // acc[r]: output o0 + r, columns c0 + 4*simd .. + 3
    for (int r = 0; r < kWgTileO; ++r) acc[r] = 0.0f;

    for (int base = sliceIndex * split.pixelsPerSlice; base < pixels; base += kWgPixels) {
        const int m = base + slot;
        const bool valid = m < pixels;
        const FlatPixel q = unflattenPixel(valid ? m : 0, p.gradient.height, p.gradient.width);
        const int eIndex = pixelIndex(p.gradient, q.n, q.y, q.x) + g * cog;
        const int top = p.windowTopY + p.strideY * q.y;
        const int left = p.windowLeftX + p.strideX * q.x;

        // E[pixel][o0 .. o0 + 8)
        if (kAlignedGradient) {
            if (tid < kWgPixels * kWgTileO / 4) {
                int oq = tid / kWgPixels;
                int o = o0 + 4 * oq;
                tileE[slot][oq] = (valid && o < cog)
                                      ? *reinterpret_cast<device const float4*>(gradient + eIndex + o)
                                      : float4(0.0f);
            }
        } else {
            for (int oo = tid / kWgPixels; oo < kWgTileO; oo += kWgThreads / kWgPixels) {
                int o = o0 + oo;
                tileE[slot][oo / 4][oo % 4] = (valid && o < cog) ? gradient[eIndex + o] : 0.0f;
            }
        }
        // X patch[pixel][c0 .. c0 + 16)
        if (kAlignedInput) {
            int cq = tid / kWgPixels;  // kWgThreads / kWgPixels == kWgTileC / 4
            int col = c0 + 4 * cq;
            float4 v = 0.0f;
            if (valid && col < kg) {
                Tap t = tapOf(col, cig, p.kernelWidth);
                int idx = edgePixelIndex(p.source, p.edgeMode, q.n, top + p.dilationY * t.ky,
                                         left + p.dilationX * t.kx);
                if (idx >= 0) v = *reinterpret_cast<device const float4*>(source + idx + g * cig + t.i);
            }
            tileX[slot][cq] = v;
        } else {
            for (int cc = tid / kWgPixels; cc < kWgTileC; cc += kWgThreads / kWgPixels) {
                int col = c0 + cc;
                float v = 0.0f;
                if (valid && col < kg) {
                    Tap t = tapOf(col, cig, p.kernelWidth);
                    int idx = edgePixelIndex(p.source, p.edgeMode, q.n, top + p.dilationY * t.ky,
                                             left + p.dilationX * t.kx);
                    if (idx >= 0) v = source[idx + g * cig + t.i];
                }
                tileX[slot][cc / 4][cc % 4] = v;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        const float4 xv = tileX[lane][simd];
        const float4 e0 = tileE[lane][0];
        const float4 e1 = tileE[lane][1];
        acc[0] += e0.x * xv;
        acc[1] += e0.y * xv;
        acc[2] += e0.z * xv;
        acc[3] += e0.w * xv;
        acc[4] += e1.x * xv;
        acc[5] += e1.y * xv;
        acc[6] += e1.z * xv;
        acc[7] += e1.w * xv;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    const int col = c0 + 4 * int(simd);
    const int rows = p.gradient.channels;  // of dW, over all groups
    for (int r = 0; r < kWgTileO; ++r) {
        float4 sum = simd_sum(acc[r]);
        int o = o0 + r;
        if (lane != 0 || o >= cog || col >= kg) continue;
        int index = (g * cog + o) * kg + col;
        if (split.slices == 1)
            writeWeightGradient(p, weightGradient, index, min(4, kg - col), sum);
        else
            storeFloat4(partials, sliceIndex * rows * kg + index, sum, min(4, kg - col), kAlignedWeights);
    }
}

// Depthwise weight gradient: a threadgroup per (channel quad, tap) reduces E * X over every
// pixel. Grid (ceil(channels / 4), kernelHeight * kernelWidth) x kReduceThreads. Bindings as above.
[[max_total_threads_per_threadgroup(256)]]
kernel void convolution_weight_gradient_depthwise(constant ConvolutionWeightGradientParams& p [[buffer(0)]],
                                                  device const float* gradient [[buffer(1)]],
                                                  device const float* source [[buffer(2)]],
                                                  device float* weightGradient [[buffer(3)]],
                                                  uint3 group [[threadgroup_position_in_grid]],
                                                  uint threadIndex [[thread_index_in_threadgroup]],
                                                  uint lane [[thread_index_in_simdgroup]],
                                                  uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float4 simdSums[kReduceThreads / kSimdWidth];

    const int channels = p.gradient.channels;
    const int c = 4 * int(group.x);
    const int count = min(4, channels - c);
    const int tap = int(group.y);
    const int taps = p.kernelHeight * p.kernelWidth;
    const int ky = tap / p.kernelWidth, kx = tap - ky * p.kernelWidth;
    const int pixels = p.batch * p.gradient.height * p.gradient.width;

    float4 partial = 0.0f;
    for (int m = int(threadIndex); m < pixels; m += kReduceThreads) {
        FlatPixel q = unflattenPixel(m, p.gradient.height, p.gradient.width);
        int idx = edgePixelIndex(p.source, p.edgeMode, q.n, p.windowTopY + p.strideY * q.y + p.dilationY * ky,
                                 p.windowLeftX + p.strideX * q.x + p.dilationX * kx);
        if (idx < 0) continue;
        float4 e = loadFloat4(gradient, pixelIndex(p.gradient, q.n, q.y, q.x) + c, count, kAlignedGradient);
        partial += e * loadFloat4(source, idx + c, count, kAlignedInput);
    }
    float4 total = reduceThreadgroup(partial, simdSums, lane, simd, threadIndex);
    if (threadIndex != 0) return;
    for (int j = 0; j < 4; ++j) {
        if (j >= count) break;
        int index = (c + j) * taps + tap;  // OHWI with one input channel: stride `taps` between channels
        weightGradient[index] = p.accumulate ? weightGradient[index] + total[j] : total[j];
    }
}

// Bias gradient: a threadgroup per channel quad reduces E over every pixel.
// Grid ceil(channels / 4) x kReduceThreads. Bindings: 0 params, 1 gradient E, 2 bias gradient dB.
[[max_total_threads_per_threadgroup(256)]]
kernel void convolution_bias_gradient(constant ConvolutionWeightGradientParams& p [[buffer(0)]],
                                      device const float* gradient [[buffer(1)]],
                                      device float* biasGradient [[buffer(2)]],
                                      uint3 group [[threadgroup_position_in_grid]],
                                      uint threadIndex [[thread_index_in_threadgroup]],
                                      uint lane [[thread_index_in_simdgroup]],
                                      uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float4 simdSums[kReduceThreads / kSimdWidth];

    const int c = 4 * int(group.x);
    const int count = min(4, p.gradient.channels - c);
    const int pixels = p.batch * p.gradient.height * p.gradient.width;

    float4 partial = 0.0f;
    for (int m = int(threadIndex); m < pixels; m += kReduceThreads) {
        FlatPixel q = unflattenPixel(m, p.gradient.height, p.gradient.width);
        partial += loadFloat4(gradient, pixelIndex(p.gradient, q.n, q.y, q.x) + c, count, kAlignedGradient);
    }
    float4 total = reduceThreadgroup(partial, simdSums, lane, simd, threadIndex);
    if (threadIndex != 0) return;
    if (p.accumulate) total += loadFloat4(biasGradient, c, count, false);
    storeFloat4(biasGradient, c, total, count, false);
}
