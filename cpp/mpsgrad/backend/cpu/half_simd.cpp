#include "backend/cpu/half_simd.h"

#include <cstring>

#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
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

void gatherHalvesToFloatsScalar(const uint16_t* const* sources, int rows, int64_t count, float* destination) {
    for (int r = 0; r < rows; ++r, destination += count)
        if (sources[r])
            halvesToFloatsScalar(sources[r], destination, count);
        else
            std::memset(destination, 0, sizeof(float) * size_t(count));
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

__attribute__((target("avx,f16c"))) void gatherHalvesToFloatsF16C(const uint16_t* const* sources, int rows,
                                                                   int64_t count, float* destination) {
    for (int r = 0; r < rows; ++r, destination += count) {
        if (sources[r])
            halvesToFloatsF16C(sources[r], destination, count);
        else
            std::memset(destination, 0, sizeof(float) * size_t(count));
    }
}
#endif

// CPUID leaf 1: F16C (ECX bit 29) and AVX (bit 28), and the OS saving the YMM registers (OSXSAVE,
// bit 27, then XCR0 bits 1-2). Read directly: clang 16's __builtin_cpu_supports knows no "f16c".
bool detectF16C() {
#ifdef MPSGRAD_HAVE_F16C_DISPATCH
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool f16c = (ecx >> 29) & 1u, avx = (ecx >> 28) & 1u, osxsave = (ecx >> 27) & 1u;
    if (!(f16c && avx && osxsave)) return false;
    unsigned xcr0Low = 0, xcr0High = 0;
    __asm__("xgetbv" : "=a"(xcr0Low), "=d"(xcr0High) : "c"(0));
    return (xcr0Low & 0x6u) == 0x6u;
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

void gatherHalvesToFloats(const uint16_t* const* sources, int rows, int64_t count, float* destination) {
#ifdef MPSGRAD_HAVE_F16C_DISPATCH
    if (hasHardwareHalfConversion()) return gatherHalvesToFloatsF16C(sources, rows, count, destination);
#endif
    gatherHalvesToFloatsScalar(sources, rows, count, destination);
}

}  // namespace mpsgrad::cpu
