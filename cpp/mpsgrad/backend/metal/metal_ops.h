// Internal to the Metal backend: the op encoders, one file per family (metal_convolution.cpp,
// metal_neuron.cpp, metal_utility.cpp). Each checks its arguments (ValueError naming the op and
// the binding), picks the kernel variant, and encodes one or two dispatches into `cb`.
#pragma once

#include "backend/backend.h"
#include "backend/metal/metal_context.h"
#include "metal/arithmetic_params.h"
#include "metal/batch_normalization_params.h"
#include "metal/convolution_params.h"
#include "metal/neuron_params.h"
#include "metal/softmax_params.h"
#include "metal/optimizers_params.h"
#include "metal/loss_params.h"
#include "metal/utility_params.h"
#include "metal/sub_pixel_params.h"
#include "metal/pooling_params.h"
#include "metal/normalization_params.h"
#include "metal/upsampling_params.h"
#include "metal/reshape_pad_params.h"
#include "metal/reduction_params.h"
#include "metal/dropout_params.h"

namespace mpsgrad {
class CommandBuffer;
}

namespace mpsgrad::metal_backend {

// Function-constant indices; each .metal file declares the ones its kernels read.
enum FunctionConstantIndex : unsigned {
    kConstantNeuronType = 0,
    kConstantAlignedInput = 1,          // convolution: the image patches are gathered from
    kConstantAlignedSource = 1,         // neuron, utility
    kConstantAlignedWeights = 2,        // convolution
    kConstantAlignedGradient = 2,       // neuron
    kConstantAlignedOutput = 3,         // convolution
    kConstantAlignedDestination = 3,    // neuron, utility
    kConstantAlignedPreactivation = 4,  // convolution forward
    kConstantAlignedConvGradient = 5,   // convolution weight and bias gradients: E
};

// ---- convolution family (metal/convolution.metal)
void encodeConvolutionForward(MetalContext& ctx, CommandBuffer& cb, ConvolutionParams p, const BufferSlice& source,
                              const BufferSlice& weights, const BufferSlice& biases, const BufferSlice& neuronData,
                              const BufferSlice& destination, const BufferSlice& preactivation);
void encodeConvolutionDataGradient(MetalContext& ctx, CommandBuffer& cb, ConvolutionDataGradientParams p,
                                   const BufferSlice& gradient, const BufferSlice& weights,
                                   const BufferSlice& biases, const BufferSlice& destination);
void encodeConvolutionTransposeWeights(MetalContext& ctx, CommandBuffer& cb, const ConvolutionTransposeWeightsParams& p,
                                       const BufferSlice& source, const BufferSlice& destination);
void encodeConvolutionWeightGradient(MetalContext& ctx, CommandBuffer& cb, ConvolutionWeightGradientParams p,
                                     const BufferSlice& gradient, const BufferSlice& source,
                                     const BufferSlice& weightGradient, const BufferSlice& biasGradient);

// ---- neuron family (metal/neuron.metal)
void encodeNeuronForward(MetalContext& ctx, CommandBuffer& cb, NeuronForwardParams p, const BufferSlice& source,
                         const BufferSlice& neuronData, const BufferSlice& destination);
void encodeNeuronGradient(MetalContext& ctx, CommandBuffer& cb, NeuronGradientParams p, const BufferSlice& gradient,
                          const BufferSlice& source, const BufferSlice& neuronData, const BufferSlice& destination);
// PReLU's a-gradient extension (metal/neuron_prelu.metal; metal_neuron_prelu.cpp)
void encodeNeuronPReLUWeightGradient(MetalContext& ctx, CommandBuffer& cb, NeuronGradientParams p,
                                     const BufferSlice& gradient, const BufferSlice& source,
                                     const BufferSlice& aGradient);

// ---- arithmetic family (metal/arithmetic.metal; metal_arithmetic.cpp)
void encodeArithmeticForward(MetalContext& ctx, CommandBuffer& cb, ArithmeticParams p, const BufferSlice& primary,
                             const BufferSlice& secondary, const BufferSlice& destination,
                             const BufferSlice& clampState);
void encodeCompareForward(MetalContext& ctx, CommandBuffer& cb, CompareParams p, const BufferSlice& primary,
                          const BufferSlice& secondary, const BufferSlice& destination);
void encodeArithmeticGradient(MetalContext& ctx, CommandBuffer& cb, ArithmeticGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& primary, const BufferSlice& secondary,
                              const BufferSlice& clampState, const BufferSlice& destination);

// ---- softmax family (metal/softmax.metal; metal_softmax.cpp)
void encodeSoftmaxForward(MetalContext& ctx, CommandBuffer& cb, SoftmaxParams p, const BufferSlice& source,
                          const BufferSlice& destination);
void encodeSoftmaxGradient(MetalContext& ctx, CommandBuffer& cb, SoftmaxGradientParams p, const BufferSlice& gradient,
                           const BufferSlice& output, const BufferSlice& destination);

// ---- optimizers (metal/optimizers.metal; metal_optimizers.cpp)
void encodeOptimizerUpdate(MetalContext& ctx, CommandBuffer& cb, const OptimizerParams& p, const BufferSlice& gradient,
                           const BufferSlice& values, const BufferSlice& state0, const BufferSlice& state1,
                           const BufferSlice& state2, const BufferSlice& result);

// ---- losses (metal/loss.metal; metal_loss.cpp)
void encodeLossElements(MetalContext& ctx, CommandBuffer& cb, LossElementsParams p, const BufferSlice& source,
                        const BufferSlice& labels, const BufferSlice& weights, const BufferSlice& destination,
                        const BufferSlice& loss, const BufferSlice& partials);
void encodeLossReduce(MetalContext& ctx, CommandBuffer& cb, const LossReduceParams& p, const BufferSlice& partials,
                      const BufferSlice& results);
void encodeLossScaleGradient(MetalContext& ctx, CommandBuffer& cb, LossScaleParams p, const BufferSlice& results,
                             const BufferSlice& destination);
// ---- YOLO loss (metal/yolo_loss.metal; metal_yolo_loss.cpp)
void encodeYoloPrepare(MetalContext& ctx, CommandBuffer& cb, YoloPrepareParams p, const BufferSlice& source,
                       const BufferSlice& labels, const BufferSlice& anchors, const Backend::YoloParts& predictions,
                       const Backend::YoloParts& partLabels, const Backend::YoloParts& weights);
void encodeYoloFinish(MetalContext& ctx, CommandBuffer& cb, YoloFinishParams p, const BufferSlice& source,
                      const Backend::YoloParts& gradients, const Backend::YoloParts& losses,
                      const BufferSlice& destination, const BufferSlice& loss);

// ---- utility (metal/utility.metal and blits)
// Blit copy of `bytes` bytes (multiples of 4, as macOS blits require); overlapping ranges of one
// buffer are copied through a temporary buffer, so the result is that of memmove.
void encodeCopyBuffer(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& source,
                      const BufferSlice& destination, size_t bytes);
void encodeFill(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& destination, size_t count, float value);
void encodeCopyFloats(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& source,
                      const BufferSlice& destination, size_t count);
void encodeCopyChannels(MetalContext& ctx, CommandBuffer& cb, ChannelCopyParams p, const BufferSlice& source,
                        const BufferSlice& destination);

// ---- batch normalization family (metal/batch_normalization.metal; metal_batch_normalization.cpp)
void encodeBatchNormalizationStatistics(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                        const BufferSlice& source, const Backend::BatchNormalizationVectors& v);
void encodeBatchNormalizationForward(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                     const BufferSlice& source, const Backend::BatchNormalizationVectors& v,
                                     const BufferSlice& destination);
void encodeBatchNormalizationStatisticsGradient(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                                const BufferSlice& gradient, const BufferSlice& source,
                                                const Backend::BatchNormalizationVectors& v);
void encodeBatchNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, BatchNormalizationParams p,
                                      const BufferSlice& gradient, const BufferSlice& source,
                                      const Backend::BatchNormalizationVectors& v, const BufferSlice& destination);
// Instance and group normalization (metal_group_normalization.cpp).
void encodeGroupNormalizationForward(MetalContext& ctx, CommandBuffer& cb, GroupNormalizationParams p,
                                     const BufferSlice& source, const Backend::GroupNormalizationVectors& v,
                                     const BufferSlice& destination);
void encodeGroupNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, GroupNormalizationParams p,
                                      const BufferSlice& gradient, const BufferSlice& source,
                                      const Backend::GroupNormalizationVectors& v, const BufferSlice& destination);
// ---- end batch normalization family
// ---- pooling family (metal/pooling.metal; metal_pooling.cpp)
void encodePoolingForward(MetalContext& ctx, CommandBuffer& cb, PoolingParams p, const BufferSlice& source,
                          const BufferSlice& destination);
void encodePoolingGradient(MetalContext& ctx, CommandBuffer& cb, PoolingGradientParams p, const BufferSlice& gradient,
                           const BufferSlice& source, const BufferSlice& destination);

// ---- cross-channel / spatial / local contrast normalization (metal/normalization.metal;
// metal_normalization.cpp)
void encodeNormalizationForward(MetalContext& ctx, CommandBuffer& cb, NormalizationParams p,
                                const BufferSlice& source, const BufferSlice& destination);
void encodeNormalizationGradient(MetalContext& ctx, CommandBuffer& cb, NormalizationParams p,
                                 const BufferSlice& gradient, const BufferSlice& source,
                                 const BufferSlice& destination);

// ---- upsampling family (metal/upsampling.metal; metal_upsampling.cpp)
void encodeUpsamplingForward(MetalContext& ctx, CommandBuffer& cb, UpsamplingParams p, const BufferSlice& source,
                             const BufferSlice& destination);
void encodeUpsamplingGradient(MetalContext& ctx, CommandBuffer& cb, UpsamplingGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& destination);

// ---- dropout family (metal/dropout.metal; metal_dropout.cpp)
void encodeDropout(MetalContext& ctx, CommandBuffer& cb, DropoutParams p, const BufferSlice& source,
                   const BufferSlice& destination);

// ---- sub-pixel convolution (metal/sub_pixel.metal; metal_sub_pixel.cpp)
void encodeSubPixelShuffle(MetalContext& ctx, CommandBuffer& cb, SubPixelShuffleParams p, const BufferSlice& low,
                           const BufferSlice& high);
void encodeSubPixelUnshuffle(MetalContext& ctx, CommandBuffer& cb, SubPixelShuffleParams p, const BufferSlice& high,
                             const BufferSlice& low);

// ---- reshape and pad family (metal/reshape_pad.metal; metal_reshape_pad.cpp)
void encodeReshapeCopy(MetalContext& ctx, CommandBuffer& cb, ReshapeParams p, const BufferSlice& source,
                       const BufferSlice& destination);
void encodePadForward(MetalContext& ctx, CommandBuffer& cb, PadParams p, const BufferSlice& source,
                      const BufferSlice& destination, const BufferSlice& maps, const BufferSlice& fill);
void encodePadGradient(MetalContext& ctx, CommandBuffer& cb, PadGradientParams p, const BufferSlice& gradient,
                       const BufferSlice& destination, const BufferSlice& maps);

// ---- Gram matrix and spatial mean (metal/reduction.metal; metal_reduction.cpp)
void encodeGramMatrix(MetalContext& ctx, CommandBuffer& cb, GramMatrixParams p, const BufferSlice& source,
                      const BufferSlice& destination);
void encodeGramMatrixGradient(MetalContext& ctx, CommandBuffer& cb, GramMatrixGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& source, const BufferSlice& destination);
void encodeSpatialMean(MetalContext& ctx, CommandBuffer& cb, SpatialMeanParams p, const BufferSlice& source,
                       const BufferSlice& destination);
void encodeSpatialMeanGradient(MetalContext& ctx, CommandBuffer& cb, SpatialMeanGradientParams p,
                               const BufferSlice& gradient, const BufferSlice& destination);

// ---- image storage formats (metal/convert.metal)
void encodeConvertImageFormat(MetalContext& ctx, CommandBuffer& cb, const ConvertFormatParams& p,
                              const BufferSlice& source, const BufferSlice& destination);

}  // namespace mpsgrad::metal_backend
