// The compute interface between the kernel classes and a device backend.
//
// A backend op knows nothing of MPS objects: it receives a params struct with fully
// resolved geometry (metal/*_params.h, shared with the .metal kernels), buffer slices,
// and the command buffer to encode into. Nothing runs until the command buffer commits.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "metal/arithmetic_params.h"
#include "metal/batch_normalization_params.h"
#include "metal/group_normalization_params.h"  // instance and group normalization
#include "metal/convolution_params.h"
#include "metal/neuron_params.h"
#include "metal/softmax_params.h"
#include "metal/pooling_params.h"
#include "metal/normalization_params.h"
#include "metal/upsampling_params.h"
#include "metal/dropout_params.h"
#include "metal/loss_params.h"        // losses (issue 14)
#include "metal/yolo_loss_params.h"   // YOLO loss (issue 14)
#include "metal/optimizers_params.h"  // optimizers (issue 14)
#include "metal/reshape_pad_params.h"  // reshape and pad (issue 13)
#include "metal/reduction_params.h"    // Gram matrix and spatial mean (issue 13)
#include "metal/convert_params.h"      // float16 and unorm image storage (docs/float16.md)
#include "metal/sub_pixel_params.h"    // sub-pixel convolution (issue 13)

namespace mpsgrad {

class CommandBuffer;

// Device memory visible to the host (aligned host memory on the CPU, a shared-storage
// MTLBuffer on Metal). Zero-filled at allocation unless asked otherwise (BufferFill).
class Buffer {
public:
    virtual ~Buffer() = default;
    virtual void* contents() = 0;
    virtual size_t length() const = 0;
};

// What a new buffer holds. Unspecified skips the zero fill, for storage that the next op
// overwrites completely (a kernel's destination images): the fill is a whole extra pass over
// memory, as costly as the element-wise op that follows. With MPSGRAD_POISON_UNSPECIFIED_BUFFERS=1
// such buffers are filled with 0xFF bytes (float NaN) instead, so that a test run shows any
// float an op was trusted to write but did not.
enum class BufferFill { Zero, Unspecified };

// True when MPSGRAD_POISON_UNSPECIFIED_BUFFERS is set to 1 (read once).
bool poisonUnspecifiedBuffers();
// What a backend does with the `bytes` bytes at `p` of a new Unspecified buffer: nothing, or
// the poison fill when poisonUnspecifiedBuffers().
void prepareUnspecifiedBuffer(void* p, size_t bytes);

// A byte offset into a buffer: what a backend op binds.
struct BufferSlice {
    std::shared_ptr<Buffer> buffer;
    size_t offset = 0;

    explicit operator bool() const { return buffer != nullptr; }
    float* floats() const {
        return buffer ? reinterpret_cast<float*>(static_cast<char*>(buffer->contents()) + offset) : nullptr;
    }
    BufferSlice advancedBy(size_t bytes) const { return BufferSlice{buffer, offset + bytes}; }
};

// The backend side of one command buffer.
class BackendCommandBuffer {
public:
    virtual ~BackendCommandBuffer() = default;
    // Starts executing everything encoded, in order. `done` is called exactly once when the
    // work has finished, with an empty string on success or the error's description.
    virtual void commit(std::function<void(const std::string& error)> done) = 0;
    // Blocks until `done` has been called (backends that run work lazily run it here).
    virtual void wait() = 0;
    // A host point (CommandBuffer::encodeHostCallback): `fn` runs on a host thread after all the
    // work encoded before it has completed and before any work encoded after it starts. When `fn`
    // throws, the command buffer fails with the exception's message (`done` gets it).
    virtual void encodeHostCallback(std::function<void()> fn) = 0;
};

// The backend side of a command queue: buffers from one queue execute in commit order.
class BackendQueue {
public:
    virtual ~BackendQueue() = default;
    virtual std::unique_ptr<BackendCommandBuffer> newCommandBuffer() = 0;
};

// Families whose backend ops may take FLOAT16 bindings natively (Backend::readsHalfNatively).
enum class HalfOp { Neuron, Arithmetic, Dropout, Convolution };

// Which image bindings of an op hold IEEE half (FLOAT16) rather than float32 elements.
struct HalfBindings {
    bool source = false;       // the forward input X (or the gradient op's secondary); arithmetic: the primary
    bool secondary = false;    // arithmetic: the secondary operand
    bool gradient = false;     // the incoming gradient G (gradient ops)
    bool destination = false;  // the written image
    bool any() const { return source || secondary || gradient || destination; }
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string name() const = 0;
    // Host-visible memory of `bytes` bytes, zero-filled unless `fill` is Unspecified.
    virtual std::shared_ptr<Buffer> newBuffer(size_t bytes, BufferFill fill = BufferFill::Zero) = 0;
    virtual std::shared_ptr<BackendQueue> newQueue() = 0;

    // ---- utility ops -----------------------------------------------------------------
    // Copies `bytes` bytes from source to destination when the command buffer runs.
    virtual void copyBuffer(CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                            size_t bytes) = 0;

    // ---- convolution family (metal/convolution_params.h) -----------------------------
    virtual void convolutionForward(CommandBuffer& cb, const ConvolutionParams& p, const BufferSlice& source,
                                    const BufferSlice& weights, const BufferSlice& biases,
                                    const BufferSlice& neuronData, const BufferSlice& destination,
                                    const BufferSlice& preactivation) = 0;
    // biases (p.destination.channels floats) is read only when p.hasBias.
    virtual void convolutionDataGradient(CommandBuffer& cb, const ConvolutionDataGradientParams& p,
                                         const BufferSlice& gradient, const BufferSlice& weights,
                                         const BufferSlice& biases, const BufferSlice& destination) = 0;
    virtual void convolutionWeightGradient(CommandBuffer& cb, const ConvolutionWeightGradientParams& p,
                                           const BufferSlice& gradient, const BufferSlice& source,
                                           const BufferSlice& weightGradient, const BufferSlice& biasGradient) = 0;
    // Native float16 (readsHalfNatively(HalfOp::Convolution)): the three ops above with each image
    // binding's storage format in `formats` (forward: source, destination; data gradient:
    // gradient, destination; weight gradient: gradient, source). Weights, biases, the
    // preactivation and the weight and bias gradients stay float32.
    virtual void convolutionForwardHalf(CommandBuffer&, const ConvolutionParams&, const HalfBindings&,
                                        const BufferSlice&, const BufferSlice&, const BufferSlice&,
                                        const BufferSlice&, const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("convolutionForwardHalf: this backend does not read FLOAT16 natively");
    }
    virtual void convolutionDataGradientHalf(CommandBuffer&, const ConvolutionDataGradientParams&,
                                             const HalfBindings&, const BufferSlice&, const BufferSlice&,
                                             const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("convolutionDataGradientHalf: this backend does not read FLOAT16 natively");
    }
    virtual void convolutionWeightGradientHalf(CommandBuffer&, const ConvolutionWeightGradientParams&,
                                               const HalfBindings&, const BufferSlice&, const BufferSlice&,
                                               const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("convolutionWeightGradientHalf: this backend does not read FLOAT16 natively");
    }
    // Transposed convolution: the rotated, I/O-swapped weights (destination must not alias source).
    virtual void convolutionTransposeWeights(CommandBuffer& cb, const ConvolutionTransposeWeightsParams& p,
                                             const BufferSlice& source, const BufferSlice& destination) = 0;

    // ---- neuron family (metal/neuron_params.h) ----------------------------------------
    virtual void neuronForward(CommandBuffer& cb, const NeuronForwardParams& p, const BufferSlice& source,
                               const BufferSlice& neuronData, const BufferSlice& destination) = 0;
    virtual void neuronGradient(CommandBuffer& cb, const NeuronGradientParams& p, const BufferSlice& gradient,
                                const BufferSlice& source, const BufferSlice& neuronData,
                                const BufferSlice& destination) = 0;
    // Extension: PReLU's gradient with respect to its per-channel a over the geometry of p
    // (p.destination is unused): overwrites aGradient[p.neuronDataOffset + c], c < p.destination.channels,
    // with sum over every pixel of G * (X < 0 ? X : 0), summed in a fixed order.
    virtual void neuronPReLUWeightGradient(CommandBuffer& cb, const NeuronGradientParams& p,
                                           const BufferSlice& gradient, const BufferSlice& source,
                                           const BufferSlice& aGradient) = 0;
    // Native float16 storage (docs/float16.md): a backend whose readsHalfNatively(HalfOp::Neuron) is
    // true takes FLOAT16 bindings directly in the two ops below, which are neuronForward /
    // neuronGradient with each binding's storage format in `formats` (layouts count elements);
    // the kernels then skip their float32 shadows. By default they are never called.
    virtual bool readsHalfNatively(HalfOp) const { return false; }
    virtual void neuronForwardHalf(CommandBuffer&, const NeuronForwardParams&, const HalfBindings&,
                                   const BufferSlice&, const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("neuronForwardHalf: this backend does not read FLOAT16 natively");
    }
    virtual void neuronGradientHalf(CommandBuffer&, const NeuronGradientParams&, const HalfBindings&,
                                    const BufferSlice&, const BufferSlice&, const BufferSlice&,
                                    const BufferSlice&) {
        throw std::logic_error("neuronGradientHalf: this backend does not read FLOAT16 natively");
    }

    // ---- arithmetic family (metal/arithmetic_params.h) ---------------------------------
    // clampState may be empty when p.stateMode is kArithmeticClampNone.
    virtual void arithmeticForward(CommandBuffer& cb, const ArithmeticParams& p, const BufferSlice& primary,
                                   const BufferSlice& secondary, const BufferSlice& destination,
                                   const BufferSlice& clampState) = 0;
    virtual void compareForward(CommandBuffer& cb, const CompareParams& p, const BufferSlice& primary,
                                const BufferSlice& secondary, const BufferSlice& destination) = 0;
    // primary / secondary (the forward operands) may be empty where the formula does not read
    // them (see ArithmeticGradientParams); clampState may be empty when p.clampMode is 0.
    virtual void arithmeticGradient(CommandBuffer& cb, const ArithmeticGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& primary, const BufferSlice& secondary,
                                    const BufferSlice& clampState, const BufferSlice& destination) = 0;

    // Native float16 (readsHalfNatively(HalfOp::Arithmetic)): the three ops above with each image
    // binding's storage format in `formats` (primary = formats.source); clampState stays float32.
    virtual void arithmeticForwardHalf(CommandBuffer&, const ArithmeticParams&, const HalfBindings&, const BufferSlice&,
                                       const BufferSlice&, const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("arithmeticForwardHalf: this backend does not read FLOAT16 natively");
    }
    virtual void compareForwardHalf(CommandBuffer&, const CompareParams&, const HalfBindings&, const BufferSlice&,
                                    const BufferSlice&, const BufferSlice&) {
        throw std::logic_error("compareForwardHalf: this backend does not read FLOAT16 natively");
    }
    virtual void arithmeticGradientHalf(CommandBuffer&, const ArithmeticGradientParams&, const HalfBindings&,
                                        const BufferSlice&, const BufferSlice&, const BufferSlice&, const BufferSlice&,
                                        const BufferSlice&) {
        throw std::logic_error("arithmeticGradientHalf: this backend does not read FLOAT16 natively");
    }

    // ---- softmax family (metal/softmax_params.h) ---------------------------------------
    virtual void softmaxForward(CommandBuffer& cb, const SoftmaxParams& p, const BufferSlice& source,
                                const BufferSlice& destination) = 0;
    // output = the forward result Y.
    virtual void softmaxGradient(CommandBuffer& cb, const SoftmaxGradientParams& p, const BufferSlice& gradient,
                                 const BufferSlice& output, const BufferSlice& destination) = 0;
    // ---- batch normalization family (metal/batch_normalization_params.h) ---------------------
    // The per-channel vectors of one op, C = p.source.channels floats each. Ops read or write only
    // the ones their formula names; neuronData (PReLU's a) may be empty unless p.neuron.hasChannelData.
    struct BatchNormalizationVectors {
        BufferSlice gamma, beta, mean, variance, neuronData, gammaGradient, betaGradient;
    };
    // Merges the statistics of source into v.mean / v.variance.
    virtual void batchNormalizationStatistics(CommandBuffer& cb, const BatchNormalizationParams& p,
                                              const BufferSlice& source, const BatchNormalizationVectors& v) = 0;
    virtual void batchNormalizationForward(CommandBuffer& cb, const BatchNormalizationParams& p,
                                           const BufferSlice& source, const BatchNormalizationVectors& v,
                                           const BufferSlice& destination) = 0;
    // Writes (or adds to) v.gammaGradient / v.betaGradient.
    virtual void batchNormalizationStatisticsGradient(CommandBuffer& cb, const BatchNormalizationParams& p,
                                                      const BufferSlice& gradient, const BufferSlice& source,
                                                      const BatchNormalizationVectors& v) = 0;
    virtual void batchNormalizationGradient(CommandBuffer& cb, const BatchNormalizationParams& p,
                                            const BufferSlice& gradient, const BufferSlice& source,
                                            const BatchNormalizationVectors& v, const BufferSlice& destination) = 0;
    // ---- end batch normalization family --------------------------------------------------------

    // ---- instance and group normalization (metal/group_normalization_params.h) -----------------
    // gamma, beta, gammaGradient, betaGradient: C floats; statistics: 2 floats per (image, group).
    struct GroupNormalizationVectors {
        BufferSlice gamma, beta, statistics, gammaGradient, betaGradient;
    };
    // Writes destination and v.statistics (reads gamma, beta).
    virtual void groupNormalizationForward(CommandBuffer& cb, const GroupNormalizationParams& p,
                                           const BufferSlice& source, const GroupNormalizationVectors& v,
                                           const BufferSlice& destination) = 0;
    // Writes destination, v.gammaGradient and v.betaGradient (reads gamma, statistics).
    virtual void groupNormalizationGradient(CommandBuffer& cb, const GroupNormalizationParams& p,
                                            const BufferSlice& gradient, const BufferSlice& source,
                                            const GroupNormalizationVectors& v, const BufferSlice& destination) = 0;
    // ---- end instance and group normalization --------------------------------------------------

    // ---- optimizers (metal/optimizers_params.h, metal/optimizer_math.h) -----------------
    // Updates p.count elements: reads gradient and values, updates the state vectors in place
    // (state0/1/2 may be empty where p's rule does not read them), writes result (may alias values).
    virtual void optimizerUpdate(CommandBuffer& cb, const OptimizerParams& p, const BufferSlice& gradient,
                                 const BufferSlice& values, const BufferSlice& state0, const BufferSlice& state1,
                                 const BufferSlice& state2, const BufferSlice& result) = 0;

    // ---- losses (metal/loss_params.h, metal/loss_math.h) --------------------------------
    // weights may be empty unless p.hasWeights; loss is used only for reduction None, partials
    // (2 floats per pixel of the batch) for the other reductions.
    virtual void lossElements(CommandBuffer& cb, const LossElementsParams& p, const BufferSlice& source,
                              const BufferSlice& labels, const BufferSlice& weights, const BufferSlice& destination,
                              const BufferSlice& loss, const BufferSlice& partials) = 0;
    // results: 2 floats per image (reduced loss, gradient scale).
    virtual void lossReduce(CommandBuffer& cb, const LossReduceParams& p, const BufferSlice& partials,
                            const BufferSlice& results) = 0;
    virtual void lossScaleGradient(CommandBuffer& cb, const LossScaleParams& p, const BufferSlice& results,
                                   const BufferSlice& destination) = 0;
    // YOLO loss (metal/yolo_loss_params.h, metal/yolo_loss_math.h): one binding per part image.
    struct YoloParts {
        BufferSlice xy, wh, confidence, classes;
    };
    // anchors: 2 * p.anchors floats. Writes the part predictions, labels and weights.
    virtual void yoloPrepare(CommandBuffer& cb, const YoloPrepareParams& p, const BufferSlice& source,
                             const BufferSlice& labels, const BufferSlice& anchors, const YoloParts& predictions,
                             const YoloParts& partLabels, const YoloParts& weights) = 0;
    // losses: per-element part images (p.perElement) or one float each; loss: the source-sized
    // loss image (p.perElement) or one float.
    virtual void yoloFinish(CommandBuffer& cb, const YoloFinishParams& p, const BufferSlice& source,
                            const YoloParts& gradients, const YoloParts& losses, const BufferSlice& destination,
                            const BufferSlice& loss) = 0;

    // ---- pooling family (metal/pooling_params.h) ---------------------------------------
    virtual void poolingForward(CommandBuffer& cb, const PoolingParams& p, const BufferSlice& source,
                                const BufferSlice& destination) = 0;
    // source = the forward input X (only its size matters, and it may be empty, for average pooling).
    virtual void poolingGradient(CommandBuffer& cb, const PoolingGradientParams& p, const BufferSlice& gradient,
                                 const BufferSlice& source, const BufferSlice& destination) = 0;

    // ---- cross-channel / spatial / local contrast normalization (metal/normalization_params.h)
    // source = the forward input X (both ops).
    virtual void normalizationForward(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& source,
                                      const BufferSlice& destination) = 0;
    virtual void normalizationGradient(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& gradient,
                                       const BufferSlice& source, const BufferSlice& destination) = 0;

    // ---- upsampling family (metal/upsampling_params.h) -----------------------------------
    virtual void upsamplingForward(CommandBuffer& cb, const UpsamplingParams& p, const BufferSlice& source,
                                   const BufferSlice& destination) = 0;
    virtual void upsamplingGradient(CommandBuffer& cb, const UpsamplingGradientParams& p,
                                    const BufferSlice& gradient, const BufferSlice& destination) = 0;

    // ---- dropout family (metal/dropout_params.h) -----------------------------------------
    // The forward pass (source X, destination Y) and the gradient (source G, destination dX).
    virtual void dropout(CommandBuffer& cb, const DropoutParams& p, const BufferSlice& source,
                         const BufferSlice& destination) = 0;
    // Native float16 (readsHalfNatively(HalfOp::Dropout)): dropout with the storage format of the
    // source (formats.source) and destination (formats.destination).
    virtual void dropoutHalf(CommandBuffer&, const DropoutParams&, const HalfBindings&, const BufferSlice&,
                             const BufferSlice&) {
        throw std::logic_error("dropoutHalf: this backend does not read FLOAT16 natively");
    }

    // ---- reshape and pad family (metal/reshape_pad_params.h) -----------------------------
    // The HWC-order copy between two shapes of the same element count (reshape and its gradient).
    virtual void reshapeCopy(CommandBuffer& cb, const ReshapeParams& p, const BufferSlice& source,
                             const BufferSlice& destination) = 0;
    // maps: the int32 index tables, fill: one float per destination channel.
    virtual void padForward(CommandBuffer& cb, const PadParams& p, const BufferSlice& source,
                            const BufferSlice& destination, const BufferSlice& maps, const BufferSlice& fill) = 0;
    // maps: the int32 CSR tables (p.listCount ints).
    virtual void padGradient(CommandBuffer& cb, const PadGradientParams& p, const BufferSlice& gradient,
                             const BufferSlice& destination, const BufferSlice& maps) = 0;

    // ---- Gram matrix and spatial mean (metal/reduction_params.h) -------------------------
    virtual void gramMatrix(CommandBuffer& cb, const GramMatrixParams& p, const BufferSlice& source,
                            const BufferSlice& destination) = 0;
    // gradient = the Gram matrix's gradient Gr, source = the forward source X.
    virtual void gramMatrixGradient(CommandBuffer& cb, const GramMatrixGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BufferSlice& destination) = 0;
    virtual void spatialMean(CommandBuffer& cb, const SpatialMeanParams& p, const BufferSlice& source,
                             const BufferSlice& destination) = 0;
    virtual void spatialMeanGradient(CommandBuffer& cb, const SpatialMeanGradientParams& p,
                                     const BufferSlice& gradient, const BufferSlice& destination) = 0;

    // ---- image storage formats (metal/convert_params.h, docs/float16.md) -----------------
    // p.count elements of source (of format p.storage when !p.toStorage, else float) into
    // destination (the other); the two ranges must not overlap.
    virtual void convertImageFormat(CommandBuffer& cb, const ConvertFormatParams& p, const BufferSlice& source,
                                    const BufferSlice& destination) = 0;
    // ---- sub-pixel convolution (metal/sub_pixel_params.h) ------------------------------
    // Io (low) -> the clip rectangle of the destination (high).
    virtual void subPixelShuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& low,
                                 const BufferSlice& high) = 0;
    // The incoming gradient (high) -> every element of its low-resolution arrangement (low).
    virtual void subPixelUnshuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& high,
                                   const BufferSlice& low) = 0;
};

}  // namespace mpsgrad
