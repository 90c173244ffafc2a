// Seeded random scheduling order of the Linux Metal emulation (MTLEMU_RANDOM_ORDER, see
// kernel_runtime.h: setRandomOrder).
#pragma once

#include <cstdint>

namespace mtlemu {
namespace rt {

// The seed of one threadgroup of a kernel (never 0): a function of the global seed, the kernel
// name and the threadgroup, so a seed repeats bit for bit.
std::uint64_t groupSeed(const char* kernel, std::uint64_t groupLinear);

// order = 0..n-1 (reversed if `reverse`), shuffled by (seed, round) unless seed is 0.
void fillPermutation(unsigned* order, unsigned n, bool reverse, std::uint64_t seed, std::uint64_t round);

}  // namespace rt
}  // namespace mtlemu
