// CPU optimizer update (cpu::optimizerUpdate) against a double-precision transcription of spec
// §2.13 written here independently of metal/optimizer_math.h: every rule, the preprocessing
// (clip, rescale, L1 / L2), in-place results, and the encode-time binding checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "mpsgrad/backend/binding_checks.h"
#include "mpsgrad/backend/cpu/cpu_ops.h"
#include "mpsgrad/backend/cpu/cpu_backend.h"
#include "mpsgrad/core/errors.h"

namespace mpsgrad {
namespace {

struct Rule {
    const char* name;
    int32_t kind;
    int32_t hasState0, nesterov, amsgrad, regularization;
    int32_t clip;
};

double preprocess(const OptimizerParams& p, double g, double w) {
    if (p.applyGradientClipping) g = std::min<double>(std::max<double>(g, p.gradientClipMin), p.gradientClipMax);
    g *= p.gradientRescale;
    if (p.regularizationType == kRegularizationL1) g += p.regularizationScale * ((w > 0) - (w < 0));
    if (p.regularizationType == kRegularizationL2) g += p.regularizationScale * w;
    return g;
}

// One step of the reference on doubles; returns the new w.
double referenceStep(const OptimizerParams& p, double g, double w, double& s0, double& s1, double& s2) {
    g = preprocess(p, g, w);
    switch (p.kind) {
        case kOptimizerSGD:
            if (!p.hasState0) return w - p.learningRate * g;
            if (p.useNesterov) {
                s0 = p.momentumScale * s0 + g;
                return w - p.learningRate * (g + p.momentumScale * s0);
            }
            s0 = p.momentumScale * s0 + p.learningRate * g;
            return w - s0;
        case kOptimizerRMSProp:
            s0 = p.decay * s0 + (1 - p.decay) * g * g;
            return w - p.learningRate * g / (std::sqrt(s0) + p.epsilon);
        default:
            s0 = p.beta1 * s0 + (1 - p.beta1) * g;
            s1 = p.beta2 * s1 + (1 - p.beta2) * g * g;
            s2 = std::max(s2, s1);
            return w - p.learningRate * s0 / (std::sqrt(p.amsgrad ? s2 : s1) + p.epsilon);
    }
}

class CpuOptimizer : public ::testing::TestWithParam<Rule> {};

TEST_P(CpuOptimizer, TenStepsMatchTheDoubleReference) {
    const Rule r = GetParam();
    const int n = 777;
    OptimizerParams p{};
    p.count = n;
    p.kind = r.kind;
    p.learningRate = 0.05f;
    p.gradientRescale = 0.75f;
    p.applyGradientClipping = r.clip;
    p.gradientClipMax = 1.0f;
    p.gradientClipMin = -0.5f;
    p.regularizationType = r.regularization;
    p.regularizationScale = 0.01f;
    p.hasState0 = r.hasState0;
    p.useNesterov = r.nesterov;
    p.momentumScale = 0.9f;
    p.decay = 0.9f;
    p.beta1 = 0.9f;
    p.beta2 = 0.99f;
    p.amsgrad = r.amsgrad;
    p.epsilon = 1e-6f;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> w(n), s0(n), s1(n), s2(n), g(n);
    for (float& x : w) x = normal(rng);
    w[0] = 0.0f;  // L1's sign(0) = 0
    std::vector<double> rw(w.begin(), w.end()), r0(n), r1(n), r2(n);
    for (int step = 0; step < 10; ++step) {
        for (float& x : g) x = 2.0f * normal(rng);
        // In place: result aliases values.
        cpu::optimizerUpdate(p, g.data(), w.data(), s0.data(), s1.data(), s2.data(), w.data());
        for (int i = 0; i < n; ++i) rw[i] = referenceStep(p, g[i], rw[i], r0[i], r1[i], r2[i]);
    }
    double worst = 0, scale = 0;
    for (int i = 0; i < n; ++i) {
        worst = std::max(worst, std::fabs(w[i] - rw[i]));
        scale = std::max(scale, std::fabs(rw[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << r.name;
}

INSTANTIATE_TEST_SUITE_P(Rules, CpuOptimizer,
                         ::testing::Values(Rule{"SgdPlain", kOptimizerSGD, 0, 0, 0, kRegularizationNone, 0},
                                           Rule{"SgdMomentumL2", kOptimizerSGD, 1, 0, 0, kRegularizationL2, 0},
                                           Rule{"SgdNesterovClipL1", kOptimizerSGD, 1, 1, 0, kRegularizationL1, 1},
                                           Rule{"RmsPropClip", kOptimizerRMSProp, 1, 0, 0, kRegularizationNone, 1},
                                           Rule{"AdamL2", kOptimizerAdam, 1, 0, 0, kRegularizationL2, 0},
                                           Rule{"AmsGradClipL1", kOptimizerAdam, 1, 0, 1, kRegularizationL1, 1}),
                         [](const ::testing::TestParamInfo<Rule>& info) { return std::string(info.param.name); });

TEST(CpuOptimizerBindings, ShortBuffersAndUnknownKindsAreRejected) {
    auto backend = makeCpuBackend();
    BufferSlice big{backend->newBuffer(400), 0}, small{backend->newBuffer(396), 0};
    OptimizerParams p{};
    p.count = 100;
    p.kind = kOptimizerAdam;
    EXPECT_NO_THROW(bindings::checkOptimizerUpdate(p, big, big, big, big, BufferSlice{}, big));
    EXPECT_THROW(bindings::checkOptimizerUpdate(p, big, big, big, small, BufferSlice{}, big), ValueError);
    EXPECT_THROW(bindings::checkOptimizerUpdate(p, big, big, big, big, BufferSlice{}, big.advancedBy(4)), ValueError);
    p.amsgrad = 1;
    EXPECT_THROW(bindings::checkOptimizerUpdate(p, big, big, big, big, BufferSlice{}, big), ValueError);
    p.kind = 7;
    EXPECT_THROW(bindings::checkOptimizerUpdate(p, big, big, big, big, big, big), ValueError);
    p.kind = kOptimizerSGD;
    p.hasState0 = 0;  // no momentum: state0 not needed
    EXPECT_NO_THROW(bindings::checkOptimizerUpdate(p, big, big, BufferSlice{}, BufferSlice{}, BufferSlice{}, big));
}

}  // namespace
}  // namespace mpsgrad
