// How NNGraph allocates the images it makes during one encode (spec §3.3 "format", liveness).
//
// FormatAllocator: hands a node's allocator the descriptor with the storage format the graph
// chose for that image (NNGraph.format for intermediates, FLOAT32 for results and exported images
// unless the image node's own `format` says otherwise). The kernels' returning encodes derive the
// descriptor from their source, so this is the one place the graph's format takes effect.
//
// IntermediatePool: the storage of the intermediates nobody outside the graph sees (not exported,
// not a result, default allocator). NNGraph returns a buffer to the pool once the last node that
// reads the image was encoded; a later node's destination then reuses it. This is safe for the
// same reason MPSTemporaryImage recycling is: the work of one command buffer runs in encode order,
// so every read of the old contents is encoded (and runs) before the write that reuses the buffer.
// A buffer is reused only for a destination the kernel overwrites completely (every pixel, no
// padding lanes, no channel offset or clip); other destinations get fresh zero-filled storage.
#pragma once

#include <map>
#include <memory>
#include <unordered_set>

#include "core/image.h"

namespace mpsgrad {

class FormatAllocator final : public ImageAllocator {
public:
    FormatAllocator(std::shared_ptr<ImageAllocator> inner, ImageFeatureChannelFormat format)
        : inner_(std::move(inner)), format_(format) {}
    ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel) override;
    ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel,
                                          size_t count) override;

private:
    ImageDescriptor withFormat(const ImageDescriptor& descriptor) const;

    std::shared_ptr<ImageAllocator> inner_;
    ImageFeatureChannelFormat format_;
};

// What the last encode did with intermediate storage (NNGraph.lastEncodeStatistics).
struct GraphEncodeStatistics {
    size_t encodedNodes = 0;          // filter nodes encoded (a fused pair counts once)
    size_t intermediateBuffers = 0;   // distinct buffers allocated for pooled intermediates
    size_t reusedBuffers = 0;         // pooled allocations served by a released buffer
    size_t peakLiveBuffers = 0;       // most pooled buffers holding live images at once
    size_t fusedPairs = 0;            // node pairs encoded as one kernel (graph_fusion.h)
};

class IntermediatePool final : public ImageAllocator, public std::enable_shared_from_this<IntermediatePool> {
public:
    explicit IntermediatePool(GraphEncodeStatistics& statistics) : statistics_(statistics) {}
    ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel) override;
    ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel,
                                          size_t count) override;
    // True for storage this pool handed out.
    bool owns(const Buffer* buffer) const { return owned_.count(buffer) != 0; }
    // The buffer's contents are dead from the next encoded op on: later allocations may reuse it.
    void release(std::shared_ptr<Buffer> buffer);

private:
    std::shared_ptr<Buffer> take(CommandBuffer& cb, size_t bytes, bool overwritten);

    GraphEncodeStatistics& statistics_;
    std::multimap<size_t, std::shared_ptr<Buffer>> free_;  // by length
    std::unordered_set<const Buffer*> owned_;
};

}  // namespace mpsgrad
