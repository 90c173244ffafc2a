// The batch normalization family's kernels (MPSCNNBatchNormalizationStatistics, MPSCNNBatchNormalization,
// MPSCNNBatchNormalizationStatisticsGradient, MPSCNNBatchNormalizationGradient). Semantics are exactly
// those of metal/batch_normalization_params.h (the CPU backend, cpp/mpsgrad/backend/cpu/
// batch_normalization.cpp, computes the same formulas). Host side: metal_batch_normalization.cpp.
//
// The two reductions run one threadgroup of kReduceThreads threads per channel: thread t takes the
// pixels t, t + kReduceThreads, ... of the batch, simd_sum combines the lanes of each simdgroup, and
// thread 0 adds the kReduceSimdgroups partial sums in index order. The assignment of pixels to
// threads depends only on the dispatch, so the sums are reproducible bit for bit. The element-wise
// kernels run a thread per (pixel, channel).
#include <metal_stdlib>

#include "batch_normalization_params.h"
#include "neuron_math.h"

using namespace metal;
using namespace mpsgrad;

namespace batchnorm {

enum : int {
    kSimdWidth = 32,
    kReduceSimdgroups = 8,
    kReduceThreads = kSimdWidth * kReduceSimdgroups,  // threads per threadgroup of the reductions
};

// Float index of channel c of flat pixel j (0 <= j < batch * width * height) of an image batch.
inline int channelIndex(ImageLayout l, int j, int c) {
    const int pixels = l.width * l.height;
    const int n = j / pixels;
    return n * l.imageStride + (j - n * pixels) * l.pixelStride + l.channelOffset + c;
}

inline float channelSlope(NeuronParams n, device const float* neuronData, int c) {
    return n.hasChannelData ? neuronData[c] : 0.0f;
}

// Sums `value` over the threadgroup of kReduceThreads threads in a fixed order; the result is
// valid in thread 0 only.
inline float threadgroupSum(float value, threadgroup float* partial, uint lane, uint simd) {
    const float s = simd_sum(value);
    if (lane == 0) partial[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    if (simd == 0 && lane == 0)
        for (int k = 0; k < kReduceSimdgroups; ++k) total += partial[k];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return total;
}

}  // namespace batchnorm

using namespace batchnorm;

// One threadgroup of kReduceThreads threads per channel. Bindings: 0 params, 1 source X, 2 mean,
// 3 variance.
[[max_total_threads_per_threadgroup(256)]]
kernel void batch_normalization_statistics(constant BatchNormalizationParams& p [[buffer(0)]],
                                           device const float* source [[buffer(1)]],
                                           device float* mean [[buffer(2)]],
                                           device float* variance [[buffer(3)]],
                                           uint group [[threadgroup_position_in_grid]],
                                           uint tid [[thread_index_in_threadgroup]],
                                           uint lane [[thread_index_in_simdgroup]],
                                           uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[kReduceSimdgroups];
    const int c = int(group);
    const int m = p.batch * p.source.width * p.source.height;
    // Sums around the first pixel's value: no cancellation for data far from zero.
    const float shift = source[channelIndex(p.source, 0, c)];
    float s1 = 0.0f, s2 = 0.0f;
    for (int j = int(tid); j < m; j += kReduceThreads) {
        const float d = source[channelIndex(p.source, j, c)] - shift;
        s1 += d;
        s2 += d * d;
    }
    const float sum1 = threadgroupSum(s1, partial, lane, simd);
    const float sum2 = threadgroupSum(s2, partial, lane, simd);
    if (tid != 0) return;
    const float mb = float(m);
    const float meanB = shift + sum1 / mb;
    const float m2B = max(0.0f, sum2 - sum1 * sum1 / mb);
    if (p.previousCount == 0) {
        mean[c] = meanB;
        variance[c] = m2B / mb;
        return;
    }
    const float n0 = float(p.previousCount), total = n0 + mb;
    const float meanA = mean[c];
    const float delta = meanB - meanA;
    mean[c] = meanA + delta * (mb / total);
    variance[c] = (variance[c] * n0 + m2B + delta * delta * (n0 / total) * mb) / total;
}

// A thread per (pixel, channel). Bindings: 0 params, 1 source X, 2 gamma, 3 beta, 4 mean,
// 5 variance, 6 neuron data, 7 destination Y.
kernel void batch_normalization_forward(constant BatchNormalizationParams& p [[buffer(0)]],
                                        device const float* source [[buffer(1)]],
                                        device const float* gamma [[buffer(2)]],
                                        device const float* beta [[buffer(3)]],
                                        device const float* mean [[buffer(4)]],
                                        device const float* variance [[buffer(5)]],
                                        device const float* neuronData [[buffer(6)]],
                                        device float* destination [[buffer(7)]],
                                        uint gid [[thread_position_in_grid]]) {
    const int C = p.source.channels;
    const int index = int(gid);
    if (index >= p.batch * p.source.width * p.source.height * C) return;
    const int j = index / C, c = index - j * C;
    const float scale = gamma[c] / sqrt(variance[c] + p.epsilon);
    const float z = (source[channelIndex(p.source, j, c)] - mean[c]) * scale + beta[c];
    const NeuronParams n = p.neuron;
    destination[channelIndex(p.destination, j, c)] =
        n.type == kNeuronNone ? z : neuronForward(n.type, n.a, n.b, n.c, channelSlope(n, neuronData, c), z);
}

namespace batchnorm {

// G' = G·f'(z) at one element.
inline float neuronGradient(constant BatchNormalizationParams& p, device const float* neuronData, float g, float z,
                            int c) {
    const NeuronParams n = p.neuron;
    return n.type == kNeuronNone ? g : g * neuronDerivative(n.type, n.a, n.b, n.c, channelSlope(n, neuronData, c), z);
}

}  // namespace batchnorm

// One threadgroup of kReduceThreads threads per channel. Bindings: 0 params, 1 gradient G, 2 source X,
// 3 gamma, 4 beta, 5 mean, 6 variance, 7 neuron data, 8 gamma gradient, 9 beta gradient.
[[max_total_threads_per_threadgroup(256)]]
kernel void batch_normalization_statistics_gradient(constant BatchNormalizationParams& p [[buffer(0)]],
                                                    device const float* gradient [[buffer(1)]],
                                                    device const float* source [[buffer(2)]],
                                                    device const float* gamma [[buffer(3)]],
                                                    device const float* beta [[buffer(4)]],
                                                    device const float* mean [[buffer(5)]],
                                                    device const float* variance [[buffer(6)]],
                                                    device const float* neuronData [[buffer(7)]],
                                                    device float* gammaGradient [[buffer(8)]],
                                                    device float* betaGradient [[buffer(9)]],
                                                    uint group [[threadgroup_position_in_grid]],
                                                    uint tid [[thread_index_in_threadgroup]],
                                                    uint lane [[thread_index_in_simdgroup]],
                                                    uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partial[kReduceSimdgroups];
    const int c = int(group);
    const int m = p.batch * p.source.width * p.source.height;
    const float invStd = 1.0f / sqrt(variance[c] + p.epsilon);
    const float scale = gamma[c] * invStd;
    float sumG = 0.0f, sumGX = 0.0f;
    for (int j = int(tid); j < m; j += kReduceThreads) {
        const float x = source[channelIndex(p.source, j, c)];
        const float xhat = (x - mean[c]) * invStd;
        const float g = neuronGradient(p, neuronData, gradient[channelIndex(p.gradient, j, c)],
                                       (x - mean[c]) * scale + beta[c], c);
        sumG += g;
        sumGX += g * xhat;
    }
    const float totalG = threadgroupSum(sumG, partial, lane, simd);
    const float totalGX = threadgroupSum(sumGX, partial, lane, simd);
    if (tid != 0) return;
    betaGradient[c] = p.previousCount != 0 ? betaGradient[c] + totalG : totalG;
    gammaGradient[c] = p.previousCount != 0 ? gammaGradient[c] + totalGX : totalGX;
}

// A thread per (pixel, channel). Bindings: 0 params, 1 gradient G, 2 source X, 3 gamma, 4 beta, 5 mean,
// 6 variance, 7 neuron data, 8 gamma gradient, 9 beta gradient, 10 destination dX.
kernel void batch_normalization_gradient(constant BatchNormalizationParams& p [[buffer(0)]],
                                         device const float* gradient [[buffer(1)]],
                                         device const float* source [[buffer(2)]],
                                         device const float* gamma [[buffer(3)]],
                                         device const float* beta [[buffer(4)]],
                                         device const float* mean [[buffer(5)]],
                                         device const float* variance [[buffer(6)]],
                                         device const float* neuronData [[buffer(7)]],
                                         device const float* gammaGradient [[buffer(8)]],
                                         device const float* betaGradient [[buffer(9)]],
                                         device float* destination [[buffer(10)]],
                                         uint gid [[thread_position_in_grid]]) {
    const int C = p.source.channels;
    const int index = int(gid);
    if (index >= p.batch * p.source.width * p.source.height * C) return;
    const int j = index / C, c = index - j * C;
    const float invStd = 1.0f / sqrt(variance[c] + p.epsilon);
    const float scale = gamma[c] * invStd;
    const float x = source[channelIndex(p.source, j, c)];
    const float xhat = (x - mean[c]) * invStd;
    const float g = neuronGradient(p, neuronData, gradient[channelIndex(p.gradient, j, c)],
                                   (x - mean[c]) * scale + beta[c], c);
    float dx = scale * g;
    if (p.trainingStatistics != 0) {
        const float M = float(p.totalCount);
        dx = scale * (g - betaGradient[c] / M - xhat * (gammaGradient[c] / M));
    }
    destination[channelIndex(p.destination, j, c)] = dx;
}
