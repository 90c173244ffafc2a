// Utility ops of the Metal backend (kernels: metal/utility.metal), for backend code and tests.
// They encode into a command buffer of the Metal device like any op. Free of metal-cpp.
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "metal/utility_params.h"

namespace mpsgrad {

class CommandBuffer;

// destination[i] = value for i < count (floats).
void metalFill(Backend& backend, CommandBuffer& cb, const BufferSlice& destination, size_t count, float value);

// destination[i] = source[i] for i < count (floats) on the GPU; the ranges must not overlap.
void metalCopyFloats(Backend& backend, CommandBuffer& cb, const BufferSlice& source,
                     const BufferSlice& destination, size_t count);

// Copies a feature-channel slice of every pixel into another image's channel slice
// (metal/utility_params.h, ChannelCopyParams).
void metalCopyChannels(Backend& backend, CommandBuffer& cb, const ChannelCopyParams& params,
                       const BufferSlice& source, const BufferSlice& destination);

}  // namespace mpsgrad
