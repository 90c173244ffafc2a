// CPU backend, internal: the image operands of the convolution ops in FLOAT32 or FLOAT16 storage
// (docs/float16.md, "Convolution").
//
// The products always run in float32. A FLOAT16 operand is widened where the op packs it anyway
// (an im2col row, a block of the gradient, a Winograd tile), in the cache, and a FLOAT16
// destination is rounded where the epilogue writes it. The values are those of the float32 op on
// the widened storage, rounded to half once at the end, which is what the float32 shadows of
// core/float16_shadow.h compute, without their three passes over memory (widen the source, widen
// the destination, round the result back).
//
// The paths that read their operands in place (depthwise, fully connected, the strided data
// gradients) work on Float32Copy instead: the shadows' conversions, inside the op.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "buffer_cache.h"
#include "conv_epilogue.h"
#include "cpu_ops.h"
#include "half_simd.h"

namespace mpsgrad::cpu::conv {

// An image the op reads.
struct ConvSource {
    const void* data = nullptr;
    bool half = false;

    const float* floats() const { return static_cast<const float*>(data); }
    const uint16_t* halves() const { return static_cast<const uint16_t*>(data); }
    // dst[0, count) = elements [at, at + count) as float32 (exact).
    void load(int64_t at, int count, float* dst) const {
        if (half)
            halvesToFloats(halves() + at, dst, count);
        else
            std::memcpy(dst, floats() + at, sizeof(float) * size_t(count));
    }
};

// An image the op writes.
struct ConvDestination {
    void* data = nullptr;
    bool half = false;

    float* floats() const { return static_cast<float*>(data); }
    uint16_t* halves() const { return static_cast<uint16_t*>(data); }
    // Channels [o0, o0 + count) of the pixel whose channel 0 is element `at`, from the sums v through
    // the epilogue (pre: as Epilogue). `row` is scratch of `count` floats for a FLOAT16 destination:
    // the epilogue's float32 values, then rounded to half in one run.
    void write(const Epilogue& e, const float* v, int o0, int count, int64_t at, float* pre, float* row) const {
        if (!half) return e(v, o0, count, floats() + at + o0, pre);
        e(v, o0, count, row, pre);
        floatsToHalves(row, halves() + at + o0, count);
    }
    // Elements [at, at + count) = v[0, count).
    void store(int64_t at, const float* v, int count) const {
        if (half)
            floatsToHalves(v, halves() + at, count);
        else
            std::memcpy(floats() + at, v, sizeof(float) * size_t(count));
    }
};

// Elements spanned by `images` images of layout l (the binding checks' extent: up to the last
// channel of the last pixel of the last image).
inline int64_t layoutElements(const ImageLayout& l, int64_t images) {
    if (images <= 0 || l.width <= 0 || l.height <= 0 || l.channels <= 0) return 0;
    return (images - 1) * int64_t(l.imageStride) + (int64_t(l.width) * l.height - 1) * l.pixelStride +
           l.channelOffset + l.channels;
}

// The float32 view of an operand for a path that reads or writes FLOAT32 only: the storage itself
// when it is FLOAT32, else a widened copy of its `elements` elements (copied back by
// writeBack() for a destination, whose elements the op leaves alone keep their values).
class Float32Copy {
public:
    Float32Copy(const void* data, bool half, int64_t elements)
        : data_(const_cast<void*>(data)), half_(half), elements_(half ? elements : 0), copy_(size_t(elements_)) {
        if (half_) convert(false);
    }
    float* floats() const { return half_ ? copy_.data() : static_cast<float*>(data_); }
    void writeBack() const {
        if (half_) convert(true);
    }

private:
    void convert(bool toHalf) const {
        for (int64_t done = 0; done < elements_; done += kChunk) {
            const ConvertFormatParams p{int32_t(std::min<int64_t>(kChunk, elements_ - done)), toHalf ? 1 : 0,
                                        kStorageFloat16};
            uint16_t* halves = static_cast<uint16_t*>(data_) + done;
            float* floats = copy_.data() + done;
            if (toHalf)
                convertImageFormat(p, floats, halves);
            else
                convertImageFormat(p, halves, floats);
        }
    }
    static constexpr int64_t kChunk = int64_t(1) << 30;  // ConvertFormatParams counts in int32
    void* data_;
    bool half_;
    int64_t elements_;
    ScratchFloats copy_;
};

}  // namespace mpsgrad::cpu::conv
