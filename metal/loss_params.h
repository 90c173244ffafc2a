// Params of the loss ops (MPSCNNLoss, spec §2.12), shared by C++ and Metal. The per-element
// formulas are in loss_math.h (shared by the CPU backend and metal/loss.metal).
//
// A loss runs in up to three ops:
//  1. loss_elements: per pixel of every image, the weighted gradient dL/dy (before the reduction's
//     1/count) into `destination`, and either the weighted per-element losses into `loss` (reduction
//     None) or, into partials[2 * (partialsOffset + n * width * height + pixel)], the pixel's loss
//     sum and its count of non-zero weights (element count; SoftMaxCE / CosineDistance: 1 per pixel
//     with a non-zero weight).
//  2. loss_reduce: per image (or once across the batch) sums the partials in pixel order and writes
//     results[2 * n] = the reduced loss, results[2 * n + 1] = the gradient scale (1/count for Mean and
//     SumByNonZeroWeights when scaleGradient, else 1; 0 when the count is 0).
//  3. loss_scale_gradient: destination *= results[2 * resultIndex + 1].
#pragma once

#include "common_params.h"

namespace mpsgrad {

// MPSCNNLossType values.
enum LossTypeCode : int32_t {
    kLossMeanAbsoluteError = 0,
    kLossMeanSquaredError = 1,
    kLossSoftMaxCrossEntropy = 2,
    kLossSigmoidCrossEntropy = 3,
    kLossCategoricalCrossEntropy = 4,
    kLossHinge = 5,
    kLossHuber = 6,
    kLossCosineDistance = 7,
    kLossLog = 8,
    kLossKullbackLeiblerDivergence = 9,
    kLossTypeCount = 10,
};

// MPSCNNReductionType values.
enum ReductionTypeCode : int32_t {
    kReductionNone = 0,
    kReductionSum = 1,
    kReductionMean = 2,
    kReductionSumByNonZeroWeights = 3,
};

struct LossElementsParams {
    ImageLayout source;       // predictions y; channels = C
    ImageLayout labels;       // t; same size
    ImageLayout weights;      // per-element weights (hasWeights); same size
    ImageLayout destination;  // dL/dy; same size
    ImageLayout loss;         // per-element losses (reduction None only); same size
    int32_t batch;            // images (n indexes every layout through imageStride)
    int32_t lossType;         // LossTypeCode
    int32_t reductionType;    // ReductionTypeCode
    int32_t hasWeights;
    float weight;             // scalar weight (no weights image)
    float labelSmoothing;
    float numberOfClasses;
    float epsilon;            // Log
    float delta;              // Huber
    int32_t partialsOffset;   // pixel slot of image 0 in partials
    int32_t labelGradients;   // 1: `destination` receives dL/dt, the labels' gradient (NNLossGradient
                              // computeLabelGradients), instead of dL/dy; the loss is unchanged
};

struct LossReduceParams {
    int32_t images;           // results written: one per image
    int32_t pixelsPerImage;   // partial slots per image
    int32_t reductionType;    // Sum, Mean or SumByNonZeroWeights
    int32_t acrossBatch;      // 1: one value over every image, written to each image's result
    float meanCount;          // Mean's divisor per image (W*H*C, or W*H for SoftMaxCE)
    int32_t scaleGradient;    // 1: the gradient is that of the reduced loss
};

struct LossScaleParams {
    ImageLayout destination;  // the gradient written by loss_elements
    int32_t batch;
    int32_t resultIndex;      // result slot of image 0 (image n uses resultIndex + n)
};

}  // namespace mpsgrad
