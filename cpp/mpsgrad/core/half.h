// IEEE 754 binary16 ("half") <-> binary32 conversion, portable scalar code.
//
// Used at the image boundary (readBytes / writeBytes of FLOAT16 images) and as the CPU backend's
// fallback where the processor has no F16C. Rules (docs/float16.md): float -> half rounds to nearest,
// ties to even; magnitudes >= 65520 become infinity; magnitudes below 2**-25 (and float subnormals)
// become a signed zero; NaN stays NaN (quiet, the payload's top bits kept); half -> float is exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace mpsgrad {

inline uint16_t floatToHalfBits(float value) {
    uint32_t x;
    std::memcpy(&x, &value, sizeof x);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t magnitude = x & 0x7fffffffu;
    if (magnitude >= 0x7f800000u)  // infinity or NaN (quiet bit set so a NaN stays a NaN)
        return uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u));
    if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520: rounds to infinity
    const int exponent = int(magnitude >> 23) - 127;
    if (exponent < -25) return sign;  // below half the smallest subnormal (or a float subnormal)
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;  // 24 significant bits
    uint32_t bits;
    int shift;
    if (exponent >= -14) {  // normal half: keep 11 significant bits
        shift = 13;
        bits = (uint32_t(exponent + 15) << 10) | ((mantissa >> shift) & 0x3ffu);
    } else {  // subnormal half: units of 2**-24
        shift = -(exponent + 1);  // 14 .. 24
        bits = mantissa >> shift;
    }
    const uint32_t remainder = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (bits & 1u))) ++bits;  // a carry moves the exponent up
    return uint16_t(sign | bits);
}

inline float halfBitsToFloat(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t x;
    if (exponent == 31) {
        x = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else {
        const float magnitude = float(mantissa) * (1.0f / 16777216.0f);  // mantissa * 2**-24, exact
        return sign ? -magnitude : magnitude;
    }
    float value;
    std::memcpy(&value, &x, sizeof value);
    return value;
}

}  // namespace mpsgrad
