// Runs the deliberately unchecked kernel scale_unchecked (oob.metal) with the
// grid rounded up to whole threadgroups, so its last threads read past the end
// of x. Built with AddressSanitizer, this must abort with a heap-buffer-overflow
// report that names oob.metal and the line of the read.
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <cstdio>
#include <vector>

int main() {
    NS::AutoreleasePool* pool = NS::AutoreleasePool::alloc()->init();
    MTL::Device* device = MTL::CreateSystemDefaultDevice();
    MTL::CommandQueue* queue = device->newCommandQueue();
    NS::Error* error = nullptr;
    MTL::Library* library = device->newDefaultLibrary();
    MTL::Function* fn = library->newFunction(MTLSTR("scale_unchecked"));
    MTL::ComputePipelineState* pso = device->newComputePipelineState(fn, &error);

    const unsigned n = 1000;  // 4 threadgroups of 256 threads: 24 threads too many
    std::vector<float> x(n, 1.0f);
    MTL::Buffer* bx = device->newBuffer(x.data(), n * sizeof(float), MTL::ResourceStorageModeShared);
    MTL::Buffer* by = device->newBuffer(1024 * sizeof(float), MTL::ResourceStorageModeShared);
    const float a = 2.0f;

    MTL::CommandBuffer* cb = queue->commandBuffer();
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(pso);
    enc->setBuffer(bx, 0, 0);
    enc->setBuffer(by, 0, 1);
    enc->setBytes(&a, sizeof a, 2);
    enc->dispatchThreadgroups(MTL::Size(4, 1, 1), MTL::Size(256, 1, 1));
    enc->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();

    std::printf("asan_probe: no out-of-bounds read was detected\n");
    bx->release();
    by->release();
    pso->release();
    fn->release();
    library->release();
    queue->release();
    pool->release();
    return 0;
}
