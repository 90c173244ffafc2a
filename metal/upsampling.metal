// The upsampling family's kernels (MPSCNNUpsamplingNearest / Bilinear and their gradients).
// Semantics are exactly those of metal/upsampling_params.h, whose sampling rule the CPU backend
// (cpp/mpsgrad/backend/cpu/upsampling.cpp) shares. The host side is
// cpp/mpsgrad/backend/metal/metal_upsampling.cpp.
//
// One thread computes one channel quad of one output pixel (forward) or of one dX pixel
// (gradient, gathering the outputs that reach it in the fixed order of upsampling_params.h). No
// threadgroup memory, no atomics: every element is written by the one thread that owns it.
//
// Function constants:
//   kUpsamplingMode  UpsamplingModeCode (the other mode's branches compile away)
//   kAligned*        the binding is read or written as aligned float4 quads
#include <metal_stdlib>

#include "image_indexing.h"
#include "upsampling_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant int kUpsamplingMode [[function_constant(0)]];
constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedGradient [[function_constant(2)]];
constant bool kAlignedDestination [[function_constant(3)]];

namespace upsampling {

// The pixel and channel quad a thread handles; `valid` is false past the dispatch.
struct QuadTask {
    int n;
    int x;
    int y;
    int c;
    int count;
    bool valid;
};

inline QuadTask quadTask(uint3 gid, int channels, int batch, int width, int height) {
    QuadTask q;
    q.c = 4 * int(gid.x);
    q.x = int(gid.y);
    const int row = int(gid.z);
    q.valid = q.c < channels && q.x < width && row < batch * height;
    q.n = q.valid ? row / height : 0;
    q.y = row - q.n * height;
    q.count = min(4, channels - q.c);
    return q;
}

inline float4 sourceQuad(device const float* x, ImageLayout l, int n, int px, int py, int c, int count) {
    return loadFloat4(x, pixelIndex(l, n, py, px) + c, count, kAlignedSource);
}

}  // namespace upsampling

using namespace upsampling;

// Y = upsample(X). Grid (ceil(channels / 4), clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 source X, 2 destination Y.
kernel void upsampling_forward(constant UpsamplingParams& p [[buffer(0)]],
                               device const float* source [[buffer(1)]],
                               device float* destination [[buffer(2)]],
                               uint3 gid [[thread_position_in_grid]]) {
    const QuadTask q = quadTask(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!q.valid) return;
    const UpsamplingTap tx = upsamplingTap(p.outputX + q.x, p.inputWidth, p.scaleX, kUpsamplingMode, p.coordinateMode);
    const UpsamplingTap ty = upsamplingTap(p.outputY + q.y, p.inputHeight, p.scaleY, kUpsamplingMode, p.coordinateMode);
    const ImageLayout l = p.source;
    const float4 x00 = sourceQuad(source, l, q.n, p.sourceX + tx.i0, p.sourceY + ty.i0, q.c, q.count);
    float4 r = x00;
    if (kUpsamplingMode == kUpsamplingBilinear) {
        const float4 x01 = sourceQuad(source, l, q.n, p.sourceX + tx.i1, p.sourceY + ty.i0, q.c, q.count);
        const float4 x10 = sourceQuad(source, l, q.n, p.sourceX + tx.i0, p.sourceY + ty.i1, q.c, q.count);
        const float4 x11 = sourceQuad(source, l, q.n, p.sourceX + tx.i1, p.sourceY + ty.i1, q.c, q.count);
        const float lx = tx.lambda;
        const float ly = ty.lambda;
        for (int j = 0; j < 4; ++j)
            r[j] = (1.0f - ly) * ((1.0f - lx) * x00[j] + lx * x01[j]) + ly * ((1.0f - lx) * x10[j] + lx * x11[j]);
    }
    const int d = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x) + q.c;
    storeFloat4(destination, d, r, q.count, kAlignedDestination);
}

// dX by gathering (upsampling_params.h). Grid (ceil(channels / 4), clipWidth, batch * clipHeight)
// threads. Bindings: 0 params, 1 gradient G, 2 destination dX.
kernel void upsampling_gradient(constant UpsamplingGradientParams& p [[buffer(0)]],
                                device const float* gradient [[buffer(1)]],
                                device float* destination [[buffer(2)]],
                                uint3 gid [[thread_position_in_grid]]) {
    const QuadTask q = quadTask(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!q.valid) return;
    const int ix = p.inputX + q.x;
    const int iy = p.inputY + q.y;
    float4 acc = float4(0.0f);
    if (ix >= 0 && ix < p.inputWidth && iy >= 0 && iy < p.inputHeight) {
        const int oxLo = max(0, -p.gradientX);
        const int oyLo = max(0, -p.gradientY);
        const int oxHi = min(p.inputWidth * p.scaleX, p.gradient.width - p.gradientX) - 1;
        const int oyHi = min(p.inputHeight * p.scaleY, p.gradient.height - p.gradientY) - 1;
        const UpsamplingRange ry = upsamplingReach(iy, p.inputHeight, p.scaleY, kUpsamplingMode, p.coordinateMode);
        const UpsamplingRange rx = upsamplingReach(ix, p.inputWidth, p.scaleX, kUpsamplingMode, p.coordinateMode);
        for (int oy = max(ry.lo, oyLo); oy <= min(ry.hi, oyHi); ++oy) {
            const float wy = upsamplingWeight(
                upsamplingTap(oy, p.inputHeight, p.scaleY, kUpsamplingMode, p.coordinateMode), iy);
            if (wy == 0.0f) continue;
            float4 row = float4(0.0f);
            for (int ox = max(rx.lo, oxLo); ox <= min(rx.hi, oxHi); ++ox) {
                const float wx = upsamplingWeight(
                    upsamplingTap(ox, p.inputWidth, p.scaleX, kUpsamplingMode, p.coordinateMode), ix);
                if (wx == 0.0f) continue;
                const int gi = pixelIndex(p.gradient, q.n, p.gradientY + oy, p.gradientX + ox) + q.c;
                const float4 g = loadFloat4(gradient, gi, q.count, kAlignedGradient);
                for (int j = 0; j < 4; ++j) row[j] += wx * g[j];
            }
            for (int j = 0; j < 4; ++j) acc[j] += wy * row[j];
        }
    }
    const int d = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x) + q.c;
    storeFloat4(destination, d, acc, q.count, kAlignedDestination);
}
