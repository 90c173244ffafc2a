// A shared header with a vector conversion that clang would compile as a bit cast.
#pragma once

inline float4 headerConvert(int4 v) { return float4(v); }  // expect-error
inline float4 headerSplat(float x) { return float4(x); }
inline float headerSum(int n) {
    float a[n];  // expect-error
    a[0] = 0.0f;
    return a[0];
}
inline void headerThrow(bool b) {
    if (b) throw 1;  // expect-error
}
