// Utility kernels of the Metal backend: fill, copy and feature-channel copies
// (metal/utility_params.h). Host side: cpp/mpsgrad/backend/metal/metal_utility.cpp.
#include <metal_stdlib>

#include "image_indexing.h"
#include "utility_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedDestination [[function_constant(3)]];

namespace utility {
enum : int { kFloatsPerThread = 4 };
}

// destination[i] = value. Grid ceil(count / 4) threads. Bindings: 0 params, 1 destination.
kernel void fill_floats(constant FillParams& p [[buffer(0)]],
                        device float* destination [[buffer(1)]],
                        uint gid [[thread_position_in_grid]]) {
    const int i = utility::kFloatsPerThread * int(gid);
    if (i >= p.count) return;
    storeFloat4(destination, i, float4(p.value), min(4, p.count - i), kAlignedDestination);
}

// destination[i] = source[i]. Grid ceil(count / 4) threads. Bindings: 0 params, 1 source,
// 2 destination.
kernel void copy_floats(constant CopyParams& p [[buffer(0)]],
                        device const float* source [[buffer(1)]],
                        device float* destination [[buffer(2)]],
                        uint gid [[thread_position_in_grid]]) {
    const int i = utility::kFloatsPerThread * int(gid);
    if (i >= p.count) return;
    const int count = min(4, p.count - i);
    storeFloat4(destination, i, loadFloat4(source, i, count, kAlignedSource), count, kAlignedDestination);
}

// One channel quad of one pixel per thread. Grid (ceil(channels / 4), width, batch * height)
// threads. Bindings: 0 params, 1 source, 2 destination.
kernel void copy_channels(constant ChannelCopyParams& p [[buffer(0)]],
                          device const float* source [[buffer(1)]],
                          device float* destination [[buffer(2)]],
                          uint3 gid [[thread_position_in_grid]]) {
    const int c = 4 * int(gid.x);
    const int x = int(gid.y), row = int(gid.z);
    const int height = p.source.height;
    if (c >= p.source.channels || x >= p.source.width || row >= p.batch * height) return;
    const int n = row / height, y = row - n * height;
    const int count = min(4, p.source.channels - c);
    float4 v = loadFloat4(source, pixelIndex(p.source, n, y, x) + c, count, kAlignedSource);
    storeFloat4(destination, pixelIndex(p.destination, n, y, x) + c, v, count, kAlignedDestination);
}

// destination[i] (+)= partials[i] + partials[count + i] + ... in slice order: the second pass of
// a reduction split across threadgroups (ReductionSplit). Grid ceil(count / 4) threads.
// Bindings: 0 params, 1 partials, 2 destination.
kernel void sum_slices(constant SumSlicesParams& p [[buffer(0)]],
                       device const float* partials [[buffer(1)]],
                       device float* destination [[buffer(2)]],
                       uint gid [[thread_position_in_grid]]) {
    const int i = utility::kFloatsPerThread * int(gid);
    if (i >= p.count) return;
    const int count = min(4, p.count - i);
    float4 sum = loadFloat4(partials, i, count, kAlignedSource);
    for (int s = 1; s < p.slices; ++s) sum += loadFloat4(partials, s * p.count + i, count, kAlignedSource);
    if (p.accumulate) sum += loadFloat4(destination, i, count, kAlignedDestination);
    storeFloat4(destination, i, sum, count, kAlignedDestination);
}
