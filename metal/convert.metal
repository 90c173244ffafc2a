// Image storage format conversion of the Metal backend (metal/convert_params.h): IEEE half or
// normalized unsigned integers (unorm8, unorm16) <-> float32 over whole image storage, padding
// lanes included, for the float32 shadows of FLOAT16 and UNORM images (docs/float16.md,
// docs/storage_formats.md). Host side: cpp/mpsgrad/backend/metal/metal_convert.cpp.
//
// Metal converts float -> half rounding to nearest even, with overflow to infinity; half -> float
// is exact. The unorm rules are Metal's texture conversion rules, written out so that buffers get
// them too: x / (2^N - 1) with a correctly rounded division (precise::divide; the fast division may
// be an ulp off), and rint(clamp(f, 0, 1) * (2^N - 1)) back, rint rounding to nearest even; NaN
// becomes 0 (the comparison below is false for NaN, so the clamp sends it to 0, as core/unorm.h).
// Four elements per thread, scalar accesses: the elements of a run need not be 4-element aligned
// (a sub-range of an image starts at any element).
#include <metal_stdlib>

#include "convert_params.h"

using namespace metal;
using namespace mpsgrad;

namespace convert {
enum : int { kElementsPerThread = 4 };

// float -> the unorm code of `maximum` (255 or 65535), as a float holding an integer.
inline float to_unorm(float value, float maximum) {
    const float clamped = value > 0.0f ? min(value, 1.0f) : 0.0f;  // NaN -> 0
    return rint(clamped * maximum);
}
}  // namespace convert

// destination[i] = float(source[i]). Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (half), 2 destination (float).
kernel void convert_half_to_float(constant ConvertFormatParams& p [[buffer(0)]],
                                  device const half* source [[buffer(1)]],
                                  device float* destination [[buffer(2)]],
                                  uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = float(source[i]);
}

// destination[i] = half(source[i]). Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (float), 2 destination (half).
kernel void convert_float_to_half(constant ConvertFormatParams& p [[buffer(0)]],
                                  device const float* source [[buffer(1)]],
                                  device half* destination [[buffer(2)]],
                                  uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = half(source[i]);
}

// destination[i] = source[i] / 255. Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (uchar), 2 destination (float).
kernel void convert_unorm8_to_float(constant ConvertFormatParams& p [[buffer(0)]],
                                    device const uchar* source [[buffer(1)]],
                                    device float* destination [[buffer(2)]],
                                    uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = precise::divide(float(source[i]), 255.0f);
}

// destination[i] = the unorm8 code of source[i]. Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (float), 2 destination (uchar).
kernel void convert_float_to_unorm8(constant ConvertFormatParams& p [[buffer(0)]],
                                    device const float* source [[buffer(1)]],
                                    device uchar* destination [[buffer(2)]],
                                    uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = uchar(convert::to_unorm(source[i], 255.0f));
}

// destination[i] = source[i] / 65535. Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (ushort), 2 destination (float).
kernel void convert_unorm16_to_float(constant ConvertFormatParams& p [[buffer(0)]],
                                     device const ushort* source [[buffer(1)]],
                                     device float* destination [[buffer(2)]],
                                     uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = precise::divide(float(source[i]), 65535.0f);
}

// destination[i] = the unorm16 code of source[i]. Grid ceil(count / 4) threads. Bindings: 0 params,
// 1 source (float), 2 destination (ushort).
kernel void convert_float_to_unorm16(constant ConvertFormatParams& p [[buffer(0)]],
                                     device const float* source [[buffer(1)]],
                                     device ushort* destination [[buffer(2)]],
                                     uint gid [[thread_position_in_grid]]) {
    const int first = convert::kElementsPerThread * int(gid);
    const int end = min(first + convert::kElementsPerThread, p.count);
    for (int i = first; i < end; ++i) destination[i] = ushort(convert::to_unorm(source[i], 65535.0f));
}
