// Params of the sub-pixel shuffle ops of the convolution family (MPSCNNSubPixelConvolutionDescriptor),
// shared by C++ and Metal. docs/convolution_sub_pixel.md.
//
// A sub-pixel convolution with scale factor r computes the regular convolution's output Io with
// N = outputFeatureChannels channels on a low-resolution grid, then moves every channel group to
// a pixel of an r x r block (MPS's rule, C = N / r^2):
//     Dst[y][x][c] = Io[y / r][x / r][C * (r * (y mod r) + (x mod r)) + c]
// with (x, y) counted from the clip rectangle's requested origin. A clip rectangle moved onto the
// image starts `phase` pixels into its first block: high-resolution pixel q of the written
// rectangle (0 <= q < clipWidth) is the relative pixel phaseX + q, so it reads low-resolution
// column (phaseX + q) / r and sub-pixel column (phaseX + q) mod r (rows likewise).
//
// shuffle   (forward):  every element of the clip rectangle of `high` (C channels at its channel
//                       offset) is gathered from `low` (N channels).
// unshuffle (gradient): every element of `low` (low.width x low.height x N) is gathered from
//                       `high`, or 0 where its high-resolution pixel lies outside the clip
//                       rectangle (the forward pass never wrote it, so it has no gradient).
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct SubPixelShuffleParams {
    ImageLayout low;   // Io: channels = N (a multiple of scale * scale), channelOffset usually 0
    ImageLayout high;  // channels = N / scale^2, at its channel offset
    int32_t batch;
    int32_t scale;     // r >= 1
    int32_t phaseX;    // in [0, r)
    int32_t phaseY;
    int32_t clipX;     // the rectangle of `high` written (shuffle) or read (unshuffle)
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

}  // namespace mpsgrad
