#include "backend/cpu/half_simd.h"

#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MPSGRAD_HAVE_F16C_DISPATCH 1
#endif

namespace mpsgrad::cpu {

namespace {

void halvesToFloatsScalar(const uint16_t* source, float* destination, int64_t count) {
    for (int64_t i = 0; i < count; ++i) destination[i] = halfBitsToFloat(source[i]);
}

void floatsToHalvesScalar(const float* source, uint16_t* destination, int64_t count) {
    for (int64_t i = 0; i < count; ++i) destination[i] = floatToHalfBits(source[i]);
}

#ifdef MPSGRAD_HAVE_F16C_DISPATCH
__attribute__((target("avx,f16c"))) void halvesToFloatsF16C(const uint16_t* source, float* destination,
                                                             int64_t count) {
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + i));
        _mm256_storeu_ps(destination + i, _mm256_cvtph_ps(h));
    }
    halvesToFloatsScalar(source + i, destination + i, count - i);
}

__attribute__((target("avx,f16c"))) void floatsToHalvesF16C(const float* source, uint16_t* destination,
                                                             int64_t count) {
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(source + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(destination + i), h);
    }
    floatsToHalvesScalar(source + i, destination + i, count - i);
}
#endif

bool detectF16C() {
#ifdef MPSGRAD_HAVE_F16C_DISPATCH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

}  // namespace

bool hasHardwareHalfConversion() {
    static const bool has = detectF16C();
    return has;
}

void halvesToFloats(const uint16_t* source, float* destination, int64_t count) {
#ifdef MPSGRAD_HAVE_F16C_DISPATCH
    if (hasHardwareHalfConversion()) return halvesToFloatsF16C(source, destination, count);
#endif
    halvesToFloatsScalar(source, destination, count);
}

void floatsToHalves(const float* source, uint16_t* destination, int64_t count) {
#ifdef MPSGRAD_HAVE_F16C_DISPATCH
    if (hasHardwareHalfConversion()) return floatsToHalvesF16C(source, destination, count);
#endif
    floatsToHalvesScalar(source, destination, count);
}

}  // namespace mpsgrad::cpu
