// Image storage format conversion of the Metal backend (metal/convert_params.h): IEEE half <->
// float32 over whole image storage, padding lanes included, for the float32 shadows of FLOAT16
// images (docs/float16.md). Host side: cpp/mpsgrad/backend/metal/metal_convert.cpp.
//
// Metal converts float -> half rounding to nearest even, with overflow to infinity; half -> float
// is exact. Four elements per thread, scalar accesses: the halves of an element run need not be
// 8-byte aligned (a sub-range of an image starts at any element).
#include <metal_stdlib>

#include "convert_params.h"

using namespace metal;
using namespace mpsgrad;

namespace convert {
enum : int { kElementsPerThread = 4 };
}

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
