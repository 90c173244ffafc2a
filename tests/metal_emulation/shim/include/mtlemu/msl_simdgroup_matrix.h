// metal_stdlib shim: SIMD-group matrices (MSL specification, "SIMD-group matrix functions").
//
//   simdgroup_matrix<T, Cols, Rows>   8 x 8 only, T = float or half:
//                                     simdgroup_float8x8, simdgroup_half8x8
//   simdgroup_matrix<T,8,8>(T d)      a diagonal matrix with d on the diagonal
//   make_filled_simdgroup_matrix<T, Cols, Rows>(T v)   every element v
//   simdgroup_load(d, src, elements_per_row = Cols, matrix_origin = 0, transpose_matrix = false)
//   simdgroup_store(a, dst, elements_per_row = Cols, matrix_origin = 0, transpose_matrix = false)
//   simdgroup_multiply(d, a, b)                   d = a * b
//   simdgroup_multiply_accumulate(d, a, b, c)     d = a * b + c
//
// Addressing, for the block at matrix_origin = (x, y) (x counts columns, y rows) of a row-major
// array with elements_per_row elements per row: element (row r, column c) of the matrix is
//   src[(y + r) * elements_per_row + x + c]                 (transpose_matrix = false)
//   src[(y + c) * elements_per_row + x + r]                 (transpose_matrix = true)
// i.e. with transpose_matrix the block is read (or written) as the transpose of the matrix. Rows
// of the block are elements_per_row elements apart; columns are consecutive.
//
// The model: on a GPU the 64 elements are spread over the simdgroup's 32 lanes (two each) and
// every operation is executed by the whole simdgroup with the same arguments. Here every lane
// holds the whole matrix and performs loads and products itself, which gives the same values
// when the arguments are uniform across the simdgroup (MSL requires that; the emulation does
// not check it). A store writes, from each lane, its own two elements (row-major elements 2l and
// 2l + 1 of lane l), so the simdgroup writes each element exactly once, as the GPU does, and a
// lane that returned early leaves its elements unwritten. Products accumulate in float in
// increasing k from c, then round to T (for half: once, at the end); Apple GPUs may fuse and
// order differently, so compare with a tolerance. thread_elements() is not provided: Apple does
// not document which elements a lane holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mtlemu/kernel_runtime.h"
#include "mtlemu/msl_types.h"

namespace metal {

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
    static_assert(Cols == 8 && Rows == 8, "the Metal emulation provides 8 x 8 SIMD-group matrices only");
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value,
                  "SIMD-group matrices hold float or half");
    T e[Rows][Cols];  // e[row][column]

    simdgroup_matrix() = default;
    // A diagonal matrix (MSL: simdgroup_matrix(T dval)).
    explicit simdgroup_matrix(T diagonal) {
        for (int r = 0; r < Rows; ++r)
            for (int c = 0; c < Cols; ++c) e[r][c] = r == c ? diagonal : T(0);
    }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <class T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
    simdgroup_matrix<T, Cols, Rows> m;
    for (int r = 0; r < Rows; ++r)
        for (int c = 0; c < Cols; ++c) m.e[r][c] = value;
    return m;
}

namespace simdgroup_detail {

inline ulong2 noOrigin() {
    ulong2 origin = {0, 0};
    return origin;
}

// The array offset of element (r, c) of the block (see the header comment).
inline std::size_t offsetOf(int r, int c, std::size_t elementsPerRow, ulong2 origin, bool transpose) {
    const std::size_t row = std::size_t(origin.y) + std::size_t(transpose ? c : r);
    const std::size_t col = std::size_t(origin.x) + std::size_t(transpose ? r : c);
    return row * elementsPerRow + col;
}

}  // namespace simdgroup_detail

template <class T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const T* src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = simdgroup_detail::noOrigin(), bool transpose_matrix = false) {
    for (int r = 0; r < Rows; ++r)
        for (int c = 0; c < Cols; ++c)
            d.e[r][c] = src[simdgroup_detail::offsetOf(r, c, elements_per_row, matrix_origin, transpose_matrix)];
}

template <class T, int Cols, int Rows>
inline void simdgroup_store(simdgroup_matrix<T, Cols, Rows> a, T* dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = simdgroup_detail::noOrigin(), bool transpose_matrix = false) {
    const unsigned lane = ::mtlemu::rt::currentThread().thread_index_in_simdgroup;
    constexpr unsigned kPerLane = unsigned(Rows * Cols) / ::mtlemu::rt::kSimdWidth;
    for (unsigned i = lane * kPerLane; i < (lane + 1) * kPerLane; ++i) {
        const int r = int(i) / Cols, c = int(i) % Cols;
        dst[simdgroup_detail::offsetOf(r, c, elements_per_row, matrix_origin, transpose_matrix)] = a.e[r][c];
    }
}

template <class T, int N>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, N>& d, simdgroup_matrix<T, N, N> a,
                                          simdgroup_matrix<T, N, N> b, simdgroup_matrix<T, N, N> c) {
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) {
            float acc = float(c.e[i][j]);
            for (int k = 0; k < N; ++k) acc += float(a.e[i][k]) * float(b.e[k][j]);
            d.e[i][j] = T(acc);
        }
}

template <class T, int N>
inline void simdgroup_multiply(simdgroup_matrix<T, N, N>& d, simdgroup_matrix<T, N, N> a,
                               simdgroup_matrix<T, N, N> b) {
    simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, N, N>(T(0)));
}

}  // namespace metal
