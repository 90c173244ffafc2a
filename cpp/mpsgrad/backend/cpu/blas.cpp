#include "blas.h"

#if defined(MPSGRAD_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#elif defined(MPSGRAD_BLAS_SCIPY_OPENBLAS)
#include <cblas.h>  // scipy-openblas32's header: every symbol is prefixed with scipy_
#else
#error "no BLAS configured: cmake/MpsgradBlas.cmake defines MPSGRAD_BLAS_ACCELERATE or MPSGRAD_BLAS_SCIPY_OPENBLAS"
#endif

#include <mutex>
#include <string>

namespace mpsgrad::cpu::blas {
namespace {

#if defined(MPSGRAD_BLAS_SCIPY_OPENBLAS)
// The backend calls the BLAS from inside its own pool, one product per thread at a time; an
// OpenBLAS call that started its own team there would fight our workers for the cores. So this
// copy of OpenBLAS (the scipy-openblas32 package's; NumPy and SciPy wheels carry their own,
// renamed copies and keep their settings) is set to one thread, once. The wheel's library has
// no per-thread setting (openblas_set_num_threads_local is declared but not exported).
inline void singleThreadedHere() {
    static std::once_flag once;
    std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}
#define MPSGRAD_CBLAS(name) scipy_cblas_##name
#else
// Accelerate sizes its own threading; macOS 15 adds BLASSetThreading for explicit control.
inline void singleThreadedHere() {}
#define MPSGRAD_CBLAS(name) cblas_##name
#endif

}  // namespace

void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
    singleThreadedHere();
    MPSGRAD_CBLAS(sgemm)(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                         transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta,
                         C, ldc);
}

void ssyrkUpper(bool trans, int N, int K, float alpha, const float* A, int lda, float beta, float* C, int ldc) {
    if (N <= 0) return;
    singleThreadedHere();
    MPSGRAD_CBLAS(ssyrk)(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, N, K, alpha, A, lda, beta, C,
                         ldc);
}

const char* name() {
#if defined(MPSGRAD_BLAS_SCIPY_OPENBLAS)
    static const std::string text = std::string(scipy_openblas_get_config()) + " (scipy-openblas32)";
    return text.c_str();
#else
    return "Accelerate";
#endif
}

}  // namespace mpsgrad::cpu::blas
