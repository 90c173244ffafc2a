#include "kernels/loss.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/float16_shadow.h"
#include "core/host_access.h"
#include "core/kernel_support.h"
#include "kernels/arithmetic.h"

namespace mpsgrad {
namespace {

void checkSize(const LossSize& s, const char* what) {
    if (s.width < 1 || s.height < 1 || s.channels < 1)
        throwValueError(what, ": width, height and channels must be >= 1, got (", s.width, ", ", s.height, ", ",
                        s.channels, ")");
    if (s.width > INT32_MAX / s.height || s.width * s.height > INT32_MAX / s.channels)
        throwValueError(what, ": ", s.width, " x ", s.height, " x ", s.channels, " elements exceed 2^31 - 1");
}

ImagePtr imageOfSize(const Device& device, const LossSize& s) {
    return std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, s.width, s.height,
                                                                 s.channels));
}

ImagePtr imageFromDescriptor(const Device& device, const CNNLossDataDescriptor& d) {
    ImagePtr image = imageOfSize(device, d.size());
    const std::vector<float> dense = d.denseHWC();
    image->writeBytes(dense.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
    return image;
}

bool sameSize(const Image& image, const LossSize& s) {
    return image.width() == s.width && image.height() == s.height && image.featureChannels() == s.channels;
}

// Labels, weights and per-element loss images may be wider than the source: MPS reads (writes) their
// first `s.channels` feature channels, so Apple's samples can pass labels rounded up to a multiple of
// 4 channels (12 for a 10-class output). Width and height must match; fewer channels are refused.
bool coversSize(const Image& image, const LossSize& s) {
    return image.width() == s.width && image.height() == s.height && image.featureChannels() >= s.channels;
}

std::string sizeText(const Image& i) {
    return detail::concat(i.width(), " x ", i.height(), " x ", i.featureChannels());
}

}  // namespace

// ---- CNNLossDataDescriptor ----------------------------------------------------------------------------

CNNLossDataDescriptor::CNNLossDataDescriptor(std::vector<float> data, DataLayout layout, LossSize size)
    : data_(std::move(data)), layout_(layout), size_(size) {
    checkSize(size_, "size");
    if (layout_ != DataLayout::HeightxWidthxFeatureChannels && layout_ != DataLayout::FeatureChannelsxHeightxWidth)
        throwValueError("layout: unknown DataLayout ", uint32_t(layout_));
    const size_t w = size_t(size_.width), h = size_t(size_.height), c = size_t(size_.channels);
    if (layout_ == DataLayout::HeightxWidthxFeatureChannels) {
        bytesPerRow_ = w * c * sizeof(float);
        bytesPerImage_ = h * bytesPerRow_;
    } else {
        bytesPerRow_ = w * sizeof(float);
        bytesPerImage_ = h * bytesPerRow_;
    }
    if (data_.size() != w * h * c)
        throwValueError("data: holds ", data_.size(), " floats but size (", w, ", ", h, ", ", c, ") needs ", w * h * c);
}

void CNNLossDataDescriptor::checkStrides(size_t row, size_t image) const {
    const size_t w = size_t(size_.width), h = size_t(size_.height), c = size_t(size_.channels);
    const bool hwc = layout_ == DataLayout::HeightxWidthxFeatureChannels;
    const size_t minRow = (hwc ? w * c : w) * sizeof(float);
    if (row % sizeof(float) != 0 || row < minRow)
        throwValueError("bytes_per_row: must be a multiple of 4 and >= ", minRow, ", got ", row);
    if (image % sizeof(float) != 0 || image < h * row)
        throwValueError("bytes_per_image: must be a multiple of 4 and >= height * bytes_per_row = ", h * row, ", got ",
                        image);
    // The last element must lie inside the data.
    const size_t last = hwc ? (h - 1) * row + minRow : (c - 1) * image + (h - 1) * row + minRow;
    if (last > data_.size() * sizeof(float))
        throwValueError("bytes_per_row / bytes_per_image: the strides need ", last, " bytes but the data holds ",
                        data_.size() * sizeof(float));
}

void CNNLossDataDescriptor::setBytesPerRow(size_t bytes) {
    checkStrides(bytes, std::max(bytesPerImage_, size_t(size_.height) * bytes));
    bytesPerRow_ = bytes;
    bytesPerImage_ = std::max(bytesPerImage_, size_t(size_.height) * bytes);
}

void CNNLossDataDescriptor::setBytesPerImage(size_t bytes) {
    checkStrides(bytesPerRow_, bytes);
    bytesPerImage_ = bytes;
}

std::vector<float> CNNLossDataDescriptor::denseHWC() const {
    const int64_t W = size_.width, H = size_.height, C = size_.channels;
    std::vector<float> out(size_t(W * H * C));
    const char* base = reinterpret_cast<const char*>(data_.data());
    const bool hwc = layout_ == DataLayout::HeightxWidthxFeatureChannels;
    for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
            for (int64_t c = 0; c < C; ++c) {
                const size_t at = hwc ? size_t(y) * bytesPerRow_ + size_t(x * C + c) * sizeof(float)
                                      : size_t(c) * bytesPerImage_ + size_t(y) * bytesPerRow_ + size_t(x) * sizeof(float);
                std::memcpy(&out[size_t((y * W + x) * C + c)], base + at, sizeof(float));
            }
    return out;
}

// ---- CNNLossLabels ------------------------------------------------------------------------------------

CNNLossLabels::CNNLossLabels(const Device& device, const CNNLossDataDescriptor& labels)
    : CNNLossLabels(device, LossSize{1, 1, 1}, labels, nullptr) {}

CNNLossLabels::CNNLossLabels(const Device& device, LossSize lossImageSize, const CNNLossDataDescriptor& labels,
                             const CNNLossDataDescriptor* weights)
    : State(device) {
    const LossSize& s = labels.size();
    // The channel counts may differ: each must cover the source's channels, checked at encode.
    if (weights && (weights->size().width != s.width || weights->size().height != s.height))
        throwValueError("weights_descriptor: size (", weights->size().width, ", ", weights->size().height, ", ",
                        weights->size().channels, ") differs in width or height from the labels' (", s.width, ", ",
                        s.height, ", ", s.channels, ")");
    labels_ = imageFromDescriptor(device, labels);
    if (weights) weights_ = imageFromDescriptor(device, *weights);
    makeLossImage(lossImageSize);
}

CNNLossLabels::CNNLossLabels(const Device& device, LossSize lossImageSize, ImagePtr labels, ImagePtr weights)
    : State(device), labels_(std::move(labels)), weights_(std::move(weights)) {
    if (!labels_) throwValueError("labels_image: missing");
    if (labels_->device() != device) throwValueError("labels_image: belongs to another device");
    if (labels_->numberOfImages() != 1) throwValueError("labels_image: must hold one image");
    if (weights_) {
        if (weights_->device() != device) throwValueError("weights_image: belongs to another device");
        if (weights_->width() != labels_->width() || weights_->height() != labels_->height() ||
            weights_->numberOfImages() != 1)
            throwValueError("weights_image: is ", sizeText(*weights_), " but the labels image ", sizeText(*labels_),
                            " (the width and height must match)");
    }
    makeLossImage(lossImageSize);
}

void CNNLossLabels::makeLossImage(LossSize size) {
    checkSize(size, "loss_image_size");
    const bool scalar = size.width == 1 && size.height == 1 && size.channels == 1;
    // Per element: the labels' width and height, and the source's channels, which labels wider
    // than the source (see coversSize) exceed, so any count up to the labels' is accepted.
    if (!scalar && !(size.width == labels_->width() && size.height == labels_->height() &&
                     size.channels <= labels_->featureChannels()))
        throwValueError("loss_image_size: must be (1, 1, 1) or the labels' width and height with at most their ",
                        "feature channels (", sizeText(*labels_), "), got (", size.width, ", ", size.height, ", ",
                        size.channels, ")");
    loss_ = imageOfSize(device_, size);
}

// ---- CNNLossDescriptor --------------------------------------------------------------------------------

CNNLossDescriptor CNNLossDescriptor::make(CNNLossType type, CNNReductionType reduction) {
    CNNLossDescriptor d;
    d.lossType = type;
    d.reductionType = reduction;
    d.validate();
    return d;
}

void CNNLossDescriptor::validate() const {
    if (uint32_t(lossType) >= uint32_t(kLossTypeCount))
        throwValueError("loss_type: unknown CNNLossType ", uint32_t(lossType));
    if (int32_t(reductionType) < 0 || int32_t(reductionType) > kReductionSumByNonZeroWeights)
        throwValueError("reduction_type: unknown CNNReductionType ", int32_t(reductionType));
    if (lossType == CNNLossType::CosineDistance && reductionType != CNNReductionType::Sum)
        throwValueError("reduction_type: CosineDistance supports only CNNReductionType.SUM (MPS)");
    if (!std::isfinite(weight)) throwValueError("weight: must be finite, got ", weight);
    if (!(labelSmoothing >= 0.0f && labelSmoothing <= 1.0f))
        throwValueError("label_smoothing: must be in [0, 1], got ", labelSmoothing);
    if (numberOfClasses < 1 || numberOfClasses > (int64_t(1) << 24))
        throwValueError("number_of_classes: must be in [1, 2^24], got ", numberOfClasses);
    if (!(epsilon >= 0.0f) || !std::isfinite(epsilon)) throwValueError("epsilon: must be finite and >= 0, got ", epsilon);
    if (!(delta > 0.0f) || !std::isfinite(delta)) throwValueError("delta: must be finite and > 0, got ", delta);
}

// ---- the loss kernels as CNN kernels ------------------------------------------------------------------

namespace loss_kernel {

namespace {
bool isDefaultClip(const Region& r) {
    const Region d = rectNoClip();
    return r.origin.x == d.origin.x && r.origin.y == d.origin.y && r.origin.z == d.origin.z &&
           r.size.width == d.size.width && r.size.height == d.size.height && r.size.depth == d.size.depth;
}

[[noreturn]] void notSupported(const Kernel& kernel, const char* property) {
    throwValueError(property, ": ", kernel.className(), " reads and writes whole images (MPS: a non-default ",
                    property, " is not supported); leave it at its default");
}
}  // namespace

void requireWholeImages(const CNNKernel& k) {
    if (k.offset.x != 0 || k.offset.y != 0 || k.offset.z != 0) notSupported(k, "offset");
    if (!isDefaultClip(k.clipRect)) notSupported(k, "clip_rect");
    if (k.sourceFeatureChannelOffset != 0) notSupported(k, "source_feature_channel_offset");
    if (k.sourceFeatureChannelMaxCount != UINT64_MAX) notSupported(k, "source_feature_channel_max_count");
    if (k.destinationFeatureChannelOffset != 0) notSupported(k, "destination_feature_channel_offset");
}

void requireWholeImages(const CNNBinaryKernel& k) {
    if (k.primaryOffset.x != 0 || k.primaryOffset.y != 0 || k.primaryOffset.z != 0) notSupported(k, "primary_offset");
    if (k.secondaryOffset.x != 0 || k.secondaryOffset.y != 0 || k.secondaryOffset.z != 0)
        notSupported(k, "secondary_offset");
    if (!isDefaultClip(k.clipRect)) notSupported(k, "clip_rect");
    if (k.primarySourceFeatureChannelOffset != 0) notSupported(k, "primary_source_feature_channel_offset");
    if (k.secondarySourceFeatureChannelOffset != 0) notSupported(k, "secondary_source_feature_channel_offset");
    if (k.primarySourceFeatureChannelMaxCount != UINT64_MAX) notSupported(k, "primary_source_feature_channel_max_count");
    if (k.secondarySourceFeatureChannelMaxCount != UINT64_MAX)
        notSupported(k, "secondary_source_feature_channel_max_count");
    if (k.destinationFeatureChannelOffset != 0) notSupported(k, "destination_feature_channel_offset");
}

ImageBatch allocate(CommandBuffer& cb, const std::shared_ptr<ImageAllocator>& allocator, const Kernel* kernel,
                    const ImageBatch& sources, const std::function<ImageDescriptor(const Image&)>& descriptorOf) {
    ImageBatch destinations;
    for (const ImagePtr& s : sources) {
        if (!s) throwValueError("source_images: contains None");
        kernel_support::requireSingleImage(s, "source_images");
    }
    for (const ImagePtr& s : sources) {
        ImageDescriptor d = descriptorOf(*s);
        d.numberOfImages = 1;
        destinations.push_back(kernel_support::allocateDestinations(cb, allocator, d, kernel, 1, false).front());
    }
    return destinations;
}

}  // namespace loss_kernel

// The generic CNN kernel encodes take no labels: MPS marks them unavailable on the loss kernels.
#define MPSGRAD_NO_GENERIC_ENCODE(Class, Use)                                                             \
    void Class::encodeImpl(CommandBuffer&, const std::vector<UnaryDispatch>&, const StateBatch&) {         \
        throwTypeError(#Class ": the CNNKernel encodes without labels are unavailable (as in MPS); use " Use); \
    }

// ---- CNNLoss ------------------------------------------------------------------------------------------

CNNLoss::CNNLoss(const Device& device, const CNNLossDescriptor& descriptor)
    : CNNKernel(device), descriptor_(descriptor) {
    descriptor_.validate();
}

MPSGRAD_NO_GENERIC_ENCODE(CNNLoss, "encode(command_buffer, source_image, labels[, destination_image])")

void CNNLoss::encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels,
                     const ImagePtr& destination) {
    encodeBatch(cb, ImageBatch{source}, {labels}, ImageBatch{destination});
}

ImagePtr CNNLoss::encode(CommandBuffer& cb, const ImagePtr& source, const LossLabelsPtr& labels) {
    return encodeBatch(cb, ImageBatch{source}, {labels}).at(0);
}

ImageBatch CNNLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                                const std::vector<LossLabelsPtr>& labels) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    ImageBatch destinations = loss_kernel::allocate(cb, destinationImageAllocator, this, sources,
                                                    [](const Image& s) { return s.descriptor(); });
    encodeBatch(cb, sources, labels, destinations);
    return destinations;
}

void CNNLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const std::vector<LossLabelsPtr>& labels,
                          const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    const size_t N = sources.size();
    if (labels.size() != N) throwValueError("labels: ", labels.size(), " labels for ", N, " source images");
    if (destinations.size() != N)
        throwValueError("destination_images: ", destinations.size(), " images for ", N, " source images");
    std::vector<LossPassImages> images(N);
    for (size_t i = 0; i < N; ++i) {
        if (!labels[i]) throwValueError("labels: item ", i, " is None");
        labels[i]->checkUsable(cb, "labels");
        images[i] = {sources[i], labels[i]->labelsImage(), labels[i]->weightsImage(), destinations[i],
                     labels[i]->lossImage()};
    }
    encodeLossPass(device_, cb, descriptor_, images, "labels");
    for (size_t i = 0; i < N; ++i) labels[i]->noteRead();
}

// ---- the pass shared by CNNLoss and the split loss kernels ------------------------------------------------

void encodeLossPass(const Device& device, CommandBuffer& cb, const CNNLossDescriptor& d,
                    const std::vector<LossPassImages>& images, const char* labelsName, bool labelGradients) {
    d.validate();
    const size_t N = images.size();
    if (N == 0) throwValueError("source_images: empty");
    if (!images[0].source) throwValueError("source_images: contains None");
    const Image& first = *images[0].source;
    const int64_t W = first.width(), H = first.height(), C = first.featureChannels();
    const bool perElement = d.reductionType == CNNReductionType::None;
    for (size_t i = 0; i < N; ++i) {
        const LossPassImages& im = images[i];
        if (!im.source || !im.labels || !im.gradient || !im.loss)
            throwValueError("encode: image ", i, " or its labels is None");
        const Image& s = *im.source;
        s.checkUsable(cb, "source_image");
        im.gradient->checkUsable(cb, "destination_image");
        host_access::noteKernelWrite(cb, im.gradient.get());  // the host reads it after completion
        host_access::noteKernelWrite(cb, im.loss.get());
        if (s.numberOfImages() != 1 || im.gradient->numberOfImages() != 1)
            throwValueError("source_image: images with number_of_images > 1 are not supported; use "
                            "batch_representation()");
        if (s.width() != W || s.height() != H || s.featureChannels() != C)
            throwValueError("source_images: image ", i, " is ", sizeText(s), ", image 0 ", sizeText(first));
        if (!coversSize(*im.labels, LossSize{W, H, C}))
            throwValueError(labelsName, ": the labels image is ", sizeText(*im.labels), " but the source image ",
                            sizeText(s), " (labels need its width and height and at least its feature channels)");
        if (im.weights && !coversSize(*im.weights, LossSize{W, H, C}))
            throwValueError("weights: the weights image is ", sizeText(*im.weights), " but the source image ",
                            sizeText(s), " (weights need its width and height and at least its feature channels)");
        if (!sameSize(*im.gradient, LossSize{W, H, C}))
            throwValueError("destination_image: is ", sizeText(*im.gradient), " but the source image ", sizeText(s));
        const Image& lossImage = *im.loss;
        if (perElement && !coversSize(lossImage, LossSize{W, H, C}))
            throwValueError(labelsName, ": reduction NONE needs a loss image of the source's size ", sizeText(s),
                            " (loss_image_size), got ", sizeText(lossImage));
        if (!perElement && !sameSize(lossImage, LossSize{1, 1, 1}))
            throwValueError(labelsName, ": a reduced loss needs a (1, 1, 1) loss image (loss_image_size), got ",
                            sizeText(lossImage));
        for (const ImagePtr& other : {im.labels, im.weights, im.loss})
            if (other) other->checkUsable(cb, labelsName);
    }
    const int64_t pixels = W * H;
    if (int64_t(N) * pixels > INT32_MAX / 2) throwValueError("source_images: too many pixels in one batch");

    // FLOAT16 images take part through float32 shadows (core/float16_shadow.h).
    Float32Shadows shadows(cb);
    ImageBatch sources, gradients;
    for (const LossPassImages& im : images) {
        sources.push_back(im.source);
        gradients.push_back(im.gradient);
    }
    shadows.cover({&sources, &gradients});  // one conversion per batch block
    std::vector<LossPassImages> shadowed = images;
    for (LossPassImages& im : shadowed) {
        im.source = shadows.read(im.source);
        im.labels = shadows.read(im.labels);
        im.weights = shadows.read(im.weights);
        im.gradient = shadows.write(im.gradient);
        im.loss = shadows.write(im.loss);
    }
    Backend& backend = device.backend();
    BufferSlice partials, results;
    if (!perElement) {
        partials = BufferSlice{backend.newBuffer(size_t(N) * size_t(pixels) * 2 * sizeof(float)), 0};
        results = BufferSlice{backend.newBuffer(size_t(N) * 2 * sizeof(float)), 0};
    }
    for (size_t i = 0; i < N; ++i) {
        const LossPassImages& im = shadowed[i];
        LossElementsParams p{};
        p.source = im.source->layout(0, C);
        p.labels = im.labels->layout(0, C);
        p.destination = im.gradient->layout(0, C);
        p.hasWeights = im.weights ? 1 : 0;
        p.weights = im.weights ? im.weights->layout(0, C) : p.labels;
        p.loss = perElement ? im.loss->layout(0, C) : p.labels;
        p.batch = 1;
        p.lossType = int32_t(d.lossType);
        p.reductionType = int32_t(d.reductionType);
        p.weight = d.weight;
        p.labelSmoothing = d.labelSmoothing;
        p.numberOfClasses = float(d.numberOfClasses);
        p.epsilon = d.epsilon;
        p.delta = d.delta;
        p.partialsOffset = int32_t(int64_t(i) * pixels);
        p.labelGradients = labelGradients ? 1 : 0;
        backend.lossElements(cb, p, im.source->storage(0), im.labels->storage(0),
                             im.weights ? im.weights->storage(0) : BufferSlice{}, im.gradient->storage(0),
                             perElement ? im.loss->storage(0) : BufferSlice{}, partials);
    }
    if (!perElement) {
        LossReduceParams r{};
        r.images = int32_t(N);
        r.pixelsPerImage = int32_t(pixels);
        r.reductionType = int32_t(d.reductionType);
        r.acrossBatch = d.reduceAcrossBatch ? 1 : 0;
        r.meanCount = float(d.lossType == CNNLossType::SoftMaxCrossEntropy ? pixels : pixels * C);
        r.scaleGradient = d.scaleGradientByReduction ? 1 : 0;
        backend.lossReduce(cb, r, partials, results);
        const bool scaled = d.scaleGradientByReduction && (d.reductionType == CNNReductionType::Mean ||
                                                           d.reductionType == CNNReductionType::SumByNonZeroWeights);
        for (size_t i = 0; i < N; ++i) {
            if (scaled) {
                LossScaleParams s{};
                s.destination = shadowed[i].gradient->layout(0, C);
                s.batch = 1;
                s.resultIndex = int32_t(i);
                backend.lossScaleGradient(cb, s, results, shadowed[i].gradient->storage(0));
            }
            backend.copyBuffer(cb, results.advancedBy(2 * i * sizeof(float)), shadowed[i].loss->storage(0),
                               sizeof(float));
        }
    }
    shadows.finish();
    for (size_t i = 0; i < N; ++i) images[i].source->noteRead();  // the callers account for the labels
}

// ---- the split loss (10.15) -----------------------------------------------------------------------------

namespace {

// A new 1x1x1 image holding `value`.
ImagePtr scalarImage(const Device& device, float value) {
    ImagePtr image = imageOfSize(device, LossSize{1, 1, 1});
    image->writeBytes(&value, DataLayout::HeightxWidthxFeatureChannels, 0);
    return image;
}

// destination = primary * secondary, an operand of size 1x1x1 being broadcast (strides 0).
void encodeProduct(CNNMultiply& multiply, CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                   const ImagePtr& destination) {
    auto scalar = [](const Image& i) { return i.width() == 1 && i.height() == 1 && i.featureChannels() == 1; };
    const int64_t ps = scalar(*primary) ? 0 : 1, ss = scalar(*secondary) ? 0 : 1;
    multiply.primaryStrideInPixelsX = multiply.primaryStrideInPixelsY = ps;
    multiply.primaryStrideInFeatureChannels = ps;
    multiply.secondaryStrideInPixelsX = multiply.secondaryStrideInPixelsY = ss;
    multiply.secondaryStrideInFeatureChannels = ss;
    // An operand may be wider than the destination (weights wider than the loss source): its first
    // channels are the ones that pair with the destination's.
    const uint64_t channels = uint64_t(destination->featureChannels());
    multiply.primarySourceFeatureChannelMaxCount = multiply.secondarySourceFeatureChannelMaxCount = channels;
    multiply.encode(cb, primary, secondary, StatePtr{}, destination);
}

void noteLabelsRead(const ImageBatch& labels, const ImageBatch& weights) {
    for (const ImageBatch* batch : {&labels, &weights})
        for (const ImagePtr& image : *batch) image->noteRead();
}

}  // namespace

NNLossKernel::NNLossKernel(const CNNLossDescriptor& descriptor) : descriptor_(descriptor) {
    descriptor_.validate();
}

// Each setter validates the whole descriptor and keeps the old value on error.
#define MPSGRAD_LOSS_SETTER(Name, field, Type)   \
    void NNLossKernel::Name(Type value) {        \
        CNNLossDescriptor d = descriptor_;       \
        d.field = value;                         \
        d.validate();                            \
        descriptor_ = d;                         \
    }
MPSGRAD_LOSS_SETTER(setWeight, weight, float)
MPSGRAD_LOSS_SETTER(setLabelSmoothing, labelSmoothing, float)
MPSGRAD_LOSS_SETTER(setEpsilon, epsilon, float)
MPSGRAD_LOSS_SETTER(setDelta, delta, float)
#undef MPSGRAD_LOSS_SETTER

ImageDescriptor NNLossKernel::lossImageDescriptor(const Image& source) const {
    const bool perElement = descriptor_.reductionType == CNNReductionType::None;
    return ImageDescriptor::make(ImageFeatureChannelFormat::Float32, perElement ? source.width() : 1,
                                 perElement ? source.height() : 1, perElement ? source.featureChannels() : 1);
}

std::vector<LossPassImages> NNLossKernel::passImages(const ImageBatch& sources, const ImageBatch& labels,
                                                     const ImageBatch& weights) const {
    const size_t N = sources.size();
    if (labels.size() != N) throwValueError("labels: ", labels.size(), " label images for ", N, " source images");
    if (!weights.empty() && weights.size() != N)
        throwValueError("weights: ", weights.size(), " weight images for ", N, " source images (or None)");
    std::vector<LossPassImages> images(N);
    for (size_t i = 0; i < N; ++i) {
        if (!sources[i]) throwValueError("source_images: item ", i, " is None");
        if (!labels[i]) throwValueError("labels: item ", i, " is None");
        images[i].source = sources[i];
        images[i].labels = labels[i];
        images[i].weights = weights.empty() ? nullptr : weights[i];
        if (!weights.empty() && !weights[i]) throwValueError("weights: item ", i, " is None");
    }
    return images;
}

std::vector<std::shared_ptr<NNLossGradientState>> NNLossKernel::lossStates(const StateBatch& states, size_t count,
                                                                          const char* what) {
    std::vector<std::shared_ptr<NNLossGradientState>> out;
    if (states.empty()) return out;
    if (states.size() != count) throwValueError(what, ": ", states.size(), " states for ", count, " source images");
    for (size_t i = 0; i < count; ++i) {
        auto state = std::dynamic_pointer_cast<NNLossGradientState>(states[i]);
        if (!state)
            throwTypeError(what, ": item ", i, " is ", states[i] ? states[i]->className() : "None",
                           ", expected a state from NNForwardLoss.result_state_batch / temporary_result_state_batch");
        out.push_back(std::move(state));
    }
    return out;
}

StateBatch NNForwardLoss::resultStateBatch(const ImageBatch& sources) const {
    StateBatch states;
    for (size_t i = 0; i < sources.size(); ++i) {
        if (!sources[i]) throwValueError("source_images: item ", i, " is None");
        states.push_back(std::make_shared<NNLossGradientState>(device_, false, nullptr));
    }
    return states;
}

StateBatch NNForwardLoss::temporaryResultStateBatch(CommandBuffer& cb, const ImageBatch& sources) const {
    checkCommandBuffer(cb);
    StateBatch states;
    for (size_t i = 0; i < sources.size(); ++i) {
        if (!sources[i]) throwValueError("source_images: item ", i, " is None");
        states.push_back(std::make_shared<NNLossGradientState>(device_, true, &cb));
    }
    return states;
}

int64_t NNForwardLoss::destinationFeatureChannels(const Image& source) const {
    return lossImageDescriptor(source).featureChannels;
}

void NNForwardLoss::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    if (sourceImages.empty() || !sourceImages.front()) return;
    const ImageDescriptor loss = lossImageDescriptor(*sourceImages.front());
    descriptor.width = loss.width;
    descriptor.height = loss.height;
    descriptor.featureChannels = loss.featureChannels;
}

MPSGRAD_NO_GENERIC_ENCODE(NNForwardLoss, "encode_batch(command_buffer, source_images, labels, weights, ...)")

void NNForwardLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& labels,
                                const ImageBatch& weights, const StateBatch& destinationStates,
                                const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    std::vector<LossPassImages> images = passImages(sources, labels, weights);
    const auto states = lossStates(destinationStates, sources.size(), "destination_states");
    for (const auto& state : states) state->checkUsable(cb, "destination_states");
    host_access::noteKernelWrites(cb, states);
    if (destinations.size() != sources.size())
        throwValueError("destination_images: ", destinations.size(), " images for ", sources.size(),
                        " source images");
    for (size_t i = 0; i < images.size(); ++i) {
        if (!destinations[i]) throwValueError("destination_images: item ", i, " is None");
        const ImageDescriptor want = lossImageDescriptor(*sources[i]);
        const Image& d = *destinations[i];
        if (d.width() != want.width || d.height() != want.height || d.featureChannels() != want.featureChannels ||
            d.numberOfImages() != 1)
            throwValueError("destination_images: image ", i, " is ", sizeText(d), " but the loss is ", want.width,
                            " x ", want.height, " x ", want.featureChannels,
                            descriptor_.reductionType == CNNReductionType::None ? " (reduction NONE: per element)"
                                                                                : " (a reduced loss)");
        images[i].loss = destinations[i];
        images[i].gradient = std::make_shared<Image>(device_, sources[i]->descriptor());  // not kept
    }
    encodeLossPass(device_, cb, descriptor_, images, "labels");
    noteLabelsRead(labels, weights);
    // The properties are host values known now: the state records them at encode time.
    for (const auto& state : states) {
        state->weight = descriptor_.weight;
        state->labelSmoothing = descriptor_.labelSmoothing;
        state->epsilon = descriptor_.epsilon;
        state->delta = descriptor_.delta;
        state->snapshot.batchSize = int64_t(sources.size());
        state->snapshot.encoded = true;
    }
}

ImageBatch NNForwardLoss::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& labels,
                                      const ImageBatch& weights, StateBatch* outStates, bool statesAreTemporary) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    ImageBatch destinations = loss_kernel::allocate(cb, destinationImageAllocator, this, sources,
                                                    [this](const Image& s) { return lossImageDescriptor(s); });
    StateBatch states;
    if (outStates) states = statesAreTemporary ? temporaryResultStateBatch(cb, sources) : resultStateBatch(sources);
    encodeBatch(cb, sources, labels, weights, states, destinations);
    if (outStates) *outStates = std::move(states);
    return destinations;
}

NNLossGradient::NNLossGradient(const Device& device, const CNNLossDescriptor& descriptor)
    : CNNBinaryKernel(device), NNLossKernel(descriptor), multiply_(std::make_shared<CNNMultiply>(device)) {}

ImageDescriptor NNLossGradient::destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch&) {
    if (sourceImages.size() != 2 || !sourceImages[1])
        throwValueError("source_images: expected [source_gradient, source_image], got ", sourceImages.size(),
                        " image(s)");
    ImageDescriptor d = sourceImages[1]->descriptor();
    d.numberOfImages = 1;
    return d;
}

CNNLossDescriptor NNLossGradient::encodeDescriptor(CommandBuffer& cb, const StateBatch& sourceStates,
                                                  size_t count) const {
    CNNLossDescriptor d = descriptor_;
    const auto states = lossStates(sourceStates, count, "source_states");
    for (size_t i = 0; i < states.size(); ++i) {
        const NNLossGradientState& s = *states[i];
        s.checkUsable(cb, "source_states");
        if (!s.snapshot.encoded)
            throwValueError("source_states: item ", i, " was not written by an NNForwardLoss encode");
        // One pass serves the whole batch (reduce_across_batch couples the images), so the
        // states must agree; they do when one forward encode wrote them.
        const NNLossGradientState& first = *states[0];
        if (s.weight != first.weight || s.labelSmoothing != first.labelSmoothing || s.epsilon != first.epsilon ||
            s.delta != first.delta)
            throwValueError("source_states: item ", i, " carries other properties than item 0 (states of different "
                            "forward encodes)");
    }
    if (!states.empty()) {
        d.weight = states[0]->weight;
        d.labelSmoothing = states[0]->labelSmoothing;
        d.epsilon = states[0]->epsilon;
        d.delta = states[0]->delta;
    }
    return d;
}

void NNLossGradient::encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sources,
                                 const ImageBatch& labels, const ImageBatch& weights, const StateBatch& sourceStates,
                                 const ImageBatch& destinations) {
    loss_kernel::requireWholeImages(*this);
    checkCommandBuffer(cb);
    const CNNLossDescriptor d = encodeDescriptor(cb, sourceStates, sources.size());
    std::vector<LossPassImages> images = passImages(sources, labels, weights);
    const size_t N = sources.size();
    if (sourceGradients.size() != N)
        throwValueError("source_gradients: ", sourceGradients.size(), " images for ", N, " source images");
    if (destinations.size() != N)
        throwValueError("destination_gradients: ", destinations.size(), " images for ", N, " source images");
    for (size_t i = 0; i < N; ++i) {
        const ImageDescriptor want = lossImageDescriptor(*sources[i]);
        if (!sourceGradients[i]) throwValueError("source_gradients: item ", i, " is None");
        const Image& g = *sourceGradients[i];
        if (g.width() != want.width || g.height() != want.height || g.featureChannels() != want.featureChannels ||
            g.numberOfImages() != 1)
            throwValueError("source_gradients: image ", i, " is ", sizeText(g), " but the forward loss is ",
                            want.width, " x ", want.height, " x ", want.featureChannels);
        if (!destinations[i]) throwValueError("destination_gradients: item ", i, " is None");
        g.checkUsable(cb, "source_gradients");
        images[i].gradient = std::make_shared<Image>(device_, sources[i]->descriptor());
        images[i].loss = std::make_shared<Image>(device_, want);  // the loss itself is not needed
    }
    // destination_gradients are checked by the pass through the scratch gradient's size and by the
    // multiply (same size as the source).
    for (size_t i = 0; i < N; ++i)
        if (!sameSize(*destinations[i], LossSize{sources[i]->width(), sources[i]->height(),
                                                 sources[i]->featureChannels()}))
            throwValueError("destination_gradients: image ", i, " is ", sizeText(*destinations[i]),
                            " but the source image ", sizeText(*sources[i]));
    if (d.reductionType == CNNReductionType::None) {
        // Per element: the gradient of sum(G * w * l) is that of the loss weighted by G * w (exact
        // also for SoftMaxCE, whose channels are coupled: G is not a factor of its gradient).
        const ImagePtr scalarWeight = images[0].weights ? nullptr : scalarImage(device_, d.weight);
        for (size_t i = 0; i < N; ++i) {
            auto weighted = std::make_shared<Image>(device_, sources[i]->descriptor());
            encodeProduct(*multiply_, cb, sourceGradients[i], images[i].weights ? images[i].weights : scalarWeight,
                          weighted);
            images[i].weights = weighted;
            images[i].gradient = destinations[i];
        }
        encodeLossPass(device_, cb, d, images, "labels", computeLabelGradients_);
        noteLabelsRead(labels, weights);
        for (const StatePtr& state : sourceStates) state->noteRead();
        return;
    }
    encodeLossPass(device_, cb, d, images, "labels", computeLabelGradients_);
    noteLabelsRead(labels, weights);
    for (const StatePtr& state : sourceStates) state->noteRead();
    for (size_t i = 0; i < N; ++i) encodeProduct(*multiply_, cb, images[i].gradient, sourceGradients[i], destinations[i]);
}

ImageBatch NNLossGradient::encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                       const ImageBatch& sources, const ImageBatch& labels,
                                       const ImageBatch& weights, const StateBatch& sourceStates) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    ImageBatch destinations = loss_kernel::allocate(cb, destinationImageAllocator, this, sources,
                                                    [](const Image& s) { return s.descriptor(); });
    encodeBatch(cb, sourceGradients, sources, labels, weights, sourceStates, destinations);
    return destinations;
}

NNInitialGradient::NNInitialGradient(const Device& device)
    : CNNKernel(device), multiply_(std::make_shared<CNNMultiply>(device)) {}

MPSGRAD_NO_GENERIC_ENCODE(NNInitialGradient, "encode(command_buffer, source_image[, destination_image])")

void NNInitialGradient::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    if (destinations.size() != sources.size())
        throwValueError("destination_images: ", destinations.size(), " images for ", sources.size(),
                        " source images");
    for (size_t i = 0; i < sources.size(); ++i) {
        if (!sources[i]) throwValueError("source_images: item ", i, " is None");
        if (!destinations[i]) throwValueError("destination_images: item ", i, " is None");
        sources[i]->checkUsable(cb, "source_image");
        if (!sameSize(*destinations[i], LossSize{sources[i]->width(), sources[i]->height(),
                                                 sources[i]->featureChannels()}))
            throwValueError("destination_images: image ", i, " is ", sizeText(*destinations[i]),
                            " but the source image ", sizeText(*sources[i]));
    }
    const ImagePtr one = scalarImage(device_, 1.0f);
    for (size_t i = 0; i < sources.size(); ++i) {
        encodeProduct(*multiply_, cb, one, one, destinations[i]);
        sources[i]->noteRead();  // only its size is used, but MPS counts the read
    }
}

ImageBatch NNInitialGradient::encodeBatch(CommandBuffer& cb, const ImageBatch& sources) {
    checkCommandBuffer(cb);
    loss_kernel::requireWholeImages(*this);
    ImageBatch destinations = loss_kernel::allocate(cb, destinationImageAllocator, this, sources,
                                                    [](const Image& s) { return s.descriptor(); });
    encodeBatch(cb, sources, destinations);
    return destinations;
}

}  // namespace mpsgrad
