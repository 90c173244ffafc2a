// A small fork-join pool for the CPU backend's compute loops.
#pragma once

#include <cstdint>
#include <functional>

namespace mpsgrad::cpu {

// Number of threads parallelFor splits work across (hardware concurrency, at least 1).
int threadCount();

// Calls body(begin, end) on disjoint chunks covering [0, count), in parallel, and returns
// when every chunk is done. Chunks hold at least `grain` items. Exceptions thrown by a chunk
// are rethrown in the caller. Nested calls from inside a chunk run serially.
void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

}  // namespace mpsgrad::cpu
