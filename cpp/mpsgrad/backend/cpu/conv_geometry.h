// Pixel addressing and thread sizing shared by the CPU convolution paths (convolution.cpp, its
// Winograd path and its col2im data gradient), so the three read images and split work alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu::conv {

inline int64_t ceilDiv64(int64_t v, int64_t m) { return (v + m - 1) / m; }
inline int clampInt(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Offset in floats of element (n, y, x, channel 0) of a layout, channel offset included. (Note
// the (y, x) order: elementwise::pixelIndex takes (x, y).)
inline int64_t pixelIndex(const ImageLayout& l, int n, int y, int x) {
    return int64_t(n) * l.imageStride + (int64_t(y) * l.width + x) * l.pixelStride + l.channelOffset;
}

// Source pixel read at (sy, sx) under the edge mode: null means "reads zero". T is the storage
// element (float, or uint16_t for FLOAT16 storage).
template <class T>
inline const T* sourcePixel(const T* source, const ImageLayout& s, int n, int sy, int sx, int edgeMode) {
    if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) {
        if (edgeMode != kEdgeClamp || s.width <= 0 || s.height <= 0) return nullptr;
        sy = clampInt(sy, 0, s.height - 1);
        sx = clampInt(sx, 0, s.width - 1);
    }
    return source + pixelIndex(s, n, sy, sx);
}

// The argument checks of the three ops (the backend's binding checks ran before: these guard
// direct calls of the cpu functions).
[[noreturn]] inline void invalid(const std::string& what) {
    throw std::invalid_argument("mpsgrad cpu convolution: " + what);
}

inline void checkLayout(const ImageLayout& l, const char* name) {
    if (l.width < 0 || l.height < 0 || l.channels < 0 || l.channelOffset < 0 ||
        l.channelOffset + l.channels > l.pixelStride)
        invalid(std::string(name) + " layout is inconsistent (channelOffset + channels > pixelStride)");
}

inline void checkCommon(int batch, int groups, int inChannels, int outChannels, int kW, int kH, int sX, int sY,
                        int dX, int dY) {
    if (batch < 0) invalid("batch must be >= 0");
    if (groups < 1 || inChannels % groups != 0 || outChannels % groups != 0)
        invalid("groups must divide the input and output channel counts");
    if (inChannels < 1 || outChannels < 1) invalid("channel counts must be >= 1");
    if (kW < 1 || kH < 1) invalid("kernel size must be >= 1");
    if (sX < 1 || sY < 1) invalid("strides must be >= 1");
    if (dX < 1 || dY < 1) invalid("dilation rates must be >= 1");
}

inline void checkRect(const ImageLayout& l, int x, int y, int w, int h, const char* name) {
    if (w < 0 || h < 0 || x < 0 || y < 0 || x + w > l.width || y + h > l.height)
        invalid(std::string(name) + " clip rectangle lies outside the image");
}

// The grain for parallelFor over `items` work items on `threads` threads: all of them in one
// chunk (no hand-off at all) when one thread is worth using.
inline int64_t grainFor(int64_t items, int threads) { return threads > 1 ? 1 : std::max<int64_t>(1, items); }

// The threads worth using for an op of `macs` multiply-adds: one per two million (about 100 us
// of one core's work with its packing). Handing work to a pool thread costs tens of microseconds,
// far more on a loaded machine: the small layers of the digits example ran slower on two threads
// than on one. Chosen from the problem size only, never from timing, so results stay bitwise
// reproducible for a given thread count.
inline int threadsFor(int64_t macs) {
    constexpr int64_t kMacsPerThread = int64_t(2) << 20;
    return int(std::max<int64_t>(1, std::min<int64_t>(threadCount(), macs / kMacsPerThread)));
}

}  // namespace mpsgrad::cpu::conv
