// The YOLO loss (MPSCNNLoss.h, macOS 10.14): CNNYOLOLossDescriptor and CNNYOLOLoss (spec §2.12).
// Formulas and mpsgrad's decisions where Apple's text is silent: metal/yolo_loss_math.h and
// docs/losses_and_optimizers.md "YOLO loss".
//
// Like CNNLoss, one encode performs the forward and the backward pass: the destination receives
// dL/d(raw predictions) and labels.lossImage() the loss. The loss is the sum of four parts (xy,
// wh, confidence, classes), each computed by an internal CNNLoss (lossXY() ...) built from the
// part's descriptor with the YOLO descriptor's reduction type and reduceAcrossBatch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/loss.h"

namespace mpsgrad {

// MPSCNNYOLOLossDescriptor. Channel layout per anchor box of the source and the labels:
// X Y W H C F0..F(K-1), K = classesLossDescriptor.numberOfClasses; the A anchors follow one
// another along the channels (A * (5 + K) channels).
struct CNNYOLOLossDescriptor {
    CNNLossDescriptor xyLossDescriptor = CNNLossDescriptor::make(CNNLossType::MeanSquaredError, CNNReductionType::Sum);
    CNNLossDescriptor whLossDescriptor = CNNLossDescriptor::make(CNNLossType::MeanSquaredError, CNNReductionType::Sum);
    CNNLossDescriptor confidenceLossDescriptor =
        CNNLossDescriptor::make(CNNLossType::SigmoidCrossEntropy, CNNReductionType::Sum);
    CNNLossDescriptor classesLossDescriptor =
        CNNLossDescriptor::make(CNNLossType::SoftMaxCrossEntropy, CNNReductionType::Sum);
    CNNReductionType reductionType = CNNReductionType::Sum;
    bool reduceAcrossBatch = false;  // macOS 11
    bool rescore = true;
    float scaleXY = 10.0f;
    float scaleWH = 10.0f;
    float scaleNoObject = 5.0f;
    float scaleObject = 100.0f;
    float scaleClass = 2.0f;
    float minIOUForObjectPresence = 0.7f;
    float maxIOUForObjectAbsence = 0.3f;
    int64_t numberOfAnchorBoxes = 0;
    std::vector<float> anchorBoxes;  // (width, height) per anchor box, in grid-cell units

    // +cnnLossDescriptorWithXYLossType:WHLossType:confidenceLossType:classesLossType:reductionType:
    // anchorBoxes:numberOfAnchorBoxes: (every part descriptor gets the reduction type too)
    static CNNYOLOLossDescriptor make(CNNLossType xy, CNNLossType wh, CNNLossType confidence, CNNLossType classes,
                                      CNNReductionType reduction, std::vector<float> anchorBoxes,
                                      int64_t numberOfAnchorBoxes);
    // ValueError naming the field for values or combinations that are not allowed.
    void validate() const;
    // A part descriptor as the internal CNNLoss uses it: the YOLO reduction type and
    // reduceAcrossBatch replace the part's own (MPS: "ReductionType shared across all losses").
    CNNLossDescriptor partDescriptor(const CNNLossDescriptor& part) const;
};

// MPSCNNYOLOLoss. Offsets and clip rectangles are not supported (the whole image is used), as
// for CNNLoss.
class CNNYOLOLoss final : public CNNKernel {
public:
    // -initWithDevice:lossDescriptor:
    CNNYOLOLoss(const Device& device, const CNNYOLOLossDescriptor& descriptor);
    const char* className() const override { return "CNNYOLOLoss"; }
    void encodeWithCoder(serial::Writer& writer) const override;  // kernels/serialization_training.cpp
    static std::shared_ptr<CNNYOLOLoss> initWithCoder(serial::Reader& reader, const Device& device);
    const CNNYOLOLossDescriptor& descriptor() const { return descriptor_; }
    int64_t numberOfClasses() const { return descriptor_.classesLossDescriptor.numberOfClasses; }

    // The internal losses (read-only in MPS).
    const std::shared_ptr<CNNLoss>& lossXY() const { return lossXY_; }
    const std::shared_ptr<CNNLoss>& lossWH() const { return lossWH_; }
    const std::shared_ptr<CNNLoss>& lossConfidence() const { return lossConfidence_; }
    const std::shared_ptr<CNNLoss>& lossClasses() const { return lossClasses_; }

    // -encodeToCommandBuffer:sourceImage:labels:destinationImage: and the returning form
    void encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels, const ImagePtr& destination);
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels);
    // -encodeBatchToCommandBuffer:sourceImages:labels:destinationImages: and the returning form
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels,
                     const ImageBatch& destinations);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels);

protected:
    int64_t destinationFeatureChannels(const Image& source) const override { return source.featureChannels(); }
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    CNNYOLOLossDescriptor descriptor_;
    std::shared_ptr<Buffer> anchors_;  // 2 floats per anchor box, on the device
    std::shared_ptr<CNNLoss> lossXY_, lossWH_, lossConfidence_, lossClasses_;
};

}  // namespace mpsgrad
