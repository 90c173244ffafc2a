// The sub-pixel shuffle of the convolution family (MPSCNNSubPixelConvolutionDescriptor): the
// forward shuffle of the low-resolution convolution result into the r-times larger destination,
// and its inverse for the gradient. Semantics are exactly those of metal/sub_pixel_params.h,
// which the CPU backend (cpp/mpsgrad/backend/cpu/sub_pixel.cpp) implements too; the host side is
// cpp/mpsgrad/backend/metal/metal_sub_pixel.cpp.
//
// One thread moves one element (its channel, column, and batch * row of the grid it gathers
// into). Both directions are gathers, so every element is written by the one thread that owns
// it: no threadgroup memory, no atomics, results identical to the CPU bit for bit.
#include <metal_stdlib>

#include "image_indexing.h"
#include "sub_pixel_params.h"

using namespace metal;
using namespace mpsgrad;

namespace sub_pixel {

// The element a thread handles; `valid` is false past the dispatch.
struct ElementTask {
    int n;
    int x;
    int y;
    int c;
    bool valid;
};

inline ElementTask elementTask(uint3 gid, int channels, int width, int height, int batch) {
    ElementTask t;
    t.c = int(gid.x);
    t.x = int(gid.y);
    const int row = int(gid.z);
    t.valid = t.c < channels && t.x < width && row < batch * height;
    t.n = t.valid ? row / height : 0;
    t.y = row - t.n * height;
    return t;
}

}  // namespace sub_pixel

using namespace sub_pixel;

// Grid (high.channels, clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 low (Io), 2 high (the destination).
kernel void sub_pixel_shuffle(constant SubPixelShuffleParams& p [[buffer(0)]],
                              device const float* low [[buffer(1)]],
                              device float* high [[buffer(2)]],
                              uint3 gid [[thread_position_in_grid]]) {
    const ElementTask t = elementTask(gid, p.high.channels, p.clipWidth, p.clipHeight, p.batch);
    if (!t.valid) return;
    const int r = p.scale;
    const int rx = p.phaseX + t.x;  // relative to the requested clip origin
    const int ry = p.phaseY + t.y;
    const int group = r * (ry % r) + rx % r;
    const float value = low[pixelIndex(p.low, t.n, ry / r, rx / r) + group * p.high.channels + t.c];
    high[pixelIndex(p.high, t.n, p.clipY + t.y, p.clipX + t.x) + t.c] = value;
}

// Grid (low.channels, low.width, batch * low.height) threads: every element of `low` is written.
// Bindings: 0 params, 1 high (the incoming gradient), 2 low (its low-resolution arrangement).
kernel void sub_pixel_unshuffle(constant SubPixelShuffleParams& p [[buffer(0)]],
                                device const float* high [[buffer(1)]],
                                device float* low [[buffer(2)]],
                                uint3 gid [[thread_position_in_grid]]) {
    const ElementTask t = elementTask(gid, p.low.channels, p.low.width, p.low.height, p.batch);
    if (!t.valid) return;
    const int r = p.scale;
    const int group = t.c / p.high.channels;
    const int c = t.c - group * p.high.channels;
    const int qy = t.y * r + group / r - p.phaseY;  // position in the clip rectangle
    const int qx = t.x * r + group % r - p.phaseX;
    float value = 0.0f;
    if (qx >= 0 && qx < p.clipWidth && qy >= 0 && qy < p.clipHeight)
        value = high[pixelIndex(p.high, t.n, p.clipY + qy, p.clipX + qx) + c];
    low[pixelIndex(p.low, t.n, t.y, t.x) + t.c] = value;
}
