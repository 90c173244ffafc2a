// CPU backend: the Gram matrix, its gradient, the spatial mean and its gradient
// (metal/reduction_params.h). The Gram matrix and its gradient are GEMMs through the system BLAS
// (cpu/blas.h): an image's pixels are the rows of a P x N matrix whose row stride is the pixel
// stride, so both run on the images in place. The bindings were checked by bindings::check*
// before the op was encoded; every output element is written by one loop iteration, so results
// are reproducible run to run.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../../../metal/reduction_params.h"
#include "blas.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

// Channels the spatial mean sums per work item (their totals kept on the stack).
constexpr int64_t kMeanBlock = 256;

inline int64_t at(const ImageLayout& l, int64_t n, int64_t y, int64_t x) {
    return n * l.imageStride + (y * l.width + x) * int64_t(l.pixelStride) + l.channelOffset;
}

#if defined(__GNUC__) || defined(__clang__)
typedef float MeanLanes __attribute__((vector_size(32)));
#define MPSGRAD_MEAN_INLINE inline __attribute__((always_inline))
#else
#error "the CPU backend's spatial mean needs GCC or Clang vector extensions"
#endif
constexpr int64_t kMeanLanes = int64_t(sizeof(MeanLanes) / sizeof(float));

}  // namespace

void gramMatrix(const GramMatrixParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    const ImageLayout& s = p.source;
    const int n = s.channels;
    if (p.batch == 0 || n == 0) return;
    const float* x = sourceSlice.floats();
    float* g = destinationSlice.floats();
    const int pixels = s.width * s.height;
    parallelFor(p.batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            float* out = g + at(p.destination, b, 0, 0);
            if (pixels == 0) {  // an empty sum
                for (int f = 0; f < n; ++f)
                    for (int c = 0; c < n; ++c) out[int64_t(f) * p.destination.pixelStride + c] = 0.0f;
                continue;
            }
            const float* a = x + at(s, b, 0, 0);
            // G = alpha * X^T X: X is pixels x n with row stride pixelStride. G is symmetric: the
            // BLAS computes the upper triangle (half the work of a GEMM) and it is mirrored, so G
            // is exactly symmetric.
            const int64_t ld = p.destination.pixelStride;
            blas::ssyrkUpper(true, n, pixels, p.alpha, a, s.pixelStride, 0.0f, out, int(ld));
            for (int64_t f = 1; f < n; ++f)
                for (int64_t c = 0; c < f; ++c) out[f * ld + c] = out[c * ld + f];
        }
    });
}

void gramMatrixGradient(const GramMatrixGradientParams& p, const BufferSlice& gradientSlice,
                        const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    const ImageLayout& d = p.destination;
    const int n = d.channels;
    if (p.batch == 0 || n == 0 || d.width == 0 || d.height == 0) return;
    const float* gr = gradientSlice.floats();
    const float* x = sourceSlice.floats();
    float* dx = destinationSlice.floats();
    // S = Gr + Gr^T per image (n x n, dense), then one GEMM per row of pixels: dX_row = alpha * X_row * S.
    const int64_t nn = int64_t(n) * n;
    std::vector<float> sym(size_t(p.batch * nn));
    for (int64_t b = 0; b < p.batch; ++b) {
        const float* g = gr + at(p.gradient, b, 0, 0);
        float* s = sym.data() + b * nn;
        for (int64_t f = 0; f < n; ++f)
            for (int64_t c = 0; c < n; ++c)
                s[f * n + c] = g[f * p.gradient.pixelStride + c] + g[c * p.gradient.pixelStride + f];
    }
    parallelFor(int64_t(p.batch) * d.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t b = row / d.height, y = row % d.height;
            blas::sgemm(false, false, d.width, n, n, p.alpha, x + at(p.source, b, y, 0), p.source.pixelStride,
                        sym.data() + b * nn, n, 0.0f, dx + at(d, b, y, 0), d.pixelStride);
        }
    });
}

namespace {

// Adds the row sums of channel groups [0, L * Groups) of one row of `width` pixels (`in` at the
// first pixel's first channel of the group) into total. Each row sum stays in a vector register
// across the row (a float array would be loaded and stored again for every pixel, which made the
// mean slower than the memory).
template <int Groups>
MPSGRAD_MEAN_INLINE void addRowLanes(const float* in, int64_t stride, int64_t width, MeanLanes* total) {
    MeanLanes rowSum[Groups];
    for (int j = 0; j < Groups; ++j) rowSum[j] = MeanLanes{};
    for (int64_t xx = 0; xx < width; ++xx, in += stride)
        for (int j = 0; j < Groups; ++j) {
            MeanLanes v;
            std::memcpy(&v, in + j * kMeanLanes, sizeof v);
            rowSum[j] += v;
        }
    for (int j = 0; j < Groups; ++j) total[j] += rowSum[j];
}

// Work item i: image i / blocks, channels of block i % blocks (kMeanBlock channels at most). Per
// channel: each row's pixels summed in x order, the row sums added in row order, divided by the
// pixel count (the Metal kernel's order, whatever the grouping). The channel groups of a row are
// taken one after the other while the row (at most a few tens of KB) is in the cache, so the image
// is read from memory once.
MPSGRAD_VECTOR_CLONES
void meanItems(const SpatialMeanParams& p, const float* x, float* out, int64_t blocks, int64_t begin, int64_t end,
               float count) {
    const int64_t channels = p.source.channels, stride = p.source.pixelStride;
    MeanLanes total[kMeanBlock / kMeanLanes];
    float tail[kMeanLanes];
    for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / blocks, k0 = (i % blocks) * kMeanBlock;
        const int64_t width = std::min<int64_t>(kMeanBlock, channels - k0);
        const int64_t vectors = width / kMeanLanes, grouped = vectors / 4 * 4, rest = width - vectors * kMeanLanes;
        for (int64_t j = 0; j < vectors; ++j) total[j] = MeanLanes{};
        std::fill(tail, tail + rest, 0.0f);
        for (int64_t y = p.regionY; y < p.regionY + p.regionHeight; ++y) {
            const float* in = x + at(p.source, b, y, p.regionX) + k0;
            int64_t j = 0;
            for (; j < grouped; j += 4) addRowLanes<4>(in + j * kMeanLanes, stride, p.regionWidth, total + j);
            for (; j < vectors; ++j) addRowLanes<1>(in + j * kMeanLanes, stride, p.regionWidth, total + j);
            for (int64_t k = 0; k < rest; ++k) {
                const float* c = in + vectors * kMeanLanes + k;
                float rowSum = 0.0f;
                for (int64_t xx = 0; xx < p.regionWidth; ++xx) rowSum += c[xx * stride];
                tail[k] += rowSum;
            }
        }
        float* o = out + at(p.destination, b, p.destinationY, p.destinationX) + k0;
        for (int64_t j = 0; j < vectors; ++j) {
            const MeanLanes mean = total[j] / count;
            std::memcpy(o + j * kMeanLanes, &mean, sizeof mean);
        }
        for (int64_t k = 0; k < rest; ++k) o[vectors * kMeanLanes + k] = tail[k] / count;
    }
}

}  // namespace

void spatialMean(const SpatialMeanParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    const int64_t channels = p.source.channels;
    if (p.batch == 0 || channels == 0) return;
    const float* x = sourceSlice.floats();
    float* out = destinationSlice.floats();
    const float count = float(int64_t(p.regionWidth) * p.regionHeight);
    // Work items: (image, block of kMeanBlock channels). Each channel adds its pixels row by row in
    // x order and its row sums in row order: the order the Metal kernel uses, whatever the grouping.
    const int64_t blocks = (channels + kMeanBlock - 1) / kMeanBlock;
    parallelFor(int64_t(p.batch) * blocks, 1,
                [&](int64_t begin, int64_t end) { meanItems(p, x, out, blocks, begin, end, count); });
}

void spatialMeanGradient(const SpatialMeanGradientParams& p, const BufferSlice& gradientSlice,
                         const BufferSlice& destinationSlice) {
    const ImageLayout& d = p.destination;
    if (p.batch == 0 || d.channels == 0 || d.width == 0 || d.height == 0) return;
    const float* g = gradientSlice.floats();
    float* dx = destinationSlice.floats();
    const float count = float(int64_t(p.regionWidth) * p.regionHeight);
    // Every pixel inside the region takes the same values g / count: compute them once per image.
    const int64_t C = d.channels;
    std::vector<float> scaled(size_t(int64_t(p.batch) * C));
    for (int64_t b = 0; b < p.batch; ++b) {
        const float* gin = g + at(p.gradient, b, p.gradientY, p.gradientX);
        for (int64_t k = 0; k < C; ++k) scaled[size_t(b * C + k)] = gin[k] / count;
    }
    const size_t pixelBytes = size_t(C) * sizeof(float);
    parallelFor(int64_t(p.batch) * d.height, 1, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t b = row / d.height, y = row % d.height;
            const float* value = scaled.data() + b * C;
            const bool rowInside = y >= p.regionY && y < p.regionY + p.regionHeight;
            for (int64_t x = 0; x < d.width; ++x) {
                const bool inside = rowInside && x >= p.regionX && x < p.regionX + p.regionWidth;
                float* o = dx + at(d, b, y, x);
                if (inside)
                    std::memcpy(o, value, pixelBytes);
                else
                    std::fill(o, o + C, 0.0f);
            }
        }
    });
}

}  // namespace mpsgrad::cpu
