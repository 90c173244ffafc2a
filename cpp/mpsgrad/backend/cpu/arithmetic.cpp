// CPU backend: arithmetic forward (add, subtract, multiply, divide with scales, bias, clamp and
// broadcasting), comparison, and the arithmetic gradient with reduction over broadcast axes.
//
// Semantics are exactly those written in metal/arithmetic_params.h. The forward ops split the
// rows of the clip rectangle across threads; each row is cut into segments where every operand
// advances by a constant pixel stride (1, or 0 for a broadcast, clamped or zero pixel), and the
// loop over contiguous channels is instantiated per operator and channel stride so it
// vectorizes. The gradient is a gather: every dX element is owned by one task, which sums its
// terms in a fixed order; long reductions are split into blocks whose size depends only on the
// shape and whose partial sums are added in block order, so results are bitwise reproducible
// whatever the thread count. FLOAT16 bindings are read and written natively, a row at a time
// through float32 row buffers (half_streaming.h); the arithmetic stays float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu_ops.h"
#include "elementwise.h"
#include "half_fused.h"
#include "half_streaming.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

template <bool V>
using Bool = std::integral_constant<bool, V>;

template <class F>
void withBool(bool v, F&& f) {
    if (v) f(Bool<true>{});
    else f(Bool<false>{});
}

template <class F>
void withOp(int32_t op, F&& f) {
    switch (op) {
        case kArithmeticAdd: f(std::integral_constant<int32_t, kArithmeticAdd>{}); break;
        case kArithmeticSubtract: f(std::integral_constant<int32_t, kArithmeticSubtract>{}); break;
        case kArithmeticMultiply: f(std::integral_constant<int32_t, kArithmeticMultiply>{}); break;
        default: f(std::integral_constant<int32_t, kArithmeticDivide>{}); break;
    }
}

template <class F>
void withStateMode(int32_t mode, F&& f) {
    switch (mode) {
        case kArithmeticClampMask: f(std::integral_constant<int32_t, kArithmeticClampMask>{}); break;
        case kArithmeticClampUnclamped: f(std::integral_constant<int32_t, kArithmeticClampUnclamped>{}); break;
        default: f(std::integral_constant<int32_t, kArithmeticClampNone>{}); break;
    }
}

template <int32_t Op>
inline float apply(float x, float y) {
    if constexpr (Op == kArithmeticAdd) return x + y;
    else if constexpr (Op == kArithmeticSubtract) return x - y;
    else if constexpr (Op == kArithmeticMultiply) return x * y;
    else return x / y;
}

// NaN-propagating clamp (a NaN u stays NaN).
inline float clampValue(float u, float lo, float hi) {
    u = u < lo ? lo : u;
    return u > hi ? hi : u;
}

inline float maskValue(float u, float lo, float hi) { return (lo <= u && u <= hi) ? 1.0f : 0.0f; }

// destination[i] = source[i] for i < count, rounded to half for a FLOAT16 destination.
inline void storeFloats(const float* source, float* destination, int64_t count) {
    std::copy(source, source + count, destination);
}
inline void storeFloats(const float* source, uint16_t* destination, int64_t count) {
    floatsToHalves(source, destination, count);
}

void checkOperand(const char* op, const char* name, const ArithmeticOperand& o, int32_t channels) {
    checkLayout(op, name, o.image);
    auto bit = [](int32_t v) { return v == 0 || v == 1; };
    if (!bit(o.strideX) || !bit(o.strideY) || !bit(o.strideChannels) || !bit(o.strideImages))
        invalid(op, std::string(name) + " strides must be 0 or 1");
    const int32_t needed = o.strideChannels ? channels : std::min(channels, 1);
    if (o.image.channels < needed)
        invalid(op, std::string(name) + " has " + std::to_string(o.image.channels) +
                        " channels, the op reads " + std::to_string(needed));
}

// The row of an operand for output row y of image n (see ArithmeticOperand), through a row reader
// (float32 in place, or a FLOAT16 row staged as float32).
template <class Reader>
inline RowRuns operandRow(const ArithmeticOperand& o, Reader& reader, int64_t n, int32_t y, int32_t count,
                          const float* zeros) {
    return reader.runs(o.strideImages ? n : 0, o.offsetX, o.offsetY + (o.strideY ? y : 0), o.strideX, count,
                       o.edgeMode, zeros);
}

// Shared row/segment walk of the forward ops, for a primary stored as PT, a secondary as ST and a
// destination as DT (float, or uint16_t: IEEE half). body(n, y, begin, end, ptrs[2], strides[2],
// dRow) where dRow is the (float32) destination row at the clip's first column.
template <class PT, class ST, class DT, class Body>
void forwardRows(const ArithmeticOperand& primary, const void* pBase, const ArithmeticOperand& secondary,
                 const void* sBase, const ImageLayout& destination, void* dBase, int32_t batch, int32_t clipX,
                 int32_t clipY, int32_t width, int32_t height, int32_t channels, Body&& body) {
    const int64_t rows = int64_t(batch) * height;
    parallelFor(rows, rowGrain(int64_t(width) * channels), [&](int64_t r0, int64_t r1) {
        std::vector<float> zeros(size_t(std::max(channels, 1)), 0.0f);
        RowReader<PT> pr(pBase, primary.image);
        RowReader<ST> sr(sBase, secondary.image);
        RowWriter<DT> d(dBase, destination);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / height;
            const int32_t y = int32_t(r % height);
            RowRuns in[2] = {operandRow(primary, pr, n, y, width, zeros.data()),
                             operandRow(secondary, sr, n, y, width, zeros.data())};
            float* dRow = d.row(n, clipX, clipY + y, width);
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                body(n, y, b, e, ptrs, strides, dRow);
            });
            d.commit();
        }
    });
}

// Instantiates forwardRows for the storage formats of the three bindings.
template <class Body>
void forwardRowsFor(const HalfBindings& f, const ArithmeticOperand& primary, const void* pBase,
                    const ArithmeticOperand& secondary, const void* sBase, const ImageLayout& destination,
                    void* dBase, int32_t batch, int32_t clipX, int32_t clipY, int32_t width, int32_t height,
                    int32_t channels, Body&& body) {
    withFormats(
        [&](auto pf, auto sf, auto df) {
            forwardRows<typename decltype(pf)::type, typename decltype(sf)::type, typename decltype(df)::type>(
                primary, pBase, secondary, sBase, destination, dBase, batch, clipX, clipY, width, height, channels,
                body);
        },
        f.source, f.secondary, f.destination);
}

// One segment of the arithmetic forward: count pixels, C channels.
template <int32_t Op, bool PC, bool SC, int32_t Mode>
MPSGRAD_TEMPLATE_VECTOR_CLONES void arithmeticSegment(int64_t count, int64_t C, const float* x, int64_t xs,
                                                      const float* y, int64_t ys, float* d, int64_t ds, float* st,
                                                      int64_t sts, float pS, float sS, float bias, float lo,
                                                      float hi) {
    for (int64_t i = 0; i < count; ++i) {
        const float* xp = x + i * xs;
        const float* yp = y + i * ys;
        float* dp = d + i * ds;
        float* sp = Mode != kArithmeticClampNone ? st + i * sts : nullptr;
        for (int64_t k = 0; k < C; ++k) {
            const float u = apply<Op>(pS * xp[PC ? k : 0], sS * yp[SC ? k : 0]) + bias;
            dp[k] = clampValue(u, lo, hi);
            if constexpr (Mode == kArithmeticClampMask) sp[k] = maskValue(u, lo, hi);
            else if constexpr (Mode == kArithmeticClampUnclamped) sp[k] = u;
        }
    }
}

template <int32_t Cmp>
inline bool compare(float x, float y, float threshold) {
    if constexpr (Cmp == kCompareEqual) return std::abs(x - y) <= threshold;
    else if constexpr (Cmp == kCompareNotEqual) return !(std::abs(x - y) <= threshold);
    else if constexpr (Cmp == kCompareLess) return x < y;
    else if constexpr (Cmp == kCompareLessOrEqual) return x <= y;
    else if constexpr (Cmp == kCompareGreater) return x > y;
    else return x >= y;
}

template <int32_t Cmp, bool PC, bool SC>
void compareSegment(int64_t count, int64_t C, const float* x, int64_t xs, const float* y, int64_t ys,
                    float* d, int64_t ds, const CompareParams& p) {
    const float pS = p.primaryScale, sS = p.secondaryScale, bias = p.bias;
    const float lo = p.minimumValue, hi = p.maximumValue, t = p.threshold;
    for (int64_t i = 0; i < count; ++i) {
        const float* xp = x + i * xs;
        const float* yp = y + i * ys;
        float* dp = d + i * ds;
        for (int64_t k = 0; k < C; ++k) {
            const float r = compare<Cmp>(pS * xp[PC ? k : 0], sS * yp[SC ? k : 0], t) ? 1.0f : 0.0f;
            dp[k] = clampValue(r + bias, lo, hi);
        }
    }
}

template <class F>
void withCompare(int32_t c, F&& f) {
    switch (c) {
        case kCompareEqual: f(std::integral_constant<int32_t, kCompareEqual>{}); break;
        case kCompareNotEqual: f(std::integral_constant<int32_t, kCompareNotEqual>{}); break;
        case kCompareLess: f(std::integral_constant<int32_t, kCompareLess>{}); break;
        case kCompareLessOrEqual: f(std::integral_constant<int32_t, kCompareLessOrEqual>{}); break;
        case kCompareGreater: f(std::integral_constant<int32_t, kCompareGreater>{}); break;
        default: f(std::integral_constant<int32_t, kCompareGreaterOrEqual>{}); break;
    }
}

using ForwardSegmentFn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                                  float*, int64_t, float, float, float, float, float);

// The forward segment loop instantiated for one operator, pair of channel strides and state mode.
ForwardSegmentFn selectForwardSegment(int32_t op, bool pc, bool sc, int32_t mode) {
    ForwardSegmentFn fn = nullptr;
    withOp(op, [&](auto o) {
        withBool(pc, [&](auto pcv) {
            withBool(sc, [&](auto scv) {
                withStateMode(mode, [&](auto md) {
                    fn = &arithmeticSegment<decltype(o)::value, decltype(pcv)::value, decltype(scv)::value,
                                            decltype(md)::value>;
                });
            });
        });
    });
    return fn;
}

using CompareSegmentFn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                                  const CompareParams&);

CompareSegmentFn selectCompareSegment(int32_t comparison, bool pc, bool sc) {
    CompareSegmentFn fn = nullptr;
    withCompare(comparison, [&](auto cmp) {
        withBool(pc, [&](auto pcv) {
            withBool(sc, [&](auto scv) {
                fn = &compareSegment<decltype(cmp)::value, decltype(pcv)::value, decltype(scv)::value>;
            });
        });
    });
    return fn;
}

// ---- gradient ---------------------------------------------------------------------------

// One term of the gradient: dX's share of G element g, given the forward operands' values x, y
// and the clamp state m at that element.
template <int32_t Op, bool ForSecondary, int32_t Mode>
inline float gradientTerm(float g, float x, float y, float m, float pS, float sS, float pSsS, float lo, float hi) {
    if constexpr (Mode == kArithmeticClampMask) g = g * m;
    else if constexpr (Mode == kArithmeticClampUnclamped) g = g * maskValue(m, lo, hi);
    if constexpr (Op == kArithmeticAdd) return g * (ForSecondary ? sS : pS);
    else if constexpr (Op == kArithmeticSubtract) return g * (ForSecondary ? -sS : pS);
    else if constexpr (Op == kArithmeticMultiply) return g * (pSsS * (ForSecondary ? x : y));
    else if constexpr (!ForSecondary) return g * (pS / (sS * y));
    else return g * (-(pS * x) / (sS * y * y));
}

// The operand rows of a gradient segment's current pixel, moved on by next(). ptrs and strides
// (pixel strides) are indexed 0 = G, 1 = forward x, 2 = forward y, 3 = clamp state.
struct GradientRows {
    const float *g, *x, *y, *m;
    const int64_t* strides;

    GradientRows(const float* const* ptrs, const int64_t* pixelStrides)
        : g(ptrs[0]), x(ptrs[1]), y(ptrs[2]), m(ptrs[3]), strides(pixelStrides) {}
    void next() {
        g += strides[0];
        x += strides[1];
        y += strides[2];
        m += strides[3];
    }
};

// Terms of one forward segment, accumulated into acc: pixel i of the segment, channel k,
// goes to acc[(SX ? x0 + i : 0) * DC + (SCH ? k : 0)] where x0 is the segment's first pixel.
// Operand channel strides: XC (forward x), YC (forward y).
template <int32_t Op, bool ForSecondary, bool XC, bool YC, int32_t Mode, bool SX, bool SCH>
void gradientSegment(int64_t count, int64_t C, int64_t x0, const float* const* ptrs, const int64_t* strides,
                     float* acc, int64_t DC, float pS, float sS, float lo, float hi) {
    const float pSsS = pS * sS;
    GradientRows r(ptrs, strides);
    for (int64_t i = 0; i < count; ++i, r.next()) {
        float* a = acc + (SX ? (x0 + i) * DC : 0);
        float sum = 0.0f;
        for (int64_t k = 0; k < C; ++k) {
            const float t = gradientTerm<Op, ForSecondary, Mode>(r.g[k], r.x[XC ? k : 0], r.y[YC ? k : 0], r.m[k], pS,
                                                                  sS, pSsS, lo, hi);
            if constexpr (SCH) a[k] += t;
            else sum += t;
        }
        if constexpr (!SCH) a[0] += sum;
    }
}

using GradientSegmentFn = void (*)(int64_t, int64_t, int64_t, const float* const*, const int64_t*, float*,
                                   int64_t, float, float, float, float);

// The gradient without broadcasting (the input had the gradient's shape): each term is one dX
// element, written straight into dX (pixel i at d + i * ds) instead of summed through a
// zeroed row buffer and copied out.
template <int32_t Op, bool ForSecondary, int32_t Mode>
MPSGRAD_TEMPLATE_VECTOR_CLONES void directGradientSegment(int64_t count, int64_t C, const float* const* ptrs,
                                                          const int64_t* strides, float* d, int64_t ds, float pS,
                                                          float sS, float lo, float hi) {
    const float pSsS = pS * sS;
    GradientRows r(ptrs, strides);
    for (int64_t i = 0; i < count; ++i, r.next()) {
        float* out = d + i * ds;
        for (int64_t k = 0; k < C; ++k)  // 0 + t as summed from zero by gradientSegment: a -0 term stores +0
            out[k] = 0.0f + gradientTerm<Op, ForSecondary, Mode>(r.g[k], r.x[k], r.y[k], r.m[k], pS, sS, pSsS, lo, hi);
    }
}

using DirectGradientSegmentFn = void (*)(int64_t, int64_t, const float* const*, const int64_t*, float*, int64_t,
                                         float, float, float, float);

// [op][forSecondary][clamp mode] (a table of addresses: the AVX2 clones are resolved by the
// loader, and taking their addresses inside nested lambdas made GCC 12 warn falsely).
template <int32_t Op, bool ForSecondary>
constexpr DirectGradientSegmentFn kDirectModes[3] = {
    &directGradientSegment<Op, ForSecondary, kArithmeticClampNone>,
    &directGradientSegment<Op, ForSecondary, kArithmeticClampMask>,
    &directGradientSegment<Op, ForSecondary, kArithmeticClampUnclamped>};
template <int32_t Op>
constexpr const DirectGradientSegmentFn* kDirectInputs[2] = {kDirectModes<Op, false>, kDirectModes<Op, true>};
constexpr const DirectGradientSegmentFn* const* kDirectOps[4] = {
    kDirectInputs<kArithmeticAdd>, kDirectInputs<kArithmeticSubtract>, kDirectInputs<kArithmeticMultiply>,
    kDirectInputs<kArithmeticDivide>};

DirectGradientSegmentFn selectDirectGradientSegment(int32_t op, bool forSecondary, int32_t mode) {
    return kDirectOps[op - kArithmeticAdd][forSecondary ? 1 : 0][mode];
}

GradientSegmentFn selectGradientSegment(int32_t op, bool forSecondary, bool xc, bool yc, int32_t mode,
                                        bool sx, bool sch) {
    GradientSegmentFn fn = nullptr;
    withOp(op, [&](auto o) {
        withBool(forSecondary, [&](auto fs) {
            withBool(xc, [&](auto xcv) {
                withBool(yc, [&](auto ycv) {
                    withStateMode(mode, [&](auto md) {
                        withBool(sx, [&](auto sxv) {
                            withBool(sch, [&](auto schv) {
                                fn = &gradientSegment<decltype(o)::value, decltype(fs)::value,
                                                      decltype(xcv)::value, decltype(ycv)::value,
                                                      decltype(md)::value, decltype(sxv)::value,
                                                      decltype(schv)::value>;
                            });
                        });
                    });
                });
            });
        });
    });
    return fn;
}

// An operand read at the clip's own pixels, every channel, from a same-sized whole dense image.
bool flatOperand(const ArithmeticOperand& o, int32_t width, int32_t height, int32_t batch) {
    return o.offsetX == 0 && o.offsetY == 0 && o.strideX == 1 && o.strideY == 1 && o.strideChannels == 1 &&
           o.strideImages == 1 && denseWhole(o.image, width, height, batch);
}

// The forward over whole dense FLOAT16 images with no clamp state (half_fused.h). False when it
// does not apply (then the staged path runs).
bool forwardFusedHalf(const ArithmeticParams& p, const HalfBindings& f, const void* primary, const void* secondary,
                      void* destination) {
    const int32_t W = p.clipWidth, H = p.clipHeight, B = p.batch;
    if (!(f.source && f.secondary && f.destination) || p.stateMode != kArithmeticClampNone || p.clipX != 0 ||
        p.clipY != 0 || !denseWhole(p.destination, W, H, B) || !flatOperand(p.primary, W, H, B) ||
        !flatOperand(p.secondary, W, H, B))
        return false;
    const uint16_t* in[2] = {static_cast<const uint16_t*>(primary), static_cast<const uint16_t*>(secondary)};
    const int64_t count = int64_t(B) * H * W * p.destination.channels;
    const float pS = p.primaryScale, sS = p.secondaryScale, bias = p.bias, lo = p.minimumValue, hi = p.maximumValue;
    bool done = false;
    withOp(p.op, [&](auto o) {
        constexpr int32_t Op = decltype(o)::value;
        done = parallelFusedHalfMap<2>(in, static_cast<uint16_t*>(destination), count,
                                       [=](const float (*v)[8], float* out) {
            for (int j = 0; j < 8; ++j) out[j] = clampValue(apply<Op>(pS * v[0][j], sS * v[1][j]) + bias, lo, hi);
        });
    });
    return done;
}

}  // namespace

void arithmeticForward(const ArithmeticParams& p, const HalfBindings& formats, const void* primary,
                       const void* secondary, void* destination, float* clampState) {
    static const char* op = "arithmeticForward";
    const int32_t C = p.destination.channels;
    checkOperand(op, "primary", p.primary, C);
    checkOperand(op, "secondary", p.secondary, C);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.op < kArithmeticAdd || p.op > kArithmeticDivide) invalid(op, "unknown op " + std::to_string(p.op));
    if (p.stateMode < kArithmeticClampNone || p.stateMode > kArithmeticClampUnclamped)
        invalid(op, "unknown stateMode " + std::to_string(p.stateMode));
    if (p.stateMode != kArithmeticClampNone) {
        checkLayout(op, "clampState", p.clampState);
        if (clampState == nullptr) invalid(op, "clampState is null but stateMode != 0");
        if (p.clampState.width < p.clipWidth || p.clampState.height < p.clipHeight ||
            p.clampState.channels != C)
            invalid(op, "clampState must cover the clip rectangle with destination.channels channels");
    }
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;

    if (forwardFusedHalf(p, formats, primary, secondary, destination)) return;
    const ForwardSegmentFn fn = selectForwardSegment(p.op, p.primary.strideChannels != 0,
                                                     p.secondary.strideChannels != 0, p.stateMode);
    const bool pc = p.primary.strideChannels != 0, sc = p.secondary.strideChannels != 0;
    const bool withState = p.stateMode != kArithmeticClampNone;
    forwardRowsFor(formats, p.primary, primary, p.secondary, secondary, p.destination, destination, p.batch, p.clipX,
                   p.clipY, p.clipWidth, p.clipHeight, C,
                   [&](int64_t n, int32_t y, int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides,
                       float* dRow) {
        const int64_t ds = p.destination.pixelStride;
        float* d = dRow + int64_t(b) * ds;
        float* st = withState ? clampState + pixelIndex(p.clampState, n, b, y) : nullptr;
        int64_t count = e - b, channels = C;
        const int64_t xs = strides[0], ys = strides[1];
        const int64_t sts = withState ? p.clampState.pixelStride : 0;
        // Dense bindings: one flat span of count * C elements.
        if (pc && sc && xs == C && ys == C && ds == C && (!withState || sts == C)) {
            channels *= count;
            count = 1;
        }
        fn(count, channels, ptrs[0], xs, ptrs[1], ys, d, ds, st, sts, p.primaryScale, p.secondaryScale, p.bias,
           p.minimumValue, p.maximumValue);
    });
}

void arithmeticForward(const ArithmeticParams& p, const float* primary, const float* secondary,
                       float* destination, float* clampState) {
    arithmeticForward(p, HalfBindings{}, primary, secondary, destination, clampState);
}

void compareForward(const CompareParams& p, const HalfBindings& formats, const void* primary, const void* secondary,
                    void* destination) {
    static const char* op = "compareForward";
    const int32_t C = p.destination.channels;
    checkOperand(op, "primary", p.primary, C);
    checkOperand(op, "secondary", p.secondary, C);
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    if (p.comparison < kCompareEqual || p.comparison > kCompareGreaterOrEqual)
        invalid(op, "unknown comparison " + std::to_string(p.comparison));
    if (C == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;

    const CompareSegmentFn fn =
        selectCompareSegment(p.comparison, p.primary.strideChannels != 0, p.secondary.strideChannels != 0);
    const bool pc = p.primary.strideChannels != 0, sc = p.secondary.strideChannels != 0;
    forwardRowsFor(formats, p.primary, primary, p.secondary, secondary, p.destination, destination, p.batch, p.clipX,
                   p.clipY, p.clipWidth, p.clipHeight, C,
                   [&](int64_t, int32_t, int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides,
                       float* dRow) {
        const int64_t ds = p.destination.pixelStride;
        float* d = dRow + int64_t(b) * ds;
        int64_t count = e - b, channels = C;
        const int64_t xs = strides[0], ys = strides[1];
        if (pc && sc && xs == C && ys == C && ds == C) {
            channels *= count;
            count = 1;
        }
        fn(count, channels, ptrs[0], xs, ptrs[1], ys, d, ds, p);
    });
}

void compareForward(const CompareParams& p, const float* primary, const float* secondary, float* destination) {
    compareForward(p, HalfBindings{}, primary, secondary, destination);
}

namespace {

// The gradient without broadcasting over whole dense FLOAT16 images, no clamp state
// (half_fused.h): dX = 0 + term, as directGradientSegment computes it. False when it does not apply.
bool gradientFusedHalf(const ArithmeticGradientParams& p, const HalfBindings& f, bool needX, bool needY,
                       const void* gradient, const void* primary, const void* secondary, void* destination) {
    const int32_t W = p.width, H = p.height, B = p.batch;
    const ArithmeticOperand& s = p.forSecondary ? p.secondary : p.primary;
    if (!(f.gradient && f.destination) || (needX && !f.source) || (needY && !f.secondary) ||
        p.clampMode != kArithmeticClampNone || p.gradientX != 0 || p.gradientY != 0 || p.destinationX != 0 ||
        p.destinationY != 0 || s.strideX != 1 || s.strideY != 1 || s.strideChannels != 1 || s.strideImages != 1 ||
        !denseWhole(p.gradient, W, H, B) || !denseWhole(p.destination, W, H, B) ||
        (needX && !flatOperand(p.primary, W, H, B)) || (needY && !flatOperand(p.secondary, W, H, B)))
        return false;
    const uint16_t* g = static_cast<const uint16_t*>(gradient);
    const uint16_t* in[3] = {g, needX ? static_cast<const uint16_t*>(primary) : g,
                             needY ? static_cast<const uint16_t*>(secondary) : g};
    const int64_t count = int64_t(B) * H * W * p.gradient.channels;
    const float pS = p.primaryScale, sS = p.secondaryScale, pSsS = pS * sS;
    bool done = false;
    withOp(p.op, [&](auto o) {
        withBool(p.forSecondary != 0, [&](auto fs) {
            constexpr int32_t Op = decltype(o)::value;
            constexpr bool ForSecondary = decltype(fs)::value;
            done = parallelFusedHalfMap<3>(in, static_cast<uint16_t*>(destination), count,
                                           [=](const float (*v)[8], float* out) {
                for (int j = 0; j < 8; ++j)
                    out[j] = 0.0f + gradientTerm<Op, ForSecondary, kArithmeticClampNone>(
                                        v[0][j], v[1][j], v[2][j], 0.0f, pS, sS, pSsS, 0.0f, 0.0f);
            });
        });
    });
    return done;
}

// The gather of arithmeticGradient for G stored as GT, the forward operands as PT / ST and dX as DT
// (float, or uint16_t: IEEE half through half_streaming.h's row readers; each output pixel is
// rounded once, from its float32 sum).
template <class GT, class PT, class ST, class DT>
void gradientRows(const ArithmeticGradientParams& p, GradientSegmentFn fn, bool needX, bool needY,
                  const void* gradient, const void* primary, const void* secondary, const float* clampState,
                  void* destination) {
    const int32_t C = p.gradient.channels;
    const int32_t B = p.batch, H = p.height, W = p.width;
    const ArithmeticOperand& s = p.forSecondary ? p.secondary : p.primary;
    const int64_t DB = s.strideImages ? B : 1, DH = s.strideY ? H : 1, DW = s.strideX ? W : 1;
    const int64_t DC = s.strideChannels ? C : 1;
    // One reader per input and thread (a FLOAT16 reader owns its row buffer).
    struct Readers {
        RowReader<GT> g;
        RowReader<PT> x;
        RowReader<ST> y;
    };
    auto readers = [&] {
        return Readers{RowReader<GT>(gradient, p.gradient), RowReader<PT>(primary, p.primary.image),
                       RowReader<ST>(secondary, p.secondary.image)};
    };
    // Output rows (dn, dy), each fed by S forward rows (n, py) enumerated in a fixed order.
    const int64_t outRows = DB * DH;
    const int64_t nCount = s.strideImages ? 1 : B, yCount = s.strideY ? 1 : H;
    const int64_t S = nCount * yCount;
    const int64_t rowLen = DW * DC;
    const int64_t perBlock = rowGrain(int64_t(W) * C);
    const int64_t blocks = (S + perBlock - 1) / perBlock;

    // Sums forward rows [k0, k1) of output row `o` into acc (rowLen floats, not cleared).
    auto accumulate = [&](int64_t o, int64_t k0, int64_t k1, float* acc, const float* zeros, Readers& r) {
        const int64_t dn = o / DH, dy = o % DH;
        for (int64_t k = k0; k < k1; ++k) {
            const int64_t n = s.strideImages ? dn : k / yCount;
            const int32_t py = int32_t(s.strideY ? dy : k % yCount);
            RowRuns in[4] = {
                r.g.runs(n, p.gradientX, p.gradientY + py, 1, W, kEdgeZero, zeros),
                needX ? operandRow(p.primary, r.x, n, py, W, zeros) : constantRow(zeros, W),
                needY ? operandRow(p.secondary, r.y, n, py, W, zeros) : constantRow(zeros, W),
                p.clampMode != kArithmeticClampNone
                    ? rowRuns(p.clampState, clampState, n, 0, py, 1, W, kEdgeZero, zeros)
                    : constantRow(zeros, W)};
            forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                fn(e - b, C, b, ptrs, strides, acc, DC, p.primaryScale, p.secondaryScale, p.minimumValue,
                   p.maximumValue);
            });
        }
    };
    // Writes one finished output row, dropping pixels outside dX.
    auto write = [&](int64_t o, const float* acc) {
        const int64_t dn = o / DH, dy = o % DH;
        const int64_t yy = p.destinationY + dy;
        if (yy < 0 || yy >= p.destination.height) return;
        for (int64_t j = 0; j < DW; ++j) {
            const int64_t xx = p.destinationX + j;
            if (xx < 0 || xx >= p.destination.width) continue;
            storeFloats(acc + j * DC, static_cast<DT*>(destination) + pixelIndex(p.destination, dn, xx, yy), DC);
        }
    };

    // No broadcast (every forward row feeds its own dX row, and the operands the terms read have
    // every channel) into a float32 dX that holds whole rows: the terms go straight to dX.
    const bool direct = std::is_same<DT, float>::value && S == 1 && DW == W && DC == C &&
                        (!needX || p.primary.strideChannels != 0) && (!needY || p.secondary.strideChannels != 0) &&
                        p.destinationX >= 0 && int64_t(p.destinationX) + W <= p.destination.width;
    if (direct) {
        const DirectGradientSegmentFn dfn = selectDirectGradientSegment(p.op, p.forSecondary != 0, p.clampMode);
        parallelFor(outRows, rowGrain(int64_t(W) * C), [&](int64_t o0, int64_t o1) {
            std::vector<float> zeros(size_t(C), 0.0f);
            Readers r = readers();
            for (int64_t o = o0; o < o1; ++o) {
                const int64_t n = o / H;
                const int32_t py = int32_t(o % H);
                const int64_t yy = p.destinationY + py;
                if (yy < 0 || yy >= p.destination.height) continue;
                RowRuns in[4] = {
                    r.g.runs(n, p.gradientX, p.gradientY + py, 1, W, kEdgeZero, zeros.data()),
                    needX ? operandRow(p.primary, r.x, n, py, W, zeros.data()) : constantRow(zeros.data(), W),
                    needY ? operandRow(p.secondary, r.y, n, py, W, zeros.data()) : constantRow(zeros.data(), W),
                    p.clampMode != kArithmeticClampNone
                        ? rowRuns(p.clampState, clampState, n, 0, py, 1, W, kEdgeZero, zeros.data())
                        : constantRow(zeros.data(), W)};
                float* dRow = reinterpret_cast<float*>(destination) + pixelIndex(p.destination, n, p.destinationX, yy);
                const int64_t ds = p.destination.pixelStride;
                forEachSegment(in, [&](int32_t b, int32_t e, const float* const* ptrs, const int64_t* strides) {
                    dfn(e - b, C, ptrs, strides, dRow + int64_t(b) * ds, ds, p.primaryScale, p.secondaryScale,
                        p.minimumValue, p.maximumValue);
                });
            }
        });
        return;
    }
    if (blocks <= 1) {
        parallelFor(outRows, rowGrain(int64_t(W) * C * S), [&](int64_t o0, int64_t o1) {
            std::vector<float> zeros(size_t(C), 0.0f), acc(static_cast<size_t>(rowLen));
            Readers r = readers();
            for (int64_t o = o0; o < o1; ++o) {
                std::fill(acc.begin(), acc.end(), 0.0f);
                accumulate(o, 0, S, acc.data(), zeros.data(), r);
                write(o, acc.data());
            }
        });
        return;
    }
    std::vector<float> partial(size_t(outRows * blocks * rowLen), 0.0f);
    parallelFor(outRows * blocks, 1, [&](int64_t t0, int64_t t1) {
        std::vector<float> zeros(size_t(C), 0.0f);
        Readers r = readers();
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t o = t / blocks, blk = t % blocks;
            accumulate(o, blk * perBlock, std::min(S, (blk + 1) * perBlock), partial.data() + t * rowLen,
                       zeros.data(), r);
        }
    });
    parallelFor(outRows, rowGrain(rowLen * blocks), [&](int64_t o0, int64_t o1) {
        std::vector<float> acc(static_cast<size_t>(rowLen));
        for (int64_t o = o0; o < o1; ++o) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t blk = 0; blk < blocks; ++blk) {
                const float* part = partial.data() + (o * blocks + blk) * rowLen;
                for (int64_t j = 0; j < rowLen; ++j) acc[size_t(j)] += part[j];
            }
            write(o, acc.data());
        }
    });
}

}  // namespace

void arithmeticGradient(const ArithmeticGradientParams& p, const HalfBindings& formats, const void* gradient,
                        const void* primary, const void* secondary, const float* clampState, void* destination) {
    static const char* op = "arithmeticGradient";
    const int32_t C = p.gradient.channels;
    const int32_t B = p.batch, H = p.height, W = p.width;
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "destination", p.destination);
    if (B < 0 || H < 0 || W < 0) invalid(op, "negative batch or size");
    if (p.op < kArithmeticAdd || p.op > kArithmeticDivide) invalid(op, "unknown op " + std::to_string(p.op));
    if (p.clampMode < kArithmeticClampNone || p.clampMode > kArithmeticClampUnclamped)
        invalid(op, "unknown clampMode " + std::to_string(p.clampMode));
    const bool forSecondary = p.forSecondary != 0;
    const bool needX = (p.op == kArithmeticMultiply || p.op == kArithmeticDivide) && forSecondary;
    const bool needY = (p.op == kArithmeticMultiply && !forSecondary) || p.op == kArithmeticDivide;
    if (needX) {
        checkOperand(op, "primary", p.primary, C);
        if (primary == nullptr) invalid(op, "this gradient reads the forward primary, which is null");
    }
    if (needY) {
        checkOperand(op, "secondary", p.secondary, C);
        if (secondary == nullptr) invalid(op, "this gradient reads the forward secondary, which is null");
    }
    const ArithmeticOperand& s = forSecondary ? p.secondary : p.primary;
    {
        auto bit = [](int32_t v) { return v == 0 || v == 1; };
        if (!bit(s.strideX) || !bit(s.strideY) || !bit(s.strideChannels) || !bit(s.strideImages))
            invalid(op, "strides of the input must be 0 or 1");
    }
    if (p.clampMode != kArithmeticClampNone) {
        checkLayout(op, "clampState", p.clampState);
        if (clampState == nullptr) invalid(op, "clampState is null but clampMode != 0");
        if (p.clampState.width < W || p.clampState.height < H || p.clampState.channels != C)
            invalid(op, "clampState must cover width x height pixels with gradient.channels channels");
    }
    const int64_t DC = s.strideChannels ? C : 1;
    if (p.destination.channels != DC)
        invalid(op, "destination has " + std::to_string(p.destination.channels) + " channels, expected " +
                        std::to_string(DC));
    if (B == 0 || H == 0 || W == 0 || C == 0) return;

    if (gradientFusedHalf(p, formats, needX, needY, gradient, primary, secondary, destination)) return;
    const GradientSegmentFn fn =
        selectGradientSegment(p.op, forSecondary, p.primary.strideChannels != 0, p.secondary.strideChannels != 0,
                              p.clampMode, s.strideX != 0, s.strideChannels != 0);
    withFormats(
        [&](auto gf, auto pf, auto sf, auto df) {
            gradientRows<typename decltype(gf)::type, typename decltype(pf)::type, typename decltype(sf)::type,
                         typename decltype(df)::type>(p, fn, needX, needY, gradient, primary, secondary, clampState,
                                                      destination);
        },
        formats.gradient, formats.source, formats.secondary, formats.destination);
}

void arithmeticGradient(const ArithmeticGradientParams& p, const float* gradient, const float* primary,
                        const float* secondary, const float* clampState, float* destination) {
    arithmeticGradient(p, HalfBindings{}, gradient, primary, secondary, clampState, destination);
}

}  // namespace mpsgrad::cpu
