#include "core/batch_helpers.h"

#include <unordered_set>

#include "core/errors.h"

namespace mpsgrad {

namespace {

// The distinct non-null objects of a batch with the index of their first appearance.
template <class T>
std::vector<std::pair<T*, size_t>> distinct(const std::vector<std::shared_ptr<T>>& batch) {
    std::unordered_set<const T*> seen;
    std::vector<std::pair<T*, size_t>> out;
    for (size_t i = 0; i < batch.size(); ++i)
        if (batch[i] && seen.insert(batch[i].get()).second) out.emplace_back(batch[i].get(), i);
    return out;
}

}  // namespace

void imageBatchSynchronize(const ImageBatch& batch, CommandBuffer& cb) {
    for (auto& [image, index] : distinct(batch)) image->synchronizeOnCommandBuffer(cb);
}

size_t imageBatchResourceSize(const ImageBatch& batch) {
    size_t total = 0;
    for (auto& [image, index] : distinct(batch)) total += image->resourceSize();
    return total;
}

int64_t imageBatchIterate(const ImageBatch& batch, const std::function<int64_t(const ImagePtr&, size_t)>& fn) {
    int64_t last = 0;
    for (auto& [image, index] : distinct(batch)) {
        last = fn(batch[index], index);
        if (last < 0) break;  // the block asked to stop
    }
    return last;
}

void stateBatchSynchronize(const StateBatch& batch, CommandBuffer& cb) {
    for (auto& [state, index] : distinct(batch)) state->synchronizeOnCommandBuffer(cb);
}

size_t stateBatchResourceSize(const StateBatch& batch) {
    size_t total = 0;
    for (auto& [state, index] : distinct(batch)) total += state->resourceSize();
    return total;
}

StateResourceList::StateResourceList(const std::vector<size_t>& bufferSizes) {
    for (size_t size : bufferSizes) appendBuffer(size);
}

void StateResourceList::appendBuffer(size_t size) {
    // MPS's variadic +resourceListWithBufferSizes: stops at 0, so a 0-byte buffer cannot be listed.
    if (size == 0) throwValueError("buffer size: must be > 0 (a state buffer of 0 bytes cannot be listed)");
    sizes_.push_back(size);
}

bool supportsMTLDevice(const Device* device) { return device != nullptr; }

}  // namespace mpsgrad
