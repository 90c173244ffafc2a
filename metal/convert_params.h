// Params of the image format conversion (metal/convert.metal, the CPU backend's convert.cpp),
// shared by C++ and Metal. docs/float16.md and docs/storage_formats.md describe the rounding.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// The storage side of a conversion: MPSImageFeatureChannelFormat's values.
enum StorageFormatCode : int32_t {
    kStorageUnorm8 = 1,   // uint8, x / 255
    kStorageUnorm16 = 2,  // uint16, x / 65535
    kStorageFloat16 = 3,  // IEEE half
};

// Converts `count` consecutive elements between the storage format `storage` and float32:
// storage -> float32 (toStorage == 0; exact for half, x / (2^N - 1) correctly rounded for unorm) or
// float32 -> storage (toStorage == 1; half: round to nearest even, overflow to infinity, NaN stays
// NaN; unorm: clamp to [0, 1], times 2^N - 1, round to nearest even, NaN to 0).
struct ConvertFormatParams {
    int32_t count;
    int32_t toStorage;
    int32_t storage;
};

}  // namespace mpsgrad
