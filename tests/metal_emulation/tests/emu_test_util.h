// A gtest fixture that drives the emulation the way a metal-cpp compute
// backend does: one device, one queue, one library, pipelines by name.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mtlemu/mtlemu.h"

namespace emutest {

inline NS::String* nsString(const char* s) { return NS::String::string(s, NS::UTF8StringEncoding); }
inline std::string str(const NS::String* s) { return s ? s->utf8String() : std::string(); }
inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

class MetalTest : public ::testing::Test {
public:
    void SetUp() override {
        pool_ = NS::AutoreleasePool::alloc()->init();
        device_ = MTL::CreateSystemDefaultDevice();
        ASSERT_NE(device_, nullptr);
        queue_ = device_->newCommandQueue();
        library_ = device_->newDefaultLibrary();  // every kernel linked into the test
        ASSERT_NE(library_, nullptr);
    }

    void TearDown() override {
        for (NS::Object* o : owned_) o->release();
        owned_.clear();
        library_->release();
        queue_->release();
        device_->release();
        pool_->release();
        mtlemu::setReverseThreadOrder(false);
        mtlemu::setWorkerThreads(0);
        mtlemu::setNewBufferFill(0);
    }

    template <class T>
    T* own(T* o) {
        if (o) owned_.push_back(o);
        return o;
    }

    MTL::ComputePipelineState* pipeline(const char* name) {
        MTL::Function* fn = library_->newFunction(nsString(name));
        EXPECT_NE(fn, nullptr) << "no kernel " << name;
        if (!fn) return nullptr;
        NS::Error* error = nullptr;
        MTL::ComputePipelineState* p = device_->newComputePipelineState(fn, &error);
        fn->release();
        EXPECT_NE(p, nullptr) << (error ? str(error->localizedDescription()) : std::string());
        return own(p);
    }

    template <class T>
    MTL::Buffer* upload(const std::vector<T>& v) {
        return own(device_->newBuffer(v.data(), v.size() * sizeof(T), MTL::ResourceStorageModeShared));
    }
    MTL::Buffer* scratch(std::size_t bytes) {
        return own(device_->newBuffer(bytes, MTL::ResourceStorageModeShared));
    }
    template <class T>
    static std::vector<T> download(MTL::Buffer* b, std::size_t n) {
        std::vector<T> v(n);
        std::memcpy(v.data(), b->contents(), n * sizeof(T));
        return v;
    }

    // Encodes one compute pass with `encode`, commits and (optionally) waits.
    template <class F>
    MTL::CommandBuffer* run(F encode, bool wait = true) {
        MTL::CommandBuffer* cb = queue_->commandBuffer();
        MTL::ComputeCommandEncoder* enc = cb->computeCommandEncoder();
        encode(enc);
        enc->endEncoding();
        cb->commit();
        if (wait) cb->waitUntilCompleted();
        return cb;
    }

    static std::string errorOf(MTL::CommandBuffer* cb) {
        NS::Error* e = cb->error();
        return e ? str(e->localizedDescription()) : std::string();
    }

    NS::AutoreleasePool* pool_ = nullptr;
    MTL::Device* device_ = nullptr;
    MTL::CommandQueue* queue_ = nullptr;
    MTL::Library* library_ = nullptr;
    std::vector<NS::Object*> owned_;
};

}  // namespace emutest
