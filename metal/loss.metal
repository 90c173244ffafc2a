// The loss kernels of the Metal backend (metal/loss_params.h; formulas in metal/loss_math.h,
// shared with the CPU backend). Host side: cpp/mpsgrad/backend/metal/metal_loss.cpp.
//
// loss_elements runs a thread per pixel (its channels in increasing order); loss_reduce a thread
// per image (or one thread for the whole batch) summing the pixel partials in pixel order, so the
// result is bitwise reproducible; loss_scale_gradient a thread per pixel. No threadgroup memory.
#include <metal_stdlib>

#include "image_indexing.h"
#include "loss_math.h"
#include "loss_params.h"

using namespace metal;
using namespace mpsgrad;

// Grid: batch * width * height threads. Bindings: 0 params, 1 source, 2 labels, 3 weights,
// 4 destination, 5 loss (reduction None), 6 partials (other reductions).
kernel void loss_elements(constant LossElementsParams& p [[buffer(0)]],
                          device const float* source [[buffer(1)]],
                          device const float* labels [[buffer(2)]],
                          device const float* weights [[buffer(3)]],
                          device float* destination [[buffer(4)]],
                          device float* loss [[buffer(5)]],
                          device float* partials [[buffer(6)]],
                          uint gid [[thread_position_in_grid]]) {
    const int pixels = p.source.width * p.source.height;
    const int i = int(gid);
    if (i >= p.batch * pixels) return;
    const int n = i / pixels, px = i - n * pixels;
    const int y = px / p.source.width, x = px - y * p.source.width;
    const LossElementsParams q = p;
    const bool perElement = q.reductionType == kReductionNone;
    float sum = 0.0f, nonzero = 0.0f;
    lossPixel(q, q.source.channels, source + pixelIndex(q.source, n, y, x),
              labels + pixelIndex(q.labels, n, y, x),
              weights + (q.hasWeights != 0 ? pixelIndex(q.weights, n, y, x) : 0),
              destination + pixelIndex(q.destination, n, y, x),
              loss + (perElement ? pixelIndex(q.loss, n, y, x) : 0), perElement, sum, nonzero);
    if (!perElement) {
        partials[2 * (q.partialsOffset + i)] = sum;
        partials[2 * (q.partialsOffset + i) + 1] = nonzero;
    }
}

// Grid: images threads (acrossBatch: 1 thread). Bindings: 0 params, 1 partials, 2 results.
kernel void loss_reduce(constant LossReduceParams& p [[buffer(0)]],
                        device const float* partials [[buffer(1)]],
                        device float* results [[buffer(2)]],
                        uint gid [[thread_position_in_grid]]) {
    const int n = int(gid);
    const LossReduceParams q = p;
    float loss = 0.0f, scale = 1.0f;
    if (q.acrossBatch != 0) {
        if (n != 0) return;
        lossReduce(q, partials, q.pixelsPerImage * q.images, q.images, loss, scale);
        for (int k = 0; k < q.images; ++k) {
            results[2 * k] = loss;
            results[2 * k + 1] = scale;
        }
        return;
    }
    if (n >= q.images) return;
    lossReduce(q, partials + 2 * n * q.pixelsPerImage, q.pixelsPerImage, 1, loss, scale);
    results[2 * n] = loss;
    results[2 * n + 1] = scale;
}

// Grid: batch * width * height threads. Bindings: 0 params, 1 results, 2 destination.
kernel void loss_scale_gradient(constant LossScaleParams& p [[buffer(0)]],
                                device const float* results [[buffer(1)]],
                                device float* destination [[buffer(2)]],
                                uint gid [[thread_position_in_grid]]) {
    const int pixels = p.destination.width * p.destination.height;
    const int i = int(gid);
    if (i >= p.batch * pixels) return;
    const int n = i / pixels, px = i - n * pixels;
    const int y = px / p.destination.width, x = px - y * p.destination.width;
    const float scale = results[2 * (p.resultIndex + n) + 1];
    device float* d = destination + pixelIndex(p.destination, n, y, x);
    for (int c = 0; c < p.destination.channels; ++c) d[c] *= scale;
}
