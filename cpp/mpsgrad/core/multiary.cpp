#include "core/multiary.h"

#include <algorithm>

#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/float16_shadow.h"
#include "core/host_access.h"
#include "core/kernel_support.h"

namespace mpsgrad {

using namespace kernel_support;  // core/kernel_support.h

// ---- NNMultiaryGradientState -----------------------------------------------------------------------

NNMultiaryGradientState::NNMultiaryGradientState(const Device& device, size_t sourceCount, bool temporary,
                                                 const CommandBuffer* cb)
    : State(device, {}, temporary, cb), snapshots(sourceCount) {}

// ---- CNNMultiaryKernel: per-index properties ------------------------------------------------------

CNNMultiaryKernel::CNNMultiaryKernel(const Device& device, size_t sourceCount) : Kernel(device) {
    if (sourceCount < 1) throwValueError("source_count: must be at least 1, got ", sourceCount);
    if (sourceCount > 4096) throwValueError("source_count: must be at most 4096, got ", sourceCount);
    offsets_.assign(sourceCount, Offset{});
    channelOffsets_.assign(sourceCount, 0);
    channelMaxCounts_.assign(sourceCount, UINT64_MAX);
    edgeModes_.assign(sourceCount, ImageEdgeMode::Zero);
    for (auto* v : {&kernelWidths_, &kernelHeights_, &strideXs_, &strideYs_, &dilationXs_, &dilationYs_})
        v->assign(sourceCount, 1);
}

size_t CNNMultiaryKernel::checkIndex(size_t index) const {
    if (index >= offsets_.size())
        throwValueError("index: ", index, " is out of range for a ", className(), " with source_count ",
                        offsets_.size());
    return index;
}

namespace {

int64_t positive(int64_t value, const char* what) {
    if (value < 1) throwValueError(what, ": must be >= 1, got ", value);
    return value;
}

}  // namespace

Offset CNNMultiaryKernel::offsetAtIndex(size_t i) const { return offsets_[checkIndex(i)]; }
void CNNMultiaryKernel::setOffset(const Offset& o, size_t i) { offsets_[checkIndex(i)] = o; }
int64_t CNNMultiaryKernel::sourceFeatureChannelOffsetAtIndex(size_t i) const { return channelOffsets_[checkIndex(i)]; }
void CNNMultiaryKernel::setSourceFeatureChannelOffset(int64_t v, size_t i) {
    checkIndex(i);
    checkChannelOffset(v, "source_feature_channel_offset");
    channelOffsets_[i] = v;
}
uint64_t CNNMultiaryKernel::sourceFeatureChannelMaxCountAtIndex(size_t i) const {
    return channelMaxCounts_[checkIndex(i)];
}
void CNNMultiaryKernel::setSourceFeatureChannelMaxCount(uint64_t v, size_t i) { channelMaxCounts_[checkIndex(i)] = v; }
ImageEdgeMode CNNMultiaryKernel::edgeModeAtIndex(size_t i) const { return edgeModes_[checkIndex(i)]; }
void CNNMultiaryKernel::setEdgeMode(ImageEdgeMode m, size_t i) { edgeModes_[checkIndex(i)] = m; }
int64_t CNNMultiaryKernel::kernelWidthAtIndex(size_t i) const { return kernelWidths_[checkIndex(i)]; }
void CNNMultiaryKernel::setKernelWidth(int64_t v, size_t i) { kernelWidths_[checkIndex(i)] = positive(v, "kernel_width"); }
int64_t CNNMultiaryKernel::kernelHeightAtIndex(size_t i) const { return kernelHeights_[checkIndex(i)]; }
void CNNMultiaryKernel::setKernelHeight(int64_t v, size_t i) {
    kernelHeights_[checkIndex(i)] = positive(v, "kernel_height");
}
int64_t CNNMultiaryKernel::strideInPixelsXAtIndex(size_t i) const { return strideXs_[checkIndex(i)]; }
void CNNMultiaryKernel::setStrideInPixelsX(int64_t v, size_t i) {
    strideXs_[checkIndex(i)] = positive(v, "stride_in_pixels_x");
}
int64_t CNNMultiaryKernel::strideInPixelsYAtIndex(size_t i) const { return strideYs_[checkIndex(i)]; }
void CNNMultiaryKernel::setStrideInPixelsY(int64_t v, size_t i) {
    strideYs_[checkIndex(i)] = positive(v, "stride_in_pixels_y");
}
int64_t CNNMultiaryKernel::dilationRateXAtIndex(size_t i) const { return dilationXs_[checkIndex(i)]; }
void CNNMultiaryKernel::setDilationRateX(int64_t v, size_t i) {
    dilationXs_[checkIndex(i)] = positive(v, "dilation_rate_x");
}
int64_t CNNMultiaryKernel::dilationRateYAtIndex(size_t i) const { return dilationYs_[checkIndex(i)]; }
void CNNMultiaryKernel::setDilationRateY(int64_t v, size_t i) {
    dilationYs_[checkIndex(i)] = positive(v, "dilation_rate_y");
}

// ---- CNNMultiaryKernel: validation -----------------------------------------------------------------

int64_t CNNMultiaryKernel::availableChannels(const Image& source, size_t index) const {
    return kernel_support::availableChannels(source, channelOffsets_[checkIndex(index)], channelMaxCounts_[index],
                                             "source_feature_channel_offset", "source image");
}

void CNNMultiaryKernel::checkDestinationChannels(const Image& destination, int64_t channels) const {
    checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
    if (destinationFeatureChannelOffset + channels > destination.featureChannels())
        throwValueError("destination_image: has ", destination.featureChannels(), " feature channels but ",
                        className(), " writes ", channels, " channels at destination_feature_channel_offset ",
                        destinationFeatureChannelOffset);
}

namespace {

// ValueError unless `sources` holds one image per source index.
void checkSourceCount(size_t given, size_t expected, const char* what) {
    if (given != expected)
        throwValueError(what, ": the kernel has source_count ", expected, " but ", given, " source(s) were given");
}

}  // namespace

std::vector<MultiaryDispatch> CNNMultiaryKernel::resolve(const CommandBuffer& cb,
                                                         const std::vector<ImageBatch>& sourceBatches,
                                                         const ImageBatch& destinations) const {
    checkSourceCount(sourceBatches.size(), sourceCount(), "source_images");
    for (size_t s = 0; s < sourceBatches.size(); ++s)
        if (sourceBatches[s].size() != destinations.size())
            throwValueError("source_images: source ", s, "'s batch has ", sourceBatches[s].size(),
                            " image(s) but destination_images has ", destinations.size());
    if (destinations.empty()) throwValueError("destination_images: the batch is empty");
    std::vector<MultiaryDispatch> dispatches;
    for (size_t i = 0; i < destinations.size(); ++i) {
        MultiaryDispatch d;
        requireObject(destinations[i], "destination_image", "an Image");
        destinations[i]->checkUsable(cb, "destination_image");
        d.destination = destinations[i];
        d.clip = nonEmptyClip(clipRect, *d.destination, "destination image");
        d.destinationImageIndex = d.clip.origin.z;
        d.imageCount = int64_t(d.clip.size.depth);
        for (size_t s = 0; s < sourceCount(); ++s) {
            const ImagePtr& source = sourceBatches[s][i];
            requireObject(source, "source_images", "an Image");
            source->checkUsable(cb, "source_images");
            const int64_t z = offsets_[s].z;
            if (z < 0 || z >= source->numberOfImages())
                throwValueError("offset: source ", s, "'s offset z = ", z, " is outside its ",
                                source->numberOfImages(), " image(s)");
            d.sources.push_back(source);
            d.channelOffsets.push_back(channelOffsets_[s]);
            d.channels.push_back(availableChannels(*source, s));
            d.sourceImageIndices.push_back(z);
            d.imageCount = std::min<int64_t>(d.imageCount, source->numberOfImages() - z);
        }
        dispatches.push_back(std::move(d));
    }
    return dispatches;
}

// ---- CNNMultiaryKernel: encode forms ---------------------------------------------------------------

void CNNMultiaryKernel::encodeResolved(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches,
                                       const StateBatch& states, const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    auto dispatches = resolve(cb, sourceBatches, destinations);
    if (!states.empty()) {
        requireSameLength(destinations.size(), states.size(), "destination_images", "destination_states");
        for (const auto& s : states) {
            requireObject(s, "destination_state", "a State");
            s->checkUsable(cb, "destination_state");
        }
    }
    Float32Shadows shadows(cb);  // FLOAT16 images: core/float16_shadow.h
    ImageBatch involved = destinations;
    for (const auto& batch : sourceBatches) involved.insert(involved.end(), batch.begin(), batch.end());
    shadows.cover({&involved});  // one conversion per batch block
    for (auto& d : dispatches) {
        for (auto& source : d.sources) source = shadows.read(source);
        d.destination = shadows.write(d.destination);
    }
    encodeImpl(cb, dispatches, states);
    shadows.finish();
    host_access::noteKernelWrites(cb, destinations);
    ImageBatch reads;
    for (const auto& batch : sourceBatches) reads.insert(reads.end(), batch.begin(), batch.end());
    noteReadsOfUnique(reads);
}

void CNNMultiaryKernel::encode(CommandBuffer& cb, const ImageBatch& sources, const StatePtr& state,
                               const ImagePtr& destination) {
    std::vector<ImageBatch> batches;
    for (const auto& s : sources) batches.push_back({s});
    encodeResolved(cb, batches, state ? StateBatch{state} : StateBatch{}, {destination});
}

void CNNMultiaryKernel::encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches,
                                    const StateBatch& states, const ImageBatch& destinations) {
    encodeResolved(cb, sourceBatches, states, destinations);
}

ImagePtr CNNMultiaryKernel::encode(CommandBuffer& cb, const ImageBatch& sources, StatePtr* destinationState,
                                   bool destinationStateIsTemporary) {
    std::vector<ImageBatch> batches;
    for (const auto& s : sources) batches.push_back({s});
    StateBatch states;
    ImageBatch results =
        encodeBatch(cb, batches, destinationState ? &states : nullptr, destinationStateIsTemporary);
    if (destinationState) *destinationState = states.empty() ? nullptr : states.front();
    return results.front();
}

ImageBatch CNNMultiaryKernel::encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches,
                                          StateBatch* destinationStates, bool destinationStateIsTemporary) {
    checkCommandBuffer(cb);
    checkSourceCount(sourceBatches.size(), sourceCount(), "source_images");
    const size_t count = sourceBatches.front().size();
    if (count == 0) throwValueError("source_images: the batch is empty");
    for (size_t s = 0; s < sourceBatches.size(); ++s) {
        if (sourceBatches[s].size() != count)
            throwValueError("source_images: source ", s, "'s batch has ", sourceBatches[s].size(),
                            " image(s) but source 0's has ", count);
        for (const auto& image : sourceBatches[s]) {
            requireObject(image, "source_images", "an Image");
            requireSingleImage(image, "source_images");
        }
    }
    ImageBatch firsts;
    for (const auto& batch : sourceBatches) firsts.push_back(batch.front());
    ImageDescriptor descriptor = destinationImageDescriptor(firsts, {});
    ImageBatch destinations = allocateDestinations(
        cb, destinationImageAllocator, descriptor, this, count,
        writesEveryDestinationPixel() && writesWholeDestination(descriptor, destinationFeatureChannelOffset, clipRect));
    StateBatch states;
    if (destinationStates) {
        for (size_t i = 0; i < count; ++i) {
            if (isResultStateReusedAcrossBatch() && i > 0) {
                states.push_back(states.front());
                continue;
            }
            ImageBatch entry;
            for (const auto& batch : sourceBatches) entry.push_back(batch[i]);
            states.push_back(makeResultState(entry, destinationStateIsTemporary ? &cb : nullptr));
        }
        if (!states.empty() && !states.front()) states.clear();
    }
    encodeResolved(cb, sourceBatches, states, destinations);
    if (destinationStates) *destinationStates = states;
    return destinations;
}

StatePtr CNNMultiaryKernel::makeResultState(const ImageBatch&, CommandBuffer*) { return nullptr; }

StatePtr CNNMultiaryKernel::resultState(const ImageBatch& sources, const StateBatch&, const ImagePtr&) {
    checkSourceCount(sources.size(), sourceCount(), "source_images");
    for (const auto& s : sources) requireObject(s, "source_images", "an Image");
    return makeResultState(sources, nullptr);
}

StatePtr CNNMultiaryKernel::temporaryResultState(CommandBuffer& cb, const ImageBatch& sources, const StateBatch&,
                                                 const ImagePtr&) {
    checkCommandBuffer(cb);
    checkSourceCount(sources.size(), sourceCount(), "source_images");
    for (const auto& s : sources) requireObject(s, "source_images", "an Image");
    return makeResultState(sources, &cb);
}

ImageDescriptor CNNMultiaryKernel::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                              const StateBatch& sourceStates) {
    checkSourceCount(sourceImages.size(), sourceCount(), "source_images");
    for (const auto& s : sourceImages) requireObject(s, "source_images", "an Image");
    const Image& first = *sourceImages[0];
    const uint32_t method = padding ? padding->paddingMethod() : defaultPaddingMethod();
    int64_t width, height, offsetX, offsetY;
    const int64_t kw = (kernelWidths_[0] - 1) * dilationXs_[0] + 1;
    const int64_t kh = (kernelHeights_[0] - 1) * dilationYs_[0] + 1;
    paddedAxis(first.width(), strideXs_[0], kw, method, padding::Axis::X, isBackwards(), width, offsetX);
    paddedAxis(first.height(), strideYs_[0], kh, method, padding::Axis::Y, isBackwards(), height, offsetY);
    if (width < 1 || height < 1)
        throwValueError("source_images: a ", first.width(), "x", first.height(),
                        " image is too small under padding method ", method);
    // Like the binary kernel's primary offset: every source is read from the padded origin.
    for (auto& o : offsets_) {
        o.x = offsetX;
        o.y = offsetY;
    }
    ImageDescriptor descriptor = ImageDescriptor::make(first.featureChannelFormat(), width, height,
                                                       destinationFeatureChannels(sourceImages));
    if (padding && (method & PaddingMethod::Custom))
        descriptor = padding->destinationImageDescriptor(sourceImages, sourceStates, *this, descriptor);
    descriptor.validate("padding");
    return descriptor;
}

}  // namespace mpsgrad
