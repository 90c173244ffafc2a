#include "kernels/reshape_pad.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"
#include "kernels/reshape_pad_checks.h"

namespace mpsgrad {
namespace {

using elementwise::clipShift;

// The whole-image region a reshape reads and writes: offset.x/y 0 and no cut by clip_rect.
void checkWholeImage(const CNNKernel& k, const UnaryDispatch& d) {
    if (k.offset.x != 0 || k.offset.y != 0)
        throwValueError("offset: NNReshape reads the whole source image; offset.x and offset.y must be 0, got (",
                        k.offset.x, ", ", k.offset.y, ")");
    const Image& dst = *d.destination;
    if (d.clip.origin.x != 0 || d.clip.origin.y != 0 || int64_t(d.clip.size.width) != dst.width() ||
        int64_t(d.clip.size.height) != dst.height())
        throwValueError("clip_rect: NNReshape writes the whole destination image; clip_rect must cover its ",
                        dst.width(), "x", dst.height(), " pixels");
}

int64_t checkedElements(int64_t w, int64_t h, int64_t c) { return int64_t(checked::product({w, h, c}, "shape")); }

}  // namespace

// ---- NNReshape -------------------------------------------------------------------------------------

NNReshape::NNReshape(const Device& device) : CNNKernel(device) {}

void reshape_pad_checks::checkShape(int64_t width, int64_t height, int64_t channels, const char* names) {
    if (width < 1 || height < 1 || channels < 1)
        throwValueError(names, ": must be >= 1, got ", width, ", ", height, ", ", channels);
    checkedElements(width, height, channels);
}

template <class F>
auto NNReshape::withShape(int64_t width, int64_t height, int64_t channels, F&& run) {
    reshape_pad_checks::checkShape(width, height, channels);
    struct Reset {
        Shape& shape;
        ~Reset() { shape = Shape{}; }
    } reset{pendingShape_};
    pendingShape_ = Shape{width, height, channels};
    return run();
}

ImagePtr NNReshape::encode(CommandBuffer& cb, const ImagePtr& source, int64_t w, int64_t h, int64_t c) {
    return withShape(w, h, c, [&] { return CNNKernel::encode(cb, source); });
}

ImagePtr NNReshape::encode(CommandBuffer& cb, const ImagePtr& source, StatePtr* destinationState,
                           bool destinationStateIsTemporary, int64_t w, int64_t h, int64_t c) {
    return withShape(w, h, c, [&] { return CNNKernel::encode(cb, source, destinationState, destinationStateIsTemporary); });
}

ImageBatch NNReshape::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, StateBatch* destinationStates,
                                  bool destinationStateIsTemporary, int64_t w, int64_t h, int64_t c) {
    return withShape(w, h, c, [&] {
        return CNNKernel::encodeBatch(cb, sources, destinationStates, destinationStateIsTemporary);
    });
}

int64_t NNReshape::destinationFeatureChannels(const Image& source) const {
    return pendingShape_.channels ? pendingShape_.channels : availableSourceChannels(source);
}

void NNReshape::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    const Image& source = *sourceImages.front();
    descriptor.width = pendingShape_.width ? pendingShape_.width : source.width();
    descriptor.height = pendingShape_.height ? pendingShape_.height : source.height();
    offset.x = 0;
    offset.y = 0;
}

StatePtr NNReshape::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<NNReshapeGradientState>(device_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void NNReshape::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) {
    std::vector<ReshapeParams> params;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<NNReshapeGradientState*>(states[i].get()))
            throwTypeError("destination_state: NNReshape writes the NNReshapeGradientState made by its result_state, "
                           "got a ", states[i]->className());
        checkWholeImage(*this, d);
        const Image& src = *d.source;
        const Image& dst = *d.destination;
        checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
        const int64_t written = dst.featureChannels() - destinationFeatureChannelOffset;
        if (written < 1)
            throwValueError("destination_image: has ", dst.featureChannels(), " feature channels, none after "
                            "destination_feature_channel_offset ", destinationFeatureChannelOffset);
        const int64_t from = checkedElements(src.width(), src.height(), d.sourceChannels);
        const int64_t to = checkedElements(dst.width(), dst.height(), written);
        if (from != to)
            throwValueError("destination_image: a ", dst.width(), "x", dst.height(), "x", written, " shape holds ", to,
                            " elements but the ", src.width(), "x", src.height(), "x", d.sourceChannels,
                            " source holds ", from, "; a reshape keeps the number of elements");
        ReshapeParams p{};
        p.source = src.layout(d.sourceChannelOffset, d.sourceChannels);
        p.destination = dst.layout(destinationFeatureChannelOffset, written);
        p.batch = checked::toInt32(d.imageCount, "number of images");
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<NNReshapeGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, Offset{0, 0, offset.z}, d.sourceChannels,
                                        d.imageCount);
        state.reshapedChannels = params[i].destination.channels;
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        backend.reshapeCopy(cb, params[i], d.source->storage(d.sourceImageIndex),
                            d.destination->storage(d.destinationImageIndex));
    }
}

// ---- NNReshapeGradient -----------------------------------------------------------------------------

NNReshapeGradient::NNReshapeGradient(const Device& device) : CNNGradientKernel(device) {}

void NNReshapeGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const NNReshapeGradientState*>(&state))
        throwTypeError("gradient_state: NNReshapeGradient needs the NNReshapeGradientState made by "
                       "NNReshape.result_state, got a ", state.className());
}

namespace {

// The images a reshape / pad gradient processes: from primary_offset.z of G and clip_rect.origin.z
// of dX (the images the forward wrote and read), clip_rect.size.depth of them, as many as both
// hold (legacy multi-image images; 1 for single images).
int32_t gradientImageCount(const CNNGradientKernel& k, const Image& gradient, const Image& destination) {
    const int64_t gz = k.primaryOffset.z, dz = std::max<int64_t>(k.clipRect.origin.z, 0);
    if (gz < 0 || gz >= gradient.numberOfImages())
        throwValueError("primary_offset: z selects an image the source_gradient does not have");
    if (dz >= destination.numberOfImages())
        throwValueError("clip_rect: origin.z selects an image the destination_gradient does not have");
    return int32_t(std::min<int64_t>({int64_t(std::min<uint64_t>(k.clipRect.size.depth, uint64_t(INT32_MAX))),
                                      gradient.numberOfImages() - gz, destination.numberOfImages() - dz}));
}

}  // namespace

void NNReshapeGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    primaryOffset = Offset{0, 0, 0};
    secondaryOffset = Offset{0, 0, 0};
    clipRect = rectNoClip();
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
    writesAllChannels_ = s.sourceFeatureChannelOffset == 0 && s.sourceFeatureChannelCount == s.sourceFeatureChannels;
}

void NNReshapeGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                           const ImageBatch& sourceImages, const StateBatch& states,
                                           const ImageBatch& destinations) {
    std::vector<ReshapeParams> params;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const NNReshapeGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward NNReshape read a ",
                            s.sourceWidth, "x", s.sourceHeight, " source");
        if (g.width() != s.destinationWidth || g.height() != s.destinationHeight)
            throwValueError("source_gradient: is ", g.width(), "x", g.height(), " but the forward NNReshape wrote a ",
                            s.destinationWidth, "x", s.destinationHeight, " image");
        if (dst.width() != s.sourceWidth || dst.height() != s.sourceHeight)
            throwValueError("destination_gradient: is ", dst.width(), "x", dst.height(), " but must be ",
                            s.sourceWidth, "x", s.sourceHeight, " like the forward source");
        checkSourceGradientChannels(g, state.reshapedChannels);
        checkDestinationChannels(dst, s.sourceFeatureChannelCount, "destination_gradient");
        ReshapeParams p{};
        p.source = g.layout(primarySourceFeatureChannelOffset, state.reshapedChannels);
        p.destination = dst.layout(destinationFeatureChannelOffset, s.sourceFeatureChannelCount);
        p.batch = gradientImageCount(*this, g, dst);
        params.push_back(p);
    }
    Backend& backend = device_.backend();
    const int64_t dz = std::max<int64_t>(clipRect.origin.z, 0);
    for (size_t i = 0; i < params.size(); ++i)
        backend.reshapeCopy(cb, params[i], sourceGradients[i]->storage(primaryOffset.z), destinations[i]->storage(dz));
}

// ---- NNPad -----------------------------------------------------------------------------------------

int32_t padSourceIndex(int64_t i, int64_t size, ImageEdgeMode mode) {
    if (i >= 0 && i < size) return int32_t(i);
    switch (mode) {
        case ImageEdgeMode::Zero:
        case ImageEdgeMode::Constant: return -1;
        case ImageEdgeMode::Clamp: return int32_t(i < 0 ? 0 : size - 1);
        case ImageEdgeMode::Mirror: {  // ... x2 x1 | x0 x1 x2 | x1 x0 ...: period 2 (size - 1)
            if (size == 1) return 0;
            const int64_t period = 2 * (size - 1);
            int64_t r = i % period;
            if (r < 0) r += period;
            return int32_t(r < size ? r : period - r);
        }
        case ImageEdgeMode::MirrorWithEdge: {  // ... x1 x0 | x0 x1 x2 | x2 x1 ...: period 2 size
            const int64_t period = 2 * size;
            int64_t r = i % period;
            if (r < 0) r += period;
            return int32_t(r < size ? r : period - 1 - r);
        }
    }
    throwValueError("edge_mode: expected an ImageEdgeMode, got ", static_cast<uint32_t>(mode));
}

NNPad::NNPad(const Device& device) : CNNKernel(device) {}

NNPad::NNPad(const Device& device, ImageCoordinate before, ImageCoordinate after, std::vector<float> fillValueArray)
    : CNNKernel(device), paddingSizeBefore(before), paddingSizeAfter(after), fillValueArray_(std::move(fillValueArray)) {}

namespace {

// A padding size as an int64 within the int32 range the kernels index with.
int64_t padSize(uint64_t value, const char* name) {
    if (value > uint64_t(INT32_MAX)) throwValueError(name, ": must be at most 2**31 - 1, got ", value);
    return int64_t(value);
}

}  // namespace

void reshape_pad_checks::checkPaddingSizes(const ImageCoordinate& before, const ImageCoordinate& after) {
    padSize(before.x, "padding_size_before.x");
    padSize(before.y, "padding_size_before.y");
    padSize(before.channel, "padding_size_before.channel");
    padSize(after.x, "padding_size_after.x");
    padSize(after.y, "padding_size_after.y");
    padSize(after.channel, "padding_size_after.channel");
}

void reshape_pad_checks::checkEdgeMode(ImageEdgeMode edgeMode) {
    const uint32_t mode = static_cast<uint32_t>(edgeMode);
    if (mode > static_cast<uint32_t>(ImageEdgeMode::Constant))
        throwValueError("edge_mode: expected an ImageEdgeMode, got ", mode);
}

int64_t NNPad::destinationFeatureChannels(const Image& source) const {
    return padSize(paddingSizeBefore.channel, "padding_size_before.channel") + availableSourceChannels(source) +
           padSize(paddingSizeAfter.channel, "padding_size_after.channel");
}

void NNPad::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    const Image& source = *sourceImages.front();
    const int64_t bx = padSize(paddingSizeBefore.x, "padding_size_before.x");
    const int64_t by = padSize(paddingSizeBefore.y, "padding_size_before.y");
    descriptor.width = source.width() + bx + padSize(paddingSizeAfter.x, "padding_size_after.x");
    descriptor.height = source.height() + by + padSize(paddingSizeAfter.y, "padding_size_after.y");
    offset.x = -bx;
    offset.y = -by;
    clipRect = rectNoClip();
}

StatePtr NNPad::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<NNPadGradientState>(device_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void NNPad::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) {
    reshape_pad_checks::checkEdgeMode(edgeMode);
    struct Encoded {
        PadParams params;
        std::vector<int32_t> maps;
        std::vector<float> fill;
    };
    std::vector<Encoded> work;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<NNPadGradientState*>(states[i].get()))
            throwTypeError("destination_state: NNPad writes the NNPadGradientState made by its result_state, got a ",
                           states[i]->className());
        const Image& src = *d.source;
        const int64_t N = d.sourceChannels;
        const int64_t before = padSize(paddingSizeBefore.channel, "padding_size_before.channel");
        const int64_t written = before + N + padSize(paddingSizeAfter.channel, "padding_size_after.channel");
        checkDestinationChannels(*d.destination, written);
        if (edgeMode == ImageEdgeMode::Constant && !fillValueArray_.empty() && int64_t(fillValueArray_.size()) < written)
            throwValueError("fill_value_array: holds ", fillValueArray_.size(), " value(s) but NNPad writes ", written,
                            " feature channel(s); give at least one per channel written");
        const int64_t x0 = checked::addSigned(offset.x, clipShift(clipRect.origin.x, d.clip.origin.x), "offset.x");
        const int64_t y0 = checked::addSigned(offset.y, clipShift(clipRect.origin.y, d.clip.origin.y), "offset.y");
        checked::toInt32(x0, "offset.x");
        checked::toInt32(y0, "offset.y");
        Encoded e;
        const int64_t cw = int64_t(d.clip.size.width), ch = int64_t(d.clip.size.height);
        for (int64_t x = 0; x < cw; ++x) e.maps.push_back(padSourceIndex(x0 + x, src.width(), edgeMode));
        for (int64_t y = 0; y < ch; ++y) e.maps.push_back(padSourceIndex(y0 + y, src.height(), edgeMode));
        for (int64_t k = 0; k < written; ++k) e.maps.push_back(padSourceIndex(k - before, N, edgeMode));
        e.fill.assign(size_t(written), 0.0f);
        if (edgeMode == ImageEdgeMode::Constant)
            for (int64_t k = 0; k < written; ++k) e.fill[size_t(k)] = fillValueArray_.empty() ? fillValue : fillValueArray_[size_t(k)];
        PadParams& p = e.params;
        p = PadParams{};
        p.source = src.layout(d.sourceChannelOffset, N);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, written);
        p.batch = checked::toInt32(d.imageCount, "number of images");
        elementwise::setClip(p, d.clip);
        work.push_back(std::move(e));
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<NNPadGradientState&>(*states[i]);
        const Encoded& e = work[i];
        const PadParams& p = e.params;
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, offset, d.sourceChannels, d.imageCount);
        state.mapX.assign(e.maps.begin(), e.maps.begin() + p.clipWidth);
        state.mapY.assign(e.maps.begin() + p.clipWidth, e.maps.begin() + p.clipWidth + p.clipHeight);
        state.mapC.assign(e.maps.begin() + p.clipWidth + p.clipHeight, e.maps.end());
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        const Encoded& e = work[i];
        backend.padForward(cb, e.params, d.source->storage(d.sourceImageIndex),
                           d.destination->storage(d.destinationImageIndex),
                           uploadHostData(device_, e.maps.data(), e.maps.size() * sizeof(int32_t)),
                           uploadHostData(device_, e.fill.data(), e.fill.size() * sizeof(float)));
    }
}

// ---- NNPadGradient ---------------------------------------------------------------------------------

NNPadGradient::NNPadGradient(const Device& device) : CNNGradientKernel(device) {}

void NNPadGradient::checkGradientStateType(const State& state) const {
    if (!dynamic_cast<const NNPadGradientState*>(&state))
        throwTypeError("gradient_state: NNPadGradient needs the NNPadGradientState made by NNPad.result_state, got a ",
                       state.className());
}

void NNPadGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    // G is read where the forward wrote (primary_offset = 0: G pixel = forward destination pixel).
    primaryOffset = Offset{0, 0, 0};
    secondaryOffset = Offset{0, 0, 0};
    clipRect = rectNoClip();
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

namespace {

// Appends the CSR transpose of `map` (entries -1 skipped) for `size` targets: start[size + 1]
// then the positions, each shifted by `origin`, in increasing order. Returns the start offsets'
// and the list's positions in `out`.
void appendTranspose(const std::vector<int32_t>& map, int64_t size, int64_t origin, std::vector<int32_t>& starts,
                     std::vector<int32_t>& list) {
    std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(size));
    for (size_t j = 0; j < map.size(); ++j)
        if (map[j] >= 0 && map[j] < size) buckets[size_t(map[j])].push_back(checked::toInt32(origin + int64_t(j), "offset"));
    starts.push_back(int32_t(list.size()));
    for (const auto& b : buckets) {
        list.insert(list.end(), b.begin(), b.end());
        starts.push_back(int32_t(list.size()));
    }
}

}  // namespace

BufferSlice uploadHostData(const Device& device, const void* data, size_t bytes) {
    BufferSlice slice{device.backend().newBuffer(std::max<size_t>(bytes, 4)), 0};
    if (bytes) std::memcpy(slice.buffer->contents(), data, bytes);
    return slice;
}

std::vector<int32_t> padGradientTables(const std::vector<int32_t>& mapX, const std::vector<int32_t>& mapY,
                                       const std::vector<int32_t>& mapC, int64_t width, int64_t height,
                                       int64_t channels, int64_t gx, int64_t gy, PadGradientParams& p) {
    std::vector<int32_t> starts, listX, listY, listC;
    p.startX = 0;
    appendTranspose(mapX, width, gx, starts, listX);
    p.startY = int32_t(starts.size());
    appendTranspose(mapY, height, gy, starts, listY);
    p.startC = int32_t(starts.size());
    appendTranspose(mapC, channels, 0, starts, listC);
    // The lists follow the starts; the start values index each axis's own list.
    p.listX = int32_t(starts.size());
    p.listY = p.listX + int32_t(listX.size());
    p.listC = p.listY + int32_t(listY.size());
    std::vector<int32_t> tables = std::move(starts);
    tables.insert(tables.end(), listX.begin(), listX.end());
    tables.insert(tables.end(), listY.begin(), listY.end());
    tables.insert(tables.end(), listC.begin(), listC.end());
    p.listCount = checked::toInt32(int64_t(tables.size()), "index maps");
    return tables;
}

void NNPadGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                       const ImageBatch& sourceImages, const StateBatch& states,
                                       const ImageBatch& destinations) {
    struct Encoded {
        PadGradientParams params;
        std::vector<int32_t> maps;
    };
    std::vector<Encoded> work;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const NNPadGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward NNPad read a ",
                            s.sourceWidth, "x", s.sourceHeight, " source");
        if (dst.width() != s.sourceWidth || dst.height() != s.sourceHeight)
            throwValueError("destination_gradient: is ", dst.width(), "x", dst.height(), " but must be ",
                            s.sourceWidth, "x", s.sourceHeight, " like the forward source");
        const int64_t written = int64_t(state.mapC.size());
        checkSourceGradientChannels(g, written);
        const int64_t gx = checked::addSigned(primaryOffset.x, s.clipRect.origin.x, "primary_offset.x");
        const int64_t gy = checked::addSigned(primaryOffset.y, s.clipRect.origin.y, "primary_offset.y");
        const int64_t cw = int64_t(state.mapX.size()), ch = int64_t(state.mapY.size());
        if (gx < 0 || gy < 0 || gx + cw > g.width() || gy + ch > g.height())
            throwValueError("source_gradient: is ", g.width(), "x", g.height(), " but NNPadGradient reads columns [",
                            gx, ", ", gx + cw, ") and rows [", gy, ", ", gy + ch, ") of it (where the forward wrote)");
        checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
        if (destinationFeatureChannelOffset + s.sourceFeatureChannelCount > dst.featureChannels())
            throwValueError("destination_gradient: has ", dst.featureChannels(), " feature channels but the forward "
                            "pass read ", s.sourceFeatureChannelCount, " at destination_feature_channel_offset ",
                            destinationFeatureChannelOffset);
        // dX channel c <- forward source channel c - destinationFeatureChannelOffset (others: none).
        std::vector<int32_t> mapC(state.mapC.size());
        for (size_t k = 0; k < mapC.size(); ++k)
            mapC[k] = state.mapC[k] < 0 ? -1 : int32_t(state.mapC[k] + destinationFeatureChannelOffset);
        Encoded e;
        PadGradientParams& p = e.params;
        p = PadGradientParams{};
        e.maps = padGradientTables(state.mapX, state.mapY, mapC, dst.width(), dst.height(), dst.featureChannels(), gx,
                                   gy, p);
        p.gradient = g.layout(primarySourceFeatureChannelOffset, written);
        p.destination = dst.layout(0, dst.featureChannels());
        p.batch = gradientImageCount(*this, g, dst);
        work.push_back(std::move(e));
    }
    Backend& backend = device_.backend();
    const int64_t dz = std::max<int64_t>(clipRect.origin.z, 0);
    for (size_t i = 0; i < work.size(); ++i) {
        const Encoded& e = work[i];
        backend.padGradient(cb, e.params, sourceGradients[i]->storage(primaryOffset.z), destinations[i]->storage(dz),
                            uploadHostData(device_, e.maps.data(), e.maps.size() * sizeof(int32_t)));
    }
}

}  // namespace mpsgrad
