// CPU backend: nearest and bilinear upsampling and their gradients.
//
// Semantics are exactly those written in metal/upsampling_params.h, whose sampling rule both
// backends share. Output rows are split across threads; each output pixel blends at most four
// input pixels over their contiguous channels (the inner loops vectorize). The gradients gather:
// each dX pixel sums the outputs that reach it in a fixed order, so no element is written twice
// and results are bitwise reproducible.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../../../metal/upsampling_params.h"
#include "cpu_ops.h"
#include "image_binding.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

void checkSampling(const char* op, int32_t mode, int32_t coordinateMode, int32_t scaleX, int32_t scaleY,
                   int32_t inputWidth, int32_t inputHeight) {
    if (mode != kUpsamplingNearest && mode != kUpsamplingBilinear) invalid(op, "unknown upsampling mode");
    if (coordinateMode < kUpsamplingHalfPixel || coordinateMode > kUpsamplingAlignCorners)
        invalid(op, "unknown coordinate mode");
    if (scaleX < 1 || scaleY < 1) invalid(op, "scale factors must be >= 1");
    if (inputWidth < 1 || inputHeight < 1) invalid(op, "the input is empty");
    // The sampling arithmetic multiplies input and output sizes in 32 bits.
    const int64_t limit = int64_t(1) << 31;
    if (int64_t(inputWidth) * inputWidth * scaleX >= limit || int64_t(inputHeight) * inputHeight * scaleY >= limit)
        invalid(op, "input too large for its scale factor");
}

}  // namespace

void upsamplingForward(const UpsamplingParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    static const char* op = "upsamplingForward";
    checkSampling(op, p.mode, p.coordinateMode, p.scaleX, p.scaleY, p.inputWidth, p.inputHeight);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkImageBinding(op, "source", sourceSlice, p.source, p.batch);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch);
    const int32_t N = p.destination.channels;
    if (p.source.channels != N) invalid(op, "source and destination channel counts differ");
    if (p.sourceX < 0 || p.sourceY < 0 || int64_t(p.sourceX) + p.inputWidth > p.source.width ||
        int64_t(p.sourceY) + p.inputHeight > p.source.height)
        invalid(op, "the input rectangle is not inside the source");
    if (p.outputX < 0 || p.outputY < 0 || int64_t(p.outputX) + p.clipWidth > int64_t(p.inputWidth) * p.scaleX ||
        int64_t(p.outputY) + p.clipHeight > int64_t(p.inputHeight) * p.scaleY)
        invalid(op, "the clip reaches beyond the upsampled image");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    // The horizontal taps of every output column, computed once.
    std::vector<UpsamplingTap> columns(static_cast<size_t>(p.clipWidth));
    for (int32_t i = 0; i < p.clipWidth; ++i)
        columns[size_t(i)] = upsamplingTap(p.outputX + i, p.inputWidth, p.scaleX, p.mode, p.coordinateMode);
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N * 4), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t oy = int32_t(r % p.clipHeight);
            const UpsamplingTap ty = upsamplingTap(p.outputY + oy, p.inputHeight, p.scaleY, p.mode, p.coordinateMode);
            const float ly = ty.lambda;
            for (int32_t i = 0; i < p.clipWidth; ++i) {
                const UpsamplingTap& tx = columns[size_t(i)];
                const float lx = tx.lambda;
                const float* x00 = x + pixelIndex(p.source, n, p.sourceX + tx.i0, p.sourceY + ty.i0);
                float* out = y + pixelIndex(p.destination, n, p.clipX + i, p.clipY + oy);
                if (p.mode == kUpsamplingNearest) {
                    for (int32_t c = 0; c < N; ++c) out[c] = x00[c];
                    continue;
                }
                const float* x01 = x + pixelIndex(p.source, n, p.sourceX + tx.i1, p.sourceY + ty.i0);
                const float* x10 = x + pixelIndex(p.source, n, p.sourceX + tx.i0, p.sourceY + ty.i1);
                const float* x11 = x + pixelIndex(p.source, n, p.sourceX + tx.i1, p.sourceY + ty.i1);
                for (int32_t c = 0; c < N; ++c)
                    out[c] = (1.0f - ly) * ((1.0f - lx) * x00[c] + lx * x01[c]) +
                             ly * ((1.0f - lx) * x10[c] + lx * x11[c]);
            }
        }
    });
}

void upsamplingGradient(const UpsamplingGradientParams& p, const BufferSlice& gradientSlice,
                        const BufferSlice& destinationSlice) {
    static const char* op = "upsamplingGradient";
    checkSampling(op, p.mode, p.coordinateMode, p.scaleX, p.scaleY, p.inputWidth, p.inputHeight);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkImageBinding(op, "gradient", gradientSlice, p.gradient, p.batch);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch);
    const int32_t N = p.destination.channels;
    if (p.gradient.channels != N) invalid(op, "gradient and destination channel counts differ");
    const int64_t limit = int64_t(1) << 30;
    if (std::abs(int64_t(p.gradientX)) > limit || std::abs(int64_t(p.gradientY)) > limit ||
        std::abs(int64_t(p.inputX)) > limit || std::abs(int64_t(p.inputY)) > limit)
        invalid(op, "offsets out of range");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    const float* g = gradientSlice.floats();
    float* dx = destinationSlice.floats();
    // Outputs whose G pixel lies inside G.
    const int32_t oxLo = std::max(0, -p.gradientX), oyLo = std::max(0, -p.gradientY);
    const int32_t oxHi = int32_t(std::min<int64_t>(int64_t(p.inputWidth) * p.scaleX, int64_t(p.gradient.width) - p.gradientX)) - 1;
    const int32_t oyHi = int32_t(std::min<int64_t>(int64_t(p.inputHeight) * p.scaleY, int64_t(p.gradient.height) - p.gradientY)) - 1;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N * 4 * p.scaleX * p.scaleY), [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(N));
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t y = int32_t(r % p.clipHeight);
            const int32_t iy = p.inputY + y;
            for (int32_t i = 0; i < p.clipWidth; ++i) {
                const int32_t ix = p.inputX + i;
                float* acc = dx + pixelIndex(p.destination, n, p.clipX + i, p.clipY + y);
                for (int32_t c = 0; c < N; ++c) acc[c] = 0.0f;
                if (ix < 0 || ix >= p.inputWidth || iy < 0 || iy >= p.inputHeight) continue;
                const UpsamplingRange ry = upsamplingReach(iy, p.inputHeight, p.scaleY, p.mode, p.coordinateMode);
                const UpsamplingRange rx = upsamplingReach(ix, p.inputWidth, p.scaleX, p.mode, p.coordinateMode);
                for (int32_t oy = std::max(ry.lo, oyLo); oy <= std::min(ry.hi, oyHi); ++oy) {
                    const float wy = upsamplingWeight(
                        upsamplingTap(oy, p.inputHeight, p.scaleY, p.mode, p.coordinateMode), iy);
                    if (wy == 0.0f) continue;
                    for (int32_t c = 0; c < N; ++c) row[size_t(c)] = 0.0f;
                    for (int32_t ox = std::max(rx.lo, oxLo); ox <= std::min(rx.hi, oxHi); ++ox) {
                        const float wx = upsamplingWeight(
                            upsamplingTap(ox, p.inputWidth, p.scaleX, p.mode, p.coordinateMode), ix);
                        if (wx == 0.0f) continue;
                        const float* gp = g + pixelIndex(p.gradient, n, p.gradientX + ox, p.gradientY + oy);
                        for (int32_t c = 0; c < N; ++c) row[size_t(c)] += wx * gp[c];
                    }
                    for (int32_t c = 0; c < N; ++c) acc[c] += wy * row[size_t(c)];
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
