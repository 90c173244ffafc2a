// The pooling family's kernels (MPSCNNPoolingMax / Average / L2Norm, MPSCNNDilatedPoolingMax and
// their gradients). Semantics are exactly those of metal/pooling_params.h, whose window arithmetic
// the CPU backend (cpp/mpsgrad/backend/cpu/pooling.cpp) shares. The host side is
// cpp/mpsgrad/backend/metal/metal_pooling.cpp.
//
// One thread computes one channel quad of one output pixel; neighbouring threads take
// neighbouring quads of a pixel, then neighbouring pixels. No threadgroup memory, no atomics:
// the gradient gathers (each dX element is written by the one thread that owns it), summing
// the windows that reach its pixel in the fixed order ty, jy, tx, jx of pooling_params.h, and
// recomputing a window's argmax (max) or norm (L2) from X where it needs it. Windows and taps are
// visited as pooling_params.h says, so the cost is bounded by the image, not the window.
//
// Function constants:
//   kPoolingMode   PoolingModeCode (the other modes' branches compile away)
//   kAligned*      the binding is read or written as aligned float4 quads
#include <metal_stdlib>

#include "image_indexing.h"
#include "pooling_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant int kPoolingMode [[function_constant(0)]];
constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedGradient [[function_constant(2)]];
constant bool kAlignedDestination [[function_constant(3)]];

namespace pooling {

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

inline bool maxWins(float v, float best) { return v > best || (isnan(v) && !isnan(best)); }

// Pools channels c .. c + count of the window whose top-left tap is (sx, sy); for max, `argmax`
// receives each lane's winning tap index. Only pooling_params.h's visits are read (the in-image
// taps, and the first tap of each off-image run where off-image taps are read), so a window costs
// at most the image's size whatever its own.
inline float4 poolQuad(device const float* x, ImageLayout l, PoolingWindow w, int n, int sx, int sy, int jx, int jy,
                       int c, int count, thread int4& argmax) {
    const bool clampReads = w.edgeMode == kEdgeClamp && kPoolingMode != kPoolingAverage;
    const bool edges = kPoolingMode == kPoolingMax || clampReads;
    float4 acc = kPoolingMode == kPoolingMax ? float4(-INFINITY) : float4(0.0f);
    argmax = int4(0);
    const PoolingAxisTaps ay = poolingAxisTaps(sy, w.kernelHeight, w.dilationY, l.height);
    const PoolingAxisTaps ax = poolingAxisTaps(sx, w.kernelWidth, w.dilationX, l.width);
    const int visitsY = poolingAxisVisits(ay, edges);
    const int visitsX = poolingAxisVisits(ax, edges);
    for (int iy = 0; iy < visitsY; ++iy) {
        const PoolingVisit vy = poolingAxisVisit(ay, edges, iy);
        const int qy = sy + vy.tap * w.dilationY;
        for (int ix = 0; ix < visitsX; ++ix) {
            const PoolingVisit vx = poolingAxisVisit(ax, edges, ix);
            const int qx = sx + vx.tap * w.dilationX;
            const int at = edgePixelIndex(l, clampReads ? kEdgeClamp : kEdgeZero, n, qy, qx);
            const float4 v = at < 0 ? float4(0.0f) : loadFloat4(x, at + c, count, kAlignedSource);
            if (kPoolingMode == kPoolingMax) {
                const int t = vy.tap * w.kernelWidth + vx.tap;
                for (int j = 0; j < 4; ++j) {
                    if (maxWins(v[j], acc[j])) {
                        acc[j] = v[j];
                        argmax[j] = t;
                    }
                }
            } else if (kPoolingMode == kPoolingAverage) {
                if (at >= 0) acc += v;
            } else if (at >= 0 && vy.weight == 1 && vx.weight == 1) {
                acc += v * v;
            } else if (at >= 0) {  // a clamped edge run of L2: its taps all read this pixel
                acc += v * v * (float(vy.weight) * float(vx.weight));
            }
        }
    }
    if (kPoolingMode == kPoolingAverage) {
        const int total = poolingAverageCount(w, l.width, l.height, jx, jy);
        acc = total > 0 ? acc / float(total) : float4(0.0f);
    } else if (kPoolingMode == kPoolingL2) {
        acc = sqrt(acc);
    }
    return acc;
}

}  // namespace pooling

using namespace pooling;

// Y = pool(X). Grid (ceil(channels / 4), clipWidth, batch * clipHeight) threads.
// Bindings: 0 params, 1 source X, 2 destination Y.
kernel void pooling_forward(constant PoolingParams& p [[buffer(0)]],
                            device const float* source [[buffer(1)]],
                            device float* destination [[buffer(2)]],
                            uint3 gid [[thread_position_in_grid]]) {
    const QuadTask q = quadTask(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!q.valid) return;
    const PoolingWindow w = p.window;
    int4 argmax;
    const float4 r = poolQuad(source, p.source, w, q.n, w.windowLeftX + w.strideX * q.x, w.windowTopY + w.strideY * q.y,
                              q.x, q.y, q.c, q.count, argmax);
    const int d = pixelIndex(p.destination, q.n, p.clipY + q.y, p.clipX + q.x) + q.c;
    storeFloat4(destination, d, r, q.count, kAlignedDestination);
}

// dX by gathering (pooling_params.h). Grid (ceil(channels / 4), clipWidth, batch * clipHeight)
// threads. Bindings: 0 params, 1 gradient G, 2 source X (not read by average pooling),
// 3 destination dX.
kernel void pooling_gradient(constant PoolingGradientParams& p [[buffer(0)]],
                             device const float* gradient [[buffer(1)]],
                             device const float* source [[buffer(2)]],
                             device float* destination [[buffer(3)]],
                             uint3 gid [[thread_position_in_grid]]) {
    const QuadTask q = quadTask(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!q.valid) return;
    const PoolingWindow w = p.window;
    const int u = p.clipX + q.x;
    const int v = p.clipY + q.y;
    const int gw = p.gradientWidth;
    const int gh = p.gradientHeight;
    const int W = p.source.width;
    const int H = p.source.height;
    const bool clamped = kPoolingMode != kPoolingAverage && w.edgeMode == kEdgeClamp;
    const int reachHiX = w.windowLeftX + w.strideX * (gw - 1) + w.dilationX * (w.kernelWidth - 1);
    const int reachHiY = w.windowTopY + w.strideY * (gh - 1) + w.dilationY * (w.kernelHeight - 1);
    const PoolingSpan spanX = poolingLandingSpan(u, W, clamped, w.windowLeftX, reachHiX);
    const PoolingSpan spanY = poolingLandingSpan(v, H, clamped, w.windowTopY, reachHiY);
    // Each window that reaches (u, v) once, jy then jx decreasing (pooling_params.h).
    const PoolingSpan jys = poolingWindowsReaching(spanY, w.windowTopY, w.strideY, w.dilationY, w.kernelHeight, gh);
    const PoolingSpan jxs = poolingWindowsReaching(spanX, w.windowLeftX, w.strideX, w.dilationX, w.kernelWidth, gw);
    float4 acc = float4(0.0f);
    for (int jy = jys.hi; jy >= jys.lo; --jy) {
        const int sy = w.windowTopY + w.strideY * jy;
        const int landsY = poolingTapsInside(sy, w.kernelHeight, w.dilationY, spanY.lo, spanY.hi);
        for (int jx = jxs.hi; jx >= jxs.lo; --jx) {
            const int sx = w.windowLeftX + w.strideX * jx;
            const int landsX = poolingTapsInside(sx, w.kernelWidth, w.dilationX, spanX.lo, spanX.hi);
            const int gi = pixelIndex(p.gradient, q.n, p.gradientY + jy, p.gradientX + jx) + q.c;
            if (kPoolingMode == kPoolingMax) {
                // G goes to the window's argmax tap: counted here when that tap lands on (u, v).
                int4 argmax;
                poolQuad(source, p.source, w, q.n, sx, sy, jx, jy, q.c, q.count, argmax);
                const float4 g = loadFloat4(gradient, gi, q.count, kAlignedGradient);
                for (int j = 0; j < 4; ++j) {
                    const bool here = poolingTapLands(spanY, sy, w.dilationY, argmax[j] / w.kernelWidth) &&
                                      poolingTapLands(spanX, sx, w.dilationX, argmax[j] % w.kernelWidth);
                    acc[j] += here ? g[j] : 0.0f;
                }
            } else if (kPoolingMode == kPoolingAverage) {
                if (landsY == 0 || landsX == 0) continue;  // no clamped edges: 0 or 1 landing tap
                const float4 g = loadFloat4(gradient, gi, q.count, kAlignedGradient);
                const float total = float(poolingAverageCount(w, W, H, jx, jy));
                for (int j = 0; j < 4; ++j) acc[j] += g[j] / total;
            } else {
                if (landsY == 0 || landsX == 0) continue;
                const float4 g = loadFloat4(gradient, gi, q.count, kAlignedGradient);
                int4 unused;
                const float4 out = poolQuad(source, p.source, w, q.n, sx, sy, jx, jy, q.c, q.count, unused);
                const float lands = float(landsY) * float(landsX);  // > 1 only through clamped edge reads
                for (int j = 0; j < 4; ++j) {
                    const float r = out[j] > 0.0f ? g[j] / out[j] : 0.0f;
                    acc[j] += landsY == 1 && landsX == 1 ? r : r * lands;
                }
            }
        }
    }
    if (kPoolingMode == kPoolingL2) {
        const int xi = edgePixelIndex(p.source, kEdgeZero, q.n, v, u);
        acc = xi < 0 ? float4(0.0f) : acc * loadFloat4(source, xi + q.c, q.count, kAlignedSource);
    }
    const int d = pixelIndex(p.destination, q.n, v, u) + q.c;
    storeFloat4(destination, d, acc, q.count, kAlignedDestination);
}
