// The race detector's memory model (docs/metal.md, "Races"): which synchronisation orders which
// accesses. Kernels in kernels/race_scopes.metal.
#include "emu_test_util.h"
#include "mtlemu/kernel_runtime.h"

namespace emutest {
namespace {

class Race : public MetalTest {
public:
    void SetUp() override {
        MetalTest::SetUp();
        wasOn_ = mtlemu::rt::raceCheck();
        mtlemu::rt::setRaceCheck(true);
    }
    void TearDown() override {
        mtlemu::rt::setRaceCheck(wasOn_);
        MetalTest::TearDown();
    }
    bool wasOn_ = false;

    // Runs `kernel` with one threadgroup of `threads` threads and the given mode; returns the
    // command buffer's error ("" when it completed).
    std::string swap(const char* kernel, unsigned mode, unsigned groups = 1) {
        MTL::ComputePipelineState* p = pipeline(kernel);
        MTL::Buffer* y = scratch(128 * sizeof(float));
        MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
            enc->setComputePipelineState(p);
            enc->setBuffer(y, 0, 0);
            enc->setBytes(&mode, sizeof mode, 1);
            enc->dispatchThreadgroups(MTL::Size(groups, 1, 1), MTL::Size(64, 1, 1));
        });
        return errorOf(cb);
    }
};

TEST_F(Race, SimdgroupBarrierOrdersThreadgroupMemoryWithinTheSimdgroup) {
    EXPECT_EQ(swap("swap_in_simdgroup", 0), "");
}

TEST_F(Race, SimdgroupBarrierForDeviceMemoryDoesNotOrderThreadgroupMemory) {
    const std::string e = swap("swap_in_simdgroup", 1);
    EXPECT_TRUE(contains(e, "data race on threadgroup memory")) << e;
    EXPECT_TRUE(contains(e, "race_scopes.metal:13")) << e;
    EXPECT_TRUE(contains(e, "race_scopes.metal:17")) << e;
}

TEST_F(Race, SimdFunctionsDoNotOrderMemory) {
    const std::string e = swap("swap_in_simdgroup", 2);
    EXPECT_TRUE(contains(e, "race_scopes.metal:17")) << e;
}

TEST_F(Race, ThreadgroupBarrierOrdersAcrossSimdgroups) {
    EXPECT_EQ(swap("swap_across_simdgroups", 0), "");
}

TEST_F(Race, SimdgroupBarrierDoesNotOrderOtherSimdgroups) {
    const std::string e = swap("swap_across_simdgroups", 1);
    EXPECT_TRUE(contains(e, "race_scopes.metal:30")) << e;
}

TEST_F(Race, DeviceBarrierDoesNotOrderThreadgroupMemory) {
    const std::string e = swap("swap_across_simdgroups", 2);
    EXPECT_TRUE(contains(e, "data race on threadgroup memory")) << e;
}

TEST_F(Race, DeviceBarrierOrdersDeviceMemoryWithinTheThreadgroup) {
    EXPECT_EQ(swap("swap_in_device_memory", 0), "");
}

TEST_F(Race, ThreadgroupAndNoneBarriersDoNotOrderDeviceMemory) {
    for (unsigned mode : {1u, 2u}) {
        const std::string e = swap("swap_in_device_memory", mode);
        EXPECT_TRUE(contains(e, "data race on device buffer(0) 'y'")) << e;
        EXPECT_TRUE(contains(e, "race_scopes.metal:42")) << e;
    }
}

TEST_F(Race, AtomicsDoNotRaceAndPlainIncrementsDo) {
    MTL::ComputePipelineState* p = pipeline("count_atomically");
    for (unsigned mode : {0u, 1u}) {
        MTL::Buffer* counter = scratch(sizeof(unsigned));
        MTL::Buffer* plain = scratch(sizeof(unsigned));
        MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
            enc->setComputePipelineState(p);
            enc->setBuffer(counter, 0, 0);
            enc->setBuffer(plain, 0, 1);
            enc->setBytes(&mode, sizeof mode, 2);
            enc->dispatchThreadgroups(MTL::Size(4, 1, 1), MTL::Size(32, 1, 1));
        });
        const std::string e = errorOf(cb);
        if (mode == 0) {
            EXPECT_EQ(e, "");
            EXPECT_EQ(download<unsigned>(counter, 1)[0], 128u);
        } else {
            EXPECT_TRUE(contains(e, "data race on device buffer(1) 'plain'")) << e;
            EXPECT_TRUE(contains(e, "race_scopes.metal:52")) << e;
        }
    }
}

}  // namespace
}  // namespace emutest
