// CPU arithmetic ops (arithmeticForward, compareForward, arithmeticGradient) against the
// double-precision references of reference_elementwise.h, and the gradients against float64
// central finite differences of the forward formula: every operator, every broadcast pattern of
// both operands (full, scalar, row, column, single channel, shared across the batch), scales,
// bias, clamps with their state, and the reductions over broadcast axes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpsgrad/backend/cpu/cpu_ops.h"
#include "reference_elementwise.h"

namespace mpsgrad {
namespace {

using testref::Expected;
using testref::TestImage;

constexpr float kFltMax = std::numeric_limits<float>::max();

// A broadcast pattern: the four strides of an operand.
struct Pattern {
    int sx, sy, sc, sn;
    std::string name() const {
        if (!sx && !sy && !sc) return std::string("scalar") + (sn ? "" : "/sharedImage");
        std::string s = sx && sy ? "full" : (sx ? "row" : (sy ? "column" : "pixel"));
        if (!sc) s += "/singleChannel";
        if (!sn) s += "/sharedImage";
        return s;
    }
};

std::vector<Pattern> allPatterns() {
    std::vector<Pattern> v;
    for (int sn = 1; sn >= 0; --sn)
        for (int sc = 1; sc >= 0; --sc)
            for (int sy = 1; sy >= 0; --sy)
                for (int sx = 1; sx >= 0; --sx) v.push_back({sx, sy, sc, sn});
    return v;
}

const char* opName(int op) {
    static const char* names[] = {"add", "subtract", "multiply", "divide"};
    return names[op];
}

// Forward problem size.
struct Shape {
    int batch = 2, width = 5, height = 4, channels = 5;
};

// An operand image for a pattern: broadcast axes have size 1 (plus a margin so that offsets
// are non-trivial), channel slices sit at a non-zero channel offset.
struct Operand {
    TestImage image;
    ArithmeticOperand op{};
};

template <class Rng>
Operand makeOperand(const Shape& s, const Pattern& pat, Rng& rng, bool awayFromZero, int variant) {
    const int channels = pat.sc ? s.channels : 1 + variant % 2;  // a single-channel read may sit in a wider slice
    const int offsetC = variant % 2 ? 4 : 0;
    const int pixelStride = offsetC + ((channels + 3) / 4) * 4 + (variant % 3 == 2 ? 4 : 0);
    const int w = pat.sx ? s.width + 2 : 3, h = pat.sy ? s.height + 1 : 2;
    Operand o;
    o.image = TestImage::make(pat.sn ? s.batch : 1, w, h, pixelStride, offsetC, channels, variant % 2);
    o.image.fillInput(rng, -2, 2);
    if (awayFromZero)  // divisors in +-[0.5, 2]
        o.image.forEach([&](size_t i) {
            float v = o.image.data[i];
            o.image.data[i] = (v < 0 ? -0.5f : 0.5f) + v * 0.75f;
        });
    o.op.image = o.image.layout;
    o.op.offsetX = pat.sx ? 1 + variant % 2 : 2;
    o.op.offsetY = 1;
    o.op.strideX = pat.sx;
    o.op.strideY = pat.sy;
    o.op.strideChannels = pat.sc;
    o.op.strideImages = pat.sn;
    o.op.edgeMode = kEdgeZero;
    return o;
}

struct Scales {
    float pS = 1, sS = 1, bias = 0, lo = -kFltMax, hi = kFltMax;
};

ArithmeticParams forwardParams(const Shape& s, int op, const Operand& x, const Operand& y, const TestImage& dst,
                               const Scales& k) {
    ArithmeticParams p{};
    p.primary = x.op;
    p.secondary = y.op;
    p.destination = dst.layout;
    p.batch = s.batch;
    p.op = op;
    p.primaryScale = k.pS;
    p.secondaryScale = k.sS;
    p.bias = k.bias;
    p.minimumValue = k.lo;
    p.maximumValue = k.hi;
    p.clipX = 1;
    p.clipY = 2;
    p.clipWidth = s.width;
    p.clipHeight = s.height;
    return p;
}

TEST(ArithmeticForward, EveryOpAndBroadcastPattern) {
    const Shape s;
    int runs = 0;
    for (int op = 0; op < 4; ++op)
        for (const Scales& k : {Scales{}, Scales{1.5f, -0.75f, 0.25f, -1.5f, 2.0f}})
            for (const Pattern& pp : allPatterns())
                for (const Pattern& sp : allPatterns()) {
                    std::mt19937 rng(runs);
                    Operand x = makeOperand(s, pp, rng, false, runs);
                    Operand y = makeOperand(s, sp, rng, op == kArithmeticDivide, runs + 1);
                    TestImage dst = TestImage::make(s.batch, s.width + 3, s.height + 3, 12, 4, s.channels);
                    ArithmeticParams p = forwardParams(s, op, x, y, dst, k);
                    cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), nullptr);
                    Expected want =
                        testref::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.size());
                    ASSERT_TRUE(testref::matches(dst, want, 1e-6, 1e-6))
                        << opName(op) << " primary " << pp.name() << " secondary " << sp.name() << " scale "
                        << k.pS << " bias " << k.bias << " clamp [" << k.lo << ", " << k.hi << "]";
                    ++runs;
                }
    EXPECT_EQ(runs, 4 * 2 * 16 * 16);
}

TEST(ArithmeticForward, ClampStateMaskAndUnclamped) {
    const Shape s{3, 6, 5, 7};
    for (int op = 0; op < 4; ++op)
        for (int mode : {kArithmeticClampMask, kArithmeticClampUnclamped}) {
            std::mt19937 rng(op * 7 + mode);
            Operand x = makeOperand(s, {1, 1, 1, 1}, rng, false, 0);
            Operand y = makeOperand(s, {1, 0, 1, 1}, rng, op == kArithmeticDivide, 1);
            TestImage dst = TestImage::make(s.batch, s.width + 1, s.height + 2, 8, 0, s.channels);
            TestImage state = TestImage::make(s.batch, s.width, s.height, 12, 4, s.channels);
            ArithmeticParams p = forwardParams(s, op, x, y, dst, Scales{1.25f, 0.5f, -0.125f, -0.75f, 1.0f});
            p.clipX = 1;
            p.clipY = 2;
            p.clampState = state.layout;
            p.stateMode = mode;
            cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), state.data.data());
            EXPECT_TRUE(testref::matches(
                dst, testref::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.size()), 1e-6,
                1e-6));
            std::vector<char> ambiguous;
            Expected want = testref::arithmeticState(p, x.image.data.data(), y.image.data.data(), state.data.size(),
                                                     &ambiguous, 1e-5);
            for (size_t i = 0; i < ambiguous.size(); ++i)
                if (ambiguous[i]) want.set(i, state.data[i]);  // u within rounding of a bound
            EXPECT_TRUE(testref::matches(state, want, 1e-6, 1e-6)) << opName(op) << " mode " << mode;
            // Both values of the mask occur.
            int ones = 0, zeros = 0;
            state.forEach([&](size_t i) { (state.data[i] == 1.0f ? ones : zeros) += mode == kArithmeticClampMask; });
            if (mode == kArithmeticClampMask) {
                EXPECT_GT(ones, 0);
                EXPECT_GT(zeros, 0);
            }
        }
}

// The mask is the clamp's derivative with torch.clamp's convention: 1 on the bounds themselves.
TEST(ArithmeticForward, ClampMaskIncludesBounds) {
    TestImage a = TestImage::make(1, 5, 1, 1, 0, 1), b = TestImage::make(1, 5, 1, 1, 0, 1);
    a.data = {-1.0f, 1.0f, 0.5f, 2.0f, -3.0f};
    b.data = {0, 0, 0, 0, 0};
    for (int mode : {kArithmeticClampMask, kArithmeticClampUnclamped}) {
        TestImage d = TestImage::make(1, 5, 1, 1, 0, 1), st = TestImage::make(1, 5, 1, 1, 0, 1);
        ArithmeticParams p{};
        p.primary.image = a.layout;
        p.primary.strideX = p.primary.strideY = p.primary.strideChannels = p.primary.strideImages = 1;
        p.secondary = p.primary;
        p.destination = d.layout;
        p.clampState = st.layout;
        p.stateMode = mode;
        p.batch = 1;
        p.op = kArithmeticAdd;
        p.primaryScale = p.secondaryScale = 1;
        p.minimumValue = -1;
        p.maximumValue = 1;
        p.clipWidth = 5;
        p.clipHeight = 1;
        cpu::arithmeticForward(p, a.data.data(), b.data.data(), d.data.data(), st.data.data());
        EXPECT_EQ(d.data, (std::vector<float>{-1, 1, 0.5f, 1, -1}));
        if (mode == kArithmeticClampMask) EXPECT_EQ(st.data, (std::vector<float>{1, 1, 1, 0, 0}));
        else EXPECT_EQ(st.data, a.data);
        // The gradient passes G exactly where the mask is 1.
        TestImage g = TestImage::make(1, 5, 1, 1, 0, 1), dx = TestImage::make(1, 5, 1, 1, 0, 1);
        g.data = {2, 3, 4, 5, 6};
        ArithmeticGradientParams gp{};
        gp.gradient = g.layout;
        gp.primary = p.primary;
        gp.secondary = p.secondary;
        gp.clampState = st.layout;
        gp.destination = dx.layout;
        gp.batch = 1;
        gp.width = 5;
        gp.height = 1;
        gp.op = kArithmeticAdd;
        gp.primaryScale = gp.secondaryScale = 1;
        gp.minimumValue = -1;
        gp.maximumValue = 1;
        gp.clampMode = mode;
        cpu::arithmeticGradient(gp, g.data.data(), nullptr, nullptr, st.data.data(), dx.data.data());
        EXPECT_EQ(dx.data, (std::vector<float>{2, 3, 4, 0, 0})) << "mode " << mode;
    }
}

TEST(ArithmeticForward, EdgeModesAndSpecialValues) {
    // Offsets that run off the operand: zero reads 0, clamp reads the nearest pixel.
    const Shape s{1, 6, 4, 4};
    for (int edge : {kEdgeZero, kEdgeClamp})
        for (const Pattern& pat : {Pattern{1, 1, 1, 1}, Pattern{0, 1, 1, 1}, Pattern{1, 0, 0, 1}}) {
            std::mt19937 rng(edge + 3);
            Operand x = makeOperand(s, {1, 1, 1, 1}, rng, false, 0);
            Operand y = makeOperand(s, pat, rng, false, 0);
            y.op.offsetX = pat.sx ? -2 : 5;
            y.op.offsetY = pat.sy ? -1 : -3;
            y.op.edgeMode = edge;
            x.op.offsetX = 3;  // x runs off the right edge
            x.op.edgeMode = edge;
            TestImage dst = TestImage::make(1, 6, 4, 4, 0, 4);
            ArithmeticParams p = forwardParams(s, kArithmeticSubtract, x, y, dst, Scales{});
            p.clipX = p.clipY = 0;
            cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), nullptr);
            EXPECT_TRUE(testref::matches(
                dst, testref::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.size()), 1e-6,
                1e-6))
                << "edge " << edge << " " << pat.name();
        }
    // IEEE division and NaN through the clamp.
    TestImage a = TestImage::make(1, 4, 1, 1, 0, 1), b = TestImage::make(1, 4, 1, 1, 0, 1),
              d = TestImage::make(1, 4, 1, 1, 0, 1);
    a.data = {1.0f, -1.0f, 0.0f, std::nanf("")};
    b.data = {0.0f, 0.0f, 0.0f, 1.0f};
    ArithmeticParams p{};
    p.primary.image = a.layout;
    p.primary.strideX = p.primary.strideY = p.primary.strideChannels = p.primary.strideImages = 1;
    p.secondary = p.primary;
    p.destination = d.layout;
    p.batch = 1;
    p.op = kArithmeticDivide;
    p.primaryScale = p.secondaryScale = 1;
    p.minimumValue = -10;
    p.maximumValue = 10;
    p.clipWidth = 4;
    p.clipHeight = 1;
    cpu::arithmeticForward(p, a.data.data(), b.data.data(), d.data.data(), nullptr);
    EXPECT_EQ(d.data[0], 10.0f);   // +inf clamped
    EXPECT_EQ(d.data[1], -10.0f);  // -inf clamped
    EXPECT_TRUE(std::isnan(d.data[2]));
    EXPECT_TRUE(std::isnan(d.data[3]));
}

TEST(ArithmeticForward, LargeDenseImages) {
    // Dense bindings (flat fast path) and a row count large enough for several parallel chunks.
    for (int op = 0; op < 4; ++op) {
        std::mt19937 rng(op);
        TestImage x = TestImage::make(2, 97, 41, 8, 0, 8), y = TestImage::make(2, 97, 41, 8, 0, 8),
                  d = TestImage::make(2, 97, 41, 8, 0, 8);
        x.fillInput(rng, -2, 2);
        y.fillInput(rng, 0.5, 2);
        ArithmeticParams p{};
        p.primary.image = x.layout;
        p.primary.strideX = p.primary.strideY = p.primary.strideChannels = p.primary.strideImages = 1;
        p.secondary = p.primary;
        p.secondary.image = y.layout;
        p.destination = d.layout;
        p.batch = 2;
        p.op = op;
        p.primaryScale = 0.5f;
        p.secondaryScale = 2.0f;
        p.bias = 1.0f;
        p.minimumValue = -kFltMax;
        p.maximumValue = kFltMax;
        p.clipWidth = 97;
        p.clipHeight = 41;
        cpu::arithmeticForward(p, x.data.data(), y.data.data(), d.data.data(), nullptr);
        EXPECT_TRUE(testref::matches(d, testref::arithmeticForward(p, x.data.data(), y.data.data(), d.data.size()),
                                     1e-6, 1e-6))
            << opName(op);
    }
}

// ---- compare ---------------------------------------------------------------------------

TEST(CompareForward, EveryTypeThresholdAndBroadcast) {
    const Shape s{2, 6, 4, 5};
    const char* names[] = {"Equal", "NotEqual", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    int runs = 0;
    for (int type = kCompareEqual; type <= kCompareGreaterOrEqual; ++type)
        for (float threshold : {0.0f, 0.3f})
            for (const Scales& k : {Scales{}, Scales{2.0f, 1.0f, 0.0f, -kFltMax, kFltMax},
                                    Scales{1.0f, 1.0f, -0.5f, 0.0f, 0.25f}})
                for (const Pattern& sp : {Pattern{1, 1, 1, 1}, Pattern{0, 0, 0, 1}, Pattern{1, 0, 1, 1},
                                          Pattern{0, 1, 1, 0}, Pattern{1, 1, 0, 1}}) {
                    std::mt19937 rng(runs++);
                    Operand x = makeOperand(s, {1, 1, 1, 1}, rng, false, 0);
                    Operand y = makeOperand(s, sp, rng, false, 1);
                    // Quarter-integer values: exact equalities and exact threshold ties occur.
                    for (TestImage* img : {&x.image, &y.image})
                        img->forEach([&](size_t i) { img->data[i] = std::round(img->data[i] * 2) / 4; });
                    TestImage dst = TestImage::make(s.batch, s.width + 1, s.height + 2, 8, 0, s.channels);
                    CompareParams p{};
                    p.primary = x.op;
                    p.secondary = y.op;
                    p.destination = dst.layout;
                    p.batch = s.batch;
                    p.comparison = type;
                    p.threshold = threshold;
                    p.primaryScale = k.pS;
                    p.secondaryScale = k.sS;
                    p.bias = k.bias;
                    p.minimumValue = k.lo;
                    p.maximumValue = k.hi;
                    p.clipX = 1;
                    p.clipY = 1;
                    p.clipWidth = s.width;
                    p.clipHeight = s.height;
                    cpu::compareForward(p, x.image.data.data(), y.image.data.data(), dst.data.data());
                    Expected want =
                        testref::compareForward(p, x.image.data.data(), y.image.data.data(), dst.data.size());
                    ASSERT_TRUE(testref::matches(dst, want, 0, 0))
                        << names[type] << " threshold " << threshold << " secondary " << sp.name();
                    // Both outcomes occur for the plain comparison.
                    if (k.bias == 0 && k.pS == 1) {
                        int t = 0, f = 0;
                        dst.forEach([&](size_t i) {
                            if (want.written[i]) (dst.data[i] == 1.0f ? t : f)++;
                        });
                        EXPECT_GT(t, 0) << names[type];
                        EXPECT_GT(f, 0) << names[type];
                    }
                }
}

TEST(CompareForward, NaNOperands) {
    TestImage a = TestImage::make(1, 2, 1, 1, 0, 1), b = TestImage::make(1, 2, 1, 1, 0, 1);
    a.data = {std::nanf(""), 1.0f};
    b.data = {1.0f, std::nanf("")};
    const float want[6] = {0, 1, 0, 0, 0, 0};  // only NotEqual holds with a NaN
    for (int type = kCompareEqual; type <= kCompareGreaterOrEqual; ++type) {
        TestImage d = TestImage::make(1, 2, 1, 1, 0, 1);
        CompareParams p{};
        p.primary.image = a.layout;
        p.primary.strideX = p.primary.strideY = p.primary.strideChannels = p.primary.strideImages = 1;
        p.secondary = p.primary;
        p.destination = d.layout;
        p.batch = 1;
        p.comparison = type;
        p.threshold = 100;
        p.primaryScale = p.secondaryScale = 1;
        p.minimumValue = -kFltMax;
        p.maximumValue = kFltMax;
        p.clipWidth = 2;
        p.clipHeight = 1;
        cpu::compareForward(p, a.data.data(), b.data.data(), d.data.data());
        EXPECT_EQ(d.data[0], want[type]) << type;
        EXPECT_EQ(d.data[1], want[type]) << type;
    }
}

// ---- gradient ----------------------------------------------------------------------------

// One forward problem plus the gradient params for one of its inputs.
struct GradientProblem {
    Shape s;
    Operand x, y;
    TestImage forwardDst, state, g, dx;
    ArithmeticParams fp{};
    ArithmeticGradientParams gp{};
};

template <class Rng>
GradientProblem makeGradientProblem(const Shape& s, int op, bool forSecondary, const Pattern& inputPattern,
                                    const Pattern& otherPattern, int clampMode, const Scales& k, Rng& rng,
                                    int variant) {
    GradientProblem t;
    t.s = s;
    const Pattern& pp = forSecondary ? otherPattern : inputPattern;
    const Pattern& sp = forSecondary ? inputPattern : otherPattern;
    t.x = makeOperand(s, pp, rng, false, variant);
    t.y = makeOperand(s, sp, rng, op == kArithmeticDivide, variant + 1);
    const int slice = (s.channels + 3) / 4 * 4;
    t.forwardDst = TestImage::make(s.batch, s.width + 2, s.height + 1, slice, 0, s.channels);
    t.state = TestImage::make(s.batch, s.width, s.height, slice + 4, 4, s.channels);
    t.fp = forwardParams(s, op, t.x, t.y, t.forwardDst, k);
    t.fp.clipX = 2;
    t.fp.clipY = 1;
    t.fp.clampState = t.state.layout;
    t.fp.stateMode = clampMode;
    cpu::arithmeticForward(t.fp, t.x.image.data.data(), t.y.image.data.data(), t.forwardDst.data.data(),
                           clampMode ? t.state.data.data() : nullptr);
    // G lives in an image shaped like the forward destination, read from the clip origin.
    t.g = TestImage::make(s.batch, s.width + 2, s.height + 1, slice + 4, 4, s.channels, 1);
    t.g.fillInput(rng, -1, 1);
    const Operand& in = forSecondary ? t.y : t.x;
    // dX is shaped like the input (same layout), written where the input was read.
    t.dx = in.image;
    std::fill(t.dx.data.begin(), t.dx.data.end(), testref::kSentinel);
    t.dx.layout.channels = inputPattern.sc ? s.channels : 1;  // a single-channel input's dX has 1 channel
    ArithmeticGradientParams& gp = t.gp;
    gp.gradient = t.g.layout;
    gp.primary = t.x.op;
    gp.secondary = t.y.op;
    gp.clampState = t.state.layout;
    gp.destination = t.dx.layout;
    gp.batch = s.batch;
    gp.width = s.width;
    gp.height = s.height;
    gp.gradientX = t.fp.clipX;
    gp.gradientY = t.fp.clipY;
    gp.destinationX = in.op.offsetX;
    gp.destinationY = in.op.offsetY;
    gp.op = op;
    gp.forSecondary = forSecondary;
    gp.primaryScale = k.pS;
    gp.secondaryScale = k.sS;
    gp.minimumValue = k.lo;
    gp.maximumValue = k.hi;
    gp.clampMode = clampMode;
    return t;
}

void runGradient(GradientProblem& t) {
    cpu::arithmeticGradient(t.gp, t.g.data.data(), t.x.image.data.data(), t.y.image.data.data(),
                            t.gp.clampMode ? t.state.data.data() : nullptr, t.dx.data.data());
}

Expected referenceGradient(const GradientProblem& t) {
    return testref::arithmeticGradient(t.gp, t.g.data.data(), t.x.image.data.data(), t.y.image.data.data(),
                                       t.state.data.data(), t.dx.data.size());
}

TEST(ArithmeticGradient, EveryOpInputPatternAndClampMode) {
    const Shape s;
    int runs = 0;
    for (int op = 0; op < 4; ++op)
        for (bool forSecondary : {false, true})
            for (const Pattern& ip : allPatterns())
                for (const Pattern& other : {Pattern{1, 1, 1, 1}, Pattern{0, 0, 0, 0}, Pattern{1, 0, 0, 1}})
                    for (int clampMode : {kArithmeticClampNone, kArithmeticClampMask, kArithmeticClampUnclamped}) {
                        std::mt19937 rng(1000 + runs);
                        Scales k = clampMode ? Scales{1.5f, -0.75f, 0.25f, -1.0f, 1.25f} : Scales{1.5f, -0.75f, 0.25f};
                        GradientProblem t =
                            makeGradientProblem(s, op, forSecondary, ip, other, clampMode, k, rng, runs);
                        runGradient(t);
                        ASSERT_TRUE(testref::matches(t.dx, referenceGradient(t), 2e-6, 1e-6))
                            << opName(op) << (forSecondary ? " secondary " : " primary ") << ip.name() << " other "
                            << other.name() << " clampMode " << clampMode;
                        ++runs;
                    }
    EXPECT_EQ(runs, 4 * 2 * 16 * 3 * 3);
}

// The exact chain rule: dX against central differences of L = sum G * R with R the double
// forward formula, for every element of the input that the forward op reads.
TEST(ArithmeticGradient, MatchesFiniteDifferencesOfForward) {
    const Shape s{2, 4, 3, 3};
    int runs = 0;
    for (int op = 0; op < 4; ++op)
        for (bool forSecondary : {false, true})
            for (const Pattern& ip : allPatterns()) {
                std::mt19937 rng(77 + runs);
                const Scales k{1.5f, -0.75f, 0.25f};
                GradientProblem t = makeGradientProblem(s, op, forSecondary, ip, {1, 1, 1, 1}, 0, k, rng, runs++);
                runGradient(t);
                std::vector<double> xd(t.x.image.data.begin(), t.x.image.data.end());
                std::vector<double> yd(t.y.image.data.begin(), t.y.image.data.end());
                std::vector<double>& v = forSecondary ? yd : xd;
                auto loss = [&]() {
                    double L = 0;
                    for (int n = 0; n < s.batch; ++n)
                        for (int py = 0; py < s.height; ++py)
                            for (int px = 0; px < s.width; ++px)
                                for (int c = 0; c < s.channels; ++c)
                                    L += double(t.g.at(n, t.fp.clipX + px, t.fp.clipY + py, c)) *
                                         testref::arithmeticU(t.fp, xd.data(), yd.data(), n, px, py, c);
                    return L;
                };
                Expected want = referenceGradient(t);
                int checked = 0;
                for (size_t i = 0; i < t.dx.data.size(); ++i) {
                    if (!want.written[i]) continue;
                    const double v0 = v[i], h = 1e-4 * std::max(1.0, std::fabs(v0));
                    v[i] = v0 + h;
                    const double lp = loss();
                    v[i] = v0 - h;
                    const double lm = loss();
                    v[i] = v0;
                    const double fd = (lp - lm) / (2 * h);
                    EXPECT_NEAR(t.dx.data[i], fd, 1e-5 * (1 + want.magnitude[i]))
                        << opName(op) << (forSecondary ? " secondary " : " primary ") << ip.name() << " at "
                        << t.dx.where(i);
                    ++checked;
                }
                EXPECT_GT(checked, 0);
            }
}

// Clamped elements get no gradient (mask) — MPS leaves this to the user; mpsgrad differentiates it.
TEST(ArithmeticGradient, ClampedElementsGetZeroGradient) {
    const Shape s{1, 8, 6, 4};
    std::mt19937 rng(5);
    const Scales k{1, 1, 0, -0.5f, 0.5f};
    for (int clampMode : {kArithmeticClampMask, kArithmeticClampUnclamped}) {
        GradientProblem t = makeGradientProblem(s, kArithmeticAdd, false, {1, 1, 1, 1}, {1, 1, 1, 1}, clampMode, k,
                                                rng, 0);
        runGradient(t);
        int clamped = 0, passed = 0;
        for (int py = 0; py < s.height; ++py)
            for (int px = 0; px < s.width; ++px)
                for (int c = 0; c < s.channels; ++c) {
                    const float r = t.forwardDst.at(0, t.fp.clipX + px, t.fp.clipY + py, c);
                    const float d = t.dx.at(0, t.x.op.offsetX + px, t.x.op.offsetY + py, c);
                    const float g = t.g.at(0, t.fp.clipX + px, t.fp.clipY + py, c);
                    if (r == -0.5f || r == 0.5f) {
                        // At (or clamped to) a bound: zero unless u sits exactly on it.
                        if (d == 0.0f) ++clamped;
                    } else {
                        EXPECT_EQ(d, g);
                        ++passed;
                    }
                }
        EXPECT_GT(clamped, 0);
        EXPECT_GT(passed, 0);
    }
}

// Reductions long enough to use the blocked partial sums; the result is bitwise reproducible.
TEST(ArithmeticGradient, LargeReductionsAreDeterministic) {
    const Shape s{3, 64, 64, 16};
    for (const Pattern& ip : {Pattern{0, 0, 0, 0}, Pattern{0, 0, 0, 1}, Pattern{1, 0, 1, 1}, Pattern{1, 0, 0, 0},
                              Pattern{0, 1, 1, 0}, Pattern{1, 1, 0, 1}})
        for (int op : {kArithmeticAdd, kArithmeticMultiply}) {
            std::mt19937 rng(31);
            GradientProblem t =
                makeGradientProblem(s, op, true, ip, {1, 1, 1, 1}, kArithmeticClampMask, Scales{1, 2, 0, -1, 1}, rng, 0);
            runGradient(t);
            const std::vector<float> first = t.dx.data;
            EXPECT_TRUE(testref::matches(t.dx, referenceGradient(t), 2e-6, 1e-6)) << ip.name() << " " << opName(op);
            for (int repeat = 0; repeat < 3; ++repeat) {
                std::fill(t.dx.data.begin(), t.dx.data.end(), testref::kSentinel);
                runGradient(t);
                ASSERT_EQ(t.dx.data, first) << ip.name() << ": not bitwise reproducible";
            }
        }
}

TEST(ArithmeticGradient, DropsTermsOutsideDestination) {
    // dX smaller than the region: writes stay inside the image, nothing else touched.
    const Shape s{1, 5, 4, 4};
    std::mt19937 rng(8);
    GradientProblem t = makeGradientProblem(s, kArithmeticMultiply, false, {1, 1, 1, 1}, {1, 1, 1, 1}, 0, Scales{},
                                            rng, 0);
    t.dx = TestImage::make(1, 3, 3, 4, 0, 4);
    t.gp.destination = t.dx.layout;
    t.gp.destinationX = -1;
    t.gp.destinationY = 1;
    runGradient(t);
    EXPECT_TRUE(testref::matches(t.dx, referenceGradient(t), 2e-6, 1e-6));
}

TEST(ArithmeticValidation, RejectsBadParams) {
    const Shape s;
    const int C = s.channels;
    std::mt19937 rng(1);
    Operand x = makeOperand(s, {1, 1, 1, 1}, rng, false, 0), y = makeOperand(s, {1, 1, 1, 1}, rng, false, 0);
    TestImage dst = TestImage::make(s.batch, s.width + 3, s.height + 3, 8, 0, s.channels);
    ArithmeticParams p = forwardParams(s, kArithmeticAdd, x, y, dst, Scales{});
    p.secondary.strideX = 2;
    EXPECT_THROW(cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), nullptr),
                 std::invalid_argument);
    p = forwardParams(s, kArithmeticAdd, x, y, dst, Scales{});
    p.stateMode = kArithmeticClampMask;  // no state buffer
    EXPECT_THROW(cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), nullptr),
                 std::invalid_argument);
    p = forwardParams(s, kArithmeticAdd, x, y, dst, Scales{});
    p.clipX = 4;  // 4 + 5 > 8
    EXPECT_THROW(cpu::arithmeticForward(p, x.image.data.data(), y.image.data.data(), dst.data.data(), nullptr),
                 std::invalid_argument);

    GradientProblem t = makeGradientProblem(s, kArithmeticMultiply, false, {1, 1, 0, 1}, {1, 1, 1, 1}, 0, Scales{},
                                            rng, 0);
    t.gp.destination.channels = C;  // a single-channel input's dX has 1 channel
    EXPECT_THROW(runGradient(t), std::invalid_argument);
    t.gp.destination.channels = 1;
    EXPECT_THROW(cpu::arithmeticGradient(t.gp, t.g.data.data(), t.x.image.data.data(), nullptr, nullptr,
                                         t.dx.data.data()),
                 std::invalid_argument);  // multiply-primary reads the secondary
    // Add needs neither operand.
    t.gp.op = kArithmeticAdd;
    cpu::arithmeticGradient(t.gp, t.g.data.data(), nullptr, nullptr, nullptr, t.dx.data.data());
    EXPECT_TRUE(testref::matches(t.dx, referenceGradient(t), 2e-6, 1e-6));
}

}  // namespace
}  // namespace mpsgrad
