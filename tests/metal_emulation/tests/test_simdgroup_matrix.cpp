// SIMD-group matrices of the shim (mtlemu/msl_simdgroup_matrix.h) against naive references:
// a tiled GEMM reading A with elements_per_row and origins and B through a transposed load, and a
// half-precision kernel using threadgroup memory, a diagonal matrix, a filled matrix and a
// transposed store.
#include <cmath>
#include <random>

#include "emu_test_util.h"
#include "simdgroup_matrix_params.h"

namespace emutest {
namespace {

using SimdgroupMatrix = MetalTest;

std::vector<float> randomFloats(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

TEST_F(SimdgroupMatrix, TiledGemmWithTransposedLoadsMatchesNaiveProduct) {
    const unsigned M = 16, N = 24, K = 32;
    const std::vector<float> a = randomFloats(M * K, 1), b = randomFloats(K * N, 2), c = randomFloats(M * N, 3);
    std::vector<float> bt(N * K);
    for (unsigned k = 0; k < K; ++k)
        for (unsigned n = 0; n < N; ++n) bt[n * K + k] = b[k * N + n];
    MTL::Buffer* d = scratch(M * N * sizeof(float));
    const SimdgroupGemmParams params{M, N, K};
    MTL::ComputePipelineState* p = pipeline("simdgroup_gemm");
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(upload(a), 0, 1);
        enc->setBuffer(upload(bt), 0, 2);
        enc->setBuffer(upload(c), 0, 3);
        enc->setBuffer(d, 0, 4);
        enc->dispatchThreadgroups(MTL::Size(N / 8, M / 8, 1), MTL::Size(32, 1, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> got = download<float>(d, M * N);
    for (unsigned i = 0; i < M; ++i)
        for (unsigned j = 0; j < N; ++j) {
            double expected = c[i * N + j];
            for (unsigned k = 0; k < K; ++k) expected += double(a[i * K + k]) * b[k * N + j];
            EXPECT_NEAR(got[i * N + j], expected, 1e-5) << i << ", " << j;
        }
}

TEST_F(SimdgroupMatrix, HalfMatrixThroughThreadgroupMemoryDiagonalFillAndTransposedStore) {
    std::vector<_Float16> x(64);
    for (int i = 0; i < 64; ++i) x[i] = _Float16(float(i % 13) * 0.25f - 1.0f);
    MTL::Buffer* y = scratch(64 * sizeof(_Float16));
    MTL::ComputePipelineState* p = pipeline("simdgroup_half_transpose");
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(upload(x), 0, 0);
        enc->setBuffer(y, 0, 1);
        enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(32, 1, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<_Float16> got = download<_Float16>(y, 64);
    for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c)  // y[r][c] = (2 x + 0.5)[c][r], exact in half
            EXPECT_EQ(float(got[r * 8 + c]), 2.0f * float(x[c * 8 + r]) + 0.5f) << r << ", " << c;
}

}  // namespace
}  // namespace emutest
