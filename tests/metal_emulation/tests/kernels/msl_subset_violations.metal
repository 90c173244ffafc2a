// Planted violations of the MSL subset: every line marked expect-error must be reported by
// mslcheck/msl_subset_check.py, and nothing else (tests/CMakeLists: emu.msl_subset_check_*).
#include <metal_stdlib>

#include "msl_subset_violations.h"

using namespace metal;

inline int countdown(int n) { return n <= 0 ? 0 : 1 + countdown(n - 1); }  // expect-error

inline int ping(int n);
inline int pong(int n) { return n <= 0 ? 0 : ping(n - 1); }  // expect-error
inline int ping(int n) { return n <= 0 ? 0 : pong(n - 1); }  // expect-error

inline float twice(float x) { return 2.0f * x; }

kernel void violations(device float4* out [[buffer(0)]],
                       device const int4* in [[buffer(1)]],
                       uint gid [[thread_position_in_grid]]) {
    double wide = 1.0;  // expect-error
    float4 bits = (float4)in[gid];  // expect-error
    float4 values = float4(in[gid]);  // converts element by element: fine
    float (*f)(float) = twice;  // expect-error
    if (gid > 100) goto done;  // expect-error
    out[gid] = bits + values + f(1.0f) + float(wide) + float(countdown(3)) + float(ping(2)) + headerConvert(in[gid]);
done:
    return;
}
