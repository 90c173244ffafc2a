// BUG on purpose: no bounds check. When the grid is rounded up to whole
// threadgroups, the last threads read past the end of x. Under AddressSanitizer
// the emulation reports a heap-buffer-overflow at oob.metal:10.
#include <metal_stdlib>
using namespace metal;

kernel void scale_unchecked(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                            constant float& a [[buffer(2)]], uint gid [[thread_position_in_grid]])
{
    y[gid] = a * x[gid];
}
