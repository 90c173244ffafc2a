#include "kernels/fully_connected.h"

#include "core/errors.h"

namespace mpsgrad {

void checkFullyConnectedDescriptor(const CNNConvolutionDescriptor& d, const char* kernelName) {
    // The window covers the whole source exactly once: one output pixel, no stride, no holes.
    auto one = [&](int64_t value, const char* name) {
        if (value != 1) throwValueError("weights: ", kernelName, " needs ", name, " == 1, got ", value);
    };
    one(d.strideInPixelsX, "stride_in_pixels_x");
    one(d.strideInPixelsY, "stride_in_pixels_y");
    one(d.dilationRateX, "dilation_rate_x");
    one(d.dilationRateY, "dilation_rate_y");
    one(d.groups, "groups");
    if (d.depthwise) throwValueError("weights: ", kernelName, " needs a regular (not depthwise) descriptor");
    one(d.subPixelScaleFactor, "sub_pixel_scale_factor");
}

namespace {

// The data source, after checking its descriptor (before the base class loads the weights).
std::shared_ptr<CNNConvolutionDataSource> fullyConnectedSource(std::shared_ptr<CNNConvolutionDataSource> source,
                                                               const char* kernelName) {
    if (!source) throwTypeError("weights: expected a CNNConvolutionDataSource, got None");
    checkFullyConnectedDescriptor(source->descriptor(), kernelName);
    return source;
}

}  // namespace

CNNFullyConnected::CNNFullyConnected(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNConvolution(device, fullyConnectedSource(std::move(dataSource), "CNNFullyConnected")) {}

Offset CNNFullyConnected::forwardOffset() const {
    // The centre of the kernel-sized window whose top-left tap is source pixel (0, 0).
    return Offset{kernelWidth() >> 1, kernelHeight() >> 1, offset.z};
}

void CNNFullyConnected::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    const Image& source = *sourceImages.front();
    if (source.width() != kernelWidth() || source.height() != kernelHeight())
        throwValueError("source_image: CNNFullyConnected needs a ", kernelWidth(), "x", kernelHeight(),
                        " source (its kernel size), got ", source.width(), "x", source.height());
    descriptor.width = 1;
    descriptor.height = 1;
}

void CNNFullyConnected::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                   const StateBatch& states) {
    for (const auto& u : dispatches) {
        if (u.source->width() != kernelWidth() || u.source->height() != kernelHeight())
            throwValueError("source_image: CNNFullyConnected needs a ", kernelWidth(), "x", kernelHeight(),
                            " source (its kernel size), got ", u.source->width(), "x", u.source->height());
        if (u.clip.size.width != 1 || u.clip.size.height != 1)
            throwValueError("destination_image: CNNFullyConnected writes one pixel but clip_rect selects ",
                            u.clip.size.width, "x", u.clip.size.height,
                            " pixels of the destination; use a 1x1 destination or a 1x1 clip_rect");
        // A clip origin left of / above the destination would move the window off the source.
        if (clipRect.origin.x < 0 || clipRect.origin.y < 0)
            throwValueError("clip_rect: origin (", clipRect.origin.x, ", ", clipRect.origin.y,
                            ") must not be negative for CNNFullyConnected");
    }
    CNNConvolution::encodeImpl(cb, dispatches, states);
}

CNNFullyConnectedGradient::CNNFullyConnectedGradient(const Device& device,
                                                     std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNConvolutionGradient(device, fullyConnectedSource(std::move(dataSource), "CNNFullyConnectedGradient")) {}

}  // namespace mpsgrad
