// Normalized unsigned integer ("unorm") <-> float32 conversion, scalar code.
//
// Used at the image boundary (readBytes / writeBytes of UNORM8 and UNORM16 images) and by the CPU
// backend's convertImageFormat; metal/convert.metal implements the same rules. They are Metal's
// texture conversion rules for unorm pixels (docs/storage_formats.md):
//   unorm -> float: x / (2^N - 1), correctly rounded (a division, not a multiplication by the
//                   reciprocal, which is off by one ulp for some x);
//   float -> unorm: clamp to [0, 1], multiply by 2^N - 1 in float32, round to nearest, ties to
//                   even; NaN becomes 0 (Metal leaves NaN to the implementation; 0 is what D3D and
//                   Vulkan specify, and the value a clamp that ignores NaN would give).
#pragma once

#include <cmath>
#include <cstdint>

namespace mpsgrad {

// float -> the unorm code of `maximum` (255 or 65535).
inline uint32_t floatToUnorm(float value, float maximum) {
    if (!(value > 0.0f)) return 0;  // negative, zero and NaN
    if (value >= 1.0f) return uint32_t(maximum);
    // 0 < value * maximum < maximum < 2^16: nearbyint rounds to nearest even in the default mode.
    return uint32_t(std::nearbyint(value * maximum));
}

inline uint8_t floatToUnorm8(float value) { return uint8_t(floatToUnorm(value, 255.0f)); }
inline uint16_t floatToUnorm16(float value) { return uint16_t(floatToUnorm(value, 65535.0f)); }
inline float unorm8ToFloat(uint8_t code) { return float(code) / 255.0f; }
inline float unorm16ToFloat(uint16_t code) { return float(code) / 65535.0f; }

}  // namespace mpsgrad
