#include "kernels/convolution.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/checked.h"
#include "core/errors.h"
#include "core/vector.h"
#include "kernels/convolution_sub_pixel.h"
#include "kernels/data_source_loading.h"

namespace mpsgrad {

// ---- descriptor ---------------------------------------------------------------------------------

CNNConvolutionDescriptor::CNNConvolutionDescriptor(int64_t kw, int64_t kh, int64_t in, int64_t out)
    : kernelWidth(kw), kernelHeight(kh), inputFeatureChannels(in), outputFeatureChannels(out) {}

int64_t CNNConvolutionDescriptor::weightsPerOutputChannel() const {
    int64_t g = effectiveGroups();
    return int64_t(checked::product({kernelWidth, kernelHeight, g > 0 ? inputFeatureChannels / g : 0}, "weights"));
}

void CNNConvolutionDescriptor::setBatchNormalizationParametersForInference(
    const std::vector<float>& mean, const std::vector<float>& variance, const std::vector<float>& gamma,
    const std::vector<float>& beta, float epsilon) {
    size_t n = size_t(outputFeatureChannels);
    for (auto* v : {&mean, &variance, &gamma, &beta})
        if (v->size() != n)
            throwValueError("batch normalization parameters: expected ", n,
                            " values each (output_feature_channels), got ", v->size());
    foldedScale.resize(n);
    foldedShift.resize(n);
    for (size_t o = 0; o < n; ++o)
        if (!(double(variance[o]) + double(epsilon) > 0.0) || !std::isfinite(double(variance[o]) + epsilon))
            throwValueError("variance: variance[", o, "] + epsilon = ", double(variance[o]) + double(epsilon),
                            " must be positive and finite (the folded scale divides by its square root)");
    for (size_t o = 0; o < n; ++o) {
        foldedScale[o] = gamma[o] / std::sqrt(variance[o] + epsilon);
        foldedShift[o] = beta[o] - foldedScale[o] * mean[o];
    }
}

void CNNConvolutionDescriptor::validate() const {
    // Every size travels to the kernels as a 32-bit int: range-checked here, before any narrowing.
    auto positive = [](int64_t v, const char* name) {
        if (v < 1 || v > INT32_MAX) throwValueError(name, ": must be in [1, 2**31 - 1], got ", v);
    };
    positive(kernelWidth, "kernel_width");
    positive(kernelHeight, "kernel_height");
    positive(inputFeatureChannels, "input_feature_channels");
    positive(outputFeatureChannels, "output_feature_channels");
    positive(strideInPixelsX, "stride_in_pixels_x");
    positive(strideInPixelsY, "stride_in_pixels_y");
    positive(dilationRateX, "dilation_rate_x");
    positive(dilationRateY, "dilation_rate_y");
    positive(groups, "groups");
    if (depthwise) {
        if (groups != 1) throwValueError("groups: a depthwise convolution descriptor needs groups == 1, got ", groups);
        if (outputFeatureChannels != inputFeatureChannels)
            throwValueError("output_feature_channels: a depthwise convolution supports channel multiplier 1 only, so "
                            "output_feature_channels must equal input_feature_channels (",
                            inputFeatureChannels, "), got ", outputFeatureChannels);
    } else if (groups > 1) {
        if (inputFeatureChannels % groups || outputFeatureChannels % groups)
            throwValueError("groups: ", groups, " does not divide input_feature_channels ", inputFeatureChannels,
                            " and output_feature_channels ", outputFeatureChannels);
        if ((inputFeatureChannels / groups) % 4 || (outputFeatureChannels / groups) % 4)
            throwValueError("groups: MPS needs a multiple of 4 channels per group; ", groups, " groups give ",
                            inputFeatureChannels / groups, " input and ", outputFeatureChannels / groups,
                            " output channels per group");
    }
    validateSubPixel();
    checked::floatBytes(checked::product({weightsPerOutputChannel(), outputFeatureChannels}, "weights"), "weights");
    fusedNeuronDescriptor.validate("fused_neuron_descriptor");
    if (fusedNeuronDescriptor.neuronType == CNNNeuronType::PReLU &&
        int64_t(fusedNeuronDescriptor.data.size()) != outputFeatureChannels)
        throwValueError("fused_neuron_descriptor: PReLU data has ", fusedNeuronDescriptor.data.size(),
                        " values but the convolution has ", outputFeatureChannels, " output channels");
}

// ---- data sources and weights ----------------------------------------------------------------------

CNNConvolutionWeightsDataSource::CNNConvolutionWeightsDataSource(CNNConvolutionDescriptor descriptor,
                                                                 std::vector<float> weights,
                                                                 std::vector<float> biases, std::string label)
    : descriptor_(std::move(descriptor)), weights_(std::move(weights)), biases_(std::move(biases)),
      label_(std::move(label)) {
    descriptor_.validate();
    if (int64_t(weights_.size()) != descriptor_.weightCount())
        throwValueError("weights: expected ", descriptor_.weightCount(), " values (O x kH x kW x I/groups), got ",
                        weights_.size());
    if (!biases_.empty() && int64_t(biases_.size()) != descriptor_.outputFeatureChannels)
        throwValueError("biases: expected ", descriptor_.outputFeatureChannels, " values, got ", biases_.size());
}

namespace {

BufferSlice uploadFloats(const Device& device, const float* values, size_t count) {
    BufferSlice slice{device.backend().newBuffer(count * sizeof(float)), 0};
    if (values && count) std::memcpy(slice.floats(), values, count * sizeof(float));
    return slice;
}

// Reads a data source between load and purge into fresh device buffers. Fresh buffers keep
// work encoded earlier on its old weights (reloads act at encode order).
ConvolutionWeights loadWeights(const Device& device, CNNConvolutionDataSource& source) {
    if (source.dataType() != DataType::Float32)
        throwValueError("data_source: data_type must be DataType.FLOAT32, got ",
                        static_cast<uint32_t>(source.dataType()));
    ConvolutionWeights w;
    w.descriptor = source.descriptor();
    w.descriptor.validate();
    // Between load and purge (a failing purge is reported, the kernel keeps the weights it copied).
    withLoaded(source, [&] {
        const float* weights = source.weights();
        if (!weights) throwValueError("data_source: weights() returned no data");
        size_t count = size_t(w.descriptor.weightCount());
        size_t out = size_t(w.descriptor.outputFeatureChannels);
        std::vector<float> folded(weights, weights + count);
        const float* bias = source.biasTerms();
        std::vector<float> biases(out, 0.0f);
        if (bias) biases.assign(bias, bias + out);
        w.hasBias = bias != nullptr;
        if (!w.descriptor.foldedScale.empty()) {
            int64_t per = w.descriptor.weightsPerOutputChannel();
            for (size_t o = 0; o < out; ++o) {
                for (int64_t k = 0; k < per; ++k) folded[o * per + k] *= w.descriptor.foldedScale[o];
                biases[o] = biases[o] * w.descriptor.foldedScale[o] + w.descriptor.foldedShift[o];
            }
            w.hasBias = true;
        }
        w.weights = uploadFloats(device, folded.data(), count);
        w.biases = uploadFloats(device, biases.data(), out);
        const auto& neuron = w.descriptor.fusedNeuronDescriptor;
        if (!neuron.data.empty()) w.neuronData = uploadFloats(device, neuron.data.data(), neuron.data.size());
    });
    return w;
}

// Encodes a copy of a weights state into fresh buffers of `w`.
void reloadFromState(CommandBuffer& cb, ConvolutionWeights& w, const char* kernelName,
                     const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    if (!state) throwTypeError("state: expected a CNNConvolutionWeightsAndBiasesState, got None");
    state->checkUsable(cb, "state");
    const auto& d = state->descriptor();
    if (d.weightCount() != w.descriptor.weightCount() || d.outputFeatureChannels != w.descriptor.outputFeatureChannels)
        throwValueError("state: holds ", d.weightCount(), " weights and ", d.outputFeatureChannels,
                        " biases but the ", kernelName, " needs ", w.descriptor.weightCount(), " and ",
                        w.descriptor.outputFeatureChannels);
    Backend& backend = cb.device().backend();
    BufferSlice weights{backend.newBuffer(size_t(d.weightCount()) * sizeof(float)), 0};
    BufferSlice biases{backend.newBuffer(size_t(d.outputFeatureChannels) * sizeof(float)), 0};
    backend.copyBuffer(cb, state->weights(), weights, size_t(d.weightCount()) * sizeof(float));
    backend.copyBuffer(cb, state->biases(), biases, size_t(d.outputFeatureChannels) * sizeof(float));
    w.weights = weights;
    w.biases = biases;
    w.hasBias = true;
    w.reloadCommandBuffer = cb.weak_from_this();
    w.reloadCommandBufferId = cb.id();
    w.reloadCompleted = std::make_shared<std::atomic<bool>>(false);
    cb.addInternalCompletion([done = w.reloadCompleted] { *done = true; });
    state->noteRead();
}

}  // namespace

ConvolutionWeights loadConvolutionWeights(const Device& device, CNNConvolutionDataSource& source) {
    return loadWeights(device, source);
}

void reloadConvolutionWeights(CommandBuffer& cb, ConvolutionWeights& w, const char* kernelName,
                              const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    reloadFromState(cb, w, kernelName, state);
}

void ConvolutionWeights::checkReloadVisible(const CommandBuffer& cb) const {
    if (!reloadCompleted || *reloadCompleted || cb.id() == reloadCommandBufferId) return;
    auto reloadBuffer = reloadCommandBuffer.lock();
    // A committed buffer stays alive until it completes, so an expired one was never committed.
    if (!reloadBuffer || reloadBuffer->status() == CommandBufferStatus::NotEnqueued)
        throwValueError("weights: reload_weights_and_biases_with_command_buffer encoded the new weights into a "
                        "command buffer that was never committed; commit it before encoding this kernel on another "
                        "command buffer");
}

namespace {

// The kernel geometry every convolution params struct carries (groups, size, stride, dilation).
template <class Params>
void setKernelGeometry(Params& p, const CNNConvolutionDescriptor& d) {
    p.groups = checked::toInt32(d.effectiveGroups(), "groups");
    p.kernelWidth = checked::toInt32(d.kernelWidth, "kernel_width");
    p.kernelHeight = checked::toInt32(d.kernelHeight, "kernel_height");
    p.strideX = checked::toInt32(d.strideInPixelsX, "stride_in_pixels_x");
    p.strideY = checked::toInt32(d.strideInPixelsY, "stride_in_pixels_y");
    p.dilationX = checked::toInt32(d.dilationRateX, "dilation_rate_x");
    p.dilationY = checked::toInt32(d.dilationRateY, "dilation_rate_y");
}

std::shared_ptr<CNNConvolutionDataSource> requireDataSource(std::shared_ptr<CNNConvolutionDataSource> source) {
    if (!source) throwTypeError("weights: expected a CNNConvolutionDataSource, got None");
    return source;
}

// The offset of the first output pixel actually computed: `offset` moved by the clip shift
// (in output pixels of the convolution, i.e. low-resolution pixels of a sub-pixel one) times the
// stride, so destination pixel clip_rect.origin + p reads offset + stride * p.
int64_t effectiveOffset(int64_t offset, int64_t shift, int64_t stride, const char* what) {
    return checked::addSigned(offset, checked::mulSigned(shift, stride, what), what);
}

// The source coordinate of the first output pixel's top-left tap.
int32_t windowOrigin(int64_t offset, int64_t shift, int64_t stride, int64_t dilatedKernel, const char* what) {
    int64_t o = effectiveOffset(offset, shift, stride, what);
    return checked::toInt32(checked::addSigned(o, -(dilatedKernel >> 1), what), what);
}

int32_t edgeModeCode(ImageEdgeMode mode, const char* what) {
    if (mode == ImageEdgeMode::Zero) return kEdgeZero;
    if (mode == ImageEdgeMode::Clamp) return kEdgeClamp;
    throwValueError(what, ": convolution supports ImageEdgeMode.ZERO and CLAMP, got ", static_cast<uint32_t>(mode));
}

}  // namespace

CNNConvolutionWeightsAndBiasesState::CNNConvolutionWeightsAndBiasesState(const Device& device,
                                                                         const CNNConvolutionDescriptor& descriptor,
                                                                         bool temporary, const CommandBuffer* cb)
    : State(device, {}, temporary, cb), descriptor_(descriptor) {
    descriptor_.validate();
    addBuffer(size_t(descriptor_.weightCount()) * sizeof(float));
    addBuffer(size_t(descriptor_.outputFeatureChannels) * sizeof(float));
}

CNNConvolutionWeightsAndBiasesState::CNNConvolutionWeightsAndBiasesState(const Device& device,
                                                                         const CNNConvolutionDescriptor& descriptor)
    : CNNConvolutionWeightsAndBiasesState(device, descriptor, false, nullptr) {}

CNNConvolutionWeightsAndBiasesState::CNNConvolutionWeightsAndBiasesState(BufferSlice weights, BufferSlice biases,
                                                                         const Device& device,
                                                                         const CNNConvolutionDescriptor& descriptor)
    : State(device, {}, false, nullptr), descriptor_(descriptor) {
    descriptor_.validate();
    const size_t wBytes = size_t(descriptor_.weightCount()) * sizeof(float);
    const size_t bBytes = size_t(descriptor_.outputFeatureChannels) * sizeof(float);
    // The state aliases the caller's memory (no copy): an update written through it is the caller's.
    buffers_.push_back(aliasSlice(weights, 0, wBytes, "weights", "weights_offset"));
    // MPS's biases are nullable (no bias); zero biases of the state's own add the same nothing and
    // keep every reader's two-buffer layout.
    if (biases)
        buffers_.push_back(aliasSlice(biases, 0, bBytes, "biases", "biases_offset"));
    else
        addBuffer(bBytes);
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolutionWeightsAndBiasesState::temporary(
    CommandBuffer& cb, const CNNConvolutionDescriptor& descriptor) {
    cb.checkEncodable();
    return std::shared_ptr<CNNConvolutionWeightsAndBiasesState>(
        new CNNConvolutionWeightsAndBiasesState(cb.device(), descriptor, true, &cb));
}

BufferSlice CNNConvolutionWeightsAndBiasesState::weights() const { return resourceAtIndex(0); }
BufferSlice CNNConvolutionWeightsAndBiasesState::biases() const { return resourceAtIndex(1); }

// ---- gradient state ----------------------------------------------------------------------------------

CNNConvolutionGradientState::CNNConvolutionGradientState(std::shared_ptr<CNNConvolution> convolution,
                                                         const CNNConvolutionDescriptor& descriptor,
                                                         int64_t sourceWidth, int64_t sourceHeight, bool temporary,
                                                         const CommandBuffer* cb)
    : CNNConvolutionGradientState(convolution ? convolution->device() : Device("cpu"), convolution, descriptor,
                                  sourceWidth, sourceHeight, temporary, cb) {}

CNNConvolutionGradientState::CNNConvolutionGradientState(const Device& device,
                                                         std::shared_ptr<CNNConvolution> convolution,
                                                         const CNNConvolutionDescriptor& descriptor,
                                                         int64_t sourceWidth, int64_t sourceHeight, bool temporary,
                                                         const CommandBuffer* cb)
    : NNGradientState(device, temporary, cb), convolution_(std::move(convolution)), descriptor_(descriptor) {
    addBuffer(size_t(descriptor.weightCount()) * sizeof(float));
    addBuffer(size_t(descriptor.outputFeatureChannels) * sizeof(float));
    snapshot.sourceWidth = sourceWidth;
    snapshot.sourceHeight = sourceHeight;
}

BufferSlice CNNConvolutionGradientState::gradientForWeights() const { return resourceAtIndex(0); }
BufferSlice CNNConvolutionGradientState::gradientForBiases() const { return resourceAtIndex(1); }

// ---- forward ----------------------------------------------------------------------------------------

CNNConvolution::CNNConvolution(const Device& device, std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNKernel(device), dataSource_(requireDataSource(std::move(dataSource))) {
    weights_ = loadWeights(device_, *dataSource_);
}

void CNNConvolution::reloadWeightsAndBiasesFromDataSource() {
    ConvolutionWeights fresh = loadWeights(device_, *dataSource_);
    if (fresh.descriptor.weightCount() != weights_.descriptor.weightCount() ||
        fresh.descriptor.outputFeatureChannels != weights_.descriptor.outputFeatureChannels)
        throwValueError("data_source: its descriptor changed shape since the kernel was created");
    fresh.descriptor = weights_.descriptor;
    weights_ = fresh;
}

void CNNConvolution::reloadWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    checkCommandBuffer(cb);
    reloadFromState(cb, weights_, className(), state);
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolution::exportWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, bool resultStateCanBeTemporary) {
    checkCommandBuffer(cb);
    weights_.checkReloadVisible(cb);
    auto state = resultStateCanBeTemporary
                     ? CNNConvolutionWeightsAndBiasesState::temporary(cb, weights_.descriptor)
                     : std::make_shared<CNNConvolutionWeightsAndBiasesState>(device_, weights_.descriptor);
    Backend& backend = device_.backend();
    backend.copyBuffer(cb, weights_.weights, state->weights(), size_t(weights_.descriptor.weightCount()) * 4);
    backend.copyBuffer(cb, weights_.biases, state->biases(), size_t(weights_.descriptor.outputFeatureChannels) * 4);
    return state;
}

StatePtr CNNConvolution::makeResultState(const Image& source, CommandBuffer* cb) {
    // Null when no shared_ptr owns the kernel (the state's back-reference then stays empty).
    const auto self = std::static_pointer_cast<CNNConvolution>(weak_from_this().lock());
    auto state = std::make_shared<CNNConvolutionGradientState>(self, weights_.descriptor, source.width(),
                                                               source.height(), cb != nullptr, cb);
    state->producer = self;
    return state;
}

bool CNNConvolution::readsFloat16Natively() const {
    return weights_.descriptor.subPixelScaleFactor == 1 && device_.backend().readsHalfNatively(HalfOp::Convolution);
}

void CNNConvolution::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                const StateBatch& states) {
    const CNNConvolutionDescriptor& d = weights_.descriptor;
    int32_t edge = edgeModeCode(edgeMode, "edge_mode");
    weights_.checkReloadVisible(cb);
    auto* state = states.empty() ? nullptr : dynamic_cast<CNNConvolutionGradientState*>(states.front().get());
    if (!states.empty() && !state)
        throwTypeError("destination_state: ", className(), " writes a CNNConvolutionGradientState, got a ",
                       states.front()->className());
    const Offset at = forwardOffset();
    const int64_t r = d.subPixelScaleFactor;
    int64_t totalImages = 0;
    for (const auto& dispatch : dispatches) {
        if (dispatch.sourceChannels != d.inputFeatureChannels)
            throwValueError("source_image: ", className(), " reads ", d.inputFeatureChannels,
                            " input feature channels but the source image provides ", dispatch.sourceChannels,
                            " (feature_channels ", dispatch.source->featureChannels(),
                            ", source_feature_channel_offset ", sourceFeatureChannelOffset, ")");
        checkDestinationChannels(*dispatch.destination, d.destinationFeatureChannels());
        const sub_pixel::LowResolutionGrid g = sub_pixel::lowResolutionGrid(r, clipRect, dispatch.clip);
        windowOrigin(at.x, g.shiftX, d.strideInPixelsX, dilatedKernelWidth(), "offset.x");  // validated first
        windowOrigin(at.y, g.shiftY, d.strideInPixelsY, dilatedKernelHeight(), "offset.y");
        if (state) {
            const auto& first = dispatches.front();
            if (dispatch.clip.size.width != first.clip.size.width || dispatch.clip.size.height != first.clip.size.height ||
                dispatch.source->width() != first.source->width() || dispatch.source->height() != first.source->height())
                throwValueError("source_images: every image of a batch sharing one gradient state must have the "
                                "same size");
            if (state->descriptor().weightCount() != d.weightCount())
                throwValueError("destination_state: was made by a convolution of another shape");
        }
        totalImages += dispatch.imageCount;
    }

    const bool fused = d.fusedNeuronDescriptor.neuronType != CNNNeuronType::None;
    ConvolutionParams base{};
    setKernelGeometry(base, d);
    base.edgeMode = edge;
    base.hasBias = weights_.hasBias ? 1 : 0;
    base.neuron = d.fusedNeuronDescriptor.params();

    if (state) {
        const auto& first = dispatches.front();
        ForwardSnapshot& s = state->snapshot;
        // The offset of the pixels actually computed, so the gradient meets the forward geometry.
        const sub_pixel::LowResolutionGrid g = sub_pixel::lowResolutionGrid(r, clipRect, first.clip);
        s.offset = Offset{effectiveOffset(at.x, g.shiftX, d.strideInPixelsX, "offset.x"),
                          effectiveOffset(at.y, g.shiftY, d.strideInPixelsY, "offset.y"), at.z};
        state->lowResolutionWidth = g.width;
        state->lowResolutionHeight = g.height;
        state->subPixelPhaseX = g.phaseX;
        state->subPixelPhaseY = g.phaseY;
        s.clipRect = first.clip;
        s.edgeMode = edgeMode;
        s.kernelWidth = d.kernelWidth;
        s.kernelHeight = d.kernelHeight;
        s.strideX = d.strideInPixelsX;
        s.strideY = d.strideInPixelsY;
        s.dilationX = d.dilationRateX;
        s.dilationY = d.dilationRateY;
        s.sourceWidth = first.source->width();
        s.sourceHeight = first.source->height();
        s.sourceFeatureChannels = first.source->featureChannels();
        s.destinationWidth = first.destination->width();
        s.destinationHeight = first.destination->height();
        s.destinationFeatureChannels = first.destination->featureChannels();
        s.sourceFeatureChannelOffset = sourceFeatureChannelOffset;
        s.sourceFeatureChannelCount = d.inputFeatureChannels;
        s.destinationFeatureChannelOffset = destinationFeatureChannelOffset;
        s.batchSize = totalImages;
        s.paddingMethod = padding ? padding->paddingMethod() : 0;
        s.encoded = true;
        state->neuron = base.neuron;
        state->neuronData = weights_.neuronData;
        state->preactivation = BufferSlice{};
        if (fused) {
            ImageLayout& l = state->preactivationLayout;
            l.width = checked::toInt32(g.width, "clip width");
            l.height = checked::toInt32(g.height, "clip height");
            l.pixelStride = checked::toInt32(d.outputFeatureChannels, "output_feature_channels");
            l.imageStride = checked::toInt32(checked::product({l.width, l.height, l.pixelStride}, "preactivation"),
                                             "preactivation image size");
            l.channelOffset = 0;
            l.channels = l.pixelStride;
            state->preactivation = BufferSlice{
                device_.backend().newBuffer(checked::floatBytes(checked::product({l.imageStride, totalImages},
                                                                                 "preactivation"),
                                                                "preactivation")),
                0};
        }
    }

    Backend& backend = device_.backend();
    int64_t imagesDone = 0;
    for (size_t i = 0; i < dispatches.size();) {
        // Merge consecutive single images stored back to back into one dispatch.
        size_t j = i + 1;
        int64_t count = dispatches[i].imageCount;
        while (j < dispatches.size() && dispatches[j - 1].source->isFollowedBy(*dispatches[j].source) &&
               dispatches[j - 1].destination->isFollowedBy(*dispatches[j].destination) &&
               dispatches[j].clip.origin.x == dispatches[i].clip.origin.x &&
               dispatches[j].clip.origin.y == dispatches[i].clip.origin.y &&
               dispatches[j].clip.size.width == dispatches[i].clip.size.width &&
               dispatches[j].clip.size.height == dispatches[i].clip.size.height &&
               dispatches[i].source->numberOfImages() == 1 && dispatches[j].source->numberOfImages() == 1 &&
               dispatches[i].destination->numberOfImages() == 1 && dispatches[j].destination->numberOfImages() == 1) {
            count += dispatches[j].imageCount;
            ++j;
        }
        const UnaryDispatch& u = dispatches[i];
        const sub_pixel::LowResolutionGrid g = sub_pixel::lowResolutionGrid(r, clipRect, u.clip);
        ConvolutionParams p = base;
        // storageLayout: FLOAT16 images arrive as they are when readsFloat16Natively().
        p.source = u.source->storageLayout(u.sourceChannelOffset, d.inputFeatureChannels);
        p.batch = checked::toInt32(count, "number of images");
        ImageLayout highLayout =
            u.destination->storageLayout(destinationFeatureChannelOffset, d.destinationFeatureChannels());
        BufferSlice destination = u.destination->storage(u.destinationImageIndex);
        if (r == 1) {
            p.destination = highLayout;
            p.clipX = checked::toInt32(u.clip.origin.x, "clip_rect.origin.x");
            p.clipY = checked::toInt32(u.clip.origin.y, "clip_rect.origin.y");
            p.clipWidth = checked::toInt32(u.clip.size.width, "clip_rect.size.width");
            p.clipHeight = checked::toInt32(u.clip.size.height, "clip_rect.size.height");
        } else {
            // Io, the low-resolution result, into scratch; shuffled into the destination below.
            p.destination = sub_pixel::scratchLayout(g.width, g.height, d.outputFeatureChannels);
            destination = sub_pixel::newScratch(backend, p.destination, count);
            p.clipX = p.clipY = 0;
            p.clipWidth = p.destination.width;
            p.clipHeight = p.destination.height;
        }
        // A clip rectangle that started left of / above the destination was moved onto it; the
        // window moves by the same number of output pixels (times the stride), so destination
        // pixel clip_rect.origin + p keeps reading offset + stride * p (spec §1.2).
        p.windowLeftX = windowOrigin(at.x, g.shiftX, d.strideInPixelsX, dilatedKernelWidth(), "offset.x");
        p.windowTopY = windowOrigin(at.y, g.shiftY, d.strideInPixelsY, dilatedKernelHeight(), "offset.y");
        BufferSlice preactivation;
        if (state && fused) {
            p.preactivation = state->preactivationLayout;
            p.writePreactivation = 1;
            preactivation = state->preactivation.advancedBy(size_t(imagesDone) * p.preactivation.imageStride * 4);
        }
        HalfBindings formats;
        formats.source = u.source->isFloat16();
        formats.destination = r == 1 && u.destination->isFloat16();  // r > 1: a float32 scratch
        if (formats.any())
            backend.convolutionForwardHalf(cb, p, formats, u.source->storage(u.sourceImageIndex), weights_.weights,
                                           weights_.biases, weights_.neuronData, destination, preactivation);
        else
            backend.convolutionForward(cb, p, u.source->storage(u.sourceImageIndex), weights_.weights,
                                       weights_.biases, weights_.neuronData, destination, preactivation);
        if (r > 1)
            backend.subPixelShuffle(cb, sub_pixel::shuffleParams(p.destination, highLayout, count, r, g, u.clip),
                                    destination, u.destination->storage(u.destinationImageIndex));
        imagesDone += count;
        i = j;
    }
}

// ---- gradient -----------------------------------------------------------------------------------------

CNNConvolutionGradient::CNNConvolutionGradient(const Device& device,
                                               std::shared_ptr<CNNConvolutionDataSource> dataSource)
    : CNNGradientKernel(device), dataSource_(requireDataSource(std::move(dataSource))) {
    weights_ = loadWeights(device_, *dataSource_);
}

void CNNConvolutionGradient::reloadWeightsAndBiasesFromDataSource() {
    ConvolutionWeights fresh = loadWeights(device_, *dataSource_);
    if (fresh.descriptor.weightCount() != weights_.descriptor.weightCount())
        throwValueError("data_source: its descriptor changed shape since the kernel was created");
    fresh.descriptor = weights_.descriptor;
    weights_ = fresh;
}

void CNNConvolutionGradient::reloadWeightsAndBiasesWithCommandBuffer(
    CommandBuffer& cb, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    checkCommandBuffer(cb);
    reloadFromState(cb, weights_, className(), state);
}

void CNNConvolutionGradient::checkGradientStateType(const State& state) const {
    auto* conv = dynamic_cast<const CNNConvolutionGradientState*>(&state);
    if (!conv)
        throwTypeError("gradient_state: CNNConvolutionGradient needs the CNNConvolutionGradientState made by "
                       "CNNConvolution.result_state, got a ", state.className());
    const auto& a = conv->descriptor();
    const auto& b = weights_.descriptor;
    if (a.inputFeatureChannels != b.inputFeatureChannels || a.outputFeatureChannels != b.outputFeatureChannels ||
        a.kernelWidth != b.kernelWidth || a.kernelHeight != b.kernelHeight || a.effectiveGroups() != b.effectiveGroups() ||
        a.strideInPixelsX != b.strideInPixelsX || a.strideInPixelsY != b.strideInPixelsY ||
        a.dilationRateX != b.dilationRateX || a.dilationRateY != b.dilationRateY ||
        a.subPixelScaleFactor != b.subPixelScaleFactor)
        throwValueError("gradient_state: comes from a convolution with ", a.inputFeatureChannels, "->",
                        a.outputFeatureChannels, " channels, ", a.kernelWidth, "x", a.kernelHeight, " kernel, stride ",
                        a.strideInPixelsX, "x", a.strideInPixelsY, ", dilation ", a.dilationRateX, "x",
                        a.dilationRateY, ", ", a.effectiveGroups(), " group(s), but this CNNConvolutionGradient has ",
                        b.inputFeatureChannels, "->", b.outputFeatureChannels, ", ", b.kernelWidth, "x",
                        b.kernelHeight, ", stride ", b.strideInPixelsX, "x", b.strideInPixelsY, ", dilation ",
                        b.dilationRateX, "x", b.dilationRateY, ", ", b.effectiveGroups(), " group(s) (sub-pixel scale ",
                        a.subPixelScaleFactor, " vs ", b.subPixelScaleFactor, ")");
}

void CNNConvolutionGradient::configureFromSnapshot(const ForwardSnapshot& s) {
    // Spec §2.1.6: the data gradient reads E from (0,0) with kernel offset -o + (even extent ? 1 : 0);
    // the weight gradient reads X from the forward window's top-left tap.
    int64_t kw = (s.kernelWidth - 1) * s.dilationX + 1;
    int64_t kh = (s.kernelHeight - 1) * s.dilationY + 1;
    primaryOffset = Offset{0, 0, 0};
    kernelOffsetX = -s.offset.x + ((kw & 1) ? 0 : 1);
    kernelOffsetY = -s.offset.y + ((kh & 1) ? 0 : 1);
    secondaryOffset = Offset{s.offset.x - (kw >> 1), s.offset.y - (kh >> 1), 0};
    clipRect = rectNoClip();
    secondaryEdgeMode = s.edgeMode;
    primaryStrideInPixelsX = secondaryStrideInPixelsX = s.strideX;
    primaryStrideInPixelsY = secondaryStrideInPixelsY = s.strideY;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

bool CNNConvolutionGradient::readsFloat16Natively() const {
    const Backend& backend = device_.backend();
    return weights_.descriptor.subPixelScaleFactor == 1 && backend.readsHalfNatively(HalfOp::Convolution) &&
           backend.readsHalfNatively(HalfOp::Neuron);
}

void CNNConvolutionGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                const ImageBatch& sourceImages, const StateBatch& states,
                                                const ImageBatch& destinations) {
    const CNNConvolutionDescriptor& d = weights_.descriptor;
    const uint32_t option = uint32_t(gradientOption);
    if (option < 1 || option > 3)
        throwValueError("gradient_option: must be GRADIENT_WITH_DATA (1), GRADIENT_WITH_WEIGHTS_AND_BIAS (2) or ALL "
                        "(3), got ", option);
    const bool wantData = option & 1u;
    const bool wantWeights = option & 2u;
    if (wantData) weights_.checkReloadVisible(cb);
    const int64_t in = d.inputFeatureChannels, out = d.outputFeatureChannels;
    int32_t xEdge = edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");

    // Validate every image against its state before encoding anything.
    std::map<const State*, int64_t> imagesPerState;
    for (const auto& s : states) imagesPerState[s.get()]++;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNConvolutionGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        // The gradient handles one image per Image (legacy multi-image Images would silently
        // lose all but their first image); batches are lists of single images.
        for (const auto& [image, what] : {std::pair<const Image*, const char*>{&g, "source_gradient"},
                                          {&x, "source_image"},
                                          {destinations[i].get(), "destination_gradient"}})
            if (image->numberOfImages() != 1)
                throwValueError(what, ": ", className(), " needs images with number_of_images == 1, got ",
                                image->numberOfImages(),
                                "; pass a batch as a list of single images (Image.batch_representation())");
        // Single images: the only image a z offset can select is image 0.
        if (primaryOffset.z != 0 || secondaryOffset.z != 0)
            throwValueError(primaryOffset.z != 0 ? "primary_offset" : "secondary_offset", ": z = ",
                            primaryOffset.z != 0 ? primaryOffset.z : secondaryOffset.z,
                            " selects an image the single-image inputs of CNNConvolutionGradient do not have");
        // The weight and bias gradients are the sums over the batch the state was encoded with;
        // each gradient encode restarts them, so one encode must cover the whole batch.
        if (wantWeights && imagesPerState[states[i].get()] < s.batchSize)
            throwValueError("gradient_states: the forward pass encoded ", s.batchSize,
                            " image(s) with this state but this gradient encode covers ",
                            imagesPerState[states[i].get()],
                            "; the weight and bias gradients are summed over the batch, so encode the gradient of "
                            "the whole batch in one encode_batch call (or use gradient_option GRADIENT_WITH_DATA)");
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight)
            throwValueError("source_image: is ", x.width(), "x", x.height(), " but the gradient state records a ",
                            s.sourceWidth, "x", s.sourceHeight, " forward source");
        if (int64_t(g.width()) != int64_t(s.clipRect.size.width) || int64_t(g.height()) != int64_t(s.clipRect.size.height))
            throwValueError("source_gradient: is ", g.width(), "x", g.height(),
                            " but the forward convolution wrote a ", s.clipRect.size.width, "x",
                            s.clipRect.size.height, " result");
        int64_t gChannels = availablePrimaryChannels(g);
        if (gChannels < d.destinationFeatureChannels())
            throwValueError("source_gradient: provides ", gChannels, " feature channels at offset ",
                            primarySourceFeatureChannelOffset, " but the convolution has ",
                            d.destinationFeatureChannels(), " output channels");
        int64_t xChannels = availableSecondaryChannels(x);
        if (xChannels != in)
            throwValueError("source_image: provides ", xChannels, " feature channels at offset ",
                            secondarySourceFeatureChannelOffset, " but the convolution has ", in, " input channels");
        checkDestinationChannels(*destinations[i], in, "destination_gradient");
        if (wantData && s.edgeMode != ImageEdgeMode::Zero)
            throwValueError("gradient_state: the forward convolution used edge_mode CLAMP; the data gradient "
                            "(a zero-padded transposed convolution, as in MPS) is exact only for edge_mode ZERO. "
                            "Use gradient_option GRADIENT_WITH_WEIGHTS_AND_BIAS or a ZERO edge mode");
        if (state.preactivation && imagesPerState[states[i].get()] != s.batchSize)
            throwValueError("gradient_states: the forward pass encoded ", s.batchSize,
                            " image(s) with this state and a fused neuron; encode the gradient of the whole batch "
                            "at once so each image meets its pre-activation values");
    }

    Backend& backend = device_.backend();
    std::map<const State*, int64_t> imageIndexInState;
    for (size_t i = 0; i < states.size();) {
        // Images [i, run) are encoded together: one image and every following image stored right
        // after the previous one and sharing its state. One backend op then covers the run (on
        // the CPU a few matrix products over the whole batch instead of a few per image: the
        // fixed costs of an op dominate small layers such as the digits example's).
        size_t run = i + 1;
        while (run < states.size() && states[run] == states[i] &&
               sourceGradients[run - 1]->isFollowedBy(*sourceGradients[run]) &&
               sourceImages[run - 1]->isFollowedBy(*sourceImages[run]) &&
               destinations[run - 1]->isFollowedBy(*destinations[run]))
            ++run;
        const int32_t count = int32_t(run - i);
        auto& state = static_cast<CNNConvolutionGradientState&>(*states[i]);
        const Image& gImage = *sourceGradients[i];
        const Image& xImage = *sourceImages[i];
        const int64_t indexInState = imageIndexInState[&state];
        imageIndexInState[&state] += count;

        // storageLayout: FLOAT16 images arrive as they are when readsFloat16Natively().
        ImageLayout gradientLayout =
            gImage.storageLayout(primarySourceFeatureChannelOffset, d.destinationFeatureChannels());
        BufferSlice gradient = gImage.storage(primaryOffset.z);
        bool gradientIsHalf = gImage.isFloat16();
        if (d.subPixelScaleFactor > 1) {
            // The inverse shuffle: E on the low-resolution grid of the forward's Io (zeros where
            // the forward wrote nothing); everything below is the regular convolution's gradient.
            ImageLayout low = sub_pixel::scratchLayout(state.lowResolutionWidth, state.lowResolutionHeight, out);
            BufferSlice scratch = sub_pixel::newScratch(backend, low, count);
            sub_pixel::LowResolutionGrid grid;
            grid.phaseX = state.subPixelPhaseX;
            grid.phaseY = state.subPixelPhaseY;
            Region whole{{0, 0, 0}, {uint64_t(gImage.width()), uint64_t(gImage.height()), 1}};
            backend.subPixelUnshuffle(
                cb, sub_pixel::shuffleParams(low, gradientLayout, count, d.subPixelScaleFactor, grid, whole), gradient,
                scratch);
            gradientLayout = low;
            gradient = scratch;
        }
        if (state.preactivation) {
            // E' = E * f'(pre-activation): the fused neuron's derivative, into a scratch image.
            ImageLayout scratch = state.preactivationLayout;
            BufferSlice scaled{backend.newBuffer(size_t(scratch.imageStride) * size_t(count) * sizeof(float)), 0};
            NeuronGradientParams np{};
            np.gradient = gradientLayout;
            np.source = scratch;
            np.destination = scratch;
            np.batch = count;
            np.clipWidth = scratch.width;
            np.clipHeight = scratch.height;
            np.neuron = state.neuron;
            const BufferSlice preactivation =
                state.preactivation.advancedBy(size_t(indexInState) * scratch.imageStride * 4);
            if (gradientIsHalf) {
                HalfBindings formats;
                formats.gradient = true;
                backend.neuronGradientHalf(cb, np, formats, gradient, preactivation, state.neuronData, scaled);
            } else {
                backend.neuronGradient(cb, np, gradient, preactivation, state.neuronData, scaled);
            }
            gradientLayout = scratch;
            gradient = scaled;
            gradientIsHalf = false;
        }

        if (wantData) {
            const Image& dst = *destinations[i];
            Region clip = clipToImage(clipRect, dst);
            ConvolutionDataGradientParams p{};
            p.gradient = gradientLayout;
            p.destination = dst.storageLayout(destinationFeatureChannelOffset, in);
            p.batch = count;
            setKernelGeometry(p, d);
            int64_t kw = (d.kernelWidth - 1) * d.dilationRateX + 1, kh = (d.kernelHeight - 1) * d.dilationRateY + 1;
            p.windowLeftX = checked::toInt32(
                checked::addSigned(checked::mulSigned(primaryOffset.x, d.strideInPixelsX, "primary_offset.x"),
                                   checked::addSigned(kernelOffsetX, -(kw >> 1), "kernel_offset_x"),
                                   "primary_offset.x"),
                "primary_offset.x");
            p.windowTopY = checked::toInt32(
                checked::addSigned(checked::mulSigned(primaryOffset.y, d.strideInPixelsY, "primary_offset.y"),
                                   checked::addSigned(kernelOffsetY, -(kh >> 1), "kernel_offset_y"),
                                   "primary_offset.y"),
                "primary_offset.y");
            p.clipX = checked::toInt32(clip.origin.x, "clip_rect.origin.x");
            p.clipY = checked::toInt32(clip.origin.y, "clip_rect.origin.y");
            p.clipWidth = checked::toInt32(clip.size.width, "clip_rect.size.width");
            p.clipHeight = checked::toInt32(clip.size.height, "clip_rect.size.height");
            HalfBindings formats;
            formats.gradient = gradientIsHalf;
            formats.destination = dst.isFloat16();
            if (p.clipWidth > 0 && p.clipHeight > 0 && formats.any())
                backend.convolutionDataGradientHalf(cb, p, formats, gradient, weights_.weights, BufferSlice{},
                                                    dst.storage(clip.origin.z));
            else if (p.clipWidth > 0 && p.clipHeight > 0)
                backend.convolutionDataGradient(cb, p, gradient, weights_.weights, BufferSlice{},
                                                dst.storage(clip.origin.z));
        }
        if (wantWeights) {
            ConvolutionWeightGradientParams p{};
            p.gradient = gradientLayout;
            p.source = xImage.storageLayout(secondarySourceFeatureChannelOffset, in);
            p.batch = count;
            setKernelGeometry(p, d);
            p.windowLeftX = checked::toInt32(secondaryOffset.x, "secondary_offset.x");
            p.windowTopY = checked::toInt32(secondaryOffset.y, "secondary_offset.y");
            p.edgeMode = xEdge;
            p.accumulate = indexInState > 0 ? 1 : 0;
            p.computeWeights = 1;
            p.computeBiases = 1;
            HalfBindings formats;
            formats.gradient = gradientIsHalf;
            formats.source = xImage.isFloat16();
            if (formats.any())
                backend.convolutionWeightGradientHalf(cb, p, formats, gradient, xImage.storage(secondaryOffset.z),
                                                      state.gradientForWeights(), state.gradientForBiases());
            else
                backend.convolutionWeightGradient(cb, p, gradient, xImage.storage(secondaryOffset.z),
                                                  state.gradientForWeights(), state.gradientForBiases());
        }
        i = run;
    }
}

}  // namespace mpsgrad
