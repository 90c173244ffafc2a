// Params of the image format conversion (metal/convert.metal, the CPU backend's convert.cpp),
// shared by C++ and Metal. docs/float16.md describes the rounding.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// Converts `count` consecutive elements: IEEE half -> float32 (toHalf == 0, exact) or
// float32 -> half (toHalf == 1, round to nearest even, overflow to infinity, NaN stays NaN).
struct ConvertFormatParams {
    int32_t count;
    int32_t toHalf;
};

}  // namespace mpsgrad
