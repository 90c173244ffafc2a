// Every kernel of the batch normalization family on the Metal backend, compared with the CPU backend
// (test_metal_variants_pooling.cpp does the same for pooling, upsampling and dropout).
//
// The family's kernels read no function constants, so each has one variant
// (tests/metal_emulation/coverage/kernel_variants.py); what varies is the data: every binding at a
// 0- or 1-float offset (all aligned, all shifted, and each binding shifted alone), the fused neuron
// (none, tanh, PReLU with per-channel data), the statistics' and statistics gradient's
// previousCount (overwrite, accumulate) and the gradient's trainingStatistics (1, 0). Images are
// 2 x 13 x 11 with 5 channels at channel offset 2 of an 8-float pixel: 286 pixels per channel, more
// than the reductions' 256 threads. Outputs are pre-filled with noise and compared whole.
#ifdef MPSGRAD_HAS_METAL

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/metal/metal_backend.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "pooling_scenarios.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::download;
using testmetal::expectMatches;
using testmetal::masks;
using testmetal::runOnMetal;
using testmetal::shifted;
using testmetal::upload;

using testpool::floatsOf;
using testpool::noise;

constexpr int kBatch = 2;
constexpr int kChannels = 5;

ImageLayout layout() {
    ImageLayout l{};
    l.width = 13, l.height = 11;
    l.pixelStride = 8;
    l.imageStride = l.pixelStride * l.width * l.height;
    l.channelOffset = 2, l.channels = kChannels;
    return l;
}

NeuronParams neuron(int kind) {  // 0 none, 1 tanh, 2 PReLU
    NeuronParams n{};
    n.type = kind == 0 ? kNeuronNone : kind == 1 ? kNeuronTanH : kNeuronPReLU;
    n.hasChannelData = kind == 2;
    return n;
}

// The inputs every op shares. Vector order in the masks: gamma, beta, mean, variance, neuron data,
// gamma gradient, beta gradient.
struct Inputs {
    BatchNormalizationParams p{};
    std::vector<float> x, g, gamma, beta, mean, variance, slopes, dGamma, dBeta;

    Inputs(int kind, unsigned seed) {
        p.source = p.gradient = p.destination = layout();
        p.batch = kBatch;
        p.epsilon = 1e-3f;
        p.neuron = neuron(kind);
        p.totalCount = kBatch * layout().width * layout().height;
        p.trainingStatistics = 1;
        x = noise(floatsOf(layout(), kBatch), seed);
        for (float& v : x) v = 2.0f * v + 3.0f;  // far from zero: the shifted sums matter
        g = noise(floatsOf(layout(), kBatch), seed + 1);
        gamma = noise(kChannels, seed + 2);
        beta = noise(kChannels, seed + 3);
        mean = noise(kChannels, seed + 4);
        variance = noise(kChannels, seed + 5);
        for (float& v : variance) v = std::fabs(v) + 0.5f;
        slopes = noise(kChannels, seed + 6);
        dGamma = noise(kChannels, seed + 7);
        dBeta = noise(kChannels, seed + 8);
    }

    // The vectors on `backend`, binding i + first shifted when the mask says so.
    Backend::BatchNormalizationVectors vectors(Backend& b, unsigned mask, int first) const {
        Backend::BatchNormalizationVectors v;
        const std::vector<float>* data[] = {&gamma, &beta, &mean, &variance, &slopes, &dGamma, &dBeta};
        BufferSlice* slots[] = {&v.gamma, &v.beta, &v.mean, &v.variance, &v.neuronData, &v.gammaGradient,
                                &v.betaGradient};
        for (int i = 0; i < 7; ++i) *slots[i] = upload(b, *data[i], shifted(mask, first + i));
        if (!p.neuron.hasChannelData) v.neuronData = BufferSlice{};
        return v;
    }
};

std::string caseName(const char* op, int kind, int flag, unsigned mask) {
    return std::string(op) + ", neuron " + std::to_string(kind) + ", flag " + std::to_string(flag) + ", mask " +
           std::to_string(mask);
}

// Bindings: 0 source, 1.. the vectors (mean and variance are the ones read and written).
void statisticsCase(int previousCount, unsigned mask) {
    Inputs in(0, 11 + mask);
    in.p.previousCount = previousCount;
    std::vector<float> mean = in.mean, variance = in.variance;
    cpu::batchNormalizationStatistics(in.p, in.x.data(), mean.data(), variance.data());
    Backend::BatchNormalizationVectors v;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        v = in.vectors(b, mask, 1);
        b.batchNormalizationStatistics(cb, in.p, upload(b, in.x, shifted(mask, 0)), v);
    });
    const std::string what = caseName("statistics", 0, previousCount, mask);
    expectMatches(download(v.mean, kChannels), mean, what + " mean");
    expectMatches(download(v.variance, kChannels), variance, what + " variance");
}

TEST(MetalVariantsBatchNormalization, StatisticsEveryAlignment) {
    REQUIRE_METAL();
    for (int previousCount : {0, 100})
        for (unsigned mask : masks(8)) statisticsCase(previousCount, mask);
}

// Bindings: 0 source, 1 destination, 2.. the vectors.
void forwardCase(int kind, unsigned mask) {
    Inputs in(kind, 21 + mask);
    const std::vector<float> y0 = noise(in.x.size(), 31 + mask);
    std::vector<float> y = y0;
    cpu::batchNormalizationForward(in.p, in.x.data(), in.gamma.data(), in.beta.data(), in.mean.data(),
                                   in.variance.data(), kind == 2 ? in.slopes.data() : nullptr, y.data());
    BufferSlice my;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0, shifted(mask, 1));
        b.batchNormalizationForward(cb, in.p, upload(b, in.x, shifted(mask, 0)), in.vectors(b, mask, 2), my);
    });
    expectMatches(download(my, y.size()), y, caseName("forward", kind, 0, mask));
}

TEST(MetalVariantsBatchNormalization, ForwardEveryNeuronAndAlignment) {
    REQUIRE_METAL();
    for (int kind : {0, 1, 2})
        for (unsigned mask : masks(9)) forwardCase(kind, mask);
}

// Bindings: 0 gradient, 1 source, 2.. the vectors.
void statisticsGradientCase(int kind, int previousCount, unsigned mask) {
    Inputs in(kind, 41 + mask);
    in.p.previousCount = previousCount;
    std::vector<float> dGamma = in.dGamma, dBeta = in.dBeta;
    cpu::batchNormalizationStatisticsGradient(in.p, in.g.data(), in.x.data(), in.gamma.data(), in.beta.data(),
                                              in.mean.data(), in.variance.data(),
                                              kind == 2 ? in.slopes.data() : nullptr, dGamma.data(), dBeta.data());
    Backend::BatchNormalizationVectors v;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        v = in.vectors(b, mask, 2);
        b.batchNormalizationStatisticsGradient(cb, in.p, upload(b, in.g, shifted(mask, 0)),
                                               upload(b, in.x, shifted(mask, 1)), v);
    });
    const std::string what = caseName("statistics gradient", kind, previousCount, mask);
    expectMatches(download(v.gammaGradient, kChannels), dGamma, what + " gamma gradient");
    expectMatches(download(v.betaGradient, kChannels), dBeta, what + " beta gradient");
}

TEST(MetalVariantsBatchNormalization, StatisticsGradientEveryNeuronAndAlignment) {
    REQUIRE_METAL();
    for (int kind : {0, 1, 2})
        for (int previousCount : {0, 1})
            for (unsigned mask : masks(9)) statisticsGradientCase(kind, previousCount, mask);
}

// Bindings: 0 gradient, 1 source, 2 destination, 3.. the vectors.
void gradientCase(int kind, int training, unsigned mask) {
    Inputs in(kind, 51 + mask);
    in.p.trainingStatistics = training;
    const std::vector<float> d0 = noise(in.x.size(), 61 + mask);
    std::vector<float> d = d0;
    cpu::batchNormalizationGradient(in.p, in.g.data(), in.x.data(), in.gamma.data(), in.beta.data(), in.mean.data(),
                                    in.variance.data(), kind == 2 ? in.slopes.data() : nullptr, in.dGamma.data(),
                                    in.dBeta.data(), d.data());
    BufferSlice md;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        md = upload(b, d0, shifted(mask, 2));
        b.batchNormalizationGradient(cb, in.p, upload(b, in.g, shifted(mask, 0)), upload(b, in.x, shifted(mask, 1)),
                                     in.vectors(b, mask, 3), md);
    });
    expectMatches(download(md, d.size()), d, caseName("gradient", kind, training, mask));
}

TEST(MetalVariantsBatchNormalization, GradientEveryNeuronModeAndAlignment) {
    REQUIRE_METAL();
    for (int kind : {0, 1, 2})
        for (int training : {1, 0})
            for (unsigned mask : masks(10)) gradientCase(kind, training, mask);
}

// The bindings are checked before anything is encoded: a vector one float short is a ValueError.
TEST(MetalVariantsBatchNormalization, ShortBindingsAreRejected) {
    REQUIRE_METAL();
    Inputs in(2, 71);
    for (const char* device : {"metal", "cpu"}) {
        Device dev(device);
        CommandQueue queue(dev);
        auto cb = queue.commandBuffer();
        Backend& b = dev.backend();
        Backend::BatchNormalizationVectors v = in.vectors(b, 0, 0);
        std::vector<float> shortVector(kChannels - 1, 1.0f);
        v.neuronData = upload(b, shortVector, false);
        EXPECT_THROW(b.batchNormalizationForward(*cb, in.p, upload(b, in.x, false), v, upload(b, in.x, false)),
                     ValueError)
            << device;
        v = in.vectors(b, 0, 0);
        std::vector<float> shortImage(in.x.size() - 2, 0.0f);  // the last pixel ends 1 float before its stride
        EXPECT_THROW(b.batchNormalizationGradient(*cb, in.p, upload(b, in.g, false), upload(b, shortImage, false), v,
                                                  upload(b, in.x, false)),
                     ValueError)
            << device;
        cb->commit();
        cb->waitUntilCompleted();
    }
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
