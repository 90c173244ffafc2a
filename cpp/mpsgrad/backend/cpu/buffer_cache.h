// Recycling of the CPU backend's large host buffers (docs/performance.md, "Buffer recycling").
//
// Every kernel encode that returns images allocates their storage. Megabytes fresh from the
// operating system arrive as untouched pages, and the first write to each 4 KB page takes a page
// fault in which the kernel also zeroes the page: for an element-wise op on a 6.4 MB batch that
// cost more than the op itself (1,569 faults and ~6 ms of CPU time per call against ~1.5 ms once
// the pages are resident). malloc hands such blocks back to the system on free (they are above
// its mmap threshold, or trimmed from the top of the heap), so the next call faults again.
//
// The cache keeps freed blocks of at least kMinCachedBytes, keyed by their exact size, and hands
// them out again for allocations of that size (the same layer at the next step asks for exactly
// the same bytes). It holds at most a byte budget (MPSGRAD_CPU_BUFFER_CACHE_MB, default 1024;
// 0 turns recycling off), evicting the least recently freed blocks first. Recycling changes no
// result: a recycled block is zero-filled or poisoned exactly as a new one is (backend.h).
// AddressSanitizer builds do not recycle, so that a use after free is still reported.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace mpsgrad::cpu::buffer_cache {

// Blocks below this size come and go through malloc's own bins without page faults.
constexpr size_t kMinCachedBytes = size_t(256) << 10;

// A block of exactly `bytes` bytes (a multiple of the alignment) from the cache, or null.
void* take(size_t bytes);
// Gives a block obtained with std::aligned_alloc back: cached, or freed when recycling is off,
// the block is small, or it does not fit the budget.
void give(void* block, size_t bytes);
// Frees every cached block (mpsgrad.release_cached_buffers()).
void releaseAll();
// Bytes the cache holds now, and its budget.
size_t cachedBytes();
size_t budgetBytes();
// Sets the budget (0: recycling off), trimming the cache to it.
void setBudgetBytes(size_t bytes);

}  // namespace mpsgrad::cpu::buffer_cache

namespace mpsgrad::cpu {

// Uninitialised float scratch whose large blocks are recycled by the cache above: the working
// arrays of an op (the Winograd transforms, the float32 copies of FLOAT16 operands) would
// otherwise be fresh pages, faulted in at every call.
class ScratchFloats {
public:
    explicit ScratchFloats(size_t floats) : bytes_((std::max<size_t>(1, floats) * sizeof(float) + 63) / 64 * 64) {
        data_ = static_cast<float*>(buffer_cache::take(bytes_));
        if (!data_) data_ = static_cast<float*>(std::aligned_alloc(64, bytes_));
        if (!data_) throw std::bad_alloc();
    }
    ~ScratchFloats() { buffer_cache::give(data_, bytes_); }
    ScratchFloats(const ScratchFloats&) = delete;
    ScratchFloats& operator=(const ScratchFloats&) = delete;
    float* data() const { return data_; }

private:
    size_t bytes_;
    float* data_;
};

}  // namespace mpsgrad::cpu
