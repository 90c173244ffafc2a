// CPU pooling ops (poolingForward, poolingGradient) against the double-precision reference of
// pooling_scenarios.h, which scatters every window's gradient to the pixels its taps read (the
// ops gather). Max, average (with and without the counting band) and L2, both edge modes, even,
// odd, dilated and non-square windows, strides below / at / above the window, windows off every
// edge, channel counts 4, 5 and 37 at a channel offset, a destination clip, two images. Also the
// binding checks: a buffer too small for its layout is refused before anything is read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/device.h"
#include "pooling_scenarios.h"

namespace mpsgrad {
namespace {

using namespace testpool;

BufferSlice hostBuffer(const std::vector<float>& data) {
    auto buffer = Device("cpu").backend().newBuffer(data.size() * sizeof(float));
    std::memcpy(buffer->contents(), data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, 0};
}

class CpuPooling : public ::testing::TestWithParam<PoolCase> {};

// |got - want| <= 1e-5 * (scale + |want|), scale = the largest |value| of the reference.
void expectNear(float got, double want, double scale, const char* what, size_t index) {
    ASSERT_LE(std::fabs(double(got) - want), 1e-5 * (scale + std::fabs(want))) << what << " element " << index;
}

TEST_P(CpuPooling, MatchesScatterReference) {
    const PoolCase c = GetParam();
    const ImageLayout xl = denseLayout(c.srcW, c.srcH, c.channels, 4);
    const ImageLayout gl = denseLayout(c.outW, c.outH, c.channels);
    // Y is written into a clip rectangle at (1, 2) of a larger image, at channel offset 4.
    ImageLayout yl = denseLayout(c.outW + 3, c.outH + 2, c.channels, 4);
    ImageLayout dl = denseLayout(c.srcW, c.srcH, c.channels);
    const std::vector<float> x = noise(floatsOf(xl, c.batch), 11), g = noise(floatsOf(gl, c.batch), 12);
    const std::vector<float> yInit = noise(floatsOf(yl, c.batch), 13), dInit = noise(floatsOf(dl, c.batch), 14);
    const PoolReference ref = poolReference(c, xl, x, gl, g);

    PoolingParams p{};
    p.source = xl, p.destination = yl, p.batch = c.batch;
    p.clipX = 1, p.clipY = 2, p.clipWidth = c.outW, p.clipHeight = c.outH;
    p.window = windowOf(c);
    BufferSlice xs = hostBuffer(x), ys = hostBuffer(yInit);
    cpu::poolingForward(p, xs, ys);
    const float* y = ys.floats();
    double scale = 0.0;
    for (double v : ref.y) scale = std::max(scale, std::fabs(v));
    for (int n = 0; n < c.batch; ++n)
        for (int oy = 0; oy < yl.height; ++oy)
            for (int ox = 0; ox < yl.width; ++ox)
                for (int ch = 0; ch < yl.pixelStride; ++ch) {
                    const size_t i = size_t(n) * yl.imageStride + (size_t(oy) * yl.width + ox) * yl.pixelStride + ch;
                    const int jx = ox - 1, jy = oy - 2, k = ch - 4;
                    if (jx >= 0 && jx < c.outW && jy >= 0 && jy < c.outH && k >= 0 && k < c.channels)
                        expectNear(y[i], ref.y[((size_t(n) * c.outH + jy) * c.outW + jx) * c.channels + k], scale,
                                   "Y", i);
                    else
                        ASSERT_EQ(std::memcmp(&y[i], &yInit[i], sizeof(float)), 0) << "Y element " << i << " written";
                }

    PoolingGradientParams q{};
    q.gradient = gl, q.source = xl, q.destination = dl, q.batch = c.batch;
    q.gradientX = 0, q.gradientY = 0, q.gradientWidth = c.outW, q.gradientHeight = c.outH;
    q.clipX = 0, q.clipY = 0, q.clipWidth = c.srcW, q.clipHeight = c.srcH;
    q.window = windowOf(c);
    BufferSlice gs = hostBuffer(g), ds = hostBuffer(dInit);
    cpu::poolingGradient(q, gs, xs, ds);
    const float* d = ds.floats();
    scale = 0.0;
    for (double v : ref.dx) scale = std::max(scale, std::fabs(v));
    for (int n = 0; n < c.batch; ++n)
        for (int v = 0; v < c.srcH; ++v)
            for (int u = 0; u < c.srcW; ++u)
                for (int ch = 0; ch < c.channels; ++ch)
                    expectNear(d[at(dl, n, u, v, ch)], ref.dx[((size_t(n) * c.srcH + v) * c.srcW + u) * c.channels + ch],
                               scale, "dX", at(dl, n, u, v, ch));
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuPooling, ::testing::ValuesIn(poolCases()),
                         [](const auto& info) { return info.param.name; });

TEST(CpuPoolingChecks, RefusesBindingsTooSmallAndBadWindows) {
    PoolCase c;
    const ImageLayout xl = denseLayout(c.srcW, c.srcH, c.channels), yl = denseLayout(c.outW, c.outH, c.channels);
    PoolingParams p{};
    p.source = xl, p.destination = yl, p.batch = c.batch;
    p.clipWidth = c.outW, p.clipHeight = c.outH;
    p.window = windowOf(c);
    BufferSlice x = hostBuffer(std::vector<float>(spanOf(xl, c.batch)));
    BufferSlice y = hostBuffer(std::vector<float>(floatsOf(yl, c.batch)));
    BufferSlice shortY = hostBuffer(std::vector<float>(spanOf(yl, c.batch) - 1));
    EXPECT_NO_THROW(cpu::poolingForward(p, x, y));
    EXPECT_THROW(cpu::poolingForward(p, x, shortY), std::invalid_argument);
    EXPECT_THROW(cpu::poolingForward(p, BufferSlice{x.buffer, 4}, y), std::invalid_argument);  // offset eats the end
    EXPECT_THROW(cpu::poolingForward(p, BufferSlice{}, y), std::invalid_argument);
    for (auto mutate : {+[](PoolingWindow& w) { w.kernelWidth = 0; }, +[](PoolingWindow& w) { w.strideY = 0; },
                        +[](PoolingWindow& w) { w.dilationX = -1; }, +[](PoolingWindow& w) { w.mode = 7; },
                        +[](PoolingWindow& w) { w.edgeMode = 3; }, +[](PoolingWindow& w) { w.zeroPadX = -1; },
                        +[](PoolingWindow& w) { w.windowLeftX = INT32_MIN + 1; }}) {
        PoolingParams bad = p;
        mutate(bad.window);
        EXPECT_THROW(cpu::poolingForward(bad, x, y), std::invalid_argument);
    }
    PoolingGradientParams q{};
    q.gradient = yl, q.source = xl, q.destination = xl, q.batch = c.batch;
    q.gradientWidth = c.outW + 1, q.gradientHeight = c.outH;  // one column beyond G
    q.clipWidth = c.srcW, q.clipHeight = c.srcH;
    q.window = windowOf(c);
    EXPECT_THROW(cpu::poolingGradient(q, y, x, x), std::invalid_argument);
}

}  // namespace
}  // namespace mpsgrad
