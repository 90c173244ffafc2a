// CPU backend, internal: the Winograd F(2x2, 3x3) path of the convolution forward (and so of the
// stride-1 data gradient, which convolution.cpp runs as a forward convolution).
#pragma once

#include "conv_epilogue.h"
#include "conv_operands.h"
#include "cpu_ops.h"

namespace mpsgrad::cpu::winograd {

// True when `p` is a 3x3, stride-1, undilated, single-group convolution with >= 16 input and
// output channels and at least max(32, Cin * Cout / 1024) output tiles (2x2 clip pixels counted
// over the batch), where the path beats the im2col product, and the path is not
// switched off by MPSGRAD_CONV_WINOGRAD=0 (read at each call, for A/B runs in one process).
bool eligible(const ConvolutionParams& p);

// The forward convolution of an eligible `p`, with the semantics of convolutionForward (whose
// argument checks it relies on) and its epilogue; source and destination in either format.
void forward(const ConvolutionParams& p, const conv::ConvSource& source, const float* weights,
             const Epilogue& epilogue, const conv::ConvDestination& destination, float* preactivation);

}  // namespace mpsgrad::cpu::winograd
