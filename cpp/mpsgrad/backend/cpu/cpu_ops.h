// The CPU backend's compute functions: one per backend op, on raw float pointers.
//
// Each takes the op's params struct (shared with the .metal kernels, see metal/*_params.h)
// and the base pointers of the buffer bindings. They run synchronously on the calling
// thread (the command queue's worker) and split work with cpu::parallelFor.
#pragma once

#include "../../../../metal/convolution_params.h"
#include "../../../../metal/neuron_params.h"
#include "../../../../metal/arithmetic_params.h"
#include "../../../../metal/softmax_params.h"
#include "../../../../metal/batch_normalization_params.h"
#include "../../../../metal/pooling_params.h"
#include "../../../../metal/upsampling_params.h"
#include "../../../../metal/reshape_pad_params.h"
#include "../../../../metal/reduction_params.h"
#include "../../../../metal/dropout_params.h"
#include "../../../../metal/normalization_params.h"
#include "backend/backend.h"
#include "../../../../metal/optimizers_params.h"
#include "../../../../metal/loss_params.h"
#include "../../../../metal/convert_params.h"
#include "../../../../metal/yolo_loss_params.h"
#include "../../../../metal/sub_pixel_params.h"

namespace mpsgrad::cpu {

// Convolution family (metal/convolution_params.h).
// biases may be null when !hasBias; neuronData (PReLU per-channel a) may be null unless
// neuron.hasChannelData; preactivation may be null unless writePreactivation.
void convolutionForward(const ConvolutionParams& p, const float* source, const float* weights,
                        const float* biases, const float* neuronData, float* destination,
                        float* preactivation);
// biases may be null when !hasBias.
void convolutionDataGradient(const ConvolutionDataGradientParams& p, const float* gradient,
                             const float* weights, const float* biases, float* destination);
void convolutionTransposeWeights(const ConvolutionTransposeWeightsParams& p, const float* source,
                                 float* destination);
// weightGradient may be null unless computeWeights, biasGradient unless computeBiases.
void convolutionWeightGradient(const ConvolutionWeightGradientParams& p, const float* gradient,
                               const float* source, float* weightGradient, float* biasGradient);
// The three ops above with each image binding's storage format in `formats` (docs/float16.md):
// forward source / destination, data gradient gradient / destination, weight gradient gradient /
// source. Weights, biases, the preactivation and the weight and bias gradients stay float32.
void convolutionForward(const ConvolutionParams& p, const HalfBindings& formats, const void* source,
                        const float* weights, const float* biases, const float* neuronData, void* destination,
                        float* preactivation);
void convolutionDataGradient(const ConvolutionDataGradientParams& p, const HalfBindings& formats,
                             const void* gradient, const float* weights, const float* biases, void* destination);
void convolutionWeightGradient(const ConvolutionWeightGradientParams& p, const HalfBindings& formats,
                               const void* gradient, const void* source, float* weightGradient,
                               float* biasGradient);

// Neuron family (metal/neuron_params.h), named after MPSCNNNeuron: plain `neuronForward` is
// neuron_math.h's scalar function, which code in this namespace calls unqualified.
// neuronData (PReLU per-channel a) may be null unless neuron.hasChannelData.
void cnnNeuronForward(const NeuronForwardParams& p, const float* source, const float* neuronData,
                      float* destination);
void cnnNeuronGradient(const NeuronGradientParams& p, const float* gradient, const float* source,
                       const float* neuronData, float* destination);
// The same with FLOAT16 bindings where `formats` says so (uint16_t IEEE half elements; layouts count
// elements): rows go through float32 row buffers (half_streaming.h), the arithmetic is float32.
void cnnNeuronForward(const NeuronForwardParams& p, const HalfBindings& formats, const void* source,
                      const float* neuronData, void* destination);
void cnnNeuronGradient(const NeuronGradientParams& p, const HalfBindings& formats, const void* gradient,
                       const void* source, const float* neuronData, void* destination);
// Extension: PReLU's gradient with respect to its per-channel a (overwrites
// aGradient[neuronDataOffset + c] for c < destination.channels; destination itself is unused).
void cnnNeuronPReLUWeightGradient(const NeuronGradientParams& p, const float* gradient,
                                  const float* source, float* aGradient);

// Arithmetic family (metal/arithmetic_params.h). clampState may be null when stateMode is 0.
void arithmeticForward(const ArithmeticParams& p, const float* primary, const float* secondary,
                       float* destination, float* clampState);
void compareForward(const CompareParams& p, const float* primary, const float* secondary,
                    float* destination);
// primary / secondary (the forward operands) may be null where the formula does not read them
// (see ArithmeticGradientParams); clampState may be null when clampMode is 0.
void arithmeticGradient(const ArithmeticGradientParams& p, const float* gradient,
                        const float* primary, const float* secondary, const float* clampState,
                        float* destination);
// The same three with FLOAT16 image bindings where `formats` says so (primary = formats.source;
// uint16_t IEEE half elements, layouts count elements; the clamp state is float32): rows go
// through float32 row buffers (half_streaming.h), the arithmetic is float32.
void arithmeticForward(const ArithmeticParams& p, const HalfBindings& formats, const void* primary,
                       const void* secondary, void* destination, float* clampState);
void compareForward(const CompareParams& p, const HalfBindings& formats, const void* primary, const void* secondary,
                    void* destination);
void arithmeticGradient(const ArithmeticGradientParams& p, const HalfBindings& formats, const void* gradient,
                        const void* primary, const void* secondary, const float* clampState, void* destination);

// Softmax family (metal/softmax_params.h).
void softmaxForward(const SoftmaxParams& p, const float* source, float* destination);
void softmaxGradient(const SoftmaxGradientParams& p, const float* gradient, const float* output,
                     float* destination);

// ---- batch normalization family (metal/batch_normalization_params.h; batch_normalization.cpp)
// Per-channel vectors hold p.source.channels floats; beta may be null (zeros); neuronData may be
// null unless p.neuron.hasChannelData.
void batchNormalizationStatistics(const BatchNormalizationParams& p, const float* source, float* mean,
                                  float* variance);
void batchNormalizationForward(const BatchNormalizationParams& p, const float* source, const float* gamma,
                               const float* beta, const float* mean, const float* variance,
                               const float* neuronData, float* destination);
void batchNormalizationStatisticsGradient(const BatchNormalizationParams& p, const float* gradient,
                                          const float* source, const float* gamma, const float* beta,
                                          const float* mean, const float* variance, const float* neuronData,
                                          float* gammaGradient, float* betaGradient);
void batchNormalizationGradient(const BatchNormalizationParams& p, const float* gradient, const float* source,
                                const float* gamma, const float* beta, const float* mean, const float* variance,
                                const float* neuronData, const float* gammaGradient, const float* betaGradient,
                                float* destination);
// ---- end batch normalization family
// Instance and group normalization (metal/group_normalization_params.h; group_normalization.cpp).
// gamma, beta and the gradients hold p.source.channels floats, statistics 2 per (image, group).
void groupNormalizationForward(const GroupNormalizationParams& p, const float* source, const float* gamma,
                               const float* beta, float* statistics, float* destination);
void groupNormalizationGradient(const GroupNormalizationParams& p, const float* gradient, const float* source,
                                const float* gamma, const float* statistics, float* gammaGradient,
                                float* betaGradient, float* destination);
// Optimizers (metal/optimizers_params.h): state0/1/2 may be null where p's rule does not read them.
// Bindings are checked by bindings::checkOptimizerUpdate (backend/binding_checks.h).
void optimizerUpdate(const OptimizerParams& p, const float* gradient, const float* values, float* state0,
                     float* state1, float* state2, float* result);

// Losses (metal/loss_params.h); bindings are checked by bindings::checkLoss* (backend/binding_checks.h).
void lossElements(const LossElementsParams& p, const float* source, const float* labels, const float* weights,
                  float* destination, float* loss, float* partials);
void lossReduce(const LossReduceParams& p, const float* partials, float* results);
void lossScaleGradient(const LossScaleParams& p, const float* results, float* destination);
// YOLO loss (metal/yolo_loss_params.h; yolo_loss.cpp); bindings are checked by bindings::checkYolo*.
struct YoloPartFloats {
    float *xy, *wh, *confidence, *classes;
};
void yoloPrepare(const YoloPrepareParams& p, const float* source, const float* labels, const float* anchors,
                 const YoloPartFloats& predictions, const YoloPartFloats& partLabels, const YoloPartFloats& weights);
void yoloFinish(const YoloFinishParams& p, const float* source, const YoloPartFloats& gradients,
                const YoloPartFloats& losses, float* destination, float* loss);

// ---- pooling family (metal/pooling_params.h; pooling.cpp) ----------------------------------
// These ops take the buffer slices and check that every binding holds the images its layout
// describes (std::invalid_argument otherwise). source may be empty for an average-pooling gradient.
void poolingForward(const PoolingParams& p, const BufferSlice& source, const BufferSlice& destination);
void poolingGradient(const PoolingGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                     const BufferSlice& destination);

// ---- upsampling family (metal/upsampling_params.h; upsampling.cpp), buffer slices as pooling
void upsamplingForward(const UpsamplingParams& p, const BufferSlice& source, const BufferSlice& destination);
void upsamplingGradient(const UpsamplingGradientParams& p, const BufferSlice& gradient,
                        const BufferSlice& destination);

// ---- dropout family (metal/dropout_params.h; dropout.cpp): forward and gradient alike
void dropout(const DropoutParams& p, const BufferSlice& source, const BufferSlice& destination);
// The same with FLOAT16 source / destination where formats.source / formats.destination say so.
void dropout(const DropoutParams& p, const HalfBindings& formats, const BufferSlice& source,
             const BufferSlice& destination);

// ---- reshape and pad family (metal/reshape_pad_params.h; reshape_pad.cpp); bindings checked by
// bindings::checkReshapeCopy / checkPadForward / checkPadGradient
void reshapeCopy(const ReshapeParams& p, const BufferSlice& source, const BufferSlice& destination);
void padForward(const PadParams& p, const BufferSlice& source, const BufferSlice& destination, const BufferSlice& maps,
                const BufferSlice& fill);
void padGradient(const PadGradientParams& p, const BufferSlice& gradient, const BufferSlice& destination,
                 const BufferSlice& maps);
// ---- Gram matrix and spatial mean (metal/reduction_params.h; reduction.cpp); bindings checked by
// bindings::checkGramMatrix / checkGramMatrixGradient / checkSpatialMean / checkSpatialMeanGradient
void gramMatrix(const GramMatrixParams& p, const BufferSlice& source, const BufferSlice& destination);
void gramMatrixGradient(const GramMatrixGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                        const BufferSlice& destination);
void spatialMean(const SpatialMeanParams& p, const BufferSlice& source, const BufferSlice& destination);
void spatialMeanGradient(const SpatialMeanGradientParams& p, const BufferSlice& gradient,
                         const BufferSlice& destination);
// ---- cross-channel / spatial / local contrast normalization (metal/normalization_params.h;
// normalization.cpp). source = the forward input X for both ops.
void normalizationForward(const NormalizationParams& p, const float* source, float* destination);
void normalizationGradient(const NormalizationParams& p, const float* gradient, const float* source,
                           float* destination);

// Image storage formats (metal/convert_params.h): half or unorm <-> float of p.count elements.
void convertImageFormat(const ConvertFormatParams& p, const void* source, void* destination);
// Sub-pixel convolution (metal/sub_pixel_params.h; sub_pixel.cpp).
void subPixelShuffle(const SubPixelShuffleParams& p, const BufferSlice& low, const BufferSlice& high);
void subPixelUnshuffle(const SubPixelShuffleParams& p, const BufferSlice& high, const BufferSlice& low);

}  // namespace mpsgrad::cpu
