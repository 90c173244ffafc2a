// Backend-neutral validation of a backend op's bindings: every op of every backend calls the
// check of its op first, so a C++ caller that builds a params struct by hand gets a ValueError
// instead of an out-of-bounds read or write.
//
// What is checked, per op: every ImageLayout is consistent (non-negative sizes, the channel slice
// inside the pixel stride, images not overlapping), its extent over the dispatch's batch fits the
// bound BufferSlice after its offset, the clip rectangle lies inside the destination, and every
// flat array (weights, biases, PReLU data, gradient outputs) fits its buffer. All arithmetic is
// overflow-checked; every extent must also stay below 2**31 floats, the indexing range of the
// Metal shaders. The windowed ops (convolution forward, data and weight gradients, local
// normalization) also have every axis of their windows checked whole — first tap, last tap of the
// last window, stride and dilation spans — against +-2**29, so no coordinate the backends compute
// in 32-bit ints can wrap around.
#pragma once

#include <cstddef>

#include "backend/backend.h"

namespace mpsgrad::bindings {

void checkCopyBuffer(const BufferSlice& source, const BufferSlice& destination, size_t bytes);
// count >= 0, toHalf 0 or 1, source and destination hold count elements of their format (2 bytes for
// half, 4 for float) after their offsets, both offsets aligned to their element, and the two ranges
// do not overlap.
void checkConvertImageFormat(const ConvertFormatParams& p, const BufferSlice& source, const BufferSlice& destination);

void checkConvolutionForward(const ConvolutionParams& p, const BufferSlice& source, const BufferSlice& weights,
                             const BufferSlice& biases, const BufferSlice& neuronData,
                             const BufferSlice& destination, const BufferSlice& preactivation);
void checkConvolutionDataGradient(const ConvolutionDataGradientParams& p, const BufferSlice& gradient,
                                  const BufferSlice& weights, const BufferSlice& biases,
                                  const BufferSlice& destination);
void checkConvolutionWeightGradient(const ConvolutionWeightGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BufferSlice& weightGradient,
                                    const BufferSlice& biasGradient);
// The same with each image binding's storage format (native float16, Backend::readsHalfNatively;
// forward: source, destination; data gradient: gradient, destination; weight gradient: gradient,
// source): a FLOAT16 binding is sized in halves.
void checkConvolutionForwardHalf(const ConvolutionParams& p, const HalfBindings& formats, const BufferSlice& source,
                                 const BufferSlice& weights, const BufferSlice& biases,
                                 const BufferSlice& neuronData, const BufferSlice& destination,
                                 const BufferSlice& preactivation);
void checkConvolutionDataGradientHalf(const ConvolutionDataGradientParams& p, const HalfBindings& formats,
                                      const BufferSlice& gradient, const BufferSlice& weights,
                                      const BufferSlice& biases, const BufferSlice& destination);
void checkConvolutionWeightGradientHalf(const ConvolutionWeightGradientParams& p, const HalfBindings& formats,
                                        const BufferSlice& gradient, const BufferSlice& source,
                                        const BufferSlice& weightGradient, const BufferSlice& biasGradient);
void checkConvolutionTransposeWeights(const ConvolutionTransposeWeightsParams& p, const BufferSlice& source,
                                      const BufferSlice& destination);

// `formats` (native float16 bindings, Backend::readsHalfNatively) sizes each image binding in halves
// or floats.
void checkNeuronForward(const NeuronForwardParams& p, const BufferSlice& source, const BufferSlice& neuronData,
                        const BufferSlice& destination, const HalfBindings& formats = {});
void checkNeuronGradient(const NeuronGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                         const BufferSlice& neuronData, const BufferSlice& destination,
                         const HalfBindings& formats = {});
void checkNeuronPReLUWeightGradient(const NeuronGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BufferSlice& aGradient);

// `formats` as for the neuron checks (primary = formats.source); the clamp state is float32.
void checkArithmeticForward(const ArithmeticParams& p, const BufferSlice& primary, const BufferSlice& secondary,
                            const BufferSlice& destination, const BufferSlice& clampState,
                            const HalfBindings& formats = {});
void checkCompareForward(const CompareParams& p, const BufferSlice& primary, const BufferSlice& secondary,
                         const BufferSlice& destination, const HalfBindings& formats = {});
void checkArithmeticGradient(const ArithmeticGradientParams& p, const BufferSlice& gradient,
                             const BufferSlice& primary, const BufferSlice& secondary,
                             const BufferSlice& clampState, const BufferSlice& destination,
                             const HalfBindings& formats = {});

void checkSoftmaxForward(const SoftmaxParams& p, const BufferSlice& source, const BufferSlice& destination);
void checkSoftmaxGradient(const SoftmaxGradientParams& p, const BufferSlice& gradient, const BufferSlice& output,
                          const BufferSlice& destination);

// The batch normalization family: whole images of p.source's size and channels; per-channel
// vectors of p.source.channels floats (beta may be missing: zeros).
void checkBatchNormalizationStatistics(const BatchNormalizationParams& p, const BufferSlice& source,
                                       const Backend::BatchNormalizationVectors& v);
void checkBatchNormalizationForward(const BatchNormalizationParams& p, const BufferSlice& source,
                                    const Backend::BatchNormalizationVectors& v, const BufferSlice& destination);
void checkBatchNormalizationStatisticsGradient(const BatchNormalizationParams& p, const BufferSlice& gradient,
                                               const BufferSlice& source,
                                               const Backend::BatchNormalizationVectors& v);
void checkBatchNormalizationGradient(const BatchNormalizationParams& p, const BufferSlice& gradient,
                                     const BufferSlice& source, const Backend::BatchNormalizationVectors& v,
                                     const BufferSlice& destination);
// Instance and group normalization: groups >= 1 divides the channels; images of the source's size
// and channels; gamma / beta / gradients C floats, statistics 2 per (image, group).
void checkGroupNormalizationForward(const GroupNormalizationParams& p, const BufferSlice& source,
                                    const Backend::GroupNormalizationVectors& v, const BufferSlice& destination);
void checkGroupNormalizationGradient(const GroupNormalizationParams& p, const BufferSlice& gradient,
                                     const BufferSlice& source, const Backend::GroupNormalizationVectors& v,
                                     const BufferSlice& destination);
// Cross-channel / spatial / local contrast normalization: source and destination hold the batch
// (channels equal), the clip lies inside the destination, and for the gradient the gradient image
// holds the batch and the gradientWidth x gradientHeight windows from (gradientX, gradientY).
void checkNormalizationForward(const NormalizationParams& p, const BufferSlice& source,
                               const BufferSlice& destination);
void checkNormalizationGradient(const NormalizationParams& p, const BufferSlice& gradient, const BufferSlice& source,
                                const BufferSlice& destination);

// Pooling: the window geometry (every axis whole, zero pads, at most 2**31 - 1 taps per window).
// The backends check the bindings themselves (cpu/pooling.cpp, metal/metal_pooling.cpp).
void checkPoolingForward(const PoolingParams& p);
void checkPoolingGradient(const PoolingGradientParams& p);

// Optimizers: gradient, values and result hold p.count floats, and so does every state vector
// p's rule reads (state0 unless plain SGD without momentum, state1 for Adam, state2 for AMSGrad).
void checkOptimizerUpdate(const OptimizerParams& p, const BufferSlice& gradient, const BufferSlice& values,
                          const BufferSlice& state0, const BufferSlice& state1, const BufferSlice& state2,
                          const BufferSlice& result);

// Losses: every image binding the op reads or writes holds its batch, labels / weights / loss
// have the source's size, and partials / results hold 2 floats per slot written.
void checkLossElements(const LossElementsParams& p, const BufferSlice& source, const BufferSlice& labels,
                       const BufferSlice& weights, const BufferSlice& destination, const BufferSlice& loss,
                       const BufferSlice& partials);
void checkLossReduce(const LossReduceParams& p, const BufferSlice& partials, const BufferSlice& results);
void checkLossScaleGradient(const LossScaleParams& p, const BufferSlice& results, const BufferSlice& destination);
// YOLO loss: the part images are (W * A) x H with 2, 2, 1 and K channels for a source of
// W x H x A * (5 + K); every image binding holds one image of its layout.
void checkYoloPrepare(const YoloPrepareParams& p, const BufferSlice& source, const BufferSlice& labels,
                      const BufferSlice& anchors, const Backend::YoloParts& predictions,
                      const Backend::YoloParts& partLabels, const Backend::YoloParts& weights);
void checkYoloFinish(const YoloFinishParams& p, const BufferSlice& source, const Backend::YoloParts& gradients,
                     const Backend::YoloParts& losses, const BufferSlice& destination, const BufferSlice& loss);

void checkReshapeCopy(const ReshapeParams& p, const BufferSlice& source, const BufferSlice& destination);
void checkPadForward(const PadParams& p, const BufferSlice& source, const BufferSlice& destination,
                     const BufferSlice& maps, const BufferSlice& fill);
void checkPadGradient(const PadGradientParams& p, const BufferSlice& gradient, const BufferSlice& destination,
                      const BufferSlice& maps);

// Gram matrix: the destination is channels x 1 pixels of `channels` channels; X, Gr and dX agree.
void checkGramMatrix(const GramMatrixParams& p, const BufferSlice& source, const BufferSlice& destination);
void checkGramMatrixGradient(const GramMatrixGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                             const BufferSlice& destination);
// Spatial mean: a non-empty region inside the source (dX), the pixel written / read inside its image.
void checkSpatialMean(const SpatialMeanParams& p, const BufferSlice& source, const BufferSlice& destination);
void checkSpatialMeanGradient(const SpatialMeanGradientParams& p, const BufferSlice& gradient,
                              const BufferSlice& destination);

// Sub-pixel convolution: the same checks for both directions.
void checkSubPixelShuffle(const SubPixelShuffleParams& p, const BufferSlice& low, const BufferSlice& high);

}  // namespace mpsgrad::bindings
