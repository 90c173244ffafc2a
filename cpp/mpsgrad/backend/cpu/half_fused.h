// Element-wise ops over whole, dense FLOAT16 images with the conversions fused into the loop
// (docs/float16.md). The general native-half path (half_streaming.h) converts each input row into
// a float32 row buffer, runs the float32 loop over it and rounds a float32 row buffer back: three
// extra passes through the first cache levels for every pass the op itself makes, which left
// FLOAT16 element-wise ops 20-50 % slower than their FLOAT32 form on L3-resident tensors. When
// every binding is a whole dense image (no channel offset or padding lanes, no clip, no read
// offset, images back to back), the op is a map over flat arrays instead: eight halves at a time
// are widened in a register (F16C), the op's own float32 code computes eight results, and they are
// rounded back to halves in a register (to nearest even, as floatsToHalves does). Same float32
// operations, same rounding: the same bits as the staged path.
//
// x86-64 with F16C only (hasHardwareHalfConversion()); elsewhere, and for every other geometry,
// the ops keep the staged path.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "elementwise.h"
#include "half_simd.h"
#include "parallel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MPSGRAD_HAVE_FUSED_HALF 1
#endif

namespace mpsgrad::cpu::elementwise {

// True when `l` holds `batch` whole images of width x height that are dense and back to back:
// element i of the flat array is element i of the image tensor (NHWC, no padding lanes).
inline bool denseWhole(const ImageLayout& l, int32_t width, int32_t height, int32_t batch) {
    return l.width == width && l.height == height && l.channelOffset == 0 && l.channels == l.pixelStride &&
           (batch <= 1 || int64_t(l.imageStride) == int64_t(width) * height * l.pixelStride);
}

#ifdef MPSGRAD_HAVE_FUSED_HALF

// out[i] = lane(in[0][i], ..., in[K-1][i]) for i < count, in and out IEEE half bits; `lane(v, o)`
// computes o[j] from v[k][j] for the 8 lanes j. The tail (count % 8) goes through the same lanes
// from a zero-padded copy.
template <int K, class Lane>
__attribute__((target("avx,f16c"))) void fusedHalfMap(const uint16_t* const* in, uint16_t* out, int64_t count,
                                                    Lane lane) {
    alignas(32) float v[K][8];
    alignas(32) float o[8];
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        for (int k = 0; k < K; ++k)
            _mm256_store_ps(v[k], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in[k] + i))));
        lane(v, o);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_load_ps(o), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    if (i < count) {
        const int64_t rest = count - i;
        uint16_t h[8] = {};
        for (int k = 0; k < K; ++k) {
            std::memcpy(h, in[k] + i, size_t(rest) * sizeof(uint16_t));
            _mm256_store_ps(v[k], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
        }
        lane(v, o);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h),
                         _mm256_cvtps_ph(_mm256_load_ps(o), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        std::memcpy(out + i, h, size_t(rest) * sizeof(uint16_t));
    }
}

// fusedHalfMap over `count` elements split across the backend's threads (chunks of whole 8-lane
// groups; every element is computed by one thread from its own inputs: bitwise reproducible).
// Returns false, doing nothing, when the processor has no F16C.
template <int K, class Lane>
bool parallelFusedHalfMap(const uint16_t* const (&in)[K], uint16_t* out, int64_t count, Lane lane) {
    if (!hasHardwareHalfConversion()) return false;
    const int64_t groups = (count + 7) / 8;
    parallelFor(groups, 2048, [&](int64_t g0, int64_t g1) {
        const int64_t begin = g0 * 8, end = std::min(count, g1 * 8);
        const uint16_t* chunk[K];
        for (int k = 0; k < K; ++k) chunk[k] = in[k] + begin;
        fusedHalfMap<K>(chunk, out + begin, end - begin, lane);
    });
    return true;
}

#else

template <int K, class Lane>
bool parallelFusedHalfMap(const uint16_t* const (&)[K], uint16_t*, int64_t, Lane) {
    return false;
}

#endif

}  // namespace mpsgrad::cpu::elementwise
