// CPU backend, internal: the convolution ops of fully connected shape (one output pixel per image,
// one group) as single matrix products over the batch (fully_connected.cpp). convolution.cpp
// calls these after validating the parameters; each returns false, doing nothing, when the
// shape is not one it handles.
#pragma once

#include "../../../../metal/convolution_params.h"

namespace mpsgrad::cpu::fc {

// True when the op has the fully connected shape the functions below handle: one group and one
// output pixel (forward) or one gradient pixel (gradients) per image.
inline bool handles(const ConvolutionParams& p) {
    return p.groups == 1 && p.clipWidth == 1 && p.clipHeight == 1 && p.batch >= 1;
}
inline bool handles(const ConvolutionDataGradientParams& p) {
    return p.groups == 1 && p.gradient.width == 1 && p.gradient.height == 1 && p.batch >= 1;
}
inline bool handles(const ConvolutionWeightGradientParams& p) {
    return p.groups == 1 && p.gradient.width == 1 && p.gradient.height == 1 && p.batch >= 1;
}

bool forward(const ConvolutionParams& p, const float* source, const float* weights, const float* biases,
             const float* neuronData, float* destination, float* preactivation);

bool dataGradient(const ConvolutionDataGradientParams& p, const float* gradient, const float* weights,
                  float* destination);

bool weightGradient(const ConvolutionWeightGradientParams& p, const float* gradient, const float* source,
                    float* weightGradient, float* biasGradient);

}  // namespace mpsgrad::cpu::fc
