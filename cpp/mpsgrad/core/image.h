// ImageDescriptor, Image, TemporaryImage, image batches and allocators (MPSImage family).
//
// Storage: float32, IEEE half (FLOAT16, docs/float16.md) or 8 / 16-bit normalized unsigned
// integers (UNORM8 / UNORM16, docs/storage_formats.md), NHWC with each pixel's channels padded to
// a multiple of 4 (MPS keeps channels in RGBA slices), images of a batch or of a multi-image Image
// back to back. Padding lanes are zero and every kernel leaves them zero. The kernels compute in
// float32: an image of another format reaches them through a float32 shadow
// (core/float16_shadow.h) unless the kernel reads and writes half natively (FLOAT16 only).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/device.h"
#include "core/types.h"
#include "metal/common_params.h"

namespace mpsgrad {

class CommandBuffer;
class Kernel;

// MPSImageDescriptor
struct ImageDescriptor {
    ImageFeatureChannelFormat featureChannelFormat = ImageFeatureChannelFormat::Float32;
    int64_t width = 1;
    int64_t height = 1;
    int64_t featureChannels = 1;
    int64_t numberOfImages = 1;
    uint32_t usage = 3;  // MTLTextureUsageShaderRead | ShaderWrite

    // +imageDescriptorWithChannelFormat:width:height:featureChannels:[numberOfImages:usage:]
    static ImageDescriptor make(ImageFeatureChannelFormat format, int64_t width, int64_t height,
                                int64_t featureChannels, int64_t numberOfImages = 1, uint32_t usage = 3);
    // Throws ValueError naming `what` when a dimension is not positive or the format unsupported.
    void validate(const char* what) const;
    // Bytes of one stored element: 4 for FLOAT32, 2 for FLOAT16 and UNORM16, 1 for UNORM8.
    size_t bytesPerElement() const;

    // Serialization (docs/serialization.md); deserialize throws SerializationError.
    std::vector<uint8_t> serialize() const;
    static ImageDescriptor deserialize(const uint8_t* data, size_t size);
};

// MPSImageReadWriteParams
struct ImageReadWriteParams {
    int64_t featureChannelOffset = 0;
    int64_t numberOfFeatureChannelsToReadWrite = -1;  // -1: all channels after the offset
};

// The format's Python name ("FLOAT32", "UNORM8", ...), for error messages; "code N" for a value
// outside the enumeration.
std::string featureChannelFormatName(ImageFeatureChannelFormat format);

class Image;
using ImagePtr = std::shared_ptr<Image>;
using ImageBatch = std::vector<ImagePtr>;

class Image : public std::enable_shared_from_this<Image> {
public:
    // -initWithDevice:imageDescriptor:
    Image(const Device& device, const ImageDescriptor& descriptor);
    virtual ~Image() = default;

    // `count` images of one descriptor in one contiguous allocation, so kernels can
    // process the whole batch in one dispatch.
    static ImageBatch makeBatch(const Device& device, const ImageDescriptor& descriptor, size_t count);

    // Wraps existing host memory (zero-copy import). `storage` must hold the image in
    // this class's layout with a pixel stride of `pixelStride` floats.
    static ImagePtr wrap(const Device& device, const ImageDescriptor& descriptor, BufferSlice storage,
                         int64_t pixelStride);

    const Device& device() const { return device_; }
    int64_t width() const { return descriptor_.width; }
    int64_t height() const { return descriptor_.height; }
    int64_t featureChannels() const { return descriptor_.featureChannels; }
    int64_t numberOfImages() const { return descriptor_.numberOfImages; }
    ImageFeatureChannelFormat featureChannelFormat() const { return descriptor_.featureChannelFormat; }
    uint32_t usage() const { return descriptor_.usage; }
    // Significant bits of the storage (MPS's precision: float 24, half 11, unorm 8 / 16).
    int64_t precision() const;
    int64_t pixelSize() const { return int64_t(bytesPerElement()) * pixelStride_; }
    bool isFloat32() const { return descriptor_.featureChannelFormat == ImageFeatureChannelFormat::Float32; }
    bool isFloat16() const { return descriptor_.featureChannelFormat == ImageFeatureChannelFormat::Float16; }
    bool isUnorm() const {
        return descriptor_.featureChannelFormat == ImageFeatureChannelFormat::Unorm8 ||
               descriptor_.featureChannelFormat == ImageFeatureChannelFormat::Unorm16;
    }
    size_t bytesPerElement() const { return descriptor_.bytesPerElement(); }
    const ImageDescriptor& descriptor() const { return descriptor_; }
    // -resourceSize
    size_t resourceSize() const;
    // Parent of a sub-image view, or null.
    ImagePtr parent() const { return parent_; }

    std::string label;

    // -subImageWithFeatureChannelRange: a view aliasing `length` channels from `location`
    // (both multiples of 4, except that length may cover the image's last channels).
    ImagePtr subImageWithFeatureChannelRange(int64_t location, int64_t length);
    // -batchRepresentation: the images of a multi-image Image as single-image views.
    ImageBatch batchRepresentation();

    // -readBytes:dataLayout:imageIndex: / -writeBytes:dataLayout:imageIndex: with
    // MPSImageReadWriteParams. `bytes` holds height*width*channels floats in `layout`; a FLOAT16
    // image converts (reads exactly, writes rounding to nearest even, core/half.h), a UNORM image
    // reads x / 255 (x / 65535) and writes clamping and rounding (core/unorm.h).
    void readBytes(float* bytes, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params = {}) const;
    void writeBytes(const float* bytes, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params = {});
    // The same with elements of the storage's own type (float, half bits, uint8 or uint16), copied
    // as they are: MPS's readBytes / writeBytes in the image's format.
    void readElements(void* elements, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params = {}) const;
    void writeElements(const void* elements, DataLayout layout, int64_t imageIndex, ImageReadWriteParams params = {});
    // Number of channels a read or write with `params` touches (validated).
    int64_t channelsForReadWrite(const ImageReadWriteParams& params) const;

    // -synchronizeOnCommandBuffer: (storage is host-coherent; kept for API parity).
    void synchronizeOnCommandBuffer(CommandBuffer& cb);

    // ---- for kernels ---------------------------------------------------------------------
    virtual bool isTemporary() const { return false; }
    // Elements (floats or halves) between neighbouring pixels / neighbouring images.
    int64_t pixelStride() const { return pixelStride_; }
    int64_t imageStride() const { return pixelStride_ * descriptor_.width * descriptor_.height; }
    // The storage at image `imageIndex`; throws when the image can no longer be used.
    BufferSlice storage(int64_t imageIndex = 0) const;
    // The layout of channels [channelOffset, channelOffset + channels) of this image, for a
    // float32 kernel: throws for an image of another format (such a kernel must read it through a
    // float32 shadow, core/float16_shadow.h). storageLayout is the same for any format (in elements).
    ImageLayout layout(int64_t channelOffset, int64_t channels) const;
    ImageLayout storageLayout(int64_t channelOffset, int64_t channels) const;
    // Elements of the storage from storage(0) to the end of the last image.
    size_t storageElements() const { return size_t(imageStride()) * size_t(numberOfImages()); }
    // A FLOAT32 image of this image's geometry (pixel stride, channel base, images) whose storage is
    // `storage`: the float32 shadow of a FLOAT16 or UNORM image.
    ImagePtr float32Twin(BufferSlice storage) const;
    // Throws ValueError naming `what` when this image cannot be used with `cb`
    // (another device, a temporary image of another buffer, read count already 0).
    virtual void checkUsable(const CommandBuffer& cb, const char* what) const;
    // A kernel read this image: temporary images decrement their read count.
    virtual void noteRead() {}
    // True when `other` aliases this image's storage directly after this one, with the
    // same geometry (so a batch can be processed in one dispatch).
    bool isFollowedBy(const Image& other) const;

protected:
    Image(const Device& device, const ImageDescriptor& descriptor, BufferSlice storage, int64_t pixelStride,
          int64_t channelBase, ImagePtr parent);
    virtual void checkAccessible(const char* what) const;

    Device device_;
    ImageDescriptor descriptor_;
    BufferSlice storage_;
    int64_t pixelStride_;
    int64_t channelBase_ = 0;  // first storage channel of a sub-image view
    ImagePtr parent_;
};

// MPSTemporaryImage: valid on one command buffer, with a read count.
class TemporaryImage final : public Image {
public:
    // +temporaryImageWithCommandBuffer:imageDescriptor:
    TemporaryImage(CommandBuffer& cb, const ImageDescriptor& descriptor);
    // `count` temporary images in one contiguous allocation.
    static ImageBatch makeBatch(CommandBuffer& cb, const ImageDescriptor& descriptor, size_t count);

    int64_t readCount() const { return readCount_; }
    // Setting the count once it reached 0 is an error (the storage was released).
    void setReadCount(int64_t count);

    bool isTemporary() const override { return true; }
    void checkUsable(const CommandBuffer& cb, const char* what) const override;
    void noteRead() override;

private:
    TemporaryImage(CommandBuffer& cb, const ImageDescriptor& descriptor, BufferSlice storage);
    void checkAccessible(const char* what) const override;

    uint64_t commandBufferId_;  // CommandBuffer::id(): unique, never reused (unlike an address)
    int64_t readCount_ = 1;
};

// MPSImageAllocator
class ImageAllocator {
public:
    virtual ~ImageAllocator() = default;
    // -imageForCommandBuffer:imageDescriptor:kernel:
    virtual ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                           const Kernel* kernel) = 0;
    // -imageBatchForCommandBuffer:imageDescriptor:kernel:count: (default: one contiguous block)
    virtual ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor,
                                                  const Kernel* kernel, size_t count);

    // +[MPSTemporaryImage defaultAllocator]: temporary images, read count 1 (the kernels' default).
    static std::shared_ptr<ImageAllocator> temporaryAllocator();
    // +[MPSImage defaultAllocator]: persistent images.
    static std::shared_ptr<ImageAllocator> persistentAllocator();
};

// While one is alive on a thread, the images and image batches created on that thread get
// storage that is not zero-filled (BufferFill::Unspecified). Kernels open one around the
// allocation of destinations they will overwrite completely (CNNKernel's returning encodes).
class UnspecifiedImageStorageScope {
public:
    explicit UnspecifiedImageStorageScope(bool active);
    ~UnspecifiedImageStorageScope();
    UnspecifiedImageStorageScope(const UnspecifiedImageStorageScope&) = delete;
    UnspecifiedImageStorageScope& operator=(const UnspecifiedImageStorageScope&) = delete;

private:
    bool previous_;
};

// MPSImageBatchIncrementReadCount: touches each unique temporary image once; returns the
// number of unique images.
size_t imageBatchIncrementReadCount(const ImageBatch& batch, int64_t amount);

}  // namespace mpsgrad
