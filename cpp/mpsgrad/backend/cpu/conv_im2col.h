// CPU backend, internal: the im2col rows of the convolution forward and weight gradient
// (convolution.cpp, convolution_weight_gradient.cpp), from FLOAT32 or FLOAT16 storage
// (conv_operands.h): a FLOAT16 pixel is widened to float32 as it is copied into the row.
#pragma once

#include <cstdint>
#include <cstring>

#include "conv_geometry.h"
#include "conv_operands.h"
#include "core/half.h"
#include "half_simd.h"

namespace mpsgrad::cpu::conv {

// dst[0, n) = src[0, n) as float32: a copy, or a widening of halves (8 lanes at a time with F16C).
inline void copyRun(float* dst, const float* src, size_t n) { std::memcpy(dst, src, sizeof(float) * n); }
inline void copyRun(float* dst, const uint16_t* src, size_t n) { halvesToFloats(src, dst, int64_t(n)); }
// The same for a run of fixed length N (the channels of a grey-scale or RGB pixel): plain loads.
template <int N>
inline void copyFixed(float* dst, const float* src) {
    std::memcpy(dst, src, sizeof(float) * N);
}
template <int N>
inline void copyFixed(float* dst, const uint16_t* src) {
    for (int c = 0; c < N; ++c) dst[c] = halfBitsToFloat(src[c]);
}

// Copies `count` channels of one source pixel, or zeros when `pixel` is null. A few channels (a
// grey-scale or RGB input layer) are plain loads: a memcpy call per pixel cost more than the
// copy (the RGB stem's im2col spent as long in memcpy calls of 12 bytes as in the product).
template <class T>
inline void copyChannels(float* dst, const T* pixel, int count) {
    if (!pixel) {
        std::memset(dst, 0, sizeof(float) * size_t(count));
    } else if (count <= 4) {
        for (int c = 0; c < count; ++c) copyFixed<1>(dst + c, pixel + c);
    } else {
        copyRun(dst, pixel, size_t(count));
    }
}

// Copies `count` channels of each of kW taps, `tapStep` elements apart, one after the other. Up
// to four channels take a copy of a fixed size (two moves for an RGB pixel): the variable-length
// loop per tap cost the stem's im2col as much as its product.
template <int N, class T>
inline void copyTapsOf(float* dst, const T* px, int64_t tapStep, int kW) {
    for (int kx = 0; kx < kW; ++kx, dst += N) copyFixed<N>(dst, px + kx * tapStep);
}
template <class T>
inline void copyTaps(float* dst, const T* px, int64_t tapStep, int kW, int count) {
    switch (count) {
        case 1: return copyTapsOf<1>(dst, px, tapStep, kW);
        case 2: return copyTapsOf<2>(dst, px, tapStep, kW);
        case 3: return copyTapsOf<3>(dst, px, tapStep, kW);
        case 4: return copyTapsOf<4>(dst, px, tapStep, kW);
        default:
            for (int kx = 0; kx < kW; ++kx, dst += count) copyRun(dst, px + kx * tapStep, size_t(count));
    }
}

// One im2col row: the kH x kW taps of the window whose top-left tap reads source pixel
// (sy0, sx0) of image n, channels [c0, c0 + count) of each, tap after tap.
template <class T>
inline void im2colRowOf(float* dst, const T* source, const ImageLayout& S, int n, int sy0, int sx0, int kW, int kH,
                        int dilationX, int dilationY, int edgeMode, int c0, int count) {
    // A tap row that lies inside the image needs no edge handling; when the taps are adjacent and
    // the channels fill the pixels, it is one run of kW * count elements.
    const bool columnsInside = sx0 >= 0 && sx0 + dilationX * (kW - 1) < S.width;
    const bool oneRun = dilationX == 1 && count == S.pixelStride;
    const int64_t tapStep = int64_t(dilationX) * S.pixelStride;
    for (int ky = 0; ky < kH; ++ky) {
        const int sy = sy0 + dilationY * ky;
        if (columnsInside && sy >= 0 && sy < S.height) {
            const T* px = source + pixelIndex(S, n, sy, sx0) + c0;
            if (oneRun)
                copyRun(dst, px, size_t(kW) * size_t(count));
            else
                copyTaps(dst, px, tapStep, kW, count);
            dst += size_t(kW) * size_t(count);
            continue;
        }
        for (int kx = 0; kx < kW; ++kx, dst += count) {
            const T* px = sourcePixel(source, S, n, sy, sx0 + dilationX * kx, edgeMode);
            copyChannels(dst, px ? px + c0 : nullptr, count);
        }
    }
}

inline void im2colRow(float* dst, const ConvSource& source, const ImageLayout& S, int n, int sy0, int sx0, int kW,
                      int kH, int dilationX, int dilationY, int edgeMode, int c0, int count) {
    if (source.half)
        im2colRowOf(dst, source.halves(), S, n, sy0, sx0, kW, kH, dilationX, dilationY, edgeMode, c0, count);
    else
        im2colRowOf(dst, source.floats(), S, n, sy0, sx0, kW, kH, dilationX, dilationY, edgeMode, c0, count);
}

}  // namespace mpsgrad::cpu::conv
