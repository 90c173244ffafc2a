// A shared module in the shape of a Python extension: metal-cpp host code,
// the mock runtime and the emulated kernels linked into one .so, used from
// Python through ctypes (test_shared_module.py).
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <cstring>
#include <string>

#include "emu_test_params.h"

namespace {
std::string gLastError;
}

// Runs saxpy (y = a * x + y) on n floats; returns the command buffer status.
extern "C" __attribute__((visibility("default"))) int emu_module_saxpy(float a, const float* x, float* y, int n) {
    NS::AutoreleasePool* pool = NS::AutoreleasePool::alloc()->init();
    MTL::Device* device = MTL::CreateSystemDefaultDevice();
    MTL::CommandQueue* queue = device->newCommandQueue();
    MTL::Library* library = device->newDefaultLibrary();
    MTL::Function* fn = library->newFunction(MTLSTR("saxpy"));
    NS::Error* error = nullptr;
    MTL::ComputePipelineState* pso = device->newComputePipelineState(fn, &error);
    MTL::Buffer* bx = device->newBuffer(x, sizeof(float) * n, MTL::ResourceStorageModeShared);
    MTL::Buffer* by = device->newBuffer(y, sizeof(float) * n, MTL::ResourceStorageModeShared);
    const emutest::SaxpyParams params{n, a};
    MTL::CommandBuffer* cb = queue->commandBuffer();
    MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
    enc->setComputePipelineState(pso);
    enc->setBytes(&params, sizeof params, 0);
    enc->setBuffer(bx, 0, 1);
    enc->setBuffer(by, 0, 2);
    enc->dispatchThreads(MTL::Size(NS::UInteger(n), 1, 1), MTL::Size(64, 1, 1));
    enc->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();
    const int status = int(cb->status());
    gLastError = cb->error() ? cb->error()->localizedDescription()->utf8String() : "";
    std::memcpy(y, by->contents(), sizeof(float) * n);
    bx->release();
    by->release();
    pso->release();
    fn->release();
    library->release();
    queue->release();
    pool->release();
    return status;
}

extern "C" __attribute__((visibility("default"))) const char* emu_module_last_error() { return gLastError.c_str(); }
