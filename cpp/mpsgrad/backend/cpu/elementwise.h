// Shared helpers of the CPU element-wise ops (neuron.cpp, arithmetic.cpp, softmax.cpp):
// image addressing, edge-mode reads split into constant-stride runs, validation and a
// deterministic fixed-order sum. Internal to the CPU backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../../../../metal/common_params.h"

namespace mpsgrad::cpu::elementwise {

// Index (in floats) of channel `channelOffset` of pixel (x, y) of image n.
inline int64_t pixelIndex(const ImageLayout& l, int64_t n, int64_t x, int64_t y) {
    return n * int64_t(l.imageStride) + (y * int64_t(l.width) + x) * int64_t(l.pixelStride) +
           int64_t(l.channelOffset);
}

// A run of `count` consecutive output pixels whose input pixels are ptr, ptr + stride, ...
// (stride 0 when the run repeats one pixel: a broadcast, a clamped edge or the zero pixel).
struct Run {
    int32_t begin;
    int32_t end;
    const float* ptr;  // input pixel of output pixel `begin`
    int64_t stride;    // floats between the input pixels of consecutive output pixels
};

// The input pixels of one output row, as at most three runs covering [0, count).
struct RowRuns {
    Run runs[3];
    int32_t size = 0;
};

// Output pixel x (0 <= x < count) of the row reads input pixel (x0 + strideX * x, y) of image n
// of `l` (strideX is 0 or 1). Off-image pixels follow edgeMode: kEdgeClamp reads the nearest
// image pixel, anything else reads `zeros` (at least l.channels zero floats).
inline RowRuns rowRuns(const ImageLayout& l, const float* base, int64_t n, int32_t x0, int32_t y,
                       int32_t strideX, int32_t count, int32_t edgeMode, const float* zeros) {
    RowRuns r;
    if (count <= 0) return r;
    const bool clamp = edgeMode == kEdgeClamp && l.width > 0 && l.height > 0;
    auto add = [&](int32_t b, int32_t e, const float* p, int64_t s) {
        if (b < e) r.runs[r.size++] = Run{b, e, p, s};
    };
    if (y < 0 || y >= l.height) {
        if (!clamp) {
            add(0, count, zeros, 0);
            return r;
        }
        y = std::min(std::max(y, 0), l.height - 1);
    }
    auto pixel = [&](int32_t x) { return base + pixelIndex(l, n, x, y); };
    if (strideX == 0) {
        if (x0 >= 0 && x0 < l.width) add(0, count, pixel(x0), 0);
        else if (clamp) add(0, count, pixel(std::min(std::max(x0, 0), l.width - 1)), 0);
        else add(0, count, zeros, 0);
        return r;
    }
    // Output x is inside the image for -x0 <= x < width - x0.
    int64_t lo = std::min<int64_t>(count, std::max<int64_t>(0, -int64_t(x0)));
    int64_t hi = std::max<int64_t>(lo, std::min<int64_t>(count, int64_t(l.width) - x0));
    add(0, int32_t(lo), clamp ? pixel(0) : zeros, 0);
    if (lo < hi) add(int32_t(lo), int32_t(hi), pixel(int32_t(x0 + lo)), l.pixelStride);
    add(int32_t(hi), count, clamp ? pixel(l.width - 1) : zeros, 0);
    return r;
}

// A row whose every pixel is `p` (stride 0): a placeholder for an input an op does not read.
inline RowRuns constantRow(const float* p, int32_t count) {
    RowRuns r;
    if (count > 0) r.runs[r.size++] = Run{0, count, p, 0};
    return r;
}

// Splits [0, count) at every run boundary of the K inputs and calls
// body(begin, end, ptrs, strides) with each input's pointer at `begin` and its stride.
template <int K, class Body>
void forEachSegment(const RowRuns (&inputs)[K], Body&& body) {
    int32_t index[K] = {};
    int32_t begin = 0;
    for (;;) {
        int32_t end = INT32_MAX;
        bool any = false;
        for (int k = 0; k < K; ++k) {
            if (index[k] >= inputs[k].size) continue;
            any = true;
            end = std::min(end, inputs[k].runs[index[k]].end);
        }
        if (!any || end <= begin) return;
        const float* ptrs[K];
        int64_t strides[K];
        for (int k = 0; k < K; ++k) {
            const Run& run = inputs[k].runs[index[k]];
            ptrs[k] = run.ptr + int64_t(begin - run.begin) * run.stride;
            strides[k] = run.stride;
        }
        body(begin, end, ptrs, strides);
        for (int k = 0; k < K; ++k)
            if (inputs[k].runs[index[k]].end == end) ++index[k];
        begin = end;
    }
}

// The eight partial sums of a fixed-order sum (below), combined pairwise in a fixed order.
inline float sumOfLanes(const float (&lanes)[8]) {
    return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// Sum of v[0..count) in a fixed order (eight interleaved partial sums, combined pairwise):
// vectorizable, deterministic, and more accurate than a single running sum.
inline float fixedOrderSum(const float* v, int64_t count) {
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        for (int j = 0; j < 8; ++j) lanes[j] += v[i + j];
    for (int j = 0; i < count; ++i, ++j) lanes[j] += v[i];
    return sumOfLanes(lanes);
}

// Largest of v[0..count) (count >= 1) over eight lanes in a fixed order, so that it vectorizes
// (a single running max does not). Like a running max seeded with v[0], NaNs after v[0] are
// skipped; callers feed the values to exponentials, which turn any NaN into NaN results anyway.
inline float fixedOrderMax(const float* v, int64_t count) {
    float lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = v[0];
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        for (int j = 0; j < 8; ++j) lanes[j] = v[i + j] > lanes[j] ? v[i + j] : lanes[j];
    for (int j = 0; i < count; ++i, ++j) lanes[j] = v[i] > lanes[j] ? v[i] : lanes[j];
    float m = lanes[0];
    for (int j = 1; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
    return m;
}

// Functions whose loops gain from 256-bit vectors get an AVX2 copy next to the baseline one,
// picked at load time (GCC/Clang function multi-versioning, x86-64 ELF only; elsewhere, e.g.
// arm64 with NEON, the baseline build already vectorizes). Only AVX2, not FMA: the clones
// round exactly like the baseline, so results do not depend on the machine.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__APPLE__)
#define MPSGRAD_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MPSGRAD_VECTOR_CLONES
#endif
// The same for function templates, which only GCC can multi-version (Clang 16: "multiversioned
// functions do not yet support function templates"); Clang builds keep the baseline loops there.
#if (defined(__GNUC__) && !defined(__clang__)) && defined(__x86_64__) && defined(__ELF__) && !defined(__APPLE__)
#define MPSGRAD_TEMPLATE_VECTOR_CLONES MPSGRAD_VECTOR_CLONES
#else
#define MPSGRAD_TEMPLATE_VECTOR_CLONES
#endif

// e^x in float, written without branches or library calls so that loops over it vectorize
// (std::exp is a scalar call: it made softmax compute-bound). Cody-Waite reduction
// x = k ln2 + r with |r| <= ln2/2, Cephes' degree-6 polynomial for e^r (relative error about
// 1e-7, i.e. 1-2 ulp) and 2^k assembled in the exponent bits. Inputs are clamped to
// [-87.33, 88], where 2^k stays a normal float: below, the result is ~1.2e-38 instead of a
// denormal or 0 (softmax only takes e^(x - max) <= 1 and adds it to a sum >= 1); above, about
// 1.7e38 instead of inf. NaN stays NaN.
inline float fastExp(float input) {
    // NaN goes through the arithmetic as 0 and is put back at the end (selects, so loops still
    // vectorize): converting a NaN k to an integer below would be undefined behaviour.
    const bool isNaN = input != input;
    float x = isNaN ? 0.0f : input;
    x = x < -87.33654f ? -87.33654f : x;
    x = x > 88.0f ? 88.0f : x;  // k <= 127
    // k = round(x / ln2): adding and subtracting 1.5 * 2^23 rounds to an integer (|x/ln2| < 2^22).
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693359375f;  // ln2 split in two for an exact reduction
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float er = p * r * r + r + 1.0f;
    const int32_t bits = (int32_t(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return isNaN ? input : er * scale;
}

// ---- Eight floats at a time, written out (softmax.cpp, loss.cpp) ----------------------------------
// GCC and Clang vector extensions: one AVX2 register in the AVX2 clone of a function, two SSE
// registers in the baseline one. The auto-vectorized fastExp above compiles its clamps and NaN
// select into ~50 instructions per 8 floats (GCC turns the chained selects into masks and blends);
// fastExp8 below runs the same float operations in ~36, and fixedOrderMax8 keeps its maxima in a
// register (GCC left fixedOrderMax's lanes scalar). Every lane gets exactly the float operations
// of the scalar function, so results are bit for bit those of fastExp / fixedOrderMax.
// Vectors are passed by reference and the helpers always inlined: a 32-byte vector passed by value
// to, or returned from, a function of the baseline clone would change its ABI.
#if defined(__GNUC__) || defined(__clang__)
#define MPSGRAD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MPSGRAD_ALWAYS_INLINE inline
#endif
#if defined(__GNUC__) || defined(__clang__)
#define MPSGRAD_FLOATS8 1
typedef float Floats8 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));
typedef uint32_t Bits8 __attribute__((vector_size(32)));

MPSGRAD_ALWAYS_INLINE void load8(Floats8& v, const float* p) { std::memcpy(&v, p, sizeof v); }
MPSGRAD_ALWAYS_INLINE void store8(float* p, const Floats8& v) { std::memcpy(p, &v, sizeof v); }

// result = fastExp of each lane of input, bit for bit (NaN lanes included).
MPSGRAD_ALWAYS_INLINE void fastExp8(const Floats8& input, Floats8& result) {
    const Floats8 zero = {};
    const Ints8 isNaN = input != input;
    Floats8 x = isNaN ? zero : input;
    x = x < -87.33654f ? zero - 87.33654f : x;
    x = x > 88.0f ? zero + 88.0f : x;
    // k = round(x / ln2) as in fastExp; `shifted` holds 1.5 * 2^23 + k, an integer-valued float of
    // exponent 23, so its bits are those of 1.5 * 2^23 plus k: k as an integer without a conversion.
    const Floats8 shifted = x * 1.44269504088896341f + 12582912.0f;
    const Floats8 k = shifted - 12582912.0f;
    Floats8 r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    Floats8 p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const Floats8 er = p * r * r + r + 1.0f;
    Bits8 bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23;
    Floats8 scale;
    std::memcpy(&scale, &bits, sizeof scale);
    result = isNaN ? input : er * scale;
}

// fixedOrderMax(v, count), bit for bit, with the eight running maxima in a register.
MPSGRAD_ALWAYS_INLINE float fixedOrderMax8(const float* v, int64_t count) {
    const float first = v[0];  // a broadcast, not 0 + v[0], which turns -0 into +0
    Floats8 maxima = {first, first, first, first, first, first, first, first};
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) {
        Floats8 x;
        load8(x, v + i);
        maxima = x > maxima ? x : maxima;
    }
    float lanes[8];  // read lane by lane: a memcpy made GCC keep `maxima` in memory across the loop
    for (int j = 0; j < 8; ++j) lanes[j] = maxima[j];
    for (int j = 0; i < count; ++i, ++j) lanes[j] = v[i] > lanes[j] ? v[i] : lanes[j];
    float m = lanes[0];
    for (int j = 1; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
    return m;
}

// Σ e^(x_k − m) over k < N in fixedOrderSum's order (channel k adds into lane k mod 8 over the
// blocks of 8, the tail into lanes 0, 1, ...), storing each e^(x_k − m) into e[k] when Store
// (e may be x itself): the exponentials and their sum in one pass, with fastExp's exact values,
// so the result is bit for bit fixedOrderSum of the fastExp values.
template <bool Store>
MPSGRAD_ALWAYS_INLINE float fixedOrderSumOfExp(const float* x, float m, int64_t N, float* e) {
    Floats8 sums = {};
    int64_t k = 0;
    for (; k + 8 <= N; k += 8) {
        Floats8 v, ev;
        load8(v, x + k);
        fastExp8(v - m, ev);
        if (Store) store8(e + k, ev);
        sums += ev;
    }
    float lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = sums[j];
    for (int j = 0; k < N; ++k, ++j) {
        const float ek = fastExp(x[k] - m);
        if (Store) e[k] = ek;
        lanes[j] += ek;
    }
    return sumOfLanes(lanes);
}
#else  // the same results through the scalar helpers
inline float fixedOrderMax8(const float* v, int64_t count) { return fixedOrderMax(v, count); }
template <bool Store>  // Store must be true here: e receives the exponentials
inline float fixedOrderSumOfExp(const float* x, float m, int64_t N, float* e) {
    for (int64_t k = 0; k < N; ++k) e[k] = fastExp(x[k] - m);
    return fixedOrderSum(e, N);
}
#endif

[[noreturn]] inline void invalid(const char* op, const std::string& what) {
    throw std::invalid_argument(std::string(op) + ": " + what);
}

// A layout whose channel slice fits its pixels (what every op assumes of every binding).
inline void checkLayout(const char* op, const char* name, const ImageLayout& l) {
    if (l.width < 0 || l.height < 0 || l.channels < 0 || l.channelOffset < 0 ||
        l.channelOffset + l.channels > l.pixelStride || l.imageStride < 0)
        invalid(op, std::string(name) + " layout is inconsistent (channelOffset + channels must fit "
                                        "pixelStride, sizes must be non-negative)");
}

// The written rectangle lies inside the destination image.
inline void checkClip(const char* op, const ImageLayout& d, int32_t x, int32_t y, int32_t w,
                      int32_t h, int32_t batch) {
    if (w < 0 || h < 0 || batch < 0) invalid(op, "negative clip size or batch");
    if (w == 0 || h == 0 || batch == 0) return;
    if (x < 0 || y < 0 || int64_t(x) + w > d.width || int64_t(y) + h > d.height)
        invalid(op, "clip rectangle (" + std::to_string(x) + ", " + std::to_string(y) + ", " +
                        std::to_string(w) + " x " + std::to_string(h) +
                        ") is not inside the destination (" + std::to_string(d.width) + " x " +
                        std::to_string(d.height) + ")");
}

// Rows of at least ~16K elements per parallel chunk.
inline int64_t rowGrain(int64_t rowElements) {
    return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rowElements));
}

// origin + offset as an int32 row / column index, saturated: the bindings check the window but not
// every pointwise offset, and an index past int32 is past any image (edge-mode handling then reads
// the same as at the saturated value for Zero, Clamp and Constant), never a signed overflow.
inline int32_t saturatedIndex(int32_t origin, int64_t offset) {
    const int64_t at = int64_t(origin) + offset;
    return int32_t(std::min<int64_t>(std::max<int64_t>(at, INT32_MIN), INT32_MAX));
}

}  // namespace mpsgrad::cpu::elementwise
