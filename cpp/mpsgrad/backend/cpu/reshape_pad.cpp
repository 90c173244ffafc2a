// CPU backend: the reshape copy, pad and pad gradient (metal/reshape_pad_params.h).
//
// Every op gathers: each destination element is computed by the one loop iteration that owns it
// (rows split across threads), so results are bitwise reproducible. The bindings (layouts, index
// tables) were checked by bindings::check* before the op was encoded.
#include <cstdint>

#include "../../../../metal/reshape_pad_params.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

inline int64_t at(const ImageLayout& l, int64_t n, int64_t y, int64_t x, int64_t c) {
    return n * l.imageStride + (y * l.width + x) * int64_t(l.pixelStride) + l.channelOffset + c;
}

const int32_t* ints(const BufferSlice& slice) {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(slice.buffer->contents()) + slice.offset);
}

}  // namespace

void reshapeCopy(const ReshapeParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    const ImageLayout& s = p.source;
    const ImageLayout& d = p.destination;
    if (p.batch == 0 || d.width == 0 || d.height == 0 || d.channels == 0) return;
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    const int64_t sourceRow = int64_t(s.width) * s.channels;
    parallelFor(int64_t(p.batch) * d.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / d.height, dy = row % d.height;
            for (int64_t dx = 0; dx < d.width; ++dx) {
                int64_t flat = (dy * d.width + dx) * d.channels;  // HWC index of element (dy, dx, 0)
                for (int64_t c = 0; c < d.channels; ++c, ++flat) {
                    const int64_t sy = flat / sourceRow, r = flat % sourceRow;
                    y[at(d, n, dy, dx, c)] = x[at(s, n, sy, r / s.channels, r % s.channels)];
                }
            }
        }
    });
}

void padForward(const PadParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice,
                const BufferSlice& mapsSlice, const BufferSlice& fillSlice) {
    const ImageLayout& d = p.destination;
    if (p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0 || d.channels == 0) return;
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    const int32_t* mapX = ints(mapsSlice);
    const int32_t* mapY = mapX + p.clipWidth;
    const int32_t* mapC = mapY + p.clipHeight;
    const float* fill = fillSlice.floats();
    parallelFor(int64_t(p.batch) * p.clipHeight, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / p.clipHeight, j = row % p.clipHeight;
            const int32_t sy = mapY[j];
            for (int64_t i = 0; i < p.clipWidth; ++i) {
                const int32_t sx = mapX[i];
                float* out = y + at(d, n, p.clipY + j, p.clipX + i, 0);
                for (int64_t k = 0; k < d.channels; ++k) {
                    const int32_t sc = mapC[k];
                    out[k] = (sx < 0 || sy < 0 || sc < 0) ? fill[k] : x[at(p.source, n, sy, sx, sc)];
                }
            }
        }
    });
}

void padGradient(const PadGradientParams& p, const BufferSlice& gradientSlice, const BufferSlice& destinationSlice,
                 const BufferSlice& mapsSlice) {
    const ImageLayout& d = p.destination;
    if (p.batch == 0 || d.width == 0 || d.height == 0 || d.channels == 0) return;
    const float* g = gradientSlice.floats();
    float* dx = destinationSlice.floats();
    const int32_t* m = ints(mapsSlice);
    const int32_t *sx = m + p.startX, *sy = m + p.startY, *sc = m + p.startC;
    const int32_t *lx = m + p.listX, *ly = m + p.listY, *lc = m + p.listC;
    parallelFor(int64_t(p.batch) * d.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / d.height, y = row % d.height;
            for (int64_t x = 0; x < d.width; ++x) {
                for (int64_t k = 0; k < d.channels; ++k) {
                    float sum = 0.0f;  // gy outer, gx, gc inner: the order every backend uses
                    for (int32_t a = sy[y]; a < sy[y + 1]; ++a)
                        for (int32_t b = sx[x]; b < sx[x + 1]; ++b)
                            for (int32_t c = sc[k]; c < sc[k + 1]; ++c)
                                sum += g[at(p.gradient, n, ly[a], lx[b], lc[c])];
                    dx[at(d, n, y, x, k)] = sum;
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
