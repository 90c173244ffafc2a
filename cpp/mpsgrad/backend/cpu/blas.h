// The one door from the CPU backend to the system BLAS (cmake/MpsgradBlas.cmake picks it:
// OpenBLAS from scipy-openblas32 on Linux, Accelerate on macOS). Kernel code calls
// blas::sgemm and never includes a cblas header itself.
#pragma once

namespace mpsgrad::cpu::blas {

// C = alpha * op(A) * op(B) + beta * C, row-major: op(A) is M x K, op(B) is K x N, C is M x N.
// transA: A is stored K x M (row stride lda); likewise transB (B stored N x K).
//
// Runs on the calling thread only: the CPU backend parallelizes around its BLAS calls with
// its own pool (cpu/parallel.h), so the BLAS's own threading is switched off (no
// oversubscription, and a result never depends on the BLAS's thread count).
void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// The upper triangle (row-major) of C = alpha * op(A) * op(A)^T + beta * C, C N x N: op(A) is
// N x K; trans: A is stored K x N (row stride lda), so C = alpha * A^T A. The strictly lower
// triangle of C is not touched. Same threading as sgemm.
void ssyrkUpper(bool trans, int N, int K, float alpha, const float* A, int lda, float beta, float* C, int ldc);

// Which BLAS the build uses and its configuration, e.g. "OpenBLAS 0.3.34 ... (scipy-openblas32)".
const char* name();

}  // namespace mpsgrad::cpu::blas
