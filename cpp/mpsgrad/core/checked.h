// Overflow-checked size arithmetic and range-checked narrowing, used wherever a size, a byte
// count or a params field is computed from user-controlled values. Every failure is a
// ValueError naming `what`, so an overflowing product can never reach an allocation or a
// backend op as a small wrapped-around number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/errors.h"

namespace mpsgrad::checked {

// a * b, or ValueError "what: ... overflows".
inline uint64_t mul(uint64_t a, uint64_t b, const char* what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        throwValueError(what, ": the size ", a, " x ", b, " overflows 64-bit arithmetic");
    return r;
}

// a + b, or ValueError.
inline uint64_t add(uint64_t a, uint64_t b, const char* what) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        throwValueError(what, ": the size ", a, " + ", b, " overflows 64-bit arithmetic");
    return r;
}

// The product of non-negative factors, or ValueError (a negative factor is a ValueError too).
inline uint64_t product(std::initializer_list<int64_t> factors, const char* what) {
    uint64_t r = 1;
    for (int64_t f : factors) {
        if (f < 0) throwValueError(what, ": a size factor is negative (", f, ")");
        r = mul(r, uint64_t(f), what);
    }
    return r;
}

// Signed versions for coordinates (offsets, window origins): ValueError on overflow.
inline int64_t mulSigned(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) throwValueError(what, ": ", a, " x ", b, " overflows 64-bit arithmetic");
    return r;
}
inline int64_t addSigned(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) throwValueError(what, ": ", a, " + ", b, " overflows 64-bit arithmetic");
    return r;
}

// The params structs shared with the .metal kernels hold 32-bit ints: every int64 → int32
// narrowing goes through here. ValueError unless `v` fits.
template <class T>
int32_t toInt32(T v, const char* what) {
    static_assert(std::numeric_limits<T>::is_integer, "toInt32 narrows integers");
    constexpr int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
    bool fits = std::numeric_limits<T>::is_signed ? (int64_t(v) >= lo && int64_t(v) <= hi) : uint64_t(v) <= uint64_t(hi);
    if (!fits) throwValueError(what, ": ", v, " is outside the range the kernels support ([", lo, ", ", hi, "])");
    return int32_t(v);
}

// v rounded up to a multiple of 4 (a pixel's channel stride), or ValueError when v is negative or
// the rounding overflows int64 (roundUpTo4 of core/types.h assumes neither).
inline int64_t roundUpTo4(int64_t v, const char* what) {
    if (v < 0) throwValueError(what, ": ", v, " is negative");
    if (v > std::numeric_limits<int64_t>::max() - 3)
        throwValueError(what, ": ", v, " rounded up to a multiple of 4 overflows 64-bit arithmetic");
    return (v + 3) & ~int64_t(3);
}

// Bytes of `count` floats, or ValueError.
inline size_t floatBytes(uint64_t count, const char* what) { return size_t(mul(count, sizeof(float), what)); }

}  // namespace mpsgrad::checked
