// mpsgrad's PReLU a-gradient (an extension: MPS has no gradient for PReLU's slopes). Semantics are
// those of NeuronGradientParams in metal/neuron_params.h:
//   dA[neuronDataOffset + c] = sum over n, y, x of G[...][gc + c] * (X[...][sc + c] < 0 ? X : 0)
// (the CPU backend's cpu::cnnNeuronPReLUWeightGradient). Host side:
// cpp/mpsgrad/backend/metal/metal_neuron_prelu.cpp.
//
// A threadgroup of kReduceThreads threads per channel quad: thread i takes the clip pixels
// i, i + kReduceThreads, ... in order, then simd_sum and the simdgroups' sums in simdgroup order
// combine them, so the result is reproducible bit for bit.
#include <metal_stdlib>

#include "image_indexing.h"
#include "neuron_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedGradient [[function_constant(2)]];

namespace prelu {
enum : int {
    kReduceThreads = 128,
    kSimdWidth = 32,
};
}  // namespace prelu

// Grid ceil(channels / 4) threadgroups of kReduceThreads threads. Bindings: 0 params, 1 gradient G,
// 2 source X (the forward input), 3 aGradient (overwritten at neuronDataOffset + c).
[[max_total_threads_per_threadgroup(128)]]
kernel void neuron_prelu_weight_gradient(constant NeuronGradientParams& p [[buffer(0)]],
                                         device const float* gradient [[buffer(1)]],
                                         device const float* source [[buffer(2)]],
                                         device float* aGradient [[buffer(3)]],
                                         uint group [[threadgroup_position_in_grid]],
                                         uint threadIndex [[thread_index_in_threadgroup]],
                                         uint lane [[thread_index_in_simdgroup]],
                                         uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float4 simdSums[prelu::kReduceThreads / prelu::kSimdWidth];
    const int channels = p.destination.channels;
    const int c = 4 * int(group);
    if (c >= channels) return;  // uniform across the threadgroup
    const int count = min(4, channels - c);
    const int pixels = p.batch * p.clipHeight * p.clipWidth;
    float4 partial = 0.0f;
    for (int m = int(threadIndex); m < pixels; m += prelu::kReduceThreads) {
        const FlatPixel q = unflattenPixel(m, p.clipHeight, p.clipWidth);
        const int gi = edgePixelIndex(p.gradient, p.gradientEdgeMode, q.n, p.gradientY + q.y, p.gradientX + q.x);
        const int xi = edgePixelIndex(p.source, p.sourceEdgeMode, q.n, p.sourceY + q.y, p.sourceX + q.x);
        if (gi < 0 || xi < 0) continue;  // a zero G or X contributes nothing
        const float4 g = loadFloat4(gradient, gi + c, count, kAlignedGradient);
        const float4 x = loadFloat4(source, xi + c, count, kAlignedSource);
        for (int j = 0; j < 4; ++j) partial[j] += g[j] * (x[j] < 0.0f ? x[j] : 0.0f);
    }
    const float4 s = simd_sum(partial);
    if (lane == 0) simdSums[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (threadIndex == 0) {
        float4 total = simdSums[0];
        for (int i = 1; i < prelu::kReduceThreads / prelu::kSimdWidth; ++i) total += simdSums[i];
        storeFloat4(aGradient, p.neuronDataOffset + c, total, count, false);
    }
}
