// Params of tests/kernels/simdgroup_matrix.metal, shared with test_simdgroup_matrix.cpp.
#pragma once

#ifndef __METAL_VERSION__
#include <cstdint>
typedef uint32_t uint;
#endif

// D (M x N) = A (M x K) * B (K x N) + C (M x N), all row-major; B is passed as its transpose
// Bt (N x K). M, N, K are multiples of 8.
struct SimdgroupGemmParams {
    uint M, N, K;
};
