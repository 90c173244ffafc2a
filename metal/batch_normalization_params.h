// Params of the batch normalization family's backend ops (MPSCNNBatchNormalization,
// MPSCNNBatchNormalizationStatistics, MPSCNNBatchNormalizationStatisticsGradient,
// MPSCNNBatchNormalizationGradient), shared by C++ and Metal. Spec §2.5, §4.8; the formulas as
// implemented are in docs/normalization.md.
//
// Every op covers whole images: channels [channelOffset, channelOffset + C) of every pixel of
// `batch` images, C = source.channels. The per-channel vectors (gamma, beta, mean, variance,
// gradients, PReLU data) hold C floats each, index c for channel channelOffset + c.
#pragma once

#include "common_params.h"

namespace mpsgrad {

struct BatchNormalizationParams {
    ImageLayout source;       // X (forward source; the secondary of the gradient kernels)
    ImageLayout gradient;     // G = dL/dY (gradient kernels; unused by the forward ops)
    ImageLayout destination;  // Y (forward) or dX (gradient); unused by the reduction ops
    int32_t batch;            // images
    float epsilon;            // > 0
    NeuronParams neuron;      // the fused neuron f (type kNeuronNone: identity)
    // Statistics: pixels per channel already summarised in mean / variance by earlier sub-batch
    // encodes (0: overwrite). The sub-batch's own statistics are merged into them with Chan's rule.
    // Statistics gradient: 0 overwrites gammaGradient / betaGradient, any other value adds to them.
    int32_t previousCount;
    // Gradient: M, the pixels per channel of the whole training batch the statistics span.
    int32_t totalCount;
    // Gradient: 1 = training-mode gradient (batch statistics, the -dβ/M - x̂·dγ/M terms),
    // 0 = inference-mode gradient (mean / variance are constants).
    int32_t trainingStatistics;
};

// Statistics (per channel c, over the m = batch·H·W pixels of this encode):
//   mean_b = Σx/m,  M2_b = Σ(x - mean_b)²   (computed as shifted sums around x of the first pixel)
//   with n = previousCount, mean_a = mean[c], M2_a = variance[c]·n:
//   mean[c]     = mean_a + (mean_b - mean_a)·m/(n+m)
//   variance[c] = (M2_a + M2_b + (mean_b - mean_a)²·n·m/(n+m)) / (n+m)     (biased, spec §2.5 [I])
// Forward: z = (x - mean[c])·gamma[c]/sqrt(variance[c] + epsilon) + beta[c];  Y = f(z)
// Statistics gradient: G' = G·f'(z), x̂ = (x - mean)/sqrt(variance + epsilon)
//   betaGradient[c]  (+)= Σ G'        gammaGradient[c] (+)= Σ G'·x̂
// Gradient: training:  dX = gamma/sqrt(var+eps)·(G' - betaGradient/M - x̂·gammaGradient/M)
//           inference: dX = gamma/sqrt(var+eps)·G'

}  // namespace mpsgrad
