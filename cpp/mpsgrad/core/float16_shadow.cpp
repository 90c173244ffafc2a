#include "core/float16_shadow.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/checked.h"
#include "core/command_buffer.h"

namespace mpsgrad {

namespace {
// Which storage each live shadow buffer shadows (weak both ways: never keeps memory alive).
struct ShadowOrigin {
    std::weak_ptr<Buffer> shadow;
    std::weak_ptr<Buffer> original;
    size_t offset = 0;
    size_t element = 2;  // bytes of one stored element of the original
};
std::mutex originsMutex;
std::unordered_map<const Buffer*, ShadowOrigin>& origins() {
    static std::unordered_map<const Buffer*, ShadowOrigin> map;
    return map;
}

void registerShadow(const std::shared_ptr<Buffer>& shadow, const BufferSlice& original, size_t element) {
    std::lock_guard<std::mutex> lock(originsMutex);
    auto& map = origins();
    for (auto it = map.begin(); it != map.end();) it = it->second.shadow.expired() ? map.erase(it) : std::next(it);
    map[shadow.get()] = ShadowOrigin{shadow, original.buffer, original.offset, element};
}

// Elements per conversion op: ConvertFormatParams counts in int32.
constexpr size_t kMaxConvertElements = size_t(1) << 30;

// Bytes of one stored element of a format that gets shadows.
size_t elementBytes(ImageFeatureChannelFormat format) {
    return ImageDescriptor::make(format, 1, 1, 1).bytesPerElement();
}

void encodeConversion(CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination, size_t elements,
                      ImageFeatureChannelFormat format, bool toStorage) {
    const size_t stored = elementBytes(format);
    const size_t sourceElement = toStorage ? sizeof(float) : stored;
    const size_t destinationElement = toStorage ? stored : sizeof(float);
    // MPSImageFeatureChannelFormat's values are the StorageFormatCode's (metal/convert_params.h).
    const int32_t storage = int32_t(format);
    for (size_t done = 0; done < elements; done += kMaxConvertElements) {
        const size_t count = std::min(kMaxConvertElements, elements - done);
        cb.device().backend().convertImageFormat(cb, ConvertFormatParams{int32_t(count), toStorage ? 1 : 0, storage},
                                                 source.advancedBy(done * sourceElement),
                                                 destination.advancedBy(done * destinationElement));
    }
}
}  // namespace

Float32Shadows::Shadow& Float32Shadows::makeShadow(const BufferSlice& original, size_t elements,
                                                   ImageFeatureChannelFormat format) {
    Key key{original.buffer.get(), original.offset, elements};
    auto found = shadows_.find(key);
    if (found != shadows_.end()) return found->second;
    Shadow s;
    s.original = original;
    s.elements = elements;
    s.format = format;
    // Every float of the shadow is written by the conversion below: no zero fill needed.
    s.floats = BufferSlice{cb_.device().backend().newBuffer(checked::floatBytes(elements, "image"),
                                                            BufferFill::Unspecified),
                           0};
    encodeConversion(cb_, s.original, s.floats, elements, format, false);
    registerShadow(s.floats.buffer, s.original, elementBytes(format));
    order_.push_back(key);
    return shadows_.emplace(key, std::move(s)).first->second;
}

Float32Shadows::Shadow& Float32Shadows::shadowOf(const Image& image, size_t& elementOffset) {
    const BufferSlice original = image.storage(0);
    const size_t elements = image.storageElements(), element = image.bytesPerElement();
    // A shadow whose storage contains this image's (its own, or a batch's from cover()).
    for (auto& entry : shadows_) {
        Shadow& s = entry.second;
        if (s.original.buffer != original.buffer || s.format != image.featureChannelFormat() ||
            original.offset < s.original.offset)
            continue;
        const size_t offset = (original.offset - s.original.offset) / element;
        if (offset + elements <= s.elements) {
            elementOffset = offset;
            return s;
        }
    }
    elementOffset = 0;
    return makeShadow(original, elements, image.featureChannelFormat());
}

void Float32Shadows::cover(std::initializer_list<const ImageBatch*> batches) {
    // Byte ranges of the storage, by buffer and format, merged where they touch or overlap.
    struct Range {
        std::shared_ptr<Buffer> buffer;
        ImageFeatureChannelFormat format;
        size_t begin, end;
    };
    std::vector<Range> ranges;
    for (const ImageBatch* batch : batches)
        for (const auto& image : *batch)
            if (needsShadow(image)) {
                const BufferSlice storage = image->storage(0);
                if (storage)
                    ranges.push_back({storage.buffer, image->featureChannelFormat(), storage.offset,
                                      storage.offset + image->bytesPerElement() * image->storageElements()});
            }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        if (a.buffer.get() != b.buffer.get()) return std::less<const Buffer*>()(a.buffer.get(), b.buffer.get());
        if (a.format != b.format) return a.format < b.format;
        return a.begin < b.begin;
    });
    for (size_t i = 0; i < ranges.size();) {
        Range run = ranges[i];
        size_t j = i + 1;
        for (; j < ranges.size() && ranges[j].buffer == run.buffer && ranges[j].format == run.format &&
               ranges[j].begin <= run.end;
             ++j)
            run.end = std::max(run.end, ranges[j].end);
        const size_t element = elementBytes(run.format);
        // One image alone gets its shadow when it is first read or written, as without cover().
        if (j - i > 1) {
            bool overlapsExisting = false;
            for (const auto& entry : shadows_) {
                const Shadow& s = entry.second;
                overlapsExisting |= s.original.buffer == run.buffer && s.original.offset < run.end &&
                                    run.begin < s.original.offset + elementBytes(s.format) * s.elements;
            }
            // Storage already shadowed keeps its shadow (a second one would break the aliasing).
            if (!overlapsExisting)
                makeShadow(BufferSlice{run.buffer, run.begin}, (run.end - run.begin) / element, run.format);
        }
        i = j;
    }
}

ImagePtr Float32Shadows::read(const ImagePtr& image) {
    if (!needsShadow(image)) return image;
    size_t offset = 0;
    Shadow& s = shadowOf(*image, offset);
    return image->float32Twin(s.floats.advancedBy(offset * sizeof(float)));
}

ImagePtr Float32Shadows::write(const ImagePtr& image) {
    if (!needsShadow(image)) return image;
    size_t offset = 0;
    Shadow& s = shadowOf(*image, offset);
    s.written = true;
    return image->float32Twin(s.floats.advancedBy(offset * sizeof(float)));
}

ImageBatch Float32Shadows::read(const ImageBatch& images) {
    cover({&images});
    ImageBatch result;
    result.reserve(images.size());
    for (const auto& image : images) result.push_back(read(image));
    return result;
}

ImageBatch Float32Shadows::write(const ImageBatch& images) {
    cover({&images});
    ImageBatch result;
    result.reserve(images.size());
    for (const auto& image : images) result.push_back(write(image));
    return result;
}

void Float32Shadows::finish() {
    for (const Key& key : order_) {
        Shadow& s = shadows_.at(key);
        if (s.written) encodeConversion(cb_, s.floats, s.original, s.elements, s.format, true);
        s.written = false;
    }
}

BufferSlice shadowedStorage(const BufferSlice& slice) {
    if (!slice) return slice;
    std::lock_guard<std::mutex> lock(originsMutex);
    auto found = origins().find(slice.buffer.get());
    if (found == origins().end() || found->second.shadow.lock() != slice.buffer) return slice;
    auto original = found->second.original.lock();
    if (!original) return slice;
    // The shadow holds one float per stored element of the original, from offset 0.
    return BufferSlice{original, found->second.offset + slice.offset / sizeof(float) * found->second.element};
}

bool anyFloat16(std::initializer_list<const ImageBatch*> batches) {
    for (const ImageBatch* batch : batches)
        for (const auto& image : *batch)
            if (image && image->isFloat16()) return true;
    return false;
}

}  // namespace mpsgrad
