#include "core/padding.h"

#include <sstream>

#include "core/errors.h"

namespace mpsgrad {

std::shared_ptr<NNDefaultPadding> NNDefaultPadding::paddingWithMethod(uint32_t method) {
    padding::sizeStyle(method);  // validates the size bits
    return std::make_shared<NNDefaultPadding>(method);
}

std::shared_ptr<NNDefaultPadding> NNDefaultPadding::paddingForTensorflowAveragePooling() {
    return paddingWithMethod(PaddingMethod::SizeSame | PaddingMethod::AlignCentered |
                             PaddingMethod::AddRemainderToBottomRight);
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

int64_t destinationSize(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style) {
    int64_t numerator = sourceSize + style * (kernelSize - 1);
    if (numerator <= 0) return 0;
    return (numerator + stride - 1) / stride;
}

int64_t destinationSizeReverse(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style) {
    return (sourceSize - 1) * stride + 1 + style * (kernelSize - 1);
}

int64_t offset(int64_t sourceSize, int64_t stride, int64_t kernelSize, uint32_t method, Axis axis, bool reverse) {
    int style = sizeStyle(method);
    int64_t correction = kernelSize >> 1;  // the offset is the window centre, not its left edge
    int64_t dest = reverse ? destinationSizeReverse(sourceSize, stride, kernelSize, style)
                           : destinationSize(sourceSize, stride, kernelSize, style);
    int64_t readSize = (dest - 1) * stride + kernelSize;
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
