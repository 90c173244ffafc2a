// Params of the optimizer update op (MPSNNOptimizerStochasticGradientDescent, MPSNNOptimizerRMSProp,
// MPSNNOptimizerAdam), shared by C++ and Metal. Spec §2.13; the per-element formulas are in
// optimizer_math.h, used unchanged by the CPU backend and metal/optimizers.metal.
//
// One update touches `count` elements: element i reads the gradient g[i] and the value w[i],
// reads and writes the optimizer's state vectors (state0/1/2, see below) in place, and writes
// the updated value to result[i]. result may alias values (in-place update): each element is
// read before it is written, by the same thread.
#pragma once

#include "common_params.h"

namespace mpsgrad {

enum OptimizerKindCode : int32_t {
    kOptimizerSGD = 0,      // state0 = momentum (when hasState0)
    kOptimizerRMSProp = 1,  // state0 = sum of squares
    kOptimizerAdam = 2,     // state0 = momentum m, state1 = velocity v, state2 = maximum velocity (amsgrad)
};

// MPSNNRegularizationType values.
enum RegularizationCode : int32_t {
    kRegularizationNone = 0,
    kRegularizationL1 = 1,
    kRegularizationL2 = 2,
};

struct OptimizerParams {
    int32_t count;                   // elements updated
    int32_t kind;                    // OptimizerKindCode
    float learningRate;              // SGD, RMSProp: lr. Adam: the bias-corrected lr_t (host computes it)
    float gradientRescale;
    int32_t applyGradientClipping;   // 0 or 1
    float gradientClipMax;
    float gradientClipMin;
    int32_t regularizationType;      // RegularizationCode
    float regularizationScale;
    int32_t hasState0;               // SGD: a momentum vector was given (else w -= lr * g)
    int32_t useNesterov;             // SGD
    float momentumScale;             // SGD: mu
    float decay;                     // RMSProp
    float beta1;                     // Adam
    float beta2;                     // Adam
    int32_t amsgrad;                 // Adam: state2 holds the maximum velocity
    float epsilon;                   // RMSProp, Adam
};

}  // namespace mpsgrad
