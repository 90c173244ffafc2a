#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {
namespace {

void checkKeepProbability(float p) {
    if (!(p > 0.0f && p < 1.0f))
        throwValueError("keep_probability: must be in the open interval (0, 1), got ", p);
}

void checkMaskStride(const Size3& s) {
    for (uint64_t v : {s.width, s.height, s.depth})
        if (v > 1)
            throwValueError("mask_stride_in_pixels: every component must be 0 (broadcast the mask along the axis) "
                            "or 1, got (", s.width, ", ", s.height, ", ", s.depth, ")");
}

// The mask parameters shared by every image of an encode.
DropoutMask baseMask(float keepProbability, uint64_t seed, uint64_t stream, const Size3& stride) {
    DropoutMask m{};
    m.seedLo = uint32_t(seed & 0xFFFFFFFFu);
    m.seedHi = uint32_t(seed >> 32);
    m.streamLo = uint32_t(stream & 0xFFFFFFFFu);
    m.streamHi = uint32_t(stream >> 32);
    // P(word < threshold) = threshold / 2^32 = keepProbability within 2^-32.
    m.threshold = uint32_t(std::floor(double(keepProbability) * 4294967296.0));
    m.keepProbability = keepProbability;
    m.strideX = int32_t(stride.width);
    m.strideY = int32_t(stride.height);
    m.strideZ = int32_t(stride.depth);
    return m;
}

// The backend op on images from `sourceIndex` / `destinationIndex`, passing FLOAT16 storage as it
// is (the kernels read half natively when the backend does, docs/float16.md).
void encodeDropout(CommandBuffer& cb, const DropoutParams& p, const Image& source, int64_t sourceIndex,
                   const Image& destination, int64_t destinationIndex) {
    Backend& backend = source.device().backend();
    HalfBindings formats;
    formats.source = source.isFloat16();
    formats.destination = destination.isFloat16();
    if (formats.any())
        backend.dropoutHalf(cb, p, formats, source.storage(sourceIndex), destination.storage(destinationIndex));
    else
        backend.dropout(cb, p, source.storage(sourceIndex), destination.storage(destinationIndex));
}

}  // namespace

std::vector<uint8_t> CNNDropoutGradientState::maskData() const {
    std::vector<uint8_t> data;
    if (!snapshot.encoded) return data;
    const DropoutMask& m = mask;
    const int64_t W = m.strideX ? m.maskWidth : 1, H = m.strideY ? m.maskHeight : 1, C = m.strideZ ? m.maskChannels : 1;
    data.reserve(size_t(maskImages * H * W * C));
    for (int64_t n = 0; n < maskImages; ++n)
        for (int64_t y = 0; y < H; ++y)
            for (int64_t x = 0; x < W; ++x)
                for (int64_t c = 0; c < C; ++c) {
                    const DropoutIndex e = dropoutElement(m, int(m.firstImage + n), int(x), int(y), int(c));
                    data.push_back(dropoutKeeps(m, dropoutBlock(m, e >> 2), e) ? 1 : 0);
                }
    return data;
}

// ---- forward ---------------------------------------------------------------------------------------

bool CNNDropout::readsFloat16Natively() const { return device_.backend().readsHalfNatively(HalfOp::Dropout); }

bool CNNDropoutGradient::readsFloat16Natively() const {
    return device_.backend().readsHalfNatively(HalfOp::Dropout);
}

CNNDropout::CNNDropout(const Device& device, float keepProbability, uint64_t seed, Size3 maskStrideInPixels)
    : CNNKernel(device), keepProbability_(keepProbability), seed_(seed), maskStride_(maskStrideInPixels) {
    checkKeepProbability(keepProbability);
    checkMaskStride(maskStrideInPixels);
}

StatePtr CNNDropout::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNDropoutGradientState>(device_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNDropout::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) {
    const DropoutMask base = baseMask(keepProbability_, seed_, encodes_, maskStride_);
    std::vector<DropoutParams> params;
    int64_t image = 0;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNDropoutGradientState*>(states[i].get()))
            throwTypeError("destination_state: CNNDropout writes the CNNDropoutGradientState made by its "
                           "result_state, got a ", states[i]->className());
        const int64_t N = d.sourceChannels;
        checkDestinationChannels(*d.destination, N);
        DropoutParams p{};
        // storageLayout: FLOAT16 images arrive as they are when readsFloat16Natively().
        p.source = d.source->storageLayout(d.sourceChannelOffset, N);
        p.destination = d.destination->storageLayout(destinationFeatureChannelOffset, N);
        p.batch = int32_t(d.imageCount);
        p.sourceX = int32_t(offset.x + elementwise::clipShift(clipRect.origin.x, d.clip.origin.x));
        p.sourceY = int32_t(offset.y + elementwise::clipShift(clipRect.origin.y, d.clip.origin.y));
        elementwise::setClip(p, d.clip);
        // The mask has one element per source element, so every read must be inside the source.
        elementwise::checkReadRegion(*d.source, p.sourceX, p.sourceY, p.clipWidth, p.clipHeight, "source_image",
                                     "offset", className());
        if (image + d.imageCount > INT32_MAX) throwValueError("source_images: too many images in one encode");
        p.mask = base;
        p.mask.maskWidth = int32_t(d.source->width());
        p.mask.maskHeight = int32_t(d.source->height());
        p.mask.maskChannels = int32_t(N);
        p.mask.firstImage = int32_t(image);
        p.mask.maskX = p.sourceX;
        p.mask.maskY = p.sourceY;
        image += d.imageCount;
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNDropoutGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, Offset{params[i].sourceX, params[i].sourceY, offset.z},
                                        d.sourceChannels, d.imageCount);
        state.mask = params[i].mask;
        state.maskImages = d.imageCount;
        state.keepProbability = keepProbability_;
        state.seed = seed_;
        state.maskStrideInPixels = maskStride_;
    }
    for (auto [begin, end] : elementwise::unaryBatchRuns(dispatches)) {
        DropoutParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const UnaryDispatch& d = dispatches[begin];
        encodeDropout(cb, p, *d.source, d.sourceImageIndex, *d.destination, d.destinationImageIndex);
    }
    ++encodes_;
}

// ---- gradient --------------------------------------------------------------------------------------

CNNDropoutGradient::CNNDropoutGradient(const Device& device, float keepProbability, uint64_t seed,
                                       Size3 maskStrideInPixels)
    : CNNGradientKernel(device), keepProbability_(keepProbability), seed_(seed), maskStride_(maskStrideInPixels) {
    checkKeepProbability(keepProbability);
    checkMaskStride(maskStrideInPixels);
}

void CNNDropoutGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNDropoutGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: CNNDropoutGradient needs the CNNDropoutGradientState made by "
                       "CNNDropout.result_state, got a ", state.className());
    if (s->snapshot.encoded &&
        (s->keepProbability != keepProbability_ || s->seed != seed_ || s->maskStrideInPixels.width != maskStride_.width ||
         s->maskStrideInPixels.height != maskStride_.height || s->maskStrideInPixels.depth != maskStride_.depth))
        throwValueError("gradient_state: comes from a CNNDropout with keep_probability ", s->keepProbability, ", seed ",
                        s->seed, " and another mask stride or these differ from this CNNDropoutGradient's (",
                        keepProbability_, ", ", seed_, ")");
}

void CNNDropoutGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                            const ImageBatch& sourceImages, const StateBatch& states,
                                            const ImageBatch& destinations) {
    std::vector<DropoutParams> params;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNDropoutGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& dst = *destinations[i];
        const int64_t N = s.sourceFeatureChannelCount;
        checkSourceGradientChannels(g, N);
        checkDestinationChannels(dst, N, "destination_gradient");
        const elementwise::PointwiseGeometry geo =
            elementwise::resolvePointwiseGeometry(*this, g, *sourceImages[i], dst, nullptr, className());
        DropoutParams p{};
        p.source = g.storageLayout(primarySourceFeatureChannelOffset, N);
        p.destination = dst.storageLayout(destinationFeatureChannelOffset, N);
        elementwise::setClip(p, geo.clip);
        p.sourceX = int32_t(geo.gradientX);
        p.sourceY = int32_t(geo.gradientY);
        p.batch = std::min<int32_t>(geo.batch, int32_t(state.maskImages));
        p.mask = state.mask;
        // secondary_offset places the mask: dX pixel clip origin + q uses mask pixel secondaryOffset + q.
        const DropoutMask& m = p.mask;
        if ((m.strideX && (geo.sourceX < 0 || geo.sourceX + int64_t(geo.clip.size.width) > m.maskWidth)) ||
            (m.strideY && (geo.sourceY < 0 || geo.sourceY + int64_t(geo.clip.size.height) > m.maskHeight)))
            throwValueError("secondary_offset: (", geo.sourceX, ", ", geo.sourceY, ") with the ", geo.clip.size.width,
                            "x", geo.clip.size.height, " clip reaches beyond the forward pass's ", m.maskWidth, "x",
                            m.maskHeight, " mask");
        p.mask.maskX = int32_t(geo.sourceX);
        p.mask.maskY = int32_t(geo.sourceY);
        params.push_back(p);
    }
    for (size_t i = 0; i < params.size(); ++i)
        encodeDropout(cb, params[i], *sourceGradients[i], primaryOffset.z, *destinations[i],
                      clipToImage(clipRect, *destinations[i]).origin.z);
}

}  // namespace mpsgrad
