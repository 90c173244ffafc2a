// Host code through metal-cpp on the fake device: objects, buffers, both
// dispatch forms, setBytes, function constants, blits, completion handlers,
// command buffer status and errors, failure injection, the message trace and
// reference counting.
#include <objc/message.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "emu_test_params.h"
#include "emu_test_util.h"

namespace emutest {
namespace {

using Host = MetalTest;

TEST_F(Host, DeviceDescribesOneAppleGpu) {
    EXPECT_TRUE(contains(str(device_->name()), "mtlemu"));
    EXPECT_TRUE(device_->hasUnifiedMemory());
    const MTL::Size maxThreads = device_->maxThreadsPerThreadgroup();  // a struct returned via objc_msgSend_stret
    EXPECT_EQ(maxThreads.width, 1024u);
    EXPECT_EQ(maxThreads.height, 1024u);
    EXPECT_EQ(maxThreads.depth, 1024u);
    EXPECT_EQ(device_->maxThreadgroupMemoryLength(), 32768u);
    EXPECT_TRUE(device_->supportsFamily(MTL::GPUFamilyApple7));
    EXPECT_TRUE(device_->supportsFamily(MTL::GPUFamilyMetal3));
    EXPECT_FALSE(device_->supportsFamily(MTL::GPUFamilyApple9));

    NS::Array* all = MTL::CopyAllDevices();
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->count(), 1u);
    EXPECT_EQ(all->object<MTL::Device>(0), device_);
    all->release();
}

TEST_F(Host, BuffersHoldExactlyTheirBytes) {
    const std::vector<float> values = {1.0f, 2.0f, 3.0f};
    MTL::Buffer* b = upload(values);
    EXPECT_EQ(b->length(), 12u);
    EXPECT_EQ(download<float>(b, 3), values);
    b->didModifyRange(NS::Range::Make(0, 12));

    MTL::Buffer* zeros = scratch(64);  // Metal clears new buffers
    for (float v : download<float>(zeros, 16)) EXPECT_EQ(v, 0.0f);
    mtlemu::setNewBufferFill(0xFF);
    MTL::Buffer* poisoned = scratch(64);
    for (float v : download<float>(poisoned, 16)) EXPECT_TRUE(std::isnan(v));

    MTL::Buffer* gpuOnly = own(device_->newBuffer(64, MTL::ResourceStorageModePrivate));
    EXPECT_EQ(gpuOnly->contents(), nullptr);
    EXPECT_EQ(gpuOnly->storageMode(), MTL::StorageModePrivate);
    EXPECT_EQ(device_->newBuffer(0, MTL::ResourceStorageModeShared), nullptr);

    b->setLabel(nsString("weights"));
    EXPECT_EQ(str(b->label()), "weights");
    EXPECT_GE(device_->currentAllocatedSize(), 12u + 64u * 3);
}

TEST_F(Host, SaxpyWithSetBytesAndDispatchThreads) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    const int n = 1000;  // not a multiple of the threadgroup size: the last threadgroup is partial
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
        x[i] = float(i);
        y[i] = 1.0f;
    }
    MTL::Buffer* bx = upload(x);
    MTL::Buffer* by = upload(y);
    SaxpyParams params{n, 2.0f};
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        params.a = 100.0f;  // setBytes copied the struct already
        enc->setBuffer(bx, 0, 1);
        enc->setBuffer(by, 0, 2);
        enc->dispatchThreads(MTL::Size(n, 1, 1), MTL::Size(256, 1, 1));
    });
    const std::vector<float> out = download<float>(by, n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f * float(i) + 1.0f) << i;
}

TEST_F(Host, BufferOffsetsShiftTheBinding) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    MTL::Buffer* bx = upload(std::vector<float>{9, 9, 1, 2, 3, 4});
    MTL::Buffer* by = upload(std::vector<float>(4, 0.0f));
    SaxpyParams params{4, 1.0f};
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(bx, 0, 1);
        enc->setBufferOffset(2 * sizeof(float), 1);
        enc->setBuffer(by, 0, 2);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    });
    EXPECT_EQ(download<float>(by, 4), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(Host, DispatchThreadgroupsOverATwoDimensionalGrid) {
    MTL::ComputePipelineState* p = pipeline("iota2d");
    const Grid2DParams params{37, 23};
    MTL::Buffer* out = scratch(37 * 23 * sizeof(float));
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(out, 0, 1);
        enc->dispatchThreadgroups(MTL::Size(5, 3, 1), MTL::Size(8, 8, 1));  // 40 x 24 threads
    });
    const std::vector<float> v = download<float>(out, 37 * 23);
    for (int i = 0; i < 37 * 23; ++i) ASSERT_EQ(v[i], float(i) + 0.5f) << i;
}

TEST_F(Host, BuiltinValuesOfPartialThreadgroups) {
    MTL::ComputePipelineState* p = pipeline("record_builtins");
    const unsigned grid[3] = {5, 3, 2}, group[3] = {4, 2, 2};
    const unsigned total = grid[0] * grid[1] * grid[2];
    MTL::Buffer* out = scratch(total * sizeof(BuiltinRecord));
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(out, 0, 0);
        enc->dispatchThreads(MTL::Size(grid[0], grid[1], grid[2]), MTL::Size(group[0], group[1], group[2]));
    });
    const std::vector<BuiltinRecord> records = download<BuiltinRecord>(out, total);
    for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
            for (unsigned x = 0; x < grid[0]; ++x) {
                const BuiltinRecord& r = records[(z * grid[1] + y) * grid[0] + x];
                const unsigned pos[3] = {x, y, z};
                unsigned size[3], local[3];
                for (int d = 0; d < 3; ++d) {
                    const unsigned tg = pos[d] / group[d];
                    local[d] = pos[d] % group[d];
                    size[d] = std::min(group[d], grid[d] - tg * group[d]);  // non-uniform edge threadgroups
                    EXPECT_EQ(r.positionInGrid[d], pos[d]);
                    EXPECT_EQ(r.positionInThreadgroup[d], local[d]);
                    EXPECT_EQ(r.threadgroupPosition[d], tg);
                    EXPECT_EQ(r.threadsPerThreadgroup[d], size[d]);
                    EXPECT_EQ(r.threadgroupsPerGrid[d], (grid[d] + group[d] - 1) / group[d]);
                    EXPECT_EQ(r.threadsPerGrid[d], grid[d]);
                }
                const unsigned flat = local[0] + size[0] * (local[1] + size[1] * local[2]);
                EXPECT_EQ(r.indexInThreadgroup, flat);
                EXPECT_EQ(r.shortIndex, flat);
                EXPECT_EQ(r.indexInSimdgroup, flat % 32);
                EXPECT_EQ(r.simdgroupIndex, flat / 32);
                EXPECT_EQ(r.threadsPerSimdgroup, 32u);
                EXPECT_EQ(r.simdgroupsPerThreadgroup, 1u);
            }
}

TEST_F(Host, Float4LoadsAndSelect) {
    MTL::ComputePipelineState* p = pipeline("scale_relu4");
    MTL::Buffer* x = upload(std::vector<float>{1, -2, 3, -4, -5, 6, -7, 8});
    MTL::Buffer* y = scratch(8 * sizeof(float));
    const float scale = 0.5f;
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(x, 0, 0);
        enc->setBuffer(y, 0, 1);
        enc->setBytes(&scale, sizeof scale, 2);
        enc->dispatchThreads(MTL::Size(2, 1, 1), MTL::Size(2, 1, 1));
    });
    EXPECT_EQ(download<float>(y, 8), (std::vector<float>{0.5f, 0, 1.5f, 0, 0, 3, 0, 4}));
}

class FunctionConstants : public MetalTest {
protected:
    MTL::ComputePipelineState* specialised(MTL::FunctionConstantValues* values, std::string* message) {
        NS::Error* error = nullptr;
        MTL::Function* fn = library_->newFunction(nsString("specialised"), values, &error);
        if (!fn) {
            *message = str(error->localizedDescription());
            return nullptr;
        }
        MTL::ComputePipelineState* p = device_->newComputePipelineState(fn, &error);
        fn->release();
        if (!p) *message = str(error->localizedDescription());
        return own(p);
    }
    std::vector<float> runSpecialised(MTL::ComputePipelineState* p) {
        MTL::Buffer* x = upload(std::vector<float>{4, 8});
        MTL::Buffer* bias = upload(std::vector<float>{1, 2});
        MTL::Buffer* y = scratch(2 * sizeof(float));
        run([&](MTL::ComputeCommandEncoder* enc) {
            enc->setComputePipelineState(p);
            enc->setBuffer(x, 0, 0);
            enc->setBuffer(bias, 0, 1);
            enc->setBuffer(y, 0, 2);
            enc->dispatchThreads(MTL::Size(2, 1, 1), MTL::Size(2, 1, 1));
        });
        return download<float>(y, 2);
    }
};

TEST_F(FunctionConstants, SpecialiseBoolIntUintAndFloat) {
    MTL::FunctionConstantValues* v = MTL::FunctionConstantValues::alloc()->init();
    bool useBias = true;
    int offset = 3;
    unsigned repeat = 2;
    float scale = 0.5f;
    v->setConstantValue(&useBias, MTL::DataTypeBool, NS::UInteger(0));
    v->setConstantValue(&offset, MTL::DataTypeInt, NS::UInteger(1));
    v->setConstantValue(&repeat, MTL::DataTypeUInt, NS::UInteger(2));
    v->setConstantValue(&scale, MTL::DataTypeFloat, NS::UInteger(3));
    std::string message;
    MTL::ComputePipelineState* p = specialised(v, &message);
    ASSERT_NE(p, nullptr) << message;
    EXPECT_EQ(runSpecialised(p), (std::vector<float>{4 * 0.25f + 1 + 3, 8 * 0.25f + 2 + 3}));

    // A second specialisation: no bias (so the derived kNoBias negates), and
    // the optional constant set by name.
    useBias = false;
    float extra = 10.0f;
    v->setConstantValue(&useBias, MTL::DataTypeBool, NS::UInteger(0));
    v->setConstantValue(&extra, MTL::DataTypeFloat, nsString("kExtra"));
    MTL::ComputePipelineState* q = specialised(v, &message);
    ASSERT_NE(q, nullptr) << message;
    EXPECT_EQ(runSpecialised(q), (std::vector<float>{-(1 + 3 + 10.0f), -(2 + 3 + 10.0f)}));
    v->release();
}

TEST_F(FunctionConstants, MissingOrMistypedValuesFailFunctionCreation) {
    MTL::FunctionConstantValues* v = MTL::FunctionConstantValues::alloc()->init();
    bool useBias = true;
    v->setConstantValue(&useBias, MTL::DataTypeBool, NS::UInteger(0));
    std::string message;
    EXPECT_EQ(specialised(v, &message), nullptr);
    EXPECT_TRUE(contains(message, "has no value")) << message;

    float wrong = 1.0f;
    v->setConstantValue(&wrong, MTL::DataTypeFloat, NS::UInteger(0));
    int offset = 0;
    unsigned repeat = 0;
    v->setConstantValue(&offset, MTL::DataTypeInt, NS::UInteger(1));
    v->setConstantValue(&repeat, MTL::DataTypeUInt, NS::UInteger(2));
    v->setConstantValue(&wrong, MTL::DataTypeFloat, NS::UInteger(3));
    EXPECT_EQ(specialised(v, &message), nullptr);
    EXPECT_TRUE(contains(message, "kUseBias")) << message;
    EXPECT_TRUE(contains(message, "of type bool was given a value of type float")) << message;

    NS::Error* error = nullptr;
    EXPECT_EQ(library_->newFunction(nsString("no_such_kernel"), v, &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "no_such_kernel"));
    v->release();
}

TEST_F(FunctionConstants, UnspecialisedFunctionCannotMakeAPipeline) {
    MTL::Function* fn = library_->newFunction(nsString("specialised"));
    ASSERT_NE(fn, nullptr);  // Metal hands out the function...
    NS::Error* error = nullptr;
    EXPECT_EQ(device_->newComputePipelineState(fn, &error), nullptr);  // ...but no pipeline
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "newFunctionWithName:constantValues:error:"));
    fn->release();
}

TEST_F(Host, TemplateKernelsByHostName) {
    MTL::ComputePipelineState* pf = pipeline("add_arrays_float");
    MTL::ComputePipelineState* pi = pipeline("add_arrays_int");
    MTL::Buffer* fa = upload(std::vector<float>{1.5f, 2.5f});
    MTL::Buffer* fb = upload(std::vector<float>{1.0f, 1.0f});
    MTL::Buffer* fc = scratch(8);
    MTL::Buffer* ia = upload(std::vector<int>{7, -7});
    MTL::Buffer* ib = upload(std::vector<int>{1, 1});
    MTL::Buffer* ic = scratch(8);
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(pf);
        enc->setBuffer(fa, 0, 0);
        enc->setBuffer(fb, 0, 1);
        enc->setBuffer(fc, 0, 2);
        enc->dispatchThreads(MTL::Size(2, 1, 1), MTL::Size(2, 1, 1));
        enc->setComputePipelineState(pi);
        enc->setBuffer(ia, 0, 0);
        enc->setBuffer(ib, 0, 1);
        enc->setBuffer(ic, 0, 2);
        enc->dispatchThreads(MTL::Size(2, 1, 1), MTL::Size(2, 1, 1));
    });
    EXPECT_EQ(download<float>(fc, 2), (std::vector<float>{2.5f, 3.5f}));
    EXPECT_EQ(download<int>(ic, 2), (std::vector<int>{8, -6}));
}

TEST_F(Host, HalfArithmetic) {
    MTL::ComputePipelineState* p = pipeline("half_axpb");
    MTL::Buffer* x = upload(std::vector<_Float16>{_Float16(1.0f), _Float16(-2.5f)});
    MTL::Buffer* y = scratch(4);
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(x, 0, 0);
        enc->setBuffer(y, 0, 1);
        enc->dispatchThreads(MTL::Size(2, 1, 1), MTL::Size(2, 1, 1));
    });
    const std::vector<_Float16> v = download<_Float16>(y, 2);
    EXPECT_EQ(float(v[0]), 2.5f);
    EXPECT_EQ(float(v[1]), -4.5f);
}

TEST_F(Host, DeviceAtomicsAcrossThreadgroupsAndWorkers) {
    mtlemu::setWorkerThreads(4);
    MTL::ComputePipelineState* p = pipeline("count_and_sum");
    MTL::Buffer* counter = upload(std::vector<unsigned>{0});
    MTL::Buffer* total = upload(std::vector<float>{0.0f});
    MTL::Buffer* maximum = upload(std::vector<int>{-1});
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(counter, 0, 0);
        enc->setBuffer(total, 0, 1);
        enc->setBuffer(maximum, 0, 2);
        enc->dispatchThreadgroups(MTL::Size(64, 1, 1), MTL::Size(64, 1, 1));
    });
    EXPECT_EQ(download<unsigned>(counter, 1)[0], 4096u);
    EXPECT_EQ(download<float>(total, 1)[0], 2048.0f);
    EXPECT_EQ(download<int>(maximum, 1)[0], 4095);
}

TEST_F(Host, DynamicThreadgroupMemory) {
    MTL::ComputePipelineState* p = pipeline("reverse_in_group");
    std::vector<float> x(512);
    for (int i = 0; i < 512; ++i) x[i] = float(i);
    MTL::Buffer* bx = upload(x);
    MTL::Buffer* by = scratch(512 * sizeof(float));
    MTL::CommandBuffer* cb = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(bx, 0, 0);
        enc->setBuffer(by, 0, 1);
        enc->setThreadgroupMemoryLength(256 * sizeof(float), 0);
        enc->dispatchThreadgroups(MTL::Size(2, 1, 1), MTL::Size(256, 1, 1));
    });
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> y = download<float>(by, 512);
    for (int i = 0; i < 512; ++i) ASSERT_EQ(y[i], float((i / 256) * 256 + 255 - i % 256)) << i;

    MTL::CommandBuffer* missing = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBuffer(bx, 0, 0);
        enc->setBuffer(by, 0, 1);
        enc->dispatchThreadgroups(MTL::Size(2, 1, 1), MTL::Size(256, 1, 1));
    });
    EXPECT_EQ(missing->status(), MTL::CommandBufferStatusError);
    EXPECT_TRUE(contains(errorOf(missing), "threadgroup(0) 'scratch'")) << errorOf(missing);

    MTL::CommandBuffer* unaligned = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setThreadgroupMemoryLength(100, 0);
    });
    EXPECT_TRUE(contains(errorOf(unaligned), "multiple of 16")) << errorOf(unaligned);
}

TEST_F(Host, BlitsRunInOrderWithComputeWork) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    const int n = 16;
    MTL::Buffer* x = upload(std::vector<float>(n, 1.0f));
    MTL::Buffer* y = upload(std::vector<float>(n, 5.0f));
    MTL::Buffer* copy = scratch(n * sizeof(float));
    SaxpyParams params{n, 3.0f};

    MTL::CommandBuffer* cb = queue_->commandBuffer();
    MTL::BlitCommandEncoder* fill = cb->blitCommandEncoder();
    fill->fillBuffer(y, NS::Range::Make(0, n * sizeof(float)), 0);  // y = 0
    fill->endEncoding();
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(p);
    enc->setBytes(&params, sizeof params, 0);
    enc->setBuffer(x, 0, 1);
    enc->setBuffer(y, 0, 2);
    enc->dispatchThreads(MTL::Size(n, 1, 1), MTL::Size(n, 1, 1));  // y = 3
    enc->endEncoding();
    MTL::BlitCommandEncoder* blit = cb->blitCommandEncoder();
    blit->copyFromBuffer(y, 4 * sizeof(float), copy, 0, 8 * sizeof(float));
    blit->fillBuffer(copy, NS::Range::Make(8 * sizeof(float), 8 * sizeof(float)), 0xFF);
    blit->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
    const std::vector<float> c = download<float>(copy, n);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(c[i], 3.0f);
    for (int i = 8; i < n; ++i) EXPECT_TRUE(std::isnan(c[i]));

    MTL::CommandBuffer* bad = queue_->commandBuffer();
    MTL::BlitCommandEncoder* b2 = bad->blitCommandEncoder();
    b2->copyFromBuffer(y, 0, copy, 8, n * sizeof(float));  // runs past the end of `copy`
    b2->endEncoding();
    bad->commit();
    bad->waitUntilCompleted();
    EXPECT_EQ(bad->status(), MTL::CommandBufferStatusError);
    EXPECT_TRUE(contains(errorOf(bad), "outside the buffer")) << errorOf(bad);
}

TEST_F(Host, CompletionHandlersRunWhenTheWorkCompletes) {
    MTL::CommandBuffer* cb = queue_->commandBuffer();
    __block int blockSaw = -1;
    __block int scheduledSaw = -1;
    int functionSaw = -1;
    cb->addScheduledHandler(^(MTL::CommandBuffer* c) { scheduledSaw = int(c->status()); });
    cb->addCompletedHandler(^(MTL::CommandBuffer* c) { blockSaw = int(c->status()); });
    cb->addCompletedHandler(std::function<void(MTL::CommandBuffer*)>(
        [&functionSaw](MTL::CommandBuffer* c) { functionSaw = int(c->status()); }));
    cb->commit();
    EXPECT_EQ(blockSaw, -1);  // committed work runs only when someone waits
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusCommitted);
    cb->waitUntilCompleted();
    EXPECT_EQ(scheduledSaw, int(MTL::CommandBufferStatusScheduled));
    EXPECT_EQ(blockSaw, int(MTL::CommandBufferStatusCompleted));
    EXPECT_EQ(functionSaw, int(MTL::CommandBufferStatusCompleted));
    EXPECT_EQ(cb->error(), nullptr);
}

TEST_F(Host, MissingWaitLeavesResultsUnwritten) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    const int n = 64;
    MTL::Buffer* x = upload(std::vector<float>(n, 1.0f));
    MTL::Buffer* y = upload(std::vector<float>(n, 0.0f));
    SaxpyParams params{n, 2.0f};
    auto encode = [&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(y, 0, 2);
        enc->dispatchThreads(MTL::Size(n, 1, 1), MTL::Size(32, 1, 1));
    };
    MTL::CommandBuffer* first = run(encode, /*wait=*/false);
    // A host bug: reading y without waiting. The emulation has not run anything.
    EXPECT_EQ(download<float>(y, n), std::vector<float>(n, 0.0f));
    EXPECT_EQ(first->status(), MTL::CommandBufferStatusCommitted);

    // Waiting for a later command buffer of the same queue runs both, in order.
    MTL::CommandBuffer* second = run(encode, /*wait=*/false);
    second->waitUntilCompleted();
    EXPECT_EQ(first->status(), MTL::CommandBufferStatusCompleted);
    EXPECT_EQ(download<float>(y, n), std::vector<float>(n, 4.0f));
}

TEST_F(Host, QueuesExecuteIndependently) {
    MTL::CommandQueue* other = own(device_->newCommandQueue());
    MTL::CommandBuffer* a = queue_->commandBuffer();
    a->commit();
    MTL::CommandBuffer* b = other->commandBuffer();
    b->commit();
    b->waitUntilCompleted();
    EXPECT_EQ(b->status(), MTL::CommandBufferStatusCompleted);
    EXPECT_EQ(a->status(), MTL::CommandBufferStatusCommitted);
    a->waitUntilCompleted();
    EXPECT_EQ(a->status(), MTL::CommandBufferStatusCompleted);
}

TEST_F(Host, InjectedFailureBecomesTheCommandBufferError) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    MTL::Buffer* x = upload(std::vector<float>(4, 1.0f));
    MTL::Buffer* y = upload(std::vector<float>(4, 0.0f));
    SaxpyParams params{4, 2.0f};
    auto encode = [&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(y, 0, 2);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    };
    mtlemu::failNextCommandBuffer("simulated GPU page fault", MTL::CommandBufferErrorPageFault);
    MTL::CommandBuffer* cb = queue_->commandBuffer();
    __block MTL::CommandBufferStatus seen = MTL::CommandBufferStatusNotEnqueued;
    cb->addCompletedHandler(^(MTL::CommandBuffer* c) { seen = c->status(); });
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    encode(enc);
    enc->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusError);
    EXPECT_EQ(seen, MTL::CommandBufferStatusError);  // handlers run for failed work too
    NS::Error* error = cb->error();
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(str(error->localizedDescription()), "simulated GPU page fault");
    EXPECT_EQ(str(error->domain()), "MTLCommandBufferErrorDomain");
    EXPECT_EQ(error->code(), NS::Integer(MTL::CommandBufferErrorPageFault));
    EXPECT_EQ(download<float>(y, 4), std::vector<float>(4, 0.0f));  // nothing ran

    MTL::CommandBuffer* next = run(encode);  // only the next command buffer fails
    EXPECT_EQ(next->status(), MTL::CommandBufferStatusCompleted);
    EXPECT_EQ(download<float>(y, 4), std::vector<float>(4, 2.0f));
}

TEST_F(Host, KernelFaultBecomesTheCommandBufferError) {
    MTL::ComputePipelineState* p = pipeline("return_before_barrier");
    MTL::Buffer* y = scratch(64 * sizeof(float));
    MTL::CommandBuffer* cb = queue_->commandBuffer();
    cb->setLabel(nsString("forward"));
    __block bool handled = false;
    cb->addCompletedHandler(^(MTL::CommandBuffer*) { handled = true; });
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(p);
    enc->setBuffer(y, 0, 0);
    enc->dispatchThreadgroups(MTL::Size(1, 1, 1), MTL::Size(64, 1, 1));
    enc->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_TRUE(handled);
    EXPECT_EQ(cb->status(), MTL::CommandBufferStatusError);
    const std::string message = errorOf(cb);
    EXPECT_TRUE(contains(message, "command buffer 'forward'")) << message;
    EXPECT_TRUE(contains(message, "kernel 'return_before_barrier'")) << message;
    EXPECT_TRUE(contains(message, "16 of 64 threads returned before threadgroup_barrier at "
                                  "tests/kernels/faults.metal:14"))
        << message;
}

TEST_F(Host, ApiValidationFailuresFailTheCommandBuffer) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    MTL::Buffer* x = upload(std::vector<float>(4, 1.0f));
    std::vector<unsigned char> big(5000);
    MTL::CommandBuffer* tooBig = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(big.data(), big.size(), 0);
    });
    EXPECT_EQ(tooBig->status(), MTL::CommandBufferStatusError);
    EXPECT_TRUE(contains(errorOf(tooBig), "more than 4096 bytes")) << errorOf(tooBig);

    SaxpyParams params{4, 1.0f};
    MTL::CommandBuffer* unbound = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    });
    EXPECT_TRUE(contains(errorOf(unbound), "buffer(2) 'y' of kernel 'saxpy' is not bound")) << errorOf(unbound);

    MTL::CommandBuffer* shortParams = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, 4, 0);  // SaxpyParams is 8 bytes
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(x, 0, 2);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    });
    EXPECT_TRUE(contains(errorOf(shortParams), "reads 8 bytes and only 4 are bound")) << errorOf(shortParams);

    MTL::CommandBuffer* tooWide = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(x, 0, 2);
        enc->dispatchThreads(MTL::Size(4096, 1, 1), MTL::Size(2048, 1, 1));
    });
    EXPECT_TRUE(contains(errorOf(tooWide), "2048 threads per threadgroup")) << errorOf(tooWide);

    MTL::CommandBuffer* noPipeline = run([&](MTL::ComputeCommandEncoder* enc) {
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    });
    EXPECT_TRUE(contains(errorOf(noPipeline), "without a compute pipeline state")) << errorOf(noPipeline);
}

TEST_F(Host, LibraryLookup) {
    EXPECT_EQ(library_->newFunction(nsString("no_such_kernel")), nullptr);  // nil, as in Metal
    MTL::Function* fn = library_->newFunction(MTLSTR("saxpy"));             // a constant NSString
    ASSERT_NE(fn, nullptr);
    EXPECT_EQ(str(fn->name()), "saxpy");
    EXPECT_EQ(fn->functionType(), MTL::FunctionTypeKernel);
    fn->release();

    NS::Array* names = library_->functionNames();
    std::vector<std::string> list;
    for (NS::UInteger i = 0; i < names->count(); ++i) list.push_back(str(names->object<NS::String>(i)));
    for (const char* expected : {"saxpy", "reduce_sum", "add_arrays_float", "simd_ops", "return_before_barrier"})
        EXPECT_NE(std::find(list.begin(), list.end(), expected), list.end()) << expected;
    EXPECT_EQ(list, mtlemu::kernelNames());

    MTL::ComputePipelineState* reduce = pipeline("reduce_sum");
    EXPECT_EQ(reduce->maxTotalThreadsPerThreadgroup(), 1024u);
    EXPECT_EQ(reduce->threadExecutionWidth(), 32u);
    EXPECT_EQ(reduce->staticThreadgroupMemoryLength(), 32u * sizeof(float));
    EXPECT_EQ(pipeline("transpose16")->staticThreadgroupMemoryLength(), 16u * 17u * sizeof(float));
}

TEST_F(Host, LibraryLoadingPaths) {
    NS::Error* error = nullptr;
    // A missing file is an error, as in Metal.
    EXPECT_EQ(device_->newLibrary(NS::URL::fileURLWithPath(nsString("/nonexistent/lib/mpsgrad.metallib")), &error),
              nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "no such file")) << str(error->localizedDescription());

    // A library file of the emulation lists the kernels it was built from: exactly the ones
    // linked into this process loads, anything else is another build's library.
    const std::string path = testing::TempDir() + "mtlemu_library_test.metallib";
    auto writeLibrary = [&](const std::vector<std::string>& names) {
        std::FILE* f = std::fopen(path.c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fprintf(f, "mtlemu kernel library 1\n# test\n");
        for (const std::string& n : names) std::fprintf(f, "%s\n", n.c_str());
        std::fclose(f);
    };
    writeLibrary(mtlemu::kernelNames());
    error = nullptr;
    MTL::Library* byUrl = device_->newLibrary(NS::URL::fileURLWithPath(nsString(path.c_str())), &error);
    ASSERT_NE(byUrl, nullptr) << (error ? str(error->localizedDescription()) : "");
    byUrl->release();
    std::vector<std::string> more = mtlemu::kernelNames();
    more.push_back("kernel_of_another_build");
    writeLibrary(more);
    EXPECT_EQ(device_->newLibrary(nsString(path.c_str()), &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "kernel_of_another_build"));
    std::vector<std::string> fewer = mtlemu::kernelNames();
    fewer.pop_back();
    writeLibrary(fewer);
    EXPECT_EQ(device_->newLibrary(nsString(path.c_str()), &error), nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "stale"));
    std::remove(path.c_str());

    MTL::Library* byDefault = device_->newDefaultLibrary();
    ASSERT_NE(byDefault, nullptr);
    byDefault->release();

    mtlemu::failNextLibraryLoad("mpsgrad.metallib: no such file");
    EXPECT_EQ(device_->newLibrary(nsString("mpsgrad.metallib"), &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(str(error->localizedDescription()), "mpsgrad.metallib: no such file");

    error = nullptr;
    EXPECT_EQ(device_->newLibrary(nsString("kernel void f() {}"), nullptr, &error), nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_TRUE(contains(str(error->localizedDescription()), "not supported by the Metal emulation"));
}

TEST_F(Host, FoundationBasics) {
    NS::String* s = nsString("abc");
    EXPECT_EQ(s->length(), 3u);
    EXPECT_TRUE(s->isEqualToString(MTLSTR("abc")));
    EXPECT_EQ(str(s->stringByAppendingString(MTLSTR("def"))), "abcdef");
    EXPECT_EQ(str(MTLSTR("constant")), "constant");

    NS::Error* e = NS::Error::error(nsString("MyDomain"), 42, nullptr);
    EXPECT_EQ(e->code(), 42);
    EXPECT_EQ(str(e->domain()), "MyDomain");
    EXPECT_TRUE(contains(str(e->localizedDescription()), "MyDomain error 42"));

    NS::URL* url = NS::URL::fileURLWithPath(nsString("/some/dir/x.metallib"));
    EXPECT_STREQ(url->fileSystemRepresentation(), "/some/dir/x.metallib");
}

TEST_F(Host, MessageTrace) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    MTL::Buffer* x = upload(std::vector<float>(4, 1.0f));
    SaxpyParams params{4, 1.0f};
    mtlemu::clearTrace();
    run([&](MTL::ComputeCommandEncoder* enc) {
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(x, 0, 2);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
    });
    const std::vector<std::string> expected = {
        "-[MTLFakeCommandQueue commandBuffer]",
        "-[MTLFakeCommandBuffer computeCommandEncoder]",
        "-[MTLFakeComputeCommandEncoder setComputePipelineState:]",
        "-[MTLFakeComputeCommandEncoder setBytes:length:atIndex:]",
        "-[MTLFakeComputeCommandEncoder setBuffer:offset:atIndex:]",
        "-[MTLFakeComputeCommandEncoder setBuffer:offset:atIndex:]",
        "-[MTLFakeComputeCommandEncoder dispatchThreads:threadsPerThreadgroup:]",
        "-[MTLFakeComputeCommandEncoder endEncoding]",
        "-[MTLFakeCommandBuffer commit]",
        "-[MTLFakeCommandBuffer waitUntilCompleted]",
    };
    EXPECT_EQ(mtlemu::trace(), expected);
    EXPECT_EQ(mtlemu::traceCount("-[MTLFakeCommandBuffer commit]"), 1u);
    mtlemu::setTraceEnabled(false);
    queue_->commandBuffer();
    mtlemu::setTraceEnabled(true);
    EXPECT_EQ(mtlemu::trace().size(), expected.size());
}

TEST_F(Host, ReferenceCountingFreesEverything) {
    const long before = mtlemu::liveObjectCount();
    {
        NS::AutoreleasePool* inner = NS::AutoreleasePool::alloc()->init();
        MTL::ComputePipelineState* p = pipeline("saxpy");
        MTL::Buffer* x = device_->newBuffer(16, MTL::ResourceStorageModeShared);
        MTL::Buffer* y = device_->newBuffer(16, MTL::ResourceStorageModeShared);
        SaxpyParams params{4, 1.0f};
        MTL::CommandBuffer* cb = queue_->commandBuffer();  // autoreleased
        MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
        enc->setComputePipelineState(p);
        enc->setBytes(&params, sizeof params, 0);
        enc->setBuffer(x, 0, 1);
        enc->setBuffer(y, 0, 2);
        enc->dispatchThreads(MTL::Size(4, 1, 1), MTL::Size(4, 1, 1));
        enc->endEncoding();
        x->release();  // the command buffer keeps x alive until the work completes
        cb->commit();
        cb->waitUntilCompleted();
        EXPECT_EQ(cb->status(), MTL::CommandBufferStatusCompleted) << errorOf(cb);
        y->release();
        inner->release();
    }
    owned_.back()->release();  // the pipeline
    owned_.pop_back();
    EXPECT_EQ(mtlemu::liveObjectCount(), before);
}

TEST_F(Host, OnlyRetainingCommandBuffersKeepTheirBuffersAlive) {
    MTL::ComputePipelineState* p = pipeline("saxpy");
    for (bool retained : {true, false}) {
        NS::AutoreleasePool* inner = NS::AutoreleasePool::alloc()->init();
        MTL::CommandBuffer* cb = retained ? queue_->commandBuffer() : queue_->commandBufferWithUnretainedReferences();
        EXPECT_EQ(cb->retainedReferences(), retained);
        MTL::Buffer* b = device_->newBuffer(64, MTL::ResourceStorageModeShared);
        MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
        enc->setComputePipelineState(p);
        enc->setBuffer(b, 0, 1);
        enc->setBuffer(b, 0, 2);
        SaxpyParams params{16, 1.0f};
        enc->setBytes(&params, sizeof params, 0);
        enc->dispatchThreads(MTL::Size(16, 1, 1), MTL::Size(16, 1, 1));
        enc->endEncoding();
        const long before = mtlemu::liveObjectCount();
        b->release();  // freed at once unless the command buffer retained it
        EXPECT_EQ(mtlemu::liveObjectCount(), retained ? before : before - 1);
        inner->release();  // the command buffer was never committed: dropping it is fine
    }
}

double answer(void*, SEL, double x) { return x * 2.0; }

TEST_F(Host, ObjectiveCRuntimeApi) {
    MTL::Buffer* b = scratch(16);
    Class cls = object_getClass(reinterpret_cast<id>(b));
    EXPECT_STREQ(class_getName(cls), "MTLFakeBuffer");
    // A method added at run time, returning a double (objc_msgSend_fpret on x86-64).
    EXPECT_EQ(class_addMethod(cls, sel_registerName("emuTwice:"), reinterpret_cast<IMP>(&answer), "d@:d"), YES);
    using Twice = double (*)(void*, SEL, double);
    EXPECT_EQ(reinterpret_cast<Twice>(&objc_msgSend_fpret)(b, sel_registerName("emuTwice:"), 21.0), 42.0);
    EXPECT_EQ(sel_registerName("emuTwice:"), sel_getUid("emuTwice:"));
    EXPECT_STREQ(sel_getName(sel_registerName("emuTwice:")), "emuTwice:");
    EXPECT_NE(objc_getProtocol("MTLBuffer"), nullptr);
    EXPECT_EQ(objc_lookUpClass("NSString"), objc_getClass("NSString"));

    MTL::CommandBuffer* cb = queue_->commandBuffer();
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->GPUStartTime(), 0.0);  // CFTimeInterval through metal-cpp's fpret path
    EXPECT_EQ(cb->GPUEndTime(), 0.0);

    using Nil = long (*)(void*, SEL);
    EXPECT_EQ(reinterpret_cast<Nil>(&objc_msgSend)(nullptr, sel_registerName("length")), 0);  // nil returns 0
}

using HostDeathTest = MetalTest;

TEST_F(HostDeathTest, UnimplementedSelectorNamesItself) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    MTL::Buffer* b = scratch(16);
    using Send = void (*)(void*, SEL, void*);
    EXPECT_DEATH(reinterpret_cast<Send>(&objc_msgSend)(b, sel_registerName("foo:"), nullptr),
                 "-\\[MTLFakeBuffer foo:\\] is not implemented by the Metal emulation");
}

TEST_F(HostDeathTest, WaitingForAnUncommittedCommandBufferAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    MTL::CommandBuffer* cb = queue_->commandBuffer();
    EXPECT_DEATH(cb->waitUntilCompleted(), "never committed");
}

TEST_F(HostDeathTest, AbortOnValidationErrorIsAvailable) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    std::vector<unsigned char> big(5000);
    EXPECT_DEATH(
        {
            mtlemu::setAbortOnValidationError(true);
            MTL::CommandBuffer* cb = queue_->commandBuffer();
            cb->computeCommandEncoder()->setBytes(big.data(), big.size(), 0);
        },
        "Metal API validation: setBytes:length:5000");
}

}  // namespace
}  // namespace emutest
