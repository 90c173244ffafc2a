// CPU backend: the loss ops (metal/loss_params.h; formulas in metal/loss_math.h). Pixels are split
// across threads (each pixel is independent); the reductions run over the pixel partials in
// pixel order on one thread, so every result is bitwise reproducible.
#include <cstdint>
#include <string>

#include "../../../../metal/loss_math.h"
#include "backend/backend.h"
#include "core/errors.h"
#include "cpu_ops.h"
#include "elementwise.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using elementwise::checkLayout;
using elementwise::invalid;

inline int64_t at(const ImageLayout& l, int64_t n, int64_t pixel) {
    return n * l.imageStride + pixel * l.pixelStride + l.channelOffset;
}

void checkSameSize(const char* op, const char* name, const ImageLayout& l, const ImageLayout& ref) {
    checkLayout(op, name, l);
    if (l.width != ref.width || l.height != ref.height || l.channels != ref.channels)
        invalid(op, std::string(name) + " differs in size from the source");
}

}  // namespace

void lossElements(const LossElementsParams& p, const float* source, const float* labels, const float* weights,
                  float* destination, float* loss, float* partials) {
    static const char* op = "lossElements";
    checkLayout(op, "source", p.source);
    checkSameSize(op, "labels", p.labels, p.source);
    checkSameSize(op, "destination", p.destination, p.source);
    if (p.hasWeights) checkSameSize(op, "weights", p.weights, p.source);
    const bool perElement = p.reductionType == kReductionNone;
    if (perElement) checkSameSize(op, "loss", p.loss, p.source);
    const int64_t pixels = int64_t(p.source.width) * p.source.height;
    const int C = p.source.channels;
    if (C == 0 || pixels == 0 || p.batch == 0) return;
    parallelFor(int64_t(p.batch) * pixels, 256, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t n = i / pixels, px = i % pixels;
            float sum = 0.0f, nonzero = 0.0f;
            lossPixel(p, C, source + at(p.source, n, px), labels + at(p.labels, n, px),
                      p.hasWeights ? weights + at(p.weights, n, px) : nullptr, destination + at(p.destination, n, px),
                      perElement ? loss + at(p.loss, n, px) : nullptr, perElement, sum, nonzero);
            if (!perElement) {
                partials[2 * (p.partialsOffset + i)] = sum;
                partials[2 * (p.partialsOffset + i) + 1] = nonzero;
            }
        }
    });
}

void lossReduce(const LossReduceParams& p, const float* partials, float* results) {
    const int64_t pixels = p.pixelsPerImage;
    if (p.acrossBatch) {
        float loss = 0.0f, scale = 1.0f;
        mpsgrad::lossReduce(p, partials, int(pixels * p.images), p.images, loss, scale);
        for (int32_t n = 0; n < p.images; ++n) {
            results[2 * n] = loss;
            results[2 * n + 1] = scale;
        }
        return;
    }
    for (int32_t n = 0; n < p.images; ++n)
        mpsgrad::lossReduce(p, partials + 2 * n * pixels, int(pixels), 1, results[2 * n], results[2 * n + 1]);
}

void lossScaleGradient(const LossScaleParams& p, const float* results, float* destination) {
    checkLayout("lossScaleGradient", "destination", p.destination);
    const int64_t pixels = int64_t(p.destination.width) * p.destination.height;
    for (int32_t n = 0; n < p.batch; ++n) {
        const float scale = results[2 * (p.resultIndex + n) + 1];
        for (int64_t px = 0; px < pixels; ++px) {
            float* d = destination + at(p.destination, n, px);
            for (int c = 0; c < p.destination.channels; ++c) d[c] *= scale;
        }
    }
}

}  // namespace mpsgrad::cpu
