// Every kernel variant of the cross-channel / spatial / local contrast normalization kernels
// (metal/normalization.metal: one function constant, kNormalizationKind), run once per kind and
// compared with the CPU backend. The geometry reaches every branch of the shared index arithmetic:
// 7 channels (not a multiple of 4) with a channel offset, windows hanging off every edge of the
// image, a clip rectangle inside the destination, a gradient region smaller than G, and a dX one
// pixel wider and taller than X (pixels no window reads must come out 0). Each case checks the
// whole destination buffer (pre-filled with noise) against the CPU backend's result.
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
#include "pooling_scenarios.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::download;
using testmetal::runOnMetal;
using testmetal::upload;

// Same bits, or within 1e-5 relative (1e-6 absolute): the backends may sum in other orders.
void expectMatches(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what) {
    testmetal::expectMatches(metal, cpu, what, 1e-5, 1e-6);
}

using namespace testpool;

constexpr int kChannels = 7;
constexpr int kBatch = 2;

// A 4 x 4 window (even: it leans top-left) or a 4-channel window, non-default parameters.
NormalizationParams variantParams(int kind) {
    NormalizationParams p{};
    p.kind = kind;
    const bool cross = kind == kNormalizationCrossChannel;
    p.kernelWidth = p.kernelHeight = cross ? 1 : 4;
    p.channelSize = cross ? 4 : 1;
    p.alpha = 0.75f, p.beta = 0.625f, p.delta = 0.5f;
    p.p0 = kind == kNormalizationLocalContrast ? 0.875f : 1.0f;
    p.pm = kind == kNormalizationLocalContrast ? 0.125f : 0.0f;
    p.ps = kind == kNormalizationLocalContrast ? 1.5f : 1.0f;
    p.batch = kBatch;
    p.source = denseLayout(6, 5, kChannels, 1);
    return p;
}

std::string caseName(const char* op, int kind) { return std::string(op) + ", kind " + std::to_string(kind); }

void forwardVariant(int kind) {
    NormalizationParams p = variantParams(kind);
    p.destination = denseLayout(5, 6, kChannels);
    p.centerX = -1, p.centerY = 1;  // the first windows hang off the left edge, the last off the bottom
    p.clipX = 1, p.clipY = 0, p.clipWidth = 4, p.clipHeight = 5;
    const std::vector<float> x = noise(floatsOf(p.source, kBatch), 11 + kind);
    const std::vector<float> y0 = noise(floatsOf(p.destination, kBatch), 21 + kind);
    std::vector<float> cpuY = y0;
    cpu::normalizationForward(p, x.data(), cpuY.data());
    BufferSlice my;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0);
        b.normalizationForward(cb, p, upload(b, x), my);
    });
    expectMatches(download(my, y0.size()), cpuY, caseName("normalization forward", kind));
}

TEST(MetalVariantsNormalization, ForwardEveryKind) {
    REQUIRE_METAL();
    for (int kind : {kNormalizationCrossChannel, kNormalizationSpatial, kNormalizationLocalContrast})
        forwardVariant(kind);
}

void gradientVariant(int kind) {
    NormalizationParams p = variantParams(kind);
    p.gradient = denseLayout(5, 6, kChannels, 4);
    p.destination = denseLayout(p.source.width + 1, p.source.height + 1, kChannels);
    p.centerX = -1, p.centerY = 1;
    p.gradientX = 1, p.gradientY = 0, p.gradientWidth = 4, p.gradientHeight = 5;
    p.clipX = 0, p.clipY = 0, p.clipWidth = p.destination.width, p.clipHeight = p.destination.height;
    const std::vector<float> g = noise(floatsOf(p.gradient, kBatch), 31 + kind);
    const std::vector<float> x = noise(floatsOf(p.source, kBatch), 41 + kind);
    const std::vector<float> d0 = noise(floatsOf(p.destination, kBatch), 51 + kind);
    std::vector<float> cpuD = d0;
    cpu::normalizationGradient(p, g.data(), x.data(), cpuD.data());
    BufferSlice md;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        md = upload(b, d0);
        b.normalizationGradient(cb, p, upload(b, g), upload(b, x), md);
    });
    const std::string what = caseName("normalization gradient", kind);
    const std::vector<float> metal = download(md, d0.size());
    expectMatches(metal, cpuD, what);
    for (int n = 0; n < kBatch; ++n)
        for (int v = 0; v < p.destination.height; ++v)
            for (int u = 0; u < p.destination.width; ++u) {
                if (u < p.source.width && v < p.source.height) continue;
                for (int c = 0; c < kChannels; ++c)
                    ASSERT_EQ(metal[at(p.destination, n, u, v, c)], 0.0f) << what << ": pixel " << u << ", " << v;
            }
}

TEST(MetalVariantsNormalization, GradientEveryKind) {
    REQUIRE_METAL();
    for (int kind : {kNormalizationCrossChannel, kNormalizationSpatial, kNormalizationLocalContrast})
        gradientVariant(kind);
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
