// The binding checks of the cross-channel / spatial / local contrast normalization ops
// (backend/binding_checks.cpp), which both backends call before running an op.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/binding_checks.h"
#include "core/device.h"
#include "core/errors.h"
#include "pooling_scenarios.h"

namespace mpsgrad {
namespace {

using namespace testpool;

constexpr int kChannels = 7;
constexpr int kBatch = 2;

BufferSlice upload(Backend& backend, const std::vector<float>& data) {
    auto buffer = backend.newBuffer(data.size() * sizeof(float));
    std::memcpy(buffer->contents(), data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, 0};
}

NormalizationParams variantParams(int kind) {
    NormalizationParams p{};
    p.kind = kind;
    p.kernelWidth = p.kernelHeight = 4;
    p.channelSize = 1;
    p.alpha = 0.75f, p.beta = 0.625f, p.delta = 0.5f, p.p0 = 1.0f, p.ps = 1.0f;
    p.batch = kBatch;
    p.source = denseLayout(6, 5, kChannels, 1);
    return p;
}

// The binding checks refuse what the kernels cannot run (both backends call them first).
TEST(NormalizationBindings, RefuseWhatTheKernelsCannotRun) {
    Backend& cpuBackend = Device("cpu").backend();
    NormalizationParams p = variantParams(kNormalizationSpatial);
    p.destination = denseLayout(5, 6, kChannels);
    p.clipWidth = 5, p.clipHeight = 6;
    p.gradient = p.destination;
    p.gradientWidth = 5, p.gradientHeight = 6;
    const BufferSlice x = upload(cpuBackend, std::vector<float>(floatsOf(p.source, kBatch)));
    const BufferSlice d = upload(cpuBackend, std::vector<float>(floatsOf(p.destination, kBatch)));
    EXPECT_NO_THROW(bindings::checkNormalizationGradient(p, d, x, d));
    NormalizationParams bad = p;
    bad.kind = 3;
    EXPECT_THROW(bindings::checkNormalizationForward(bad, x, d), ValueError);
    bad = p, bad.kernelWidth = 0;
    EXPECT_THROW(bindings::checkNormalizationForward(bad, x, d), ValueError);
    bad = p, bad.clipWidth = 6;
    EXPECT_THROW(bindings::checkNormalizationForward(bad, x, d), ValueError);
    bad = p, bad.gradientX = 1;
    EXPECT_THROW(bindings::checkNormalizationGradient(bad, d, x, d), ValueError);
    bad = p, bad.source.channels = 3;
    EXPECT_THROW(bindings::checkNormalizationForward(bad, x, d), ValueError);
    const BufferSlice small = upload(cpuBackend, std::vector<float>(8));
    EXPECT_THROW(bindings::checkNormalizationForward(p, small, d), ValueError);
}

}  // namespace
}  // namespace mpsgrad
