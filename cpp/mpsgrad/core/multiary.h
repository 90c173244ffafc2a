// CNNMultiaryKernel and NNMultiaryGradientState (MPSCNNMultiaryKernel, MPSNNMultiaryGradientState,
// macOS 10.15): the base of kernels with N source images, CNNBinaryKernel generalized from the
// primary/secondary pair to per-index properties. docs/concatenation.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "core/state.h"

namespace mpsgrad {

// MPSNNMultiaryGradientState: one forward snapshot per source of the kernel that produced it
// (snapshot i: source i's size, offset, edge mode, the channels read from it, and where in the
// destination they went).
class NNMultiaryGradientState : public State {
public:
    NNMultiaryGradientState(const Device& device, size_t sourceCount, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "NNMultiaryGradientState"; }

    size_t sourceCount() const { return snapshots.size(); }
    std::vector<ForwardSnapshot> snapshots;
    std::weak_ptr<const Kernel> producer;
};

// A resolved sources→destination set for one entry of a multiary encode.
struct MultiaryDispatch {
    ImageBatch sources;  // one per source index
    ImagePtr destination;
    std::vector<int64_t> channelOffsets, channels;  // per source, after offset / max-count truncation
    std::vector<int64_t> sourceImageIndices;        // per source: its offset.z
    Region clip;                                    // clipRect ∩ destination bounds
    int64_t destinationImageIndex = 0, imageCount = 1;
};

// MPSCNNMultiaryKernel
class CNNMultiaryKernel : public Kernel {
public:
    // -initWithDevice:sourceCount: (sourceCount >= 1)
    CNNMultiaryKernel(const Device& device, size_t sourceCount);

    size_t sourceCount() const { return offsets_.size(); }

    // The per-index properties (-offsetAtIndex:, -setOffset:atIndex:, ...). Every accessor
    // raises an IndexError-like ValueError naming the index when it is >= sourceCount().
    Offset offsetAtIndex(size_t index) const;
    void setOffset(const Offset& offset, size_t index);
    int64_t sourceFeatureChannelOffsetAtIndex(size_t index) const;
    void setSourceFeatureChannelOffset(int64_t offset, size_t index);
    uint64_t sourceFeatureChannelMaxCountAtIndex(size_t index) const;
    void setSourceFeatureChannelMaxCount(uint64_t count, size_t index);
    ImageEdgeMode edgeModeAtIndex(size_t index) const;
    void setEdgeMode(ImageEdgeMode mode, size_t index);
    int64_t kernelWidthAtIndex(size_t index) const;
    void setKernelWidth(int64_t width, size_t index);
    int64_t kernelHeightAtIndex(size_t index) const;
    void setKernelHeight(int64_t height, size_t index);
    int64_t strideInPixelsXAtIndex(size_t index) const;
    void setStrideInPixelsX(int64_t stride, size_t index);
    int64_t strideInPixelsYAtIndex(size_t index) const;
    void setStrideInPixelsY(int64_t stride, size_t index);
    int64_t dilationRateXAtIndex(size_t index) const;
    void setDilationRateX(int64_t rate, size_t index);
    int64_t dilationRateYAtIndex(size_t index) const;
    void setDilationRateY(int64_t rate, size_t index);

    Region clipRect = rectNoClip();
    int64_t destinationFeatureChannelOffset = 0;
    std::shared_ptr<NNPadding> padding;
    std::shared_ptr<ImageAllocator> destinationImageAllocator;
    virtual bool isBackwards() const { return false; }
    virtual bool isStateModified() const { return false; }
    virtual bool isResultStateReusedAcrossBatch() const { return false; }
    virtual bool appendBatchBarrier() const { return false; }

    // -encodeToCommandBuffer:sourceImages:[destinationState:]destinationImage:
    void encode(CommandBuffer& cb, const ImageBatch& sources, const StatePtr& state, const ImagePtr& destination);
    // -encodeBatchToCommandBuffer:sourceImages:[destinationStates:]destinationImages:
    // sourceBatches[i] is the batch of source index i; every batch has the same length.
    void encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches, const StateBatch& states,
                     const ImageBatch& destinations);
    // Returning forms (-encodeToCommandBuffer:sourceImages:[destinationState:destinationStateIsTemporary:]).
    ImagePtr encode(CommandBuffer& cb, const ImageBatch& sources, StatePtr* destinationState = nullptr,
                    bool destinationStateIsTemporary = false);
    ImageBatch encodeBatch(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches,
                           StateBatch* destinationStates = nullptr, bool destinationStateIsTemporary = false);

    // -resultStateForSourceImages:sourceStates:destinationImage: / temporary form.
    StatePtr resultState(const ImageBatch& sources, const StateBatch& sourceStates, const ImagePtr& destination);
    StatePtr temporaryResultState(CommandBuffer& cb, const ImageBatch& sources, const StateBatch& sourceStates,
                                  const ImagePtr& destination);

    // -destinationImageDescriptorForSourceImages:sourceStates: (one image per source index). The
    // size follows source 0 under the padding method with index 0's kernel size and stride.
    virtual ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates);

protected:
    virtual int64_t destinationFeatureChannels(const ImageBatch& sources) const = 0;
    virtual StatePtr makeResultState(const ImageBatch& sources, CommandBuffer* cb);
    virtual void encodeImpl(CommandBuffer& cb, const std::vector<MultiaryDispatch>& dispatches,
                            const StateBatch& states) = 0;
    // True when the family writes every destination pixel inside the clip rect (see CNNKernel).
    virtual bool writesEveryDestinationPixel() const { return false; }

    // Channels of `source` index `index` reads (after its channel offset and max count).
    int64_t availableChannels(const Image& source, size_t index) const;
    void checkDestinationChannels(const Image& destination, int64_t channels) const;

    // Kernel properties, then the per-index arrays, clip_rect, destination offset, padding, allocator.
    void encodeMultiaryKernelProperties(serial::Writer& writer) const;
    void decodeMultiaryKernelProperties(serial::Reader& reader);

private:
    size_t checkIndex(size_t index) const;
    std::vector<MultiaryDispatch> resolve(const CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches,
                                          const ImageBatch& destinations) const;
    void encodeResolved(CommandBuffer& cb, const std::vector<ImageBatch>& sourceBatches, const StateBatch& states,
                        const ImageBatch& destinations);

    std::vector<Offset> offsets_;
    std::vector<int64_t> channelOffsets_;
    std::vector<uint64_t> channelMaxCounts_;
    std::vector<ImageEdgeMode> edgeModes_;
    std::vector<int64_t> kernelWidths_, kernelHeights_, strideXs_, strideYs_, dilationXs_, dilationYs_;
};

}  // namespace mpsgrad
