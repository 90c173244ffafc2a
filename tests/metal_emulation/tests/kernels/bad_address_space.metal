// Address-space mistakes that Apple's Metal compiler rejects. The address-space
// check (aspcheck/msl_aspcheck.py --expect-errors) must report every line
// marked expect-error, and nothing else. Not compiled for the emulation.
#include <metal_stdlib>
using namespace metal;

float sum3(const float* p)  // a `thread` pointer in MSL
{
    return p[0] + p[1] + p[2];
}

float first(const threadgroup float* p)
{
    return p[0];
}

struct Pair {
    float a;
    float b;
};

float pairSum(Pair p)  // by value: callable with a struct from any address space
{
    return p.a + p.b;
}

kernel void bad_address_spaces(device const float* x [[buffer(0)]],
                               device float* y [[buffer(1)]],
                               constant uint& n [[buffer(2)]],
                               threadgroup float* scratch [[threadgroup(0)]],
                               device Pair* pairs [[buffer(3)]],
                               uint gid [[thread_position_in_grid]],
                               uint lid [[thread_index_in_threadgroup]])
{
    threadgroup float tile[64];
    tile[lid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[gid] = sum3(x + gid);                 // expect-error: device pointer passed as a thread pointer
    device float* t = tile;                 // expect-error: threadgroup array used as a device pointer
    n = 3;                                  // expect-error: write to constant memory
    scratch[lid] = sum3(&tile[lid]);        // expect-error: threadgroup pointer passed as a thread pointer
    y[gid] += first(x);                     // expect-error: device pointer passed as a threadgroup pointer
    float local[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    y[gid] += sum3(local) + first(scratch); // fine: thread array and threadgroup pointer
    // Legal MSL that the check rejects (clang gives a struct's implicit copy members no address
    // space; docs/metal.md): copying a struct from or to device memory.
    Pair copy = pairs[gid];                 // expect-error: (legal MSL) device struct into thread memory
    pairs[gid] = copy;                      // expect-error: (legal MSL) and back
    Pair byMember = {pairs[gid].a, pairs[gid].b};  // fine: member by member
    y[gid] += pairSum(byMember) + pairSum(copy);
    thread Pair& alias = pairs[gid];        // expect-error: thread reference to device memory
    (void)t;
    (void)alias;
}
