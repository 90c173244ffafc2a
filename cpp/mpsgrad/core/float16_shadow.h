// Float32 shadows of FLOAT16 and UNORM images: how the float32 kernels handle half and normalized
// integer storage (docs/float16.md, docs/storage_formats.md).
//
// A kernel's encode path asks for the images it reads with read() and for the images it writes
// with write(); a FLOAT32 image comes back unchanged, a FLOAT16, UNORM8 or UNORM16 image comes
// back as a FLOAT32 image of the same geometry (pixel stride, channel base of a sub-image view,
// images) whose storage one backend op filled by converting the stored elements. finish()
// encodes, after the kernel, the conversion of every written shadow back into its storage. A
// kernel that reads and writes half natively (Kernel::readsFloat16Natively) asks with
// `halfNatively`: its FLOAT16 images then come back unchanged, UNORM images still get shadows. Images that share
// storage (the same image twice, sub-image views of one parent, an in-place destination that is
// also a source) share one shadow, so the kernel sees them alias exactly as the originals do.
//
// A batch allocated in one block (Image::makeBatch, TemporaryImage::makeBatch, the graph's
// intermediates) gets one shadow for all its images when the encode path calls cover() first (the
// batch forms of read() and write() do): one conversion op per batch instead of one per image,
// and an image whose storage lies inside an existing shadow uses that shadow's slice.
//
// Read counts, usability checks and clip rectangles stay with the original images: the encode
// path validates the originals first and decrements their read counts, the shadows are plain
// images that live as long as the encoded work.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <map>
#include <tuple>

#include "core/image.h"

namespace mpsgrad {

class CommandBuffer;

class Float32Shadows {
public:
    explicit Float32Shadows(CommandBuffer& cb, bool halfNatively = false) : cb_(cb), halfNatively_(halfNatively) {}
    Float32Shadows(const Float32Shadows&) = delete;
    Float32Shadows& operator=(const Float32Shadows&) = delete;

    // The image a float32 kernel reads in place of `image` (null stays null).
    ImagePtr read(const ImagePtr& image);
    ImageBatch read(const ImageBatch& images);
    // The image a float32 kernel writes in place of `image`; its current contents are converted
    // in as well, so pixels and channels the kernel leaves alone keep their values.
    ImagePtr write(const ImagePtr& image);
    ImageBatch write(const ImageBatch& images);
    // Makes one shadow per run of touching or overlapping storage of one format among the images
    // of the batches that need shadows (a batch allocated in one block converts in one op); read()
    // and write() of those images then hand out slices of it. Images that need no shadow and null
    // entries are skipped.
    void cover(std::initializer_list<const ImageBatch*> batches);
    // Converts every written shadow back into its storage (once each).
    void finish();
    // True when some image needed a shadow.
    bool any() const { return !shadows_.empty(); }

private:
    struct Shadow {
        BufferSlice original;  // the stored elements (from storage(0) of the image)
        BufferSlice floats;    // the float32 copy
        size_t elements = 0;
        ImageFeatureChannelFormat format = ImageFeatureChannelFormat::Float16;  // of the original
        bool written = false;
    };
    // True when a float32 kernel must see `image` through a shadow.
    bool needsShadow(const ImagePtr& image) const {
        return image && !image->isFloat32() && !(halfNatively_ && image->isFloat16());
    }
    // Storage identity: buffer, byte offset, element count.
    using Key = std::tuple<const Buffer*, size_t, size_t>;
    // The shadow holding `image`'s storage (made if none does) and the element offset of that
    // storage inside it.
    Shadow& shadowOf(const Image& image, size_t& elementOffset);
    Shadow& makeShadow(const BufferSlice& original, size_t elements, ImageFeatureChannelFormat format);

    CommandBuffer& cb_;
    bool halfNatively_;
    std::map<Key, Shadow> shadows_;
    std::vector<Key> order_;  // creation order, for a deterministic write-back order
};

// The storage a forward pass saw, for identity checks across passes (a gradient kernel telling
// the forward's input from its output): for the storage of a float32 shadow, the slice of the
// FLOAT16 or UNORM storage it shadows (each pass has shadows of its own); any other slice unchanged.
BufferSlice shadowedStorage(const BufferSlice& slice);

// True when some image of the batches is FLOAT16.
bool anyFloat16(std::initializer_list<const ImageBatch*> batches);

}  // namespace mpsgrad
