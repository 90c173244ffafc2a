#include "kernels/normalization.h"

#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/errors.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {
namespace {

using elementwise::clipShift;

// Sizes beyond this are refused: tap positions are computed in 32-bit ints by the backends.
constexpr int64_t kMaxWindowSize = int64_t(1) << 20;

void checkSize(int64_t value, const char* name) {
    if (value < 1 || value > kMaxWindowSize)
        throwValueError(name, ": must be an integer in [1, ", kMaxWindowSize, "], got ", value);
}

// The spatial window of Spatial and LCN; MPS requires it square (spec §2.7).
LocalNormalizationWindow spatialWindow(const char* className, int64_t kernelWidth, int64_t kernelHeight) {
    checkSize(kernelWidth, "kernel_width");
    checkSize(kernelHeight, "kernel_height");
    if (kernelWidth != kernelHeight)
        throwValueError("kernel_height: ", className, " requires kernel_width == kernel_height, got ", kernelWidth,
                        " and ", kernelHeight);
    return LocalNormalizationWindow{kernelWidth, kernelHeight, 1};
}

LocalNormalizationWindow channelWindow(int64_t kernelSize) {
    checkSize(kernelSize, "kernel_size");
    return LocalNormalizationWindow{1, 1, kernelSize};
}

int32_t edgeModeOf(ImageEdgeMode mode, const char* what, const char* className) {
    if (mode != ImageEdgeMode::Zero)
        throwValueError(what, ": ", className, " supports ImageEdgeMode.ZERO only (off-image pixels read 0), got ",
                        static_cast<uint32_t>(mode));
    return kEdgeZero;
}

// The params fields the forward and gradient ops share.
NormalizationParams baseParams(LocalNormalizationKind kind, const LocalNormalizationWindow& w,
                               const LocalNormalizationParameters& q) {
    NormalizationParams p{};
    p.kind = int32_t(kind);
    p.kernelWidth = int32_t(w.width);
    p.kernelHeight = int32_t(w.height);
    p.channelSize = int32_t(w.channels);
    p.alpha = q.alpha;
    p.beta = q.beta;
    p.delta = q.delta;
    const bool contrast = kind == LocalNormalizationKind::LocalContrast;
    p.p0 = contrast ? q.p0 : 1.0f;
    p.pm = contrast ? q.pm : 0.0f;
    p.ps = contrast ? q.ps : 1.0f;
    return p;
}

}  // namespace

const char* localNormalizationForwardName(LocalNormalizationKind kind) {
    switch (kind) {
        case LocalNormalizationKind::CrossChannel: return "CNNCrossChannelNormalization";
        case LocalNormalizationKind::Spatial: return "CNNSpatialNormalization";
        case LocalNormalizationKind::LocalContrast: return "CNNLocalContrastNormalization";
    }
    return "CNNLocalNormalization";
}

LocalNormalizationParameters LocalNormalizationParameters::defaultsFor(LocalNormalizationKind kind) {
    LocalNormalizationParameters q;
    if (kind == LocalNormalizationKind::LocalContrast) {
        q.alpha = 0.0f;
        q.beta = 0.5f;
        q.delta = 1.0f / 1024.0f;
    }
    return q;
}

void LocalNormalizationParameters::validate() const {
    const std::pair<const char*, float> all[] = {{"alpha", alpha}, {"beta", beta}, {"delta", delta},
                                                 {"p0", p0},       {"pm", pm},     {"ps", ps}};
    for (const auto& [name, value] : all)
        if (!std::isfinite(value)) throwValueError(name, ": must be finite, got ", value);
    if (alpha < 0.0f) throwValueError("alpha: must be >= 0, got ", alpha);
    if (!(delta > 0.0f)) throwValueError("delta: must be > 0 (the normalizer must stay positive), got ", delta);
}

// ---- forward ---------------------------------------------------------------------------------------

CNNLocalNormalizationBase::CNNLocalNormalizationBase(const Device& device, LocalNormalizationKind kind,
                                                     LocalNormalizationWindow window)
    : CNNKernel(device), parameters(LocalNormalizationParameters::defaultsFor(kind)), kind_(kind),
      window_(window) {}

CNNCrossChannelNormalization::CNNCrossChannelNormalization(const Device& device, int64_t kernelSize)
    : CNNLocalNormalizationBase(device, LocalNormalizationKind::CrossChannel, channelWindow(kernelSize)) {}

CNNSpatialNormalization::CNNSpatialNormalization(const Device& device, int64_t kernelWidth, int64_t kernelHeight)
    : CNNLocalNormalizationBase(device, LocalNormalizationKind::Spatial,
                                spatialWindow("CNNSpatialNormalization", kernelWidth, kernelHeight)) {}

CNNLocalContrastNormalization::CNNLocalContrastNormalization(const Device& device, int64_t kernelWidth,
                                                             int64_t kernelHeight)
    : CNNLocalNormalizationBase(device, LocalNormalizationKind::LocalContrast,
                                spatialWindow("CNNLocalContrastNormalization", kernelWidth, kernelHeight)) {}

StatePtr CNNLocalNormalizationBase::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNLocalNormalizationGradientState>(device_, kind_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNLocalNormalizationBase::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                           const StateBatch& states) {
    edgeModeOf(edgeMode, "edge_mode", className());
    parameters.validate();
    std::vector<NormalizationParams> params;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNLocalNormalizationGradientState*>(states[i].get()))
            throwTypeError("destination_state: ", className(), " writes the CNNLocalNormalizationGradientState made "
                           "by its result_state, got a ", states[i]->className());
        const int64_t N = d.sourceChannels;
        checkDestinationChannels(*d.destination, N);
        NormalizationParams p = baseParams(kind_, window_, parameters);
        p.source = d.source->layout(d.sourceChannelOffset, N);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, N);
        p.batch = checked::toInt32(d.imageCount, "number of images");
        elementwise::setClip(p, d.clip);
        // Clipping the destination origin moves the first window by as many pixels.
        p.centerX = checked::toInt32(offset.x + clipShift(clipRect.origin.x, d.clip.origin.x), "offset.x");
        p.centerY = checked::toInt32(offset.y + clipShift(clipRect.origin.y, d.clip.origin.y), "offset.y");
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNLocalNormalizationGradientState&>(*states[i]);
        const UnaryDispatch& d = dispatches[i];
        elementwise::recordUnaryForward(state.snapshot, *this, d, Offset{params[i].centerX, params[i].centerY, offset.z},
                                        d.sourceChannels, d.imageCount);
        state.snapshot.kernelWidth = window_.width;
        state.snapshot.kernelHeight = window_.height;
        state.kind = kind_;
        state.windowWidth = window_.width;
        state.windowHeight = window_.height;
        state.channelSize = window_.channels;
        state.parameters = parameters;
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        backend.normalizationForward(cb, params[i], d.source->storage(d.sourceImageIndex),
                                     d.destination->storage(d.destinationImageIndex));
    }
}

// ---- gradient --------------------------------------------------------------------------------------

CNNLocalNormalizationGradientBase::CNNLocalNormalizationGradientBase(const Device& device,
                                                                     LocalNormalizationKind kind,
                                                                     LocalNormalizationWindow window)
    : CNNGradientKernel(device), parameters(LocalNormalizationParameters::defaultsFor(kind)), kind_(kind),
      window_(window) {}

CNNCrossChannelNormalizationGradient::CNNCrossChannelNormalizationGradient(const Device& device, int64_t kernelSize)
    : CNNLocalNormalizationGradientBase(device, LocalNormalizationKind::CrossChannel, channelWindow(kernelSize)) {}

CNNSpatialNormalizationGradient::CNNSpatialNormalizationGradient(const Device& device, int64_t kernelWidth,
                                                                 int64_t kernelHeight)
    : CNNLocalNormalizationGradientBase(device, LocalNormalizationKind::Spatial,
                                        spatialWindow("CNNSpatialNormalizationGradient", kernelWidth, kernelHeight)) {}

CNNLocalContrastNormalizationGradient::CNNLocalContrastNormalizationGradient(const Device& device,
                                                                             int64_t kernelWidth,
                                                                             int64_t kernelHeight)
    : CNNLocalNormalizationGradientBase(
          device, LocalNormalizationKind::LocalContrast,
          spatialWindow("CNNLocalContrastNormalizationGradient", kernelWidth, kernelHeight)) {}

void CNNLocalNormalizationGradientBase::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNLocalNormalizationGradientState*>(&state);
    const char* forward = localNormalizationForwardName(kind_);
    if (!s)
        throwTypeError("gradient_state: ", className(), " needs the CNNLocalNormalizationGradientState made by ",
                       forward, ".result_state, got a ", state.className());
    if (s->kind != kind_)
        throwTypeError("gradient_state: ", className(), " needs the state of a ", forward, ", got the state of a ",
                       localNormalizationForwardName(s->kind));
    if (!s->snapshot.encoded) return;
    if (s->windowWidth != window_.width || s->windowHeight != window_.height || s->channelSize != window_.channels)
        throwValueError("gradient_state: the forward ", forward, " had a ", s->windowWidth, "x", s->windowHeight,
                        " window over ", s->channelSize, " channel(s) but this ", className(), " has ", window_.width,
                        "x", window_.height, " over ", window_.channels);
    if (!(s->parameters == parameters)) {
        const LocalNormalizationParameters& f = s->parameters;
        throwValueError("gradient_state: the forward ", forward, " ran with alpha ", f.alpha, ", beta ", f.beta,
                        ", delta ", f.delta, ", p0 ", f.p0, ", pm ", f.pm, ", ps ", f.ps, " but this ", className(),
                        " has alpha ", parameters.alpha, ", beta ", parameters.beta, ", delta ", parameters.delta,
                        ", p0 ", parameters.p0, ", pm ", parameters.pm, ", ps ", parameters.ps,
                        "; every parameter must match the forward pass");
    }
}

void CNNLocalNormalizationGradientBase::configureFromSnapshot(const ForwardSnapshot& s) {
    // As pooling's gradients (spec §1.8.2): G is read from the forward clip origin, the windows are
    // centered where the forward pass centered them, and dX covers the whole forward source.
    primaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
    clipRect = rectNoClip();
    primaryEdgeMode = ImageEdgeMode::Zero;
    secondaryEdgeMode = s.edgeMode;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNLocalNormalizationGradientBase::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                           const ImageBatch& sourceImages, const StateBatch& states,
                                                           const ImageBatch& destinations) {
    edgeModeOf(secondaryEdgeMode, "secondary_edge_mode", className());
    parameters.validate();
    const char* forward = localNormalizationForwardName(kind_);
    std::vector<NormalizationParams> params;
    std::vector<Region> clips;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNLocalNormalizationGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the forward ", forward, " read a ",
                            s.sourceWidth, "x", s.sourceHeight, " source; ", className(),
                            " needs the forward source X");
        const int64_t N = s.sourceFeatureChannelCount;
        checkSourceImageChannels(x, N, "read");
        checkSourceGradientChannels(g, N);
        checkDestinationChannels(dst, N, "destination_gradient");
        const Region clip = nonEmptyClip(clipRect, dst, "destination_gradient");
        if (primaryOffset.x < 0 || primaryOffset.y < 0 || primaryOffset.x >= g.width() || primaryOffset.y >= g.height())
            throwValueError("primary_offset: (", primaryOffset.x, ", ", primaryOffset.y, ") is outside the ", g.width(),
                            "x", g.height(), " source_gradient");
        const int64_t gz = primaryOffset.z, xz = secondaryOffset.z;
        if (gz < 0 || gz >= g.numberOfImages() || xz < 0 || xz >= x.numberOfImages())
            throwValueError("primary_offset / secondary_offset: z selects an image the inputs do not have");
        NormalizationParams p = baseParams(kind_, window_, parameters);
        p.gradient = g.layout(primarySourceFeatureChannelOffset, N);
        p.source = x.layout(secondarySourceFeatureChannelOffset, N);
        p.destination = dst.layout(destinationFeatureChannelOffset, N);
        p.batch = checked::toInt32(
            std::min<int64_t>({int64_t(clip.size.depth), g.numberOfImages() - gz, x.numberOfImages() - xz}),
            "number of images");
        // The windows the forward pass computed, cut to what G holds from primary_offset.
        p.gradientX = int32_t(primaryOffset.x);
        p.gradientY = int32_t(primaryOffset.y);
        p.gradientWidth = int32_t(std::min<int64_t>(int64_t(s.clipRect.size.width), g.width() - primaryOffset.x));
        p.gradientHeight = int32_t(std::min<int64_t>(int64_t(s.clipRect.size.height), g.height() - primaryOffset.y));
        p.centerX = checked::toInt32(secondaryOffset.x, "secondary_offset.x");
        p.centerY = checked::toInt32(secondaryOffset.y, "secondary_offset.y");
        elementwise::setClip(p, clip);
        params.push_back(p);
        clips.push_back(clip);
    }
    Backend& backend = device_.backend();
    for (size_t i = 0; i < params.size(); ++i)
        backend.normalizationGradient(cb, params[i], sourceGradients[i]->storage(primaryOffset.z),
                                      sourceImages[i]->storage(secondaryOffset.z),
                                      destinations[i]->storage(clips[i].origin.z));
}

}  // namespace mpsgrad
