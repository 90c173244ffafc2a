// CPU backend: the sub-pixel shuffle and its inverse (metal/sub_pixel_params.h).
//
// Both directions gather: each written element is computed by the one loop iteration that owns
// it (rows split across threads), so results are bitwise reproducible and equal to the Metal
// kernels'. The bindings were checked by bindings::checkSubPixelShuffle before the op was encoded.
#include <cstdint>
#include <cstring>

#include "../../../../metal/sub_pixel_params.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

inline int64_t pixelAt(const ImageLayout& l, int64_t n, int64_t y, int64_t x) {
    return n * l.imageStride + (y * l.width + x) * int64_t(l.pixelStride) + l.channelOffset;
}

}  // namespace

void subPixelShuffle(const SubPixelShuffleParams& p, const BufferSlice& lowSlice, const BufferSlice& highSlice) {
    const int64_t channels = p.high.channels, r = p.scale;
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0 || channels == 0) return;
    const float* low = lowSlice.floats();
    float* high = highSlice.floats();
    parallelFor(int64_t(p.batch) * p.clipHeight, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / p.clipHeight, qy = row % p.clipHeight;
            const int64_t ry = p.phaseY + qy;
            for (int64_t qx = 0; qx < p.clipWidth; ++qx) {
                const int64_t rx = p.phaseX + qx;
                const int64_t group = r * (ry % r) + rx % r;
                // A group's channels are contiguous on both sides: one copy per pixel.
                std::memcpy(high + pixelAt(p.high, n, p.clipY + qy, p.clipX + qx),
                            low + pixelAt(p.low, n, ry / r, rx / r) + group * channels,
                            size_t(channels) * sizeof(float));
            }
        }
    });
}

void subPixelUnshuffle(const SubPixelShuffleParams& p, const BufferSlice& highSlice, const BufferSlice& lowSlice) {
    const int64_t channels = p.high.channels, r = p.scale;
    if (p.batch == 0 || p.low.width == 0 || p.low.height == 0 || p.low.channels == 0) return;
    const float* high = highSlice.floats();
    float* low = lowSlice.floats();
    parallelFor(int64_t(p.batch) * p.low.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / p.low.height, y = row % p.low.height;
            for (int64_t x = 0; x < p.low.width; ++x) {
                float* out = low + pixelAt(p.low, n, y, x);
                for (int64_t group = 0; group < r * r; ++group) {
                    const int64_t qy = y * r + group / r - p.phaseY;  // position in the clip rectangle
                    const int64_t qx = x * r + group % r - p.phaseX;
                    float* dst = out + group * channels;
                    if (qx < 0 || qx >= p.clipWidth || qy < 0 || qy >= p.clipHeight) {
                        std::memset(dst, 0, size_t(channels) * sizeof(float));
                        continue;
                    }
                    std::memcpy(dst, high + pixelAt(p.high, n, p.clipY + qy, p.clipX + qx),
                                size_t(channels) * sizeof(float));
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
