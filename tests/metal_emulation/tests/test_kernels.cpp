// Kernels that exercise the fiber runtime: simdgroup functions, barriers,
// threadgroup memory, and the planted faults the emulation must report.
#include <chrono>
#include <cmath>
#include <random>

#include "emu_test_params.h"
#include "emu_test_util.h"

namespace emutest {
namespace {

using Kernels = MetalTest;

// Sums n floats with reduce_sum (one partial sum per threadgroup).
std::vector<float> reduce(MetalTest& t, MTL::ComputePipelineState* p, const std::vector<float>& x,
                          unsigned groupSize) {
    const unsigned n = unsigned(x.size());
    const unsigned groups = (n + groupSize - 1) / groupSize;
    MTL::Buffer* bx = t.upload(x);
    MTL::Buffer* partial = t.scratch(groups * sizeof(float));
    const ReduceParams params{n};
    MTL::CommandBuffer* cb = t.run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(bx, 0, 1);
        enc->setBuffer(partial, 0, 2);
        enc->dispatchThreads(MTL::Size(n, 1, 1), MTL::Size(groupSize, 1, 1));
    });
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << MetalTest::errorOf(cb);
    return MetalTest::download<float>(partial, groups);
}

TEST_F(Kernels, SimdAndThreadgroupReductionMatchesDoublePrecision) {
    MTL::ComputePipelineState* p = pipeline("reduce_sum");
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(100003);
    for (float& v : x) v = dist(rng);
    double expected = 0;
    for (float v : x) expected += v;
    // 256: full simdgroups; 100: a partial last simdgroup (100 = 3 * 32 + 4)
    for (unsigned groupSize : {256u, 100u}) {
        const std::vector<float> partial = reduce(*this, p, x, groupSize);
        double sum = 0;
        for (float v : partial) sum += v;
        EXPECT_NEAR(sum, expected, 1e-3) << "threadgroup size " << groupSize;
    }
    const mtlemu::Stats s = mtlemu::stats();
    EXPECT_GT(s.barriers, 0u);
    EXPECT_GT(s.simdOps, 0u);
}

TEST_F(Kernels, ResultsDoNotDependOnTheNumberOfWorkers) {
    MTL::ComputePipelineState* p = pipeline("reduce_sum");
    std::vector<float> x(20000);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.25f;
    mtlemu::setWorkerThreads(1);
    const std::vector<float> one = reduce(*this, p, x, 128);
    mtlemu::setWorkerThreads(4);
    const std::vector<float> four = reduce(*this, p, x, 128);
    EXPECT_EQ(one, four);
}

TEST_F(Kernels, SimdFunctionsSkipLanesThatReturned) {
    MTL::ComputePipelineState* p = pipeline("simd_ops");
    const unsigned active = 20;  // lanes 20..31 return before any simdgroup function
    const ReduceParams params{active};
    MTL::Buffer* out = scratch(32 * kSimdOpColumns * sizeof(float));
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(out, 0, 1);
        enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(32, 1, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> v = download<float>(out, 32 * kSimdOpColumns);
    for (unsigned i = 0; i < active; ++i) {
        const float* row = &v[i * kSimdOpColumns];
        const float self = float(i + 1);
        EXPECT_EQ(row[0], 210.0f) << "simd_sum, lane " << i;
        EXPECT_EQ(row[1], 20.0f) << "simd_max, lane " << i;
        EXPECT_EQ(row[2], 1.0f) << "simd_min, lane " << i;
        EXPECT_EQ(row[3], float(i * (i + 1) / 2)) << "simd_prefix_exclusive_sum, lane " << i;
        EXPECT_EQ(row[4], float((i + 1) * (i + 2) / 2)) << "simd_prefix_inclusive_sum, lane " << i;
        EXPECT_EQ(row[5], float((i + 3) % active + 1)) << "simd_shuffle, lane " << i;
        if (i + 1 < active)
            EXPECT_EQ(row[6], self + 1) << "simd_shuffle_down, lane " << i;
        else
            EXPECT_TRUE(std::isnan(row[6])) << "simd_shuffle_down from an inactive lane is undefined (poison)";
        EXPECT_EQ(row[7], i < 2 ? self : self - 2) << "simd_shuffle_up, lane " << i;
        EXPECT_EQ(row[8], float((i ^ 1u) + 1)) << "simd_shuffle_xor, lane " << i;
        EXPECT_EQ(row[9], 5.0f) << "simd_broadcast, lane " << i;
        EXPECT_EQ(row[10], 1.0f) << "simd_broadcast_first, lane " << i;
        EXPECT_EQ(row[11], i == 0 ? 1.0f : 0.0f) << "simd_is_first, lane " << i;
        EXPECT_EQ(row[12], 1.0f) << "simd_all, lane " << i;
        EXPECT_EQ(row[13], 1.0f) << "simd_any, lane " << i;
        EXPECT_EQ(row[14], float(active)) << "simd_sum of a float4, lane " << i;
        EXPECT_EQ(row[15], 10.0f) << "simd_ballot, lane " << i;
    }
}

TEST_F(Kernels, TransposeThroughAThreadgroupTile) {
    MTL::ComputePipelineState* p = pipeline("transpose16");
    const Grid2DParams params{37, 53};
    std::vector<float> in(37 * 53);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = float(i);
    MTL::Buffer* bin = upload(in);
    MTL::Buffer* bout = scratch(in.size() * sizeof(float));
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(bin, 0, 1);
        enc->setBuffer(bout, 0, 2);
        enc->dispatchThreadgroups(MTL::Size(3, 4, 1), MTL::Size(16, 16, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> out = download<float>(bout, in.size());
    for (unsigned y = 0; y < 53; ++y)
        for (unsigned x = 0; x < 37; ++x) ASSERT_EQ(out[x * 53 + y], in[y * 37 + x]) << x << "," << y;
}

TEST_F(Kernels, ThreadgroupAtomicsCountEachThreadgroup) {
    MTL::ComputePipelineState* p = pipeline("count_in_group");
    MTL::Buffer* out = scratch(4 * sizeof(unsigned));
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(out, 0, 0);
        enc->dispatchThreads(MTL::Size(200, 1, 1), MTL::Size(64, 1, 1));  // the last threadgroup has 8 threads
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    EXPECT_EQ(download<unsigned>(out, 4), (std::vector<unsigned>{64, 64, 64, 8}));
}

TEST_F(Kernels, BarrierInsideAHelperFunction) {
    MTL::ComputePipelineState* p = pipeline("rotate_through_helper");
    std::vector<float> x(256);
    for (int i = 0; i < 256; ++i) x[i] = float(i);
    MTL::Buffer* bx = upload(x);
    MTL::Buffer* by = scratch(256 * sizeof(float));
    mtlemu::setReverseThreadOrder(true);  // with the barrier, the order must not matter
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(bx, 0, 0);
        enc->setBuffer(by, 0, 1);
        enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(256, 1, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> y = download<float>(by, 256);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], float((i + 1) % 256));
}

// ---------------------------------------------------------------- planted faults

class Faults : public MetalTest {
protected:
    MTL::CommandBuffer* runOne(const char* kernel, unsigned threads, MTL::Buffer* a, MTL::Buffer* b = nullptr) {
        MTL::ComputePipelineState* p = pipeline(kernel);
        return run([&](MTL::ComputeCommandEncoder* enc) {
            enc->setComputePipelineState(p);
            enc->setBuffer(a, 0, 0);
            if (b) enc->setBuffer(b, 0, 1);
            enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(threads, 1, 1));
        });
    }
};

TEST_F(Faults, ReturnBeforeBarrierIsReportedWithFileAndLine) {
    MTL::CommandBuffer* cb = runOne("return_before_barrier", 64, scratch(256));
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusError);
    EXPECT_TRUE(contains(errorOf(cb), "threadgroup (0,0,0): 16 of 64 threads returned before threadgroup_barrier "
                                      "at tests/kernels/faults.metal:14"))
        << errorOf(cb);
}

TEST_F(Faults, UnwrittenThreadgroupMemoryReadsAsNaN) {
    MTL::Buffer* y = scratch(64 * sizeof(float));
    MTL::CommandBuffer* cb = runOne("read_unwritten", 64, y);
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> v = download<float>(y, 64);
    int nans = 0;
    for (int i = 0; i < 64; ++i) {
        nans += std::isnan(v[i]);
        if (i >= 32) EXPECT_EQ(v[i], 1.0f);
    }
    EXPECT_EQ(nans, 32);  // the poison of never-written threadgroup memory
}

TEST_F(Faults, DivergentBarriersAreReported) {
    MTL::CommandBuffer* cb = runOne("divergent_barrier", 64, scratch(256));
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusError);
    const std::string message = errorOf(cb);
    EXPECT_TRUE(contains(message, "tests/kernels/faults.metal:33")) << message;
    EXPECT_TRUE(contains(message, "tests/kernels/faults.metal:35")) << message;
    EXPECT_TRUE(contains(message, "divergent")) << message;
}

TEST_F(Faults, DivergentSimdgroupFunctionsAreReported) {
    MTL::CommandBuffer* cb = runOne("divergent_simd", 32, scratch(128));
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusError);
    const std::string message = errorOf(cb);
    EXPECT_TRUE(contains(message, "simd_sum at tests/kernels/faults.metal:47")) << message;
    EXPECT_TRUE(contains(message, "simd_max at tests/kernels/faults.metal:49")) << message;
}

TEST_F(Faults, MissingBarrierMakesResultsDependOnThreadOrder) {
    std::vector<float> x(256);
    for (int i = 0; i < 256; ++i) x[i] = float(i);
    MTL::Buffer* bx = upload(x);
    auto nanCount = [&](bool reverse) {
        mtlemu::setReverseThreadOrder(reverse);
        MTL::Buffer* y = scratch(256 * sizeof(float));
        MTL::CommandBuffer* cb = runOne("missing_barrier", 256, bx, y);
        EXPECT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
        int nans = 0;
        for (float v : download<float>(y, 256)) nans += std::isnan(v);
        return nans;
    };
    // Threads read a neighbour's entry that, without the barrier, may not be
    // written yet: forward order sees 255 poisoned entries, reverse order one.
    EXPECT_EQ(nanCount(false), 255);
    EXPECT_EQ(nanCount(true), 1);
}

TEST_F(Faults, UnsetFunctionConstant) {
    MTL::Function* fn = library_->newFunction(nsString("needs_constant"));
    ASSERT_NE(fn, nullptr);
    NS::Error* error = nullptr;
    EXPECT_EQ(device_->newComputePipelineState(fn, &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "kRequired")) << str(error->localizedDescription());
    fn->release();
}

TEST_F(Kernels, ElementwiseFastPathThroughput) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    const int n = 1 << 20;
    MTL::Buffer* x = upload(std::vector<float>(n, 1.0f));
    MTL::Buffer* y = upload(std::vector<float>(n, 1.0f));
    const SaxpyParams params{n, 2.0f};
    auto saxpy = [&] {
        return run([&](MTL::ComputeCommandEncoder* enc) {
            enc->setComputePipelineState(p);
            enc->setBytes(&params, sizeof params, 0);
            enc->setBuffer(x, 0, 1);
            enc->setBuffer(y, 0, 2);
            enc->dispatchThreads(MTL::Size(n, 1, 1), MTL::Size(256, 1, 1));
        });
    };
    saxpy();  // warm up: worker threads, pages
    const auto start = std::chrono::steady_clock::now();
    MTL::CommandBuffer* cb = saxpy();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted);
    EXPECT_EQ(download<float>(y, n), std::vector<float>(n, 5.0f));
    std::printf("saxpy over %d threads: %.1f ms (%.1f ns per thread)\n", n, seconds * 1e3, seconds * 1e9 / n);
    EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace emutest
