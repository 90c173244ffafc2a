#include "kernels/concatenation.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"
#include "kernels/reshape_pad.h"
#include "metal/reshape_pad_params.h"

namespace mpsgrad {
namespace {

using elementwise::clipShift;

// Both kernels are one gather per image: the pad op (metal/reshape_pad_params.h) with index maps.
// Destination column clipX + x reads source column mapX[x] (-1: 0), likewise rows and channels.
struct Gather {
    PadParams params{};
    std::vector<int32_t> maps;
    std::vector<float> fill;
};

void encodeGather(const Device& device, CommandBuffer& cb, const Gather& g, const BufferSlice& source,
                  const BufferSlice& destination) {
    device.backend().padForward(cb, g.params, source, destination,
                                uploadHostData(device, g.maps.data(), g.maps.size() * sizeof(int32_t)),
                                uploadHostData(device, g.fill.data(), g.fill.size() * sizeof(float)));
}

// The gradient of one forward read. A read inside the image (or any ZERO read) gave each gradient
// pixel to at most one source pixel: a gather. A CLAMP read beyond the image read the edge pixels
// several times: their gradients are sums, done by the pad gradient's op with its index tables.
struct GradientWork {
    bool sums = false;
    Gather gather;
    PadGradientParams sum{};
    std::vector<int32_t> tables;
};

GradientWork gradientWork(const ForwardSnapshot& s, const Image& g, const Image& dx, int64_t dxChannelOffset,
                          int32_t batch) {
    const int64_t cw = int64_t(s.clipRect.size.width), ch = int64_t(s.clipRect.size.height);
    const int64_t count = s.sourceFeatureChannelCount;
    const bool inside = s.offset.x >= 0 && s.offset.y >= 0 && s.offset.x + cw <= s.sourceWidth &&
                        s.offset.y + ch <= s.sourceHeight;
    GradientWork w;
    if (s.edgeMode == ImageEdgeMode::Clamp && !inside) {
        // Gradient column clip.origin.x + p came from source column clamp(offset.x + p); rows alike.
        auto clamped = [](int64_t v, int64_t size) { return int32_t(std::clamp<int64_t>(v, 0, size - 1)); };
        std::vector<int32_t> mapX, mapY, mapC;
        for (int64_t p = 0; p < cw; ++p) mapX.push_back(clamped(s.offset.x + p, s.sourceWidth));
        for (int64_t p = 0; p < ch; ++p) mapY.push_back(clamped(s.offset.y + p, s.sourceHeight));
        for (int64_t k = 0; k < count; ++k) mapC.push_back(int32_t(k));
        w.sums = true;
        w.tables = padGradientTables(mapX, mapY, mapC, s.sourceWidth, s.sourceHeight, count, s.clipRect.origin.x,
                                     s.clipRect.origin.y, w.sum);
        w.sum.gradient = g.layout(s.destinationFeatureChannelOffset, count);
        w.sum.destination = dx.layout(dxChannelOffset, count);
        w.sum.batch = batch;
        return w;
    }
    // dX pixel q was read for destination pixel clip.origin + (q - offset): that G pixel, or 0.
    Gather& gather = w.gather;
    for (int64_t q = 0; q < s.sourceWidth; ++q) {
        const int64_t p = q - s.offset.x;
        gather.maps.push_back(p >= 0 && p < cw ? int32_t(s.clipRect.origin.x + p) : -1);
    }
    for (int64_t q = 0; q < s.sourceHeight; ++q) {
        const int64_t p = q - s.offset.y;
        gather.maps.push_back(p >= 0 && p < ch ? int32_t(s.clipRect.origin.y + p) : -1);
    }
    for (int64_t k = 0; k < count; ++k) gather.maps.push_back(int32_t(k));
    gather.fill.assign(size_t(count), 0.0f);
    PadParams& p = gather.params;
    p.source = g.layout(s.destinationFeatureChannelOffset, count);
    p.destination = dx.layout(dxChannelOffset, count);
    p.batch = batch;
    p.clipX = p.clipY = 0;
    p.clipWidth = checked::toInt32(s.sourceWidth, "width");
    p.clipHeight = checked::toInt32(s.sourceHeight, "height");
    return w;
}

}  // namespace

// ---- CNNConcatenation ------------------------------------------------------------------------------

CNNConcatenation::CNNConcatenation(const Device& device, size_t sourceCount) : CNNMultiaryKernel(device, sourceCount) {}

std::vector<int64_t> CNNConcatenation::rangeStarts(const std::vector<int64_t>& channels) {
    std::vector<int64_t> starts;
    int64_t next = 0;
    // Counts come from Python as they are: a negative one or one near 2**63 must raise, not wrap
    // (the range starts must never decrease).
    for (int64_t c : channels) {
        starts.push_back(next);
        next = checked::addSigned(next, checked::roundUpTo4(c, "channels"), "channels: their sum");
    }
    return starts;
}

void CNNConcatenation::checkSameSize(const ImageBatch& sources) const {
    for (size_t i = 1; i < sources.size(); ++i)
        if (sources[i]->width() != sources[0]->width() || sources[i]->height() != sources[0]->height())
            throwValueError("source_images: source ", i, " is ", sources[i]->width(), "x", sources[i]->height(),
                            " but source 0 is ", sources[0]->width(), "x", sources[0]->height(),
                            "; concatenated images must have the same width and height");
}

int64_t CNNConcatenation::destinationFeatureChannels(const ImageBatch& sources) const {
    checkSameSize(sources);
    std::vector<int64_t> channels;
    for (size_t i = 0; i < sources.size(); ++i) channels.push_back(availableChannels(*sources[i], i));
    return rangeStarts(channels).back() + channels.back();
}

StatePtr CNNConcatenation::makeResultState(const ImageBatch& sources, CommandBuffer* cb) {
    auto state = std::make_shared<NNMultiaryGradientState>(device_, sources.size(), cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNConcatenation::encodeImpl(CommandBuffer& cb, const std::vector<MultiaryDispatch>& dispatches,
                                  const StateBatch& states) {
    // Everything is validated and resolved before the first op is encoded.
    std::vector<std::vector<Gather>> work;
    for (size_t e = 0; e < dispatches.size(); ++e) {
        const MultiaryDispatch& d = dispatches[e];
        if (!states.empty() && !dynamic_cast<NNMultiaryGradientState*>(states[e].get()))
            throwTypeError("destination_state: CNNConcatenation writes the NNMultiaryGradientState made by its "
                           "result_state, got a ", states[e]->className());
        checkSameSize(d.sources);
        const std::vector<int64_t> starts = rangeStarts(d.channels);
        checkDestinationChannels(*d.destination, starts.back() + d.channels.back());
        std::vector<Gather> gathers;
        for (size_t i = 0; i < d.sources.size(); ++i) {
            const Image& src = *d.sources[i];
            const ImageEdgeMode edge = edgeModeAtIndex(i);
            elementwise::edgeModeCode(edge, "edge_mode");  // ZERO or CLAMP
            const Offset o = offsetAtIndex(i);
            const int64_t x0 = checked::addSigned(o.x, clipShift(clipRect.origin.x, d.clip.origin.x), "offset.x");
            const int64_t y0 = checked::addSigned(o.y, clipShift(clipRect.origin.y, d.clip.origin.y), "offset.y");
            const bool last = i + 1 == d.sources.size();
            const int64_t written = last ? d.channels[i] : roundUpTo4(d.channels[i]);
            Gather g;
            for (uint64_t x = 0; x < d.clip.size.width; ++x) g.maps.push_back(padSourceIndex(x0 + int64_t(x), src.width(), edge));
            for (uint64_t y = 0; y < d.clip.size.height; ++y) g.maps.push_back(padSourceIndex(y0 + int64_t(y), src.height(), edge));
            for (int64_t k = 0; k < written; ++k) g.maps.push_back(k < d.channels[i] ? int32_t(k) : -1);  // gap: 0
            g.fill.assign(size_t(written), 0.0f);
            PadParams& p = g.params;
            p.source = src.layout(d.channelOffsets[i], d.channels[i]);
            p.destination = d.destination->layout(destinationFeatureChannelOffset + starts[i], written);
            p.batch = checked::toInt32(d.imageCount, "number of images");
            elementwise::setClip(p, d.clip);
            if (!states.empty()) {
                ForwardSnapshot& s = static_cast<NNMultiaryGradientState&>(*states[e]).snapshots.at(i);
                s = ForwardSnapshot{};
                s.offset = Offset{x0, y0, o.z};
                s.clipRect = d.clip;
                s.edgeMode = edge;
                s.sourceWidth = src.width();
                s.sourceHeight = src.height();
                s.sourceFeatureChannels = src.featureChannels();
                s.sourceFeatureChannelOffset = d.channelOffsets[i];
                s.sourceFeatureChannelCount = d.channels[i];
                s.destinationWidth = d.destination->width();
                s.destinationHeight = d.destination->height();
                s.destinationFeatureChannels = d.destination->featureChannels();
                s.destinationFeatureChannelOffset = destinationFeatureChannelOffset + starts[i];
                s.batchSize = d.imageCount;
                s.encoded = true;
            }
            gathers.push_back(std::move(g));
        }
        work.push_back(std::move(gathers));
    }
    for (size_t e = 0; e < dispatches.size(); ++e) {
        const MultiaryDispatch& d = dispatches[e];
        for (size_t i = 0; i < d.sources.size(); ++i)
            encodeGather(device_, cb, work[e][i], d.sources[i]->storage(d.sourceImageIndices[i]),
                         d.destination->storage(d.destinationImageIndex));
    }
}

// ---- CNNConcatenationGradient ------------------------------------------------------------------------

CNNConcatenationGradient::CNNConcatenationGradient(const Device& device, size_t sourceIndex)
    : CNNGradientKernel(device), sourceIndex_(sourceIndex) {
    if (sourceIndex > 4095) throwValueError("source_index: must be below 4096, got ", sourceIndex);
}

void CNNConcatenationGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const NNMultiaryGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: CNNConcatenationGradient needs the NNMultiaryGradientState made by "
                       "CNNConcatenation.result_state, got a ", state.className());
    if (sourceIndex_ >= s->sourceCount())
        throwValueError("source_index: ", sourceIndex_, " is out of range for a gradient state of ", s->sourceCount(),
                        " source(s)");
}

const ForwardSnapshot& CNNConcatenationGradient::snapshotOf(const State& state) const {
    checkGradientStateType(state);
    return static_cast<const NNMultiaryGradientState&>(state).snapshots[sourceIndex_];
}

void CNNConcatenationGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                  const ImageBatch& sourceImages, const StateBatch& states,
                                                  const ImageBatch& destinations) {
    std::vector<GradientWork> work;
    std::vector<int64_t> gradientImages, destinationImages;
    for (size_t e = 0; e < sourceGradients.size(); ++e) {
        const ForwardSnapshot& s = snapshotOf(*states[e]);
        const Image& g = *sourceGradients[e];
        const Image& x = *sourceImages[e];
        const Image& dx = *destinations[e];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight || x.featureChannels() != s.sourceFeatureChannels)
            throwValueError("source_image: is ", x.width(), "x", x.height(), "x", x.featureChannels(), " but source ",
                            sourceIndex_, " of the forward concatenation was ", s.sourceWidth, "x", s.sourceHeight,
                            "x", s.sourceFeatureChannels);
        if (g.width() != s.destinationWidth || g.height() != s.destinationHeight ||
            g.featureChannels() < s.destinationFeatureChannelOffset + s.sourceFeatureChannelCount)
            throwValueError("source_gradient: is ", g.width(), "x", g.height(), "x", g.featureChannels(),
                            " but the forward concatenation wrote a ", s.destinationWidth, "x", s.destinationHeight,
                            "x", s.destinationFeatureChannels, " destination");
        if (dx.width() != s.sourceWidth || dx.height() != s.sourceHeight)
            throwValueError("destination_gradient: is ", dx.width(), "x", dx.height(), " but the forward source was ",
                            s.sourceWidth, "x", s.sourceHeight);
        checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
        if (destinationFeatureChannelOffset + s.sourceFeatureChannelCount > dx.featureChannels())
            throwValueError("destination_gradient: has ", dx.featureChannels(), " feature channels but ",
                            "CNNConcatenationGradient writes ", s.sourceFeatureChannelCount,
                            " at destination_feature_channel_offset ", destinationFeatureChannelOffset);
        const int64_t images = std::min<int64_t>(s.batchSize, dx.numberOfImages());
        const int32_t batch = checked::toInt32(std::min<int64_t>(images, g.numberOfImages() - s.clipRect.origin.z),
                                               "number of images");
        work.push_back(gradientWork(s, g, dx, destinationFeatureChannelOffset, batch));
        gradientImages.push_back(s.clipRect.origin.z);
        destinationImages.push_back(0);  // dX image 0 is the first image the forward read
    }
    for (size_t e = 0; e < work.size(); ++e) {
        const BufferSlice g = sourceGradients[e]->storage(gradientImages[e]);
        const BufferSlice dx = destinations[e]->storage(destinationImages[e]);
        if (work[e].sums)
            device_.backend().padGradient(cb, work[e].sum, g, dx,
                                          uploadHostData(device_, work[e].tables.data(),
                                                         work[e].tables.size() * sizeof(int32_t)));
        else
            encodeGather(device_, cb, work[e].gather, g, dx);
    }
}

}  // namespace mpsgrad
