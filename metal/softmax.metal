// The softmax family's kernels (MPSCNNSoftMax, MPSCNNLogSoftMax and their gradients). Semantics are
// exactly those of metal/softmax_params.h (the CPU backend, cpp/mpsgrad/backend/cpu/softmax.cpp,
// computes the same formulas). The host side is cpp/mpsgrad/backend/metal/metal_softmax.cpp.
//
// Every pixel reduces across its N channels (max and sum of exponentials, or the sums of the
// gradient). Two shapes of the same computation:
//   *_simd    one simdgroup per pixel (kPixelsPerGroup pixels per threadgroup): lane l takes the
//             channel quads l, l + 32, ... and simd_max / simd_sum combine the lanes. For wide
//             pixels (the host picks it when N > kThreadChannels).
//   others    one thread per pixel looping over its quads, for a few channels, where a simdgroup
//             per pixel would leave most lanes idle.
// The max subtraction makes any input magnitude safe; the summation order depends only on N, so
// results are reproducible bit for bit.
//
// Function constants:
//   kLogSoftmax   log-softmax (and its gradient) instead of softmax
//   kAligned*     the binding is read or written as aligned float4 quads
#include <metal_stdlib>

#include "image_indexing.h"
#include "softmax_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant bool kLogSoftmax [[function_constant(0)]];
constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedGradient [[function_constant(2)]];
constant bool kAlignedDestination [[function_constant(3)]];
constant bool kAlignedOutput [[function_constant(4)]];

namespace softmax {

enum : int {
    kSimdWidth = 32,
    kPixelsPerGroup = 4,  // simdgroups (pixels) per threadgroup of the *_simd kernels
};

// Channels 4q .. 4q + 3 of the N channels at float index `index` (-1: an off-image read, zeros);
// lanes past N read `fill`.
inline float4 loadQuad(device const float* data, int index, int q, int N, bool aligned, float fill) {
    const int count = min(4, N - 4 * q);
    float4 v = index < 0 ? float4(0.0f) : loadFloat4(data, index + 4 * q, count, aligned);
    for (int j = count; j < 4; ++j) v[j] = fill;
    return v;
}

inline float max4(float4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }
inline float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// The clip pixel m of a dispatch (m < batch * clipHeight * clipWidth).
inline FlatPixel clipPixel(int m, int clipHeight, int clipWidth) { return unflattenPixel(m, clipHeight, clipWidth); }

// Writes softmax / log-softmax of quad q given the max and the sum of exponentials.
inline float4 softmaxQuad(float4 x, float mx, float sum, float logSum) {
    return kLogSoftmax ? (x - mx) - logSum : exp(x - mx) / sum;
}

// dX of quad q given the reduction (softmax: sum_j G_j Y_j; log-softmax: sum_j G_j).
inline float4 gradientQuad(float4 g, float4 y, float reduced) {
    return kLogSoftmax ? g - exp(y) * reduced : y * (g - reduced);
}

}  // namespace softmax

using namespace softmax;

// One thread per pixel. Grid batch * clipHeight * clipWidth threads. Bindings: 0 params,
// 1 source X, 2 destination Y.
kernel void softmax_forward(constant SoftmaxParams& p [[buffer(0)]],
                            device const float* source [[buffer(1)]],
                            device float* destination [[buffer(2)]],
                            uint gid [[thread_position_in_grid]]) {
    const int m = int(gid);
    if (m >= p.batch * p.clipHeight * p.clipWidth) return;
    const FlatPixel q = clipPixel(m, p.clipHeight, p.clipWidth);
    const int N = p.destination.channels;
    const int quads = ceilDiv(N, 4);
    const int si = edgePixelIndex(p.source, p.edgeMode, q.n, p.sourceY + q.y, p.sourceX + q.x);
    const int di = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x);
    float mx = -INFINITY;
    for (int k = 0; k < quads; ++k) mx = max(mx, max4(loadQuad(source, si, k, N, kAlignedSource, -INFINITY)));
    float sum = 0.0f;
    for (int k = 0; k < quads; ++k) sum += sum4(exp(loadQuad(source, si, k, N, kAlignedSource, -INFINITY) - mx));
    const float logSum = log(sum);
    for (int k = 0; k < quads; ++k) {
        const float4 x = loadQuad(source, si, k, N, kAlignedSource, 0.0f);
        storeFloat4(destination, di + 4 * k, softmaxQuad(x, mx, sum, logSum), min(4, N - 4 * k), kAlignedDestination);
    }
}

// One simdgroup per pixel, kPixelsPerGroup pixels per threadgroup of kPixelsPerGroup * 32 threads.
// Grid ceil(pixels / kPixelsPerGroup) threadgroups. Bindings as softmax_forward.
[[max_total_threads_per_threadgroup(128)]]
kernel void softmax_forward_simd(constant SoftmaxParams& p [[buffer(0)]],
                                 device const float* source [[buffer(1)]],
                                 device float* destination [[buffer(2)]],
                                 uint group [[threadgroup_position_in_grid]],
                                 uint lane [[thread_index_in_simdgroup]],
                                 uint simd [[simdgroup_index_in_threadgroup]]) {
    const int m = int(group) * kPixelsPerGroup + int(simd);
    if (m >= p.batch * p.clipHeight * p.clipWidth) return;  // the whole simdgroup
    const FlatPixel q = clipPixel(m, p.clipHeight, p.clipWidth);
    const int N = p.destination.channels;
    const int quads = ceilDiv(N, 4);
    const int si = edgePixelIndex(p.source, p.edgeMode, q.n, p.sourceY + q.y, p.sourceX + q.x);
    const int di = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x);
    float mx = -INFINITY;
    for (int k = int(lane); k < quads; k += kSimdWidth)
        mx = max(mx, max4(loadQuad(source, si, k, N, kAlignedSource, -INFINITY)));
    mx = simd_max(mx);
    float partial = 0.0f;
    for (int k = int(lane); k < quads; k += kSimdWidth)
        partial += sum4(exp(loadQuad(source, si, k, N, kAlignedSource, -INFINITY) - mx));
    const float sum = simd_sum(partial);
    const float logSum = log(sum);
    for (int k = int(lane); k < quads; k += kSimdWidth) {
        const float4 x = loadQuad(source, si, k, N, kAlignedSource, 0.0f);
        storeFloat4(destination, di + 4 * k, softmaxQuad(x, mx, sum, logSum), min(4, N - 4 * k), kAlignedDestination);
    }
}

// One thread per pixel. Grid batch * clipHeight * clipWidth threads. Bindings: 0 params,
// 1 gradient G, 2 output Y (the forward result), 3 destination dX.
kernel void softmax_gradient(constant SoftmaxGradientParams& p [[buffer(0)]],
                             device const float* gradient [[buffer(1)]],
                             device const float* output [[buffer(2)]],
                             device float* destination [[buffer(3)]],
                             uint gid [[thread_position_in_grid]]) {
    const int m = int(gid);
    if (m >= p.batch * p.clipHeight * p.clipWidth) return;
    const FlatPixel q = clipPixel(m, p.clipHeight, p.clipWidth);
    const int N = p.destination.channels;
    const int quads = ceilDiv(N, 4);
    const int gi = edgePixelIndex(p.gradient, p.gradientEdgeMode, q.n, p.gradientY + q.y, p.gradientX + q.x);
    const int yi = edgePixelIndex(p.output, p.outputEdgeMode, q.n, p.outputY + q.y, p.outputX + q.x);
    const int di = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x);
    float reduced = 0.0f;
    for (int k = 0; k < quads; ++k) {
        const float4 g = loadQuad(gradient, gi, k, N, kAlignedGradient, 0.0f);
        reduced += kLogSoftmax ? sum4(g) : sum4(g * loadQuad(output, yi, k, N, kAlignedOutput, 0.0f));
    }
    for (int k = 0; k < quads; ++k) {
        const float4 g = loadQuad(gradient, gi, k, N, kAlignedGradient, 0.0f);
        const float4 y = loadQuad(output, yi, k, N, kAlignedOutput, 0.0f);
        storeFloat4(destination, di + 4 * k, gradientQuad(g, y, reduced), min(4, N - 4 * k), kAlignedDestination);
    }
}

// One simdgroup per pixel (see softmax_forward_simd). Bindings as softmax_gradient.
[[max_total_threads_per_threadgroup(128)]]
kernel void softmax_gradient_simd(constant SoftmaxGradientParams& p [[buffer(0)]],
                                  device const float* gradient [[buffer(1)]],
                                  device const float* output [[buffer(2)]],
                                  device float* destination [[buffer(3)]],
                                  uint group [[threadgroup_position_in_grid]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint simd [[simdgroup_index_in_threadgroup]]) {
    const int m = int(group) * kPixelsPerGroup + int(simd);
    if (m >= p.batch * p.clipHeight * p.clipWidth) return;  // the whole simdgroup
    const FlatPixel q = clipPixel(m, p.clipHeight, p.clipWidth);
    const int N = p.destination.channels;
    const int quads = ceilDiv(N, 4);
    const int gi = edgePixelIndex(p.gradient, p.gradientEdgeMode, q.n, p.gradientY + q.y, p.gradientX + q.x);
    const int yi = edgePixelIndex(p.output, p.outputEdgeMode, q.n, p.outputY + q.y, p.outputX + q.x);
    const int di = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x);
    float partial = 0.0f;
    for (int k = int(lane); k < quads; k += kSimdWidth) {
        const float4 g = loadQuad(gradient, gi, k, N, kAlignedGradient, 0.0f);
        partial += kLogSoftmax ? sum4(g) : sum4(g * loadQuad(output, yi, k, N, kAlignedOutput, 0.0f));
    }
    const float reduced = simd_sum(partial);
    for (int k = int(lane); k < quads; k += kSimdWidth) {
        const float4 g = loadQuad(gradient, gi, k, N, kAlignedGradient, 0.0f);
        const float4 y = loadQuad(output, yi, k, N, kAlignedOutput, 0.0f);
        storeFloat4(destination, di + 4 * k, gradientQuad(g, y, reduced), min(4, N - 4 * k), kAlignedDestination);
    }
}
