// Params of the softmax family's backend ops (MPSCNNSoftMax, MPSCNNLogSoftMax and their
// gradients), shared by C++ and Metal. Spec §2.4.
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/softmax.cpp). The
// element-wise conventions of neuron_params.h apply (clip rectangle, channel ranges, batches,
// edge modes). The reduction runs across the N = destination.channels channels of one pixel:
// exactly the channel slice [channelOffset, channelOffset + N) of each input, never the padding
// lanes.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// MPSCNNSoftMax (logSoftmax = 0) / MPSCNNLogSoftMax (logSoftmax = 1), at every pixel:
//   X_k = X[n][sourceY+y][sourceX+x][source.channelOffset + k],  0 <= k < N
//   M   = max_j X_j,   S = sum_j exp(X_j - M)            (max-subtracted: no overflow)
//   softmax:      Y_k = exp(X_k - M) / S
//   log-softmax:  Y_k = (X_k - M) - log(S)
//   Y[n][clipY+y][clipX+x][destination.channelOffset + k] = Y_k
// An off-image pixel in kEdgeZero mode reads X_k = 0 (so Y_k = 1/N, or -log N).
// A +inf input gives NaN (inf - inf), as the mathematical limit is undefined in general.
struct SoftmaxParams {
    ImageLayout source;       // X; channels = N
    ImageLayout destination;  // Y; channels = N
    int32_t batch;
    int32_t sourceX;          // source pixel read for the clip origin (MPS offset)
    int32_t sourceY;
    int32_t clipX;            // first destination pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t edgeMode;         // EdgeModeCode for off-image reads of X
    int32_t logSoftmax;       // 0: softmax, 1: log-softmax
};

// MPSCNNSoftMaxGradient / MPSCNNLogSoftMaxGradient (primary = G = dL/dY, secondary = the forward
// OUTPUT Y, not X), at every pixel:
//   G_k = G[n][gradientY+y][gradientX+x][gradient.channelOffset + k]
//   Y_k = Y[n][outputY+y][outputX+x][output.channelOffset + k]
//   softmax:      dX_k = Y_k * (G_k - sum_j G_j * Y_j)
//   log-softmax:  dX_k = G_k - exp(Y_k) * sum_j G_j
//   dX[n][clipY+y][clipX+x][destination.channelOffset + k] = dX_k
struct SoftmaxGradientParams {
    ImageLayout gradient;     // G (primary); channels = N
    ImageLayout output;       // Y (secondary: the forward result); channels = N
    ImageLayout destination;  // dX; channels = N
    int32_t batch;
    int32_t gradientX;        // G pixel read for the clip origin (MPS primaryOffset)
    int32_t gradientY;
    int32_t outputX;          // Y pixel read for the clip origin (MPS secondaryOffset)
    int32_t outputY;
    int32_t clipX;            // first dX pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t gradientEdgeMode; // EdgeModeCode for off-image reads of G
    int32_t outputEdgeMode;   // EdgeModeCode for off-image reads of Y
    int32_t logSoftmax;       // 0: softmax gradient, 1: log-softmax gradient
};

}  // namespace mpsgrad
