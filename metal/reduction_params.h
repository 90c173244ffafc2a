// Params of the Gram matrix and spatial-mean family's backend ops (MPSNNGramMatrixCalculation,
// its gradient, and the spatial-mean reduction behind MPSNNReductionSpatialMeanNode with its
// gradient), shared by C++ and Metal. docs/gram_matrix_spatial_mean.md.
//
// Gram matrix (forward), per image n, with X the source's P = width * height pixels by N channels:
//   destination[n][0][f][c] = alpha * sum over pixels p of X[p][f] * X[p][c]   (f, c < N)
// i.e. the N x N matrix G = alpha * X^T X stored as an N-wide, 1-high image of N channels
// (pixel x = f holds row f). Pixels are summed in row-major order (y outer, x inner).
//
// Gram matrix gradient, with Gr the incoming N x N gradient in the same layout:
//   dX[n][p][f] = alpha * sum over c < N of X[p][c] * (Gr[f][c] + Gr[c][f])
//
// Spatial mean (forward): destination[n][dstY][dstX][k] = (1 / (w * h)) * sum over the source
// region [x0, x0 + w) x [y0, y0 + h) of X[n][y][x][k], k < channels (one pixel written).
//
// Spatial mean gradient: dX[n][y][x][k] = G[n][gradY][gradX][k] / (w * h) inside the region and 0
// everywhere else (every pixel and channel of dX is written).
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct GramMatrixParams {
    ImageLayout source;       // X: channels = N
    ImageLayout destination;  // N x 1 pixels, channels = N
    int32_t batch;
    float alpha;
};

struct GramMatrixGradientParams {
    ImageLayout gradient;     // Gr: N x 1 pixels, channels = N
    ImageLayout source;       // the forward source X: channels = N
    ImageLayout destination;  // dX, sized like X: channels = N
    int32_t batch;
    float alpha;
};

struct SpatialMeanParams {
    ImageLayout source;       // channels = the channels reduced
    ImageLayout destination;  // channels = the same count
    int32_t batch;
    int32_t regionX;          // the source region reduced
    int32_t regionY;
    int32_t regionWidth;
    int32_t regionHeight;
    int32_t destinationX;     // the destination pixel written
    int32_t destinationY;
};

struct SpatialMeanGradientParams {
    ImageLayout gradient;     // G: channels = the forward's reduced channels
    ImageLayout destination;  // dX: channels = the same count; every pixel written
    int32_t batch;
    int32_t regionX;          // the forward's source region (dX pixels outside get 0)
    int32_t regionY;
    int32_t regionWidth;
    int32_t regionHeight;
    int32_t gradientX;        // the G pixel read (where the forward wrote)
    int32_t gradientY;
};

}  // namespace mpsgrad
