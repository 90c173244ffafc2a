#include "core/kernel.h"

#include <algorithm>
#include <set>

#include "core/errors.h"
#include "core/float16_shadow.h"
#include "core/host_access.h"
#include "core/kernel_support.h"

namespace mpsgrad {

// ---- shared helpers ---------------------------------------------------------------------------

void checkChannelOffset(int64_t value, const char* what) {
    if (value < 0 || value % 4 != 0) throwValueError(what, ": must be a non-negative multiple of 4, got ", value);
}

Region clipToImage(const Region& clip, const Image& destination) {
    auto clampAxis = [](int64_t origin, uint64_t size, int64_t extent, int64_t& outOrigin, uint64_t& outSize) {
        int64_t begin = std::max<int64_t>(0, origin);
        // origin + size exactly, in 128 bits: a huge size (RECT_NO_CLIP) reaches the image's end,
        // but one that only makes up for an origin near -2**63 ends where the sum says (saturating
        // every size above 2**63 made such a rectangle cover the whole row).
        const __int128 sum = __int128(origin) + __int128(size);
        int64_t end = sum >= __int128(extent) ? extent : int64_t(sum);
        begin = std::min(begin, extent);
        outOrigin = begin;
        outSize = end > begin ? uint64_t(end - begin) : 0;
    };
    Region r;
    clampAxis(clip.origin.x, clip.size.width, destination.width(), r.origin.x, r.size.width);
    clampAxis(clip.origin.y, clip.size.height, destination.height(), r.origin.y, r.size.height);
    clampAxis(clip.origin.z, clip.size.depth, destination.numberOfImages(), r.origin.z, r.size.depth);
    return r;
}

Region nonEmptyClip(const Region& clip, const Image& destination, const char* what) {
    const Region r = clipToImage(clip, destination);
    if (r.size.width == 0 || r.size.height == 0 || r.size.depth == 0)
        throwValueError("clip_rect: selects no pixel of the ", destination.width(), "x", destination.height(), " ",
                        what);
    return r;
}

using namespace kernel_support;  // core/kernel_support.h

uint32_t defaultPaddingMethod() {
    return PaddingMethod::AlignCentered | PaddingMethod::AddRemainderToTopLeft | PaddingMethod::SizeSame;
}

void Kernel::checkCommandBuffer(const CommandBuffer& cb) const {
    if (cb.device() != device_)
        throwValueError("command_buffer: belongs to device '", cb.device().name(), "' but the ", className(),
                        " kernel to '", device_.name(), "'");
    cb.checkEncodable();
}

// ---- CNNKernel ---------------------------------------------------------------------------------

CNNKernel::CNNKernel(const Device& device) : Kernel(device) {}

int64_t CNNKernel::availableSourceChannels(const Image& source) const {
    return availableChannels(source, sourceFeatureChannelOffset, sourceFeatureChannelMaxCount,
                             "source_feature_channel_offset", "source image");
}

void CNNKernel::checkDestinationChannels(const Image& destination, int64_t channels) const {
    checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
    if (destinationFeatureChannelOffset + channels > destination.featureChannels())
        throwValueError("destination_image: has ", destination.featureChannels(), " feature channels but ",
                        className(), " writes ", channels, " channels at destination_feature_channel_offset ",
                        destinationFeatureChannelOffset);
}

std::vector<UnaryDispatch> CNNKernel::resolve(const CommandBuffer& cb, const ImageBatch& sources,
                                              const ImageBatch& destinations) const {
    requireSameLength(sources.size(), destinations.size(), "source_images", "destination_images");
    if (sources.empty()) throwValueError("source_images: the batch is empty");
    std::vector<UnaryDispatch> dispatches;
    for (size_t i = 0; i < sources.size(); ++i) {
        requireObject(sources[i], "source_image", "an Image");
        requireObject(destinations[i], "destination_image", "an Image");
        sources[i]->checkUsable(cb, "source_image");
        destinations[i]->checkUsable(cb, "destination_image");
        UnaryDispatch d;
        d.source = sources[i];
        d.destination = destinations[i];
        d.sourceChannelOffset = sourceFeatureChannelOffset;
        d.sourceChannels = availableSourceChannels(*d.source);
        d.clip = nonEmptyClip(clipRect, *d.destination, "destination image");
        if (offset.z < 0 || offset.z >= d.source->numberOfImages())
            throwValueError("offset: z = ", offset.z, " is outside the source's ", d.source->numberOfImages(),
                            " image(s)");
        d.sourceImageIndex = offset.z;
        d.destinationImageIndex = d.clip.origin.z;
        d.imageCount = std::min<int64_t>(int64_t(d.clip.size.depth), d.source->numberOfImages() - offset.z);
        dispatches.push_back(d);
    }
    return dispatches;
}

void CNNKernel::encodeResolved(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& states,
                               const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    auto dispatches = resolve(cb, sources, destinations);
    if (!states.empty()) {
        requireSameLength(sources.size(), states.size(), "source_images", "destination_states");
        for (const auto& s : states) {
            requireObject(s, "destination_state", "a State");
            s->checkUsable(cb, "destination_state");
        }
        if (isResultStateReusedAcrossBatch())
            for (const auto& s : states)
                if (s != states.front())
                    throwValueError("destination_states: ", className(),
                                    " shares one state across a batch; pass the same state for every image");
    }
    // FLOAT16 and UNORM images reach the kernel as float32 shadows (core/float16_shadow.h), FLOAT16
    // ones as they are when the kernel reads half natively; the read counts below stay with the
    // originals.
    Float32Shadows shadows(cb, readsFloat16Natively());
    shadows.cover({&sources, &destinations});  // one conversion per batch block
    for (auto& d : dispatches) {
        d.source = shadows.read(d.source);
        d.destination = shadows.write(d.destination);
    }
    encodeImpl(cb, dispatches, states);
    shadows.finish();
    // Before the reads: a temporary destination must still be accessible to be noted. A forward
    // kernel's destination states are not noted: what the host reads of them (the gradient buffers)
    // is written by the gradient kernels.
    host_access::noteKernelWrites(cb, destinations);
    noteReadsOfUnique(sources);
}

void CNNKernel::encode(CommandBuffer& cb, const ImagePtr& source, const ImagePtr& destination) {
    encodeResolved(cb, {source}, {}, {destination});
}

void CNNKernel::encode(CommandBuffer& cb, const ImagePtr& source, const StatePtr& destinationState,
                       const ImagePtr& destination) {
    encodeResolved(cb, {source}, destinationState ? StateBatch{destinationState} : StateBatch{}, {destination});
}

void CNNKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& destinationStates,
                            const ImageBatch& destinations) {
    encodeResolved(cb, sources, destinationStates, destinations);
}

ImagePtr CNNKernel::encode(CommandBuffer& cb, const ImagePtr& source) { return encode(cb, source, nullptr, false); }

ImagePtr CNNKernel::encode(CommandBuffer& cb, const ImagePtr& source, StatePtr* destinationState,
                           bool destinationStateIsTemporary) {
    StateBatch states;
    ImageBatch results = encodeBatch(cb, {source}, destinationState ? &states : nullptr, destinationStateIsTemporary);
    if (destinationState) *destinationState = states.empty() ? nullptr : states.front();
    return results.front();
}

ImageBatch CNNKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& sources, StateBatch* destinationStates,
                                  bool destinationStateIsTemporary) {
    checkCommandBuffer(cb);
    if (sources.empty()) throwValueError("source_images: the batch is empty");
    for (const auto& s : sources) {
        requireObject(s, "source_image", "an Image");
        requireSingleImage(s, "source_image");
    }
    ImageDescriptor descriptor = destinationImageDescriptor(sources, {});
    ImageBatch destinations = allocateDestinations(
        cb, destinationImageAllocator, descriptor, this, sources.size(),
        writesEveryDestinationPixel() && writesWholeDestination(descriptor, destinationFeatureChannelOffset, clipRect));
    StateBatch states;
    if (destinationStates) {
        states = destinationStateIsTemporary ? temporaryResultStateBatch(cb, sources, destinations)
                                             : resultStateBatch(sources, destinations);
        if (!states.empty() && !states.front()) states.clear();  // the kernel has no state
    }
    encodeResolved(cb, sources, states, destinations);
    if (destinationStates) *destinationStates = states;
    return destinations;
}

ImageBatch CNNKernel::allocateDestinationImages(CommandBuffer& cb, const ImageBatch& sources, size_t count) {
    checkCommandBuffer(cb);
    if (sources.empty()) throwValueError("source_images: the batch is empty");
    requireObject(sources.front(), "source_image", "an Image");
    requireSingleImages(sources, "source_image");  // allocates single-image destinations
    ImageDescriptor descriptor = destinationImageDescriptor({sources.front()}, {});
    return allocateDestinations(
        cb, destinationImageAllocator, descriptor, this, count,
        writesEveryDestinationPixel() && writesWholeDestination(descriptor, destinationFeatureChannelOffset, clipRect));
}

StatePtr CNNKernel::resultState(const ImagePtr& source, const StateBatch&, const ImagePtr&) {
    requireObject(source, "source_image", "an Image");
    return makeResultState(*source, nullptr);
}

StatePtr CNNKernel::temporaryResultState(CommandBuffer& cb, const ImagePtr& source, const StateBatch&,
                                         const ImagePtr&) {
    checkCommandBuffer(cb);
    requireObject(source, "source_image", "an Image");
    return makeResultState(*source, &cb);
}

StateBatch CNNKernel::resultStateBatch(const ImageBatch& sources, const ImageBatch&) {
    StateBatch states;
    for (size_t i = 0; i < sources.size(); ++i) {
        requireObject(sources[i], "source_image", "an Image");
        states.push_back(isResultStateReusedAcrossBatch() && i > 0 ? states.front()
                                                                   : makeResultState(*sources[i], nullptr));
    }
    return states;
}

StateBatch CNNKernel::temporaryResultStateBatch(CommandBuffer& cb, const ImageBatch& sources, const ImageBatch&) {
    checkCommandBuffer(cb);
    StateBatch states;
    for (size_t i = 0; i < sources.size(); ++i) {
        requireObject(sources[i], "source_image", "an Image");
        states.push_back(isResultStateReusedAcrossBatch() && i > 0 ? states.front()
                                                                   : makeResultState(*sources[i], &cb));
    }
    return states;
}

ImageDescriptor CNNKernel::destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) {
    if (sourceImages.empty()) throwValueError("source_images: expected at least one image");
    requireObject(sourceImages.front(), "source_images", "an Image");
    const Image& source = *sourceImages.front();
    uint32_t method = padding ? padding->paddingMethod() : defaultPaddingMethod();
    int64_t width, height, offsetX, offsetY;
    paddedAxis(source.width(), strideInPixelsX(), dilatedKernelWidth(), method, padding::Axis::X, isBackwards(),
               width, offsetX);
    paddedAxis(source.height(), strideInPixelsY(), dilatedKernelHeight(), method, padding::Axis::Y, isBackwards(),
               height, offsetY);
    if (width < 1 || height < 1)
        throwValueError("source_image: a ", source.width(), "x", source.height(), " image is too small for the ",
                        dilatedKernelWidth(), "x", dilatedKernelHeight(), " window of ", className(),
                        " under padding method ", method);
    offset.x = offsetX;
    offset.y = offsetY;
    // The destination takes the source's storage format (docs/float16.md, "the allocator rule").
    ImageDescriptor descriptor = ImageDescriptor::make(source.featureChannelFormat(), width, height,
                                                       destinationFeatureChannels(source));
    adjustDestinationDescriptor(descriptor, sourceImages);
    if (padding && (method & PaddingMethod::Custom))
        descriptor = padding->destinationImageDescriptor(sourceImages, sourceStates, *this, descriptor);
    descriptor.validate("padding");
    return descriptor;
}

// ---- CNNBinaryKernel -----------------------------------------------------------------------------

CNNBinaryKernel::CNNBinaryKernel(const Device& device) : Kernel(device) {}

int64_t CNNBinaryKernel::availablePrimaryChannels(const Image& primary) const {
    return availableChannels(primary, primarySourceFeatureChannelOffset, primarySourceFeatureChannelMaxCount,
                             "primary_source_feature_channel_offset", "primary image");
}

int64_t CNNBinaryKernel::availableSecondaryChannels(const Image& secondary) const {
    return availableChannels(secondary, secondarySourceFeatureChannelOffset, secondarySourceFeatureChannelMaxCount,
                             "secondary_source_feature_channel_offset", "secondary image");
}

void CNNBinaryKernel::checkDestinationChannels(const Image& destination, int64_t channels, const char* what) const {
    checkChannelOffset(destinationFeatureChannelOffset, "destination_feature_channel_offset");
    if (destinationFeatureChannelOffset + channels > destination.featureChannels())
        throwValueError(what, ": has ", destination.featureChannels(), " feature channels but ", className(),
                        " writes ", channels, " channels at destination_feature_channel_offset ",
                        destinationFeatureChannelOffset);
}

std::vector<BinaryDispatch> CNNBinaryKernel::resolveBinary(const CommandBuffer& cb, const ImageBatch& primaries,
                                                           const ImageBatch& secondaries,
                                                           const ImageBatch& destinations, const char* primaryName,
                                                           const char* secondaryName,
                                                           const char* destinationName) const {
    requireSameLength(primaries.size(), secondaries.size(), primaryName, secondaryName);
    requireSameLength(primaries.size(), destinations.size(), primaryName, destinationName);
    if (primaries.empty()) throwValueError(primaryName, ": the batch is empty");
    std::vector<BinaryDispatch> dispatches;
    for (size_t i = 0; i < primaries.size(); ++i) {
        requireObject(primaries[i], primaryName, "an Image");
        requireObject(secondaries[i], secondaryName, "an Image");
        requireObject(destinations[i], destinationName, "an Image");
        primaries[i]->checkUsable(cb, primaryName);
        secondaries[i]->checkUsable(cb, secondaryName);
        destinations[i]->checkUsable(cb, destinationName);
        BinaryDispatch d;
        d.primary = primaries[i];
        d.secondary = secondaries[i];
        d.destination = destinations[i];
        d.primaryChannelOffset = primarySourceFeatureChannelOffset;
        d.primaryChannels = availablePrimaryChannels(*d.primary);
        d.secondaryChannelOffset = secondarySourceFeatureChannelOffset;
        d.secondaryChannels = availableSecondaryChannels(*d.secondary);
        d.clip = nonEmptyClip(clipRect, *d.destination, destinationName);
        if (primaryOffset.z < 0 || primaryOffset.z >= d.primary->numberOfImages())
            throwValueError("primary_offset: z = ", primaryOffset.z, " is outside the ", primaryName, "'s ",
                            d.primary->numberOfImages(), " image(s)");
        if (secondaryOffset.z < 0 || secondaryOffset.z >= d.secondary->numberOfImages())
            throwValueError("secondary_offset: z = ", secondaryOffset.z, " is outside the ", secondaryName, "'s ",
                            d.secondary->numberOfImages(), " image(s)");
        d.primaryImageIndex = primaryOffset.z;
        d.secondaryImageIndex = secondaryOffset.z;
        d.destinationImageIndex = d.clip.origin.z;
        d.imageCount = std::min<int64_t>({int64_t(d.clip.size.depth), d.primary->numberOfImages() - primaryOffset.z,
                                          d.secondary->numberOfImages() - secondaryOffset.z});
        dispatches.push_back(d);
    }
    return dispatches;
}

void CNNBinaryKernel::encodeResolved(CommandBuffer& cb, const ImageBatch& primaries, const ImageBatch& secondaries,
                                     const StateBatch& states, const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    auto dispatches = resolveBinary(cb, primaries, secondaries, destinations, "primary_image", "secondary_image",
                                    "destination_image");
    if (!states.empty()) {
        requireSameLength(primaries.size(), states.size(), "primary_images", "destination_states");
        for (const auto& s : states) {
            requireObject(s, "destination_state", "a State");
            s->checkUsable(cb, "destination_state");
        }
    }
    // FLOAT16 and UNORM images: core/float16_shadow.h (FLOAT16 as it is when read natively).
    Float32Shadows shadows(cb, readsFloat16Natively());
    shadows.cover({&primaries, &secondaries, &destinations});  // one conversion per batch block
    for (auto& d : dispatches) {
        d.primary = shadows.read(d.primary);
        d.secondary = shadows.read(d.secondary);
        d.destination = shadows.write(d.destination);
    }
    encodeImpl(cb, dispatches, states);
    shadows.finish();
    host_access::noteKernelWrites(cb, destinations);
    ImageBatch reads = primaries;
    reads.insert(reads.end(), secondaries.begin(), secondaries.end());
    noteReadsOfUnique(reads);
}

void CNNBinaryKernel::encode(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                             const StatePtr& state, const ImagePtr& destination) {
    encodeResolved(cb, {primary}, {secondary}, state ? StateBatch{state} : StateBatch{}, {destination});
}

void CNNBinaryKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& primaries, const ImageBatch& secondaries,
                                  const StateBatch& states, const ImageBatch& destinations) {
    encodeResolved(cb, primaries, secondaries, states, destinations);
}

ImagePtr CNNBinaryKernel::encode(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                                 StatePtr* destinationState, bool destinationStateIsTemporary) {
    StateBatch states;
    ImageBatch results = encodeBatch(cb, {primary}, {secondary}, destinationState ? &states : nullptr,
                                     destinationStateIsTemporary);
    if (destinationState) *destinationState = states.empty() ? nullptr : states.front();
    return results.front();
}

ImageBatch CNNBinaryKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& primaries,
                                        const ImageBatch& secondaries, StateBatch* destinationStates,
                                        bool destinationStateIsTemporary) {
    checkCommandBuffer(cb);
    requireSameLength(primaries.size(), secondaries.size(), "primary_images", "secondary_images");
    if (primaries.empty()) throwValueError("primary_images: the batch is empty");
    for (size_t i = 0; i < primaries.size(); ++i) {
        requireObject(primaries[i], "primary_image", "an Image");
        requireObject(secondaries[i], "secondary_image", "an Image");
        requireSingleImage(primaries[i], "primary_image");
        requireSingleImage(secondaries[i], "secondary_image");
    }
    ImageDescriptor descriptor = destinationImageDescriptor({primaries.front(), secondaries.front()}, {});
    ImageBatch destinations = allocateDestinations(
        cb, destinationImageAllocator, descriptor, this, primaries.size(),
        writesEveryDestinationPixel() && writesWholeDestination(descriptor, destinationFeatureChannelOffset, clipRect));
    StateBatch states;
    if (destinationStates) {
        for (size_t i = 0; i < primaries.size(); ++i) {
            if (isResultStateReusedAcrossBatch() && i > 0) {
                states.push_back(states.front());
                continue;
            }
            states.push_back(makeResultState(*primaries[i], *secondaries[i], destinationStateIsTemporary ? &cb : nullptr));
        }
        if (!states.empty() && !states.front()) states.clear();
    }
    encodeResolved(cb, primaries, secondaries, states, destinations);
    if (destinationStates) *destinationStates = states;
    return destinations;
}

StatePtr CNNBinaryKernel::resultState(const ImagePtr& primary, const ImagePtr& secondary, const StateBatch&,
                                      const ImagePtr&) {
    requireObject(primary, "primary_image", "an Image");
    requireObject(secondary, "secondary_image", "an Image");
    return makeResultState(*primary, *secondary, nullptr);
}

StatePtr CNNBinaryKernel::temporaryResultState(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                                               const StateBatch&, const ImagePtr&) {
    checkCommandBuffer(cb);
    requireObject(primary, "primary_image", "an Image");
    requireObject(secondary, "secondary_image", "an Image");
    return makeResultState(*primary, *secondary, &cb);
}

ImageDescriptor CNNBinaryKernel::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                            const StateBatch& sourceStates) {
    if (sourceImages.size() != 2)
        throwValueError("source_images: expected [primary, secondary], got ", sourceImages.size(), " image(s)");
    requireObject(sourceImages[0], "source_images[0]", "an Image");
    requireObject(sourceImages[1], "source_images[1]", "an Image");
    const Image& primary = *sourceImages[0];
    uint32_t method = padding ? padding->paddingMethod() : defaultPaddingMethod();
    int64_t width, height, offsetX, offsetY;
    int64_t kw = (primaryKernelWidth() - 1) * primaryDilationRateX() + 1;
    int64_t kh = (primaryKernelHeight() - 1) * primaryDilationRateY() + 1;
    paddedAxis(primary.width(), primaryStrideInPixelsX, kw, method, padding::Axis::X, isBackwards(), width, offsetX);
    paddedAxis(primary.height(), primaryStrideInPixelsY, kh, method, padding::Axis::Y, isBackwards(), height,
               offsetY);
    if (width < 1 || height < 1)
        throwValueError("primary_image: a ", primary.width(), "x", primary.height(),
                        " image is too small under padding method ", method);
    primaryOffset.x = offsetX;
    primaryOffset.y = offsetY;
    ImageDescriptor descriptor = ImageDescriptor::make(primary.featureChannelFormat(), width, height,
                                                       destinationFeatureChannels(primary, *sourceImages[1]));
    if (padding && (method & PaddingMethod::Custom))
        descriptor = padding->destinationImageDescriptor(sourceImages, sourceStates, *this, descriptor);
    descriptor.validate("padding");
    return descriptor;
}

// ---- CNNGradientKernel ---------------------------------------------------------------------------

const ForwardSnapshot& CNNGradientKernel::snapshotOf(const State& state) const {
    if (auto* unary = dynamic_cast<const NNGradientState*>(&state)) return unary->snapshot;
    if (auto* binary = dynamic_cast<const NNBinaryGradientState*>(&state)) return binary->snapshot;
    throwTypeError("gradient_state: ", className(), " needs the gradient state of its forward kernel, got a ",
                   state.className());
}

void CNNGradientKernel::checkSourceGradientChannels(const Image& sourceGradient, int64_t channels) const {
    const int64_t available = availablePrimaryChannels(sourceGradient);
    if (available < channels)
        throwValueError("source_gradient: provides ", available, " feature channel(s) at primary_source_feature_"
                        "channel_offset ", primarySourceFeatureChannelOffset, " but the forward pass wrote ", channels);
}

void CNNGradientKernel::checkSourceImageChannels(const Image& sourceImage, int64_t channels,
                                                 const char* forwardUse) const {
    const int64_t available = availableSecondaryChannels(sourceImage);
    if (available < channels)
        throwValueError("source_image: provides ", available, " feature channel(s) at secondary_source_feature_"
                        "channel_offset ", secondarySourceFeatureChannelOffset, " but the forward pass ", forwardUse,
                        " ", channels);
}

void CNNGradientKernel::configureFromSnapshot(const ForwardSnapshot& s) {
    // Pointwise default: dX[offset + p] = g(G[clipOrigin + p], X[offset + p]) over the forward clip.
    primaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    secondaryOffset = Offset{s.offset.x, s.offset.y, 0};
    clipRect = Region{{s.offset.x, s.offset.y, 0}, {s.clipRect.size.width, s.clipRect.size.height, kNoClipSize}};
    secondaryEdgeMode = s.edgeMode;
    secondaryStrideInPixelsX = s.strideX;
    secondaryStrideInPixelsY = s.strideY;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.sourceFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

// Legacy multi-image images (spec §1.2): the gradient reads G from the images the forward wrote,
// source_image from the images the forward read, and writes dX into the images the forward read,
// as many as the forward processed. (configureFromSnapshot sets the x / y parts; the binary
// arithmetic gradients, whose source_image is the other operand, redo this for their operands.)
static void addressForwardImages(CNNGradientKernel& k, const ForwardSnapshot& s) {
    k.primaryOffset.z = s.clipRect.origin.z;
    k.secondaryOffset.z = s.offset.z;
    k.clipRect.origin.z = s.offset.z;
    k.clipRect.size.depth = s.clipRect.size.depth;
}

ImageDescriptor CNNGradientKernel::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                              const StateBatch& sourceStates) {
    if (sourceImages.size() != 2)
        throwValueError("source_images: expected [source_gradient, source_image], got ", sourceImages.size(),
                        " image(s)");
    if (sourceStates.empty()) throwValueError("source_states: expected the forward pass's gradient state");
    requireObject(sourceStates.front(), "gradient_state", "a gradient state");
    checkGradientStateType(*sourceStates.front());
    const ForwardSnapshot& s = snapshotOf(*sourceStates.front());
    if (!s.encoded)
        throwValueError("gradient_state: the forward kernel has not encoded with this state yet");
    configureFromSnapshot(s);
    addressForwardImages(*this, s);
    // The gradient takes the source gradient's storage format (docs/float16.md).
    const auto format = sourceImages[0] ? sourceImages[0]->featureChannelFormat() : ImageFeatureChannelFormat::Float32;
    return ImageDescriptor::make(format, s.sourceWidth, s.sourceHeight, s.sourceFeatureChannels);
}

void CNNGradientKernel::encodeGradientResolved(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                               const ImageBatch& sourceImages, const StateBatch& states,
                                               const ImageBatch& destinations) {
    checkCommandBuffer(cb);
    requireSameLength(sourceGradients.size(), sourceImages.size(), "source_gradients", "source_images");
    requireSameLength(sourceGradients.size(), states.size(), "source_gradients", "gradient_states");
    requireSameLength(sourceGradients.size(), destinations.size(), "source_gradients", "destination_gradients");
    if (sourceGradients.empty()) throwValueError("source_gradients: the batch is empty");
    for (size_t i = 0; i < sourceGradients.size(); ++i) {
        requireObject(sourceGradients[i], "source_gradient", "an Image");
        requireObject(sourceImages[i], "source_image", "an Image");
        requireObject(states[i], "gradient_state", "a gradient state");
        requireObject(destinations[i], "destination_gradient", "an Image");
        checkGradientStateType(*states[i]);
        sourceGradients[i]->checkUsable(cb, "source_gradient");
        sourceImages[i]->checkUsable(cb, "source_image");
        states[i]->checkUsable(cb, "gradient_state");
        destinations[i]->checkUsable(cb, "destination_gradient");
        if (!snapshotOf(*states[i]).encoded)
            throwValueError("gradient_state: the forward kernel has not encoded with this state yet");
    }
    {
        // FLOAT16 and UNORM images: core/float16_shadow.h (FLOAT16 as it is when read natively).
        Float32Shadows shadows(cb, readsFloat16Natively());
        shadows.cover({&sourceGradients, &sourceImages, &destinations});  // one conversion per batch block
        ImageBatch gradients32 = shadows.read(sourceGradients), images32 = shadows.read(sourceImages);
        encodeGradientImpl(cb, gradients32, images32, states, shadows.write(destinations));
        shadows.finish();
    }
    // Gradient kernels write into their gradient states too (e.g. weight and bias gradients).
    host_access::noteKernelWrites(cb, destinations);
    host_access::noteKernelWrites(cb, states);
    ImageBatch reads = sourceGradients;
    reads.insert(reads.end(), sourceImages.begin(), sourceImages.end());
    noteReadsOfUnique(reads);
    noteReadsOfUnique(states);
}

ImagePtr CNNGradientKernel::encode(CommandBuffer& cb, const ImagePtr& sourceGradient, const ImagePtr& sourceImage,
                                   const StatePtr& gradientState) {
    return encodeBatch(cb, ImageBatch{sourceGradient}, ImageBatch{sourceImage}, StateBatch{gradientState}).front();
}

void CNNGradientKernel::encode(CommandBuffer& cb, const ImagePtr& sourceGradient, const ImagePtr& sourceImage,
                               const StatePtr& gradientState, const ImagePtr& destinationGradient) {
    encodeGradientResolved(cb, {sourceGradient}, {sourceImage}, {gradientState}, {destinationGradient});
}

ImageBatch CNNGradientKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                          const ImageBatch& sourceImages, const StateBatch& gradientStates) {
    checkCommandBuffer(cb);
    if (sourceGradients.empty()) throwValueError("source_gradients: the batch is empty");
    requireSameLength(sourceGradients.size(), sourceImages.size(), "source_gradients", "source_images");
    requireSameLength(sourceGradients.size(), gradientStates.size(), "source_gradients", "gradient_states");
    // Checked here, once for every gradient kernel: the destinations below hold one image each.
    requireSingleImages(sourceGradients, "source_gradient");
    requireSingleImages(sourceImages, "source_image");
    ImageDescriptor descriptor =
        destinationImageDescriptor({sourceGradients.front(), sourceImages.front()}, {gradientStates.front()});
    ImageBatch destinations = allocateDestinations(
        cb, destinationImageAllocator, descriptor, this, sourceGradients.size(),
        writesEveryDestinationPixel() && writesWholeDestination(descriptor, destinationFeatureChannelOffset, clipRect));
    encodeGradientResolved(cb, sourceGradients, sourceImages, gradientStates, destinations);
    return destinations;
}

void CNNGradientKernel::encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                    const ImageBatch& sourceImages, const StateBatch& gradientStates,
                                    const ImageBatch& destinationGradients) {
    encodeGradientResolved(cb, sourceGradients, sourceImages, gradientStates, destinationGradients);
}

}  // namespace mpsgrad
