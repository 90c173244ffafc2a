// The group normalization kernels (which also serve instance normalization) on the Metal backend,
// compared with the CPU backend (test_metal_variants_batch_normalization.cpp does the same for batch
// normalization).
//
// The kernels read no function constants, so each has one variant
// (tests/metal_emulation/coverage/kernel_variants.py); what varies is the data: every binding at a
// 0- or 1-float offset (all aligned, all shifted, and each binding shifted alone) and the grouping
// (one channel per group as instance normalization, 2 and 6 channels per group). Images are
// 2 x 13 x 11 with 6 channels at channel offset 1 of an 8-float pixel: 143 pixels per channel and up
// to 858 values per group, so the reductions' 256 threads all hold data, several values each.
// Outputs are pre-filled with noise and compared whole.
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
using testmetal::masks;
using testmetal::runOnMetal;
using testmetal::shifted;
using testmetal::upload;

// Same bits, or within 2e-5 relative (2e-5 absolute): the backends may sum in other orders.
void expectMatches(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what) {
    testmetal::expectMatches(metal, cpu, what, 2e-5, 2e-5);
}

using testpool::floatsOf;
using testpool::noise;

constexpr int kBatch = 2;
constexpr int kChannels = 6;

ImageLayout layout() {
    ImageLayout l{};
    l.width = 13, l.height = 11;
    l.pixelStride = 8;
    l.imageStride = l.pixelStride * l.width * l.height;
    l.channelOffset = 1, l.channels = kChannels;
    return l;
}

struct Inputs {
    GroupNormalizationParams p{};
    std::vector<float> x, g, gamma, beta, statistics;

    Inputs(int groups, unsigned seed) {
        p.source = p.gradient = p.destination = layout();
        p.batch = kBatch;
        p.groups = groups;
        p.epsilon = 1e-3f;
        x = noise(floatsOf(layout(), kBatch), seed);
        for (float& v : x) v = 2.0f * v + 3.0f;  // far from zero: the shifted sums matter
        g = noise(floatsOf(layout(), kBatch), seed + 1);
        gamma = noise(kChannels, seed + 2);
        beta = noise(kChannels, seed + 3);
        statistics = std::vector<float>(size_t(2 * kBatch * groups), 0.0f);
    }
};

std::string caseName(const char* op, int groups, unsigned mask) {
    return std::string(op) + ", groups " + std::to_string(groups) + ", mask " + std::to_string(mask);
}

// Bindings: 0 source, 1 destination, 2 gamma, 3 beta, 4 statistics.
void forwardCase(int groups, unsigned mask) {
    Inputs in(groups, 21 + mask);
    const std::vector<float> y0 = noise(in.x.size(), 31 + mask);
    std::vector<float> y = y0, statistics = in.statistics;
    cpu::groupNormalizationForward(in.p, in.x.data(), in.gamma.data(), in.beta.data(), statistics.data(), y.data());
    BufferSlice my;
    Backend::GroupNormalizationVectors v;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0, shifted(mask, 1));
        v.gamma = upload(b, in.gamma, shifted(mask, 2));
        v.beta = upload(b, in.beta, shifted(mask, 3));
        v.statistics = upload(b, in.statistics, shifted(mask, 4));
        b.groupNormalizationForward(cb, in.p, upload(b, in.x, shifted(mask, 0)), v, my);
    });
    const std::string what = caseName("forward", groups, mask);
    expectMatches(download(my, y.size()), y, what);
    expectMatches(download(v.statistics, statistics.size()), statistics, what + " statistics");
}

TEST(MetalVariantsGroupNormalization, ForwardEveryGroupingAndAlignment) {
    REQUIRE_METAL();
    for (int groups : {6, 3, 1})
        for (unsigned mask : masks(5)) forwardCase(groups, mask);
}

// Bindings: 0 gradient, 1 source, 2 destination, 3 gamma, 4 statistics, 5 gamma gradient, 6 beta gradient.
void gradientCase(int groups, unsigned mask) {
    Inputs in(groups, 51 + mask);
    std::vector<float> y(in.x.size()), statistics = in.statistics;
    cpu::groupNormalizationForward(in.p, in.x.data(), in.gamma.data(), in.beta.data(), statistics.data(), y.data());
    const std::vector<float> d0 = noise(in.x.size(), 61 + mask), p0 = noise(kChannels, 71 + mask);
    std::vector<float> d = d0, dGamma = p0, dBeta = p0;
    cpu::groupNormalizationGradient(in.p, in.g.data(), in.x.data(), in.gamma.data(), statistics.data(), dGamma.data(),
                                    dBeta.data(), d.data());
    BufferSlice md;
    Backend::GroupNormalizationVectors v;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        md = upload(b, d0, shifted(mask, 2));
        v.gamma = upload(b, in.gamma, shifted(mask, 3));
        v.statistics = upload(b, statistics, shifted(mask, 4));
        v.gammaGradient = upload(b, p0, shifted(mask, 5));
        v.betaGradient = upload(b, p0, shifted(mask, 6));
        b.groupNormalizationGradient(cb, in.p, upload(b, in.g, shifted(mask, 0)), upload(b, in.x, shifted(mask, 1)),
                                     v, md);
    });
    const std::string what = caseName("gradient", groups, mask);
    expectMatches(download(md, d.size()), d, what);
    expectMatches(download(v.gammaGradient, kChannels), dGamma, what + " gamma gradient");
    expectMatches(download(v.betaGradient, kChannels), dBeta, what + " beta gradient");
}

TEST(MetalVariantsGroupNormalization, GradientEveryGroupingAndAlignment) {
    REQUIRE_METAL();
    for (int groups : {6, 3, 1})
        for (unsigned mask : masks(7)) gradientCase(groups, mask);
}

// The bindings are checked before anything is encoded, on both backends.
TEST(MetalVariantsGroupNormalization, BadBindingsAreRejected) {
    REQUIRE_METAL();
    Inputs in(3, 81);
    for (const char* device : {"metal", "cpu"}) {
        Device dev(device);
        CommandQueue queue(dev);
        auto cb = queue.commandBuffer();
        Backend& b = dev.backend();
        Backend::GroupNormalizationVectors v;
        v.gamma = upload(b, in.gamma, false);
        v.beta = upload(b, in.beta, false);
        v.statistics = upload(b, in.statistics, false);
        v.gammaGradient = upload(b, in.gamma, false);
        v.betaGradient = upload(b, in.beta, false);
        const BufferSlice x = upload(b, in.x, false);
        EXPECT_NO_THROW(b.groupNormalizationForward(*cb, in.p, x, v, upload(b, in.x, false))) << device;
        GroupNormalizationParams bad = in.p;
        bad.groups = 4;  // does not divide 6 channels
        EXPECT_THROW(b.groupNormalizationForward(*cb, bad, x, v, upload(b, in.x, false)), ValueError) << device;
        bad.groups = 0;
        EXPECT_THROW(b.groupNormalizationGradient(*cb, bad, x, x, v, upload(b, in.x, false)), ValueError) << device;
        Backend::GroupNormalizationVectors shortStats = v;
        shortStats.statistics = upload(b, std::vector<float>(in.statistics.size() - 1), false);
        EXPECT_THROW(b.groupNormalizationForward(*cb, in.p, x, shortStats, upload(b, in.x, false)), ValueError)
            << device;
        Backend::GroupNormalizationVectors noGradient = v;
        noGradient.betaGradient = BufferSlice{};
        EXPECT_THROW(b.groupNormalizationGradient(*cb, in.p, x, x, noGradient, upload(b, in.x, false)), ValueError)
            << device;
        std::vector<float> shortImage(in.x.size() - 2, 0.0f);  // the last pixel ends 1 float before its stride
        EXPECT_THROW(b.groupNormalizationForward(*cb, in.p, upload(b, shortImage, false), v, x), ValueError) << device;
        cb->commit();
        cb->waitUntilCompleted();
    }
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
