// Params of the local normalization family's backend ops (MPSCNNCrossChannelNormalization,
// MPSCNNSpatialNormalization, MPSCNNLocalContrastNormalization and their gradients), shared by
// C++ and Metal. Spec §2.7; docs/normalization.md ("Cross-channel, spatial and local contrast
// normalization") writes out every formula, including the exact derivatives used where the MPS
// headers print wrong ones.
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/normalization.cpp).
// Reads of X outside the image give 0 (ImageEdgeMode.ZERO, the only edge mode of the family);
// off-image taps still count in N.
//
// Forward (one params struct for the three kinds): destination pixel (clipX + x, clipY + y),
// 0 <= x < clipWidth, 0 <= y < clipHeight, is the output of the window centered at source pixel
// (centerX + x, centerY + y). Its taps are the source pixels
//     centerX + x - (kernelWidth >> 1) + tx,  0 <= tx < kernelWidth       (likewise y)
// so even windows lean toward the top-left, as pooling's. N = kernelWidth * kernelHeight.
//   spatial:        T = delta + alpha / N * sum_taps X^2              Y = X(c) * T^-beta
//   local contrast: M = sum_taps X / N,  V = sum_taps (X - M)^2 / N,  T = delta + alpha * V
//                   Y = pm + ps * (X(c) - p0 * M) * T^-beta
//   cross-channel:  (kernelWidth = kernelHeight = 1 in space; channelSize = the MPS kernelSize)
//                   L(k) = delta + alpha / channelSize * sum_{q in Q(k)} X(q)^2,
//                   Q(k) = [max(0, k - (channelSize >> 1)), min(D - 1, k + ((channelSize - 1) >> 1))],
//                   Y(k) = X(k) * L(k)^-beta,   D = destination.channels
// X(c) is the center pixel of the window. Sums run over the in-image taps, ty, then tx (or q) in
// increasing order; local contrast's V then adds (N - in-image taps) * M^2 for the off-image ones.
//
// Gradient: dX over the rectangle clip, in the coordinates of X (dX pixel (u, v) is X pixel (u, v)).
// G pixel j = (jx, jy), 0 <= j < (gradientWidth, gradientHeight), at G position (gradientX + jx,
// gradientY + jy), is the gradient of the output of the window centered at X pixel (centerX + jx,
// centerY + jy). Window j contributes to every in-image X pixel among its taps:
//   dX(v) = sum over windows u whose taps include v of G(u) * dY(u)/dX(v)
// with the exact derivatives of docs/normalization.md. Pixels no window reaches, and dX pixels
// outside X (when dX is larger), get 0.
#pragma once

#include "common_params.h"

namespace mpsgrad {

enum NormalizationKindCode : int32_t {
    kNormalizationCrossChannel = 0,
    kNormalizationSpatial = 1,
    kNormalizationLocalContrast = 2,
};

struct NormalizationParams {
    ImageLayout source;       // X; channels = D
    ImageLayout gradient;     // G (gradient op only); channels = D
    ImageLayout destination;  // Y (forward) or dX (gradient); channels = D
    int32_t kind;             // NormalizationKindCode
    int32_t batch;
    int32_t kernelWidth;      // spatial window (1 x 1 for cross-channel)
    int32_t kernelHeight;
    int32_t channelSize;      // cross-channel window (MPS kernelSize); 1 otherwise
    float alpha;
    float beta;
    float delta;
    float p0;                 // local contrast only
    float pm;
    float ps;
    int32_t centerX;          // source pixel at the center of the first window
    int32_t centerY;
    int32_t gradientX;        // gradient op: G pixel of window j = 0
    int32_t gradientY;
    int32_t gradientWidth;    // gradient op: windows per row / rows of windows
    int32_t gradientHeight;
    int32_t clipX;            // first destination pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

// ---- index arithmetic shared by the CPU backend and the .metal kernels (ints only) ---------------

// The in-image taps [first, last] (empty when first > last) of a window axis of k taps from
// `start` over an image axis of `size` pixels. The kernels read only these: an off-image tap reads
// 0, adds nothing to the sums of X and X^2, and adds M^2 to local contrast's sum of (X - M)^2,
// which is added once for all of them (N - in-image taps) * M^2. So a window costs at most the
// image's size whatever its own (issue 28: a 2**20 x 2**20 window over a 1 x 1 image used to visit
// 10**12 taps). Coordinates are within +-2**29 (backend/binding_checks.cpp).
struct NormalizationTaps {
    int first;
    int last;
};

inline NormalizationTaps normalizationTapsInside(int start, int k, int size) {
    NormalizationTaps t;
    t.first = start < 0 ? -start : 0;
    t.last = size - 1 - start < k - 1 ? size - 1 - start : k - 1;
    return t;
}

// First channel of Q(k) (the channels whose squares enter L(k)).
inline int crossChannelFirst(int k, int size) { return k - (size >> 1) > 0 ? k - (size >> 1) : 0; }
// Last channel of Q(k).
inline int crossChannelLast(int k, int size, int channels) {
    const int last = k + ((size - 1) >> 1);
    return last < channels - 1 ? last : channels - 1;
}
// First channel of R(k) = {r : k in Q(r)} (the channels whose L(r) depends on X(k)).
inline int crossChannelReflectedFirst(int k, int size) {
    return k - ((size - 1) >> 1) > 0 ? k - ((size - 1) >> 1) : 0;
}
inline int crossChannelReflectedLast(int k, int size, int channels) {
    const int last = k + (size >> 1);
    return last < channels - 1 ? last : channels - 1;
}

}  // namespace mpsgrad
