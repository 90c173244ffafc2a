// The Metal pooling ops (metal/pooling.metal, backend/metal/metal_pooling.cpp) against the CPU
// ops on the cases of pooling_scenarios.h (which test_cpu_pooling.cpp checks against a double
// reference). Bindings start at float offsets that are not multiples of 4, so the backend's
// realignment and the unaligned load paths run; the 37-channel cases give threadgroups of more
// than one simdgroup. Elements an op must not write are compared bit for bit with their initial
// noise; written ones within 1e-5 relative of the CPU's. Also: bindings too small are refused at
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

using namespace testpool;

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

std::vector<float> download(const BufferSlice& s, size_t count) { return std::vector<float>(s.floats(), s.floats() + count); }

void runOnMetal(const std::function<void(Backend&, CommandBuffer&)>& encode) {
    Device device("metal");
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    encode(device.backend(), *cb);
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
}

void expectSame(const std::vector<float>& metal, const std::vector<float>& cpu, const std::vector<float>& before,
                const char* what) {
    ASSERT_EQ(metal.size(), cpu.size());
    double scale = 0.0;
    for (float v : cpu) scale = std::max(scale, double(std::fabs(v)));
    for (size_t i = 0; i < metal.size(); ++i) {
        if (std::memcmp(&cpu[i], &before[i], sizeof(float)) == 0) {
            ASSERT_EQ(std::memcmp(&metal[i], &before[i], sizeof(float)), 0) << what << " element " << i << " written";
        } else {
            ASSERT_LE(std::fabs(double(metal[i]) - cpu[i]), 1e-5 * (scale + std::fabs(cpu[i])))
                << what << " element " << i << ": metal " << metal[i] << ", cpu " << cpu[i];
        }
    }
}

class MetalPooling : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MetalPooling, MatchesCpu) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    const PoolCase c = GetParam();
    const ImageLayout xl = denseLayout(c.srcW, c.srcH, c.channels, 4);
    const ImageLayout gl = denseLayout(c.outW, c.outH, c.channels);
    const ImageLayout yl = denseLayout(c.outW + 3, c.outH + 2, c.channels, 4);
    const ImageLayout dl = denseLayout(c.srcW, c.srcH, c.channels);
    const std::vector<float> x = noise(floatsOf(xl, c.batch), 21), g = noise(floatsOf(gl, c.batch), 22);
    const std::vector<float> yInit = noise(floatsOf(yl, c.batch), 23), dInit = noise(floatsOf(dl, c.batch), 24);
    PoolingParams p{};
    p.source = xl, p.destination = yl, p.batch = c.batch;
    p.clipX = 1, p.clipY = 2, p.clipWidth = c.outW, p.clipHeight = c.outH;
    p.window = windowOf(c);
    PoolingGradientParams q{};
    q.gradient = gl, q.source = xl, q.destination = dl, q.batch = c.batch;
    q.gradientWidth = c.outW, q.gradientHeight = c.outH;
    q.clipX = 1, q.clipY = 0, q.clipWidth = c.srcW - 2, q.clipHeight = c.srcH;  // a dX clip: column 0 and W-1 untouched
    q.window = windowOf(c);

    Backend& cpuBackend = Device("cpu").backend();
    BufferSlice cx = upload(cpuBackend, x, 0), cy = upload(cpuBackend, yInit, 0);
    BufferSlice cg = upload(cpuBackend, g, 0), cd = upload(cpuBackend, dInit, 0);
    cpu::poolingForward(p, cx, cy);
    cpu::poolingGradient(q, cg, cx, cd);

    BufferSlice myb, mdb;
    runOnMetal([&](Backend& backend, CommandBuffer& cb) {
        BufferSlice mx = upload(backend, x, 1), mg = upload(backend, g, 3);
        myb = upload(backend, yInit, 2);
        mdb = upload(backend, dInit, 0);
        backend.poolingForward(cb, p, mx, myb);
        backend.poolingGradient(cb, q, mg, mx, mdb);
    });
    const std::vector<float> my = download(myb, yInit.size()), md = download(mdb, dInit.size());
    expectSame(my, download(cy, yInit.size()), yInit, "Y");
    expectSame(md, download(cd, dInit.size()), dInit, "dX");
}

INSTANTIATE_TEST_SUITE_P(Cases, MetalPooling, ::testing::ValuesIn(poolCases()),
                         [](const auto& info) { return info.param.name; });

TEST(MetalPoolingChecks, RefusesBindingsTooSmall) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    PoolCase c;
    const ImageLayout xl = denseLayout(c.srcW, c.srcH, c.channels), yl = denseLayout(c.outW, c.outH, c.channels);
    PoolingParams p{};
    p.source = xl, p.destination = yl, p.batch = c.batch;
    p.clipWidth = c.outW, p.clipHeight = c.outH;
    p.window = windowOf(c);
    Device device("metal");
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    Backend& backend = device.backend();
    BufferSlice x = upload(backend, std::vector<float>(floatsOf(xl, c.batch)), 0);
    BufferSlice shortY = upload(backend, std::vector<float>(spanOf(yl, c.batch) - 1), 0);
    EXPECT_THROW(backend.poolingForward(*cb, p, x, shortY), ValueError);
    PoolingParams bad = p;
    bad.window.kernelWidth = 0;
    BufferSlice y = upload(backend, std::vector<float>(floatsOf(yl, c.batch)), 0);
    EXPECT_THROW(backend.poolingForward(*cb, bad, x, y), ValueError);
    cb->commit();
    cb->waitUntilCompleted();
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
