// The batch helpers of MPSImage.h and MPSState.h (MPSImageBatch*, MPSStateBatch*), the
// MPSStateResourceList class and MPSSupportsMTLDevice.
//
// Batches are std::vectors of shared pointers, as in MPS (NSArray). An object may appear in a
// batch several times (the same image for every entry, or an accumulator state shared across a
// batch); every helper here touches each distinct object once, in the order of its first
// appearance, and skips null entries. imageBatchIncrementReadCount and
// stateBatchIncrementReadCount live with their classes (core/image.h, core/state.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/image.h"
#include "core/state.h"

namespace mpsgrad {

// MPSImageBatchSynchronize: -synchronizeOnCommandBuffer: on each distinct image (validates that
// every image can be used with `cb`; the storage is host-coherent, so nothing is copied).
void imageBatchSynchronize(const ImageBatch& batch, CommandBuffer& cb);
// MPSImageBatchResourceSize: the sum of -resourceSize over the distinct images.
size_t imageBatchResourceSize(const ImageBatch& batch);
// MPSImageBatchIterate: calls fn(image, index) once per distinct image, `index` being the
// position of its first appearance, and stops after a call that returns a negative value.
// Returns the value of the last call; 0 for a batch without images.
int64_t imageBatchIterate(const ImageBatch& batch, const std::function<int64_t(const ImagePtr&, size_t)>& fn);

// MPSStateBatchSynchronize / MPSStateBatchResourceSize: as for images, per distinct state.
void stateBatchSynchronize(const StateBatch& batch, CommandBuffer& cb);
size_t stateBatchResourceSize(const StateBatch& batch);

// MPSStateResourceList: the resources a new state gets. mpsgrad states hold buffers only
// (MTLBuffer on Metal, host memory on the CPU), so only the buffer forms exist.
class StateResourceList {
public:
    // +resourceList
    StateResourceList() = default;
    // +resourceListWithBufferSizes: (a size of 0 is a ValueError: MPS ends its list there)
    explicit StateResourceList(const std::vector<size_t>& bufferSizes);
    // -appendBuffer:
    void appendBuffer(size_t size);
    const std::vector<size_t>& bufferSizes() const { return sizes_; }

private:
    std::vector<size_t> sizes_;
};

// MPSSupportsMTLDevice: whether mpsgrad runs on `device`. Every Device mpsgrad can create
// (the CPU, and Metal where it was built) is supported; no device (null) is not.
bool supportsMTLDevice(const Device* device);

}  // namespace mpsgrad
