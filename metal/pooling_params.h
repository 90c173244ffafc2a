// Params of the pooling family's backend ops (MPSCNNPoolingMax, MPSCNNPoolingAverage,
// MPSCNNPoolingL2Norm, MPSCNNDilatedPoolingMax and their gradients), shared by C++ and Metal,
// plus the window arithmetic both backends use. Spec §2.3; docs/pooling.md.
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/pooling.cpp).
//
// Window of output pixel j (j counted from the first pixel of the dispatch, per axis): its taps
// sit at source positions
//     windowLeftX + strideX * jx + dilationX * tx,   0 <= tx < kernelWidth    (likewise y)
// windowLeftX = center - (dilatedExtent >> 1) with center = MPS `offset`, so even windows lean
// toward the top-left and dilated windows are centered the same way.
//
// How an off-image tap (position outside the source image) is read:
//   max, L2      kEdgeZero: 0;  kEdgeClamp: the nearest image pixel (as every MPS edge read)
//   average      never read: it adds 0; `countMode` says whether it still counts in N
// Average normalization N(j):
//   kPoolingCountAll     N = kernelWidth * kernelHeight (kEdgeZero)
//   kPoolingCountInBand  N = number of taps inside [-zeroPadX, W-1+zeroPadX] x [-zeroPadY, H-1+zeroPadY]
//                        (kEdgeClamp, or the padding method's ExcludeEdges bit); N = 0 gives 0
// Max picks the first maximal tap in scan order (row by row, left to right); a NaN tap wins
// over numbers and the first NaN stays.
//
// Cost: the kernels visit only the taps that can matter (poolingAxisTaps below): the in-image
// taps, plus, where off-image taps are read (max; L2 under kEdgeClamp), the first tap of the run
// before and of the run after the image, standing for the whole run. A window costs at most
// (image width + 2) x (image height + 2) visits whatever its size (issue 28), with results equal
// to visiting every tap (L2 under kEdgeClamp adds a run's squares as one product: the same sum
// up to rounding).
#pragma once

#include "common_params.h"

namespace mpsgrad {

enum PoolingModeCode : int32_t {
    kPoolingMax = 0,
    kPoolingAverage = 1,
    kPoolingL2 = 2,
};

enum PoolingCountCode : int32_t {
    kPoolingCountAll = 0,
    kPoolingCountInBand = 1,
};

struct PoolingWindow {
    int32_t mode;          // PoolingModeCode
    int32_t kernelWidth;
    int32_t kernelHeight;
    int32_t strideX;
    int32_t strideY;
    int32_t dilationX;
    int32_t dilationY;
    int32_t windowLeftX;   // source position of the top-left tap of the first window
    int32_t windowTopY;
    int32_t edgeMode;      // EdgeModeCode for off-image taps of max / L2
    int32_t countMode;     // PoolingCountCode (average)
    int32_t zeroPadX;      // the counting band's width beyond the image (kPoolingCountInBand)
    int32_t zeroPadY;
};

// Y[n][clipY+y][clipX+x][c] = pool over the window of output pixel (x, y) of
//     X[n][.][.][source.channelOffset + c]        (0 <= c < N = destination.channels)
struct PoolingParams {
    ImageLayout source;       // X; channels = N; width/height = the image (edges, counting band)
    ImageLayout destination;  // Y; channels = N
    int32_t batch;
    int32_t clipX;            // first destination pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    PoolingWindow window;     // window of destination pixel (clipX, clipY)
};

// dX over the rectangle clip (in the coordinates of X: dX pixel (u, v) is X pixel (u, v)):
//   dX[u][v] = sum over gradient pixels j < (gradientWidth, gradientHeight) and taps t whose read
//              lands on (u, v) (directly, or through a clamped edge read) of
//       max:      G[j] if t is the argmax tap of window j, else 0
//       average:  G[j] / N(j)                                (in-image taps only)
//       L2:       G[j] * X[u][v] / out(j), out(j) = sqrt(sum of the window's squares); 0 if out = 0
// G pixel j is G[n][gradientY + jy][gradientX + jx]; window j is placed as in the forward pass,
// window.windowLeftX/TopY being that of j = 0. Pixels no tap reaches get 0. The sum runs over the
// windows that reach (u, v), jy then jx in decreasing order, on every backend (where each window
// reaches (u, v) through at most one tap this is the order ty, jy, tx, jx of increasing taps);
// a window whose taps land on (u, v) m times (clamped edge reads) adds m times its term as one
// product. So a pixel costs one step per window that reaches it, never one per tap.
struct PoolingGradientParams {
    ImageLayout gradient;     // G; channels = N
    ImageLayout source;       // X (the forward source; max and L2 read it, average only its size)
    ImageLayout destination;  // dX; channels = N
    int32_t batch;
    int32_t gradientX;        // G pixel of window j = 0 (MPS primaryOffset)
    int32_t gradientY;
    int32_t gradientWidth;    // windows per row / rows of windows (MPS sourceSize, cut to G)
    int32_t gradientHeight;
    int32_t clipX;            // first dX pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    PoolingWindow window;
};

// ---- window arithmetic shared by the CPU backend and the .metal kernels (ints only) ----------

// floor(a / b) for b > 0 and any a.
inline int poolingFloorDiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Taps t < k of an axis (first tap at `start`, spacing d) whose position lies in [lo, hi].
inline int poolingTapsInside(int start, int k, int d, int lo, int hi) {
    int tLo = lo > start ? (lo - start + d - 1) / d : 0;
    int tHi = hi >= start ? (hi - start) / d : -1;
    tHi = tHi < k - 1 ? tHi : k - 1;
    return tHi >= tLo ? tHi - tLo + 1 : 0;
}

// N of window (jx, jy) for average pooling (see above).
inline int poolingAverageCount(PoolingWindow w, int sourceWidth, int sourceHeight, int jx, int jy) {
    if (w.countMode == kPoolingCountAll) return w.kernelWidth * w.kernelHeight;
    const int nx = poolingTapsInside(w.windowLeftX + w.strideX * jx, w.kernelWidth, w.dilationX, -w.zeroPadX,
                                     sourceWidth - 1 + w.zeroPadX);
    const int ny = poolingTapsInside(w.windowTopY + w.strideY * jy, w.kernelHeight, w.dilationY, -w.zeroPadY,
                                     sourceHeight - 1 + w.zeroPadY);
    return nx * ny;
}

// The source positions whose reads land on image position u of an axis of `size` pixels: [lo, hi]
// (empty when lo > hi). Clamped edge reads (max and L2 under kEdgeClamp) land on the edge pixels
// from anywhere beyond them, up to `reachLo` / `reachHi`, the positions the windows can reach.
struct PoolingSpan {
    int lo;
    int hi;
};

inline PoolingSpan poolingLandingSpan(int u, int size, bool clamped, int reachLo, int reachHi) {
    PoolingSpan s;
    s.lo = u;
    s.hi = u;
    if (u < 0 || u >= size) {
        s.hi = u - 1;
        return s;
    }
    if (clamped && u == 0 && reachLo < 0) s.lo = reachLo;
    if (clamped && u == size - 1 && reachHi > u) s.hi = reachHi;
    return s;
}

// The windows j (0 <= j < count) whose tap t (first tap of window 0 at start0, stride s, spacing d)
// lies in span: [lo, hi] (empty when lo > hi).
inline PoolingSpan poolingWindowsHitting(PoolingSpan span, int start0, int s, int d, int t, int count) {
    const int base = start0 + d * t;
    PoolingSpan j;
    j.lo = -poolingFloorDiv(base - span.lo, s);  // ceil((span.lo - base) / s)
    j.hi = poolingFloorDiv(span.hi - base, s);
    j.lo = j.lo > 0 ? j.lo : 0;
    j.hi = j.hi < count - 1 ? j.hi : count - 1;
    if (span.lo > span.hi) j.hi = j.lo - 1;
    return j;
}

// ---- the taps a window visits (ints only; coordinates are within +-2**29, binding_checks.cpp) ---

// The k taps of one window axis (first at `start`, spacing d) over an image axis of `size` pixels
// fall into three runs: `lead` taps before the image, `inside` taps on it, `trail` taps after it.
// Every tap of an edge run reads what the run's first tap reads (0, nothing, or the edge pixel).
struct PoolingAxisTaps {
    int lead;
    int inside;
    int trail;
};

inline PoolingAxisTaps poolingAxisTaps(int start, int k, int d, int size) {
    PoolingAxisTaps a;
    a.lead = start >= 0 ? 0 : (-start + d - 1) / d;
    a.lead = a.lead < k ? a.lead : k;
    const int through = size - 1 < start ? 0 : (size - 1 - start) / d + 1;  // taps at positions <= size - 1
    a.inside = (through < k ? through : k) - a.lead;
    a.inside = a.inside > 0 ? a.inside : 0;
    a.trail = k - a.lead - a.inside;
    return a;
}

// What an axis visits: with `edges` (off-image taps are read: max, or L2 under kEdgeClamp) the
// first tap of the lead run, the inside taps, then the first tap of the trail run; without, only
// the inside taps. Visit i is tap `tap`, standing for `weight` taps (its run's length).
struct PoolingVisit {
    int tap;
    int weight;
};

inline int poolingAxisVisits(PoolingAxisTaps a, bool edges) {
    return a.inside + (edges && a.lead > 0 ? 1 : 0) + (edges && a.trail > 0 ? 1 : 0);
}

inline PoolingVisit poolingAxisVisit(PoolingAxisTaps a, bool edges, int i) {
    PoolingVisit v;
    const int lead = edges && a.lead > 0 ? 1 : 0;
    if (i < lead) {
        v.tap = 0;
        v.weight = a.lead;
    } else if (i - lead < a.inside) {
        v.tap = a.lead + i - lead;
        v.weight = 1;
    } else {
        v.tap = a.lead + a.inside;
        v.weight = a.trail;
    }
    return v;
}

// The windows j < count with at least one tap (of k) in span: [lo, hi] (empty when lo > hi).
inline PoolingSpan poolingWindowsReaching(PoolingSpan span, int start0, int s, int d, int k, int count) {
    PoolingSpan j;
    j.lo = poolingWindowsHitting(span, start0, s, d, k - 1, count).lo;
    j.hi = poolingWindowsHitting(span, start0, s, d, 0, count).hi;
    if (span.lo > span.hi) j.hi = j.lo - 1;
    return j;
}

// Whether tap t of the window starting at `start` lands in span.
inline bool poolingTapLands(PoolingSpan span, int start, int d, int t) {
    const int q = start + d * t;
    return q >= span.lo && q <= span.hi;
}

}  // namespace mpsgrad
