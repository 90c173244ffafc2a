// Device selection and kernel-library loading of the Metal backend, against fake devices of the
// Linux emulation configured as unsuitable GPUs (tests/metal_emulation: mtlemu::setDeviceConfig).
// Emulation builds only: the fake device's capabilities are what these tests vary.
#if defined(MPSGRAD_HAS_METAL) && defined(MPSGRAD_METAL_EMULATION)

#include <gtest/gtest.h>
#include <mtlemu/mtlemu.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_device.h"
#include "convolution_scenarios.h"
#include "core/command_buffer.h"
#include "core/device.h"

namespace {

using namespace mpsgrad;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs with the fake device configured as `config`, restoring the default afterwards.
class FakeDevice : public ::testing::Test {
protected:
    void TearDown() override { mtlemu::resetDeviceConfig(); }

    static mtlemu::DeviceConfig config(const std::string& family, unsigned simd = 32, unsigned threads = 1024,
                                       size_t memory = 32768) {
        mtlemu::DeviceConfig c;
        c.family = family;
        c.simdWidth = simd;
        c.maxThreadsPerThreadgroup = threads;
        c.threadgroupMemory = memory;
        return c;
    }

    // A fresh backend for the configured device: null and a reason when it is refused.
    static std::string refusal() {
        auto backend = makeMetalBackend();
        return backend ? std::string() : metalUnavailableReason();
    }
};

TEST_F(FakeDevice, AnApple7GpuIsAccepted) {
    mtlemu::setDeviceConfig(config("apple7"));
    EXPECT_EQ(refusal(), "");
    mtlemu::setDeviceConfig(config("apple9"));
    EXPECT_EQ(refusal(), "");
}

TEST_F(FakeDevice, GpusWithoutSimdReductionsAreRefusedWithTheReason) {
    for (const char* family : {"apple5", "apple6", "mac1"}) {
        mtlemu::setDeviceConfig(config(family));
        const std::string reason = refusal();
        EXPECT_TRUE(contains(reason, "Apple7 or Mac2")) << family << ": " << reason;
        EXPECT_TRUE(contains(reason, "mtlemu")) << "names the device: " << reason;
    }
}

// AMD GPUs are Mac2-family devices with 64-wide SIMD groups; the kernels reduce over 32 lanes.
TEST_F(FakeDevice, A64WideSimdGpuIsRefused) {
    mtlemu::setDeviceConfig(config("mac2", 64));
    const std::string reason = refusal();
    EXPECT_TRUE(contains(reason, "64-wide SIMD groups")) << reason;
    mtlemu::setDeviceConfig(config("mac2", 32));  // a 32-wide Mac2 GPU is fine
    EXPECT_EQ(refusal(), "");
}

TEST_F(FakeDevice, TooFewThreadsPerThreadgroupIsRefused) {
    mtlemu::setDeviceConfig(config("apple7", 32, 128));
    const std::string reason = refusal();
    EXPECT_TRUE(contains(reason, "128 threads per threadgroup")) << reason;
}

// Less threadgroup memory than a kernel declares: the dispatch fails through the command
// buffer's status and error (as a pipeline Metal cannot build would), naming the limit.
TEST_F(FakeDevice, ThreadgroupMemoryLimitFailsTheCommandBufferNotTheProcess) {
    using namespace mpsgrad::testconv;
    Device device("metal");
    const ConvCase c = makeConvCase("tgmem", [](ConvCase&) {});
    const ConvolutionParams p = forwardParams(c);
    const ConvData d = makeConvData(c, 1);
    Backend& backend = device.backend();
    auto upload = [&](const std::vector<float>& v) {
        auto b = backend.newBuffer(v.size() * sizeof(float));
        std::memcpy(b->contents(), v.data(), v.size() * sizeof(float));
        return BufferSlice{b, 0};
    };
    mtlemu::setDeviceConfig(config("apple7", 32, 1024, 1024));
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    backend.convolutionForward(*cb, p, upload(d.x), upload(d.w), upload(d.b), {},
                               upload(std::vector<float>(bufferSize(p.destination, 1), 0.0f)), {});
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Error);
    EXPECT_TRUE(contains(cb->error(), "maxThreadgroupMemoryLength is 1024")) << cb->error();
}

// ---- the kernel library ------------------------------------------------------------------------

// The backend loads the mpsgrad.metallib the build wrote (a list of the kernels built, which the
// fake device checks against the kernels linked in), through the same lookup as on a Mac.
TEST(MetalLibrary, TheBuiltMetallibIsLoadedFromDisk) {
    Device device("metal");
    const std::string library = metalBackendStats(device.backend()).library;
    EXPECT_TRUE(contains(library, "mpsgrad.metallib")) << library;
    std::ifstream file(library);
    ASSERT_TRUE(file.good()) << library << " must exist";
    std::string header;
    std::getline(file, header);
    EXPECT_EQ(header, "mtlemu kernel library 1");
}

class MetallibEnvironment : public ::testing::Test {
protected:
    void TearDown() override { unsetenv("MPSGRAD_METALLIB"); }
    // loadKernelLibrary's MetalError for the current environment ("" when it loads).
    static std::string loadError() {
        NS::AutoreleasePool* pool = NS::AutoreleasePool::alloc()->init();
        std::string error;
        try {
            auto device = metal_backend::selectDevice();
            metal_backend::loadKernelLibrary(device.get());
        } catch (const MetalError& e) {
            error = e.what();
        }
        pool->release();
        return error;
    }
};

TEST_F(MetallibEnvironment, AMissingLibraryFileIsAnErrorNamingIt) {
    setenv("MPSGRAD_METALLIB", "/nonexistent/dir/mpsgrad.metallib", 1);
    const std::string error = loadError();
    EXPECT_TRUE(contains(error, "MPSGRAD_METALLIB")) << error;
    EXPECT_TRUE(contains(error, "/nonexistent/dir/mpsgrad.metallib")) << error;
}

TEST_F(MetallibEnvironment, ALibraryOfAnotherBuildIsRefused) {
    const std::string path = testing::TempDir() + "stale_mpsgrad.metallib";
    {
        std::ofstream out(path);
        out << "mtlemu kernel library 1\nconvolution_forward\n";  // a build with one kernel
    }
    setenv("MPSGRAD_METALLIB", path.c_str(), 1);
    const std::string error = loadError();
    EXPECT_TRUE(contains(error, "stale")) << error;
    std::remove(path.c_str());
}

TEST_F(MetallibEnvironment, TheBuiltLibraryLoadsThroughTheVariable) {
    Device device("metal");
    setenv("MPSGRAD_METALLIB", metalBackendStats(device.backend()).library.c_str(), 1);
    EXPECT_EQ(loadError(), "");
}

}  // namespace

#endif
