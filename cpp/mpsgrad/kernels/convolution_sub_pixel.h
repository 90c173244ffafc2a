// The sub-pixel part of the convolution family (MPSCNNSubPixelConvolutionDescriptor), shared by
// CNNConvolution and CNNConvolutionGradient (kernels/convolution.cpp). docs/convolution_sub_pixel.md.
//
// A sub-pixel convolution with scale factor r runs the regular convolution into a low-resolution
// scratch image Io (N = outputFeatureChannels channels), then the backend's subPixelShuffle moves
// it into the destination (N / r^2 channels, r times wider and taller). The gradient runs the
// inverse shuffle (subPixelUnshuffle) on the incoming gradient and then the regular gradient
// paths on the low-resolution result. A regular convolution is the case r = 1, without scratch.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/types.h"

namespace mpsgrad::sub_pixel {

// The low-resolution pixels a destination clip rectangle needs.
struct LowResolutionGrid {
    int64_t shiftX = 0, shiftY = 0;  // whole low-resolution pixels the clip was moved onto the image by
    int32_t phaseX = 0, phaseY = 0;  // high-resolution pixels into the first r x r block, in [0, r)
    int64_t width = 0, height = 0;   // low-resolution pixels computed
};

// `requested` is the kernel's clip_rect, `clip` the part of it inside the destination. Pixel
// clip.origin + q of the destination is pixel (clip.origin - requested.origin) + q of the
// shuffled result, counted from the requested origin (docs/convolution_sub_pixel.md).
LowResolutionGrid lowResolutionGrid(int64_t scale, const Region& requested, const Region& clip);

// A packed layout of width x height pixels of `channels` channels (pixel stride rounded up to 4).
ImageLayout scratchLayout(int64_t width, int64_t height, int64_t channels);
// A buffer for `images` images of `layout`, every channel of which an op overwrites.
BufferSlice newScratch(Backend& backend, const ImageLayout& layout, int64_t images);

// The params of one shuffle or unshuffle between `low` and the rectangle `clip` of `high`.
SubPixelShuffleParams shuffleParams(const ImageLayout& low, const ImageLayout& high, int64_t images, int64_t scale,
                                    const LowResolutionGrid& grid, const Region& clip);

}  // namespace mpsgrad::sub_pixel
