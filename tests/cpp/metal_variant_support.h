// What every Metal variant test (tests/cpp/test_metal_variants*.cpp) needs to run the same work on
// the Metal and the CPU backend and compare the two: a skip when the build has no Metal device,
// buffers uploaded at an aligned or a one-float-shifted offset, images filled with deterministic
// noise, and element-wise comparisons that print the first few mismatches.
//
// It compiles in builds without the Metal backend too (metalAvailable() is then false), so a test
// file that also runs CPU-only checks can include it unconditionally.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "core/image.h"

#ifdef MPSGRAD_HAS_METAL
#include "backend/metal/metal_backend.h"
#define MPSGRAD_METAL_SKIP_REASON ::mpsgrad::metalUnavailableReason()
#else
#define MPSGRAD_METAL_SKIP_REASON "this build has no Metal backend"
#endif

namespace mpsgrad::testmetal {

inline bool metalAvailable() {
    for (const auto& name : Device::availableDevices())
        if (name == "metal") return true;
    return false;
}

#define REQUIRE_METAL()                                                                              \
    do {                                                                                             \
        if (!::mpsgrad::testmetal::metalAvailable())                                                 \
            GTEST_SKIP() << "no Metal device: " << MPSGRAD_METAL_SKIP_REASON;                        \
    } while (0)

// A buffer holding `data`, at byte offset 0 or (shift) one float further: a kernel must honour
// the binding's offset, not assume its data starts the buffer.
inline BufferSlice upload(Backend& backend, const std::vector<float>& data, bool shift = false) {
    const size_t offset = shift ? 1 : 0;
    auto buffer = backend.newBuffer((data.size() + offset) * sizeof(float));
    std::memcpy(static_cast<float*>(buffer->contents()) + offset, data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, offset * sizeof(float)};
}

inline std::vector<float> download(const BufferSlice& slice, size_t count) {
    const float* p = slice.floats();
    return std::vector<float>(p, p + count);
}

// Encodes on a fresh Metal queue, commits, waits and requires the buffer to have completed.
inline void runOnMetal(const std::function<void(Backend&, CommandBuffer&)>& encode) {
    Device device("metal");
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    encode(device.backend(), *cb);
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
}

// Same bits, or |metal - cpu| <= relative * |cpu| + absolute (the backends may sum in other
// orders); reports at most four mismatches.
inline void expectMatches(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what,
                          double relative = 1e-5, double absolute = 1e-5) {
    ASSERT_EQ(metal.size(), cpu.size()) << what;
    int failures = 0;
    for (size_t i = 0; i < metal.size() && failures < 4; ++i) {
        if (std::memcmp(&metal[i], &cpu[i], sizeof(float)) == 0) continue;
        if (!(std::fabs(double(metal[i]) - double(cpu[i])) <= relative * std::fabs(double(cpu[i])) + absolute))
            ++failures, ADD_FAILURE() << what << ": element " << i << ": metal " << metal[i] << ", cpu " << cpu[i];
    }
}

// The shift masks of a kernel with `bindings` bindings: none shifted, all shifted, each alone.
inline std::vector<unsigned> masks(int bindings) {
    std::vector<unsigned> out{0u, (1u << bindings) - 1u};
    for (int i = 0; i < bindings; ++i) out.push_back(1u << i);
    return out;
}

inline bool shifted(unsigned mask, int i) { return (mask >> i) & 1u; }

// ---- whole images (for the tests that go through Image rather than raw bindings) ----------------

// An image of `images` images whose values are a fixed function of (index, seed, image): noise
// in [-3.9, 3.9] that needs no random generator.
inline ImagePtr noiseImage(const Device& device, int64_t w, int64_t h, int64_t c, int64_t images, unsigned seed) {
    auto image =
        std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, w, h, c, images));
    std::vector<float> data(size_t(w * h * c));
    for (int64_t n = 0; n < images; ++n) {
        for (size_t i = 0; i < data.size(); ++i)
            data[i] = float(int((i * 2654435761u + seed * 40503u + unsigned(n) * 977u) % 2001u) - 1000) / 256.0f;
        image->writeBytes(data.data(), DataLayout::HeightxWidthxFeatureChannels, n);
    }
    return image;
}

inline ImagePtr blankImage(const Device& device, int64_t w, int64_t h, int64_t c, int64_t images) {
    return std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, w, h, c, images));
}

// Every image of `image`, HWC, one after the other.
inline std::vector<float> contents(const Image& image) {
    std::vector<float> all;
    for (int64_t n = 0; n < image.numberOfImages(); ++n) {
        std::vector<float> data(size_t(image.width() * image.height() * image.featureChannels()));
        image.readBytes(data.data(), DataLayout::HeightxWidthxFeatureChannels, n);
        all.insert(all.end(), data.begin(), data.end());
    }
    return all;
}

// A pass encodes work on a device and returns the images whose contents are compared.
using Pass = std::function<std::vector<ImagePtr>(const Device&, CommandBuffer&)>;

inline std::vector<std::vector<float>> runPass(const std::string& deviceName, const Pass& pass) {
    Device device(deviceName);
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    std::vector<ImagePtr> images = pass(device, *cb);
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    std::vector<std::vector<float>> out;
    for (const auto& image : images) out.push_back(contents(*image));
    return out;
}

// relTol 0: bit for bit; otherwise max|cpu - metal| <= relTol * max|cpu| per output.
inline void expectSameOnBothBackends(const Pass& pass, const std::string& what, double relTol = 0) {
    auto cpu = runPass("cpu", pass);
    auto metal = runPass("metal", pass);
    ASSERT_EQ(cpu.size(), metal.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
        ASSERT_EQ(cpu[i].size(), metal[i].size()) << what;
        if (relTol == 0) {
            EXPECT_EQ(0, std::memcmp(cpu[i].data(), metal[i].data(), cpu[i].size() * sizeof(float)))
                << what << ": output " << i << " differs between the backends";
            continue;
        }
        double scale = 0, diff = 0;
        for (size_t j = 0; j < cpu[i].size(); ++j) {
            scale = std::max(scale, std::fabs(double(cpu[i][j])));
            diff = std::max(diff, std::fabs(double(cpu[i][j]) - double(metal[i][j])));
        }
        EXPECT_LE(diff, relTol * scale) << what << ": output " << i;
    }
}

}  // namespace mpsgrad::testmetal
