// Params of the reshape and pad family's backend ops (MPSNNReshape, MPSNNPad and their
// gradients), shared by C++ and Metal. docs/reshape_pad.md.
//
// Reshape copy (NNReshape forward, NNReshapeGradient): every element of the destination shape
// (destination.width, destination.height, destination.channels) takes the source element with the
// same row-major index over the source shape (source.width, source.height, source.channels), i.e.
// HWC order within one image; the two shapes hold the same number of elements.
//
// Pad (NNPad): the host resolves the edge mode into one table per axis (the "maps" binding, int32):
//   mapX[x]  for x < clipWidth:   source column read for destination column clipX + x, or -1
//   mapY[y]  for y < clipHeight:  source row read for destination row clipY + y, or -1
//   mapC[k]  for k < destination.channels: source channel (within source.channelOffset ...) or -1
// laid out back to back (mapX at 0, mapY at clipWidth, mapC at clipWidth + clipHeight). An element
// with any -1 coordinate takes fill[k] (0 for the zero edge mode, the constant otherwise).
//
// Pad gradient (NNPadGradient): the transposed tables, in CSR form, one per axis of dX:
//   for a dX coordinate i on an axis, the G coordinates that read it are
//   list[start[i] .. start[i + 1]) (increasing), so
//   dX[n][y][x][k] = sum over gy in Y(y), gx in X(x), gc in C(k) of G[n][gy][gx][gc]
// summed in that nesting order (gy outer, gc inner) on every backend. "maps" holds
//   startX[width + 1], startY[height + 1], startC[channels + 1], listX, listY, listC
// at the offsets in the params; an empty list gives 0 (pixels and channels the forward never read).
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct ReshapeParams {
    ImageLayout source;       // the whole source image's channel slice
    ImageLayout destination;  // the whole destination image's channel slice
    int32_t batch;
};

struct PadParams {
    ImageLayout source;       // channels = the forward's processed source channels
    ImageLayout destination;  // channels = channels written (before + source + after)
    int32_t batch;
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

struct PadGradientParams {
    ImageLayout gradient;     // channels = the channels the forward pass wrote
    ImageLayout destination;  // dX: every channel and pixel of it is written
    int32_t batch;
    int32_t startX;           // offsets (in ints) into the maps binding
    int32_t startY;
    int32_t startC;
    int32_t listX;
    int32_t listY;
    int32_t listC;
    int32_t listCount;        // total ints in the maps binding
};

}  // namespace mpsgrad
