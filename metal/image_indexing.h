// Index arithmetic shared by the .metal kernels: where element (n, y, x, c) of an ImageLayout
// lives, and how an off-image read resolves under an edge mode. Metal-only (the host never
// addresses images element by element).
//
// Layouts are taken by value: a copy in the thread address space works whatever address space
// the caller's layout lives in (kernel params arrive in `constant`). Indices are 32-bit ints,
// the fast integer type on Apple GPUs; the host refuses bindings of 2^31 floats or more.
#pragma once

#include "common_params.h"

namespace mpsgrad {

inline int ceilDiv(int value, int divisor) { return (value + divisor - 1) / divisor; }

// value mod m in [0, m) for m > 0 (C++'s % keeps the sign of a negative value).
inline int positiveMod(int value, int m) {
    int r = value % m;
    return r < 0 ? r + m : r;
}

inline int greatestCommonDivisor(int a, int b) {
    while (b != 0) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// Float index of channel `channelOffset` of pixel (x, y) of image n.
inline int pixelIndex(ImageLayout l, int n, int y, int x) {
    return n * l.imageStride + (y * l.width + x) * l.pixelStride + l.channelOffset;
}

// pixelIndex of the pixel an edge-mode read at (x, y) sees, or -1 when the read yields zeros
// (kEdgeZero outside the image, or an empty image).
inline int edgePixelIndex(ImageLayout l, int edgeMode, int n, int y, int x) {
    if (y < 0 || y >= l.height || x < 0 || x >= l.width) {
        if (edgeMode != kEdgeClamp || l.width <= 0 || l.height <= 0) return -1;
        y = y < 0 ? 0 : (y >= l.height ? l.height - 1 : y);
        x = x < 0 ? 0 : (x >= l.width ? l.width - 1 : x);
    }
    return pixelIndex(l, n, y, x);
}

// A pixel of a clip rectangle flattened over (image, row, column): index m < batch*height*width.
struct FlatPixel {
    int n;
    int y;
    int x;
};

inline FlatPixel unflattenPixel(int m, int height, int width) {
    FlatPixel p;
    int perImage = height * width;
    p.n = m / perImage;
    int rest = m - p.n * perImage;
    p.y = rest / width;
    p.x = rest - p.y * width;
    return p;
}

}  // namespace mpsgrad
