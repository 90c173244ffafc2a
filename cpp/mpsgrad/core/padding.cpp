#include "core/padding.h"

#include <sstream>

#include "core/checked.h"
#include "core/errors.h"
#include "core/kernel.h"

namespace mpsgrad {

std::shared_ptr<NNDefaultPadding> NNDefaultPadding::paddingWithMethod(uint32_t method) {
    padding::sizeStyle(method);  // validates the size bits
    // Bits MPSNNPaddingMethod does not define (the size field beyond its two defined bits, and
    // everything above ExcludeEdges) are rejected rather than silently ignored.
    const uint32_t defined = PaddingMethod::AlignMask | PaddingMethod::AddRemainderToMask | 0x30u |
                             PaddingMethod::CustomWhitelistForNodeFusion | PaddingMethod::Custom |
                             PaddingMethod::ExcludeEdges;
    if (method & ~defined)
        throwValueError("method: padding method ", method, " sets bits MPSNNPaddingMethod does not define (0x",
                        std::hex, method & ~defined, ")");
    return std::make_shared<NNDefaultPadding>(method);
}

std::shared_ptr<NNDefaultPadding> NNDefaultPadding::paddingForTensorflowAveragePooling() {
    return paddingWithMethod(kTensorflowAveragePoolingMethod);
}

ImageDescriptor NNDefaultPadding::destinationImageDescriptor(const ImageBatch&, const StateBatch&, Kernel& kernel,
                                                             const ImageDescriptor& suggested) {
    // TensorFlow's SAME average pooling divides by the in-image taps; MPS gets there through Clamp,
    // which average pooling treats as "count the valid pixels only". Gradient (binary) kernels take
    // their edge mode from the forward state instead.
    if (method_ == kTensorflowAveragePoolingMethod)
        if (auto* unary = dynamic_cast<CNNKernel*>(&kernel)) unary->edgeMode = ImageEdgeMode::Clamp;
    return suggested;
}

std::shared_ptr<NNDefaultPadding> NNDefaultPadding::paddingForTensorflowAveragePoolingValidOnly() {
    return paddingWithMethod(PaddingMethod::SizeValidOnly | PaddingMethod::AlignCentered |
                             PaddingMethod::AddRemainderToBottomRight);
}

std::string NNDefaultPadding::label() const {
    std::ostringstream out;
    out << "NNDefaultPadding(method=" << method_ << ")";
    return out.str();
}

std::shared_ptr<NNPadding> NNDefaultPadding::inverse() const {
    // A reverse filter undoing a forward one uses the opposite size style: ValidOnly pairs
    // with Full; Same and Full stay as they are (spec §1.8.1).
    uint32_t size = method_ & PaddingMethod::SizeMask;
    uint32_t rest = method_ & ~PaddingMethod::SizeMask;
    uint32_t inverted = size == PaddingMethod::SizeValidOnly ? PaddingMethod::SizeFull : size;
    return std::make_shared<NNDefaultPadding>(rest | inverted);
}

namespace padding {

int sizeStyle(uint32_t method) {
    switch (method & PaddingMethod::SizeMask & 0x30u) {
        case PaddingMethod::SizeValidOnly: return -1;
        case PaddingMethod::SizeSame: return 0;
        case PaddingMethod::SizeFull: return 1;
        default: throwValueError("padding: the size bits of padding method ", method, " are the reserved value 48");
    }
}

static void checkArguments(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style) {
    if (sourceSize < 0) throwValueError("source_size: must be >= 0, got ", sourceSize);
    if (stride < 1) throwValueError("stride: must be >= 1, got ", stride);
    if (kernelSize < 1) throwValueError("kernel_size: must be >= 1, got ", kernelSize);
    if (style < -1 || style > 1) throwValueError("style: must be -1 (valid only), 0 (same) or 1 (full), got ", style);
}

int64_t destinationSize(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style) {
    checkArguments(sourceSize, stride, kernelSize, style);
    int64_t numerator = checked::addSigned(sourceSize, int64_t(style) * (kernelSize - 1), "padding size");
    if (numerator <= 0) return 0;
    return numerator / stride + (numerator % stride ? 1 : 0);  // ceil without overflowing
}

int64_t destinationSizeReverse(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style) {
    checkArguments(sourceSize, stride, kernelSize, style);
    int64_t spread = checked::mulSigned(sourceSize - 1, stride, "padding size");
    return checked::addSigned(spread, 1 + int64_t(style) * (kernelSize - 1), "padding size");
}

int64_t offset(int64_t sourceSize, int64_t stride, int64_t kernelSize, uint32_t method, Axis axis, bool reverse) {
    int style = sizeStyle(method);
    int64_t correction = kernelSize >> 1;  // the offset is the window centre, not its left edge
    int64_t dest = reverse ? destinationSizeReverse(sourceSize, stride, kernelSize, style)
                           : destinationSize(sourceSize, stride, kernelSize, style);
    int64_t readSize = checked::addSigned(checked::mulSigned(dest - 1, stride, "padding offset"), kernelSize,
                                          "padding offset");
    int64_t extra = readSize - sourceSize;
    int64_t left;
    switch (method & PaddingMethod::AlignMask) {
        case PaddingMethod::AlignTopLeft: left = extra; break;
        case PaddingMethod::AlignBottomRight: left = 0; break;
        default: {
            // Remainder bits: bit 2 sends the x remainder right, bit 3 the y remainder down.
            uint32_t bit = axis == Axis::X ? 4u : 8u;
            int64_t remainderToTopLeft = (method & bit) ? 0 : 1;
            left = (extra + remainderToTopLeft) / 2;  // C division, as the header's code
        }
    }
    return correction - left;
}

}  // namespace padding
}  // namespace mpsgrad
