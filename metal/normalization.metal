// Cross-channel, spatial and local contrast normalization and their gradients. Semantics are
// exactly those of metal/normalization_params.h (formulas in docs/normalization.md); the CPU
// backend (cpp/mpsgrad/backend/cpu/normalization.cpp) computes the same sums in the same order.
// The host side is cpp/mpsgrad/backend/metal/metal_normalization.cpp.
//
// One thread computes one channel of one destination pixel; neighbouring threads take
// neighbouring channels, then neighbouring pixels. No threadgroup memory, no atomics: the
// gradients gather (each dX element is written by the one thread that owns it), visiting the
// windows that read its pixel (rows, then columns) and recomputing their statistics from X.
//
// Function constants:
//   kNormalizationKind   NormalizationKindCode (the other kinds' branches compile away)
#include <metal_stdlib>

#include "image_indexing.h"
#include "normalization_params.h"

using namespace metal;
using namespace mpsgrad;

constant int kNormalizationKind [[function_constant(0)]];

namespace localnorm {

// The pixel and channel a thread handles; `valid` is false past the dispatch.
struct Task {
    int n;
    int x;
    int y;
    int c;
    bool valid;
};

inline Task task(uint3 gid, int channels, int batch, int width, int height) {
    Task t;
    t.c = int(gid.x);
    t.x = int(gid.y);
    const int row = int(gid.z);
    t.valid = t.c < channels && t.x < width && row < batch * height;
    t.n = t.valid ? row / height : 0;
    t.y = row - t.n * height;
    return t;
}

// X(n, px, py, c); 0 off the image.
inline float readX(device const float* x, ImageLayout l, int n, int px, int py, int c) {
    const int at = edgePixelIndex(l, kEdgeZero, n, py, px);
    return at < 0 ? 0.0f : x[at + c];
}

// T (and the mean M for local contrast) of the window centered at (cx, cy).
struct WindowStats {
    float mean;
    float t;
};

// Only the in-image taps are read (normalizationTapsInside): the cost is bounded by the image.
inline WindowStats windowStats(device const float* x, NormalizationParams p, int n, int cx, int cy, int c) {
    const int left = cx - (p.kernelWidth >> 1);
    const int top = cy - (p.kernelHeight >> 1);
    const NormalizationTaps tx = normalizationTapsInside(left, p.kernelWidth, p.source.width);
    const NormalizationTaps ty = normalizationTapsInside(top, p.kernelHeight, p.source.height);
    const float count = float(p.kernelWidth) * float(p.kernelHeight);
    WindowStats s;
    s.mean = 0.0f;
    if (kNormalizationKind == kNormalizationSpatial) {
        float squares = 0.0f;
        for (int j = ty.first; j <= ty.last; ++j) {
            for (int i = tx.first; i <= tx.last; ++i) {
                const float v = readX(x, p.source, n, left + i, top + j, c);
                squares += v * v;
            }
        }
        s.t = p.delta + p.alpha / count * squares;
        return s;
    }
    float sum = 0.0f;
    for (int j = ty.first; j <= ty.last; ++j) {
        for (int i = tx.first; i <= tx.last; ++i) sum += readX(x, p.source, n, left + i, top + j, c);
    }
    s.mean = sum / count;
    float deviations = 0.0f;
    for (int j = ty.first; j <= ty.last; ++j) {
        for (int i = tx.first; i <= tx.last; ++i) {
            const float d = readX(x, p.source, n, left + i, top + j, c) - s.mean;
            deviations += d * d;
        }
    }
    // Each off-image tap reads 0: a deviation of -M.
    const float inside = float(max(0, tx.last - tx.first + 1)) * float(max(0, ty.last - ty.first + 1));
    deviations += (count - inside) * (s.mean * s.mean);
    s.t = p.delta + p.alpha * (deviations / count);
    return s;
}

// L(k) of cross-channel normalization at pixel (px, py).
inline float crossChannelL(device const float* x, NormalizationParams p, int n, int px, int py, int k) {
    const int last = crossChannelLast(k, p.channelSize, p.destination.channels);
    float squares = 0.0f;
    for (int q = crossChannelFirst(k, p.channelSize); q <= last; ++q) {
        const float v = readX(x, p.source, n, px, py, q);
        squares += v * v;
    }
    return p.delta + p.alpha / float(p.channelSize) * squares;
}

}  // namespace localnorm

using namespace localnorm;

// Y = normalize(X). Grid (channels, clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 source X, 2 destination Y.
kernel void normalization_forward(constant NormalizationParams& params [[buffer(0)]],
                                  device const float* source [[buffer(1)]],
                                  device float* destination [[buffer(2)]],
                                  uint3 gid [[thread_position_in_grid]]) {
    const NormalizationParams p = params;
    const Task t = task(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!t.valid) return;
    const int cx = p.centerX + t.x;
    const int cy = p.centerY + t.y;
    const float xc = readX(source, p.source, t.n, cx, cy, t.c);
    float y;
    if (kNormalizationKind == kNormalizationCrossChannel) {
        y = xc * pow(crossChannelL(source, p, t.n, cx, cy, t.c), -p.beta);
    } else {
        const WindowStats s = windowStats(source, p, t.n, cx, cy, t.c);
        if (kNormalizationKind == kNormalizationSpatial) {
            y = xc * pow(s.t, -p.beta);
        } else {
            y = p.pm + p.ps * (xc - p.p0 * s.mean) * pow(s.t, -p.beta);
        }
    }
    destination[pixelIndex(p.destination, t.n, p.clipY + t.y, p.clipX + t.x) + t.c] = y;
}

// dX by gathering. Grid (channels, clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 gradient G, 2 source X, 3 destination dX.
kernel void normalization_gradient(constant NormalizationParams& params [[buffer(0)]],
                                   device const float* gradient [[buffer(1)]],
                                   device const float* source [[buffer(2)]],
                                   device float* destination [[buffer(3)]],
                                   uint3 gid [[thread_position_in_grid]]) {
    const NormalizationParams p = params;
    const Task t = task(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!t.valid) return;
    const int px = p.clipX + t.x;
    const int py = p.clipY + t.y;
    float result = 0.0f;
    if (px >= p.source.width || py >= p.source.height) {
        // A dX pixel outside X is no input of the forward pass (off-image reads are the constant 0).
    } else if (kNormalizationKind == kNormalizationCrossChannel) {
        const int jx = px - p.centerX;
        const int jy = py - p.centerY;
        if (jx >= 0 && jy >= 0 && jx < p.gradientWidth && jy < p.gradientHeight) {
            const int gi = pixelIndex(p.gradient, t.n, p.gradientY + jy, p.gradientX + jx);
            const int k = t.c;
            const int D = p.destination.channels;
            const float lk = crossChannelL(source, p, t.n, px, py, k);
            const int last = crossChannelReflectedLast(k, p.channelSize, D);
            float sum = 0.0f;
            for (int r = crossChannelReflectedFirst(k, p.channelSize); r <= last; ++r) {
                const float lr = crossChannelL(source, p, t.n, px, py, r);
                sum += gradient[gi + r] * readX(source, p.source, t.n, px, py, r) * (pow(lr, -p.beta) / lr);
            }
            result = gradient[gi + k] * pow(lk, -p.beta) -
                     2.0f * (p.alpha / float(p.channelSize)) * p.beta * readX(source, p.source, t.n, px, py, k) * sum;
        }
    } else {
        const int jx0 = max(0, px - ((p.kernelWidth - 1) >> 1) - p.centerX);
        const int jx1 = min(p.gradientWidth - 1, px + (p.kernelWidth >> 1) - p.centerX);
        const int jy0 = max(0, py - ((p.kernelHeight - 1) >> 1) - p.centerY);
        const int jy1 = min(p.gradientHeight - 1, py + (p.kernelHeight >> 1) - p.centerY);
        const float count = float(p.kernelWidth) * float(p.kernelHeight);
        const float xv = readX(source, p.source, t.n, px, py, t.c);
        float direct = 0.0f;
        float sum = 0.0f;
        for (int jy = jy0; jy <= jy1; ++jy) {
            for (int jx = jx0; jx <= jx1; ++jx) {
                const int cx = p.centerX + jx;
                const int cy = p.centerY + jy;
                const float g = gradient[pixelIndex(p.gradient, t.n, p.gradientY + jy, p.gradientX + jx) + t.c];
                const WindowStats s = windowStats(source, p, t.n, cx, cy, t.c);
                const float tb = pow(s.t, -p.beta);
                const float xc = readX(source, p.source, t.n, cx, cy, t.c);
                const bool center = cx == px && cy == py;
                if (kNormalizationKind == kNormalizationSpatial) {
                    if (center) direct += g * tb;
                    sum += g * xc * (tb / s.t);
                } else {
                    direct += g * ((center ? 1.0f : 0.0f) - p.p0 / count) * tb;
                    sum += g * (xv - s.mean) * (xc - p.p0 * s.mean) * (tb / s.t);
                }
            }
        }
        if (kNormalizationKind == kNormalizationSpatial) {
            result = direct - 2.0f * p.alpha * p.beta / count * xv * sum;
        } else {
            result = p.ps * (direct - 2.0f * p.alpha * p.beta / count * sum);
        }
    }
    destination[pixelIndex(p.destination, t.n, py, px) + t.c] = result;
}
