// The sub-pixel shuffle's Metal kernels (sub_pixel_shuffle, sub_pixel_unshuffle: no function
// constants, one variant each) run on Device("metal") and compared bit for bit with Device("cpu"):
// both are gathers, so the floats must be identical. The shapes reach every path of
// metal/sub_pixel.metal: scale factors 1 to 3, phases inside a block, clip rectangles that end
// inside a block (unshuffle zeros), channel offsets, channel counts not multiples of 4, batches of
// two images, and grids of several threadgroups.
//
// Also: checkSubPixelShuffle rejects inconsistent params on both backends.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::metalAvailable;
ImageLayout packed(int32_t w, int32_t h, int32_t stride, int32_t offset, int32_t channels) {
    ImageLayout l{};
    l.width = w;
    l.height = h;
    l.pixelStride = stride;
    l.imageStride = w * h * stride;
    l.channelOffset = offset;
    l.channels = channels;
    return l;
}

BufferSlice noise(const Device& device, size_t floats, unsigned seed) {
    BufferSlice s{device.backend().newBuffer(floats * sizeof(float)), 0};
    float* f = s.floats();
    for (size_t i = 0; i < floats; ++i)
        f[i] = float(int((i * 2654435761u + seed * 40503u) % 2001u) - 1000) / 256.0f;
    return s;
}

struct Case {
    int32_t scale, phaseX, phaseY, clipX, clipY, clipWidth, clipHeight, channels, channelOffset, highStride;
    int32_t highWidth, highHeight, batch;
};

// Runs the shuffle and the unshuffle of `c` on `name`; returns both outputs' whole buffers.
std::vector<std::vector<float>> run(const std::string& name, const Case& c) {
    Device device(name);
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    const int32_t r = c.scale, n = c.channels * r * r;
    const int32_t lowW = (c.phaseX + c.clipWidth + r - 1) / r, lowH = (c.phaseY + c.clipHeight + r - 1) / r;
    SubPixelShuffleParams p{};
    p.low = packed(lowW, lowH, (n + 3) / 4 * 4, 0, n);
    p.high = packed(c.highWidth, c.highHeight, c.highStride, c.channelOffset, c.channels);
    p.batch = c.batch;
    p.scale = r;
    p.phaseX = c.phaseX;
    p.phaseY = c.phaseY;
    p.clipX = c.clipX;
    p.clipY = c.clipY;
    p.clipWidth = c.clipWidth;
    p.clipHeight = c.clipHeight;
    const size_t lowFloats = size_t(p.low.imageStride) * c.batch, highFloats = size_t(p.high.imageStride) * c.batch;
    BufferSlice low = noise(device, lowFloats, 1), high = noise(device, highFloats, 2);
    BufferSlice gradient = noise(device, highFloats, 3), lowGradient = noise(device, lowFloats, 4);
    device.backend().subPixelShuffle(*cb, p, low, high);
    device.backend().subPixelUnshuffle(*cb, p, gradient, lowGradient);
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    return {std::vector<float>(high.floats(), high.floats() + highFloats),
            std::vector<float>(lowGradient.floats(), lowGradient.floats() + lowFloats)};
}

TEST(MetalVariantsSubPixel, ShuffleAndUnshuffleMatchTheCpu) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device";
    const std::vector<Case> cases = {
        // scale, phase x/y, clip x/y/w/h, channels, channel offset, high stride, high w/h, batch
        {2, 0, 0, 0, 0, 34, 18, 3, 0, 4, 34, 18, 2},   // whole destination, 3 channels (padded lanes)
        {3, 1, 2, 2, 1, 13, 10, 5, 4, 12, 17, 12, 1},  // phases, a channel offset, clip ending mid-block
        {1, 0, 0, 1, 1, 40, 9, 8, 0, 8, 41, 11, 2},    // scale 1: a plain copy of the clip
        {2, 1, 1, 0, 0, 7, 5, 2, 2, 4, 8, 6, 2},       // odd clip sizes with phase: unshuffle zeros
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        auto cpu = run("cpu", cases[i]);
        auto metal = run("metal", cases[i]);
        for (size_t k = 0; k < cpu.size(); ++k) {
            ASSERT_EQ(cpu[k].size(), metal[k].size());
            EXPECT_EQ(0, std::memcmp(cpu[k].data(), metal[k].data(), cpu[k].size() * sizeof(float)))
                << "case " << i << (k == 0 ? ": shuffle" : ": unshuffle") << " differs between the backends";
        }
    }
}

TEST(MetalVariantsSubPixel, ShuffleFollowsTheMpsRule) {
    // On the CPU (the reference the Metal kernels are compared with): every written element holds
    // Io[y / r][x / r][C (r (y mod r) + x mod r) + c], counted from the phase.
    Case c{2, 1, 0, 1, 2, 5, 4, 3, 4, 8, 7, 7, 1};
    auto out = run("cpu", c);
    const int32_t r = 2, n = 12, lowW = 3, lowStride = 12;
    std::vector<float> low(size_t(lowW) * 2 * lowStride);
    for (size_t i = 0; i < low.size(); ++i) low[i] = float(int((i * 2654435761u + 40503u) % 2001u) - 1000) / 256.0f;
    for (int32_t qy = 0; qy < c.clipHeight; ++qy)
        for (int32_t qx = 0; qx < c.clipWidth; ++qx)
            for (int32_t ch = 0; ch < c.channels; ++ch) {
                const int32_t x = c.phaseX + qx, y = c.phaseY + qy;
                const float expected = low[size_t((y / r) * lowW + x / r) * lowStride +
                                           size_t(c.channels * (r * (y % r) + x % r) + ch)];
                const size_t at = size_t((c.clipY + qy) * c.highWidth + c.clipX + qx) * c.highStride +
                                  size_t(c.channelOffset + ch);
                ASSERT_EQ(out[0][at], expected) << qx << "," << qy << "," << ch;
            }
    (void)n;
}

TEST(MetalVariantsSubPixel, BindingChecksRejectInconsistentParams) {
    for (const char* name : {"cpu", "metal"}) {
        if (std::string(name) == "metal" && !metalAvailable()) continue;
        Device device(name);
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        SubPixelShuffleParams p{};
        p.low = packed(2, 2, 8, 0, 8);
        p.high = packed(4, 4, 4, 0, 2);
        p.batch = 1;
        p.scale = 2;
        p.clipWidth = 4;
        p.clipHeight = 4;
        BufferSlice low = noise(device, 32, 1), high = noise(device, 64, 2);
        device.backend().subPixelShuffle(*cb, p, low, high);  // consistent: accepted
        SubPixelShuffleParams bad = p;
        bad.phaseX = 2;  // outside [0, scale)
        EXPECT_THROW(device.backend().subPixelShuffle(*cb, bad, low, high), ValueError) << name;
        bad = p;
        bad.high.channels = 3;  // 4 groups of 3 != 8 low channels
        EXPECT_THROW(device.backend().subPixelUnshuffle(*cb, bad, high, low), ValueError) << name;
        bad = p;
        bad.phaseX = 1;  // the clip no longer fits the 2 low-resolution columns
        EXPECT_THROW(device.backend().subPixelShuffle(*cb, bad, low, high), ValueError) << name;
        bad = p;
        bad.scale = 0;
        EXPECT_THROW(device.backend().subPixelShuffle(*cb, bad, low, high), ValueError) << name;
        cb->commit();
        cb->waitUntilCompleted();
    }
}

}  // namespace
}  // namespace mpsgrad
