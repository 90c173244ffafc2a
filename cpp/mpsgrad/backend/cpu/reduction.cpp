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

// Channels the spatial mean sums per work item: 64 (8 vectors of 8 in registers) gives several
// work items per image to balance the threads.
constexpr int64_t kMeanBlock = 64;

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

// Channels [k0, k0 + L * Groups) of one image's region: per channel, the sum of each row's pixels
// (in x order), the row sums added in row order, divided by the pixel count. The sums of a group
// of channels stay in vector registers across the whole row (a float array would be loaded and
// stored again for every pixel, which made the mean slower than the memory).
template <int Groups>
MPSGRAD_MEAN_INLINE void meanLanes(const SpatialMeanParams& p, const float* x, int64_t b, int64_t k0, float count,
                                   float* o) {
    MeanLanes total[Groups], rowSum[Groups];
    for (int j = 0; j < Groups; ++j) total[j] = MeanLanes{};
    for (int64_t y = p.regionY; y < p.regionY + p.regionHeight; ++y) {
        for (int j = 0; j < Groups; ++j) rowSum[j] = MeanLanes{};
        const float* in = x + at(p.source, b, y, p.regionX) + k0;
        for (int64_t xx = 0; xx < p.regionWidth; ++xx, in += p.source.pixelStride)
            for (int j = 0; j < Groups; ++j) {
                MeanLanes v;
                std::memcpy(&v, in + j * kMeanLanes, sizeof v);
                rowSum[j] += v;
            }
        for (int j = 0; j < Groups; ++j) total[j] += rowSum[j];
    }
    for (int j = 0; j < Groups; ++j) {
        const MeanLanes mean = total[j] / count;
        std::memcpy(o + j * kMeanLanes, &mean, sizeof mean);
    }
}

// Channels [k0, k1) of image b, same order of additions as meanLanes, one channel at a time.
void meanScalar(const SpatialMeanParams& p, const float* x, int64_t b, int64_t k0, int64_t k1, float count,
                float* o) {
    for (int64_t k = k0; k < k1; ++k) {
        float total = 0.0f;
        for (int64_t y = p.regionY; y < p.regionY + p.regionHeight; ++y) {
            float rowSum = 0.0f;
            const float* in = x + at(p.source, b, y, p.regionX) + k;
            for (int64_t xx = 0; xx < p.regionWidth; ++xx) rowSum += in[xx * p.source.pixelStride];
            total += rowSum;
        }
        o[k - k0] = total / count;
    }
}

// Work item i: image i / blocks, channels of block i % blocks (kMeanBlock channels at most).
MPSGRAD_VECTOR_CLONES
void meanItems(const SpatialMeanParams& p, const float* x, float* out, int64_t blocks, int64_t begin, int64_t end,
               float count) {
    const int64_t channels = p.source.channels;
    for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / blocks, k0 = (i % blocks) * kMeanBlock;
        const int64_t k1 = std::min<int64_t>(channels, k0 + kMeanBlock);
        float* o = out + at(p.destination, b, p.destinationY, p.destinationX);
        int64_t k = k0;
        for (; k + 4 * kMeanLanes <= k1; k += 4 * kMeanLanes) meanLanes<4>(p, x, b, k, count, o + k);
        for (; k + kMeanLanes <= k1; k += kMeanLanes) meanLanes<1>(p, x, b, k, count, o + k);
        meanScalar(p, x, b, k, k1, count, o + k);
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
