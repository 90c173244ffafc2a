// Seeded random scheduling order of the Linux Metal emulation (random_order.h).
#include "random_order.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "mtlemu/kernel_runtime.h"

namespace mtlemu {
namespace rt {

namespace {

struct RandomOrder {
    std::atomic<bool> on{false};
    std::atomic<std::uint64_t> seed{0};
    RandomOrder() {
        const char* e = std::getenv("MTLEMU_RANDOM_ORDER");
        if (!e || !*e || std::strcmp(e, "0") == 0) return;
        std::uint64_t v = std::strtoull(e, nullptr, 10);
        if (v == 0) v = std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007u + 1;
        seed = v;
        on = true;
        std::fprintf(stderr, "mtlemu: random thread and simd-lane order, seed %llu (MTLEMU_RANDOM_ORDER=%llu "
                     "repeats it)\n", static_cast<unsigned long long>(v), static_cast<unsigned long long>(v));
    }
};

RandomOrder& state() {
    static RandomOrder r;
    return r;
}

std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

void setRandomOrder(bool on, std::uint64_t seed) {
    RandomOrder& r = state();
    if (on) r.seed = seed ? seed : 1;
    r.on = on;
}

bool randomOrder() { return state().on; }

std::uint64_t groupSeed(const char* kernel, std::uint64_t groupLinear) {
    return mix64(state().seed ^ mix64(groupLinear) ^ std::hash<std::string>()(kernel)) | 1;
}

void fillPermutation(unsigned* order, unsigned n, bool reverse, std::uint64_t seed, std::uint64_t round) {
    for (unsigned i = 0; i < n; ++i) order[i] = reverse ? n - 1 - i : i;
    if (!seed) return;
    std::uint64_t s = mix64(seed ^ mix64(round));
    for (unsigned i = n; i > 1; --i) {
        s = mix64(s);
        std::swap(order[i - 1], order[s % i]);
    }
}

}  // namespace rt
}  // namespace mtlemu
