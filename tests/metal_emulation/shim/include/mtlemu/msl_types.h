// metal_stdlib shim, part 1: MSL scalar, vector and packed types, metal::array,
// vector construction and conversion helpers.
//
// Vector types are clang ext_vector_type vectors, which give MSL's swizzles
// (.xy, .zyx, .rgba), element access with [] and MSL's sizes and alignments
// (float3 is 16 bytes). Like MSL, they live in the global namespace and are
// also visible as metal::float4 and so on.
#pragma once

#if !defined(__clang__)
#error "the mtlemu metal_stdlib shim needs clang (ext_vector_type)"
#endif

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

// ------------------------------------------------------------------ scalars
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;

// ------------------------------------------------------------------ vectors
#define MTLEMU_DEFINE_VECTORS(T, NAME)                     \
    typedef T NAME##2 __attribute__((ext_vector_type(2))); \
    typedef T NAME##3 __attribute__((ext_vector_type(3))); \
    typedef T NAME##4 __attribute__((ext_vector_type(4)));
MTLEMU_DEFINE_VECTORS(float, float)
MTLEMU_DEFINE_VECTORS(half, half)
MTLEMU_DEFINE_VECTORS(int, int)
MTLEMU_DEFINE_VECTORS(uint, uint)
MTLEMU_DEFINE_VECTORS(short, short)
MTLEMU_DEFINE_VECTORS(ushort, ushort)
MTLEMU_DEFINE_VECTORS(char, char)
MTLEMU_DEFINE_VECTORS(uchar, uchar)
MTLEMU_DEFINE_VECTORS(long, long)
MTLEMU_DEFINE_VECTORS(ulong, ulong)
#undef MTLEMU_DEFINE_VECTORS

// Comparing two 32-bit vectors gives an int vector (-1 for true), so boolN is
// an int vector here. (MSL's boolN is a distinct 1-byte-per-lane type; kernels
// do not store bool vectors in buffers, so only the name matters.)
typedef int2 bool2;
typedef int3 bool3;
typedef int4 bool4;

static_assert(sizeof(float3) == 16 && alignof(float3) == 16, "MSL float3 is 16 bytes");
static_assert(sizeof(half4) == 8, "MSL half4 is 8 bytes");

namespace mtlemu {
namespace msl {

template <class T, int N>
using vec = T __attribute__((ext_vector_type(N)));

// ----------------------------------------------------- packed vectors
// packed_floatN and friends: N tightly packed scalars (no padding, scalar
// alignment) with .x/.y/.z/.w, [] and conversions to and from vectors.
template <class T, int N>
struct packed;

#define MTLEMU_PACKED_COMMON(N)                                                          \
    using vector_type = vec<T, N>;                                                       \
    packed() = default;                                                                  \
    packed(const vector_type& v) { *this = v; }                                          \
    packed& operator=(const vector_type& v) {                                            \
        for (int i = 0; i < N; ++i) (*this)[i] = v[i];                                   \
        return *this;                                                                    \
    }                                                                                    \
    operator vector_type() const {                                                       \
        vector_type v;                                                                   \
        for (int i = 0; i < N; ++i) v[i] = (*this)[i];                                   \
        return v;                                                                        \
    }                                                                                    \
    T& operator[](int i) { return reinterpret_cast<T*>(this)[i]; }                       \
    const T& operator[](int i) const { return reinterpret_cast<const T*>(this)[i]; }

template <class T>
struct packed<T, 2> {
    T x, y;
    packed(T a, T b) : x(a), y(b) {}
    MTLEMU_PACKED_COMMON(2)
};
template <class T>
struct packed<T, 3> {
    T x, y, z;
    packed(T a, T b, T c) : x(a), y(b), z(c) {}
    MTLEMU_PACKED_COMMON(3)
};
template <class T>
struct packed<T, 4> {
    T x, y, z, w;
    packed(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
    MTLEMU_PACKED_COMMON(4)
};
#undef MTLEMU_PACKED_COMMON

// ----------------------------------------------------- vector traits
// vtraits<T>::n is the number of components (1 for scalars), ::elem the
// component type; is_vector is true for ext vectors only.
template <class T>
struct vtraits {
    using elem = T;
    static constexpr int n = 1;
    static constexpr bool is_vector = false;
};
template <class E, int N>
struct vtraits<E __attribute__((ext_vector_type(N)))> {
    using elem = E;
    static constexpr int n = N;
    static constexpr bool is_vector = true;
};
template <class E, int N>
struct vtraits<packed<E, N>> {
    using elem = E;
    static constexpr int n = N;
    static constexpr bool is_vector = false;
};
template <class T>
struct vtraits<const T> : vtraits<T> {};

template <class T>
using elem_t = typename vtraits<T>::elem;
template <class T>
constexpr bool is_vector_v = vtraits<T>::is_vector;
template <class T>
constexpr bool is_half_v = std::is_same<std::remove_cv_t<T>, half>::value;
template <class T>
constexpr bool is_fp_scalar_v = std::is_floating_point<T>::value || is_half_v<T>;
template <class T>
constexpr bool is_int_scalar_v = std::is_integral<T>::value;
template <class T>
constexpr bool is_scalar_v = is_fp_scalar_v<T> || is_int_scalar_v<T>;
// float-like scalar or vector
template <class T>
constexpr bool is_fp_v = is_fp_scalar_v<elem_t<T>> && (is_vector_v<T> || is_scalar_v<T>);
template <class T>
constexpr bool is_int_v = is_int_scalar_v<elem_t<T>> && (is_vector_v<T> || is_scalar_v<T>);
template <class T>
constexpr bool is_num_v = is_fp_v<T> || is_int_v<T>;

// The type a binary MSL function computes in when its two arguments differ:
// vector op scalar -> vector; float op double literal -> float (MSL has no
// double); float op int -> float; int op int -> usual C++ rules.
template <class A, class B, class = void>
struct common_arith;
template <class A>
struct common_arith<A, A> {
    using type = A;
};
template <class A, class B>
struct common_arith<A, B, std::enable_if_t<!std::is_same<A, B>::value>> {
    static constexpr bool av = is_vector_v<A>, bv = is_vector_v<B>;
    using scalar_pick = std::conditional_t<
        is_fp_scalar_v<A> && is_fp_scalar_v<B>,
        std::conditional_t<std::is_same<A, double>::value, B, A>,
        std::conditional_t<is_fp_scalar_v<A>, A,
                           std::conditional_t<is_fp_scalar_v<B>, B, std::common_type_t<A, B>>>>;
    using type = std::conditional_t<av, A, std::conditional_t<bv, B, scalar_pick>>;
    static_assert(!(av && bv), "MSL functions take vectors of one type");
};
template <class A, class B>
using common_t = typename common_arith<A, B>::type;

// Converts a scalar or vector to T (splatting a scalar into a vector).
template <class T, class S>
inline T to(const S& s) {
    if constexpr (is_vector_v<T> && is_vector_v<S>) {
        static_assert(vtraits<T>::n == vtraits<S>::n, "vector widths differ");
        return __builtin_convertvector(s, T);
    } else if constexpr (is_vector_v<T>) {
        return T(elem_t<T>(s));
    } else {
        return T(s);
    }
}

// ----------------------------------------------------- construction
// MSL's float4(a, b.xy, c) and friends; msl2cpp.py rewrites vector
// constructor calls to metal::vmake<float4>(...), since ext vectors have no
// multi-argument constructors.
template <class V, class S>
inline void vput(V& r, int& i, const S& s) {
    using E = elem_t<V>;
    if constexpr (vtraits<S>::n == 1) {
        r[i++] = E(s);
    } else {
        for (int k = 0; k < vtraits<S>::n; ++k) r[i++] = E(s[k]);
    }
}

}  // namespace msl
}  // namespace mtlemu

namespace metal {

using mtlemu::msl::vec;

template <class V, class... A>
inline V vmake(const A&... a) {
    using mtlemu::msl::vtraits;
    using E = typename vtraits<V>::elem;
    constexpr int N = vtraits<V>::n;
    if constexpr (sizeof...(A) == 0) {
        return V(E(0));
    } else if constexpr (N == 1) {
        static_assert(sizeof...(A) == 1, "a scalar conversion takes one argument");
        return V(a...);
    } else if constexpr (sizeof...(A) == 1 && (vtraits<A>::n + ...) == 1) {
        return V(E(a...));  // splat
    } else {
        static_assert((vtraits<A>::n + ...) == N, "wrong number of vector components in a vector constructor");
        V r;
        int i = 0;
        (mtlemu::msl::vput(r, i, a), ...);
        return r;
    }
}

// static_cast<float4>(int4) in MSL converts element by element (clang's
// static_cast between vectors of one size would reinterpret the bits).
template <class V, class S>
inline V vconvert(const S& s) {
    if constexpr (mtlemu::msl::is_vector_v<V> || mtlemu::msl::is_vector_v<S>)
        return mtlemu::msl::to<V>(s);
    else
        return static_cast<V>(s);
}

template <class T, class U>
inline T as_type(const U& u) {
    static_assert(sizeof(T) == sizeof(U), "as_type needs types of one size");
    T t;
    std::memcpy(&t, &u, sizeof t);
    return t;
}

template <class T, std::size_t N>
struct array {
    T elems[N];
    T& operator[](std::size_t i) { return elems[i]; }
    const T& operator[](std::size_t i) const { return elems[i]; }
    static constexpr std::size_t size() { return N; }
    T* begin() { return elems; }
    T* end() { return elems + N; }
    const T* begin() const { return elems; }
    const T* end() const { return elems + N; }
};

template <class T>
struct numeric_limits : std::numeric_limits<T> {};
template <>
struct numeric_limits<half> {
    static constexpr bool is_specialized = true;
    static constexpr bool is_signed = true;
    static constexpr bool is_integer = false;
    static constexpr bool has_infinity = true;
    static constexpr bool has_quiet_NaN = true;
    static constexpr int digits = 11;
    static constexpr half min() { return half(6.103515625e-05f); }
    static constexpr half max() { return half(65504.0f); }
    static constexpr half lowest() { return half(-65504.0f); }
    static constexpr half epsilon() { return half(9.765625e-04f); }
    static constexpr half infinity() { return half(__builtin_huge_valf()); }
    static constexpr half quiet_NaN() { return half(__builtin_nanf("")); }
};

}  // namespace metal

// MSL's global names for the types, also reachable as metal::name.
#define MTLEMU_PACKED(T, NAME)                                \
    typedef mtlemu::msl::packed<T, 2> packed_##NAME##2;      \
    typedef mtlemu::msl::packed<T, 3> packed_##NAME##3;      \
    typedef mtlemu::msl::packed<T, 4> packed_##NAME##4;      \
    namespace metal {                                         \
    using ::NAME##2;                                          \
    using ::NAME##3;                                          \
    using ::NAME##4;                                          \
    using ::packed_##NAME##2;                                 \
    using ::packed_##NAME##3;                                 \
    using ::packed_##NAME##4;                                 \
    }
MTLEMU_PACKED(float, float)
MTLEMU_PACKED(half, half)
MTLEMU_PACKED(int, int)
MTLEMU_PACKED(uint, uint)
MTLEMU_PACKED(short, short)
MTLEMU_PACKED(ushort, ushort)
MTLEMU_PACKED(char, char)
MTLEMU_PACKED(uchar, uchar)
#undef MTLEMU_PACKED
namespace metal {
using ::bool2;
using ::bool3;
using ::bool4;
using ::half;
using ::long2;
using ::long3;
using ::long4;
using ::uchar;
using ::uint;
using ::ulong;
using ::ulong2;
using ::ulong3;
using ::ulong4;
using ::ushort;
}  // namespace metal

// MSL constants not in <cfloat>/<cmath>.
#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)6.103515625e-05f)
#define HALF_EPSILON ((half)9.765625e-04f)
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
