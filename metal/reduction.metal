// The Gram matrix and spatial-mean family's kernels (MPSNNGramMatrixCalculation and its gradient,
// the spatial mean behind MPSNNReductionSpatialMeanNode and its gradient). Semantics are exactly
// those of metal/reduction_params.h, which the CPU backend (cpp/mpsgrad/backend/cpu/reduction.cpp)
// implements too; the host side is cpp/mpsgrad/backend/metal/metal_reduction.cpp.
//
// One thread computes one output element and loops over what it sums, in a fixed order, so results
// are reproducible. No threadgroup memory, no atomics.
#include <metal_stdlib>

#include "image_indexing.h"
#include "reduction_params.h"

using namespace metal;
using namespace mpsgrad;

// Grid (N, N, batch): thread (c, f, n) writes G[n][f][c] = alpha * sum over pixels of X[f] * X[c],
// pixels in row-major order. Bindings: 0 params, 1 source X, 2 destination.
kernel void gram_matrix_forward(constant GramMatrixParams& p [[buffer(0)]],
                                device const float* source [[buffer(1)]],
                                device float* destination [[buffer(2)]],
                                uint3 gid [[thread_position_in_grid]]) {
    const int c = int(gid.x);
    const int f = int(gid.y);
    const int n = int(gid.z);
    const ImageLayout s = p.source;
    if (c >= s.channels || f >= s.channels || n >= p.batch) return;
    float sum = 0.0f;
    for (int y = 0; y < s.height; ++y) {
        for (int x = 0; x < s.width; ++x) {
            const int base = pixelIndex(s, n, y, x);
            sum += source[base + f] * source[base + c];
        }
    }
    destination[pixelIndex(p.destination, n, 0, f) + c] = p.alpha * sum;
}

// Grid (N, width, batch * height): thread (f, x, row) writes
// dX[n][y][x][f] = alpha * sum over c of X[n][y][x][c] * (Gr[f][c] + Gr[c][f]).
// Bindings: 0 params, 1 gradient Gr, 2 source X, 3 destination dX.
kernel void gram_matrix_gradient(constant GramMatrixGradientParams& p [[buffer(0)]],
                                 device const float* gradient [[buffer(1)]],
                                 device const float* source [[buffer(2)]],
                                 device float* destination [[buffer(3)]],
                                 uint3 gid [[thread_position_in_grid]]) {
    const ImageLayout d = p.destination;
    const int f = int(gid.x);
    const int x = int(gid.y);
    const int row = int(gid.z);
    if (f >= d.channels || x >= d.width || row >= p.batch * d.height) return;
    const int n = row / d.height;
    const int y = row - n * d.height;
    const int xBase = pixelIndex(p.source, n, y, x);
    const int rowF = pixelIndex(p.gradient, n, 0, f);  // Gr[f][.]
    float sum = 0.0f;
    for (int c = 0; c < d.channels; ++c) {
        const float g = gradient[rowF + c] + gradient[pixelIndex(p.gradient, n, 0, c) + f];
        sum += source[xBase + c] * g;
    }
    destination[pixelIndex(d, n, y, x) + f] = p.alpha * sum;
}

// Grid (channels, batch): thread (k, n) writes the mean of channel k over the region: row sums
// added up, rows and columns in increasing order (the CPU backend's order).
// Bindings: 0 params, 1 source, 2 destination.
kernel void spatial_mean_forward(constant SpatialMeanParams& p [[buffer(0)]],
                                 device const float* source [[buffer(1)]],
                                 device float* destination [[buffer(2)]],
                                 uint3 gid [[thread_position_in_grid]]) {
    const int k = int(gid.x);
    const int n = int(gid.y);
    if (k >= p.source.channels || n >= p.batch) return;
    float total = 0.0f;
    for (int y = p.regionY; y < p.regionY + p.regionHeight; ++y) {
        float rowSum = 0.0f;
        for (int x = p.regionX; x < p.regionX + p.regionWidth; ++x) rowSum += source[pixelIndex(p.source, n, y, x) + k];
        total += rowSum;
    }
    const float count = float(p.regionWidth * p.regionHeight);
    destination[pixelIndex(p.destination, n, p.destinationY, p.destinationX) + k] = total / count;
}

// Grid (channels, width, batch * height): every dX element; G / (w * h) inside the region, 0 outside.
// Bindings: 0 params, 1 gradient G, 2 destination dX.
kernel void spatial_mean_gradient(constant SpatialMeanGradientParams& p [[buffer(0)]],
                                  device const float* gradient [[buffer(1)]],
                                  device float* destination [[buffer(2)]],
                                  uint3 gid [[thread_position_in_grid]]) {
    const ImageLayout d = p.destination;
    const int k = int(gid.x);
    const int x = int(gid.y);
    const int row = int(gid.z);
    if (k >= d.channels || x >= d.width || row >= p.batch * d.height) return;
    const int n = row / d.height;
    const int y = row - n * d.height;
    const bool inside = x >= p.regionX && x < p.regionX + p.regionWidth && y >= p.regionY &&
                        y < p.regionY + p.regionHeight;
    float value = 0.0f;
    if (inside) {
        const float count = float(p.regionWidth * p.regionHeight);
        value = gradient[pixelIndex(p.gradient, n, p.gradientY, p.gradientX) + k] / count;
    }
    destination[pixelIndex(d, n, y, x) + k] = value;
}
