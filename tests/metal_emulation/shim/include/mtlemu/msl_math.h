// metal_stdlib shim, part 2: math, common, geometric, relational and integer
// functions of namespace metal, for scalars and ext vectors.
//
// Everything is computed in single precision (double for double arguments),
// with correctly rounded libm results: there is no fast-math emulation, so
// results differ from a GPU in the last bits and tests compare with
// tolerances. metal::precise and metal::fast name the same functions.
#pragma once

#include "mtlemu/msl_types.h"

namespace mtlemu {
namespace msl {

// half arithmetic goes through float; double stays double.
template <class T>
using calc_t = std::conditional_t<std::is_same<std::remove_cv_t<T>, double>::value, double, float>;

template <class T, class F>
inline T map1(const T& x, F f) {
    if constexpr (is_vector_v<T>) {
        T r;
        for (int i = 0; i < vtraits<T>::n; ++i) r[i] = f(x[i]);
        return r;
    } else {
        return f(x);
    }
}
template <class T, class F>
inline T map2(const T& a, const T& b, F f) {
    if constexpr (is_vector_v<T>) {
        T r;
        for (int i = 0; i < vtraits<T>::n; ++i) r[i] = f(a[i], b[i]);
        return r;
    } else {
        return f(a, b);
    }
}
template <class T, class F>
inline T map3(const T& a, const T& b, const T& c, F f) {
    if constexpr (is_vector_v<T>) {
        T r;
        for (int i = 0; i < vtraits<T>::n; ++i) r[i] = f(a[i], b[i], c[i]);
        return r;
    } else {
        return f(a, b, c);
    }
}

// Result types, computed lazily so that unrelated argument types simply
// remove the overload instead of failing to compile.
template <class A, class B, bool = is_num_v<A> && is_num_v<B>>
struct num2 {};
template <class A, class B>
struct num2<A, B, true> {
    using type = common_t<A, B>;
};
template <class A, class B, bool = is_num_v<A> && is_num_v<B>>
struct fp2 {};
template <class A, class B>
struct fp2<A, B, true> : std::enable_if<is_fp_v<common_t<A, B>>, common_t<A, B>> {};
template <class A, class B, class C, bool = is_num_v<A> && is_num_v<B> && is_num_v<C>>
struct num3 {};
template <class A, class B, class C>
struct num3<A, B, C, true> {
    using type = common_t<common_t<A, B>, C>;
};
template <class A, class B, class C, bool = is_num_v<A> && is_num_v<B> && is_num_v<C>>
struct fp3 {};
template <class A, class B, class C>
struct fp3<A, B, C, true> : std::enable_if<is_fp_v<common_t<common_t<A, B>, C>>, common_t<common_t<A, B>, C>> {};

// Per-component result of a relational function: bool for scalars, an int
// vector with -1 for true (like a comparison) for vectors.
template <class T>
using rel_t = std::conditional_t<is_vector_v<T>, vec<int, vtraits<T>::n>, bool>;

template <class T, class F>
inline rel_t<T> relational(const T& x, F f) {
    if constexpr (is_vector_v<T>) {
        rel_t<T> r;
        for (int i = 0; i < vtraits<T>::n; ++i) r[i] = f(x[i]) ? -1 : 0;
        return r;
    } else {
        return f(x);
    }
}

}  // namespace msl
}  // namespace mtlemu

namespace metal {

// ----------------------------------------------------------- one argument
#define MTLEMU_FP1(NAME, EXPR)                                                      \
    template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>       \
    inline T NAME(T x) {                                                            \
        return ::mtlemu::msl::map1(x, [](auto e) {                                  \
            using E = decltype(e);                                                  \
            using C = ::mtlemu::msl::calc_t<E>;                                     \
            const C v = C(e);                                                       \
            (void)v;                                                                \
            return E(EXPR);                                                         \
        });                                                                         \
    }

MTLEMU_FP1(sqrt, std::sqrt(v))
MTLEMU_FP1(rsqrt, C(1) / std::sqrt(v))
MTLEMU_FP1(exp, std::exp(v))
MTLEMU_FP1(exp2, std::exp2(v))
MTLEMU_FP1(exp10, std::pow(C(10), v))
MTLEMU_FP1(log, std::log(v))
MTLEMU_FP1(log2, std::log2(v))
MTLEMU_FP1(log10, std::log10(v))
MTLEMU_FP1(sin, std::sin(v))
MTLEMU_FP1(cos, std::cos(v))
MTLEMU_FP1(tan, std::tan(v))
MTLEMU_FP1(asin, std::asin(v))
MTLEMU_FP1(acos, std::acos(v))
MTLEMU_FP1(atan, std::atan(v))
MTLEMU_FP1(sinh, std::sinh(v))
MTLEMU_FP1(cosh, std::cosh(v))
MTLEMU_FP1(tanh, std::tanh(v))
MTLEMU_FP1(asinh, std::asinh(v))
MTLEMU_FP1(acosh, std::acosh(v))
MTLEMU_FP1(atanh, std::atanh(v))
MTLEMU_FP1(sinpi, std::sin(v * C(3.14159265358979323846)))
MTLEMU_FP1(cospi, std::cos(v * C(3.14159265358979323846)))
MTLEMU_FP1(tanpi, std::tan(v * C(3.14159265358979323846)))
MTLEMU_FP1(floor, std::floor(v))
MTLEMU_FP1(ceil, std::ceil(v))
MTLEMU_FP1(round, std::round(v))
MTLEMU_FP1(rint, std::rint(v))
MTLEMU_FP1(trunc, std::trunc(v))
MTLEMU_FP1(fabs, std::fabs(v))
MTLEMU_FP1(fract, std::fmin(v - std::floor(v), C(0x1.fffffep-1)))
MTLEMU_FP1(saturate, std::fmin(std::fmax(v, C(0)), C(1)))
MTLEMU_FP1(sign, v > C(0) ? C(1) : (v < C(0) ? C(-1) : C(0)))
#undef MTLEMU_FP1

// abs: fabs for floats, |x| for integers.
template <class T, std::enable_if_t<::mtlemu::msl::is_num_v<T>, int> = 0>
inline T abs(T x) {
    return ::mtlemu::msl::map1(x, [](auto e) {
        using E = decltype(e);
        if constexpr (::mtlemu::msl::is_fp_scalar_v<E>)
            return E(std::fabs(::mtlemu::msl::calc_t<E>(e)));
        else if constexpr (std::is_signed<E>::value)
            return E(e < 0 ? -e : e);
        else
            return e;
    });
}

// ---------------------------------------------------------- two arguments
#define MTLEMU_FP2(NAME, EXPR)                                                          \
    template <class A, class B>                                                         \
    inline typename ::mtlemu::msl::fp2<A, B>::type NAME(A a_, B b_) {                   \
        using T = typename ::mtlemu::msl::fp2<A, B>::type;                              \
        return ::mtlemu::msl::map2(::mtlemu::msl::to<T>(a_), ::mtlemu::msl::to<T>(b_),  \
                                   [](auto x, auto y) {                                 \
                                       using E = decltype(x);                           \
                                       using C = ::mtlemu::msl::calc_t<E>;              \
                                       const C u = C(x), v = C(y);                      \
                                       (void)u;                                         \
                                       (void)v;                                         \
                                       return E(EXPR);                                  \
                                   });                                                  \
    }

MTLEMU_FP2(pow, std::pow(u, v))
MTLEMU_FP2(powr, std::pow(u, v))
MTLEMU_FP2(fmod, std::fmod(u, v))
MTLEMU_FP2(atan2, std::atan2(u, v))
MTLEMU_FP2(copysign, std::copysign(u, v))
MTLEMU_FP2(fdim, std::fdim(u, v))
MTLEMU_FP2(fmin, std::fmin(u, v))
MTLEMU_FP2(fmax, std::fmax(u, v))
MTLEMU_FP2(step, v < u ? C(0) : C(1))  // step(edge, x)
#undef MTLEMU_FP2

// min/max: fmin/fmax semantics for floats (a NaN argument loses).
template <class A, class B>
inline typename ::mtlemu::msl::num2<A, B>::type min(A a_, B b_) {
    using T = typename ::mtlemu::msl::num2<A, B>::type;
    return ::mtlemu::msl::map2(::mtlemu::msl::to<T>(a_), ::mtlemu::msl::to<T>(b_), [](auto x, auto y) {
        using E = decltype(x);
        if constexpr (::mtlemu::msl::is_fp_scalar_v<E>)
            return E(std::fmin(::mtlemu::msl::calc_t<E>(x), ::mtlemu::msl::calc_t<E>(y)));
        else
            return y < x ? y : x;
    });
}
template <class A, class B>
inline typename ::mtlemu::msl::num2<A, B>::type max(A a_, B b_) {
    using T = typename ::mtlemu::msl::num2<A, B>::type;
    return ::mtlemu::msl::map2(::mtlemu::msl::to<T>(a_), ::mtlemu::msl::to<T>(b_), [](auto x, auto y) {
        using E = decltype(x);
        if constexpr (::mtlemu::msl::is_fp_scalar_v<E>)
            return E(std::fmax(::mtlemu::msl::calc_t<E>(x), ::mtlemu::msl::calc_t<E>(y)));
        else
            return x < y ? y : x;
    });
}

// -------------------------------------------------------- three arguments
template <class A, class B, class C>
inline typename ::mtlemu::msl::num3<A, B, C>::type clamp(A x, B lo, C hi) {
    using T = typename ::mtlemu::msl::num3<A, B, C>::type;
    return metal::min(metal::max(::mtlemu::msl::to<T>(x), ::mtlemu::msl::to<T>(lo)), ::mtlemu::msl::to<T>(hi));
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::num3<A, B, C>::type min3(A a, B b, C c) {
    return metal::min(metal::min(a, b), c);
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::num3<A, B, C>::type max3(A a, B b, C c) {
    return metal::max(metal::max(a, b), c);
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::fp3<A, B, C>::type mix(A x_, B y_, C a_) {
    using T = typename ::mtlemu::msl::fp3<A, B, C>::type;
    const T x = ::mtlemu::msl::to<T>(x_), y = ::mtlemu::msl::to<T>(y_), a = ::mtlemu::msl::to<T>(a_);
    return x + (y - x) * a;
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::fp3<A, B, C>::type smoothstep(A e0_, B e1_, C x_) {
    using T = typename ::mtlemu::msl::fp3<A, B, C>::type;
    const T e0 = ::mtlemu::msl::to<T>(e0_), e1 = ::mtlemu::msl::to<T>(e1_), x = ::mtlemu::msl::to<T>(x_);
    const T t = metal::saturate((x - e0) / (e1 - e0));
    return t * t * (::mtlemu::msl::to<T>(3) - ::mtlemu::msl::to<T>(2) * t);
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::fp3<A, B, C>::type fma(A a_, B b_, C c_) {
    using T = typename ::mtlemu::msl::fp3<A, B, C>::type;
    return ::mtlemu::msl::map3(::mtlemu::msl::to<T>(a_), ::mtlemu::msl::to<T>(b_), ::mtlemu::msl::to<T>(c_),
                               [](auto x, auto y, auto z) {
                                   using E = decltype(x);
                                   using K = ::mtlemu::msl::calc_t<E>;
                                   return E(std::fma(K(x), K(y), K(z)));
                               });
}
template <class A, class B, class C>
inline typename ::mtlemu::msl::fp3<A, B, C>::type mad(A a, B b, C c) {
    return metal::fma(a, b, c);
}

// select(a, b, c): b where c is true, else a. c is a bool, or for vectors a
// vector of the same width (a comparison result).
template <class T, class C>
inline T select(T a, T b, C c) {
    using namespace ::mtlemu::msl;
    if constexpr (is_vector_v<T> && is_vector_v<C>) {
        static_assert(vtraits<T>::n == vtraits<C>::n, "select: condition has another width");
        T r;
        for (int i = 0; i < vtraits<T>::n; ++i) r[i] = c[i] ? b[i] : a[i];
        return r;
    } else {
        return c ? b : a;
    }
}

template <class T>
inline T divide(T a, T b) {
    return a / b;
}

// -------------------------------------------------------------- geometric
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>
inline ::mtlemu::msl::elem_t<T> dot(T a, T b) {
    using E = ::mtlemu::msl::elem_t<T>;
    if constexpr (::mtlemu::msl::is_vector_v<T>) {
        ::mtlemu::msl::calc_t<E> s = 0;
        for (int i = 0; i < ::mtlemu::msl::vtraits<T>::n; ++i) s += ::mtlemu::msl::calc_t<E>(a[i]) * b[i];
        return E(s);
    } else {
        return a * b;
    }
}
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>
inline ::mtlemu::msl::elem_t<T> length_squared(T v) {
    return metal::dot(v, v);
}
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>
inline ::mtlemu::msl::elem_t<T> length(T v) {
    return metal::sqrt(metal::dot(v, v));
}
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>
inline ::mtlemu::msl::elem_t<T> distance(T a, T b) {
    return metal::length(a - b);
}
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>
inline T normalize(T v) {
    return v * metal::rsqrt(metal::dot(v, v));
}
template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T> && ::mtlemu::msl::vtraits<T>::n == 3, int> = 0>
inline T cross(T a, T b) {
    return T{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}

// ------------------------------------------------------------- relational
#define MTLEMU_REL(NAME, EXPR)                                                              \
    template <class T, std::enable_if_t<::mtlemu::msl::is_fp_v<T>, int> = 0>               \
    inline ::mtlemu::msl::rel_t<T> NAME(T x) {                                              \
        return ::mtlemu::msl::relational(x, [](auto e) {                                    \
            const ::mtlemu::msl::calc_t<decltype(e)> v = ::mtlemu::msl::calc_t<decltype(e)>(e); \
            return bool(EXPR);                                                              \
        });                                                                                 \
    }
MTLEMU_REL(isnan, std::isnan(v))
MTLEMU_REL(isinf, std::isinf(v))
MTLEMU_REL(isfinite, std::isfinite(v))
MTLEMU_REL(isnormal, std::isnormal(v))
MTLEMU_REL(signbit, std::signbit(v))
#undef MTLEMU_REL

template <class T>
inline bool all(T v) {
    if constexpr (::mtlemu::msl::is_vector_v<T>) {
        for (int i = 0; i < ::mtlemu::msl::vtraits<T>::n; ++i)
            if (!v[i]) return false;
        return true;
    } else {
        return bool(v);
    }
}
template <class T>
inline bool any(T v) {
    if constexpr (::mtlemu::msl::is_vector_v<T>) {
        for (int i = 0; i < ::mtlemu::msl::vtraits<T>::n; ++i)
            if (v[i]) return true;
        return false;
    } else {
        return bool(v);
    }
}

// ---------------------------------------------------------------- integer
template <class T, std::enable_if_t<::mtlemu::msl::is_int_v<T>, int> = 0>
inline T popcount(T x) {
    return ::mtlemu::msl::map1(x, [](auto e) {
        using E = decltype(e);
        return E(__builtin_popcountll((unsigned long long)(std::make_unsigned_t<E>)e));
    });
}
template <class T, std::enable_if_t<::mtlemu::msl::is_int_v<T>, int> = 0>
inline T clz(T x) {
    return ::mtlemu::msl::map1(x, [](auto e) {
        using E = decltype(e);
        constexpr int bits = int(sizeof(E) * 8);
        const unsigned long long u = (unsigned long long)(std::make_unsigned_t<E>)e;
        return E(u == 0 ? bits : __builtin_clzll(u) - (64 - bits));
    });
}
template <class T, std::enable_if_t<::mtlemu::msl::is_int_v<T>, int> = 0>
inline T ctz(T x) {
    return ::mtlemu::msl::map1(x, [](auto e) {
        using E = decltype(e);
        const unsigned long long u = (unsigned long long)(std::make_unsigned_t<E>)e;
        return E(u == 0 ? int(sizeof(E) * 8) : __builtin_ctzll(u));
    });
}
template <class T, std::enable_if_t<::mtlemu::msl::is_int_v<T>, int> = 0>
inline T mulhi(T a, T b) {
    return ::mtlemu::msl::map2(a, b, [](auto x, auto y) {
        using E = decltype(x);
        static_assert(sizeof(E) <= 4, "mulhi of 64-bit integers is not emulated");
        return E((std::int64_t(x) * std::int64_t(y)) >> (sizeof(E) * 8));
    });
}

// The precise:: and fast:: variants compute the same (correctly rounded) value.
#define MTLEMU_MATH_NAMES                                                                      \
    using metal::sqrt;                                                                         \
    using metal::rsqrt;                                                                        \
    using metal::exp;                                                                          \
    using metal::exp2;                                                                         \
    using metal::exp10;                                                                        \
    using metal::log;                                                                          \
    using metal::log2;                                                                         \
    using metal::log10;                                                                        \
    using metal::sin;                                                                          \
    using metal::cos;                                                                          \
    using metal::tan;                                                                          \
    using metal::asin;                                                                         \
    using metal::acos;                                                                         \
    using metal::atan;                                                                         \
    using metal::atan2;                                                                        \
    using metal::sinh;                                                                         \
    using metal::cosh;                                                                         \
    using metal::tanh;                                                                         \
    using metal::pow;                                                                          \
    using metal::powr;                                                                         \
    using metal::fmin;                                                                         \
    using metal::fmax;                                                                         \
    using metal::min;                                                                          \
    using metal::max;                                                                          \
    using metal::clamp;                                                                        \
    using metal::saturate;                                                                     \
    using metal::fabs;                                                                         \
    using metal::abs;                                                                          \
    using metal::floor;                                                                        \
    using metal::ceil;                                                                         \
    using metal::round;                                                                        \
    using metal::trunc;                                                                        \
    using metal::fract;                                                                        \
    using metal::fmod;                                                                         \
    using metal::divide;                                                                       \
    using metal::normalize;                                                                    \
    using metal::length;                                                                       \
    using metal::distance;
namespace precise {
MTLEMU_MATH_NAMES
}
namespace fast {
MTLEMU_MATH_NAMES
}
#undef MTLEMU_MATH_NAMES

}  // namespace metal
