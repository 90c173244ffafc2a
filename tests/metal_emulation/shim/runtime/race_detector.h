// Race detector of the Linux Metal emulation (used by kernel_runtime.cpp).
//
// Translated kernels are compiled with -fsanitize-coverage=trace-loads,trace-stores, so every load
// and store they make calls __sanitizer_cov_loadN / __sanitizer_cov_storeN (race_detector.cpp).
// While a dispatch runs with the detector on, accesses that fall in a bound device buffer or in the
// running threadgroup's threadgroup memory update shadow state per 4-byte word: the last write and
// up to two reads since, each with the thread, threadgroup, barrier epochs and code address. Two
// accesses to one word by different threads, at least one a write, race unless
//   * both are in the same threadgroup and a threadgroup_barrier whose mem_flags include the
//     word's address space (mem_device or mem_threadgroup) was released between them, or
//   * both are in the same simdgroup and a simdgroup_barrier (or threadgroup_barrier) with
//     those flags was released between them.
// mem_flags::mem_none orders nothing; threadgroups of one dispatch are never ordered; dispatches
// are ordered (the shadow starts empty at each dispatch). Atomics are not instrumented (the shim
// marks them no_sanitize("coverage")), so they never race. simd_* functions exchange values, not
// memory, and are not assumed to order memory accesses (Metal documents no such guarantee).
//
// The first race of a threadgroup fails the dispatch with both source lines; every distinct pair of
// lines is also printed on stderr once per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mtlemu/kernel_runtime.h"

namespace mtlemu {
namespace race {

enum Space : unsigned { kDevice = 0, kThreadgroup = 1 };

bool enabled();
void setEnabled(bool on);  // MTLEMU_RACECHECK=1 turns it on at start-up

// Called by the runtime (dispatches are serialised and run on one worker while the detector is on).
void beginDispatch(const rt::DispatchDesc& d, const unsigned groups[3]);
void endDispatch();
void beginGroup(std::uint64_t groupLinear, unsigned threads);
void addThreadgroupMemory(const void* p, std::size_t bytes, const std::string& name);
// Returns the first race of the threadgroup (empty if none) and forgets its threadgroup memory.
std::string endGroup();
void setCurrentThread(unsigned threadIndex, unsigned simdgroup);  // the GPU thread now running
void clearCurrentThread();
void threadgroupBarrier(unsigned memFlags);  // released for the whole threadgroup
void simdgroupBarrier(unsigned simdgroup, unsigned memFlags);

}  // namespace race
}  // namespace mtlemu
