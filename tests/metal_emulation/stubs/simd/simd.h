/*
 * Linux stand-in for <simd/simd.h>, used by newer metal-cpp releases (MetalFX).
 * clang's ext_vector_type gives the same size and alignment as Apple's types.
 */
#pragma once

typedef float simd_float2 __attribute__((ext_vector_type(2)));
typedef float simd_float3 __attribute__((ext_vector_type(3)));
typedef float simd_float4 __attribute__((ext_vector_type(4)));
typedef struct { simd_float4 columns[4]; } simd_float4x4;

#ifdef __cplusplus
namespace simd {
using float2 = ::simd_float2;
using float3 = ::simd_float3;
using float4 = ::simd_float4;
using float4x4 = ::simd_float4x4;
}  // namespace simd
#endif
