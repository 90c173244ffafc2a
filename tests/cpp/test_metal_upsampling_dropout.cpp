// The Metal upsampling and dropout ops against the CPU ops (the Python tests check both against
// PyTorch and the mask function): nearest and bilinear with every coordinate rule, a clipped
// destination, a gradient reading G from a negative origin, 37 channels (partial quads, more than a
// simdgroup of quads), bindings at offsets that are not multiples of 4 floats; dropout with every
// broadcasting pattern must give bit-identical results. Also: bindings too small are refused at
// encode time.
#ifdef MPSGRAD_HAS_METAL

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/metal/metal_backend.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "pooling_scenarios.h"

namespace mpsgrad {
namespace {

using testpool::denseLayout;
using testpool::floatsOf;
using testpool::noise;
using testpool::spanOf;

bool metalAvailable() {
    for (const auto& name : Device::availableDevices())
        if (name == "metal") return true;
    return false;
}

BufferSlice upload(Backend& backend, const std::vector<float>& data, size_t offsetFloats) {
    auto buffer = backend.newBuffer((data.size() + offsetFloats) * sizeof(float));
    std::memcpy(static_cast<float*>(buffer->contents()) + offsetFloats, data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, offsetFloats * sizeof(float)};
}

std::vector<float> download(const BufferSlice& s, size_t n) { return std::vector<float>(s.floats(), s.floats() + n); }

// Runs `op(backend, cb-or-null, source, destination)` on the CPU (cb null: call the cpu:: function)
// and on Metal with the same inputs; returns both destinations.
using Op = std::function<void(Backend*, CommandBuffer*, const BufferSlice&, const BufferSlice&)>;

void compare(const Op& op, const std::vector<float>& in, const std::vector<float>& init, double tol, const char* what) {
    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cx = upload(cpuBackend, in, 0), cy = upload(cpuBackend, init, 0);
    op(nullptr, nullptr, cx, cy);
    Device device("metal");
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    BufferSlice mx = upload(device.backend(), in, 1), my = upload(device.backend(), init, 2);
    op(&device.backend(), cb.get(), mx, my);
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    const std::vector<float> c = download(cy, init.size()), m = download(my, init.size());
    for (size_t i = 0; i < c.size(); ++i) {
        if (tol == 0.0)
            ASSERT_EQ(std::memcmp(&c[i], &m[i], sizeof(float)), 0) << what << " element " << i << ": cpu " << c[i]
                                                                      << ", metal " << m[i];
        else
            ASSERT_LE(std::fabs(double(c[i]) - m[i]), tol * (1.0 + std::fabs(c[i]))) << what << " element " << i;
    }
}

struct UpCase {
    int mode, coordinates, sx, sy;
};

class MetalUpsampling : public ::testing::TestWithParam<UpCase> {};

TEST_P(MetalUpsampling, MatchesCpu) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    const UpCase u = GetParam();
    const int C = 37, W = 6, H = 5, batch = 2;
    UpsamplingParams p{};
    p.source = denseLayout(W + 1, H, C, 4);
    p.destination = denseLayout(W * u.sx + 1, H * u.sy, C);
    p.batch = batch, p.mode = u.mode, p.coordinateMode = u.coordinates, p.scaleX = u.sx, p.scaleY = u.sy;
    p.sourceX = 1, p.inputWidth = W, p.inputHeight = H;  // the input starts at column 1
    p.outputX = 1, p.outputY = 0, p.clipX = 2, p.clipY = 1;
    p.clipWidth = W * u.sx - 1, p.clipHeight = H * u.sy - 1;
    compare([&](Backend* b, CommandBuffer* cb, const BufferSlice& x, const BufferSlice& y) {
                if (b) b->upsamplingForward(*cb, p, x, y);
                else cpu::upsamplingForward(p, x, y);
            },
            noise(floatsOf(p.source, batch), 41), noise(floatsOf(p.destination, batch), 42), 1e-6, "forward");

    UpsamplingGradientParams q{};
    q.gradient = denseLayout(W * u.sx, H * u.sy, C);
    q.destination = denseLayout(W + 2, H, C, 4);
    q.batch = batch, q.mode = u.mode, q.coordinateMode = u.coordinates, q.scaleX = u.sx, q.scaleY = u.sy;
    q.gradientX = -1, q.gradientY = 0;  // output index 0 of x was never written: G starts at output 1
    q.inputWidth = W, q.inputHeight = H, q.inputX = -1, q.inputY = 0;
    q.clipX = 0, q.clipY = 0, q.clipWidth = W + 2, q.clipHeight = H;
    compare([&](Backend* b, CommandBuffer* cb, const BufferSlice& g, const BufferSlice& d) {
                if (b) b->upsamplingGradient(*cb, q, g, d);
                else cpu::upsamplingGradient(q, g, d);
            },
            noise(floatsOf(q.gradient, batch), 43), noise(floatsOf(q.destination, batch), 44), 1e-6, "gradient");
}

INSTANTIATE_TEST_SUITE_P(Cases, MetalUpsampling,
                         ::testing::Values(UpCase{kUpsamplingNearest, kUpsamplingHalfPixel, 3, 2},
                                           UpCase{kUpsamplingBilinear, kUpsamplingHalfPixel, 2, 2},
                                           UpCase{kUpsamplingBilinear, kUpsamplingAsymmetric, 3, 1},
                                           UpCase{kUpsamplingBilinear, kUpsamplingAlignCorners, 4, 3}));

class MetalDropout : public ::testing::TestWithParam<int> {};

TEST_P(MetalDropout, BitIdenticalToCpu) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    const int pattern = GetParam();  // bits: x, y, z strides
    const int C = 37, W = 7, H = 5, batch = 3;
    DropoutParams p{};
    p.source = denseLayout(W, H, C, 4);
    p.destination = denseLayout(W - 1, H, C);
    p.batch = batch, p.sourceX = 1, p.clipWidth = W - 1, p.clipHeight = H;
    p.mask.seedLo = 0xdeadbeefu, p.mask.seedHi = 7u, p.mask.streamLo = 5u;
    p.mask.keepProbability = 0.55f, p.mask.threshold = uint32_t(std::floor(0.55 * 4294967296.0));
    p.mask.maskWidth = W, p.mask.maskHeight = H, p.mask.maskChannels = C;
    p.mask.strideX = pattern & 1, p.mask.strideY = (pattern >> 1) & 1, p.mask.strideZ = (pattern >> 2) & 1;
    p.mask.firstImage = 4, p.mask.maskX = 1;
    compare([&](Backend* b, CommandBuffer* cb, const BufferSlice& x, const BufferSlice& y) {
                if (b) b->dropout(*cb, p, x, y);
                else cpu::dropout(p, x, y);
            },
            noise(floatsOf(p.source, batch), 51), noise(floatsOf(p.destination, batch), 52), 0.0, "dropout");
}

INSTANTIATE_TEST_SUITE_P(Patterns, MetalDropout, ::testing::Range(0, 8));

TEST(MetalUpsamplingDropoutChecks, RefuseBindingsTooSmallAndBadParams) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    Device device("metal");
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    Backend& backend = device.backend();
    UpsamplingParams p{};
    p.source = denseLayout(4, 4, 4), p.destination = denseLayout(8, 8, 4);
    p.batch = 1, p.mode = kUpsamplingBilinear, p.scaleX = p.scaleY = 2, p.inputWidth = p.inputHeight = 4;
    p.clipWidth = p.clipHeight = 8;
    BufferSlice x = upload(backend, std::vector<float>(spanOf(p.source, 1)), 0);
    BufferSlice shortY = upload(backend, std::vector<float>(spanOf(p.destination, 1) - 1), 0);
    EXPECT_THROW(backend.upsamplingForward(*cb, p, x, shortY), ValueError);
    UpsamplingParams bad = p;
    bad.scaleX = 0;
    BufferSlice y = upload(backend, std::vector<float>(spanOf(p.destination, 1)), 0);
    EXPECT_THROW(backend.upsamplingForward(*cb, bad, x, y), ValueError);
    DropoutParams d{};
    d.source = d.destination = denseLayout(4, 4, 4);
    d.batch = 1, d.clipWidth = d.clipHeight = 4;
    d.mask.keepProbability = 0.0f, d.mask.maskWidth = d.mask.maskHeight = d.mask.maskChannels = 4;
    EXPECT_THROW(backend.dropout(*cb, d, x, x), ValueError);  // keep probability 0
    d.mask.keepProbability = 0.5f;
    EXPECT_THROW(backend.dropout(*cb, d, x, BufferSlice{x.buffer, 4}), ValueError);  // one float short
    cb->commit();
    cb->waitUntilCompleted();
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
