// The reshape and pad family's kernels (MPSNNReshape, MPSNNPad and their gradients). Semantics are
// exactly those of metal/reshape_pad_params.h, which the CPU backend
// (cpp/mpsgrad/backend/cpu/reshape_pad.cpp) implements too. The host side is
// cpp/mpsgrad/backend/metal/metal_reshape_pad.cpp, which checks every index table before binding.
//
// One thread computes one destination element (its channel, column, and batch * row): channel
// padding and reshapes move elements across pixels, so there are no channel quads to vectorize.
// No threadgroup memory, no atomics: every element is written by the one thread that owns it.
#include <metal_stdlib>

#include "image_indexing.h"
#include "reshape_pad_params.h"

using namespace metal;
using namespace mpsgrad;

namespace reshape_pad {

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

}  // namespace reshape_pad

using namespace reshape_pad;

// Grid (destination.channels, destination.width, batch * destination.height) threads.
// Bindings: 0 params, 1 source, 2 destination.
kernel void reshape_copy(constant ReshapeParams& p [[buffer(0)]],
                         device const float* source [[buffer(1)]],
                         device float* destination [[buffer(2)]],
                         uint3 gid [[thread_position_in_grid]]) {
    const ImageLayout d = p.destination;
    const ImageLayout s = p.source;
    const ElementTask t = elementTask(gid, d.channels, d.width, d.height, p.batch);
    if (!t.valid) return;
    const int flat = (t.y * d.width + t.x) * d.channels + t.c;  // HWC index in the destination shape
    const int sourceRow = s.width * s.channels;
    const int sy = flat / sourceRow;
    const int r = flat - sy * sourceRow;
    const int sx = r / s.channels;
    const int sc = r - sx * s.channels;
    destination[pixelIndex(d, t.n, t.y, t.x) + t.c] = source[pixelIndex(s, t.n, sy, sx) + sc];
}

// Grid (destination.channels, clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 source, 2 destination, 3 maps (int), 4 fill.
kernel void pad_forward(constant PadParams& p [[buffer(0)]],
                        device const float* source [[buffer(1)]],
                        device float* destination [[buffer(2)]],
                        device const int* maps [[buffer(3)]],
                        device const float* fill [[buffer(4)]],
                        uint3 gid [[thread_position_in_grid]]) {
    const ElementTask t = elementTask(gid, p.destination.channels, p.clipWidth, p.clipHeight, p.batch);
    if (!t.valid) return;
    const int sx = maps[t.x];
    const int sy = maps[p.clipWidth + t.y];
    const int sc = maps[p.clipWidth + p.clipHeight + t.c];
    float value = fill[t.c];
    if (sx >= 0 && sy >= 0 && sc >= 0) value = source[pixelIndex(p.source, t.n, sy, sx) + sc];
    destination[pixelIndex(p.destination, t.n, p.clipY + t.y, p.clipX + t.x) + t.c] = value;
}

// Grid (destination.channels, destination.width, batch * destination.height) threads: every dX
// element. Bindings: 0 params, 1 gradient G, 2 destination dX, 3 maps (int, CSR tables).
kernel void pad_gradient(constant PadGradientParams& p [[buffer(0)]],
                         device const float* gradient [[buffer(1)]],
                         device float* destination [[buffer(2)]],
                         device const int* maps [[buffer(3)]],
                         uint3 gid [[thread_position_in_grid]]) {
    const ImageLayout d = p.destination;
    const ElementTask t = elementTask(gid, d.channels, d.width, d.height, p.batch);
    if (!t.valid) return;
    float sum = 0.0f;  // gy outer, gx, gc inner: the order every backend uses
    for (int a = maps[p.startY + t.y]; a < maps[p.startY + t.y + 1]; ++a) {
        const int gy = maps[p.listY + a];
        for (int b = maps[p.startX + t.x]; b < maps[p.startX + t.x + 1]; ++b) {
            const int base = pixelIndex(p.gradient, t.n, gy, maps[p.listX + b]);
            for (int c = maps[p.startC + t.c]; c < maps[p.startC + t.c + 1]; ++c)
                sum += gradient[base + maps[p.listC + c]];
        }
    }
    destination[pixelIndex(d, t.n, t.y, t.x) + t.c] = sum;
}
