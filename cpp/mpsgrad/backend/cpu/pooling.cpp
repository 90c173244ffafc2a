// CPU backend: max / average / L2-norm pooling (dilated taps included) and their gradients.
//
// Semantics are exactly those written in metal/pooling_params.h, whose window arithmetic both
// backends share. Rows of the output are split across threads; every pixel reduces its taps in
// scan order over its contiguous channels (the inner loops vectorize).
//
// The gradients gather: each dX pixel sums, in a fixed order (ty, jy, tx, jx), the windows whose
// taps land on it, so no two threads write one element and results are bitwise reproducible.
// Max and L2 first compute, per gradient pixel and channel, what the gather needs (the argmax tap,
// or G / out), once, in a scratch array. Max pooling whose windows share no source pixel (2x2
// stride 2, the common case) scatters instead: each window writes its gradient to its argmax tap,
// one pass over the windows with the same results (maxGradientScatter).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../../../../metal/pooling_params.h"
#include "cpu_ops.h"
#include "image_binding.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

void checkWindow(const char* op, const PoolingWindow& w) {
    if (w.mode < kPoolingMax || w.mode > kPoolingL2) invalid(op, "unknown pooling mode " + std::to_string(w.mode));
    if (w.kernelWidth < 1 || w.kernelHeight < 1) invalid(op, "kernel sizes must be >= 1");
    if (w.strideX < 1 || w.strideY < 1) invalid(op, "strides must be >= 1");
    if (w.dilationX < 1 || w.dilationY < 1) invalid(op, "dilation rates must be >= 1");
    if (w.edgeMode != kEdgeZero && w.edgeMode != kEdgeClamp) invalid(op, "unknown edge mode");
    if (w.countMode != kPoolingCountAll && w.countMode != kPoolingCountInBand) invalid(op, "unknown count mode");
    if (w.zeroPadX < 0 || w.zeroPadY < 0) invalid(op, "zero pad sizes must be >= 0");
    // Every tap position must stay well inside int32 (the kernels compute them in 32 bits).
    const int64_t limit = int64_t(1) << 30;
    const int64_t extentX = int64_t(w.kernelWidth - 1) * w.dilationX, extentY = int64_t(w.kernelHeight - 1) * w.dilationY;
    if (extentX > limit || extentY > limit || std::abs(int64_t(w.windowLeftX)) > limit ||
        std::abs(int64_t(w.windowTopY)) > limit || w.zeroPadX > limit || w.zeroPadY > limit)
        invalid(op, "window geometry out of range");
}

void checkReach(const char* op, const PoolingWindow& w, int32_t windowsX, int32_t windowsY) {
    const int64_t limit = int64_t(1) << 30;
    if (std::abs(int64_t(w.windowLeftX) + int64_t(w.strideX) * windowsX) > limit ||
        std::abs(int64_t(w.windowTopY) + int64_t(w.strideY) * windowsY) > limit)
        invalid(op, "window geometry out of range");
}

// Clamps a source position to [0, size - 1] (size > 0). The kernels clamp through
// edgePixelIndex (metal/image_indexing.h) instead.
inline int32_t clampPosition(int32_t v, int32_t size) { return v < 0 ? 0 : (v >= size ? size - 1 : v); }

// Where tap position (qx, qy) reads: a pixel pointer, or null for "contributes nothing / reads 0".
// `clampReads`: off-image taps read the nearest pixel (max and L2 under kEdgeClamp).
inline const float* tapPixel(const ImageLayout& l, const float* base, int64_t n, int32_t qx, int32_t qy,
                             bool clampReads) {
    if (qx < 0 || qx >= l.width || qy < 0 || qy >= l.height) {
        if (!clampReads) return nullptr;
        qx = clampPosition(qx, l.width);
        qy = clampPosition(qy, l.height);
    }
    return base + pixelIndex(l, n, qx, qy);
}

// v replaces best: a larger value, or a NaN over a number (v != v tests NaN and vectorizes).
inline bool maxWins(float v, float best) { return v > best || (v != v && best == best); }

// Pools the window whose top-left tap is (sx, sy) into out[0..N); for max, argmax (if non-null)
// receives each channel's winning tap index. `zeros` holds N zeros (the reads of off-image taps).
// Only the taps of pooling_params.h's visits are read (in-image taps, and the first tap of each
// off-image run where off-image taps are read), so a huge window over a small image costs what
// the image holds. The channel loops are branch-free so that they vectorize.
void poolWindow(const ImageLayout& src, const float* x, const PoolingWindow& w, int64_t n, int32_t sx, int32_t sy,
                int32_t jx, int32_t jy, float* out, int32_t* argmax, const float* zeros) {
    const int32_t N = src.channels;
    const bool clampReads = w.edgeMode == kEdgeClamp && w.mode != kPoolingAverage;
    const bool edges = w.mode == kPoolingMax || clampReads;  // off-image taps are read
    if (w.mode == kPoolingMax) {
        for (int32_t c = 0; c < N; ++c) out[c] = -std::numeric_limits<float>::infinity();
        if (argmax)
            for (int32_t c = 0; c < N; ++c) argmax[c] = 0;
    } else {
        for (int32_t c = 0; c < N; ++c) out[c] = 0.0f;
    }
    const PoolingAxisTaps ay = poolingAxisTaps(sy, w.kernelHeight, w.dilationY, src.height);
    const PoolingAxisTaps ax = poolingAxisTaps(sx, w.kernelWidth, w.dilationX, src.width);
    const int32_t visitsY = poolingAxisVisits(ay, edges), visitsX = poolingAxisVisits(ax, edges);
    for (int32_t iy = 0; iy < visitsY; ++iy) {
        const PoolingVisit vy = poolingAxisVisit(ay, edges, iy);
        const int32_t qy = sy + vy.tap * w.dilationY;
        for (int32_t ix = 0; ix < visitsX; ++ix) {
            const PoolingVisit vx = poolingAxisVisit(ax, edges, ix);
            const int32_t qx = sx + vx.tap * w.dilationX;
            const float* v = tapPixel(src, x, n, qx, qy, clampReads);
            const int32_t t = vy.tap * w.kernelWidth + vx.tap;
            if (w.mode == kPoolingMax) {
                const float* values = v ? v : zeros;
                if (argmax) {
                    for (int32_t c = 0; c < N; ++c) {
                        const bool wins = maxWins(values[c], out[c]);
                        out[c] = wins ? values[c] : out[c];
                        argmax[c] = wins ? t : argmax[c];
                    }
                } else {
                    for (int32_t c = 0; c < N; ++c) out[c] = maxWins(values[c], out[c]) ? values[c] : out[c];
                }
            } else if (v && w.mode == kPoolingAverage) {
                for (int32_t c = 0; c < N; ++c) out[c] += v[c];
            } else if (v && vy.weight == 1 && vx.weight == 1) {
                for (int32_t c = 0; c < N; ++c) out[c] += v[c] * v[c];
            } else if (v) {  // a clamped edge run of L2: its taps all read this pixel
                const float runs = float(int64_t(vy.weight) * vx.weight);
                for (int32_t c = 0; c < N; ++c) out[c] += v[c] * v[c] * runs;
            }
        }
    }
    if (w.mode == kPoolingAverage) {
        const int32_t count = poolingAverageCount(w, src.width, src.height, jx, jy);
        for (int32_t c = 0; c < N; ++c) out[c] = count > 0 ? out[c] / float(count) : 0.0f;
    } else if (w.mode == kPoolingL2) {
        for (int32_t c = 0; c < N; ++c) out[c] = std::sqrt(out[c]);
    }
}

// The first tap index t >= 0 of a window axis starting at `start` (taps `dilation` apart) whose
// position start + dilation * t is at or after `lo`: the landing tap when exactly one lands.
int32_t firstLandingTap(int32_t lo, int32_t start, int32_t dilation) {
    return lo > start ? (lo - start + dilation - 1) / dilation : 0;
}

// The visits of a window over an image of W x H pixels (at most (W + 2) x (H + 2)): the work
// estimate of parallelFor's grain, which must not overflow for huge windows.
int64_t windowVisits(const PoolingWindow& w, int32_t W, int32_t H) {
    return std::min<int64_t>(w.kernelWidth, int64_t(W) + 2) * std::min<int64_t>(w.kernelHeight, int64_t(H) + 2);
}

// True when no source pixel is read by two taps of max pooling's windows: the windows do not
// overlap on either axis, and no clamped read lands on an edge pixel from beyond the image.
bool maxTapsAreDisjoint(const PoolingGradientParams& p) {
    const PoolingWindow& w = p.window;
    if (w.mode != kPoolingMax) return false;
    if (int64_t(w.strideX) < int64_t(w.dilationX) * (w.kernelWidth - 1) + 1 ||
        int64_t(w.strideY) < int64_t(w.dilationY) * (w.kernelHeight - 1) + 1)
        return false;
    if (w.edgeMode != kEdgeClamp) return true;  // off-image taps read zeros: they land nowhere
    const int64_t hiX = int64_t(w.windowLeftX) + int64_t(w.strideX) * (p.gradientWidth - 1) +
                        int64_t(w.dilationX) * (w.kernelWidth - 1);
    const int64_t hiY = int64_t(w.windowTopY) + int64_t(w.strideY) * (p.gradientHeight - 1) +
                        int64_t(w.dilationY) * (w.kernelHeight - 1);
    return w.windowLeftX >= 0 && w.windowTopY >= 0 && hiX < p.source.width && hiY < p.source.height;
}

// Max pooling's gradient when maxTapsAreDisjoint: dX is 0 except at each window's argmax tap,
// which receives the window's gradient. One pass over the windows (the argmax found as the forward
// finds it) replaces the gather per dX pixel of the general case; each dX element is written at
// most once, with the value the gather sums to (0 + G), so results are the same bit for bit.
void maxGradientScatter(const PoolingGradientParams& p, const float* g, const float* x, float* dx) {
    const PoolingWindow& w = p.window;
    const int32_t N = p.destination.channels, gw = p.gradientWidth, gh = p.gradientHeight;
    const int32_t W = p.source.width, H = p.source.height;
    const int64_t clipRows = int64_t(p.batch) * p.clipHeight;
    parallelFor(clipRows, rowGrain(int64_t(p.clipWidth) * N), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t v = p.clipY + int32_t(r % p.clipHeight);
            for (int32_t i = 0; i < p.clipWidth; ++i)
                std::fill_n(dx + pixelIndex(p.destination, n, p.clipX + i, v), N, 0.0f);
        }
    });
    const auto inClip = [&](int32_t u, int32_t v) {
        return u >= p.clipX && u - p.clipX < p.clipWidth && v >= p.clipY && v - p.clipY < p.clipHeight && u < W &&
               v < H;
    };
    // Window rows write disjoint source rows (the windows do not overlap), images disjoint images.
    parallelFor(int64_t(p.batch) * gh, rowGrain(int64_t(gw) * N * windowVisits(w, W, H)), [&](int64_t r0, int64_t r1) {
        std::vector<float> out(static_cast<size_t>(N)), zeros(static_cast<size_t>(N), 0.0f);
        std::vector<int32_t> argmax(static_cast<size_t>(N));
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / gh;
            const int32_t jy = int32_t(r % gh);
            for (int32_t jx = 0; jx < gw; ++jx) {
                const int32_t sx = w.windowLeftX + w.strideX * jx, sy = w.windowTopY + w.strideY * jy;
                poolWindow(p.source, x, w, n, sx, sy, jx, jy, out.data(), argmax.data(), zeros.data());
                const float* gp = g + pixelIndex(p.gradient, n, p.gradientX + jx, p.gradientY + jy);
                for (int32_t c = 0; c < N; ++c) {
                    const int32_t u = sx + w.dilationX * (argmax[c] % w.kernelWidth);
                    const int32_t v = sy + w.dilationY * (argmax[c] / w.kernelWidth);
                    if (inClip(u, v)) dx[pixelIndex(p.destination, n, u, v) + c] = 0.0f + gp[c];
                }
            }
        }
    });
}

}  // namespace

void poolingForward(const PoolingParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    static const char* op = "poolingForward";
    checkWindow(op, p.window);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkReach(op, p.window, p.clipWidth, p.clipHeight);
    checkImageBinding(op, "source", sourceSlice, p.source, p.batch);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch);
    const int32_t N = p.destination.channels;
    if (p.source.channels != N) invalid(op, "source and destination channel counts differ");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    if (p.source.width <= 0 || p.source.height <= 0) invalid(op, "the source image is empty");
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    const PoolingWindow& w = p.window;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    const int64_t work = int64_t(p.clipWidth) * N * windowVisits(w, p.source.width, p.source.height);
    parallelFor(rows, rowGrain(work), [&](int64_t r0, int64_t r1) {
        const std::vector<float> zeros(static_cast<size_t>(N), 0.0f);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t jy = int32_t(r % p.clipHeight);
            const int32_t sy = w.windowTopY + w.strideY * jy;
            for (int32_t jx = 0; jx < p.clipWidth; ++jx) {
                float* out = y + pixelIndex(p.destination, n, p.clipX + jx, p.clipY + jy);
                poolWindow(p.source, x, w, n, w.windowLeftX + w.strideX * jx, sy, jx, jy, out, nullptr, zeros.data());
            }
        }
    });
}

void poolingGradient(const PoolingGradientParams& p, const BufferSlice& gradientSlice,
                     const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    static const char* op = "poolingGradient";
    const PoolingWindow& w = p.window;
    checkWindow(op, w);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkLayout(op, "gradient", p.gradient);
    if (p.gradientWidth < 0 || p.gradientHeight < 0 || p.gradientX < 0 || p.gradientY < 0 ||
        int64_t(p.gradientX) + p.gradientWidth > p.gradient.width ||
        int64_t(p.gradientY) + p.gradientHeight > p.gradient.height)
        invalid(op, "the gradient rectangle is not inside the gradient image");
    checkReach(op, w, p.gradientWidth, p.gradientHeight);
    const bool readsSource = w.mode != kPoolingAverage;
    checkImageBinding(op, "gradient", gradientSlice, p.gradient, p.batch);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch);
    if (readsSource) checkImageBinding(op, "source", sourceSlice, p.source, p.batch);
    else checkLayout(op, "source", p.source);
    const int32_t N = p.destination.channels;
    if (p.gradient.channels != N || (readsSource && p.source.channels != N))
        invalid(op, "gradient, source and destination channel counts differ");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    if (p.source.width <= 0 || p.source.height <= 0) invalid(op, "the source image is empty");

    const float* g = gradientSlice.floats();
    const float* x = readsSource ? sourceSlice.floats() : nullptr;
    float* dx = destinationSlice.floats();
    const int32_t gw = p.gradientWidth, gh = p.gradientHeight;
    if (maxTapsAreDisjoint(p)) return maxGradientScatter(p, g, x, dx);  // e.g. 2x2 stride 2

    // Max: the argmax tap of every window and channel. L2: G / out (0 where out = 0).
    std::vector<int32_t> argmax;
    std::vector<float> ratio;
    const int64_t windowRows = int64_t(p.batch) * gh;
    const size_t scratch = size_t(windowRows) * size_t(gw) * size_t(N);
    if (w.mode == kPoolingMax) argmax.resize(scratch);
    if (w.mode == kPoolingL2) ratio.resize(scratch);
    if (readsSource && gw > 0 && gh > 0) {
        parallelFor(windowRows, rowGrain(int64_t(gw) * N * windowVisits(w, p.source.width, p.source.height)),
                    [&](int64_t r0, int64_t r1) {
            std::vector<float> out(static_cast<size_t>(N)), zeros(static_cast<size_t>(N), 0.0f);
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t n = r / gh;
                const int32_t jy = int32_t(r % gh);
                for (int32_t jx = 0; jx < gw; ++jx) {
                    const size_t at = (size_t(r) * gw + jx) * N;
                    const int32_t sx = w.windowLeftX + w.strideX * jx, sy = w.windowTopY + w.strideY * jy;
                    if (w.mode == kPoolingMax) {
                        poolWindow(p.source, x, w, n, sx, sy, jx, jy, out.data(), &argmax[at], zeros.data());
                        continue;
                    }
                    poolWindow(p.source, x, w, n, sx, sy, jx, jy, out.data(), nullptr, zeros.data());
                    const float* gp = g + pixelIndex(p.gradient, n, p.gradientX + jx, p.gradientY + jy);
                    for (int32_t c = 0; c < N; ++c) ratio[at + c] = out[c] > 0.0f ? gp[c] / out[c] : 0.0f;
                }
            }
        });
    }

    const bool clamped = readsSource && w.edgeMode == kEdgeClamp;
    const int32_t W = p.source.width, H = p.source.height;
    const int32_t reachLoX = w.windowLeftX, reachLoY = w.windowTopY;
    const int32_t reachHiX = w.windowLeftX + w.strideX * (gw - 1) + w.dilationX * (w.kernelWidth - 1);
    const int32_t reachHiY = w.windowTopY + w.strideY * (gh - 1) + w.dilationY * (w.kernelHeight - 1);
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    // A dX pixel visits each window that reaches it once (pooling_params.h), in decreasing (jy, jx).
    const int64_t reached = std::min<int64_t>(gw, int64_t(w.kernelWidth) * w.dilationX / w.strideX + 2) *
                            std::min<int64_t>(gh, int64_t(w.kernelHeight) * w.dilationY / w.strideY + 2);
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N * reached), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t v = p.clipY + int32_t(r % p.clipHeight);
            const PoolingSpan spanY = poolingLandingSpan(v, H, clamped, reachLoY, reachHiY);
            const PoolingSpan jys = poolingWindowsReaching(spanY, w.windowTopY, w.strideY, w.dilationY, w.kernelHeight, gh);
            for (int32_t i = 0; i < p.clipWidth; ++i) {
                const int32_t u = p.clipX + i;
                float* acc = dx + pixelIndex(p.destination, n, u, v);
                for (int32_t c = 0; c < N; ++c) acc[c] = 0.0f;
                const PoolingSpan spanX = poolingLandingSpan(u, W, clamped, reachLoX, reachHiX);
                const PoolingSpan jxs =
                    poolingWindowsReaching(spanX, w.windowLeftX, w.strideX, w.dilationX, w.kernelWidth, gw);
                for (int32_t jy = jys.hi; jy >= jys.lo; --jy) {
                    const int32_t sy = w.windowTopY + w.strideY * jy;
                    const int32_t landsY = poolingTapsInside(sy, w.kernelHeight, w.dilationY, spanY.lo, spanY.hi);
                    for (int32_t jx = jxs.hi; jx >= jxs.lo; --jx) {
                        const int32_t sx = w.windowLeftX + w.strideX * jx;
                        const int32_t landsX = poolingTapsInside(sx, w.kernelWidth, w.dilationX, spanX.lo, spanX.hi);
                        const size_t at = ((size_t(n) * gh + jy) * gw + jx) * N;
                        const float* gp = g + pixelIndex(p.gradient, n, p.gradientX + jx, p.gradientY + jy);
                        if (w.mode == kPoolingMax && landsY == 1 && landsX == 1) {
                            // One tap of the window lands on (u, v): G goes here where the argmax is that
                            // tap. An integer compare per channel, which vectorizes (the general case
                            // below divides every argmax by the kernel width).
                            const int32_t tap = firstLandingTap(spanY.lo, sy, w.dilationY) * w.kernelWidth +
                                                firstLandingTap(spanX.lo, sx, w.dilationX);
                            const int32_t* am = &argmax[at];
                            for (int32_t c = 0; c < N; ++c) acc[c] += am[c] == tap ? gp[c] : 0.0f;
                        } else if (w.mode == kPoolingMax) {
                            // G goes to the argmax tap t of the window: counted here when t lands on (u, v).
                            const int32_t* am = &argmax[at];
                            for (int32_t c = 0; c < N; ++c) {
                                const bool here = poolingTapLands(spanY, sy, w.dilationY, am[c] / w.kernelWidth) &&
                                                  poolingTapLands(spanX, sx, w.dilationX, am[c] % w.kernelWidth);
                                acc[c] += here ? gp[c] : 0.0f;
                            }
                        } else if (landsY == 0 || landsX == 0) {
                            continue;  // none of the window's taps lands on (u, v)
                        } else if (w.mode == kPoolingAverage) {  // no clamped edges: one landing tap
                            const float count = float(poolingAverageCount(w, W, H, jx, jy));
                            for (int32_t c = 0; c < N; ++c) acc[c] += gp[c] / count;
                        } else if (landsY == 1 && landsX == 1) {
                            const float* rp = &ratio[at];
                            for (int32_t c = 0; c < N; ++c) acc[c] += rp[c];
                        } else {  // clamped edge reads: the window read (u, v) landsY * landsX times
                            const float* rp = &ratio[at];
                            const float lands = float(landsY) * float(landsX);
                            for (int32_t c = 0; c < N; ++c) acc[c] += rp[c] * lands;
                        }
                    }
                }
                if (w.mode == kPoolingL2) {
                    const float* xp = tapPixel(p.source, x, n, u, v, false);
                    for (int32_t c = 0; c < N; ++c) acc[c] = xp ? acc[c] * xp[c] : 0.0f;
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
