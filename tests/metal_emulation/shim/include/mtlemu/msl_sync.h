// metal_stdlib shim, part 3: barriers and simdgroup functions.
//
// Every function takes two hidden trailing default arguments, the calling
// file and line (__builtin_FILE/__builtin_LINE honour the #line directives of
// the translated file), so errors name the .metal source line.
//
// A simdgroup function is a cooperative exchange (rt::simdExchange): every
// active lane deposits its value and waits; when all active lanes of the
// simdgroup have arrived, one `combine` function computes every lane's
// result. Lanes that returned are inactive and take no part. A source lane
// that is inactive (or does not exist) gives a result of 0xFF bytes (NaN),
// which is what "undefined" looks like here.
#pragma once

#include "mtlemu/kernel_runtime.h"
#include "mtlemu/msl_math.h"

namespace metal {

enum class mem_flags : unsigned {
    mem_none = 0,
    mem_device = 1,
    mem_threadgroup = 2,
    mem_texture = 4,
    mem_threadgroup_imageblock = 8,
    mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }

// All threads of the threadgroup wait here; the emulation reports threads
// that returned instead, and threads waiting at different barriers.
// The flags matter to the race detector: mem_none orders no memory access, mem_threadgroup only
// threadgroup memory, mem_device only device memory.
inline void threadgroup_barrier(mem_flags f, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    ::mtlemu::rt::threadgroupBarrier(file, line, unsigned(f));
}
inline void simdgroup_barrier(mem_flags f, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    ::mtlemu::rt::simdExchange(nullptr, nullptr, 0, unsigned(f), nullptr, 0, "simdgroup_barrier", file, line);
}

}  // namespace metal

namespace mtlemu {
namespace msl {
namespace simd {

using rt::SimdLane;

template <class T>
inline T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}
template <class T>
inline void store(unsigned char* p, const T& v) {
    std::memcpy(p, &v, sizeof(T));
}
template <class T>
inline void poison(unsigned char* p) {
    std::memset(p, 0xFF, sizeof(T));
}
inline bool active(std::uint32_t mask, unsigned lane) { return lane < rt::kSimdWidth && ((mask >> lane) & 1u); }

// Reductions: every active lane receives op over all active lanes, in lane order (or in the
// runtime's random lane order, rt::setRandomOrder).
struct Add {
    template <class T>
    static T apply(T a, T b) { return a + b; }
};
struct Mul {
    template <class T>
    static T apply(T a, T b) { return a * b; }
};
struct Min {
    template <class T>
    static T apply(T a, T b) { return metal::min(a, b); }
};
struct Max {
    template <class T>
    static T apply(T a, T b) { return metal::max(a, b); }
};
struct And {
    template <class T>
    static T apply(T a, T b) { return a & b; }
};
struct Or {
    template <class T>
    static T apply(T a, T b) { return a | b; }
};
struct Xor {
    template <class T>
    static T apply(T a, T b) { return a ^ b; }
};

template <class T, class Op>
void reduce(SimdLane* lanes, std::uint32_t mask) {
    T acc{};
    bool first = true;
    const unsigned char* order = rt::simdLaneOrder();
    for (unsigned k = 0; k < rt::kSimdWidth; ++k) {
        const unsigned i = order[k];
        if (!active(mask, i)) continue;
        const T v = load<T>(lanes[i].in);
        acc = first ? v : Op::apply(acc, v);
        first = false;
    }
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i)) store(lanes[i].out, acc);
}

// Prefix scans over the active lanes, in lane order.
template <class T, class Op, bool Inclusive>
void scan(SimdLane* lanes, std::uint32_t mask) {
    T acc = std::is_same<Op, Mul>::value ? T(1) : T(0);
    for (unsigned i = 0; i < rt::kSimdWidth; ++i) {
        if (!active(mask, i)) continue;
        const T v = load<T>(lanes[i].in);
        if (Inclusive) acc = Op::apply(acc, v);
        store(lanes[i].out, acc);
        if (!Inclusive) acc = Op::apply(acc, v);
    }
}

// Data movement. `arg` is the lane's own operand (source lane, delta or mask).
enum class Move { Shuffle, Down, Up, Xor, RotateDown, RotateUp };

template <class T, Move M>
void move(SimdLane* lanes, std::uint32_t mask) {
    for (unsigned i = 0; i < rt::kSimdWidth; ++i) {
        if (!active(mask, i)) continue;
        const unsigned a = lanes[i].arg;
        unsigned src = i;
        bool keepOwn = false;
        switch (M) {
            case Move::Shuffle: src = a; break;
            case Move::Down:  // the upper `delta` lanes keep their value
                src = i + a;
                keepOwn = src >= rt::kSimdWidth;
                break;
            case Move::Up:  // the lower `delta` lanes keep their value
                keepOwn = a > i;
                src = i - a;
                break;
            case Move::Xor: src = i ^ a; break;
            case Move::RotateDown: src = (i + a) % rt::kSimdWidth; break;
            case Move::RotateUp: src = (i + rt::kSimdWidth - a % rt::kSimdWidth) % rt::kSimdWidth; break;
        }
        if (keepOwn)
            std::memcpy(lanes[i].out, lanes[i].in, sizeof(T));
        else if (active(mask, src))
            std::memcpy(lanes[i].out, lanes[src].in, sizeof(T));
        else
            poison<T>(lanes[i].out);
    }
}

template <class T>
void broadcastFirst(SimdLane* lanes, std::uint32_t mask) {
    const unsigned first = unsigned(__builtin_ctz(mask));
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i)) std::memcpy(lanes[i].out, lanes[first].in, sizeof(T));
}

inline void isFirst(SimdLane* lanes, std::uint32_t mask) {
    const unsigned first = unsigned(__builtin_ctz(mask));
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i)) store(lanes[i].out, bool(i == first));
}

inline void ballot(SimdLane* lanes, std::uint32_t mask) {
    std::uint64_t bits = 0;
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i) && load<bool>(lanes[i].in)) bits |= std::uint64_t(1) << i;
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i)) store(lanes[i].out, bits);
}

inline void activeMask(SimdLane* lanes, std::uint32_t mask) {
    for (unsigned i = 0; i < rt::kSimdWidth; ++i)
        if (active(mask, i)) store(lanes[i].out, std::uint64_t(mask));
}

template <class R, class T>
inline R exchange(rt::SimdCombineFn fn, const T& v, unsigned arg, const char* what, const char* file,
                  unsigned line) {
    static_assert(sizeof(T) <= sizeof(SimdLane::in) && sizeof(R) <= sizeof(SimdLane::out),
                  "simdgroup functions take values of at most 16 bytes");
    static_assert(std::is_trivially_copyable<T>::value, "simdgroup functions take trivially copyable values");
    R out{};
    rt::simdExchange(fn, &v, sizeof(T), arg, &out, sizeof(R), what, file, line);
    return out;
}

}  // namespace simd
}  // namespace msl
}  // namespace mtlemu

namespace metal {

#define MTLEMU_SIMD_FN(NAME, COMBINE)                                                                   \
    template <class T>                                                                                  \
    inline T NAME(T v, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {         \
        namespace s = ::mtlemu::msl::simd;                                                              \
        return s::exchange<T>(COMBINE, v, 0, #NAME, file, line);                                        \
    }
MTLEMU_SIMD_FN(simd_sum, (&s::reduce<T, s::Add>))
MTLEMU_SIMD_FN(simd_product, (&s::reduce<T, s::Mul>))
MTLEMU_SIMD_FN(simd_min, (&s::reduce<T, s::Min>))
MTLEMU_SIMD_FN(simd_max, (&s::reduce<T, s::Max>))
MTLEMU_SIMD_FN(simd_and, (&s::reduce<T, s::And>))
MTLEMU_SIMD_FN(simd_or, (&s::reduce<T, s::Or>))
MTLEMU_SIMD_FN(simd_xor, (&s::reduce<T, s::Xor>))
MTLEMU_SIMD_FN(simd_prefix_exclusive_sum, (&s::scan<T, s::Add, false>))
MTLEMU_SIMD_FN(simd_prefix_inclusive_sum, (&s::scan<T, s::Add, true>))
MTLEMU_SIMD_FN(simd_prefix_exclusive_product, (&s::scan<T, s::Mul, false>))
MTLEMU_SIMD_FN(simd_prefix_inclusive_product, (&s::scan<T, s::Mul, true>))
MTLEMU_SIMD_FN(simd_broadcast_first, (&s::broadcastFirst<T>))
#undef MTLEMU_SIMD_FN

#define MTLEMU_SIMD_MOVE(NAME, MOVE)                                                                     \
    template <class T>                                                                                   \
    inline T NAME(T v, ushort arg, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) { \
        namespace s = ::mtlemu::msl::simd;                                                               \
        return s::exchange<T>(&s::move<T, s::Move::MOVE>, v, arg, #NAME, file, line);                   \
    }
MTLEMU_SIMD_MOVE(simd_shuffle, Shuffle)
MTLEMU_SIMD_MOVE(simd_broadcast, Shuffle)
MTLEMU_SIMD_MOVE(simd_shuffle_down, Down)
MTLEMU_SIMD_MOVE(simd_shuffle_up, Up)
MTLEMU_SIMD_MOVE(simd_shuffle_xor, Xor)
MTLEMU_SIMD_MOVE(simd_shuffle_rotate_down, RotateDown)
MTLEMU_SIMD_MOVE(simd_shuffle_rotate_up, RotateUp)
#undef MTLEMU_SIMD_MOVE

inline bool simd_is_first(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return ::mtlemu::msl::simd::exchange<bool>(&::mtlemu::msl::simd::isFirst, false, 0, "simd_is_first", file,
                                               line);
}
inline bool simd_all(bool v, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    namespace s = ::mtlemu::msl::simd;
    return s::exchange<bool>(&s::reduce<bool, s::And>, v, 0, "simd_all", file, line);
}
inline bool simd_any(bool v, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    namespace s = ::mtlemu::msl::simd;
    return s::exchange<bool>(&s::reduce<bool, s::Or>, v, 0, "simd_any", file, line);
}

// The lanes of a simdgroup as bits (MSL's simd_vote).
struct simd_vote {
    using vote_t = std::uint64_t;
    vote_t bits = 0;
    constexpr simd_vote() = default;
    explicit constexpr simd_vote(vote_t v) : bits(v) {}
    explicit constexpr operator vote_t() const { return bits; }
    constexpr bool all() const { return bits == 0xFFFFFFFFu; }
    constexpr bool any() const { return bits != 0; }
};
inline simd_vote simd_ballot(bool v, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return simd_vote(
        ::mtlemu::msl::simd::exchange<std::uint64_t>(&::mtlemu::msl::simd::ballot, v, 0, "simd_ballot", file, line));
}
inline simd_vote simd_active_threads_mask(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return simd_vote(::mtlemu::msl::simd::exchange<std::uint64_t>(&::mtlemu::msl::simd::activeMask, false, 0,
                                                                  "simd_active_threads_mask", file, line));
}

}  // namespace metal
