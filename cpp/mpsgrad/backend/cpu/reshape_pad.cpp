// CPU backend: the reshape copy, pad and pad gradient (metal/reshape_pad_params.h).
//
// Every op gathers: each destination element is computed by the one loop iteration that owns it
// (pixels or rows split across threads), so results are bitwise reproducible. The bindings (layouts,
// index tables) were checked by bindings::check* before the op was encoded.
//
// Speed: the per-element index arithmetic (divisions, table lookups) is hoisted out of the inner
// loops. Each op walks its destination pixel by pixel and moves runs of channels that are
// contiguous on both sides with one memcpy / one vectorizable loop, so it runs near copy bandwidth.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../../../metal/reshape_pad_params.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

inline int64_t at(const ImageLayout& l, int64_t n, int64_t y, int64_t x, int64_t c) {
    return n * l.imageStride + (y * l.width + x) * int64_t(l.pixelStride) + l.channelOffset + c;
}

// The first element of pixel `pixel` (row-major y * width + x) of image n.
inline int64_t pixelAt(const ImageLayout& l, int64_t n, int64_t pixel) {
    return n * l.imageStride + pixel * int64_t(l.pixelStride) + l.channelOffset;
}

const int32_t* ints(const BufferSlice& slice) {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(slice.buffer->contents()) + slice.offset);
}

// Pixels per parallel chunk for the pixel-split loops: enough work to amortize a hand-off.
constexpr int64_t kPixelGrain = 256;

// Copies destination pixels [first, last) of image n of a reshape: the destination's HWC
// element index `flat` reads the source element with the same HWC index. Within one pixel
// on each side the channels are contiguous, so the copy proceeds in runs that end where
// either side's pixel ends.
// True when the layout's pixels hold exactly its channels, back to back (no channel offset, no
// padding lanes): element i of the image's HWC order is then float i of the image.
inline bool denseLayout(const ImageLayout& l) { return l.channelOffset == 0 && l.pixelStride == l.channels; }

void reshapePixels(const ReshapeParams& p, const float* x, float* y, int64_t n, int64_t first, int64_t last) {
    const ImageLayout& s = p.source;
    const ImageLayout& d = p.destination;
    const int64_t sc0 = first * d.channels;  // HWC index of the first element copied
    if (denseLayout(s) && denseLayout(d)) {  // the same HWC range on both sides: one copy, not one per pixel
        std::memcpy(y + n * d.imageStride + sc0, x + n * s.imageStride + sc0,
                    size_t((last - first) * d.channels) * sizeof(float));
        return;
    }
    int64_t sPixel = sc0 / s.channels, sc = sc0 % s.channels;
    for (int64_t dPixel = first; dPixel < last; ++dPixel) {
        float* out = y + pixelAt(d, n, dPixel);
        for (int64_t dc = 0; dc < d.channels;) {
            const int64_t run = std::min<int64_t>(d.channels - dc, s.channels - sc);
            std::memcpy(out + dc, x + pixelAt(s, n, sPixel) + sc, size_t(run) * sizeof(float));
            dc += run;
            sc += run;
            if (sc == s.channels) {
                sc = 0;
                ++sPixel;
            }
        }
    }
}

// A run of destination channels [first, first + count) of the pad's channel table: either all
// fill (source < 0) or source channels source, source + 1, ...
struct ChannelRun {
    int32_t first;
    int32_t count;
    int32_t source;
};

std::vector<ChannelRun> channelRuns(const int32_t* mapC, int32_t channels) {
    std::vector<ChannelRun> runs;
    for (int32_t k = 0; k < channels; ++k) {
        const int32_t sc = mapC[k];
        if (!runs.empty()) {
            ChannelRun& r = runs.back();
            const bool extends = (sc < 0 && r.source < 0) || (sc >= 0 && r.source >= 0 && sc == r.source + r.count);
            if (extends) {
                ++r.count;
                continue;
            }
        }
        runs.push_back(ChannelRun{k, 1, sc < 0 ? -1 : sc});
    }
    return runs;
}

// The pad gradient's channel table as runs of dX channels: count 0 (no G channel reads them: 0),
// a contiguous single source (dX channel first + i <- G channel source + i, once each), or the
// general case (source = -1: each channel sums its CSR list).
struct GradientRun {
    int32_t first;
    int32_t count;
    int32_t kind;  // 0: nothing, 1: contiguous single, 2: general
    int32_t source;
};

std::vector<GradientRun> gradientRuns(const int32_t* sc, const int32_t* lc, int32_t channels) {
    std::vector<GradientRun> runs;
    for (int32_t k = 0; k < channels; ++k) {
        const int32_t n = sc[k + 1] - sc[k];
        const int32_t kind = n == 0 ? 0 : n == 1 ? 1 : 2;
        const int32_t source = kind == 1 ? lc[sc[k]] : -1;
        if (!runs.empty()) {
            GradientRun& r = runs.back();
            if (r.kind == kind && (kind != 1 || source == r.source + r.count)) {
                ++r.count;
                continue;
            }
        }
        runs.push_back(GradientRun{k, 1, kind, source});
    }
    return runs;
}

// padGradient's sums for a destination pixel fed by the single gradient pixel `in`: each element
// written once as 0 + its terms (the same value, bit for bit, as the general path's zero fill and
// additions, -0 included), instead of a fill followed by a read-modify-write of the pixel.
void singleSourcePixel(const float* in, float* o, const std::vector<GradientRun>& runs, const int32_t* sc,
                       const int32_t* lc) {
    for (const GradientRun& r : runs) {
        float* __restrict__ to = o + r.first;
        if (r.kind == 0) {
            std::fill(to, to + r.count, 0.0f);
        } else if (r.kind == 1) {
            const float* __restrict__ from = in + r.source;
            for (int32_t i = 0; i < r.count; ++i) to[i] = 0.0f + from[i];
        } else {
            for (int32_t k = r.first; k < r.first + r.count; ++k) {
                float sum = 0.0f;
                for (int32_t c = sc[k]; c < sc[k + 1]; ++c) sum += in[lc[c]];
                o[k] = sum;
            }
        }
    }
}

}  // namespace

void reshapeCopy(const ReshapeParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    const ImageLayout& d = p.destination;
    if (p.batch == 0 || d.width == 0 || d.height == 0 || d.channels == 0) return;
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    const int64_t pixels = int64_t(d.width) * d.height;
    parallelFor(int64_t(p.batch) * pixels, kPixelGrain, [&](int64_t begin, int64_t end) {
        while (begin < end) {  // one image's share of the chunk at a time
            const int64_t n = begin / pixels, first = begin % pixels;
            const int64_t last = std::min(pixels, first + (end - begin));
            reshapePixels(p, x, y, n, first, last);
            begin += last - first;
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
    const std::vector<ChannelRun> runs = channelRuns(mapC, d.channels);
    const size_t pixelBytes = size_t(d.channels) * sizeof(float);
    parallelFor(int64_t(p.batch) * p.clipHeight, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / p.clipHeight, j = row % p.clipHeight;
            const int32_t sy = mapY[j];
            float* out = y + at(d, n, p.clipY + j, p.clipX, 0);
            for (int64_t i = 0; i < p.clipWidth; ++i, out += d.pixelStride) {
                const int32_t sx = mapX[i];
                if (sx < 0 || sy < 0) {  // a padding pixel: fill in every channel
                    std::memcpy(out, fill, pixelBytes);
                    continue;
                }
                const float* in = x + at(p.source, n, sy, sx, 0);
                for (const ChannelRun& r : runs) {
                    const float* from = r.source < 0 ? fill + r.first : in + r.source;
                    std::memcpy(out + r.first, from, size_t(r.count) * sizeof(float));
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
    const std::vector<GradientRun> runs = gradientRuns(sc, lc, d.channels);
    parallelFor(int64_t(p.batch) * d.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t n = row / d.height, y = row % d.height;
            for (int64_t x = 0; x < d.width; ++x) {
                float* o = dx + at(d, n, y, x, 0);
                if (sy[y + 1] - sy[y] == 1 && sx[x + 1] - sx[x] == 1) {  // one gradient pixel (zero padding)
                    singleSourcePixel(g + at(p.gradient, n, ly[sy[y]], lx[sx[x]], 0), o, runs, sc, lc);
                    continue;
                }
                // Each element's sum starts at 0 and adds G in the order gy outer, gx, gc inner:
                // the order every backend uses. The loops below keep that order per element
                // while walking whole channel runs at each (gy, gx).
                std::fill(o, o + d.channels, 0.0f);
                for (int32_t a = sy[y]; a < sy[y + 1]; ++a) {
                    for (int32_t b = sx[x]; b < sx[x + 1]; ++b) {
                        const float* in = g + at(p.gradient, n, ly[a], lx[b], 0);
                        for (const GradientRun& r : runs) {
                            if (r.kind == 1) {
                                float* __restrict__ to = o + r.first;
                                const float* __restrict__ from = in + r.source;
                                for (int32_t i = 0; i < r.count; ++i) to[i] += from[i];
                            } else if (r.kind == 2) {
                                for (int32_t k = r.first; k < r.first + r.count; ++k)
                                    for (int32_t c = sc[k]; c < sc[k + 1]; ++c) o[k] += in[lc[c]];
                            }
                        }
                    }
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
