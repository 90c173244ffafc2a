// CPU softmax ops (softmaxForward, softmaxGradient) against the double-precision references of
// reference_elementwise.h, and the gradients against float64 central finite differences of the
// forward formula. Channel counts 1, 3, 4, 5 and 1000, large-magnitude inputs, offsets, clip
// rectangles, channel offsets, edge modes and batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpsgrad/backend/cpu/cpu_ops.h"
#include "mpsgrad/backend/cpu/elementwise.h"
#include "reference_elementwise.h"

namespace mpsgrad {
namespace {

using testref::Expected;
using testref::TestImage;

int slice(int n) { return (n + 3) / 4 * 4; }

struct SoftmaxCase {
    int channels;
    bool log;
};

std::vector<SoftmaxCase> softmaxCases() {
    std::vector<SoftmaxCase> v;
    for (int n : {1, 3, 4, 5, 1000})
        for (bool log : {false, true}) v.push_back({n, log});
    return v;
}

std::string caseName(const ::testing::TestParamInfo<SoftmaxCase>& info) {
    return std::string(info.param.log ? "LogSoftmax" : "Softmax") + std::to_string(info.param.channels);
}

// Softmax rows: relative accuracy 1e-5 (a 1000-term float sum); log-softmax: absolute 1e-6 per unit.
double rtolFor(bool log) { return log ? 1e-6 : 1e-5; }
double atolFor(bool log) { return log ? 1e-6 : 1e-7; }

class SoftmaxOps : public ::testing::TestWithParam<SoftmaxCase> {};

// Source at channel offset 4 of a wider slice, read from offset (1, 1); destination written in a
// clip rectangle of a larger image; two images.
struct ForwardSetup {
    TestImage src, dst;
    SoftmaxParams p{};
};

template <class Rng>
ForwardSetup makeForward(int N, bool log, Rng& rng, double lo, double hi) {
    ForwardSetup s;
    s.src = TestImage::make(2, 6, 5, 4 + slice(N), 4, N, 1);
    s.dst = TestImage::make(2, 7, 6, slice(N), 0, N);
    s.src.fillInput(rng, lo, hi);
    s.p.source = s.src.layout;
    s.p.destination = s.dst.layout;
    s.p.batch = 2;
    s.p.sourceX = 1;
    s.p.sourceY = 1;
    s.p.clipX = 1;
    s.p.clipY = 2;
    s.p.clipWidth = 5;
    s.p.clipHeight = 4;
    s.p.edgeMode = kEdgeZero;
    s.p.logSoftmax = log;
    return s;
}

TEST_P(SoftmaxOps, ForwardMatchesReference) {
    const SoftmaxCase k = GetParam();
    std::mt19937 rng(k.channels * 2 + k.log);
    ForwardSetup s = makeForward(k.channels, k.log, rng, -5, 5);
    cpu::softmaxForward(s.p, s.src.data.data(), s.dst.data.data());
    Expected want = testref::softmaxForward(s.p, s.src.data.data(), s.dst.data.size());
    EXPECT_TRUE(testref::matches(s.dst, want, rtolFor(k.log), atolFor(k.log)));
    // Rows are distributions: softmax sums to 1, log-softmax's exponentials too.
    for (int n = 0; n < 2; ++n)
        for (int y = 0; y < s.p.clipHeight; ++y)
            for (int x = 0; x < s.p.clipWidth; ++x) {
                double sum = 0;
                for (int c = 0; c < k.channels; ++c) {
                    double v = s.dst.at(n, s.p.clipX + x, s.p.clipY + y, c);
                    sum += k.log ? std::exp(v) : v;
                }
                EXPECT_NEAR(sum, 1.0, 1e-5);
            }
}

TEST_P(SoftmaxOps, LargeMagnitudeInputsAreStable) {
    const SoftmaxCase k = GetParam();
    for (double scale : {80.0, 1e4, 1e30}) {
        std::mt19937 rng(k.channels + 17);
        // Spread of +-scale around a large shift: exp(x) alone would overflow.
        ForwardSetup s = makeForward(k.channels, k.log, rng, scale, 3 * scale);
        cpu::softmaxForward(s.p, s.src.data.data(), s.dst.data.data());
        Expected want = testref::softmaxForward(s.p, s.src.data.data(), s.dst.data.size());
        // Log-probabilities scale with the input: tolerance relative to |y|.
        EXPECT_TRUE(testref::matches(s.dst, want, rtolFor(k.log), atolFor(k.log))) << "scale " << scale;
        s.dst.forEach([&](size_t i) {
            if (want.written[i]) {
                ASSERT_FALSE(std::isnan(s.dst.data[i])) << "scale " << scale;
            }
        });
        // Negative shift too.
        ForwardSetup m = makeForward(k.channels, k.log, rng, -3 * scale, -scale);
        cpu::softmaxForward(m.p, m.src.data.data(), m.dst.data.data());
        EXPECT_TRUE(testref::matches(m.dst, testref::softmaxForward(m.p, m.src.data.data(), m.dst.data.size()),
                                     rtolFor(k.log), atolFor(k.log)))
            << "scale " << -scale;
    }
}

TEST_P(SoftmaxOps, EdgeModes) {
    const SoftmaxCase k = GetParam();
    for (int edge : {kEdgeZero, kEdgeClamp}) {
        std::mt19937 rng(k.channels + 5);
        ForwardSetup s = makeForward(k.channels, k.log, rng, -3, 3);
        s.p.sourceX = -2;  // columns -2..2 and rows -3..0 of the source
        s.p.sourceY = -3;
        s.p.edgeMode = edge;
        cpu::softmaxForward(s.p, s.src.data.data(), s.dst.data.data());
        Expected want = testref::softmaxForward(s.p, s.src.data.data(), s.dst.data.size());
        EXPECT_TRUE(testref::matches(s.dst, want, rtolFor(k.log), atolFor(k.log))) << "edge " << edge;
        if (edge == kEdgeZero) {  // an off-image pixel is uniform
            float v = s.dst.at(0, s.p.clipX, s.p.clipY, 0);
            EXPECT_NEAR(v, k.log ? -std::log(double(k.channels)) : 1.0 / k.channels, 1e-6);
        }
    }
}

// Gradient inputs: G random, Y the forward op's output (softmax or log-softmax of random X).
struct GradientSetup {
    ForwardSetup forward;
    TestImage g, y, dx;
    SoftmaxGradientParams p{};
};

template <class Rng>
GradientSetup makeGradient(int N, bool log, Rng& rng) {
    GradientSetup t;
    t.forward = makeForward(N, log, rng, -3, 3);
    cpu::softmaxForward(t.forward.p, t.forward.src.data.data(), t.forward.dst.data.data());
    t.y = t.forward.dst;  // Y in the clip rectangle (1, 2, 5 x 4) of a 7 x 6 image
    t.g = TestImage::make(2, 5, 4, 4 + slice(N), 4, N);
    t.g.fillInput(rng, -1, 1);
    t.dx = TestImage::make(2, 6, 5, 4 + slice(N), 4, N, 1);  // shaped like X
    t.p.gradient = t.g.layout;
    t.p.output = t.y.layout;
    t.p.destination = t.dx.layout;
    t.p.batch = 2;
    t.p.gradientX = 0;
    t.p.gradientY = 0;
    t.p.outputX = t.forward.p.clipX;
    t.p.outputY = t.forward.p.clipY;
    t.p.clipX = t.forward.p.sourceX;
    t.p.clipY = t.forward.p.sourceY;
    t.p.clipWidth = t.forward.p.clipWidth;
    t.p.clipHeight = t.forward.p.clipHeight;
    t.p.gradientEdgeMode = kEdgeZero;
    t.p.outputEdgeMode = kEdgeZero;
    t.p.logSoftmax = log;
    return t;
}

TEST_P(SoftmaxOps, GradientMatchesReference) {
    const SoftmaxCase k = GetParam();
    std::mt19937 rng(k.channels * 3 + k.log);
    GradientSetup t = makeGradient(k.channels, k.log, rng);
    cpu::softmaxGradient(t.p, t.g.data.data(), t.y.data.data(), t.dx.data.data());
    EXPECT_TRUE(testref::matches(t.dx, testref::softmaxGradient(t.p, t.g.data.data(), t.y.data.data(), t.dx.data.size()),
                                 1e-6, 1e-7));
}

// dX against central differences of L = sum_k G_k * Y_k(X), Y the double forward formula.
TEST_P(SoftmaxOps, GradientMatchesFiniteDifferencesOfForward) {
    const SoftmaxCase k = GetParam();
    std::mt19937 rng(k.channels * 5 + k.log);
    GradientSetup t = makeGradient(k.channels, k.log, rng);
    cpu::softmaxGradient(t.p, t.g.data.data(), t.y.data.data(), t.dx.data.data());
    const int N = k.channels;
    const bool wide = N > 5;  // 1000 channels: one pixel per image, every 37th channel
    for (int n = 0; n < 2; ++n)
        for (int py = 0; py < (wide ? 1 : t.p.clipHeight); ++py)
            for (int px = 0; px < (wide ? 1 : t.p.clipWidth); ++px) {
                std::vector<double> x(static_cast<size_t>(N)), g(static_cast<size_t>(N));
                for (int c = 0; c < N; ++c) {
                    x[size_t(c)] = t.forward.src.at(n, t.forward.p.sourceX + px, t.forward.p.sourceY + py, c);
                    g[size_t(c)] = t.g.at(n, px, py, c);
                }
                auto loss = [&]() {
                    double m = *std::max_element(x.begin(), x.end()), s = 0, L = 0;
                    for (double v : x) s += std::exp(v - m);
                    for (int c = 0; c < N; ++c)
                        L += g[size_t(c)] * (k.log ? x[size_t(c)] - m - std::log(s) : std::exp(x[size_t(c)] - m) / s);
                    return L;
                };
                for (int c = 0; c < N; c += wide ? 37 : 1) {
                    const double x0 = x[size_t(c)], h = 1e-5;
                    x[size_t(c)] = x0 + h;
                    const double lp = loss();
                    x[size_t(c)] = x0 - h;
                    const double lm = loss();
                    x[size_t(c)] = x0;
                    EXPECT_NEAR(t.dx.at(n, t.p.clipX + px, t.p.clipY + py, c), (lp - lm) / (2 * h), 2e-6)
                        << "n=" << n << " p=(" << px << "," << py << ") c=" << c;
                }
            }
}

INSTANTIATE_TEST_SUITE_P(Channels, SoftmaxOps, ::testing::ValuesIn(softmaxCases()), caseName);

TEST(SoftmaxSpecial, UniformAndSingleChannel) {
    // Equal huge inputs give the uniform distribution; one channel gives 1 (log: 0) and gradient 0.
    for (bool log : {false, true}) {
        TestImage x = TestImage::make(1, 2, 1, 4, 0, 4), y = TestImage::make(1, 2, 1, 4, 0, 4);
        std::fill(x.data.begin(), x.data.begin() + 4, 1e30f);
        std::fill(x.data.begin() + 4, x.data.end(), -1e30f);
        SoftmaxParams p{};
        p.source = x.layout;
        p.destination = y.layout;
        p.batch = 1;
        p.clipWidth = 2;
        p.clipHeight = 1;
        p.logSoftmax = log;
        cpu::softmaxForward(p, x.data.data(), y.data.data());
        for (float v : y.data) EXPECT_NEAR(v, log ? -std::log(4.0) : 0.25, 1e-6);

        TestImage x1 = TestImage::make(1, 3, 1, 1, 0, 1), y1 = TestImage::make(1, 3, 1, 1, 0, 1);
        x1.data = {-1e30f, 0.0f, 12345.0f};
        p.source = x1.layout;
        p.destination = y1.layout;
        p.clipWidth = 3;
        cpu::softmaxForward(p, x1.data.data(), y1.data.data());
        for (float v : y1.data) EXPECT_EQ(v, log ? 0.0f : 1.0f);
        TestImage g = TestImage::make(1, 3, 1, 1, 0, 1), dx = TestImage::make(1, 3, 1, 1, 0, 1);
        g.data = {1.5f, -2.0f, 7.0f};
        SoftmaxGradientParams gp{};
        gp.gradient = g.layout;
        gp.output = y1.layout;
        gp.destination = dx.layout;
        gp.batch = 1;
        gp.clipWidth = 3;
        gp.clipHeight = 1;
        gp.logSoftmax = log;
        cpu::softmaxGradient(gp, g.data.data(), y1.data.data(), dx.data.data());
        for (float v : dx.data) EXPECT_EQ(v, 0.0f);
    }
}

TEST(SoftmaxSpecial, LargeImageIsDeterministic) {
    std::mt19937 rng(3);
    TestImage x = TestImage::make(3, 40, 33, 24, 0, 21), y = TestImage::make(3, 40, 33, 24, 0, 21);
    x.fillInput(rng, -10, 10);
    SoftmaxParams p{};
    p.source = x.layout;
    p.destination = y.layout;
    p.batch = 3;
    p.clipWidth = 40;
    p.clipHeight = 33;
    cpu::softmaxForward(p, x.data.data(), y.data.data());
    EXPECT_TRUE(testref::matches(y, testref::softmaxForward(p, x.data.data(), y.data.size()), 1e-5, 1e-7));
    const std::vector<float> first = y.data;
    cpu::softmaxForward(p, x.data.data(), y.data.data());
    EXPECT_EQ(y.data, first);
}

// elementwise::fastExp (the exponential of softmax, log-softmax's gradient and the softmax
// cross-entropy loss) against float64 std::exp over its whole input range: every 997th float bit
// pattern in [-87.33654, 88] (about 2.2 million inputs, both signs, every binade), then the inputs
// outside it, which it clamps, and NaN.
TEST(FastExp, MatchesFloat64OverTheWholeRange) {
    using cpu::elementwise::fastExp;
    double worst = 0.0;
    float worstAt = 0.0f;
    int64_t checked = 0;
    for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 997) {
        const uint32_t bits = uint32_t(b);
        float x;
        std::memcpy(&x, &bits, sizeof x);
        if (!(x >= -87.33654f && x <= 88.0f)) continue;
        const double exact = std::exp(double(x));
        const double error = std::fabs(double(fastExp(x)) - exact) / exact;
        ++checked;
        if (error > worst) worst = error, worstAt = x;
    }
    EXPECT_GT(checked, 2000000);
    // Measured worst: 8.1e-8 (0.68 · 2^-23) at x = -5.87; the bound is one float ulp of 1 (2^-23).
    EXPECT_LT(worst, 1.1920929e-7) << "at x = " << worstAt;
    EXPECT_EQ(fastExp(0.0f), 1.0f);
    EXPECT_EQ(fastExp(-0.0f), 1.0f);
    // Below the range: the smallest normal float (never a denormal, never 0), as documented.
    const float inf = std::numeric_limits<float>::infinity();
    for (float x : {-87.4f, -100.0f, -1e30f, -inf}) {
        EXPECT_GT(fastExp(x), 0.0f) << x;
        EXPECT_LE(fastExp(x), 1.2e-38f) << x;
        EXPECT_TRUE(std::isnormal(fastExp(x))) << x;
    }
    // Above: finite, about 1.65e38 (the clamp at 88), never inf.
    for (float x : {88.5f, 100.0f, 1e30f, inf}) {
        EXPECT_TRUE(std::isfinite(fastExp(x))) << x;
        EXPECT_GT(fastExp(x), 1.6e38f) << x;
    }
    EXPECT_TRUE(std::isnan(fastExp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(SoftmaxValidation, RejectsBadParams) {
    TestImage x = TestImage::make(1, 4, 4, 4, 0, 4), y = TestImage::make(1, 4, 4, 4, 0, 3);
    SoftmaxParams p{};
    p.source = x.layout;
    p.destination = y.layout;  // 3 channels vs 4
    p.batch = 1;
    p.clipWidth = 4;
    p.clipHeight = 4;
    EXPECT_THROW(cpu::softmaxForward(p, x.data.data(), y.data.data()), std::invalid_argument);
    p.destination = x.layout;
    p.clipHeight = 5;
    EXPECT_THROW(cpu::softmaxForward(p, x.data.data(), y.data.data()), std::invalid_argument);
}

}  // namespace
}  // namespace mpsgrad
