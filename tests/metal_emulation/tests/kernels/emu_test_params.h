// Parameter structs shared by the harness's test kernels and the C++ tests,
// written like the project's metal/*_params.h headers: plain 32-bit fields,
// an `#ifdef __METAL_VERSION__` guard and a namespace.
#pragma once

#ifdef __METAL_VERSION__
#include <metal_stdlib>
#else
#include <cstdint>
#endif

namespace emutest {

struct SaxpyParams {
    int32_t n;
    float a;
};

struct Grid2DParams {
    uint32_t width;
    uint32_t height;
};

// What the `record_builtins` kernel writes for every thread.
struct BuiltinRecord {
    uint32_t positionInGrid[3];
    uint32_t positionInThreadgroup[3];
    uint32_t threadgroupPosition[3];
    uint32_t threadsPerThreadgroup[3];
    uint32_t threadgroupsPerGrid[3];
    uint32_t threadsPerGrid[3];
    uint32_t indexInThreadgroup;
    uint32_t indexInSimdgroup;
    uint32_t simdgroupIndex;
    uint32_t threadsPerSimdgroup;
    uint32_t simdgroupsPerThreadgroup;
    uint32_t shortIndex;  // thread_index_in_threadgroup read as ushort
};

struct ReduceParams {
    uint32_t n;
};

// One row per lane of the `simd_ops` kernel.
constexpr int kSimdOpColumns = 16;

}  // namespace emutest
