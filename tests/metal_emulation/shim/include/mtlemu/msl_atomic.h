// metal_stdlib shim, part 4: atomics.
//
// metal::atomic<T> has T's size and layout, so `device atomic_uint*` can point
// into an ordinary buffer. All operations are relaxed, as in MSL; device
// memory is shared by several worker threads, so they are real atomics.
#pragma once

#include "mtlemu/msl_sync.h"

// Atomics never race: they are kept out of line and out of the race detector's load/store
// instrumentation (race_detector.h), which would otherwise see plain loads and stores.
#define MTLEMU_ATOMIC_FN __attribute__((noinline, no_sanitize("coverage")))

namespace metal {

enum memory_order {
    memory_order_relaxed = __ATOMIC_RELAXED,
    memory_order_seq_cst = __ATOMIC_SEQ_CST,
};
enum thread_scope {
    thread_scope_thread,
    thread_scope_simdgroup,
    thread_scope_threadgroup,
    thread_scope_device,
};

template <class T>
struct atomic {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "MSL atomics hold 32- or 64-bit values");
    T value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<ulong> atomic_ulong;

namespace atomic_detail {
template <class T>
struct same {
    using type = T;
};
template <class T>
using arg_t = typename same<T>::type;  // keeps operands from taking part in deduction

// Read-modify-write through a compare-exchange loop (floats, min/max).
template <class T, class F>
MTLEMU_ATOMIC_FN T update(volatile atomic<T>* a, F f) {
    T old;
    __atomic_load(&a->value, &old, __ATOMIC_RELAXED);
    T desired;
    do {
        desired = f(old);
    } while (!__atomic_compare_exchange(&a->value, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
}  // namespace atomic_detail

template <class T>
MTLEMU_ATOMIC_FN T atomic_load_explicit(const volatile atomic<T>* a, memory_order) {
    T v;
    __atomic_load(&a->value, &v, __ATOMIC_RELAXED);
    return v;
}
template <class T>
MTLEMU_ATOMIC_FN void atomic_store_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> v, memory_order) {
    __atomic_store(&a->value, &v, __ATOMIC_RELAXED);
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_exchange_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> v, memory_order) {
    T old;
    __atomic_exchange(&a->value, &v, &old, __ATOMIC_RELAXED);
    return old;
}
template <class T>
MTLEMU_ATOMIC_FN bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* a, T* expected, atomic_detail::arg_t<T> desired,
                                                  memory_order, memory_order) {
    return __atomic_compare_exchange(&a->value, expected, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
template <class T>
MTLEMU_ATOMIC_FN bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* a, T* expected,
                                                    atomic_detail::arg_t<T> desired, memory_order, memory_order) {
    return __atomic_compare_exchange(&a->value, expected, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_add_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    if constexpr (std::is_integral<T>::value)
        return __atomic_fetch_add(&a->value, x, __ATOMIC_RELAXED);
    else
        return atomic_detail::update(a, [x](T old) { return T(old + x); });
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_sub_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    if constexpr (std::is_integral<T>::value)
        return __atomic_fetch_sub(&a->value, x, __ATOMIC_RELAXED);
    else
        return atomic_detail::update(a, [x](T old) { return T(old - x); });
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_and_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    static_assert(std::is_integral<T>::value, "atomic_fetch_and_explicit takes an integer atomic");
    return __atomic_fetch_and(&a->value, x, __ATOMIC_RELAXED);
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_or_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    static_assert(std::is_integral<T>::value, "atomic_fetch_or_explicit takes an integer atomic");
    return __atomic_fetch_or(&a->value, x, __ATOMIC_RELAXED);
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_xor_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    static_assert(std::is_integral<T>::value, "atomic_fetch_xor_explicit takes an integer atomic");
    return __atomic_fetch_xor(&a->value, x, __ATOMIC_RELAXED);
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_min_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    return atomic_detail::update(a, [x](T old) { return x < old ? x : old; });
}
template <class T>
MTLEMU_ATOMIC_FN T atomic_fetch_max_explicit(volatile atomic<T>* a, atomic_detail::arg_t<T> x, memory_order) {
    return atomic_detail::update(a, [x](T old) { return old < x ? x : old; });
}

inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

}  // namespace metal
