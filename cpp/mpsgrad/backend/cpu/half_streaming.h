// Native float16 storage for the CPU element-wise ops (docs/float16.md): one row at a time, a
// FLOAT16 input row is converted into a small float32 row buffer (F16C 8 lanes at a time when the
// processor has it, half_simd.h), the op's float32 code runs on it, and a FLOAT16 destination row
// is rounded back from a float32 row buffer. The buffers are a row long, so they stay in the
// first cache levels: the op streams half the bytes of its float32 form through memory instead of
// the three full-image conversion passes of a float32 shadow.
//
// An op is written once against two policies, RowReader<T> and RowWriter<T>, and instantiated for
// T = float (no staging: pointers into the image) and T = uint16_t (IEEE half bits). The float32
// arithmetic and the rounding (to nearest even, overflow to infinity, both in half_simd.h and
// core/half.h) are those of the shadow path, so both give the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/half_simd.h"

namespace mpsgrad::cpu::elementwise {

// Reads rows of a float32 binding in place.
template <class T>
struct RowReader {
    const float* base;
    ImageLayout layout;

    RowReader(const void* b, const ImageLayout& l) : base(static_cast<const float*>(b)), layout(l) {}
    // rowRuns(layout, base, n, x0, y, strideX, count, edgeMode, zeros).
    RowRuns runs(int64_t n, int32_t x0, int32_t y, int32_t strideX, int32_t count, int32_t edgeMode,
                 const float* zeros) {
        return rowRuns(layout, base, n, x0, y, strideX, count, edgeMode, zeros);
    }
    RowRuns runs(int64_t n, int32_t x0, int32_t y, int32_t count, int32_t edgeMode, const float* zeros) {
        return runs(n, x0, y, 1, count, edgeMode, zeros);
    }
};

// Reads rows of a FLOAT16 binding through a float32 copy of the image row (all its pixels and
// channels: one contiguous conversion).
template <>
struct RowReader<uint16_t> {
    const uint16_t* base;
    ImageLayout layout;
    std::vector<float> row;

    RowReader(const void* b, const ImageLayout& l) : base(static_cast<const uint16_t*>(b)), layout(l) {}
    RowRuns runs(int64_t n, int32_t x0, int32_t y, int32_t count, int32_t edgeMode, const float* zeros) {
        return runs(n, x0, y, 1, count, edgeMode, zeros);
    }
    // strideX 0 (a broadcast column) stages the whole row too: rowRuns picks the pixel from it.
    RowRuns runs(int64_t n, int32_t x0, int32_t y, int32_t strideX, int32_t count, int32_t edgeMode,
                 const float* zeros) {
        const bool clamp = edgeMode == kEdgeClamp && layout.width > 0 && layout.height > 0;
        // Off-image rows read as zeros: rowRuns never touches the base then.
        if ((y < 0 || y >= layout.height) && !clamp)
            return rowRuns(layout, nullptr, n, x0, y, strideX, count, edgeMode, zeros);
        const int32_t clampedY = std::min(std::max(y, 0), layout.height - 1);
        const int64_t rowElements = int64_t(layout.width) * layout.pixelStride;
        row.resize(size_t(rowElements));
        halvesToFloats(base + n * int64_t(layout.imageStride) + int64_t(clampedY) * rowElements, row.data(),
                       rowElements);
        // The staged row is a one-row image with the same pixel stride and channel offset.
        ImageLayout rowLayout = layout;
        rowLayout.height = 1;
        rowLayout.imageStride = int32_t(rowElements);
        return rowRuns(rowLayout, row.data(), 0, x0, 0, strideX, count, edgeMode, zeros);
    }
};

// Writes rows of a float32 binding in place: row() points at pixel (x, y) of image n, channel
// layout.channelOffset; pixel i of the row is at row() + i * pixelStride.
template <class T>
struct RowWriter {
    float* base;
    ImageLayout layout;

    RowWriter(void* b, const ImageLayout& l) : base(static_cast<float*>(b)), layout(l) {}
    float* row(int64_t n, int32_t x, int32_t y, int32_t) { return base + pixelIndex(layout, n, x, y); }
    void commit() {}
};

// Writes rows of a FLOAT16 binding: row() hands out a float32 row buffer with the image's pixel
// stride, commit() rounds the layout.channels written channels of each pixel into the image (the
// whole run at once when the pixels are dense, so the other channels are never touched).
template <>
struct RowWriter<uint16_t> {
    uint16_t* base;
    ImageLayout layout;
    std::vector<float> buffer;
    uint16_t* target = nullptr;
    int32_t pixels = 0;

    RowWriter(void* b, const ImageLayout& l) : base(static_cast<uint16_t*>(b)), layout(l) {}
    float* row(int64_t n, int32_t x, int32_t y, int32_t count) {
        target = base + pixelIndex(layout, n, x, y);
        pixels = count;
        buffer.resize(size_t(count) * size_t(layout.pixelStride));
        return buffer.data();
    }
    void commit() {
        const int64_t stride = layout.pixelStride, channels = layout.channels;
        if (channels == stride) {
            floatsToHalves(buffer.data(), target, int64_t(pixels) * stride);
        } else {
            for (int64_t i = 0; i < pixels; ++i)
                floatsToHalves(buffer.data() + i * stride, target + i * stride, channels);
        }
    }
};

// A type carried as a value, for generic lambdas (C++17 has no template lambdas).
template <class T>
struct Format {
    using type = T;
};

// Calls body(Format<A>{}, Format<B>{}[, Format<C>{}]) with the element type (float, or uint16_t for
// IEEE half) that each flag selects: where an op's format combinations are instantiated.
template <class Body>
void withFormats(Body&& body, bool a, bool b) {
    auto second = [&](auto fa) {
        if (b) body(fa, Format<uint16_t>{});
        else body(fa, Format<float>{});
    };
    if (a) second(Format<uint16_t>{});
    else second(Format<float>{});
}
template <class Body>
void withFormats(Body&& body, bool a, bool b, bool c) {
    auto rest = [&](auto fa) { withFormats([&](auto fb, auto fc) { body(fa, fb, fc); }, b, c); };
    if (a) rest(Format<uint16_t>{});
    else rest(Format<float>{});
}
template <class Body>
void withFormats(Body&& body, bool a, bool b, bool c, bool d) {
    auto rest = [&](auto fa) { withFormats([&](auto fb, auto fc, auto fd) { body(fa, fb, fc, fd); }, b, c, d); };
    if (a) rest(Format<uint16_t>{});
    else rest(Format<float>{});
}

}  // namespace mpsgrad::cpu::elementwise
