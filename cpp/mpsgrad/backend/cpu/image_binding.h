// Binding checks of the CPU ops that take buffer slices (pooling, upsampling, dropout): every
// image a params struct describes must lie inside the buffer bound for it, so a wrong params
// struct fails its command buffer instead of reading or writing out of bounds. Internal to the
// CPU backend.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "elementwise.h"

namespace mpsgrad::cpu {

// Floats an image binding spans: up to the last channel of the last pixel of the last image
// (0 for an empty image). Computed in 64 bits from 32-bit fields, so it cannot overflow.
inline int64_t imageSpanFloats(const ImageLayout& l, int32_t batch) {
    if (batch <= 0 || l.width <= 0 || l.height <= 0 || l.channels <= 0) return 0;
    return int64_t(batch - 1) * l.imageStride + (int64_t(l.height) * l.width - 1) * l.pixelStride +
           l.channelOffset + l.channels;
}

// Throws std::invalid_argument naming op and binding unless `slice` holds `floats` floats.
inline void checkFloatsFit(const char* op, const char* name, const BufferSlice& slice, int64_t floats) {
    if (floats <= 0) return;
    if (!slice) elementwise::invalid(op, std::string(name) + " buffer is missing");
    const size_t length = slice.buffer->length();
    if (slice.offset % sizeof(float) != 0 || slice.offset > length)
        elementwise::invalid(op, std::string(name) + " offset " + std::to_string(slice.offset) +
                                     " is not a float offset inside its buffer");
    const uint64_t available = uint64_t(length - slice.offset) / sizeof(float);
    if (uint64_t(floats) > available)
        elementwise::invalid(op, std::string(name) + " needs " + std::to_string(floats) + " floats but its buffer holds " +
                                     std::to_string(available) + " after offset " + std::to_string(slice.offset));
}

// checkFloatsFit for a binding of IEEE halves (native float16 storage): `halves` 2-byte elements.
inline void checkHalvesFit(const char* op, const char* name, const BufferSlice& slice, int64_t halves) {
    if (halves <= 0) return;
    if (!slice) elementwise::invalid(op, std::string(name) + " buffer is missing");
    const size_t length = slice.buffer->length();
    if (slice.offset % sizeof(uint16_t) != 0 || slice.offset > length)
        elementwise::invalid(op, std::string(name) + " offset " + std::to_string(slice.offset) +
                                     " is not a half offset inside its buffer");
    const uint64_t available = uint64_t(length - slice.offset) / sizeof(uint16_t);
    if (uint64_t(halves) > available)
        elementwise::invalid(op, std::string(name) + " needs " + std::to_string(halves) + " halves but its buffer holds " +
                                     std::to_string(available) + " after offset " + std::to_string(slice.offset));
}

// checkLayout, then checkFloatsFit (checkHalvesFit when `half`) for `batch` images of `l`.
inline void checkImageBinding(const char* op, const char* name, const BufferSlice& slice, const ImageLayout& l,
                              int32_t batch, bool half = false) {
    elementwise::checkLayout(op, name, l);
    if (l.pixelStride < 0) elementwise::invalid(op, std::string(name) + " has a negative pixel stride");
    if (half) checkHalvesFit(op, name, slice, imageSpanFloats(l, batch));
    else checkFloatsFit(op, name, slice, imageSpanFloats(l, batch));
}

}  // namespace mpsgrad::cpu
