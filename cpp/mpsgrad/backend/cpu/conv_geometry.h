// Pixel addressing and thread sizing shared by the CPU convolution paths (convolution.cpp, its
// Winograd path and its col2im data gradient), so the three read images and split work alike.
#pragma once

#include <algorithm>
#include <cstdint>

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

// Source pixel read at (sy, sx) under the edge mode: null means "reads zero".
inline const float* sourcePixel(const float* source, const ImageLayout& s, int n, int sy, int sx, int edgeMode) {
    if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) {
        if (edgeMode != kEdgeClamp || s.width <= 0 || s.height <= 0) return nullptr;
        sy = clampInt(sy, 0, s.height - 1);
        sx = clampInt(sx, 0, s.width - 1);
    }
    return source + pixelIndex(s, n, sy, sx);
}

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
