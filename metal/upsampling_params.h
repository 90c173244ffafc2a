// Params of the upsampling family's backend ops (MPSCNNUpsamplingNearest, MPSCNNUpsamplingBilinear
// and their gradients), shared by C++ and Metal, plus the sampling rule both backends use.
// Spec §2.9; docs/upsampling.md.
//
// Along each axis the input has `inputSize` pixels (input index i is source pixel sourceX + i)
// and the output outputSize = inputSize * scale. Output index o samples:
//   nearest    input index o / scale (integer division)
//   bilinear   src(o), then i0 = min(floor(src), inputSize - 1), i1 = min(i0 + 1, inputSize - 1),
//              lambda = src - i0, value = (1 - lambda) * X[i0] + lambda * X[i1], per axis, with
//     kUpsamplingAlignCorners  src = o * ((inputSize - 1) / (outputSize - 1))   (0 if outputSize = 1)
//     kUpsamplingHalfPixel     src = max(0, (inputSize / outputSize) * (o + 0.5) - 0.5)
//     kUpsamplingAsymmetric    src = (inputSize / outputSize) * o               (TensorFlow legacy)
//   (float32 arithmetic, in this order, on every backend.)
// 2-D bilinear: Y = (1 - ly) * ((1 - lx) * X00 + lx * X01) + ly * ((1 - lx) * X10 + lx * X11).
#pragma once

#include "common_params.h"

namespace mpsgrad {

enum UpsamplingModeCode : int32_t {
    kUpsamplingNearest = 0,
    kUpsamplingBilinear = 1,
};

enum UpsamplingCoordinateCode : int32_t {
    kUpsamplingHalfPixel = 0,
    kUpsamplingAsymmetric = 1,
    kUpsamplingAlignCorners = 2,
};

// Y[n][clipY+y][clipX+x][c] = sample(output index (outputX + x, outputY + y)) of channel c.
struct UpsamplingParams {
    ImageLayout source;       // X; channels = N
    ImageLayout destination;  // Y; channels = N
    int32_t batch;
    int32_t mode;             // UpsamplingModeCode
    int32_t coordinateMode;   // UpsamplingCoordinateCode (bilinear)
    int32_t scaleX;
    int32_t scaleY;
    int32_t sourceX;          // source pixel of input index (0, 0) (MPS offset)
    int32_t sourceY;
    int32_t inputWidth;       // input extent (inputWidth + sourceX <= source.width)
    int32_t inputHeight;
    int32_t outputX;          // output index of the clip origin (>= 0)
    int32_t outputY;
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

// dX[n][clipY+y][clipX+x][c] = sum over output indices o (0 <= o < outputSize, G pixel
// gradientX + o inside G) of G[gradientY + oy][gradientX + ox][c] * w(oy -> i_y) * w(ox -> i_x)
// for input index i = (inputX + x, inputY + y); w(o -> i) = (i0 == i ? 1 - lambda : 0) +
// (i1 == i ? lambda : 0) (nearest: 1 if o / scale == i). Input indices outside the input get 0.
// Summed as  sum_oy w_y * (sum_ox w_x * G)  in increasing o on every backend.
struct UpsamplingGradientParams {
    ImageLayout gradient;     // G; channels = N
    ImageLayout destination;  // dX; channels = N
    int32_t batch;
    int32_t mode;
    int32_t coordinateMode;
    int32_t scaleX;
    int32_t scaleY;
    int32_t gradientX;        // G pixel of output index (0, 0); may be negative
    int32_t gradientY;
    int32_t inputWidth;       // the forward input extent
    int32_t inputHeight;
    int32_t inputX;           // input index of dX pixel (clipX, clipY)
    int32_t inputY;
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

// ---- sampling arithmetic shared by the CPU backend and the .metal kernels ------------------------

struct UpsamplingTap {
    int i0;
    int i1;
    float lambda;
};

inline UpsamplingTap upsamplingTap(int o, int inputSize, int scale, int mode, int coordinateMode) {
    UpsamplingTap t;
    const int outputSize = inputSize * scale;
    if (mode == kUpsamplingNearest) {
        t.i0 = o / scale;
        t.i1 = t.i0;
        t.lambda = 0.0f;
        return t;
    }
    float src;
    if (coordinateMode == kUpsamplingAlignCorners) {
        src = outputSize > 1 ? float(o) * (float(inputSize - 1) / float(outputSize - 1)) : 0.0f;
    } else {
        const float ratio = float(inputSize) / float(outputSize);
        src = coordinateMode == kUpsamplingHalfPixel ? ratio * (float(o) + 0.5f) - 0.5f : ratio * float(o);
        src = src < 0.0f ? 0.0f : src;
    }
    int i0 = int(src);
    i0 = i0 < inputSize - 1 ? i0 : inputSize - 1;
    t.i0 = i0;
    t.i1 = i0 + 1 < inputSize ? i0 + 1 : inputSize - 1;
    t.lambda = src - float(i0);
    return t;
}

// The weight with which output index o reaches input index i.
inline float upsamplingWeight(UpsamplingTap t, int i) {
    return (t.i0 == i ? 1.0f - t.lambda : 0.0f) + (t.i1 == i ? t.lambda : 0.0f);
}

// Output indices that can reach input index i: [lo, hi] (a superset; the weight decides), cut to
// [0, outputSize - 1].
struct UpsamplingRange {
    int lo;
    int hi;
};

inline UpsamplingRange upsamplingReach(int i, int inputSize, int scale, int mode, int coordinateMode) {
    const int outputSize = inputSize * scale;
    UpsamplingRange r;
    if (mode == kUpsamplingNearest) {
        r.lo = i * scale;
        r.hi = i * scale + scale - 1;
    } else if (inputSize <= 1) {
        r.lo = 0;
        r.hi = outputSize - 1;
    } else {
        // Outputs reaching i have src in [i - 1, i + 1), and src = o * den / num up to float
        // rounding (num / den = outputSize - 1 / inputSize - 1 with aligned corners, else scale);
        // the host keeps inputSize * outputSize below 2^31 so these products fit.
        const bool aligned = coordinateMode == kUpsamplingAlignCorners;
        const int num = aligned ? outputSize - 1 : scale;
        const int den = aligned ? inputSize - 1 : 1;
        r.lo = i >= 1 ? (i - 1) * num / den - 2 : 0;
        r.hi = ((i + 1) * num + den - 1) / den + scale + 2;
        if (i == inputSize - 1) r.hi = outputSize - 1;
    }
    r.lo = r.lo > 0 ? r.lo : 0;
    r.hi = r.hi < outputSize - 1 ? r.hi : outputSize - 1;
    return r;
}

}  // namespace mpsgrad
