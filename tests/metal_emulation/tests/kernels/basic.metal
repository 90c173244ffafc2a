// Kernels for the end-to-end tests of the Metal emulation: buffers, setBytes
// parameters, both dispatch forms, built-in values, function constants,
// templates, half, atomics and threadgroup memory.
#include <metal_stdlib>
#include "emu_test_params.h"

using namespace metal;
using namespace emutest;

// y = a * x + y, for a grid that may be larger than n.
kernel void saxpy(constant SaxpyParams& p [[buffer(0)]],
                  device const float* x [[buffer(1)]],
                  device float* y [[buffer(2)]],
                  uint gid [[thread_position_in_grid]])
{
    if (int(gid) >= p.n) return;
    y[gid] = p.a * x[gid] + y[gid];
}

// float4 loads and stores, vector constructors and select().
kernel void scale_relu4(device const float4* x [[buffer(0)]],
                        device float4* y [[buffer(1)]],
                        constant float& scale [[buffer(2)]],
                        uint gid [[thread_position_in_grid]])
{
    const float4 v = x[gid] * float4(scale);
    y[gid] = select(float4(0.0f), v, v > float4(0.0f, 0.0f, 0.0f, 0.0f));
}

// 2-D grid: every element gets y * width + x + 0.5.
kernel void iota2d(constant Grid2DParams& p [[buffer(0)]],
                   device float* out [[buffer(1)]],
                   uint2 pos [[thread_position_in_grid]])
{
    if (pos.x >= p.width || pos.y >= p.height) return;
    out[pos.y * p.width + pos.x] = float(pos.y * p.width + pos.x) + 0.5f;
}

// Writes every built-in value of every thread (in all its forms).
kernel void record_builtins(device BuiltinRecord* out [[buffer(0)]],
                            uint3 gid [[thread_position_in_grid]],
                            ushort3 lid [[thread_position_in_threadgroup]],
                            uint3 tgid [[threadgroup_position_in_grid]],
                            uint3 tptg [[threads_per_threadgroup]],
                            uint3 ntg [[threadgroups_per_grid]],
                            uint3 grid [[threads_per_grid]],
                            uint index [[thread_index_in_threadgroup]],
                            ushort shortIndex [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint width [[threads_per_simdgroup]],
                            uint nsg [[simdgroups_per_threadgroup]])
{
    const uint flat = (gid.z * grid.y + gid.y) * grid.x + gid.x;
    device BuiltinRecord& r = out[flat];
    for (int i = 0; i < 3; ++i) {
        r.positionInGrid[i] = gid[i];
        r.positionInThreadgroup[i] = lid[i];
        r.threadgroupPosition[i] = tgid[i];
        r.threadsPerThreadgroup[i] = tptg[i];
        r.threadgroupsPerGrid[i] = ntg[i];
        r.threadsPerGrid[i] = grid[i];
    }
    r.indexInThreadgroup = index;
    r.indexInSimdgroup = lane;
    r.simdgroupIndex = sg;
    r.threadsPerSimdgroup = width;
    r.simdgroupsPerThreadgroup = nsg;
    r.shortIndex = shortIndex;
}

// Function constants of the four common types; the optional one may be unset.
constant bool kUseBias [[function_constant(0)]];
constant int kOffset [[function_constant(1)]];
constant uint kRepeat [[function_constant(2)]];
constant float kScale [[function_constant(3)]];
constant float kExtra [[function_constant(4)]];
constant bool kNoBias = !kUseBias;

float add_bias(float v, device const float* bias, uint i)
{
    return kUseBias ? v + bias[i] : v;
}

kernel void specialised(device const float* x [[buffer(0)]],
                        device const float* bias [[buffer(1)]],
                        device float* y [[buffer(2)]],
                        uint gid [[thread_position_in_grid]])
{
    float v = x[gid];
    for (uint r = 0; r < kRepeat; ++r) v *= kScale;
    v = add_bias(v, bias, gid) + float(kOffset);
    if (is_function_constant_defined(kExtra)) v += kExtra;
    if (kNoBias) v = -v;
    y[gid] = v;
}

// A template kernel instantiated under two Metal names.
template <typename T>
kernel void add_arrays(device const T* a [[buffer(0)]],
                       device const T* b [[buffer(1)]],
                       device T* c [[buffer(2)]],
                       uint gid [[thread_position_in_grid]])
{
    c[gid] = a[gid] + b[gid];
}
template [[host_name("add_arrays_float")]] kernel void add_arrays<float>(device const float* a [[buffer(0)]],
    device const float* b [[buffer(1)]], device float* c [[buffer(2)]], uint gid [[thread_position_in_grid]]);
template [[host_name("add_arrays_int")]] kernel void add_arrays<int>(device const int* a [[buffer(0)]],
    device const int* b [[buffer(1)]], device int* c [[buffer(2)]], uint gid [[thread_position_in_grid]]);

// half arithmetic with MSL's half literals.
kernel void half_axpb(device const half* x [[buffer(0)]],
                      device half* y [[buffer(1)]],
                      uint gid [[thread_position_in_grid]])
{
    const half2 v = half2(x[gid], 1.0h);
    y[gid] = v.x * 2.0h + v.y * 0.5h;
}

// Relaxed device atomics from every thread of every threadgroup.
kernel void count_and_sum(device atomic_uint* counter [[buffer(0)]],
                          device atomic_float* total [[buffer(1)]],
                          device atomic_int* maximum [[buffer(2)]],
                          uint gid [[thread_position_in_grid]])
{
    atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
    atomic_fetch_max_explicit(maximum, int(gid), memory_order_relaxed);
}

// Dynamic threadgroup memory: reverse the elements of each threadgroup.
kernel void reverse_in_group(device const float* x [[buffer(0)]],
                             device float* y [[buffer(1)]],
                             threadgroup float* scratch [[threadgroup(0)]],
                             uint gid [[thread_position_in_grid]],
                             uint lid [[thread_index_in_threadgroup]],
                             uint n [[threads_per_threadgroup]])
{
    scratch[lid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[gid] = scratch[n - 1 - lid];
}
