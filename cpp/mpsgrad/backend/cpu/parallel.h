// A small fork-join pool for the CPU backend's compute loops, and the thread count control.
#pragma once

#include <cstdint>
#include <functional>

namespace mpsgrad::cpu {

// Number of threads parallelFor splits work across (the calling thread included).
// Initially defaultThreadCount(), then whatever setThreadCount set.
int threadCount();

// Sets the number of threads for work that starts from now on (work already running keeps
// its threads). Throws std::invalid_argument unless count >= 1.
void setThreadCount(int count);

// The thread count a process starts with: MPSGRAD_NUM_THREADS when it holds an integer >= 1,
// else the CPUs this process may run on: its CPU affinity mask (sched_getaffinity), capped by
// a cgroup CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) rounded up;
// std::thread::hardware_concurrency() where neither is available; at least 1.
int defaultThreadCount();

// Calls body(begin, end) on disjoint chunks covering [0, count), in parallel, and returns
// when every chunk is done. Chunks hold at least `grain` items. Exceptions thrown by a chunk
// are rethrown in the caller. Nested calls from inside a chunk run serially.
void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

}  // namespace mpsgrad::cpu
