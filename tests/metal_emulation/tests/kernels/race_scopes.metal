// Kernels that pin down the race detector's memory model (test_race.cpp). Each exchanges values
// between threads through memory with one kind of synchronisation; the tests say which orders.
#include <metal_stdlib>

using namespace metal;

// Lanes swap values through threadgroup memory within their simdgroup (partner lid ^ 1).
kernel void swap_in_simdgroup(device float* y [[buffer(0)]],
                              constant uint& mode [[buffer(1)]],
                              uint lid [[thread_index_in_threadgroup]])
{
    threadgroup float t[64];
    t[lid] = float(lid);
    if (mode == 0) simdgroup_barrier(mem_flags::mem_threadgroup);  // orders the simdgroup
    if (mode == 1) simdgroup_barrier(mem_flags::mem_device);       // wrong address space
    if (mode == 2) y[lid] = simd_sum(float(lid));                  // values, not memory
    y[lid] += t[lid ^ 1];  // race_scopes.metal:17
}

// Threads swap values across simdgroups (partner lid ^ 32).
kernel void swap_across_simdgroups(device float* y [[buffer(0)]],
                                   constant uint& mode [[buffer(1)]],
                                   uint lid [[thread_index_in_threadgroup]])
{
    threadgroup float t[64];
    t[lid] = float(lid);
    if (mode == 0) threadgroup_barrier(mem_flags::mem_threadgroup);
    if (mode == 1) simdgroup_barrier(mem_flags::mem_threadgroup);   // other simdgroups not ordered
    if (mode == 2) threadgroup_barrier(mem_flags::mem_device);      // wrong address space
    y[lid] = t[lid ^ 32];  // race_scopes.metal:30
}

// Threads swap values through device memory within one threadgroup.
kernel void swap_in_device_memory(device float* y [[buffer(0)]],
                                  constant uint& mode [[buffer(1)]],
                                  uint lid [[thread_index_in_threadgroup]])
{
    y[lid] = float(lid);
    if (mode == 0) threadgroup_barrier(mem_flags::mem_device);
    if (mode == 1) threadgroup_barrier(mem_flags::mem_threadgroup);  // wrong address space
    if (mode == 2) threadgroup_barrier(mem_flags::mem_none);
    y[64 + lid] = y[lid ^ 1];  // race_scopes.metal:42
}

// Every thread of every threadgroup counts into one device word.
kernel void count_atomically(device atomic_uint* counter [[buffer(0)]],
                             device uint* plain [[buffer(1)]],
                             constant uint& mode [[buffer(2)]],
                             uint gid [[thread_position_in_grid]])
{
    if (mode == 0) atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
    if (mode == 1) plain[0] += 1u;  // race_scopes.metal:52
}
