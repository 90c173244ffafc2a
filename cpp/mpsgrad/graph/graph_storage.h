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
// Within one encode, a released buffer is reused only for a destination the kernel overwrites
// completely (every pixel, no padding lanes, no channel offset or clip): the earlier reads of it
// have not run yet, so it cannot be zero-filled now.
//
// Across encodes the pool lives as long as the graph: when the command buffer of an encode has
// completed, every buffer that encode used goes back to the pool (an internal completion of the
// command buffer), and later encodes take it for any destination, zero-filling it on the host
// when the kernel does not overwrite it completely (the work that used it has finished). The
// images made on a buffer are kept with it and handed out again for the same descriptor and
// count when nobody else holds them, so a graph encoded again and again with the same batch size
// allocates nothing for its pooled intermediates once the first command buffer has completed. A
// command buffer that is never committed keeps its buffers; they are freed with it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

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
    IntermediatePool() = default;
    // Starts an encode whose counts go to `statistics`.
    void beginEncode(GraphEncodeStatistics& statistics);
    // Every buffer this encode used returns to the pool once `cb` has completed.
    void endEncode(CommandBuffer& cb);
    // An encode that failed: its buffers are dropped (work already encoded keeps them alive).
    void abandonEncode();
    // True between beginEncode and endEncode / abandonEncode.
    bool encoding() const { return statistics_ != nullptr; }
    ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel) override;
    ImageBatch imageBatchForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& descriptor, const Kernel* kernel,
                                          size_t count) override;
    // True for storage this pool handed out during the current encode.
    bool owns(const Buffer* buffer) const { return owned_.count(buffer) != 0; }
    // The buffer's contents are dead from the next encoded op on: later allocations of this encode
    // may reuse it for destinations they overwrite completely.
    void release(std::shared_ptr<Buffer> buffer);

private:
    // A buffer and the last batch of images made on it (reused when nobody else holds them).
    struct Entry {
        std::shared_ptr<Buffer> buffer;
        ImageBatch images;
    };
    using Entries = std::multimap<size_t, Entry>;  // by buffer length
    // The entry (in used_) of a buffer of at least `bytes` for a destination.
    Entry& take(CommandBuffer& cb, size_t bytes, bool overwritten);
    // The smallest entry of `entries` of at least `bytes`, removed; false when there is none.
    static bool takeFrom(Entries& entries, size_t bytes, Entry& taken);
    Entry& used(const Buffer* buffer);  // the entry of used_ holding `buffer`

    GraphEncodeStatistics* statistics_ = nullptr;
    std::vector<Entry> used_;                    // every buffer handed out in this encode
    Entries released_;                           // this encode's dead buffers (reuse: overwrite only)
    std::unordered_set<const Buffer*> owned_;    // the buffers of used_
    std::mutex idleMutex_;                       // idle_ is filled from the completion thread
    Entries idle_;                               // buffers whose last command buffer completed
};

}  // namespace mpsgrad
