// The CPU backend's recycling of large host buffers (backend/cpu/buffer_cache.h): a recycled
// block is filled exactly as a new one (zero, or poison under ctest), only blocks of the same
// size are reused, small blocks are never kept, and the budget bounds what is kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/buffer_cache.h"
#include "core/device.h"

namespace mpsgrad {
namespace {

namespace cache = cpu::buffer_cache;

constexpr size_t kLarge = size_t(1) << 20;

// Restores the budget and empties the cache around each test.
class BufferCache : public ::testing::Test {
protected:
    void SetUp() override {
        budget_ = cache::budgetBytes();
        if (budget_ == 0) GTEST_SKIP() << "buffer recycling is off in this build (AddressSanitizer) or by environment";
        cache::releaseAll();
    }
    void TearDown() override {
        if (budget_ == 0) return;
        cache::setBudgetBytes(budget_);
        cache::releaseAll();
    }
    size_t budget_ = 0;
};

TEST_F(BufferCache, ARecycledBufferIsZeroFilledLikeANewOne) {
    Backend& cpu = Device("cpu").backend();
    void* first = nullptr;
    {
        auto dirty = cpu.newBuffer(kLarge, BufferFill::Unspecified);
        first = dirty->contents();
        std::memset(first, 0x5A, kLarge);
    }
    EXPECT_EQ(cache::cachedBytes(), kLarge);
    auto again = cpu.newBuffer(kLarge, BufferFill::Zero);
    EXPECT_EQ(again->contents(), first) << "the freed block of the same size is reused";
    EXPECT_EQ(cache::cachedBytes(), 0u);
    const auto* bytes = static_cast<const uint8_t*>(again->contents());
    for (size_t i = 0; i < kLarge; ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i;
}

TEST_F(BufferCache, ARecycledUnspecifiedBufferIsPoisonedUnderCtest) {
    if (!poisonUnspecifiedBuffers()) GTEST_SKIP() << "MPSGRAD_POISON_UNSPECIFIED_BUFFERS is not 1 (run through ctest)";
    Backend& cpu = Device("cpu").backend();
    { auto zero = cpu.newBuffer(kLarge, BufferFill::Zero); }
    auto again = cpu.newBuffer(kLarge, BufferFill::Unspecified);
    const auto* bytes = static_cast<const uint8_t*>(again->contents());
    for (size_t i = 0; i < kLarge; i += 4093) ASSERT_EQ(bytes[i], 0xFF) << "byte " << i;
}

TEST_F(BufferCache, OnlyBlocksOfTheSameSizeAreReused) {
    EXPECT_EQ(cache::take(kLarge), nullptr);
    void* block = std::aligned_alloc(64, kLarge);
    cache::give(block, kLarge);
    EXPECT_EQ(cache::take(kLarge + 64), nullptr);
    EXPECT_EQ(cache::take(kLarge - 64), nullptr);
    void* back = cache::take(kLarge);
    EXPECT_EQ(back, block);
    std::free(back);
}

TEST_F(BufferCache, SmallBlocksAreNotKept) {
    const size_t small = cache::kMinCachedBytes - 64;
    cache::give(std::aligned_alloc(64, small), small);
    EXPECT_EQ(cache::cachedBytes(), 0u);
    EXPECT_EQ(cache::take(small), nullptr);
}

TEST_F(BufferCache, TheBudgetEvictsTheOldestBlocks) {
    cache::setBudgetBytes(3 * kLarge);
    void* blocks[4];
    for (auto& b : blocks) {
        b = std::aligned_alloc(64, kLarge);
        cache::give(b, kLarge);
    }
    EXPECT_EQ(cache::cachedBytes(), 3 * kLarge) << "the oldest block was freed to stay within the budget";
    // The most recently freed comes back first; the oldest is gone.
    void* taken[3];
    for (auto& t : taken) t = cache::take(kLarge);
    EXPECT_EQ(taken[0], blocks[3]);
    EXPECT_EQ(taken[1], blocks[2]);
    EXPECT_EQ(taken[2], blocks[1]);
    EXPECT_EQ(cache::take(kLarge), nullptr);
    for (void* t : taken) std::free(t);

    cache::setBudgetBytes(0);  // recycling off: a given block is freed at once
    cache::give(std::aligned_alloc(64, kLarge), kLarge);
    EXPECT_EQ(cache::cachedBytes(), 0u);
}

TEST_F(BufferCache, ReleaseAllEmptiesTheCache) {
    Backend& cpu = Device("cpu").backend();
    { auto a = cpu.newBuffer(kLarge), b = cpu.newBuffer(2 * kLarge); }
    EXPECT_EQ(cache::cachedBytes(), 3 * kLarge);
    cache::releaseAll();
    EXPECT_EQ(cache::cachedBytes(), 0u);
}

}  // namespace
}  // namespace mpsgrad
