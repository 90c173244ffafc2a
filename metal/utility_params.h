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

}  // namespace mpsgrad
