// The dropout family's kernel (MPSCNNDropout and MPSCNNDropoutGradient share it: Y = mask ? X / p
// : 0). Semantics are exactly those of metal/dropout_params.h; the mask is the Philox4x32-10
// function of metal/philox.h, which the CPU backend (cpp/mpsgrad/backend/cpu/dropout.cpp) runs
// too, so both draw the same bits. The host side is cpp/mpsgrad/backend/metal/metal_dropout.cpp.
//
// One thread computes one channel quad of one pixel; no threadgroup memory, no atomics.
//
// Function constants:
//   kAligned*   the binding is read or written as aligned float4 quads
#include <metal_stdlib>

#include "dropout_params.h"
#include "image_indexing.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedDestination [[function_constant(3)]];

// Grid (ceil(channels / 4), clipWidth, batch * clipHeight) threads. Bindings: 0 params,
// 1 source (X or G), 2 destination (Y or dX).
kernel void dropout_apply(constant DropoutParams& p [[buffer(0)]],
                          device const float* source [[buffer(1)]],
                          device float* destination [[buffer(2)]],
                          uint3 gid [[thread_position_in_grid]]) {
    const int N = p.destination.channels;
    const int c0 = 4 * int(gid.x);
    const int x = int(gid.y);
    const int row = int(gid.z);
    if (c0 >= N || x >= p.clipWidth || row >= p.batch * p.clipHeight) return;
    const int n = row / p.clipHeight;
    const int y = row - n * p.clipHeight;
    const int count = min(4, N - c0);
    const DropoutMask m = p.mask;
    const float4 v = loadFloat4(source, pixelIndex(p.source, n, p.sourceY + y, p.sourceX + x) + c0, count, kAlignedSource);
    float4 r = float4(0.0f);
    DropoutIndex cached = ~DropoutIndex(0);
    PhiloxWords bits;
    bits.v0 = bits.v1 = bits.v2 = bits.v3 = 0u;
    for (int j = 0; j < 4; ++j) {
        if (j >= count) break;
        const DropoutIndex e = dropoutElement(m, m.firstImage + n, m.maskX + x, m.maskY + y, c0 + j);
        if ((e >> 2) != cached) {
            cached = e >> 2;
            bits = dropoutBlock(m, cached);
        }
        r[j] = dropoutKeeps(m, bits, e) ? v[j] / m.keepProbability : 0.0f;
    }
    storeFloat4(destination, pixelIndex(p.destination, n, p.clipY + y, p.clipX + x) + c0, r, count, kAlignedDestination);
}
