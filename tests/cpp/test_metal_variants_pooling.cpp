// Every kernel variant of the pooling, upsampling and dropout families, run once and compared with
// the CPU backend (test_metal_variants.cpp does the same for the older families).
//
// A variant is a kernel plus its function-constant values (tests/metal_emulation/coverage/
// kernel_variants.py lists them): the pooling or upsampling mode, and one "aligned" flag per
// binding. The host sets a binding's flag when its image has a multiple of 4 channels and every
// pixel's channels start on a 16-byte boundary, so with 8 channels, offsetting each binding by 0
// or 1 float reaches every combination. Each case checks the whole destination buffer (pre-filled
// with noise) against the CPU backend's result, so a variant that reads or writes the wrong floats
// fails here. The geometry also reaches the edge cases of the shared params headers: a pooling dX
// larger than the forward source (pixels no window reads get 0) and a bilinear input one row high.
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

constexpr int kChannels = 8;  // a multiple of 4: the aligned flags depend on the offsets alone
constexpr int kBatch = 2;

// Bit i of `mask`: binding i is misaligned by one float (its aligned flag becomes false).
bool misaligned(unsigned mask, int i) { return (mask >> i) & 1u; }

std::string caseName(const char* op, int mode, unsigned mask) {
    return std::string(op) + ", mode " + std::to_string(mode) + ", mask " + std::to_string(mask);
}

// ---- pooling ----------------------------------------------------------------------------------

// A 3 x 2 window, stride 2 x 1, hanging off the top-left edge; max and L2 read clamped edges,
// average counts the in-band taps only.
PoolingWindow variantWindow(int mode) {
    PoolingWindow w{};
    w.mode = mode;
    w.kernelWidth = 3, w.kernelHeight = 2, w.strideX = 2, w.strideY = 1, w.dilationX = w.dilationY = 1;
    w.windowLeftX = -1, w.windowTopY = -1;
    w.edgeMode = kEdgeClamp;
    w.countMode = mode == kPoolingAverage ? kPoolingCountInBand : kPoolingCountAll;
    w.zeroPadX = w.zeroPadY = 1;
    return w;
}

const ImageLayout kPoolSource = denseLayout(7, 5, kChannels);

// Bindings: 0 source X, 1 destination Y.
void poolingForwardVariant(int mode, unsigned mask) {
    PoolingParams p{};
    p.source = kPoolSource;
    p.destination = denseLayout(5, 6, kChannels);
    p.batch = kBatch;
    p.clipX = 1, p.clipY = 0, p.clipWidth = 4, p.clipHeight = 5;
    p.window = variantWindow(mode);
    const std::vector<float> x = noise(floatsOf(p.source, kBatch), 61 + mask);
    const std::vector<float> y0 = noise(floatsOf(p.destination, kBatch), 71 + mask);
    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cy = upload(cpuBackend, y0, false);
    cpu::poolingForward(p, upload(cpuBackend, x, false), cy);
    BufferSlice my;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0, misaligned(mask, 1));
        b.poolingForward(cb, p, upload(b, x, misaligned(mask, 0)), my);
    });
    expectMatches(download(my, y0.size()), download(cy, y0.size()), caseName("pooling forward", mode, mask));
}

TEST(MetalVariantsPooling, ForwardEveryModeAndAlignment) {
    REQUIRE_METAL();
    for (int mode : {kPoolingMax, kPoolingAverage, kPoolingL2})
        for (unsigned mask = 0; mask < 4; ++mask) poolingForwardVariant(mode, mask);
}

// Bindings: 0 gradient G, 1 source X, 2 destination dX. dX is one pixel wider and taller than X:
// its last column and row lie outside the image, where no tap lands (they must come out 0).
void poolingGradientVariant(int mode, unsigned mask) {
    PoolingGradientParams p{};
    p.gradient = denseLayout(5, 6, kChannels);
    p.source = kPoolSource;
    p.destination = denseLayout(kPoolSource.width + 1, kPoolSource.height + 1, kChannels);
    p.batch = kBatch;
    p.gradientX = 1, p.gradientY = 0, p.gradientWidth = 4, p.gradientHeight = 5;
    p.clipX = 0, p.clipY = 0, p.clipWidth = p.destination.width, p.clipHeight = p.destination.height;
    p.window = variantWindow(mode);
    const std::vector<float> g = noise(floatsOf(p.gradient, kBatch), 81 + mask);
    const std::vector<float> x = noise(floatsOf(p.source, kBatch), 91 + mask);
    const std::vector<float> d0 = noise(floatsOf(p.destination, kBatch), 101 + mask);
    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cd = upload(cpuBackend, d0, false);
    cpu::poolingGradient(p, upload(cpuBackend, g, false), upload(cpuBackend, x, false), cd);
    BufferSlice md;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        md = upload(b, d0, misaligned(mask, 2));
        b.poolingGradient(cb, p, upload(b, g, misaligned(mask, 0)), upload(b, x, misaligned(mask, 1)), md);
    });
    const std::string what = caseName("pooling gradient", mode, mask);
    const std::vector<float> metal = download(md, d0.size()), cpu = download(cd, d0.size());
    expectMatches(metal, cpu, what);
    for (int n = 0; n < kBatch; ++n)
        for (int v = 0; v < p.destination.height; ++v)
            for (int u = 0; u < p.destination.width; ++u) {
                if (u < p.source.width && v < p.source.height) continue;
                for (int c = 0; c < kChannels; ++c)
                    ASSERT_EQ(metal[at(p.destination, n, u, v, c)], 0.0f) << what << ": pixel " << u << ", " << v;
            }
}

TEST(MetalVariantsPooling, GradientEveryModeAndAlignment) {
    REQUIRE_METAL();
    for (int mode : {kPoolingMax, kPoolingAverage, kPoolingL2})
        for (unsigned mask = 0; mask < 8; ++mask) {
            // Average pooling never reads X: the host binds no source and its flag stays false,
            // so the source offset is irrelevant there.
            if (mode == kPoolingAverage && misaligned(mask, 1)) continue;
            poolingGradientVariant(mode, mask);
        }
}

// ---- upsampling -------------------------------------------------------------------------------

// Bindings: 0 source X, 1 destination Y.
void upsamplingForwardVariant(int mode, unsigned mask) {
    UpsamplingParams p{};
    p.source = denseLayout(6, 3, kChannels);
    p.destination = denseLayout(11, 7, kChannels);
    p.batch = kBatch, p.mode = mode, p.coordinateMode = kUpsamplingHalfPixel, p.scaleX = 2, p.scaleY = 3;
    p.sourceX = 1, p.sourceY = 1, p.inputWidth = 5, p.inputHeight = 2;
    p.outputX = 0, p.outputY = 0, p.clipX = 1, p.clipY = 1, p.clipWidth = 10, p.clipHeight = 6;
    const std::vector<float> x = noise(floatsOf(p.source, kBatch), 111 + mask);
    const std::vector<float> y0 = noise(floatsOf(p.destination, kBatch), 121 + mask);
    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cy = upload(cpuBackend, y0, false);
    cpu::upsamplingForward(p, upload(cpuBackend, x, false), cy);
    BufferSlice my;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0, misaligned(mask, 1));
        b.upsamplingForward(cb, p, upload(b, x, misaligned(mask, 0)), my);
    });
    expectMatches(download(my, y0.size()), download(cy, y0.size()), caseName("upsampling forward", mode, mask));
}

TEST(MetalVariantsUpsampling, ForwardEveryModeAndAlignment) {
    REQUIRE_METAL();
    for (int mode : {kUpsamplingNearest, kUpsamplingBilinear})
        for (unsigned mask = 0; mask < 4; ++mask) upsamplingForwardVariant(mode, mask);
}

// Bindings: 0 gradient G, 1 destination dX. The input is one row high: bilinear outputs then all
// sample that row (the inputSize <= 1 branch of upsamplingReach).
void upsamplingGradientVariant(int mode, unsigned mask) {
    UpsamplingGradientParams p{};
    p.gradient = denseLayout(10, 3, kChannels);
    p.destination = denseLayout(6, 2, kChannels);
    p.batch = kBatch, p.mode = mode, p.coordinateMode = kUpsamplingAlignCorners, p.scaleX = 2, p.scaleY = 3;
    p.gradientX = 0, p.gradientY = 0, p.inputWidth = 5, p.inputHeight = 1, p.inputX = -1, p.inputY = 0;
    p.clipX = 0, p.clipY = 0, p.clipWidth = 6, p.clipHeight = 2;  // column 0 and row 1 lie outside the input
    const std::vector<float> g = noise(floatsOf(p.gradient, kBatch), 131 + mask);
    const std::vector<float> d0 = noise(floatsOf(p.destination, kBatch), 141 + mask);
    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cd = upload(cpuBackend, d0, false);
    cpu::upsamplingGradient(p, upload(cpuBackend, g, false), cd);
    BufferSlice md;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        md = upload(b, d0, misaligned(mask, 1));
        b.upsamplingGradient(cb, p, upload(b, g, misaligned(mask, 0)), md);
    });
    expectMatches(download(md, d0.size()), download(cd, d0.size()), caseName("upsampling gradient", mode, mask));
}

TEST(MetalVariantsUpsampling, GradientEveryModeAndAlignment) {
    REQUIRE_METAL();
    for (int mode : {kUpsamplingNearest, kUpsamplingBilinear})
        for (unsigned mask = 0; mask < 4; ++mask) upsamplingGradientVariant(mode, mask);
}

// ---- dropout ----------------------------------------------------------------------------------

// Bindings: 0 source, 1 destination. The mask is the same Philox function on both backends, so
// the results must agree bit for bit.
TEST(MetalVariantsDropout, EveryAlignmentBitIdentical) {
    REQUIRE_METAL();
    for (unsigned mask = 0; mask < 4; ++mask) {
        DropoutParams p{};
        p.source = denseLayout(5, 4, kChannels);
        p.destination = denseLayout(4, 4, kChannels);
        p.batch = kBatch, p.sourceX = 1, p.clipWidth = 4, p.clipHeight = 4;
        p.mask.seedLo = 0x12345678u, p.mask.seedHi = 3u, p.mask.streamLo = 9u;
        p.mask.keepProbability = 0.5f, p.mask.threshold = 0x80000000u;
        p.mask.maskWidth = 4, p.mask.maskHeight = 4, p.mask.maskChannels = kChannels;
        p.mask.strideX = p.mask.strideY = p.mask.strideZ = 1;
        const std::vector<float> x = noise(floatsOf(p.source, kBatch), 151 + mask);
        const std::vector<float> y0 = noise(floatsOf(p.destination, kBatch), 161 + mask);
        Backend& cpuBackend = Device("cpu").backend();
        BufferSlice cy = upload(cpuBackend, y0, false);
        cpu::dropout(p, upload(cpuBackend, x, false), cy);
        BufferSlice my;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            my = upload(b, y0, misaligned(mask, 1));
            b.dropout(cb, p, upload(b, x, misaligned(mask, 0)), my);
        });
        const std::vector<float> metal = download(my, y0.size()), cpu = download(cy, y0.size());
        for (size_t i = 0; i < metal.size(); ++i)
            ASSERT_EQ(std::memcmp(&metal[i], &cpu[i], sizeof(float)), 0)
                << "dropout, mask " << mask << ": element " << i << ": metal " << metal[i] << ", cpu " << cpu[i];
    }
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
