// CPU neuron ops (cnnNeuronForward, cnnNeuronGradient, cnnNeuronPReLUWeightGradient) and the
// shared formulas of metal/neuron_math.h, against the double-precision references of
// reference_elementwise.h and against float64 central finite differences of the forward formula.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "metal/neuron_math.h"
#include "mpsgrad/backend/cpu/cpu_ops.h"
#include "reference_elementwise.h"

namespace mpsgrad {
namespace {

using testref::Expected;
using testref::TestImage;

struct NeuronCase {
    std::string name;
    int32_t type;
    float a, b, c;
    double lo, hi;               // input range
    std::vector<double> kinks;   // x where f is not differentiable (skipped by finite differences)
};

std::vector<NeuronCase> neuronCases() {
    return {
        {"None", kNeuronNone, 0, 0, 0, -4, 4, {}},
        {"ReLU", kNeuronReLU, 0, 0, 0, -4, 4, {0}},
        {"LeakyReLU", kNeuronReLU, 0.1f, 0, 0, -4, 4, {0}},
        {"Linear", kNeuronLinear, 1.5f, -0.3f, 0, -4, 4, {}},
        {"Sigmoid", kNeuronSigmoid, 0, 0, 0, -8, 8, {}},
        {"HardSigmoid", kNeuronHardSigmoid, 0.2f, 0.5f, 0, -4, 4, {-2.5, 2.5}},
        {"TanH", kNeuronTanH, 1.7f, 0.6f, 0, -4, 4, {}},
        {"Absolute", kNeuronAbsolute, 0, 0, 0, -4, 4, {0}},
        {"SoftPlus", kNeuronSoftPlus, 1.3f, 0.8f, 0, -6, 6, {}},
        {"SoftSign", kNeuronSoftSign, 0, 0, 0, -4, 4, {}},
        {"ELU", kNeuronELU, 1.2f, 0, 0, -4, 4, {0}},
        {"PReLU", kNeuronPReLU, 0, 0, 0, -4, 4, {0}},
        {"ReLUN", kNeuronReLUN, 0.1f, 6.0f, 0, -8, 8, {0, 6}},
        {"ReLU6", kNeuronReLUN, 0.0f, 6.0f, 0, -8, 8, {0, 6}},
        {"PowerFractional", kNeuronPower, 0.5f, 3.0f, 2.5f, -4, 4, {}},
        {"PowerOddNegativeBase", kNeuronPower, 1.0f, 0.0f, 3.0f, -2, 2, {}},
        {"PowerEvenNegativeBase", kNeuronPower, 1.0f, 0.5f, 2.0f, -2, 2, {}},
        {"PowerZeroExponent", kNeuronPower, 1.0f, 0.0f, 0.0f, -2, 2, {}},
        {"ExponentialBaseE", kNeuronExponential, 0.5f, 0.1f, -1.0f, -4, 4, {}},
        {"ExponentialBase2", kNeuronExponential, 0.7f, -0.2f, 2.0f, -4, 4, {}},
        {"LogarithmNatural", kNeuronLogarithm, 0.5f, 3.0f, -1.0f, -4, 4, {}},
        {"LogarithmBase10", kNeuronLogarithm, 2.0f, 9.0f, 10.0f, -4, 4, {}},
        {"GeLU", kNeuronGeLU, 0, 0, 0, -6, 6, {}},
    };
}

NeuronParams paramsOf(const NeuronCase& k) {
    NeuronParams n{};
    n.type = k.type;
    n.a = k.a;
    n.b = k.b;
    n.c = k.c;
    n.hasChannelData = k.type == kNeuronPReLU ? 1 : 0;
    return n;
}

// PReLU slopes, one per channel, behind `offset` unrelated values.
std::vector<float> preluData(int channels, int offset) {
    std::vector<float> d(size_t(offset + channels), 99.0f);
    for (int c = 0; c < channels; ++c) d[size_t(offset + c)] = 0.05f + 0.1f * float(c);
    return d;
}

// Geometry of one neuron test: every MPS placement knob set to something non-trivial.
struct Geometry {
    int batch = 2;
    int srcW = 7, srcH = 6, srcPixel = 12, srcOffset = 4;
    int channels = 5;
    int dstW = 8, dstH = 7, dstPixel = 8, dstOffset = 0;
    int sourceX = 1, sourceY = 2;
    int clipX = 2, clipY = 1, clipW = 5, clipH = 4;
    int edge = kEdgeZero;
};

double tolerance(const NeuronCase& k) {
    // Power/Exponential amplify the float rounding of a*x+b; everything else is a few ulp.
    return (k.type == kNeuronPower || k.type == kNeuronExponential) ? 2e-6 : 1e-6;
}

class NeuronOps : public ::testing::TestWithParam<NeuronCase> {};

TEST_P(NeuronOps, ForwardMatchesReference) {
    const NeuronCase k = GetParam();
    for (int edge : {kEdgeZero, kEdgeClamp}) {
        for (bool offImage : {false, true}) {
            Geometry g;
            g.edge = edge;
            if (offImage) {  // reads run off every side of the source
                g.srcW = 5;
                g.srcH = 4;
                g.sourceX = -2;
                g.sourceY = -1;
                g.clipX = 0;
                g.clipY = 0;
                g.clipW = 8;
                g.clipH = 7;
            }
            std::mt19937 rng(1234 + k.type);
            TestImage src = TestImage::make(g.batch, g.srcW, g.srcH, g.srcPixel, g.srcOffset, g.channels);
            TestImage dst = TestImage::make(g.batch, g.dstW, g.dstH, g.dstPixel, g.dstOffset, g.channels);
            src.fillInput(rng, k.lo, k.hi);
            std::vector<float> data = preluData(g.channels, 3);
            NeuronForwardParams p{};
            p.source = src.layout;
            p.destination = dst.layout;
            p.batch = g.batch;
            p.sourceX = g.sourceX;
            p.sourceY = g.sourceY;
            p.clipX = g.clipX;
            p.clipY = g.clipY;
            p.clipWidth = g.clipW;
            p.clipHeight = g.clipH;
            p.edgeMode = edge;
            p.neuronDataOffset = 3;
            p.neuron = paramsOf(k);
            cpu::cnnNeuronForward(p, src.data.data(), data.data(), dst.data.data());
            Expected want = testref::neuronForward(p, src.data.data(), data.data(), dst.data.size());
            EXPECT_TRUE(testref::matches(dst, want, 4 * tolerance(k), tolerance(k)))
                << k.name << " edge=" << edge << " offImage=" << offImage;
        }
    }
}

TEST_P(NeuronOps, GradientMatchesReference) {
    const NeuronCase k = GetParam();
    for (int edge : {kEdgeZero, kEdgeClamp}) {
        std::mt19937 rng(99 + k.type);
        Geometry g;
        TestImage x = TestImage::make(g.batch, g.srcW, g.srcH, g.srcPixel, g.srcOffset, g.channels);
        TestImage grad = TestImage::make(g.batch, 6, 5, 8, 0, g.channels, 3);
        TestImage dx = TestImage::make(g.batch, g.dstW, g.dstH, g.dstPixel, 0, g.channels);
        x.fillInput(rng, k.lo, k.hi);
        grad.fillInput(rng, -2, 2);
        std::vector<float> data = preluData(g.channels, 0);
        NeuronGradientParams p{};
        p.gradient = grad.layout;
        p.source = x.layout;
        p.destination = dx.layout;
        p.batch = g.batch;
        p.gradientX = 2;  // reads G columns 2..6 of 6: one off the right edge
        p.gradientY = 0;
        p.sourceX = g.sourceX;
        p.sourceY = g.sourceY;
        p.clipX = g.clipX;
        p.clipY = g.clipY;
        p.clipWidth = g.clipW;
        p.clipHeight = g.clipH;
        p.gradientEdgeMode = edge;
        p.sourceEdgeMode = edge;
        p.neuronDataOffset = 0;
        p.neuron = paramsOf(k);
        cpu::cnnNeuronGradient(p, grad.data.data(), x.data.data(), data.data(), dx.data.data());
        Expected want = testref::neuronGradient(p, grad.data.data(), x.data.data(), data.data(), dx.data.size());
        EXPECT_TRUE(testref::matches(dx, want, 1e-5, 1e-6)) << k.name << " edge=" << edge;
    }
}

// The derivative the backend computes (gradient op with G = 1) against float64 central
// differences of the forward formula, at inputs away from kinks.
TEST_P(NeuronOps, DerivativeMatchesFiniteDifferences) {
    const NeuronCase k = GetParam();
    const int C = 4, W = 64;
    std::mt19937 rng(7 + k.type);
    TestImage x = TestImage::make(1, W, 1, C, 0, C);
    TestImage ones = TestImage::make(1, W, 1, C, 0, C);
    TestImage dx = TestImage::make(1, W, 1, C, 0, C);
    x.fillInput(rng, k.lo, k.hi);
    std::fill(ones.data.begin(), ones.data.end(), 1.0f);
    std::vector<float> data = preluData(C, 0);
    NeuronGradientParams p{};
    p.gradient = ones.layout;
    p.source = x.layout;
    p.destination = dx.layout;
    p.batch = 1;
    p.clipWidth = W;
    p.clipHeight = 1;
    p.neuron = paramsOf(k);
    cpu::cnnNeuronGradient(p, ones.data.data(), x.data.data(), data.data(), dx.data.data());
    int checked = 0;
    for (int i = 0; i < W; ++i)
        for (int c = 0; c < C; ++c) {
            const double xv = x.at(0, i, 0, c);
            bool nearKink = false;
            for (double kink : k.kinks) nearKink |= std::fabs(xv - kink) < 1e-3;
            if (nearKink) continue;
            const double ca = data[size_t(c)];
            const double h = 1e-6 * std::max(1.0, std::fabs(xv));
            const double fd = (testref::neuronF(k.type, k.a, k.b, k.c, ca, xv + h) -
                               testref::neuronF(k.type, k.a, k.b, k.c, ca, xv - h)) / (2 * h);
            const double got = dx.at(0, i, 0, c);
            EXPECT_NEAR(got, fd, 2e-5 * std::max(1.0, std::fabs(fd))) << k.name << " at x=" << xv;
            // The double reference's derivative column agrees with the forward formula too.
            EXPECT_NEAR(testref::neuronDf(k.type, k.a, k.b, k.c, ca, xv), fd, 1e-7 * std::max(1.0, std::fabs(fd)))
                << k.name << " reference derivative at x=" << xv;
            ++checked;
        }
    EXPECT_GT(checked, C * W / 2);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, NeuronOps, ::testing::ValuesIn(neuronCases()),
                         [](const ::testing::TestParamInfo<NeuronCase>& info) { return info.param.name; });

// Every MPSCNNNeuronType value has a case above.
TEST(NeuronCases, CoverEveryType) {
    std::vector<bool> seen(kNeuronCount, false);
    for (const NeuronCase& k : neuronCases()) seen[size_t(k.type)] = true;
    for (int t = 0; t < kNeuronCount; ++t) EXPECT_TRUE(seen[size_t(t)]) << "type " << t;
}

// The scalar formulas over dense grids, including the tails where naive float formulas lose
// all relative precision.
TEST(NeuronMath, TailsKeepRelativePrecision) {
    auto rel = [](double got, double want) { return std::fabs(got - want) / std::max(1e-300, std::fabs(want)); };
    for (double x = -12; x <= -4; x += 0.125) {  // GeLU's negative tail: 0.5 x erfc(-x / sqrt 2)
        EXPECT_LT(rel(neuronForward(kNeuronGeLU, 0, 0, 0, 0, float(x)), testref::neuronF(kNeuronGeLU, 0, 0, 0, 0, x)), 1e-5)
            << "GeLU x=" << x;
        EXPECT_LT(rel(neuronDerivative(kNeuronGeLU, 0, 0, 0, 0, float(x)), testref::neuronDf(kNeuronGeLU, 0, 0, 0, 0, x)),
                  1e-4)
            << "GeLU' x=" << x;
    }
    for (double x = -30; x <= 30; x += 0.25) {  // sigmoid' in both tails
        EXPECT_LT(rel(neuronDerivative(kNeuronSigmoid, 0, 0, 0, 0, float(x)),
                      testref::neuronDf(kNeuronSigmoid, 0, 0, 0, 0, x)),
                  1e-5)
            << "Sigmoid' x=" << x;
    }
    for (double x = -40; x <= 40; x += 0.25) {  // softplus: no overflow, e^x kept for very negative x
        EXPECT_LT(rel(neuronForward(kNeuronSoftPlus, 1, 1, 0, 0, float(x)), testref::neuronF(kNeuronSoftPlus, 1, 1, 0, 0, x)),
                  1e-5)
            << "SoftPlus x=" << x;
    }
    for (double x = -1e-3; x < 0; x += 1e-5) {  // ELU near 0: a * expm1(x)
        EXPECT_LT(rel(neuronForward(kNeuronELU, 1, 0, 0, 0, float(x)), testref::neuronF(kNeuronELU, 1, 0, 0, 0, x)), 1e-5)
            << "ELU x=" << x;
    }
    for (double x0 = -6; x0 <= 6; x0 += 0.01) {  // erf / erfc themselves, at the float argument
        const double x = double(float(x0));
        EXPECT_NEAR(neuronErf(float(x)), std::erf(x), 2e-7) << "erf x=" << x;
        // In float, the exponent -x^2 - ... carries ~x^2 * 6e-8 absolute error: relative error
        // of erfc grows to ~1e-5 at x = 6 (erfc(6) = 2e-17) and is ~1e-7 near 0.
        EXPECT_LT(rel(neuronErfc(float(x)), std::erfc(x)), 2e-7 + 3e-7 * x * x) << "erfc x=" << x;
    }
}

TEST(NeuronMath, KinksAndSpecialValues) {
    // Values at kinks: the x >= 0 branch (spec §2.2), strict interior for HardSigmoid.
    EXPECT_EQ(neuronDerivative(kNeuronReLU, 0.1f, 0, 0, 0, 0.0f), 1.0f);
    EXPECT_EQ(neuronDerivative(kNeuronPReLU, 0, 0, 0, 0.3f, 0.0f), 1.0f);
    EXPECT_EQ(neuronDerivative(kNeuronELU, 2.0f, 0, 0, 0, 0.0f), 1.0f);
    EXPECT_EQ(neuronDerivative(kNeuronAbsolute, 0, 0, 0, 0, 0.0f), 0.0f);
    EXPECT_EQ(neuronDerivative(kNeuronHardSigmoid, 0.2f, 0.5f, 0, 0, -2.5f), 0.0f);
    EXPECT_EQ(neuronDerivative(kNeuronHardSigmoid, 0.2f, 0.5f, 0, 0, 0.0f), 0.2f);
    EXPECT_EQ(neuronDerivative(kNeuronReLUN, 0.1f, 6.0f, 0, 0, 6.0f), 0.0f);   // pre-clamp value >= b
    EXPECT_EQ(neuronDerivative(kNeuronReLUN, 0.1f, 6.0f, 0, 0, 5.99f), 1.0f);
    EXPECT_EQ(neuronDerivative(kNeuronReLUN, 0.1f, 6.0f, 0, 0, -1.0f), 0.1f);
    // Power with c = 0 is the constant 1: derivative 0 even where a*x+b = 0.
    EXPECT_EQ(neuronForward(kNeuronPower, 1, 0, 0, 0, 0.0f), 1.0f);
    EXPECT_EQ(neuronDerivative(kNeuronPower, 1, 0, 0, 0, 0.0f), 0.0f);
    // Negative bases: integral exponents keep their sign, fractional ones give NaN as real pow.
    EXPECT_EQ(neuronForward(kNeuronPower, 1, 0, 3, 0, -2.0f), -8.0f);
    EXPECT_EQ(neuronForward(kNeuronPower, 1, 0, 2, 0, -2.0f), 4.0f);
    EXPECT_TRUE(std::isnan(neuronForward(kNeuronPower, 1, 0, 0.5f, 0, -2.0f)));
    // NaN propagates through the clamping neurons (no silent replacement).
    const float nan = std::nanf("");
    for (int t : {kNeuronReLU, kNeuronHardSigmoid, kNeuronReLUN, kNeuronSigmoid, kNeuronTanH, kNeuronSoftPlus,
                  kNeuronELU, kNeuronGeLU, kNeuronAbsolute, kNeuronSoftSign})
        EXPECT_TRUE(std::isnan(neuronForward(t, 0.1f, 6.0f, 0, 0, nan))) << "type " << t;
    // No overflow at large magnitudes.
    EXPECT_EQ(neuronForward(kNeuronSigmoid, 0, 0, 0, 0, -200.0f), 0.0f);
    EXPECT_EQ(neuronForward(kNeuronSigmoid, 0, 0, 0, 0, 200.0f), 1.0f);
    EXPECT_EQ(neuronForward(kNeuronSoftPlus, 1, 1, 0, 0, 200.0f), 200.0f);
    EXPECT_EQ(neuronDerivative(kNeuronSigmoid, 0, 0, 0, 0, 200.0f), 0.0f);
    EXPECT_FLOAT_EQ(neuronForward(kNeuronGeLU, 0, 0, 0, 0, 50.0f), 50.0f);
    EXPECT_EQ(neuronForward(kNeuronELU, 1, 0, 0, 0, -200.0f), -1.0f);
}

// Dense bindings (channels == pixelStride, full rows) take the flat fast path.
TEST(NeuronOpsLayout, DenseImagesAndManyChannels) {
    for (int channels : {1, 4, 33}) {
        std::mt19937 rng(5 + channels);
        TestImage src = TestImage::make(3, 9, 5, channels, 0, channels);
        TestImage dst = TestImage::make(3, 9, 5, channels, 0, channels);
        src.fillInput(rng, -3, 3);
        NeuronForwardParams p{};
        p.source = src.layout;
        p.destination = dst.layout;
        p.batch = 3;
        p.clipWidth = 9;
        p.clipHeight = 5;
        p.neuron = NeuronParams{kNeuronTanH, 1.5f, 0.7f, 0, 0};
        cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data());
        EXPECT_TRUE(testref::matches(dst, testref::neuronForward(p, src.data.data(), nullptr, dst.data.size()), 4e-6,
                                     1e-6))
            << channels;
    }
}

TEST(NeuronOpsLayout, LargeImageWithChannelOffset) {
    // A large image with several parallel chunks, destination channel offset 4 of 12.
    std::mt19937 rng(11);
    TestImage src = TestImage::make(2, 131, 37, 8, 0, 7);
    TestImage dst = TestImage::make(2, 131, 37, 12, 4, 7);
    src.fillInput(rng, -3, 3);
    NeuronForwardParams p{};
    p.source = src.layout;
    p.destination = dst.layout;
    p.batch = 2;
    p.clipWidth = 131;
    p.clipHeight = 37;
    p.neuron = NeuronParams{kNeuronELU, 0.7f, 0, 0, 0};
    cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data());
    EXPECT_TRUE(testref::matches(dst, testref::neuronForward(p, src.data.data(), nullptr, dst.data.size()), 4e-6, 1e-6));
}

TEST(NeuronOpsPReLU, WeightGradientExtension) {
    std::mt19937 rng(21);
    const int C = 6;
    TestImage x = TestImage::make(3, 40, 30, 8, 0, C);
    TestImage g = TestImage::make(3, 40, 30, 8, 0, C);
    x.fillInput(rng, -2, 2);
    g.fillInput(rng, -1, 1);
    NeuronGradientParams p{};
    p.gradient = g.layout;
    p.source = x.layout;
    p.destination = x.layout;
    p.batch = 3;
    p.gradientX = 1;
    p.sourceX = 1;
    p.sourceY = 2;
    p.gradientY = 2;
    p.clipWidth = 38;
    p.clipHeight = 27;
    p.neuronDataOffset = 2;
    p.neuron = NeuronParams{kNeuronPReLU, 0, 0, 0, 1};
    std::vector<float> da(size_t(2 + C), 55.0f);
    cpu::cnnNeuronPReLUWeightGradient(p, g.data.data(), x.data.data(), da.data());
    std::vector<float> again(da.size(), 55.0f);
    cpu::cnnNeuronPReLUWeightGradient(p, g.data.data(), x.data.data(), again.data());
    EXPECT_EQ(da, again) << "not bitwise reproducible";
    EXPECT_EQ(da[0], 55.0f);
    EXPECT_EQ(da[1], 55.0f);
    for (int c = 0; c < C; ++c) {
        double want = 0, mag = 0;
        for (int n = 0; n < 3; ++n)
            for (int y = 0; y < p.clipHeight; ++y)
                for (int xx = 0; xx < p.clipWidth; ++xx) {
                    double xv = x.at(n, p.sourceX + xx, p.sourceY + y, c);
                    double gv = g.at(n, p.gradientX + xx, p.gradientY + y, c);
                    want += gv * std::min(xv, 0.0);
                    mag += std::fabs(gv * std::min(xv, 0.0));
                }
        EXPECT_NEAR(da[size_t(2 + c)], want, 1e-5 * mag) << "channel " << c;
    }
}

TEST(NeuronOpsValidation, RejectsBadParams) {
    TestImage src = TestImage::make(1, 4, 4, 4, 0, 4);
    TestImage dst = TestImage::make(1, 4, 4, 4, 0, 4);
    NeuronForwardParams p{};
    p.source = src.layout;
    p.destination = dst.layout;
    p.batch = 1;
    p.clipX = 1;
    p.clipWidth = 4;  // 1 + 4 > 4
    p.clipHeight = 4;
    p.neuron = NeuronParams{kNeuronReLU, 0, 0, 0, 0};
    EXPECT_THROW(cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data()), std::invalid_argument);
    p.clipX = 0;
    p.neuron.type = 42;
    EXPECT_THROW(cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data()), std::invalid_argument);
    p.neuron = NeuronParams{kNeuronPReLU, 0, 0, 0, 1};
    EXPECT_THROW(cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data()), std::invalid_argument);
    p.neuron = NeuronParams{kNeuronReLU, 0, 0, 0, 0};
    p.destination.channelOffset = 2;  // 2 + 4 > pixelStride 4
    EXPECT_THROW(cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data()), std::invalid_argument);
    // An empty clip writes nothing.
    p.destination = dst.layout;
    p.clipWidth = 0;
    cpu::cnnNeuronForward(p, src.data.data(), nullptr, dst.data.data());
    for (float v : dst.data) EXPECT_EQ(v, testref::kSentinel);
}

}  // namespace
}  // namespace mpsgrad
