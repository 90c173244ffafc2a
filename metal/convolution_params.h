// Params of the convolution family's backend ops, shared by C++ and Metal.
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/convolution.cpp):
// the backend ops know nothing of MPS offsets, padding policies or states.
// Weights are OHWI: weight[o][ky][kx][i], i < inputChannels / groups.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// Y[n][clipY+y][clipX+x][o] = f( b[o] + sum_{ky,kx,i in group(o)}
//     W[o][ky][kx][i] * X[n][windowTopY + strideY*y + dilationY*ky][windowLeftX + strideX*x + dilationX*kx][i] )
// for 0 <= x < clipWidth, 0 <= y < clipHeight. Off-image reads of X follow edgeMode.
struct ConvolutionParams {
    ImageLayout source;       // X; channels = input channels (all groups)
    ImageLayout destination;  // Y; channels = output channels
    ImageLayout preactivation;  // where the value before the neuron goes when writePreactivation = 1;
                                // its width/height are clipWidth/clipHeight
    int32_t batch;            // images in this dispatch
    int32_t groups;
    int32_t kernelWidth;
    int32_t kernelHeight;
    int32_t strideX;
    int32_t strideY;
    int32_t dilationX;
    int32_t dilationY;
    int32_t windowLeftX;      // source x of the top-left tap for the first pixel of the clip rect
    int32_t windowTopY;       // (= offset - (dilatedKernelSize >> 1))
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t edgeMode;         // EdgeModeCode
    int32_t hasBias;
    int32_t writePreactivation;
    NeuronParams neuron;
};

// Data gradient: a stride-1 correlation of the zero-inserted incoming gradient
// with the 180-degree rotated, I/O-transposed weights.
//
// Z is E with strideX-1 (strideY-1) zeros between samples: Z[sY*j][sX*i] = E[j][i],
// zero elsewhere and outside [0, (H_E-1)*sY] x [0, (W_E-1)*sX].
// dX[n][clipY+y][clipX+x][c] = sum_{ty<kH, tx<kW, o in group(c)}
//     Z[n][windowTopY + y + dilationY*ty][windowLeftX + x + dilationX*tx][o]
//       * W[o][kH-1-ty][kW-1-tx][c - groupStart(c)]
struct ConvolutionDataGradientParams {
    ImageLayout gradient;     // E; channels = output channels; width/height = E's size
    ImageLayout destination;  // dX; channels = input channels
    int32_t batch;
    int32_t groups;
    int32_t kernelWidth;
    int32_t kernelHeight;
    int32_t strideX;
    int32_t strideY;
    int32_t dilationX;
    int32_t dilationY;
    int32_t windowLeftX;      // position in Z of the rotated window's top-left tap for the first
    int32_t windowTopY;       // clip pixel: primaryOffset*stride + kernelOffset - (dilatedKernelSize >> 1)
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t hasBias;          // 1: dX[..][c] += biases[c] (the forward pass of a transposed
                              // convolution, which is this op; 0 for a data gradient)
};

// Weight and bias gradients, summed over the batch and over all of E:
// dW[o][ky][kx][i] (+)= sum_{n,j,i'} E[n][j][i'][o] *
//     X[n][windowTopY + strideY*j + dilationY*ky][windowLeftX + strideX*i' + dilationX*kx][groupStart(o) + i]
// dB[o] (+)= sum_{n,j,i'} E[n][j][i'][o]
// With accumulate = 0 the results overwrite the buffers, with 1 they are added.
struct ConvolutionWeightGradientParams {
    ImageLayout gradient;     // E; channels = output channels
    ImageLayout source;       // X; channels = input channels
    int32_t batch;
    int32_t groups;
    int32_t kernelWidth;
    int32_t kernelHeight;
    int32_t strideX;
    int32_t strideY;
    int32_t dilationX;
    int32_t dilationY;
    int32_t windowLeftX;      // secondaryOffset: source position of the window's top-left tap for E(0,0)
    int32_t windowTopY;
    int32_t edgeMode;         // how off-image reads of X behave
    int32_t accumulate;
    int32_t computeWeights;   // 0 skips dW
    int32_t computeBiases;    // 0 skips dB
};

// The rotated, I/O-swapped copy of OHWI weights: the weights of the convolution whose data
// gradient is the transposed convolution's forward pass (kernels/convolution_transpose.cpp).
// source is OHWI with outChannels O and inChannels I (I/groups per row), destination is OHWI with
// O and I swapped: for group g, o = g*O/groups + o', i = g*I/groups + i',
// destination[i][kH-1-ky][kW-1-kx][o'] = source[o][ky][kx][i'].
// Applying it again with outChannels and inChannels swapped gives the source back.
struct ConvolutionTransposeWeightsParams {
    int32_t groups;
    int32_t kernelWidth;
    int32_t kernelHeight;
    int32_t outChannels;  // of the source weights (the first dimension)
    int32_t inChannels;   // of the source weights (all groups)
};

}  // namespace mpsgrad
