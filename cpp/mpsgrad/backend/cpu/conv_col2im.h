// CPU backend, internal: the convolution data gradient (and so the transposed convolution's
// forward pass) as "products, then scatter-add" (col2im), conv_col2im.cpp. convolution.cpp picks
// it for the layers it suits (see there) and calls it after validating the parameters.
#pragma once

#include "../../../../metal/convolution_params.h"

namespace mpsgrad::cpu::col2im {

// dX over the clip, plus biases[c] on every clip pixel when biases is non-null. Runs on up to
// `threads` threads of the backend's pool.
void dataGradient(const ConvolutionDataGradientParams& p, const float* gradient, const float* weights,
                  const float* biases, float* destination, int threads);

}  // namespace mpsgrad::cpu::col2im
