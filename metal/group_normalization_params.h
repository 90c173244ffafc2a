// Params of the group normalization ops, shared by C++ and Metal. They serve both
// MPSCNNGroupNormalization[Gradient] and MPSCNNInstanceNormalization[Gradient] (instance
// normalization is group normalization with one channel per group). Spec §2.6; the formulas as
// implemented are in docs/normalization.md.
//
// Every op covers whole images: channels [channelOffset, channelOffset + C) of every pixel of
// `batch` images, C = source.channels, split into `groups` groups of K = C / groups consecutive
// channels. gamma, beta and the parameter gradients hold C floats (index c for channel
// channelOffset + c); statistics holds 2 floats per (image n, group g) at 2·(n·groups + g):
// the group's mean and its biased variance over the M = K·H·W values of the group.
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct GroupNormalizationParams {
    ImageLayout source;       // X (forward source; the secondary of the gradient)
    ImageLayout gradient;     // G = dL/dY (gradient only)
    ImageLayout destination;  // Y (forward) or dX (gradient)
    int32_t batch;            // images
    int32_t groups;           // >= 1, divides source.channels
    float epsilon;            // > 0
};

// Forward, per (n, g), over its M values x:
//   mean = Σx/M, variance = Σ(x - mean)²/M   (sums around the group's first value)
//   statistics[2(nG+g)] = mean, statistics[2(nG+g)+1] = variance
//   Y = (x - mean)/sqrt(variance + epsilon)·gamma[c] + beta[c]
// Gradient, with r = 1/sqrt(variance + epsilon), x̂ = (x - mean)·r (the forward's statistics):
//   betaGradient[c]  = Σ_n Σ_{y,x} G        gammaGradient[c] = Σ_n Σ_{y,x} G·x̂
//   per (n, g): A = Σ_{c in g} gamma[c]·Σ_{y,x} G,  B = Σ_{c in g} gamma[c]·Σ_{y,x} G·x̂
//   dX = r·(gamma[c]·G - A/M - x̂·B/M)

}  // namespace mpsgrad
