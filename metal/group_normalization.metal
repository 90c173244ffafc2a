// The group normalization kernels, which also serve instance normalization (one channel per
// group): MPSCNNGroupNormalization[Gradient], MPSCNNInstanceNormalization[Gradient]. Semantics are
// exactly those of metal/group_normalization_params.h (the CPU backend,
// cpp/mpsgrad/backend/cpu/group_normalization.cpp, computes the same formulas). Host side:
// metal_group_normalization.cpp.
//
// Both kernels are fused: one threadgroup of kThreads threads owns a whole group of values, reduces
// it, and then writes its outputs, so each op is a single dispatch. Reductions: thread t takes the
// values t, t + kThreads, ...; simd_sum combines the lanes of each simdgroup and thread 0 adds the
// kSimdgroups partial sums in index order. Which thread takes which value depends only on the
// dispatch, so every sum is reproducible bit for bit.
#include <metal_stdlib>

#include "group_normalization_params.h"

using namespace metal;
using namespace mpsgrad;

namespace groupnorm {

enum : int {
    kSimdWidth = 32,
    kSimdgroups = 8,
    kThreads = kSimdWidth * kSimdgroups,  // threads per threadgroup
};

// Float index of channel c (0 <= c < C) of pixel j (0 <= j < width·height) of image n.
inline int valueIndex(ImageLayout l, int n, int j, int c) {
    return n * l.imageStride + j * l.pixelStride + l.channelOffset + c;
}

// Sums `value` over the threadgroup in a fixed order; the result is valid in thread 0 only.
inline float threadgroupSum(float value, threadgroup float* partial, uint lane, uint simd) {
    const float s = simd_sum(value);
    if (lane == 0) partial[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    if (simd == 0 && lane == 0)
        for (int k = 0; k < kSimdgroups; ++k) total += partial[k];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return total;
}

}  // namespace groupnorm

using namespace groupnorm;

// One threadgroup per (image n, group g): threadgroup index = n·groups + g. The group's values are
// numbered e = j·K + k (pixel j, channel k of the group), memory order. Bindings: 0 params,
// 1 source X, 2 gamma, 3 beta, 4 statistics (written), 5 destination Y.
[[max_total_threads_per_threadgroup(256)]]
kernel void group_normalization_forward(constant GroupNormalizationParams& p [[buffer(0)]],
                                        device const float* source [[buffer(1)]],
                                        device const float* gamma [[buffer(2)]],
                                        device const float* beta [[buffer(3)]],
                                        device float* statistics [[buffer(4)]],
                                        device float* destination [[buffer(5)]],
                                        uint group [[threadgroup_position_in_grid]],
                                        uint tid [[thread_index_in_threadgroup]],
                                        uint lane [[thread_index_in_simdgroup]],
                                        uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[kSimdgroups];
    threadgroup float shared[2];
    const int n = int(group) / p.groups, g = int(group) - n * p.groups;
    const int K = p.source.channels / p.groups;
    const int c0 = g * K;
    const int M = K * p.source.width * p.source.height;
    // Sums around the group's first value: no cancellation for data far from zero.
    const float shift = source[valueIndex(p.source, n, 0, c0)];
    float s1 = 0.0f, s2 = 0.0f;
    for (int e = int(tid); e < M; e += kThreads) {
        const int j = e / K;
        const float d = source[valueIndex(p.source, n, j, c0 + (e - j * K))] - shift;
        s1 += d;
        s2 += d * d;
    }
    const float sum1 = threadgroupSum(s1, partial, lane, simd);
    const float sum2 = threadgroupSum(s2, partial, lane, simd);
    if (tid == 0) {
        const float m = float(M);
        const float mean = shift + sum1 / m;
        const float variance = max(0.0f, sum2 - sum1 * sum1 / m) / m;
        statistics[2 * int(group)] = mean;
        statistics[2 * int(group) + 1] = variance;
        shared[0] = mean;
        shared[1] = 1.0f / sqrt(variance + p.epsilon);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float mean = shared[0], invStd = shared[1];
    for (int e = int(tid); e < M; e += kThreads) {
        const int j = e / K;
        const int c = c0 + (e - j * K);
        const float x = source[valueIndex(p.source, n, j, c)];
        destination[valueIndex(p.destination, n, j, c)] = (x - mean) * invStd * gamma[c] + beta[c];
    }
}

// One threadgroup per group g, walking the images n = 0 .. batch-1 in order (the parameter
// gradients sum over them). Per image: a reduction per channel of the group (the per-channel sums
// of G and G·x̂ over the pixels), then dX for the group's values. Bindings: 0 params, 1 gradient G,
// 2 source X, 3 gamma, 4 statistics (the forward's), 5 gamma gradient, 6 beta gradient (written),
// 7 destination dX.
[[max_total_threads_per_threadgroup(256)]]
kernel void group_normalization_gradient(constant GroupNormalizationParams& p [[buffer(0)]],
                                         device const float* gradient [[buffer(1)]],
                                         device const float* source [[buffer(2)]],
                                         device const float* gamma [[buffer(3)]],
                                         device const float* statistics [[buffer(4)]],
                                         device float* gammaGradient [[buffer(5)]],
                                         device float* betaGradient [[buffer(6)]],
                                         device float* destination [[buffer(7)]],
                                         uint group [[threadgroup_position_in_grid]],
                                         uint tid [[thread_index_in_threadgroup]],
                                         uint lane [[thread_index_in_simdgroup]],
                                         uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[kSimdgroups];
    threadgroup float shared[2];
    const int g = int(group);
    const int K = p.source.channels / p.groups;
    const int c0 = g * K;
    const int pixels = p.source.width * p.source.height;
    const float M = float(K * pixels);
    for (int n = 0; n < p.batch; ++n) {
        const int s = 2 * (n * p.groups + g);
        const float mean = statistics[s];
        const float invStd = 1.0f / sqrt(statistics[s + 1] + p.epsilon);
        float sumGamma = 0.0f, sumGammaX = 0.0f;  // A and B of the params header (thread 0)
        for (int k = 0; k < K; ++k) {
            const int c = c0 + k;
            float sG = 0.0f, sGX = 0.0f;
            for (int j = int(tid); j < pixels; j += kThreads) {
                const float gv = gradient[valueIndex(p.gradient, n, j, c)];
                sG += gv;
                sGX += gv * ((source[valueIndex(p.source, n, j, c)] - mean) * invStd);
            }
            const float totalG = threadgroupSum(sG, partial, lane, simd);
            const float totalGX = threadgroupSum(sGX, partial, lane, simd);
            if (tid == 0) {
                betaGradient[c] = n == 0 ? totalG : betaGradient[c] + totalG;
                gammaGradient[c] = n == 0 ? totalGX : gammaGradient[c] + totalGX;
                sumGamma += gamma[c] * totalG;
                sumGammaX += gamma[c] * totalGX;
            }
        }
        if (tid == 0) {
            shared[0] = sumGamma / M;
            shared[1] = sumGammaX / M;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float a = shared[0], b = shared[1];
        for (int e = int(tid); e < K * pixels; e += kThreads) {
            const int j = e / K;
            const int c = c0 + (e - j * K);
            const float xhat = (source[valueIndex(p.source, n, j, c)] - mean) * invStd;
            destination[valueIndex(p.destination, n, j, c)] =
                invStd * (gamma[c] * gradient[valueIndex(p.gradient, n, j, c)] - a - xhat * b);
        }
        // The next image's thread 0 overwrites `shared` only after every thread has read it.
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
