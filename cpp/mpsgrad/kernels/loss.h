// The loss family (MPSCNNLoss.h): CNNLossDataDescriptor, CNNLossLabels, CNNLossDescriptor and
// CNNLoss (spec §2.12). Formulas and mpsgrad's decisions where Apple's text is wrong or silent:
// metal/loss_math.h and docs/losses_and_optimizers.md.
//
// CNNLoss performs the forward and the backward pass in one encode: the destination receives the
// gradient dL/dy of the reduced loss, and labels.lossImage() the loss (per element for reduction
// None, else one value per image; or one value for the whole batch with reduceAcrossBatch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "core/state.h"
#include "metal/loss_params.h"

namespace mpsgrad {

class CNNMultiply;

// MPSCNNLossType
enum class CNNLossType : uint32_t {
    MeanAbsoluteError = 0,
    MeanSquaredError = 1,
    SoftMaxCrossEntropy = 2,
    SigmoidCrossEntropy = 3,
    CategoricalCrossEntropy = 4,
    Hinge = 5,
    Huber = 6,
    CosineDistance = 7,
    Log = 8,
    KullbackLeiblerDivergence = 9,
};

// MPSCNNReductionType
enum class CNNReductionType : int32_t { None = 0, Sum = 1, Mean = 2, SumByNonZeroWeights = 3 };

struct LossSize {
    int64_t width = 1, height = 1, channels = 1;
};

// MPSCNNLossDataDescriptor: float data with its layout, size and strides (the data is copied).
// HWC: element (x, y, c) at byte y * bytesPerRow + (x * channels + c) * 4 of image 0.
// CHW: element (x, y, c) at byte c * bytesPerImage + y * bytesPerRow + x * 4.
class CNNLossDataDescriptor {
public:
    // +cnnLossDataDescriptorWithData:layout:size: (dense strides)
    CNNLossDataDescriptor(std::vector<float> data, DataLayout layout, LossSize size);

    DataLayout layout() const { return layout_; }
    const LossSize& size() const { return size_; }
    size_t bytesPerRow() const { return bytesPerRow_; }
    size_t bytesPerImage() const { return bytesPerImage_; }
    // ValueError unless the data holds every element with the new stride.
    void setBytesPerRow(size_t bytes);
    void setBytesPerImage(size_t bytes);
    const std::vector<float>& data() const { return data_; }
    // The elements in dense HWC order.
    std::vector<float> denseHWC() const;

private:
    void checkStrides(size_t bytesPerRow, size_t bytesPerImage) const;
    std::vector<float> data_;
    DataLayout layout_;
    LossSize size_;
    size_t bytesPerRow_ = 0, bytesPerImage_ = 0;
};

// MPSCNNLossLabels
class CNNLossLabels final : public State {
public:
    // -initWithDevice:labelsDescriptor: (loss image 1x1x1)
    CNNLossLabels(const Device& device, const CNNLossDataDescriptor& labels);
    // -initWithDevice:lossImageSize:labelsDescriptor:weightsDescriptor: (weights may be null)
    CNNLossLabels(const Device& device, LossSize lossImageSize, const CNNLossDataDescriptor& labels,
                  const CNNLossDataDescriptor* weights);
    // -initWithDevice:lossImageSize:labelsImage:weightsImage: (images retained, not copied)
    CNNLossLabels(const Device& device, LossSize lossImageSize, ImagePtr labels, ImagePtr weights);
    const char* className() const override { return "CNNLossLabels"; }

    const ImagePtr& lossImage() const { return loss_; }
    const ImagePtr& labelsImage() const { return labels_; }
    const ImagePtr& weightsImage() const { return weights_; }  // may be null

private:
    void makeLossImage(LossSize size);
    ImagePtr loss_, labels_, weights_;
};

using LossLabelsPtr = std::shared_ptr<CNNLossLabels>;

// MPSCNNLossDescriptor. scaleGradientByReduction (mpsgrad, default true): the gradient is that of
// the reduced loss (Mean / SumByNonZeroWeights divide it by the count too).
struct CNNLossDescriptor {
    CNNLossType lossType = CNNLossType::MeanSquaredError;
    CNNReductionType reductionType = CNNReductionType::None;
    float weight = 1.0f;
    float labelSmoothing = 0.0f;
    int64_t numberOfClasses = 1;
    float epsilon = 1e-7f;
    float delta = 1.0f;
    bool reduceAcrossBatch = false;
    bool scaleGradientByReduction = true;

    // +cnnLossDescriptorWithType:reductionType:
    static CNNLossDescriptor make(CNNLossType type, CNNReductionType reduction);
    // ValueError naming the field for values or combinations that are not allowed.
    void validate() const;
};

// The loss kernels are CNN kernels as in MPS (MPSCNNLoss, MPSCNNYOLOLoss, MPSNNForwardLoss and
// MPSNNInitialGradient are MPSCNNKernels, MPSNNLossGradient an MPSCNNBinaryKernel): they have
// the CNN kernel properties, and their returning encodes allocate through
// destination_image_allocator (temporary images by default). They read and write whole images:
// a non-default offset, clip rectangle or feature channel offset is a ValueError (MPS: "not
// supported"), and the generic CNN kernel encodes, which take no labels, are a TypeError.
namespace loss_kernel {
// ValueError naming the first property of `kernel` that is not at its default.
void requireWholeImages(const CNNKernel& kernel);
void requireWholeImages(const CNNBinaryKernel& kernel);
// The returning encodes' destinations: one per source, of descriptorOf(source) (number_of_images
// 1), from `allocator` (the temporary allocator when null).
ImageBatch allocate(CommandBuffer& cb, const std::shared_ptr<ImageAllocator>& allocator, const Kernel* kernel,
                    const ImageBatch& sources, const std::function<ImageDescriptor(const Image&)>& descriptorOf);
}  // namespace loss_kernel

// MPSCNNLoss. Offsets and clip rectangles are not supported (the whole image is used), as for
// MPSNNForwardLoss.
class CNNLoss final : public CNNKernel {
public:
    // -initWithDevice:lossDescriptor:
    CNNLoss(const Device& device, const CNNLossDescriptor& descriptor);
    const char* className() const override { return "CNNLoss"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<CNNLoss> initWithCoder(serial::Reader& reader, const Device& device);
    const CNNLossDescriptor& descriptor() const { return descriptor_; }

    // -encodeToCommandBuffer:sourceImage:labels:destinationImage:
    void encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels, const ImagePtr& destination);
    // -encodeToCommandBuffer:sourceImage:labels: (a new persistent destination)
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels);
    // -encodeBatchToCommandBuffer:sourceImages:labels:destinationImages:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels,
                     const ImageBatch& destinations);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels);

protected:
    int64_t destinationFeatureChannels(const Image& source) const override { return source.featureChannels(); }
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    CNNLossDescriptor descriptor_;
};

// ---- the pass shared by CNNLoss and the split loss kernels (10.15) ------------------------------------

// One image of a loss pass: `gradient` receives dL/dy, `loss` the loss
// (source-sized for reduction None, else 1x1x1). weights may be null.
struct LossPassImages {
    ImagePtr source, labels, weights, gradient, loss;
};
// Validates every image (ValueError naming the parameter; `labelsName` names the labels argument)
// and encodes the loss pass of spec §2.12; the sources' read counts are decremented.
// labelGradients: `gradient` receives dL/dt (the labels' gradient) instead of dL/dy.
void encodeLossPass(const Device& device, CommandBuffer& cb, const CNNLossDescriptor& descriptor,
                    const std::vector<LossPassImages>& images, const char* labelsName, bool labelGradients = false);

// The gradient state MPSNNForwardLoss writes into its destinationStates: the dynamic properties
// (weight, labelSmoothing, epsilon, delta) at the time of the forward encode. NNLossGradient given
// it as sourceStates uses these instead of its own. Python sees it as an NNGradientState.
class NNLossGradientState final : public NNGradientState {
public:
    NNLossGradientState(const Device& device, bool temporary, const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb) {}
    float weight = 1.0f, labelSmoothing = 0.0f, epsilon = 1e-7f, delta = 1.0f;
};

// The properties the split loss kernels share: ro lossType, reductionType, numberOfClasses; rw
// weight, labelSmoothing, epsilon, delta and reduceAcrossBatch (macOS 11), validated on set.
// Offsets and clip rectangles are not supported (MPS: "non-default offset or clipRect is unsupported").
// A second base of NNForwardLoss (a CNNKernel) and NNLossGradient (a CNNBinaryKernel).
class NNLossKernel {
public:
    virtual ~NNLossKernel() = default;
    const CNNLossDescriptor& descriptor() const { return descriptor_; }
    void setWeight(float value);
    void setLabelSmoothing(float value);
    void setEpsilon(float value);
    void setDelta(float value);
    void setReduceAcrossBatch(bool value) { descriptor_.reduceAcrossBatch = value; }
    // The loss image of one source: the source's size for reduction None, else 1x1x1.
    ImageDescriptor lossImageDescriptor(const Image& source) const;

protected:
    explicit NNLossKernel(const CNNLossDescriptor& descriptor);
    // Labels (and weights, empty or one per source) as pass images for `sources`.
    std::vector<LossPassImages> passImages(const ImageBatch& sources, const ImageBatch& labels,
                                           const ImageBatch& weights) const;
    // The sourceStates / destinationStates argument as loss gradient states (empty or one per source).
    static std::vector<std::shared_ptr<NNLossGradientState>> lossStates(const StateBatch& states, size_t count,
                                                                        const char* what);
    CNNLossDescriptor descriptor_;
};

// MPSNNForwardLoss: the loss alone. The destination receives the loss: per element (source-sized)
// for reduction None, else one value per image (1x1x1), or the batch's with reduceAcrossBatch.
class NNForwardLoss final : public CNNKernel, public NNLossKernel {
public:
    // -initWithDevice:lossDescriptor:
    NNForwardLoss(const Device& device, const CNNLossDescriptor& descriptor)
        : CNNKernel(device), NNLossKernel(descriptor) {}
    const char* className() const override { return "NNForwardLoss"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNForwardLoss> initWithCoder(serial::Reader& reader, const Device& device);

    // -encodeBatchToCommandBuffer:sourceImages:labels:weights:destinationStates:destinationImages:
    // (weights: empty or one per source; destinationStates: empty or one NNLossGradientState per
    // source, from resultStateBatch / temporaryResultStateBatch, receiving the dynamic properties)
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& labels, const ImageBatch& weights,
                     const StateBatch& destinationStates, const ImageBatch& destinations);
    // The returning forms (new persistent destinations of lossImageDescriptor's size); with
    // outStates: ...destinationStates:destinationStateIsTemporary: (a new state per source).
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& labels,
                           const ImageBatch& weights, StateBatch* outStates = nullptr, bool statesAreTemporary = false);
    // -resultStateBatchForSourceImage:sourceStates:destinationImage: (persistent) and
    // -temporaryResultStateBatchForCommandBuffer:... : one NNLossGradientState per source.
    StateBatch resultStateBatch(const ImageBatch& sources) const;
    StateBatch temporaryResultStateBatch(CommandBuffer& cb, const ImageBatch& sources) const;

protected:
    // The loss: source-sized for reduction None, else 1 x 1 x 1 (adjustDestinationDescriptor).
    int64_t destinationFeatureChannels(const Image& source) const override;
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
};

// MPSNNLossGradient: the gradient with respect to the predictions of sum(sourceGradient * loss), or
// with computeLabelGradients with respect to the labels. sourceGradient is the gradient
// of the final objective with respect to the forward loss's output: 1x1x1 per image for a reduced
// loss (destination = sourceGradient * d(loss)/dy), source-sized for reduction None (the loss is
// weighted by it, which is exact for SoftMaxCE's coupled channels too).
class NNLossGradient final : public CNNBinaryKernel, public NNLossKernel {
public:
    // -initWithDevice:lossDescriptor:
    NNLossGradient(const Device& device, const CNNLossDescriptor& descriptor);
    const char* className() const override { return "NNLossGradient"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNLossGradient> initWithCoder(serial::Reader& reader, const Device& device);

    // computeLabelGradients (default false): the destination receives dL/dlabels instead of dL/dy.
    bool computeLabelGradients() const { return computeLabelGradients_; }
    void setComputeLabelGradients(bool value) { computeLabelGradients_ = value; }

    // -encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:sourceStates:destinationGradients:
    // sourceStates: empty, or NNForwardLoss's destination states (one per source, all written by
    // the same forward encode): their weight, labelSmoothing, epsilon and delta are used.
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sources,
                     const ImageBatch& labels, const ImageBatch& weights, const StateBatch& sourceStates,
                     const ImageBatch& destinations);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sources,
                           const ImageBatch& labels, const ImageBatch& weights, const StateBatch& sourceStates = {});
    // [source_gradient, source_image]: the gradient has the source image's size and format.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

protected:
    int64_t destinationFeatureChannels(const Image&, const Image& secondary) const override {
        return secondary.featureChannels();
    }

private:
    // The descriptor of this encode: the kernel's, with the source states' dynamic properties.
    CNNLossDescriptor encodeDescriptor(CommandBuffer& cb, const StateBatch& sourceStates, size_t count) const;
    std::shared_ptr<CNNMultiply> multiply_;
    bool computeLabelGradients_ = false;
};

// MPSNNInitialGradient: a destination of the source's size filled with 1.0 (the seed gradient of
// a scalar objective).
class NNInitialGradient final : public CNNKernel {
public:
    explicit NNInitialGradient(const Device& device);
    const char* className() const override { return "NNInitialGradient"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization.cpp
    static std::shared_ptr<NNInitialGradient> initWithCoder(serial::Reader& reader, const Device& device);

    // -encodeBatchToCommandBuffer:sourceImages:destinationImages: and the single / returning forms
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& destinations);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources);

protected:
    int64_t destinationFeatureChannels(const Image& source) const override { return source.featureChannels(); }
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    std::shared_ptr<CNNMultiply> multiply_;
};

}  // namespace mpsgrad
