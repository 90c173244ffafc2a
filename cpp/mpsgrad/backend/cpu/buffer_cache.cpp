// Recycling of the CPU backend's large host buffers: see buffer_cache.h for why.
#include "backend/cpu/buffer_cache.h"

#include <cstdlib>
#include <list>
#include <mutex>

namespace mpsgrad::cpu::buffer_cache {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr size_t kDefaultBudgetMiB = 1024;

// MPSGRAD_CPU_BUFFER_CACHE_MB: a non-negative whole number of MiB; anything else means the default.
size_t budgetFromEnvironment() {
    if (kSanitized) return 0;
    const char* text = std::getenv("MPSGRAD_CPU_BUFFER_CACHE_MB");
    if (!text || !*text) return kDefaultBudgetMiB << 20;
    char* end = nullptr;
    const unsigned long long mib = std::strtoull(text, &end, 10);
    if (*text == '-' || !end || *end != '\0' || mib > (1ull << 24)) return kDefaultBudgetMiB << 20;
    return size_t(mib) << 20;
}

struct Block {
    void* data;
    size_t bytes;
};

struct Cache {
    std::mutex mutex;
    std::list<Block> blocks;  // oldest first
    size_t bytes = 0;
    size_t budget = budgetFromEnvironment();

    // Frees the oldest blocks until `incoming` more bytes fit the budget; the caller holds the lock.
    void trimFor(size_t incoming) {
        while (!blocks.empty() && bytes + incoming > budget) {
            std::free(blocks.front().data);
            bytes -= blocks.front().bytes;
            blocks.pop_front();
        }
    }
};

Cache& cache() {
    // Never destroyed: buffers may be released by other static destructors at exit.
    static Cache* instance = new Cache();
    return *instance;
}

}  // namespace

void* take(size_t bytes) {
    if (bytes < kMinCachedBytes) return nullptr;
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    // The most recently freed block of the size: its pages are the likeliest still in cache.
    for (auto it = c.blocks.end(); it != c.blocks.begin();) {
        --it;
        if (it->bytes == bytes) {
            void* data = it->data;
            c.bytes -= bytes;
            c.blocks.erase(it);
            return data;
        }
    }
    return nullptr;
}

void give(void* block, size_t bytes) {
    if (!block) return;
    if (bytes >= kMinCachedBytes) {
        Cache& c = cache();
        std::lock_guard<std::mutex> lock(c.mutex);
        if (bytes <= c.budget) {
            c.trimFor(bytes);
            c.blocks.push_back(Block{block, bytes});
            c.bytes += bytes;
            return;
        }
    }
    std::free(block);
}

void releaseAll() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (const Block& b : c.blocks) std::free(b.data);
    c.blocks.clear();
    c.bytes = 0;
}

size_t cachedBytes() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    return c.bytes;
}

size_t budgetBytes() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    return c.budget;
}

void setBudgetBytes(size_t bytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.budget = kSanitized ? 0 : bytes;
    c.trimFor(0);
}

}  // namespace mpsgrad::cpu::buffer_cache
