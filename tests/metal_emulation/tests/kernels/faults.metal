// Kernels with deliberate bugs that the emulation must report. The tests
// check the file:line in the messages, so keep the marked lines in place.
#include <metal_stdlib>

using namespace metal;

// BUG: threads 48..63 return, the others wait at the barrier for them.
kernel void return_before_barrier(device float* y [[buffer(0)]],
                                  uint lid [[thread_index_in_threadgroup]])
{
    threadgroup float t[64];
    if (lid >= 48) return;
    t[lid] = float(lid);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // faults.metal:14
    y[lid] = t[47 - lid];
}

// BUG: half of the tile is never written; those reads see the NaN poison.
kernel void read_unwritten(device float* y [[buffer(0)]],
                           uint lid [[thread_index_in_threadgroup]])
{
    threadgroup float t[64];
    if (lid < 32) t[lid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[lid] = t[63 - lid];
}

// BUG: even and odd threads wait at different barriers.
kernel void divergent_barrier(device float* y [[buffer(0)]],
                              uint lid [[thread_index_in_threadgroup]])
{
    if (lid % 2 == 0) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // faults.metal:33
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // faults.metal:35
    }
    y[lid] = 1.0f;
}

// Divergent simdgroup functions (lanes of one simdgroup call different ones):
// legal in Metal, but partial simdgroup masks are not modelled.
kernel void divergent_simd(device float* y [[buffer(0)]],
                           uint lane [[thread_index_in_simdgroup]])
{
    float v = 1.0f;
    if (lane < 16) {
        v = simd_sum(v);  // faults.metal:47
    } else {
        v = simd_max(v);  // faults.metal:49
    }
    y[lane] = v;
}

// BUG: no barrier between writing the tile and reading a neighbour's entry.
kernel void missing_barrier(device const float* x [[buffer(0)]],
                            device float* y [[buffer(1)]],
                            uint lid [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]])
{
    threadgroup float t[256];
    t[lid] = x[lid];
    y[lid] = t[(lid + 1) % n];
}

// A function constant that the host may forget to set.
constant int kRequired [[function_constant(7)]];

kernel void needs_constant(device int* y [[buffer(0)]],
                           uint gid [[thread_position_in_grid]])
{
    y[gid] = kRequired;
}
