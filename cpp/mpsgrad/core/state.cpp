#include "core/state.h"

#include <cstdint>
#include <set>

#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/host_access.h"

namespace mpsgrad {

State::State(const Device& device, const std::vector<size_t>& bufferSizes, bool temporary, const CommandBuffer* cb)
    : device_(device), temporary_(temporary), readCount_(temporary ? 1 : 0), commandBufferId_(cb ? cb->id() : 0) {
    for (size_t bytes : bufferSizes) addBuffer(bytes);
    // A temporary state's storage exists only until its command buffer completes (host reads check it).
    if (temporary && cb)
        for (const auto& slice : buffers_) host_access::noteTemporaryStorage(*cb, slice.buffer, "temporary state");
}

State::State(const Device& device, size_t bufferSize)
    : State(device, bufferSize ? std::vector<size_t>{bufferSize} : std::vector<size_t>{}, false, nullptr) {}

State::State(const Device& device, const std::vector<size_t>& bufferSizes)
    : State(device, bufferSizes, false, nullptr) {}

std::shared_ptr<State> State::temporary(CommandBuffer& cb, const std::vector<size_t>& bufferSizes) {
    cb.checkEncodable();
    return std::shared_ptr<State>(new State(cb.device(), bufferSizes, true, &cb));
}

BufferSlice State::addBuffer(size_t bytes) {
    if (bytes > size_t(PTRDIFF_MAX))
        throwValueError("buffer_size: ", bytes, " bytes is larger than any allocation can be (at most ", PTRDIFF_MAX,
                        ")");
    BufferSlice slice{device_.backend().newBuffer(bytes), 0};
    buffers_.push_back(slice);
    return slice;
}

void State::setReadCount(int64_t count) {
    if (temporary_ && readCount_ == 0)
        throwValueError("read_count: the temporary state's read count already reached 0 and its storage was "
                        "released; it cannot be changed");
    if (count < 0) throwValueError("read_count: must be >= 0, got ", count);
    readCount_ = count;
}

size_t State::bufferSizeAtIndex(size_t index) const {
    if (index >= buffers_.size()) return 0;
    return buffers_[index].buffer ? buffers_[index].buffer->length() : 0;
}

StateResourceType State::resourceTypeAtIndex(size_t index) const {
    return index < buffers_.size() ? StateResourceType::Buffer : StateResourceType::None;
}

BufferSlice State::resourceAtIndex(size_t index) const {
    if (index >= buffers_.size())
        throwValueError("index: the state has ", buffers_.size(), " resource(s), got index ", index);
    checkAccessible("state");
    return buffers_[index];
}

size_t State::resourceSize() const {
    size_t total = 0;
    for (size_t i = 0; i < buffers_.size(); ++i) total += bufferSizeAtIndex(i);
    return total;
}

void State::synchronizeOnCommandBuffer(CommandBuffer& cb) { checkUsable(cb, "state"); }

void State::checkAccessible(const char* what) const {
    if (temporary_ && readCount_ == 0)
        throwValueError(what, ": the temporary ", className(),
                        "'s read_count is already 0; it was consumed by an earlier read and cannot be used again");
}

void State::checkUsable(const CommandBuffer& cb, const char* what) const {
    if (device_ != cb.device())
        throwValueError(what, ": the state belongs to device '", device_.name(), "' but the command buffer to '",
                        cb.device().name(), "'");
    checkAccessible(what);
    if (temporary_ && commandBufferId_ != cb.id())
        throwValueError(what, ": a temporary state is valid only on the command buffer it was created for");
}

void State::noteRead() {
    if (!temporary_) return;
    checkAccessible("state");
    if (--readCount_ == 0)
        for (auto& b : buffers_) b.buffer.reset();  // encoded work keeps its own references
}

NNGradientState::NNGradientState(const Device& device, bool temporary, const CommandBuffer* cb)
    : State(device, {}, temporary, cb) {}

NNBinaryGradientState::NNBinaryGradientState(const Device& device, bool temporary, const CommandBuffer* cb)
    : State(device, {}, temporary, cb) {}

size_t stateBatchIncrementReadCount(const StateBatch& batch, int64_t amount) {
    std::set<State*> unique;
    for (const auto& state : batch)
        if (state && unique.insert(state.get()).second) state->setReadCount(state->readCount() + amount);
    return unique.size();
}

}  // namespace mpsgrad
