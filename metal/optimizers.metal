// The optimizer update of the Metal backend (metal/optimizers_params.h; the per-element math is
// metal/optimizer_math.h, shared with the CPU backend). Host side:
// cpp/mpsgrad/backend/metal/metal_optimizers.cpp.
//
// One thread per element: every element is independent (no threadgroup memory, no reductions).
// State vectors the rule does not use are bound to the backend's placeholder buffer and never
// read or written.
#include <metal_stdlib>

#include "optimizer_math.h"
#include "optimizers_params.h"

using namespace metal;
using namespace mpsgrad;

// Grid: count threads. Bindings: 0 params, 1 gradient, 2 values, 3 state0, 4 state1, 5 state2,
// 6 result (may alias values: each thread reads its element before writing it).
kernel void optimizer_update(constant OptimizerParams& p [[buffer(0)]],
                             device const float* gradient [[buffer(1)]],
                             device const float* values [[buffer(2)]],
                             device float* state0 [[buffer(3)]],
                             device float* state1 [[buffer(4)]],
                             device float* state2 [[buffer(5)]],
                             device float* result [[buffer(6)]],
                             uint gid [[thread_position_in_grid]]) {
    const int i = int(gid);
    if (i >= p.count) return;
    const OptimizerParams q = p;
    const bool usesState0 = q.kind != kOptimizerSGD || q.hasState0 != 0;
    const bool usesState1 = q.kind == kOptimizerAdam;
    const bool usesState2 = q.kind == kOptimizerAdam && q.amsgrad != 0;
    float s0 = usesState0 ? state0[i] : 0.0f;
    float s1 = usesState1 ? state1[i] : 0.0f;
    float s2 = usesState2 ? state2[i] : 0.0f;
    const float w = optimizerUpdate(q, gradient[i], values[i], s0, s1, s2);
    if (usesState0) state0[i] = s0;
    if (usesState1) state1[i] = s1;
    if (usesState2) state2[i] = s2;
    result[i] = w;
}
