// Params of the dropout family's backend ops (MPSCNNDropout and MPSCNNDropoutGradient), shared by
// C++ and Metal, plus the mask function both backends evaluate. Spec §2.8; docs/dropout.md.
//
// The mask is a pure function of the seed, a stream number (one per forward encode) and the mask
// coordinates, so CPU and Metal draw the same bits and the gradient regenerates exactly the mask
// of its forward pass instead of storing it:
//   mask grid: maskImages x maskHeight x maskWidth x maskChannels, where a broadcast axis
//              (maskStride 0) has extent 1
//   element    e = ((image * maskHeight + y * strideY) * maskWidth + x * strideX) * maskChannels
//                  + c * strideZ                                 (64-bit)
//   bits       w = word (e mod 4) of Philox4x32-10(counter = (e / 4 low, e / 4 high, streamLo,
//                  streamHi), key = (seedLo, seedHi))
//   keep       w < threshold   (threshold = floor(keepProbability * 2^32))
// Y = keep ? X / keepProbability : 0 (forward), dX = keep ? G / keepProbability : 0 (gradient).
#pragma once

#include "common_params.h"
#include "philox.h"

namespace mpsgrad {

struct DropoutMask {
    uint32_t seedLo;
    uint32_t seedHi;
    uint32_t streamLo;
    uint32_t streamHi;
    uint32_t threshold;
    float keepProbability;
    int32_t maskWidth;     // the mask grid (1 along broadcast axes)
    int32_t maskHeight;
    int32_t maskChannels;
    int32_t strideX;       // maskStrideInPixels: 1, or 0 to broadcast along the axis
    int32_t strideY;
    int32_t strideZ;       // feature channels
    int32_t firstImage;    // mask image of dispatch image 0
    int32_t maskX;         // mask coordinates of the clip origin
    int32_t maskY;
};

// Y[n][clipY+y][clipX+x][c] = mask(firstImage + n, maskX + x, maskY + y, c) ?
//     X[n][sourceY+y][sourceX+x][c] / keepProbability : 0
// (for the gradient, X is G and Y is dX).
struct DropoutParams {
    ImageLayout source;       // X (forward) or G (gradient); channels = N
    ImageLayout destination;  // Y or dX; channels = N
    int32_t batch;
    int32_t sourceX;          // source pixel read for the clip origin
    int32_t sourceY;
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    DropoutMask mask;
};

#ifdef __METAL_VERSION__
typedef ulong DropoutIndex;
#else
typedef uint64_t DropoutIndex;
#endif

// Index e of mask element (image, x, y, c) (coordinates before broadcasting).
inline DropoutIndex dropoutElement(DropoutMask m, int image, int x, int y, int c) {
    return ((DropoutIndex(image) * DropoutIndex(m.maskHeight) + DropoutIndex(y * m.strideY)) *
                DropoutIndex(m.maskWidth) + DropoutIndex(x * m.strideX)) * DropoutIndex(m.maskChannels) +
           DropoutIndex(c * m.strideZ);
}

// The four words of mask block e / 4.
inline PhiloxWords dropoutBlock(DropoutMask m, DropoutIndex block) {
    PhiloxWords counter;
    counter.v0 = uint32_t(block & DropoutIndex(0xFFFFFFFFu));
    counter.v1 = uint32_t(block >> 32);
    counter.v2 = m.streamLo;
    counter.v3 = m.streamHi;
    return philox4x32_10(counter, m.seedLo, m.seedHi);
}

// Whether mask element e keeps its value, given the words of its block.
inline bool dropoutKeeps(DropoutMask m, PhiloxWords block, DropoutIndex e) {
    return philoxWord(block, uint32_t(e & DropoutIndex(3))) < m.threshold;
}

}  // namespace mpsgrad
