#include "core/image.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include "core/checked.h"
#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/half.h"
#include "core/unorm.h"

#include "core/host_access.h"

namespace mpsgrad {

// ---- ImageDescriptor ------------------------------------------------------------------------

ImageDescriptor ImageDescriptor::make(ImageFeatureChannelFormat format, int64_t width, int64_t height,
                                      int64_t featureChannels, int64_t numberOfImages, uint32_t usage) {
    ImageDescriptor d;
    d.featureChannelFormat = format;
    d.width = width;
    d.height = height;
    d.featureChannels = featureChannels;
    d.numberOfImages = numberOfImages;
    d.usage = usage;
    return d;
}

void ImageDescriptor::validate(const char* what) const {
    if (width < 1 || height < 1 || featureChannels < 1 || numberOfImages < 1)
        throwValueError(what, ": width, height, feature_channels and number_of_images must be >= 1, got ", width,
                        "x", height, "x", featureChannels, " with ", numberOfImages, " image(s)");
    // Every size derived from the descriptor (floats per image, bytes of all images) must be
    // representable; otherwise an allocation of the wrapped-around size would be too small.
    checked::floatBytes(checked::product({roundUpTo4(featureChannels), width, height, numberOfImages}, what), what);
    // The kernels address an image with 32-bit indices (as the Metal shaders do), so larger images
    // are rejected here, up front, rather than by the first kernel that meets one.
    const uint64_t floatsPerImage = checked::product({roundUpTo4(featureChannels), width, height}, what);
    if (floatsPerImage > uint64_t(INT32_MAX))
        throwValueError(what, ": a ", width, "x", height, "x", featureChannels, " image holds ", floatsPerImage,
                        " floats (channels padded to 4); images are limited to 2**31 - 1 floats each");
    if (bytesPerElement() == 0)
        throwValueError(what, ": the channel format must be ImageFeatureChannelFormat.FLOAT32, FLOAT16, UNORM8 or "
                              "UNORM16, got ", featureChannelFormatName(featureChannelFormat));
}

size_t ImageDescriptor::bytesPerElement() const {
    switch (featureChannelFormat) {
        case ImageFeatureChannelFormat::Float32: return sizeof(float);
        case ImageFeatureChannelFormat::Float16:
        case ImageFeatureChannelFormat::Unorm16: return 2;
        case ImageFeatureChannelFormat::Unorm8: return 1;
        default: return 0;  // NONE or a value outside the enumeration: rejected by validate()
    }
}

std::string featureChannelFormatName(ImageFeatureChannelFormat format) {
    switch (format) {
        case ImageFeatureChannelFormat::None: return "NONE";
        case ImageFeatureChannelFormat::Unorm8: return "UNORM8";
        case ImageFeatureChannelFormat::Unorm16: return "UNORM16";
        case ImageFeatureChannelFormat::Float16: return "FLOAT16";
        case ImageFeatureChannelFormat::Float32: return "FLOAT32";
    }
    return "code " + std::to_string(static_cast<uint32_t>(format));
}

// ---- Image ----------------------------------------------------------------------------------

namespace {
size_t bytesPerImage(const ImageDescriptor& d) {
    return size_t(checked::mul(checked::product({roundUpTo4(d.featureChannels), d.width, d.height}, "image_descriptor"),
                               d.bytesPerElement(), "image_descriptor"));
}

// Bytes of `count` allocations of the descriptor's images, checked.
thread_local bool unspecifiedImageStorage = false;

BufferFill imageStorageFill() { return unspecifiedImageStorage ? BufferFill::Unspecified : BufferFill::Zero; }

size_t batchBytes(const ImageDescriptor& d, size_t count) {
    return size_t(checked::mul(checked::mul(bytesPerImage(d), uint64_t(d.numberOfImages), "image_descriptor"), count,
                               "count"));
}
}  // namespace

Image::Image(const Device& device, const ImageDescriptor& descriptor)
    : device_(device), descriptor_(descriptor), pixelStride_(roundUpTo4(descriptor.featureChannels)) {
    descriptor_.validate("image_descriptor");
    storage_ = BufferSlice{device_.backend().newBuffer(batchBytes(descriptor_, 1), imageStorageFill()), 0};
}

Image::Image(const Device& device, const ImageDescriptor& descriptor, BufferSlice storage, int64_t pixelStride,
             int64_t channelBase, ImagePtr parent)
    : device_(device),
      descriptor_(descriptor),
      storage_(std::move(storage)),
      pixelStride_(pixelStride),
      channelBase_(channelBase),
      parent_(std::move(parent)) {}

ImageBatch Image::makeBatch(const Device& device, const ImageDescriptor& descriptor, size_t count) {
    descriptor.validate("image_descriptor");
    if (count == 0) throwValueError("count: an image batch needs at least one image");
    size_t each = batchBytes(descriptor, 1);
    auto buffer = device.backend().newBuffer(batchBytes(descriptor, count), imageStorageFill());
    ImageBatch batch;
    for (size_t i = 0; i < count; ++i)
        batch.push_back(ImagePtr(new Image(device, descriptor, BufferSlice{buffer, i * each},
                                           roundUpTo4(descriptor.featureChannels), 0, nullptr)));
    return batch;
}

ImagePtr Image::wrap(const Device& device, const ImageDescriptor& descriptor, BufferSlice storage,
                     int64_t pixelStride) {
    descriptor.validate("image_descriptor");
    if (pixelStride < descriptor.featureChannels)
        throwValueError("pixel_stride: ", pixelStride, " is below the image's ", descriptor.featureChannels,
                        " feature channels");
    uint64_t bytes = checked::mul(
        checked::product({pixelStride, descriptor.width, descriptor.height, descriptor.numberOfImages}, "storage"),
        descriptor.bytesPerElement(), "storage");
    if (!storage || storage.offset > storage.buffer->length() || storage.buffer->length() - storage.offset < bytes)
        throwValueError("storage: the image needs ", bytes, " bytes but the buffer provides ",
                        storage ? storage.buffer->length() - std::min(storage.offset, storage.buffer->length()) : 0);
    return ImagePtr(new Image(device, descriptor, std::move(storage), pixelStride, 0, nullptr));
}

int64_t Image::precision() const {
    switch (featureChannelFormat()) {
        case ImageFeatureChannelFormat::Float16: return 11;
        case ImageFeatureChannelFormat::Unorm8: return 8;
        case ImageFeatureChannelFormat::Unorm16: return 16;
        default: return 24;
    }
}

size_t Image::resourceSize() const { return storageElements() * bytesPerElement(); }

void Image::checkAccessible(const char* what) const {
    // A view (sub-image, batch representation) is usable only while its parent is.
    if (parent_) parent_->checkAccessible(what);
}

BufferSlice Image::storage(int64_t imageIndex) const {
    checkAccessible("image");
    if (imageIndex < 0 || imageIndex >= numberOfImages())
        throwValueError("image_index: must be in [0, ", numberOfImages() - 1, "], got ", imageIndex);
    return storage_.advancedBy(size_t(imageIndex) * size_t(imageStride()) * bytesPerElement());
}

ImagePtr Image::float32Twin(BufferSlice storage) const {
    ImageDescriptor d = descriptor_;
    d.featureChannelFormat = ImageFeatureChannelFormat::Float32;
    return ImagePtr(new Image(device_, d, std::move(storage), pixelStride_, channelBase_, nullptr));
}

ImageLayout Image::layout(int64_t channelOffset, int64_t channels) const {
    if (!isFloat32())
        throwValueError("image: a ", featureChannelFormatName(featureChannelFormat()),
                        " image reached a float32-only kernel path without its float32 conversion "
                        "(an mpsgrad bug: please report it)");
    return storageLayout(channelOffset, channels);
}

ImageLayout Image::storageLayout(int64_t channelOffset, int64_t channels) const {
    // The kernels address an image with 32-bit indices (as the Metal shaders do): reject larger
    // images up front with a clear message instead of wrapping around.
    if (imageStride() > INT32_MAX)
        throwValueError("image: a ", width(), "x", height(), "x", featureChannels(), " image holds ", imageStride(),
                        " floats (channels padded to 4); the kernels support images of at most 2**31 - 1 floats");
    ImageLayout l;
    l.width = checked::toInt32(width(), "image width");
    l.height = checked::toInt32(height(), "image height");
    l.pixelStride = checked::toInt32(pixelStride_, "image pixel stride");
    l.imageStride = checked::toInt32(imageStride(), "image stride");
    l.channelOffset = checked::toInt32(checked::addSigned(channelBase_, channelOffset, "feature channel offset"),
                                       "feature channel offset");
    l.channels = checked::toInt32(channels, "feature channels");
    return l;
}

void Image::checkUsable(const CommandBuffer& cb, const char* what) const {
    if (device_ != cb.device())
        throwValueError(what, ": the image belongs to device '", device_.name(), "' but the command buffer to '",
                        cb.device().name(), "'");
    checkAccessible(what);
    if (parent_) parent_->checkUsable(cb, what);
}

bool Image::isFollowedBy(const Image& other) const {
    return storage_.buffer == other.storage_.buffer && pixelStride_ == other.pixelStride_ &&
           channelBase_ == other.channelBase_ && width() == other.width() && height() == other.height() &&
           featureChannels() == other.featureChannels() && featureChannelFormat() == other.featureChannelFormat() &&
           other.storage_.offset == storage_.offset + storageElements() * bytesPerElement();
}

ImagePtr Image::subImageWithFeatureChannelRange(int64_t location, int64_t length) {
    checkAccessible("image");
    if (location < 0 || location % 4 != 0)
        throwValueError("feature_channel_range: location must be a non-negative multiple of 4, got ", location);
    if (length < 1 || location + length > featureChannels())
        throwValueError("feature_channel_range: [", location, ", ", location + length, ") is outside the image's ",
                        featureChannels(), " feature channels");
    if (length % 4 != 0 && location + length != featureChannels())
        throwValueError("feature_channel_range: length must be a multiple of 4 unless the range ends at the last "
                        "channel, got ", length);
    ImageDescriptor d = descriptor_;
    d.featureChannels = length;
    return ImagePtr(new Image(device_, d, storage_, pixelStride_, channelBase_ + location, shared_from_this()));
}

ImageBatch Image::batchRepresentation() {
    checkAccessible("image");
    ImageBatch batch;
    ImageDescriptor d = descriptor_;
    d.numberOfImages = 1;
    for (int64_t n = 0; n < numberOfImages(); ++n)
        batch.push_back(ImagePtr(new Image(device_, d, storage(n), pixelStride_, channelBase_, shared_from_this())));
    return batch;
}

int64_t Image::channelsForReadWrite(const ImageReadWriteParams& params) const {
    int64_t offset = params.featureChannelOffset;
    if (offset < 0 || offset > featureChannels() - 1)
        throwValueError("feature_channel_offset: must be in [0, ", featureChannels() - 1, "], got ", offset);
    if (offset % 4 != 0) throwValueError("feature_channel_offset: must be a multiple of 4, got ", offset);
    int64_t count = params.numberOfFeatureChannelsToReadWrite < 0 ? featureChannels() - offset
                                                                  : params.numberOfFeatureChannelsToReadWrite;
    if (count < 1 || count > featureChannels() - offset)
        throwValueError("number_of_feature_channels: ", count, " channels from offset ", offset,
                        " exceed the image's ", featureChannels(), " feature channels");
    return count;
}

namespace {
void checkImageIndex(int64_t index, int64_t count) {
    if (index < 0 || index >= count)
        throwValueError("image_index: must be in [0, ", count - 1, "], got ", index);
}
}  // namespace

namespace {
// Visits the elements of a read or write: f(storage element index, array element index) for
// `count` channels of every pixel, the array in HWC or CHW order.
template <class F>
void forEachElement(int64_t pixels, int64_t count, int64_t pixelStride, bool chw, F f) {
    for (int64_t p = 0; p < pixels; ++p)
        for (int64_t c = 0; c < count; ++c) f(p * pixelStride + c, chw ? c * pixels + p : p * count + c);
}

// Copies elements of type T between the storage and an array, as they are.
template <class T>
void copyElements(T* storage, T* array, int64_t pixels, int64_t count, int64_t pixelStride, bool chw, bool toArray) {
    if (toArray)
        forEachElement(pixels, count, pixelStride, chw, [&](int64_t s, int64_t a) { array[a] = storage[s]; });
    else
        forEachElement(pixels, count, pixelStride, chw, [&](int64_t s, int64_t a) { storage[s] = array[a]; });
}

// The same for elements of `element` bytes (1, 2 or 4); whole float32 pixels' channels are copied
// with memcpy in HWC order.
void copyStored(size_t element, char* storage, void* array, int64_t pixels, int64_t count, int64_t pixelStride,
                bool chw, bool toArray) {
    if (element == 4 && !chw) {
        const size_t bytes = size_t(count) * sizeof(float);
        for (int64_t p = 0; p < pixels; ++p) {
            char* stored = storage + p * pixelStride * 4;
            char* row = static_cast<char*>(array) + p * count * 4;
            std::memcpy(toArray ? row : stored, toArray ? stored : row, bytes);
        }
        return;
    }
    if (element == 1)
        copyElements(reinterpret_cast<uint8_t*>(storage), static_cast<uint8_t*>(array), pixels, count, pixelStride,
                     chw, toArray);
    else if (element == 2)
        copyElements(reinterpret_cast<uint16_t*>(storage), static_cast<uint16_t*>(array), pixels, count, pixelStride,
                     chw, toArray);
    else
        copyElements(reinterpret_cast<uint32_t*>(storage), static_cast<uint32_t*>(array), pixels, count, pixelStride,
                     chw, toArray);
}
}  // namespace

void Image::readBytes(float* bytes, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params) const {
    checkImageIndex(imageIndex, numberOfImages());
    // Host reads follow Metal: not while a pending command buffer writes the image (core/host_access.h).
    host_access::checkHostRead(storage(imageIndex), size_t(imageStride()) * bytesPerElement(), "read_bytes");
    int64_t count = channelsForReadWrite(params);
    const int64_t pixels = width() * height(), first = channelBase_ + params.featureChannelOffset;
    const bool chw = layout != DataLayout::HeightxWidthxFeatureChannels;
    char* base = reinterpret_cast<char*>(storage(imageIndex).floats()) + first * int64_t(bytesPerElement());
    switch (featureChannelFormat()) {
        case ImageFeatureChannelFormat::Float16: {
            const auto* halves = reinterpret_cast<const uint16_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { bytes[a] = halfBitsToFloat(halves[s]); });
            return;
        }
        case ImageFeatureChannelFormat::Unorm8: {
            const auto* codes = reinterpret_cast<const uint8_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { bytes[a] = unorm8ToFloat(codes[s]); });
            return;
        }
        case ImageFeatureChannelFormat::Unorm16: {
            const auto* codes = reinterpret_cast<const uint16_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { bytes[a] = unorm16ToFloat(codes[s]); });
            return;
        }
        default: readElements(bytes, layout, imageIndex, params);
    }
}

void Image::writeBytes(const float* bytes, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params) {
    checkImageIndex(imageIndex, numberOfImages());
    int64_t count = channelsForReadWrite(params);
    const int64_t pixels = width() * height(), first = channelBase_ + params.featureChannelOffset;
    const bool chw = layout != DataLayout::HeightxWidthxFeatureChannels;
    char* base = reinterpret_cast<char*>(storage(imageIndex).floats()) + first * int64_t(bytesPerElement());
    switch (featureChannelFormat()) {
        case ImageFeatureChannelFormat::Float16: {
            auto* halves = reinterpret_cast<uint16_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { halves[s] = floatToHalfBits(bytes[a]); });
            return;
        }
        case ImageFeatureChannelFormat::Unorm8: {
            auto* codes = reinterpret_cast<uint8_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { codes[s] = floatToUnorm8(bytes[a]); });
            return;
        }
        case ImageFeatureChannelFormat::Unorm16: {
            auto* codes = reinterpret_cast<uint16_t*>(base);
            forEachElement(pixels, count, pixelStride_, chw,
                           [&](int64_t s, int64_t a) { codes[s] = floatToUnorm16(bytes[a]); });
            return;
        }
        default: writeElements(bytes, layout, imageIndex, params);
    }
}

void Image::readElements(void* elements, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params) const {
    checkImageIndex(imageIndex, numberOfImages());
    int64_t count = channelsForReadWrite(params);
    const int64_t pixels = width() * height(), first = channelBase_ + params.featureChannelOffset;
    char* base = reinterpret_cast<char*>(storage(imageIndex).floats()) + first * int64_t(bytesPerElement());
    copyStored(bytesPerElement(), base, elements, pixels, count, pixelStride_,
               layout != DataLayout::HeightxWidthxFeatureChannels, true);
}

void Image::writeElements(const void* elements, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params) {
    checkImageIndex(imageIndex, numberOfImages());
    int64_t count = channelsForReadWrite(params);
    const int64_t pixels = width() * height(), first = channelBase_ + params.featureChannelOffset;
    char* base = reinterpret_cast<char*>(storage(imageIndex).floats()) + first * int64_t(bytesPerElement());
    // copyStored only reads the array when it writes the storage.
    copyStored(bytesPerElement(), base, const_cast<void*>(elements), pixels, count, pixelStride_,
               layout != DataLayout::HeightxWidthxFeatureChannels, false);
}

void Image::synchronizeOnCommandBuffer(CommandBuffer& cb) { checkUsable(cb, "image"); }

// ---- TemporaryImage -------------------------------------------------------------------------

TemporaryImage::TemporaryImage(CommandBuffer& cb, const ImageDescriptor& descriptor)
    : Image(cb.device(), descriptor), commandBufferId_(cb.id()) {
    cb.checkEncodable();
    host_access::noteTemporaryStorage(cb, storage_.buffer, "temporary image");
}

TemporaryImage::TemporaryImage(CommandBuffer& cb, const ImageDescriptor& descriptor, BufferSlice storage)
    : Image(cb.device(), descriptor, std::move(storage), roundUpTo4(descriptor.featureChannels), 0, nullptr),
      commandBufferId_(cb.id()) {
    host_access::noteTemporaryStorage(cb, storage_.buffer, "temporary image");
}

ImageBatch TemporaryImage::makeBatch(CommandBuffer& cb, const ImageDescriptor& descriptor, size_t count) {
    cb.checkEncodable();
    descriptor.validate("image_descriptor");
    if (count == 0) throwValueError("count: an image batch needs at least one image");
    size_t each = batchBytes(descriptor, 1);
    auto buffer = cb.device().backend().newBuffer(batchBytes(descriptor, count), imageStorageFill());
    ImageBatch batch;
    for (size_t i = 0; i < count; ++i)
        batch.push_back(ImagePtr(new TemporaryImage(cb, descriptor, BufferSlice{buffer, i * each})));
    return batch;
}

void TemporaryImage::setReadCount(int64_t count) {
    if (readCount_ == 0)
        throwValueError("read_count: the temporary image's read count already reached 0 and its storage was "
                        "released; it cannot be changed");
    if (count < 0) throwValueError("read_count: must be >= 0, got ", count);
    readCount_ = count;
    if (readCount_ == 0) storage_.buffer.reset();  // encoded work keeps its own reference
}

void TemporaryImage::checkAccessible(const char* what) const {
    if (readCount_ == 0)
        throwValueError(what, ": the temporary image's read_count is 0; it was already consumed by the reads it "
                              "was created for (raise read_count before the last read to read it again)");
}

void TemporaryImage::checkUsable(const CommandBuffer& cb, const char* what) const {
    Image::checkUsable(cb, what);
    if (cb.id() != commandBufferId_)
        throwValueError(what, ": a temporary image is valid only on the command buffer it was created for");
}

void TemporaryImage::noteRead() {
    checkAccessible("image");
    if (--readCount_ == 0) storage_.buffer.reset();
}

// ---- allocators -----------------------------------------------------------------------------

ImageBatch ImageAllocator::imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                      const Kernel* kernel, size_t count) {
    ImageBatch batch;
    for (size_t i = 0; i < count; ++i) batch.push_back(imageForCommandBuffer(cb, descriptor, kernel));
    return batch;
}

namespace {
class TemporaryAllocator final : public ImageAllocator {
public:
    ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& d, const Kernel*) override {
        return std::make_shared<TemporaryImage>(cb, d);
    }
    ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& d, const Kernel*,
                                          size_t count) override {
        return TemporaryImage::makeBatch(cb, d, count);
    }
};

class PersistentAllocator final : public ImageAllocator {
public:
    ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& d, const Kernel*) override {
        return std::make_shared<Image>(cb.device(), d);
    }
    ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& d, const Kernel*,
                                          size_t count) override {
        return Image::makeBatch(cb.device(), d, count);
    }
};
}  // namespace

std::shared_ptr<ImageAllocator> ImageAllocator::temporaryAllocator() {
    static auto allocator = std::make_shared<TemporaryAllocator>();
    return allocator;
}

std::shared_ptr<ImageAllocator> ImageAllocator::persistentAllocator() {
    static auto allocator = std::make_shared<PersistentAllocator>();
    return allocator;
}

UnspecifiedImageStorageScope::UnspecifiedImageStorageScope(bool active) : previous_(unspecifiedImageStorage) {
    unspecifiedImageStorage = active;
}

UnspecifiedImageStorageScope::~UnspecifiedImageStorageScope() { unspecifiedImageStorage = previous_; }

size_t imageBatchIncrementReadCount(const ImageBatch& batch, int64_t amount) {
    std::set<Image*> unique;
    for (const auto& image : batch)
        if (image && unique.insert(image.get()).second) {
            if (auto* temp = dynamic_cast<TemporaryImage*>(image.get()))
                temp->setReadCount(temp->readCount() + amount);
        }
    return unique.size();
}

}  // namespace mpsgrad
