// CPU batch normalization ops (statistics, forward, statistics gradient, gradient) against
// double-precision references written here, and the training-mode gradient against float64 central
// finite differences of the loss sum(Y·G) through the whole batch normalization (batch statistics
// included). Images sit at channel offset 4 of a wider pixel (tests the layouts); 5 channels (a
// partial quad) and 37 channels (three channel blocks of the reductions).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "mpsgrad/backend/cpu/cpu_ops.h"
#include "metal/neuron_math.h"

namespace mpsgrad {
namespace {

struct Batch {
    int n, h, w, c;
    ImageLayout layout() const {
        const int stride = (c + 3) / 4 * 4 + 4;
        return ImageLayout{w, h, stride, stride * w * h, 4, c};
    }
    size_t floats() const { return size_t(layout().imageStride) * size_t(n); }
    size_t at(int i, int j, int k) const {  // image i, pixel j, channel k
        const ImageLayout l = layout();
        return size_t(i) * size_t(l.imageStride) + size_t(j) * size_t(l.pixelStride) + size_t(l.channelOffset + k);
    }
};

std::vector<float> random(size_t count, unsigned seed, float scale, float offset) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = dist(gen) * scale + offset;
    return v;
}

BatchNormalizationParams paramsFor(const Batch& b, NeuronParams neuron) {
    BatchNormalizationParams p{};
    p.source = p.gradient = p.destination = b.layout();
    p.batch = b.n;
    p.epsilon = 1e-3f;
    p.neuron = neuron;
    p.trainingStatistics = 1;
    return p;
}

// Reference forward / loss of the whole training-mode batch normalization in double precision.
struct Reference {
    Batch b;
    std::vector<double> gamma, beta;
    NeuronParams neuron;
    double epsilon;

    void statistics(const std::vector<double>& x, std::vector<double>& mean, std::vector<double>& var) const {
        const double M = double(b.n) * b.h * b.w;
        mean.assign(size_t(b.c), 0.0);
        var.assign(size_t(b.c), 0.0);
        for (int k = 0; k < b.c; ++k) {
            for (int i = 0; i < b.n; ++i)
                for (int j = 0; j < b.h * b.w; ++j) mean[size_t(k)] += x[b.at(i, j, k)];
            mean[size_t(k)] /= M;
            for (int i = 0; i < b.n; ++i)
                for (int j = 0; j < b.h * b.w; ++j) {
                    const double d = x[b.at(i, j, k)] - mean[size_t(k)];
                    var[size_t(k)] += d * d;
                }
            var[size_t(k)] /= M;
        }
    }
    double activation(double z) const {
        if (neuron.type == kNeuronNone) return z;
        if (neuron.type == kNeuronSigmoid) return 1.0 / (1.0 + std::exp(-z));
        return neuron.a * std::tanh(neuron.b * z);  // kNeuronTanH
    }
    // sum(Y·G) with batch statistics.
    double loss(const std::vector<double>& x, const std::vector<float>& g) const {
        std::vector<double> mean, var;
        statistics(x, mean, var);
        double total = 0.0;
        for (int i = 0; i < b.n; ++i)
            for (int j = 0; j < b.h * b.w; ++j)
                for (int k = 0; k < b.c; ++k) {
                    const size_t e = b.at(i, j, k);
                    const double z = (x[e] - mean[size_t(k)]) / std::sqrt(var[size_t(k)] + epsilon) * gamma[size_t(k)] +
                                     beta[size_t(k)];
                    total += activation(z) * g[e];
                }
        return total;
    }
};

class BatchNormalizationOps : public ::testing::TestWithParam<int> {};

TEST_P(BatchNormalizationOps, AllFourOpsMatchReferencesAndFiniteDifferences) {
    const int C = GetParam();
    const Batch b{3, 4, 5, C};
    const NeuronParams neuron{kNeuronTanH, 1.5f, 0.7f, 0.0f, 0};
    std::vector<float> x = random(b.floats(), 1, 2.0f, 3.0f), g = random(b.floats(), 2, 1.0f, 0.0f);
    std::vector<float> gamma = random(size_t(C), 3, 0.3f, 1.0f), beta = random(size_t(C), 4, 0.2f, 0.0f);
    BatchNormalizationParams p = paramsFor(b, neuron);

    // Statistics over two sub-batches (image 0, then images 1-2) equal those of the whole batch.
    std::vector<float> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
    BatchNormalizationParams first = p, rest = p;
    first.batch = 1;
    rest.batch = 2;
    rest.previousCount = b.h * b.w;
    cpu::batchNormalizationStatistics(first, x.data(), mean.data(), var.data());
    cpu::batchNormalizationStatistics(rest, x.data() + b.layout().imageStride, mean.data(), var.data());
    const Reference ref{b, std::vector<double>(gamma.begin(), gamma.end()), std::vector<double>(beta.begin(), beta.end()),
                        neuron, double(p.epsilon)};
    std::vector<double> x64(x.begin(), x.end()), refMean, refVar;
    ref.statistics(x64, refMean, refVar);
    for (int k = 0; k < C; ++k) {
        EXPECT_NEAR(mean[size_t(k)], refMean[size_t(k)], 1e-5 * 3.0) << "channel " << k;
        EXPECT_NEAR(var[size_t(k)], refVar[size_t(k)], 1e-5 * refVar[size_t(k)]) << "channel " << k;
    }

    // Forward.
    std::vector<float> y(b.floats(), -7.0f);
    cpu::batchNormalizationForward(p, x.data(), gamma.data(), beta.data(), mean.data(), var.data(), nullptr, y.data());
    for (int i = 0; i < b.n; ++i)
        for (int j = 0; j < b.h * b.w; ++j)
            for (int k = 0; k < C; ++k) {
                const size_t e = b.at(i, j, k);
                const double z = (x64[e] - refMean[size_t(k)]) / std::sqrt(refVar[size_t(k)] + p.epsilon) * gamma[size_t(k)] +
                                 beta[size_t(k)];
                ASSERT_NEAR(y[e], ref.activation(z), 2e-5);
            }
    EXPECT_EQ(y[0], -7.0f) << "floats outside the channel slice stay untouched";

    // Statistics gradient (two sub-batches) and gradient against finite differences.
    std::vector<float> dGamma(static_cast<size_t>(C)), dBeta(static_cast<size_t>(C)), dx(b.floats(), 0.0f);
    BatchNormalizationParams sgFirst = first, sgRest = rest;
    sgRest.previousCount = 1;
    cpu::batchNormalizationStatisticsGradient(sgFirst, g.data(), x.data(), gamma.data(), beta.data(), mean.data(),
                                              var.data(), nullptr, dGamma.data(), dBeta.data());
    const size_t skip = size_t(b.layout().imageStride);
    cpu::batchNormalizationStatisticsGradient(sgRest, g.data() + skip, x.data() + skip, gamma.data(), beta.data(),
                                              mean.data(), var.data(), nullptr, dGamma.data(), dBeta.data());
    p.totalCount = b.n * b.h * b.w;
    cpu::batchNormalizationGradient(p, g.data(), x.data(), gamma.data(), beta.data(), mean.data(), var.data(), nullptr,
                                    dGamma.data(), dBeta.data(), dx.data());
    double scale = 0.0;
    std::vector<double> numeric(b.floats(), 0.0);
    for (int i = 0; i < b.n; ++i)
        for (int j = 0; j < b.h * b.w; j += 3)
            for (int k = 0; k < C; k += 2) {
                const size_t e = b.at(i, j, k);
                const double h = 1e-4;
                std::vector<double> xp = x64, xm = x64;
                xp[e] += h;
                xm[e] -= h;
                numeric[e] = (ref.loss(xp, g) - ref.loss(xm, g)) / (2 * h);
                scale = std::max(scale, std::fabs(numeric[e]));
            }
    for (int i = 0; i < b.n; ++i)
        for (int j = 0; j < b.h * b.w; j += 3)
            for (int k = 0; k < C; k += 2) {
                const size_t e = b.at(i, j, k);
                EXPECT_NEAR(dx[e], numeric[e], 1e-4 * scale) << "image " << i << " pixel " << j << " channel " << k;
            }
    // dγ, dβ against finite differences in gamma / beta.
    for (int k = 0; k < C; k += 2) {
        const double h = 1e-5;
        Reference rp = ref, rm = ref;
        rp.gamma[size_t(k)] += h;
        rm.gamma[size_t(k)] -= h;
        const double ng = (rp.loss(x64, g) - rm.loss(x64, g)) / (2 * h);
        rp = ref;
        rm = ref;
        rp.beta[size_t(k)] += h;
        rm.beta[size_t(k)] -= h;
        const double nb = (rp.loss(x64, g) - rm.loss(x64, g)) / (2 * h);
        EXPECT_NEAR(dGamma[size_t(k)], ng, 1e-4 * std::max(1.0, std::fabs(ng)));
        EXPECT_NEAR(dBeta[size_t(k)], nb, 1e-4 * std::max(1.0, std::fabs(nb)));
    }
}

// 5: scalar channels only; 29 = 16 + 8 + 5 and 37 = 2·16 + 5: every path of the reductions' channel grouping.
INSTANTIATE_TEST_SUITE_P(Channels, BatchNormalizationOps, ::testing::Values(5, 29, 37));

TEST(BatchNormalizationOps, NonPositiveVariancePlusEpsilonThrows) {
    const Batch b{1, 2, 2, 3};
    std::vector<float> x(b.floats(), 1.0f), y(b.floats());
    std::vector<float> gamma(3, 1.0f), beta(3, 0.0f), mean(3, 0.0f), var{1.0f, -2.0f, 1.0f};
    const BatchNormalizationParams p = paramsFor(b, NeuronParams{kNeuronNone, 0, 0, 0, 0});
    EXPECT_THROW(cpu::batchNormalizationForward(p, x.data(), gamma.data(), beta.data(), mean.data(), var.data(), nullptr,
                                                y.data()),
                 std::invalid_argument);
}

TEST(BatchNormalizationOps, ConstantChannelHasZeroVariance) {
    const Batch b{2, 3, 3, 4};
    std::vector<float> x(b.floats(), 1000.5f), mean(4), var(4);
    cpu::batchNormalizationStatistics(paramsFor(b, NeuronParams{}), x.data(), mean.data(), var.data());
    for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(mean[size_t(k)], 1000.5f);
        EXPECT_EQ(var[size_t(k)], 0.0f);
    }
}

}  // namespace
}  // namespace mpsgrad
