#include "kernels/convolution_sub_pixel.h"

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/convolution.h"

namespace mpsgrad {

// ---- descriptor -------------------------------------------------------------------------------------

void CNNConvolutionDescriptor::validateSubPixel() const {
    const int64_t r = subPixelScaleFactor;
    // r^2 * (output channels / r^2) must stay a 32-bit channel count; r <= 2**15 keeps r^2 in range.
    if (r < 1 || r > 32768) throwValueError("sub_pixel_scale_factor: must be in [1, 32768], got ", r);
    if (r == 1) return;
    // MPSCNNSubPixelConvolutionDescriptor and MPSCNNDepthWiseConvolutionDescriptor are sibling
    // subclasses: no descriptor is both.
    if (depthwise)
        throwValueError("sub_pixel_scale_factor: a depthwise convolution descriptor cannot be sub-pixel (MPS's "
                        "sub-pixel and depthwise descriptors are separate classes); got ", r);
    if (outputFeatureChannels % (r * r))
        throwValueError("sub_pixel_scale_factor: ", r, " needs output_feature_channels divisible by ", r * r,
                        " (r^2), got ", outputFeatureChannels);
}

// ---- forward and gradient geometry -------------------------------------------------------------------

namespace sub_pixel {

LowResolutionGrid lowResolutionGrid(int64_t scale, const Region& requested, const Region& clip) {
    // How far clipping to the destination moved the origin (never negative: clipping only moves
    // an origin that lies left of / above the image onto it).
    auto shift = [](int64_t requestedOrigin, int64_t clippedOrigin) {
        return clippedOrigin > requestedOrigin ? clippedOrigin - requestedOrigin : int64_t(0);
    };
    const int64_t sx = shift(requested.origin.x, clip.origin.x), sy = shift(requested.origin.y, clip.origin.y);
    LowResolutionGrid g;
    g.shiftX = sx / scale;
    g.shiftY = sy / scale;
    g.phaseX = int32_t(sx % scale);
    g.phaseY = int32_t(sy % scale);
    g.width = (g.phaseX + int64_t(clip.size.width) + scale - 1) / scale;
    g.height = (g.phaseY + int64_t(clip.size.height) + scale - 1) / scale;
    return g;
}

ImageLayout scratchLayout(int64_t width, int64_t height, int64_t channels) {
    ImageLayout l{};
    l.width = checked::toInt32(width, "sub-pixel low-resolution width");
    l.height = checked::toInt32(height, "sub-pixel low-resolution height");
    l.pixelStride = checked::toInt32((channels + 3) / 4 * 4, "output_feature_channels");
    l.imageStride = checked::toInt32(checked::product({width, height, l.pixelStride}, "sub-pixel scratch image"),
                                     "sub-pixel scratch image size");
    l.channelOffset = 0;
    l.channels = checked::toInt32(channels, "output_feature_channels");
    return l;
}

BufferSlice newScratch(Backend& backend, const ImageLayout& layout, int64_t images) {
    const size_t bytes = checked::floatBytes(checked::product({layout.imageStride, images}, "sub-pixel scratch"),
                                             "sub-pixel scratch");
    // The ops write every channel of every pixel; padding lanes (channels not a multiple of 4)
    // stay zero, as in every image, for readers that load whole channel quads.
    const bool packed = layout.channels == layout.pixelStride;
    return BufferSlice{backend.newBuffer(bytes, packed ? BufferFill::Unspecified : BufferFill::Zero), 0};
}

SubPixelShuffleParams shuffleParams(const ImageLayout& low, const ImageLayout& high, int64_t images, int64_t scale,
                                    const LowResolutionGrid& grid, const Region& clip) {
    SubPixelShuffleParams p{};
    p.low = low;
    p.high = high;
    p.batch = checked::toInt32(images, "number of images");
    p.scale = checked::toInt32(scale, "sub_pixel_scale_factor");
    p.phaseX = grid.phaseX;
    p.phaseY = grid.phaseY;
    p.clipX = checked::toInt32(clip.origin.x, "clip_rect.origin.x");
    p.clipY = checked::toInt32(clip.origin.y, "clip_rect.origin.y");
    p.clipWidth = checked::toInt32(clip.size.width, "clip_rect.size.width");
    p.clipHeight = checked::toInt32(clip.size.height, "clip_rect.size.height");
    return p;
}

}  // namespace sub_pixel

// ---- CNNConvolution --------------------------------------------------------------------------------

void CNNConvolution::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch&) {
    const int64_t r = weights_.descriptor.subPixelScaleFactor;
    descriptor.width = checked::mulSigned(descriptor.width, r, "destination width");
    descriptor.height = checked::mulSigned(descriptor.height, r, "destination height");
}

}  // namespace mpsgrad
