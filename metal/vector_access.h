// Loads and stores of up to four consecutive floats of device memory, shared by the .metal
// kernels. Metal-only.
//
// `aligned` is a function constant at every call site: true when the host checked that every
// access of the binding in the dispatch starts on a 16-byte boundary and covers whole quads,
// so the pipeline is compiled with the single float4 access and the scalar loop compiles away.
#pragma once

namespace mpsgrad {

// data[index .. index + count) (count <= 4) as a float4, zeros in the lanes past count.
inline float4 loadFloat4(device const float* data, int index, int count, bool aligned) {
    if (aligned && count == 4) return *reinterpret_cast<device const float4*>(data + index);
    float4 v = 0.0f;
    for (int j = 0; j < 4; ++j)
        if (j < count) v[j] = data[index + j];
    return v;
}

// Writes the first `count` (<= 4) lanes of v to data[index ...]; the floats after them are
// left untouched (they belong to other channels or to padding).
inline void storeFloat4(device float* data, int index, float4 v, int count, bool aligned) {
    if (aligned && count == 4) {
        *reinterpret_cast<device float4*>(data + index) = v;
        return;
    }
    for (int j = 0; j < 4; ++j)
        if (j < count) data[index + j] = v[j];
}

}  // namespace mpsgrad
