// SIMD-group matrix kernels for the harness tests (test_simdgroup_matrix.cpp).
#include <metal_stdlib>

#include "simdgroup_matrix_params.h"

using namespace metal;

// One simdgroup per threadgroup, one 8 x 8 tile of D per threadgroup (tile = (column, row) of
// tiles). A is read with elements_per_row = K at origin (k, row), B through its transpose Bt with
// transpose_matrix, C and D at origin (column, row) with elements_per_row = N.
kernel void simdgroup_gemm(constant SimdgroupGemmParams& p [[buffer(0)]],
                           device const float* a [[buffer(1)]],
                           device const float* bt [[buffer(2)]],
                           device const float* c [[buffer(3)]],
                           device float* d [[buffer(4)]],
                           uint2 tile [[threadgroup_position_in_grid]]) {
    simdgroup_float8x8 acc;
    simdgroup_load(acc, c, p.N, ulong2(tile.x * 8, tile.y * 8));
    for (uint k = 0; k < p.K; k += 8) {
        simdgroup_float8x8 ma;
        simdgroup_float8x8 mb;
        simdgroup_load(ma, a, p.K, ulong2(k, tile.y * 8));
        simdgroup_load(mb, bt, p.K, ulong2(k, tile.x * 8), true);
        simdgroup_multiply_accumulate(acc, ma, mb, acc);
    }
    simdgroup_store(acc, d, p.N, ulong2(tile.x * 8, tile.y * 8));
}

// y = transpose(x * diag(2) + fill(0.5)) in half, through threadgroup memory: the 64 values are
// staged by the 32 threads, then loaded as a matrix after the barrier.
kernel void simdgroup_half_transpose(device const half* x [[buffer(0)]],
                                     device half* y [[buffer(1)]],
                                     uint tid [[thread_index_in_threadgroup]]) {
    threadgroup half stage[64];
    stage[tid] = x[tid];
    stage[tid + 32] = x[tid + 32];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_half8x8 m;
    simdgroup_load(m, stage);
    const simdgroup_half8x8 two = simdgroup_half8x8(2.0h);
    const simdgroup_half8x8 half_fill = make_filled_simdgroup_matrix<half, 8, 8>(0.5h);
    simdgroup_half8x8 r;
    simdgroup_multiply_accumulate(r, m, two, half_fill);
    simdgroup_store(r, y, 8, ulong2(0, 0), true);
}
