// Params of the Metal backend's utility kernels (metal/utility.metal), shared by C++ and Metal.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// destination[i] = value for 0 <= i < count.
struct FillParams {
    int32_t count;
    float value;
};

// destination[i] = source[i] for 0 <= i < count (the ranges must not overlap).
struct CopyParams {
    int32_t count;
};

// Copies channels [source.channelOffset, + source.channels) of every pixel of `batch` images to
// channels [destination.channelOffset, + source.channels) of the same pixels of the destination
// (both layouts have the same width and height; destination.channels must equal source.channels).
// Other channels of the destination keep their values: concatenation along feature channels.
struct ChannelCopyParams {
    ImageLayout source;
    ImageLayout destination;
    int32_t batch;
};

// A reduction over the pixels of a batch split across threadgroups (convolution weight gradient):
// slice s sums pixels [s * pixelsPerSlice, (s + 1) * pixelsPerSlice). With slices > 1 each slice
// writes its partial sums to a scratch buffer and sum_slices adds them in slice order. The split
// depends on the shapes only, so the summation order (and every bit of the result) is fixed.
struct ReductionSplit {
    int32_t slices;
    int32_t pixelsPerSlice;  // a multiple of 32
};

// destination[i] (+)= sum_{s < slices} partials[s * count + i] in increasing s, for i < count.
struct SumSlicesParams {
    int32_t count;
    int32_t slices;
    int32_t accumulate;  // 1: add to destination's value, 0: overwrite
};

}  // namespace mpsgrad
