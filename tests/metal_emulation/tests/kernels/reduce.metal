// Kernels that use simdgroup functions, barriers and threadgroup memory.
#include <metal_stdlib>
#include "emu_test_params.h"

using namespace metal;
using namespace emutest;

// One partial sum per threadgroup: simd_sum in every simdgroup, the partial
// sums through threadgroup memory, and a second simd_sum in simdgroup 0.
kernel void reduce_sum(constant ReduceParams& p [[buffer(0)]],
                       device const float* x [[buffer(1)]],
                       device float* partial [[buffer(2)]],
                       uint gid [[thread_position_in_grid]],
                       uint tgid [[threadgroup_position_in_grid]],
                       ushort lane [[thread_index_in_simdgroup]],
                       ushort sg [[simdgroup_index_in_threadgroup]],
                       ushort nsg [[simdgroups_per_threadgroup]])
{
    threadgroup float sums[32];
    float v = gid < p.n ? x[gid] : 0.0f;
    v = simd_sum(v);
    if (lane == 0) sums[sg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float s = lane < nsg ? sums[lane] : 0.0f;
        s = simd_sum(s);
        if (lane == 0) partial[tgid] = s;
    }
}

// Every simdgroup function on the p.n first lanes; the other lanes return
// first and take no part. Row `lane` of `out` gets kSimdOpColumns results.
kernel void simd_ops(constant ReduceParams& p [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     uint lane [[thread_index_in_simdgroup]])
{
    if (lane >= p.n) return;
    device float* row = out + lane * kSimdOpColumns;
    const float v = float(lane + 1);
    row[0] = simd_sum(v);
    row[1] = simd_max(v);
    row[2] = simd_min(v);
    row[3] = simd_prefix_exclusive_sum(v);
    row[4] = simd_prefix_inclusive_sum(v);
    row[5] = simd_shuffle(v, ushort((lane + 3) % p.n));
    row[6] = simd_shuffle_down(v, 1);
    row[7] = simd_shuffle_up(v, 2);
    row[8] = simd_shuffle_xor(v, 1);
    row[9] = simd_broadcast(v, 4);
    row[10] = simd_broadcast_first(v);
    row[11] = simd_is_first() ? 1.0f : 0.0f;
    row[12] = simd_all(v > 0.0f) ? 1.0f : 0.0f;
    row[13] = simd_any(v > 19.5f) ? 1.0f : 0.0f;
    row[14] = simd_sum(float4(v, 1.0f, 0.0f, 0.0f)).y;
    row[15] = float(popcount(uint(ulong(simd_ballot(lane % 2 == 0)))));
}

// Transposes a width x height matrix through a 16x16 threadgroup tile.
kernel void transpose16(constant Grid2DParams& p [[buffer(0)]],
                        device const float* in [[buffer(1)]],
                        device float* out [[buffer(2)]],
                        uint2 gid [[thread_position_in_grid]],
                        uint2 lid [[thread_position_in_threadgroup]],
                        uint2 tg [[threadgroup_position_in_grid]])
{
    threadgroup float tile[16][17];
    tile[lid.y][lid.x] = (gid.x < p.width && gid.y < p.height) ? in[gid.y * p.width + gid.x] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint ox = tg.y * 16 + lid.x;
    const uint oy = tg.x * 16 + lid.y;
    if (ox < p.height && oy < p.width) out[oy * p.height + ox] = tile[lid.x][lid.y];
}

// A threadgroup atomic counter: every threadgroup reports its size.
kernel void count_in_group(device uint* out [[buffer(0)]],
                           uint lid [[thread_index_in_threadgroup]],
                           uint tgid [[threadgroup_position_in_grid]])
{
    threadgroup atomic_uint counter;
    if (lid == 0) atomic_store_explicit(&counter, 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&counter, 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) out[tgid] = atomic_load_explicit(&counter, memory_order_relaxed);
}

// A barrier reached through a helper function (the generator must see it).
void publish_and_wait(threadgroup float* t, uint lid, float v)
{
    t[lid] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

kernel void rotate_through_helper(device const float* x [[buffer(0)]],
                                  device float* y [[buffer(1)]],
                                  uint lid [[thread_index_in_threadgroup]],
                                  uint n [[threads_per_threadgroup]])
{
    threadgroup float t[256];
    publish_and_wait(t, lid, x[lid]);
    y[lid] = t[(lid + 1) % n];
}
