#include "kernels/yolo_loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/host_access.h"
#include "core/float16_shadow.h"

namespace mpsgrad {
namespace {

std::string sizeText(const Image& i) {
    return detail::concat(i.width(), " x ", i.height(), " x ", i.featureChannels());
}

bool hasSize(const Image& image, int64_t w, int64_t h, int64_t c) {
    return image.width() == w && image.height() == h && image.featureChannels() == c;
}

void checkScale(float value, const char* name) {
    if (!(value >= 0.0f) || !std::isfinite(value)) throwValueError(name, ": must be finite and >= 0, got ", value);
}

void checkIOU(float value, const char* name) {
    if (!(value >= 0.0f && value <= 1.0f)) throwValueError(name, ": must be in [0, 1], got ", value);
}

// Validates one part descriptor as the internal CNNLoss uses it, naming the part.
void checkPart(const CNNLossDescriptor& d, const char* name) {
    try {
        d.validate();
    } catch (const ValueError& e) {
        throwValueError(name, ".", e.what());
    }
}

ImagePtr newImage(const Device& device, int64_t w, int64_t h, int64_t c) {
    return std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, w, h, c));
}

// The images of one part of one source image: the part's prediction, label, weight and gradient
// images and the labels state whose loss image receives the part loss.
struct PartImages {
    ImagePtr prediction, label, weight, gradient;
    LossLabelsPtr labels;
};

PartImages newPart(const Device& device, int64_t w, int64_t h, int64_t c, bool perElement) {
    PartImages p;
    p.prediction = newImage(device, w, h, c);
    p.label = newImage(device, w, h, c);
    p.weight = newImage(device, w, h, c);
    p.gradient = newImage(device, w, h, c);
    p.labels = std::make_shared<CNNLossLabels>(device, perElement ? LossSize{w, h, c} : LossSize{1, 1, 1}, p.label,
                                               p.weight);
    return p;
}

}  // namespace

// ---- CNNYOLOLossDescriptor ----------------------------------------------------------------------------

CNNYOLOLossDescriptor CNNYOLOLossDescriptor::make(CNNLossType xy, CNNLossType wh, CNNLossType confidence,
                                                  CNNLossType classes, CNNReductionType reduction,
                                                  std::vector<float> anchorBoxes, int64_t numberOfAnchorBoxes) {
    CNNYOLOLossDescriptor d;
    d.xyLossDescriptor = CNNLossDescriptor::make(xy, reduction);
    d.whLossDescriptor = CNNLossDescriptor::make(wh, reduction);
    d.confidenceLossDescriptor = CNNLossDescriptor::make(confidence, reduction);
    d.classesLossDescriptor = CNNLossDescriptor::make(classes, reduction);
    d.reductionType = reduction;
    d.anchorBoxes = std::move(anchorBoxes);
    d.numberOfAnchorBoxes = numberOfAnchorBoxes;
    d.validate();
    return d;
}

CNNLossDescriptor CNNYOLOLossDescriptor::partDescriptor(const CNNLossDescriptor& part) const {
    CNNLossDescriptor d = part;
    d.reductionType = reductionType;
    d.reduceAcrossBatch = reduceAcrossBatch;
    return d;
}

void CNNYOLOLossDescriptor::validate() const {
    if (int32_t(reductionType) < 0 || int32_t(reductionType) > kReductionSumByNonZeroWeights)
        throwValueError("reduction_type: unknown CNNReductionType ", int32_t(reductionType));
    checkPart(partDescriptor(xyLossDescriptor), "xy_loss_descriptor");
    checkPart(partDescriptor(whLossDescriptor), "wh_loss_descriptor");
    checkPart(partDescriptor(confidenceLossDescriptor), "confidence_loss_descriptor");
    checkPart(partDescriptor(classesLossDescriptor), "classes_loss_descriptor");
    checkScale(scaleXY, "scale_xy");
    checkScale(scaleWH, "scale_wh");
    checkScale(scaleNoObject, "scale_no_object");
    checkScale(scaleObject, "scale_object");
    checkScale(scaleClass, "scale_class");
    checkIOU(minIOUForObjectPresence, "min_iou_for_object_presence");
    checkIOU(maxIOUForObjectAbsence, "max_iou_for_object_absence");
    if (maxIOUForObjectAbsence > minIOUForObjectPresence)
        throwValueError("max_iou_for_object_absence: ", maxIOUForObjectAbsence,
                        " exceeds min_iou_for_object_presence ", minIOUForObjectPresence,
                        " (an IOU between them would count as object and as no object)");
    if (numberOfAnchorBoxes < 1 || numberOfAnchorBoxes > 4096)
        throwValueError("number_of_anchor_boxes: must be in [1, 4096], got ", numberOfAnchorBoxes);
    if (anchorBoxes.size() != size_t(2 * numberOfAnchorBoxes))
        throwValueError("anchor_boxes: holds ", anchorBoxes.size(), " floats but number_of_anchor_boxes ",
                        numberOfAnchorBoxes, " needs ", 2 * numberOfAnchorBoxes, " (width, height per box)");
    for (size_t i = 0; i < anchorBoxes.size(); ++i)
        if (!(anchorBoxes[i] > 0.0f) || !std::isfinite(anchorBoxes[i]))
            throwValueError("anchor_boxes: box ", i / 2, "'s ", i % 2 ? "height" : "width",
                            " must be finite and > 0, got ", anchorBoxes[i]);
    const int64_t channels = numberOfAnchorBoxes * (5 + classesLossDescriptor.numberOfClasses);
    if (channels > (int64_t(1) << 24))
        throwValueError("number_of_anchor_boxes: ", numberOfAnchorBoxes, " boxes of ",
                        classesLossDescriptor.numberOfClasses, " classes need ", channels, " channels (max 2^24)");
}

// ---- CNNYOLOLoss ------------------------------------------------------------------------------------

CNNYOLOLoss::CNNYOLOLoss(const Device& device, const CNNYOLOLossDescriptor& descriptor)
    : CNNKernel(device), descriptor_(descriptor) {
    descriptor_.validate();
    const CNNYOLOLossDescriptor& d = descriptor_;
    lossXY_ = std::make_shared<CNNLoss>(device, d.partDescriptor(d.xyLossDescriptor));
    lossWH_ = std::make_shared<CNNLoss>(device, d.partDescriptor(d.whLossDescriptor));
    lossConfidence_ = std::make_shared<CNNLoss>(device, d.partDescriptor(d.confidenceLossDescriptor));
    lossClasses_ = std::make_shared<CNNLoss>(device, d.partDescriptor(d.classesLossDescriptor));
    anchors_ = device_.backend().newBuffer(d.anchorBoxes.size() * sizeof(float));
    std::memcpy(anchors_->contents(), d.anchorBoxes.data(), d.anchorBoxes.size() * sizeof(float));
}

void CNNYOLOLoss::encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels,
                         const ImagePtr& destination) {
    encodeBatch(cb, ImageBatch{source}, {labels}, ImageBatch{destination});
}

ImagePtr CNNYOLOLoss::encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels) {
    return encodeBatch(cb, ImageBatch{source}, {labels}).at(0);
}

void CNNYOLOLoss::encodeImpl(CommandBuffer&, const std::vector<UnaryDispatch>&, const StateBatch&) {
    throwTypeError("CNNYOLOLoss: the CNNKernel encodes without labels are unavailable (as in MPS); use "
                   "encode(command_buffer, source_image, labels[, destination_image])");
}

ImageBatch CNNYOLOLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                                    const std::vector<LossLabelsPtr>& labels) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    ImageBatch destinations = loss_kernel::allocate(cb, destinationImageAllocator, this, sources,
                                                    [](const Image& s) { return s.descriptor(); });
    encodeBatch(cb, sources, labels, destinations);
    return destinations;
}

void CNNYOLOLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels,
                              const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    const CNNYOLOLossDescriptor& d = descriptor_;
    const size_t N = sources.size();
    if (N == 0) throwValueError("source_images: empty");
    if (labels.size() != N) throwValueError("labels: ", labels.size(), " labels for ", N, " source images");
    if (destinations.size() != N)
        throwValueError("destination_images: ", destinations.size(), " images for ", N, " source images");
    const int64_t A = d.numberOfAnchorBoxes, K = numberOfClasses(), C = A * (5 + K);
    if (!sources[0]) throwValueError("source_images: contains None");
    const int64_t W = sources[0]->width(), H = sources[0]->height();
    const bool perElement = d.reductionType == CNNReductionType::None;
    for (size_t i = 0; i < N; ++i) {
        if (!sources[i]) throwValueError("source_images: contains None");
        if (!labels[i]) throwValueError("labels: item ", i, " is None");
        if (!destinations[i]) throwValueError("destination_images: item ", i, " is None");
        const Image& s = *sources[i];
        s.checkUsable(cb, "source_image");
        destinations[i]->checkUsable(cb, "destination_image");
        host_access::noteKernelWrite(cb, destinations[i].get());  // the host reads it after completion
        labels[i]->checkUsable(cb, "labels");
        if (s.numberOfImages() != 1 || destinations[i]->numberOfImages() != 1)
            throwValueError("source_image: images with number_of_images > 1 are not supported; use "
                            "batch_representation()");
        if (s.featureChannels() != C)
            throwValueError("source_image: has ", s.featureChannels(), " feature channels but number_of_anchor_boxes ",
                            A, " * (5 + number_of_classes ", K, ") = ", C);
        if (s.width() != W || s.height() != H)
            throwValueError("source_images: image ", i, " is ", sizeText(s), ", image 0 ", sizeText(*sources[0]));
        const Image& t = *labels[i]->labelsImage();
        t.checkUsable(cb, "labels");
        // As CNNLoss: labels wider than the source are accepted and their first C channels read.
        if (t.width() != W || t.height() != H || t.featureChannels() < C)
            throwValueError("labels: the labels image is ", sizeText(t), " but the source image ", sizeText(s),
                            " (labels need its width and height and at least its feature channels)");
        if (labels[i]->weightsImage())
            throwValueError("labels: a weights image is not supported by CNNYOLOLoss (the scales weight the parts)");
        if (!hasSize(*destinations[i], W, H, C))
            throwValueError("destination_image: is ", sizeText(*destinations[i]), " but the source image ",
                            sizeText(s));
        const Image& lossImage = *labels[i]->lossImage();
        lossImage.checkUsable(cb, "labels");
        if (perElement && !(lossImage.width() == W && lossImage.height() == H && lossImage.featureChannels() >= C))
            throwValueError("labels: reduction NONE needs a loss image of the source's size ", sizeText(s),
                            " (loss_image_size), got ", sizeText(lossImage));
        if (!perElement && !hasSize(lossImage, 1, 1, 1))
            throwValueError("labels: a reduced loss needs a (1, 1, 1) loss image (loss_image_size), got ",
                            sizeText(lossImage));
    }
    if (W * A > INT32_MAX / std::max<int64_t>(H, 1)) throwValueError("source_images: too many grid cells");

    // FLOAT16 images take part through float32 shadows (core/float16_shadow.h), as in CNNLoss.
    Float32Shadows shadows(cb);
    ImageBatch sources32 = shadows.read(sources), labels32, destinations32 = shadows.write(destinations), losses32;
    for (size_t i = 0; i < N; ++i) {
        labels32.push_back(shadows.read(labels[i]->labelsImage()));
        losses32.push_back(shadows.write(labels[i]->lossImage()));
    }

    // Step 1: the part images of every source.
    Backend& backend = device_.backend();
    const int64_t PW = W * A;
    const int64_t partChannels[4] = {2, 2, 1, K};
    std::vector<PartImages> parts[4];
    for (size_t i = 0; i < N; ++i)
        for (int k = 0; k < 4; ++k) parts[k].push_back(newPart(device_, PW, H, partChannels[k], perElement));
    auto layouts = [&](size_t i, ImageLayout out[4]) {
        for (int k = 0; k < 4; ++k) out[k] = parts[k][i].prediction->layout(0, partChannels[k]);
    };
    auto slices = [&](size_t i, ImagePtr PartImages::*member) {
        return Backend::YoloParts{(parts[0][i].*member)->storage(0), (parts[1][i].*member)->storage(0),
                                  (parts[2][i].*member)->storage(0), (parts[3][i].*member)->storage(0)};
    };
    const bool confidenceRaw = d.confidenceLossDescriptor.lossType == CNNLossType::SigmoidCrossEntropy;
    for (size_t i = 0; i < N; ++i) {
        YoloPrepareParams p{};
        p.source = sources32[i]->layout(0, C);
        p.labels = labels32[i]->layout(0, C);
        ImageLayout l[4];
        layouts(i, l);
        p.xy = l[0];
        p.wh = l[1];
        p.confidence = l[2];
        p.classes = l[3];
        p.anchors = int32_t(A);
        p.classCount = int32_t(K);
        p.rescore = d.rescore ? 1 : 0;
        p.confidenceRaw = confidenceRaw ? 1 : 0;
        p.weightXY = d.scaleXY * d.xyLossDescriptor.weight;
        p.weightWH = d.scaleWH * d.whLossDescriptor.weight;
        p.weightObject = d.scaleObject * d.confidenceLossDescriptor.weight;
        p.weightNoObject = d.scaleNoObject * d.confidenceLossDescriptor.weight;
        p.weightClass = d.scaleClass * d.classesLossDescriptor.weight;
        p.minIOUForObjectPresence = d.minIOUForObjectPresence;
        p.maxIOUForObjectAbsence = d.maxIOUForObjectAbsence;
        backend.yoloPrepare(cb, p, sources32[i]->storage(0), labels32[i]->storage(0),
                            BufferSlice{anchors_, 0}, slices(i, &PartImages::prediction),
                            slices(i, &PartImages::label), slices(i, &PartImages::weight));
    }

    // Step 2: the internal losses, each over the whole batch (reduceAcrossBatch couples images).
    const std::shared_ptr<CNNLoss>* losses[4] = {&lossXY_, &lossWH_, &lossConfidence_, &lossClasses_};
    for (int k = 0; k < 4; ++k) {
        ImageBatch predictions, gradients;
        std::vector<LossLabelsPtr> partLabels;
        for (const PartImages& part : parts[k]) {
            predictions.push_back(part.prediction);
            gradients.push_back(part.gradient);
            partLabels.push_back(part.labels);
        }
        (*losses[k])->encodeBatch(cb, predictions, partLabels, gradients);
    }

    // Step 3: the gradient of the raw predictions and the loss.
    for (size_t i = 0; i < N; ++i) {
        YoloFinishParams p{};
        p.source = sources32[i]->layout(0, C);
        p.destination = destinations32[i]->layout(0, C);
        p.loss = perElement ? losses32[i]->layout(0, C) : p.destination;
        ImageLayout l[4];
        layouts(i, l);
        p.xy = l[0];
        p.wh = l[1];
        p.confidence = l[2];
        p.classes = l[3];
        p.anchors = int32_t(A);
        p.classCount = int32_t(K);
        p.confidenceRaw = confidenceRaw ? 1 : 0;
        p.perElement = perElement ? 1 : 0;
        Backend::YoloParts partLosses{parts[0][i].labels->lossImage()->storage(0),
                                      parts[1][i].labels->lossImage()->storage(0),
                                      parts[2][i].labels->lossImage()->storage(0),
                                      parts[3][i].labels->lossImage()->storage(0)};
        backend.yoloFinish(cb, p, sources32[i]->storage(0), slices(i, &PartImages::gradient), partLosses,
                           destinations32[i]->storage(0), losses32[i]->storage(0));
    }
    shadows.finish();
    for (size_t i = 0; i < N; ++i) {
        sources[i]->noteRead();
        labels[i]->noteRead();
    }
}

}  // namespace mpsgrad
