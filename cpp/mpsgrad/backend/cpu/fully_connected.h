// CPU backend, internal: the convolution ops of fully connected shape (one output pixel per image,
// one group) as single matrix products over the batch (fully_connected.cpp). convolution.cpp
// calls these after validating the parameters; each returns false, doing nothing, when the
// shape is not one it handles.
#pragma once

#include "../../../../metal/convolution_params.h"

namespace mpsgrad::cpu::fc {

bool forward(const ConvolutionParams& p, const float* source, const float* weights, const float* biases,
             const float* neuronData, float* destination, float* preactivation);

bool dataGradient(const ConvolutionDataGradientParams& p, const float* gradient, const float* weights,
                  float* destination);

bool weightGradient(const ConvolutionWeightGradientParams& p, const float* gradient, const float* source,
                    float* weightGradient, float* biasGradient);

}  // namespace mpsgrad::cpu::fc
