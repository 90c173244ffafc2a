// Kernel → CNNKernel, CNNBinaryKernel → CNNGradientKernel (MPSKernel, MPSCNNKernel,
// MPSCNNBinaryKernel, MPSCNNGradientKernel).
//
// The base classes own the MPS semantics shared by every family: properties and defaults,
// the encode forms, padding policies, read-count bookkeeping and validation order
// (everything is validated before anything is encoded or any read count changes).
// A family subclass supplies the destination channel count, its result state, and one
// `encode...Impl` that validates its own constraints and calls backend ops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/image.h"
#include "core/padding.h"
#include "core/serialization.h"
#include "core/state.h"
#include "core/types.h"

namespace mpsgrad {

// The padding method a kernel without a padding policy uses (MPS's default: centred, remainder
// top-left, same size).
uint32_t defaultPaddingMethod();

// MPSKernel
class Kernel : public std::enable_shared_from_this<Kernel> {
public:
    explicit Kernel(const Device& device) : device_(device) {}
    virtual ~Kernel() = default;

    const Device& device() const { return device_; }
    // Name of the concrete class (e.g. "CNNConvolution"), for messages.
    virtual const char* className() const = 0;

    uint32_t options = KernelOptionsNone;
    std::string label;

    // ---- serialization: -encodeWithCoder: / -initWithCoder:device: (docs/serialization.md) ----
    // The kernel as a blob: constructor arguments (weights included), then every property.
    // TypeError for a class that is not serializable. A custom NNPadding / ImageAllocator is
    // a ValueError unless `allowExternalObjects`: the blob then references it and deserialize()
    // must be given it back (Python's pickle does this).
    std::vector<uint8_t> serialize(bool allowExternalObjects = false) const;
    // -initWithCoder:device: for any serializable kernel class, rebuilt on `device`.
    // SerializationError (a ValueError) for malformed data.
    static std::shared_ptr<Kernel> deserialize(const uint8_t* data, size_t size, const Device& device,
                                               const serial::ExternalObjects& externals = {});
    static std::shared_ptr<Kernel> deserialize(const std::vector<uint8_t>& data, const Device& device) {
        return deserialize(data.data(), data.size(), device);
    }
    // deserialize(), then SerializationError unless the kernel is a T.
    template <class T>
    static std::shared_ptr<T> deserializeAs(const std::vector<uint8_t>& data, const Device& device) {
        std::shared_ptr<Kernel> kernel = deserialize(data, device);
        auto typed = std::dynamic_pointer_cast<T>(kernel);
        if (!typed) throwSerializationError("data: holds a serialized ", kernel->className(), " of another class");
        return typed;
    }

protected:
    // Writes the payload of the concrete class. Default: TypeError (not serializable).
    virtual void encodeWithCoder(serial::Writer& writer) const;
    // options, label.
    void encodeKernelProperties(serial::Writer& writer) const;
    void decodeKernelProperties(serial::Reader& reader);

    // Throws unless `cb` is on this kernel's device and still encodable.
    void checkCommandBuffer(const CommandBuffer& cb) const;

    Device device_;
};

// A resolved source→destination pairing for one image of a unary encode.
struct UnaryDispatch {
    ImagePtr source, destination;
    int64_t sourceChannelOffset = 0, sourceChannels = 0;  // after offset / max-count truncation
    Region clip;                                          // clipRect ∩ destination bounds
    int64_t sourceImageIndex = 0, destinationImageIndex = 0, imageCount = 1;
};

// MPSCNNKernel
class CNNKernel : public Kernel {
public:
    explicit CNNKernel(const Device& device);

    Offset offset;
    Region clipRect = rectNoClip();
    int64_t destinationFeatureChannelOffset = 0;
    int64_t sourceFeatureChannelOffset = 0;
    uint64_t sourceFeatureChannelMaxCount = UINT64_MAX;
    ImageEdgeMode edgeMode = ImageEdgeMode::Zero;
    std::shared_ptr<NNPadding> padding;
    std::shared_ptr<ImageAllocator> destinationImageAllocator;

    virtual int64_t kernelWidth() const { return 1; }
    virtual int64_t kernelHeight() const { return 1; }
    virtual int64_t strideInPixelsX() const { return 1; }
    virtual int64_t strideInPixelsY() const { return 1; }
    virtual int64_t dilationRateX() const { return 1; }
    virtual int64_t dilationRateY() const { return 1; }
    virtual bool isBackwards() const { return false; }
    virtual bool isStateModified() const { return false; }
    virtual bool isResultStateReusedAcrossBatch() const { return false; }
    virtual bool appendBatchBarrier() const { return false; }
    // True when the family's ops write every destination pixel inside the clip rect (all of
    // its channels after the destination channel offset). Returning encodes then allocate
    // destinations without the zero fill when nothing else is left unwritten (kernel.cpp).
    virtual bool writesEveryDestinationPixel() const { return false; }
    // True when encodeImpl takes FLOAT16 images as they are (native half loads and stores,
    // docs/float16.md); otherwise the funnel hands it float32 shadows (core/float16_shadow.h).
    // UNORM images get shadows either way.
    virtual bool readsFloat16Natively() const { return false; }

    // -encodeToCommandBuffer:sourceImage:destinationImage: (offset as set; padding ignored)
    void encode(CommandBuffer& cb, const ImagePtr& source, const ImagePtr& destination);
    // -encodeToCommandBuffer:sourceImage:destinationState:destinationImage:
    void encode(CommandBuffer& cb, const ImagePtr& source, const StatePtr& destinationState,
                const ImagePtr& destination);
    // -encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& destinationStates,
                     const ImageBatch& destinations);
    // -encodeToCommandBuffer:sourceImage: — applies the padding policy, returns a new image.
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source);
    // -encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary:
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, StatePtr* destinationState,
                    bool destinationStateIsTemporary);
    // -encodeBatchToCommandBuffer:sourceImages:[destinationStates:destinationStateIsTemporary:]
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, StateBatch* destinationStates = nullptr,
                           bool destinationStateIsTemporary = false);

    // -resultStateForSourceImage:sourceStates:destinationImage: (null when the kernel has none)
    StatePtr resultState(const ImagePtr& source, const StateBatch& sourceStates, const ImagePtr& destination);
    // -temporaryResultStateForCommandBuffer:sourceImage:sourceStates:destinationImage:
    StatePtr temporaryResultState(CommandBuffer& cb, const ImagePtr& source, const StateBatch& sourceStates,
                                  const ImagePtr& destination);
    // -resultStateBatchForSourceImage:... / -temporaryResultStateBatchForCommandBuffer:...
    StateBatch resultStateBatch(const ImageBatch& sources, const ImageBatch& destinations);
    StateBatch temporaryResultStateBatch(CommandBuffer& cb, const ImageBatch& sources,
                                         const ImageBatch& destinations);

    // -destinationImageDescriptorForSourceImages:sourceStates: — runs the padding policy and
    // sets `offset`.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates);
    // `count` destinations for an encode of `sources` into states it does not create (as a returning
    // encode allocates them: destinationImageDescriptor of the first source, the destination
    // allocator or the temporary one, and no zero fill when the kernel overwrites them entirely).
    ImageBatch allocateDestinationImages(CommandBuffer& cb, const ImageBatch& sources, size_t count);

protected:
    // Feature channels of the destination for `source`.
    virtual int64_t destinationFeatureChannels(const Image& source) const = 0;
    // Creates the state this kernel produces (null: none). `cb` is set for temporary states.
    virtual StatePtr makeResultState(const Image& source, CommandBuffer* cb) {
        (void)source, (void)cb;
        return nullptr;
    }
    // Padding step 2: the subclass's adjustment of the default descriptor.
    virtual void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) {
        (void)descriptor, (void)sourceImages;
    }
    // Validates everything, then encodes every dispatch. `states` is empty or parallel to
    // `dispatches` (the same state repeated when isResultStateReusedAcrossBatch).
    virtual void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                            const StateBatch& states) = 0;

    // Kernel properties, then offset, clip_rect, channel offsets, edge_mode, padding, allocator.
    void encodeCNNKernelProperties(serial::Writer& writer) const;
    void decodeCNNKernelProperties(serial::Reader& reader);

    // Helpers for subclasses.
    // Channels available in `source` after sourceFeatureChannelOffset and the max count.
    int64_t availableSourceChannels(const Image& source) const;
    // Throws ValueError unless the destination has room for `channels` at the destination offset.
    void checkDestinationChannels(const Image& destination, int64_t channels) const;
    // The kernel's dilated window extents.
    int64_t dilatedKernelWidth() const { return (kernelWidth() - 1) * dilationRateX() + 1; }
    int64_t dilatedKernelHeight() const { return (kernelHeight() - 1) * dilationRateY() + 1; }

private:
    std::vector<UnaryDispatch> resolve(const CommandBuffer& cb, const ImageBatch& sources,
                                       const ImageBatch& destinations) const;
    void encodeResolved(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& states,
                        const ImageBatch& destinations);
};

// A resolved primary/secondary→destination triple for one image of a binary encode.
struct BinaryDispatch {
    ImagePtr primary, secondary, destination;
    int64_t primaryChannelOffset = 0, primaryChannels = 0;
    int64_t secondaryChannelOffset = 0, secondaryChannels = 0;
    Region clip;
    int64_t primaryImageIndex = 0, secondaryImageIndex = 0, destinationImageIndex = 0, imageCount = 1;
};

// MPSCNNBinaryKernel
class CNNBinaryKernel : public Kernel {
public:
    explicit CNNBinaryKernel(const Device& device);

    Offset primaryOffset, secondaryOffset;
    Region clipRect = rectNoClip();
    int64_t destinationFeatureChannelOffset = 0;
    int64_t primarySourceFeatureChannelOffset = 0, secondarySourceFeatureChannelOffset = 0;
    uint64_t primarySourceFeatureChannelMaxCount = UINT64_MAX, secondarySourceFeatureChannelMaxCount = UINT64_MAX;
    ImageEdgeMode primaryEdgeMode = ImageEdgeMode::Zero, secondaryEdgeMode = ImageEdgeMode::Zero;
    int64_t primaryStrideInPixelsX = 1, primaryStrideInPixelsY = 1;
    int64_t secondaryStrideInPixelsX = 1, secondaryStrideInPixelsY = 1;
    std::shared_ptr<NNPadding> padding;
    std::shared_ptr<ImageAllocator> destinationImageAllocator;

    virtual int64_t primaryKernelWidth() const { return 1; }
    virtual int64_t primaryKernelHeight() const { return 1; }
    virtual int64_t secondaryKernelWidth() const { return 1; }
    virtual int64_t secondaryKernelHeight() const { return 1; }
    virtual int64_t primaryDilationRateX() const { return 1; }
    virtual int64_t primaryDilationRateY() const { return 1; }
    virtual int64_t secondaryDilationRateX() const { return 1; }
    virtual int64_t secondaryDilationRateY() const { return 1; }
    virtual bool isBackwards() const { return false; }
    virtual bool isStateModified() const { return false; }
    virtual bool isResultStateReusedAcrossBatch() const { return false; }
    virtual bool appendBatchBarrier() const { return false; }
    // True when the family's ops write every destination pixel inside the clip rect (all of
    // its channels after the destination channel offset). Returning encodes then allocate
    // destinations without the zero fill when nothing else is left unwritten (kernel.cpp).
    virtual bool writesEveryDestinationPixel() const { return false; }
    // True when the binary or gradient encode implementation takes FLOAT16 images as they are (native half loads and stores,
    // docs/float16.md); otherwise the funnel hands it float32 shadows (core/float16_shadow.h).
    // UNORM images get shadows either way.
    virtual bool readsFloat16Natively() const { return false; }

    // -encodeToCommandBuffer:primaryImage:secondaryImage:[destinationState:]destinationImage:
    void encode(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary, const StatePtr& state,
                const ImagePtr& destination);
    // -encodeBatchToCommandBuffer:primaryImages:secondaryImages:[destinationStates:]destinationImages:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& primaries, const ImageBatch& secondaries,
                     const StateBatch& states, const ImageBatch& destinations);
    // Returning forms (padding policy applied; optionally producing states).
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                    StatePtr* destinationState = nullptr, bool destinationStateIsTemporary = false);
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& primaries, const ImageBatch& secondaries,
                           StateBatch* destinationStates = nullptr, bool destinationStateIsTemporary = false);

    // -resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage:
    StatePtr resultState(const ImagePtr& primary, const ImagePtr& secondary, const StateBatch& sourceStates,
                         const ImagePtr& destination);
    StatePtr temporaryResultState(CommandBuffer& cb, const ImagePtr& primary, const ImagePtr& secondary,
                                  const StateBatch& sourceStates, const ImagePtr& destination);

    // -destinationImageDescriptorForSourceImages:sourceStates: (sourceImages = [primary, secondary])
    virtual ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates);

protected:
    virtual int64_t destinationFeatureChannels(const Image& primary, const Image& secondary) const = 0;
    virtual StatePtr makeResultState(const Image& primary, const Image& secondary, CommandBuffer* cb) {
        (void)primary, (void)secondary, (void)cb;
        return nullptr;
    }
    virtual void encodeImpl(CommandBuffer& cb, const std::vector<BinaryDispatch>& dispatches,
                            const StateBatch& states) {
        (void)cb, (void)dispatches, (void)states;
        throwTypeError(className(), ": this kernel has no primary/secondary forward encode");
    }

    // Kernel properties, then every primary/secondary property, clip_rect, padding, allocator.
    void encodeBinaryKernelProperties(serial::Writer& writer) const;
    void decodeBinaryKernelProperties(serial::Reader& reader);

    std::vector<BinaryDispatch> resolveBinary(const CommandBuffer& cb, const ImageBatch& primaries,
                                              const ImageBatch& secondaries, const ImageBatch& destinations,
                                              const char* primaryName, const char* secondaryName,
                                              const char* destinationName) const;
    int64_t availablePrimaryChannels(const Image& primary) const;
    int64_t availableSecondaryChannels(const Image& secondary) const;
    void checkDestinationChannels(const Image& destination, int64_t channels, const char* what) const;

private:
    void encodeResolved(CommandBuffer& cb, const ImageBatch& primaries, const ImageBatch& secondaries,
                        const StateBatch& states, const ImageBatch& destinations);
};

// MPSCNNGradientKernel: primary = incoming gradient (dL/dY), secondary = forward source X.
class CNNGradientKernel : public CNNBinaryKernel {
public:
    explicit CNNGradientKernel(const Device& device) : CNNBinaryKernel(device) {}

    int64_t kernelOffsetX = 0;
    int64_t kernelOffsetY = 0;

    // -encodeToCommandBuffer:sourceGradient:sourceImage:gradientState: (returns the result)
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& sourceGradient, const ImagePtr& sourceImage,
                    const StatePtr& gradientState);
    // -encodeToCommandBuffer:sourceGradient:sourceImage:gradientState:destinationGradient:
    void encode(CommandBuffer& cb, const ImagePtr& sourceGradient, const ImagePtr& sourceImage,
                const StatePtr& gradientState, const ImagePtr& destinationGradient);
    // -encodeBatchToCommandBuffer:sourceGradients:sourceImages:gradientStates:
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                           const StateBatch& gradientStates);
    // -encodeBatchToCommandBuffer:sourceGradients:sourceImages:gradientStates:destinationGradients:
    void encodeBatch(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                     const StateBatch& gradientStates, const ImageBatch& destinationGradients);

    // Copies the forward parameters recorded in the state into the secondary properties
    // (and the family's primary/kernel offsets) and sizes the result like the forward source.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

protected:
    // The binary kernel properties, then kernel_offset_x/y.
    void encodeGradientKernelProperties(serial::Writer& writer) const;
    void decodeGradientKernelProperties(serial::Reader& reader);

    int64_t destinationFeatureChannels(const Image&, const Image&) const override { return 0; }
    // ValueError unless the incoming gradient provides the `channels` feature channels the
    // forward pass wrote, at primary_source_feature_channel_offset.
    void checkSourceGradientChannels(const Image& sourceGradient, int64_t channels) const;
    // ValueError unless source_image provides `channels` feature channels at
    // secondary_source_feature_channel_offset; `forwardUse` says what the forward pass did with
    // them ("read", "wrote", ...).
    void checkSourceImageChannels(const Image& sourceImage, int64_t channels, const char* forwardUse) const;
    // TypeError unless `state` is the gradient state type of this family.
    virtual void checkGradientStateType(const State& state) const = 0;
    // The forward snapshot recorded in the state.
    virtual const ForwardSnapshot& snapshotOf(const State& state) const;
    // Sets secondary/primary/kernel offsets from the forward snapshot (default: the generic
    // copy of offset, edge mode and stride into the secondary properties).
    virtual void configureFromSnapshot(const ForwardSnapshot& snapshot);
    // Validates everything (incl. state/image agreement), then encodes. All vectors have
    // the same length; states may repeat one shared state.
    virtual void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                    const ImageBatch& sourceImages, const StateBatch& states,
                                    const ImageBatch& destinations) = 0;

private:
    void encodeGradientResolved(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                                const StateBatch& states, const ImageBatch& destinations);
};

// Helpers shared by the families.
// ValueError unless `value` is a non-negative multiple of 4.
void checkChannelOffset(int64_t value, const char* what);
// The region of `destination` a clip rectangle selects (intersected with its bounds).
Region clipToImage(const Region& clip, const Image& destination);
// The same, with a ValueError naming the image (`what`) when the clip rectangle selects no pixel of it.
Region nonEmptyClip(const Region& clip, const Image& destination, const char* what);

}  // namespace mpsgrad
