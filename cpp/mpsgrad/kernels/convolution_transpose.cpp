#include "kernels/convolution_transpose.h"

#include <map>

#include "core/checked.h"
#include "core/errors.h"
#include "core/padding.h"

namespace mpsgrad {

namespace {

std::shared_ptr<CNNConvolutionDataSource> requireSource(std::shared_ptr<CNNConvolutionDataSource> source) {
    if (!source) throwTypeError("weights: expected a CNNConvolutionDataSource, got None");
    return source;
}

// The ConvolutionTransposeWeightsParams turning OHWI weights of `d` into the rotated,
// I/O-swapped weights W' ([I][kH][kW][O/groups]); `back` gives the inverse (W' into OHWI).
ConvolutionTransposeWeightsParams rotation(const CNNConvolutionDescriptor& d, bool back) {
    ConvolutionTransposeWeightsParams p{};
    p.groups = checked::toInt32(d.groups, "groups");
    p.kernelWidth = checked::toInt32(d.kernelWidth, "kernel_width");
    p.kernelHeight = checked::toInt32(d.kernelHeight, "kernel_height");
    p.outChannels = checked::toInt32(back ? d.inputFeatureChannels : d.outputFeatureChannels, "channels");
    p.inChannels = checked::toInt32(back ? d.outputFeatureChannels : d.inputFeatureChannels, "channels");
    return p;
}

// W' from W on the host (right after a data-source load, the buffers are host memory not yet
// used by any command buffer). Same arithmetic as the backends' convolutionTransposeWeights.
void rotateOnHost(const ConvolutionTransposeWeightsParams& p, const float* source, float* destination) {
    const int G = p.groups, taps = p.kernelWidth * p.kernelHeight;
    const int Og = p.outChannels / G, Ig = p.inChannels / G;
    for (int o = 0; o < p.outChannels; ++o)
        for (int t = 0; t < taps; ++t)
            for (int ii = 0; ii < Ig; ++ii) {
                const int g = o / Og, i = g * Ig + ii;
                destination[(size_t(i) * taps + size_t(taps - 1 - t)) * Og + size_t(o - g * Og)] =
                    source[(size_t(o) * taps + size_t(t)) * Ig + size_t(ii)];
            }
}

TransposeWeights loadTransposeWeights(const Device& device, CNNConvolutionDataSource& source,
                                      const char* kernelName) {
    TransposeWeights w;
    w.given = loadConvolutionWeights(device, source);
    const CNNConvolutionDescriptor& d = w.given.descriptor;
    if (d.depthwise) throwValueError("weights: ", kernelName, " needs a regular (not depthwise) descriptor");
    if (d.subPixelScaleFactor != 1)
        throwValueError("weights: ", kernelName, " needs sub_pixel_scale_factor == 1, got ", d.subPixelScaleFactor);
    if (d.fusedNeuronDescriptor.neuronType != CNNNeuronType::None)
        throwValueError("weights: ", kernelName, " does not support a fused_neuron_descriptor; apply a CNNNeuron "
                        "to its result instead");
    size_t count = size_t(d.weightCount());
    w.rotated = BufferSlice{device.backend().newBuffer(count * sizeof(float)), 0};
    rotateOnHost(rotation(d, false), w.given.weights.floats(), w.rotated.floats());
    return w;
}

// -reloadWeightsAndBiasesFromDataSource for both kernels: the shape must not change.
void reloadFromSource(const Device& device, CNNConvolutionDataSource& source, TransposeWeights& w,
                      const char* kernelName) {
    TransposeWeights fresh = loadTransposeWeights(device, source, kernelName);
    if (fresh.given.descriptor.weightCount() != w.given.descriptor.weightCount() ||
        fresh.given.descriptor.outputFeatureChannels != w.given.descriptor.outputFeatureChannels)
        throwValueError("data_source: its descriptor changed shape since the kernel was created");
    fresh.given.descriptor = w.given.descriptor;
    w = fresh;
}

// -reloadWeightsAndBiasesWithCommandBuffer:state: copies the state (encoded) and rotates the copy.
void reloadFromState(CommandBuffer& cb, TransposeWeights& w, const char* kernelName,
                     const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    reloadConvolutionWeights(cb, w.given, kernelName, state);
    const CNNConvolutionDescriptor& d = w.given.descriptor;
    Backend& backend = cb.device().backend();
    BufferSlice rotated{backend.newBuffer(size_t(d.weightCount()) * sizeof(float)), 0};
    backend.convolutionTransposeWeights(cb, rotation(d, false), w.given.weights, rotated);
    w.rotated = rotated;
}

template <class Params>
void setGeometry(Params& p, const CNNConvolutionDescriptor& d) {
    p.groups = checked::toInt32(d.groups, "groups");
    p.kernelWidth = checked::toInt32(d.kernelWidth, "kernel_width");
    p.kernelHeight = checked::toInt32(d.kernelHeight, "kernel_height");
    p.strideX = checked::toInt32(d.strideInPixelsX, "stride_in_pixels_x");
    p.strideY = checked::toInt32(d.strideInPixelsY, "stride_in_pixels_y");
    p.dilationX = checked::toInt32(d.dilationRateX, "dilation_rate_x");
    p.dilationY = checked::toInt32(d.dilationRateY, "dilation_rate_y");
}

int64_t dilated(int64_t kernel, int64_t dilation) { return (kernel - 1) * dilation + 1; }

}  // namespace

// ---- gradient state -----------------------------------------------------------------------------

CNNConvolutionTransposeGradientState::CNNConvolutionTransposeGradientState(
    const Device& device, std::shared_ptr<CNNConvolutionTranspose> transpose, std::shared_ptr<CNNConvolution> upstream,
    const CNNConvolutionDescriptor& descriptor, int64_t sourceWidth, int64_t sourceHeight, bool temporary,
    const CommandBuffer* cb)
    : CNNConvolutionGradientState(device, std::move(upstream), descriptor, sourceWidth, sourceHeight, temporary, cb),
      transpose_(std::move(transpose)) {}

// ---- forward ----------------------------------------------------------------------------------------

CNNConvolutionTranspose::CNNConvolutionTranspose(const Device& device,
                                                 std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNKernel(device), dataSource_(requireSource(std::move(dataSource))) {
    weights_ = loadTransposeWeights(device_, *dataSource_, "CNNConvolutionTranspose");
}

void CNNConvolutionTranspose::reloadWeightsAndBiasesFromDataSource() {
    reloadFromSource(device_, *dataSource_, weights_, className());
}

void CNNConvolutionTranspose::reloadWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    checkCommandBuffer(cb);
    reloadFromState(cb, weights_, className(), state);
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolutionTranspose::exportWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, bool resultStateCanBeTemporary) {
    checkCommandBuffer(cb);
    weights_.given.checkReloadVisible(cb);
    const CNNConvolutionDescriptor& d = descriptor();
    auto state = resultStateCanBeTemporary ? CNNConvolutionWeightsAndBiasesState::temporary(cb, d)
                                           : std::make_shared<CNNConvolutionWeightsAndBiasesState>(device_, d);
    Backend& backend = device_.backend();
    backend.copyBuffer(cb, weights_.given.weights, state->weights(), size_t(d.weightCount()) * 4);
    backend.copyBuffer(cb, weights_.given.biases, state->biases(), size_t(d.outputFeatureChannels) * 4);
    return state;
}

ImagePtr CNNConvolutionTranspose::encode(CommandBuffer& cb, const ImagePtr& source,
                                         const std::shared_ptr<CNNConvolutionGradientState>& convolutionGradientState,
                                         StatePtr* destinationState, bool destinationStateIsTemporary) {
    StateBatch states;
    ImageBatch results = encodeBatch(cb, {source}, {convolutionGradientState}, destinationState ? &states : nullptr,
                                     destinationStateIsTemporary);
    if (destinationState) *destinationState = states.empty() ? nullptr : states.front();
    return results.front();
}

ImageBatch CNNConvolutionTranspose::encodeBatch(CommandBuffer& cb, const ImageBatch& sources,
                                                const StateBatch& convolutionGradientStates,
                                                StateBatch* destinationStates, bool destinationStateIsTemporary) {
    // No states at all: the CNNKernel form, sized by the padding policy (a graph node built without
    // a convolution gradient state encodes this way).
    if (convolutionGradientStates.empty())
        return CNNKernel::encodeBatch(cb, sources, destinationStates, destinationStateIsTemporary);
    if (convolutionGradientStates.size() != sources.size())
        throwValueError("convolution_gradient_states: expected one per source image (", sources.size(), "), got ",
                        convolutionGradientStates.size());
    std::shared_ptr<CNNConvolutionGradientState> first;
    for (const auto& s : convolutionGradientStates) {
        auto state = std::dynamic_pointer_cast<CNNConvolutionGradientState>(s);
        if (!state) throwTypeError("convolution_gradient_state: expected a CNNConvolutionGradientState");
        if (!state->snapshot.encoded)
            throwValueError("convolution_gradient_state: its convolution has not been encoded yet, so the result "
                            "size it records is unknown");
        if (first && (state->sourceWidth() != first->sourceWidth() || state->sourceHeight() != first->sourceHeight()))
            throwValueError("convolution_gradient_states: record different source sizes");
        if (!first) first = state;
    }
    const CNNConvolutionDescriptor& c = first->descriptor();
    const CNNConvolutionDescriptor& d = descriptor();
    if (c.kernelWidth != d.kernelWidth || c.kernelHeight != d.kernelHeight || c.strideInPixelsX != d.strideInPixelsX ||
        c.strideInPixelsY != d.strideInPixelsY || c.dilationRateX != d.dilationRateX ||
        c.dilationRateY != d.dilationRateY)
        throwValueError("convolution_gradient_state: comes from a ", c.kernelWidth, "x", c.kernelHeight,
                        " convolution with stride ", c.strideInPixelsX, "x", c.strideInPixelsY, " and dilation ",
                        c.dilationRateX, "x", c.dilationRateY, "; this CNNConvolutionTranspose is ", d.kernelWidth,
                        "x", d.kernelHeight, " with stride ", d.strideInPixelsX, "x", d.strideInPixelsY,
                        " and dilation ", d.dilationRateX, "x", d.dilationRateY);
    sizing_ = first;
    struct Reset {
        std::shared_ptr<CNNConvolutionGradientState>& s;
        ~Reset() { s.reset(); }
    } reset{sizing_};
    return CNNKernel::encodeBatch(cb, sources, destinationStates, destinationStateIsTemporary);
}

void CNNConvolutionTranspose::adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
    const CNNConvolutionDescriptor& d = this->descriptor();
    const int64_t kw = dilated(d.kernelWidth, d.dilationRateX), kh = dilated(d.kernelHeight, d.dilationRateY);
    offset.x = offset.y = 0;
    if (sizing_) {
        // The adjoint of the paired convolution (spec §2.1.6's data-gradient placement).
        const ForwardSnapshot& s = sizing_->snapshot;
        descriptor.width = sizing_->sourceWidth();
        descriptor.height = sizing_->sourceHeight();
        kernelOffsetX = -s.offset.x + ((kw & 1) ? 0 : 1);
        kernelOffsetY = -s.offset.y + ((kh & 1) ? 0 : 1);
        return;
    }
    // A stride-1 window over Z sized by the policy: the forward rule on Z, size (S - 1) * stride + 1.
    const Image& source = *sourceImages.front();
    uint32_t method = padding ? padding->paddingMethod() : defaultPaddingMethod();
    kernelOffsetX = padding::offset((source.width() - 1) * d.strideInPixelsX + 1, 1, kw, method, padding::Axis::X,
                                    false);
    kernelOffsetY = padding::offset((source.height() - 1) * d.strideInPixelsY + 1, 1, kh, method, padding::Axis::Y,
                                    false);
}

StatePtr CNNConvolutionTranspose::makeResultState(const Image& source, CommandBuffer* cb) {
    // Null when no shared_ptr owns the kernel (the state's back-reference then stays empty).
    const auto self = std::static_pointer_cast<CNNConvolutionTranspose>(weak_from_this().lock());
    auto state = std::make_shared<CNNConvolutionTransposeGradientState>(
        device_, self, sizing_ ? sizing_->convolution() : nullptr, descriptor(), source.width(), source.height(),
        cb != nullptr, cb);
    state->producer = self;
    return state;
}

void CNNConvolutionTranspose::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                         const StateBatch& states) {
    const CNNConvolutionDescriptor& d = descriptor();
    weights_.given.checkReloadVisible(cb);
    auto* state = states.empty() ? nullptr : dynamic_cast<CNNConvolutionTransposeGradientState*>(states.front().get());
    if (!states.empty() && !state)
        throwTypeError("destination_state: CNNConvolutionTranspose writes a CNNConvolutionTransposeGradientState, "
                       "got a ", states.front()->className());
    const int64_t kw = dilated(d.kernelWidth, d.dilationRateX), kh = dilated(d.kernelHeight, d.dilationRateY);
    // The window's top-left tap in Z for clip pixel p: total offset + p - (extent >> 1), the
    // total offset being offset * stride + kernel_offset (spec §2.1.8). A clip origin moved onto
    // the destination moves the window with it.
    auto windowStart = [&](int64_t off, int64_t stride, int64_t kernelOffset, int64_t requested, int64_t clipped,
                           int64_t extent, const char* what) {
        int64_t total = checked::addSigned(checked::mulSigned(off, stride, what), kernelOffset, what);
        int64_t shift = clipped > requested ? clipped - requested : 0;
        return checked::toInt32(checked::addSigned(total, shift - (extent >> 1), what), what);
    };
    int64_t totalImages = 0;
    for (const auto& u : dispatches) {
        if (u.sourceChannels != d.inputFeatureChannels)
            throwValueError("source_image: CNNConvolutionTranspose reads ", d.inputFeatureChannels,
                            " input feature channels but the source image provides ", u.sourceChannels);
        checkDestinationChannels(*u.destination, d.outputFeatureChannels);
        windowStart(offset.x, d.strideInPixelsX, kernelOffsetX, clipRect.origin.x, u.clip.origin.x, kw, "kernel_offset_x");
        windowStart(offset.y, d.strideInPixelsY, kernelOffsetY, clipRect.origin.y, u.clip.origin.y, kh, "kernel_offset_y");
        if (state && (u.source->width() != dispatches.front().source->width() ||
                      u.source->height() != dispatches.front().source->height() ||
                      u.clip.size.width != dispatches.front().clip.size.width ||
                      u.clip.size.height != dispatches.front().clip.size.height))
            throwValueError("source_images: every image of a batch sharing one gradient state must have the same size");
        totalImages += u.imageCount;
    }
    if (state && state->descriptor().weightCount() != d.weightCount())
        throwValueError("destination_state: was made by a transposed convolution of another shape");

    Backend& backend = device_.backend();
    for (const auto& u : dispatches) {
        ConvolutionDataGradientParams p{};
        p.gradient = u.source->layout(u.sourceChannelOffset, d.inputFeatureChannels);
        p.destination = u.destination->layout(destinationFeatureChannelOffset, d.outputFeatureChannels);
        p.batch = checked::toInt32(u.imageCount, "number of images");
        setGeometry(p, d);
        p.windowLeftX = windowStart(offset.x, d.strideInPixelsX, kernelOffsetX, clipRect.origin.x, u.clip.origin.x, kw,
                                    "kernel_offset_x");
        p.windowTopY = windowStart(offset.y, d.strideInPixelsY, kernelOffsetY, clipRect.origin.y, u.clip.origin.y, kh,
                                   "kernel_offset_y");
        p.clipX = checked::toInt32(u.clip.origin.x, "clip_rect.origin.x");
        p.clipY = checked::toInt32(u.clip.origin.y, "clip_rect.origin.y");
        p.clipWidth = checked::toInt32(u.clip.size.width, "clip_rect.size.width");
        p.clipHeight = checked::toInt32(u.clip.size.height, "clip_rect.size.height");
        p.hasBias = weights_.given.hasBias ? 1 : 0;
        if (state && &u == &dispatches.front()) {
            ForwardSnapshot& s = state->snapshot;
            s.offset = Offset{p.windowLeftX, p.windowTopY, offset.z};  // the window's top-left tap in Z
            s.clipRect = u.clip;
            s.edgeMode = ImageEdgeMode::Zero;
            s.kernelWidth = d.kernelWidth;
            s.kernelHeight = d.kernelHeight;
            s.strideX = d.strideInPixelsX;
            s.strideY = d.strideInPixelsY;
            s.dilationX = d.dilationRateX;
            s.dilationY = d.dilationRateY;
            s.sourceWidth = u.source->width();
            s.sourceHeight = u.source->height();
            s.sourceFeatureChannels = u.source->featureChannels();
            s.destinationWidth = u.destination->width();
            s.destinationHeight = u.destination->height();
            s.destinationFeatureChannels = u.destination->featureChannels();
            s.sourceFeatureChannelOffset = sourceFeatureChannelOffset;
            s.sourceFeatureChannelCount = d.inputFeatureChannels;
            s.destinationFeatureChannelOffset = destinationFeatureChannelOffset;
            s.batchSize = totalImages;
            s.paddingMethod = padding ? padding->paddingMethod() : 0;
            s.encoded = true;
        }
        if (p.clipWidth > 0 && p.clipHeight > 0)
            backend.convolutionDataGradient(cb, p, u.source->storage(u.sourceImageIndex), weights_.rotated,
                                            weights_.given.biases, u.destination->storage(u.destinationImageIndex));
    }
}

// ---- gradient -----------------------------------------------------------------------------------------

CNNConvolutionTransposeGradient::CNNConvolutionTransposeGradient(const Device& device,
                                                                 std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNGradientKernel(device), dataSource_(requireSource(std::move(dataSource))) {
    weights_ = loadTransposeWeights(device_, *dataSource_, "CNNConvolutionTransposeGradient");
}

void CNNConvolutionTransposeGradient::reloadWeightsAndBiasesFromDataSource() {
    reloadFromSource(device_, *dataSource_, weights_, className());
}

void CNNConvolutionTransposeGradient::reloadWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    checkCommandBuffer(cb);
    reloadFromState(cb, weights_, className(), state);
}

void CNNConvolutionTransposeGradient::checkGradientStateType(const State& state) const {
    auto* t = dynamic_cast<const CNNConvolutionTransposeGradientState*>(&state);
    if (!t)
        throwTypeError("gradient_state: CNNConvolutionTransposeGradient needs the "
                       "CNNConvolutionTransposeGradientState made by CNNConvolutionTranspose, got a ",
                       state.className());
    const auto& a = t->descriptor();
    const auto& b = descriptor();
    if (a.inputFeatureChannels != b.inputFeatureChannels || a.outputFeatureChannels != b.outputFeatureChannels ||
        a.kernelWidth != b.kernelWidth || a.kernelHeight != b.kernelHeight || a.groups != b.groups ||
        a.strideInPixelsX != b.strideInPixelsX || a.strideInPixelsY != b.strideInPixelsY ||
        a.dilationRateX != b.dilationRateX || a.dilationRateY != b.dilationRateY)
        throwValueError("gradient_state: comes from a transposed convolution of another shape (", a.inputFeatureChannels,
                        "->", a.outputFeatureChannels, " channels, ", a.kernelWidth, "x", a.kernelHeight,
                        " kernel) than this CNNConvolutionTransposeGradient (", b.inputFeatureChannels, "->",
                        b.outputFeatureChannels, ", ", b.kernelWidth, "x", b.kernelHeight,
                        ") or another stride, dilation or groups");
}

void CNNConvolutionTransposeGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    primaryOffset = Offset{0, 0, 0};
    secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
    kernelOffsetX = kernelOffsetY = 0;
    clipRect = rectNoClip();
    secondaryEdgeMode = ImageEdgeMode::Zero;
    primaryStrideInPixelsX = secondaryStrideInPixelsX = s.strideX;
    primaryStrideInPixelsY = secondaryStrideInPixelsY = s.strideY;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNConvolutionTransposeGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                         const ImageBatch& sourceImages, const StateBatch& states,
                                                         const ImageBatch& destinations) {
    const CNNConvolutionDescriptor& d = descriptor();
    const uint32_t option = uint32_t(gradientOption);
    if (option < 1 || option > 3)
        throwValueError("gradient_option: must be GRADIENT_WITH_DATA (1), GRADIENT_WITH_WEIGHTS_AND_BIAS (2) or ALL "
                        "(3), got ", option);
    const bool wantData = option & 1u, wantWeights = option & 2u;
    if (wantData) weights_.given.checkReloadVisible(cb);
    const int64_t in = d.inputFeatureChannels, out = d.outputFeatureChannels;
    const int64_t kw = dilated(d.kernelWidth, d.dilationRateX), kh = dilated(d.kernelHeight, d.dilationRateY);

    std::map<const State*, int64_t> imagesPerState;
    for (const auto& s : states) imagesPerState[s.get()]++;
    for (size_t i = 0; i < states.size(); ++i) {
        const ForwardSnapshot& s = static_cast<const CNNConvolutionTransposeGradientState&>(*states[i]).snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        for (const auto& [image, what] : {std::pair<const Image*, const char*>{&g, "source_gradient"},
                                          {&x, "source_image"},
                                          {destinations[i].get(), "destination_gradient"}})
            if (image->numberOfImages() != 1)
                throwValueError(what, ": CNNConvolutionTransposeGradient needs images with number_of_images == 1, "
                                "got ", image->numberOfImages());
        if (primaryOffset.z != 0 || secondaryOffset.z != 0)
            throwValueError("primary_offset / secondary_offset: z must be 0 for single-image inputs");
        if (wantWeights && imagesPerState[states[i].get()] < s.batchSize)
            throwValueError("gradient_states: the forward pass encoded ", s.batchSize,
                            " image(s) with this state but this gradient encode covers ",
                            imagesPerState[states[i].get()], "; encode the gradient of the whole batch at once");
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the gradient state records a ",
                            s.sourceWidth, "x", s.sourceHeight, " forward source");
        if (int64_t(g.width()) != int64_t(s.clipRect.size.width) || int64_t(g.height()) != int64_t(s.clipRect.size.height))
            throwValueError("source_gradient: is ", g.width(), "x", g.height(),
                            " but the forward transposed convolution wrote a ", s.clipRect.size.width, "x",
                            s.clipRect.size.height, " result");
        if (availablePrimaryChannels(g) < out)
            throwValueError("source_gradient: provides ", availablePrimaryChannels(g),
                            " feature channels but the transposed convolution has ", out, " output channels");
        if (availableSecondaryChannels(x) != in)
            throwValueError("source_image: provides ", availableSecondaryChannels(x),
                            " feature channels but the transposed convolution has ", in, " input channels");
        checkDestinationChannels(*destinations[i], in, "destination_gradient");
    }

    Backend& backend = device_.backend();
    std::map<const State*, int64_t> imageIndexInState;
    std::map<const State*, BufferSlice> rotatedGradient;  // dW' per state, summed over its images
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNConvolutionTransposeGradientState&>(*states[i]);
        const Image& gImage = *sourceGradients[i];
        const Image& xImage = *sourceImages[i];
        const int64_t indexInState = imageIndexInState[&state]++;
        const ImageLayout gLayout = gImage.layout(primarySourceFeatureChannelOffset, out);
        const ImageLayout xLayout = xImage.layout(secondarySourceFeatureChannelOffset, in);
        const BufferSlice gStorage = gImage.storage(0), xStorage = xImage.storage(0);
        // Where source pixel j's gradient window starts in G: G[s*j + L + d*t] meets W'[t], with
        // L = -T - (extent - 1) for the forward window start T (docs/convolution_transpose.md).
        const int64_t leftX = checked::addSigned(-secondaryOffset.x, -(kw - 1), "secondary_offset.x");
        const int64_t topY = checked::addSigned(-secondaryOffset.y, -(kh - 1), "secondary_offset.y");

        if (wantData) {
            const Image& dst = *destinations[i];
            Region clip = clipToImage(clipRect, dst);
            ConvolutionParams p{};
            p.source = gLayout;
            p.destination = dst.layout(destinationFeatureChannelOffset, in);
            p.batch = 1;
            setGeometry(p, d);
            p.windowLeftX = checked::toInt32(
                checked::addSigned(leftX, checked::mulSigned(clip.origin.x, d.strideInPixelsX, "clip_rect"), "clip_rect"),
                "secondary_offset.x");
            p.windowTopY = checked::toInt32(
                checked::addSigned(topY, checked::mulSigned(clip.origin.y, d.strideInPixelsY, "clip_rect"), "clip_rect"),
                "secondary_offset.y");
            p.clipX = checked::toInt32(clip.origin.x, "clip_rect.origin.x");
            p.clipY = checked::toInt32(clip.origin.y, "clip_rect.origin.y");
            p.clipWidth = checked::toInt32(clip.size.width, "clip_rect.size.width");
            p.clipHeight = checked::toInt32(clip.size.height, "clip_rect.size.height");
            p.edgeMode = kEdgeZero;
            p.neuron.type = kNeuronNone;
            if (p.clipWidth > 0 && p.clipHeight > 0)
                backend.convolutionForward(cb, p, gStorage, weights_.rotated, BufferSlice{}, BufferSlice{},
                                           dst.storage(clip.origin.z), BufferSlice{});
        }
        if (wantWeights) {
            BufferSlice& scratch = rotatedGradient[&state];
            if (!scratch) scratch = BufferSlice{backend.newBuffer(size_t(d.weightCount()) * sizeof(float)), 0};
            // dW'[i][t][c] = sum_j X[j][i] * G[s*j + L + d*t][c]: the weight gradient of that convolution.
            ConvolutionWeightGradientParams w{};
            w.gradient = xLayout;
            w.source = gLayout;
            w.batch = 1;
            setGeometry(w, d);
            w.windowLeftX = checked::toInt32(leftX, "secondary_offset.x");
            w.windowTopY = checked::toInt32(topY, "secondary_offset.y");
            w.edgeMode = kEdgeZero;
            w.accumulate = indexInState > 0 ? 1 : 0;
            w.computeWeights = 1;
            w.computeBiases = 0;
            backend.convolutionWeightGradient(cb, w, xStorage, gStorage, scratch, BufferSlice{});
            // dB[c] = sum of G[.][c] (the same op with G as E, biases only).
            ConvolutionWeightGradientParams b = w;
            b.gradient = gLayout;
            b.computeWeights = 0;
            b.computeBiases = 1;
            backend.convolutionWeightGradient(cb, b, gStorage, gStorage, BufferSlice{}, state.gradientForBiases());
            if (indexInState + 1 == imagesPerState[&state])
                backend.convolutionTransposeWeights(cb, rotation(d, true), scratch, state.gradientForWeights());
        }
    }
}

}  // namespace mpsgrad
