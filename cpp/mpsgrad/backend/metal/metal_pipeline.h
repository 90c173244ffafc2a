// Internal to the Metal backend: compute pipeline states, built once per (kernel, function
// constant values) and kept for the life of the backend.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "backend/metal/metal_ref.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mpsgrad::metal_backend {

// The values of a kernel's [[function_constant(i)]] declarations. A kernel is specialised per
// value set, so the constants are part of the pipeline's cache key.
class FunctionConstants {
public:
    FunctionConstants& setBool(unsigned index, bool value);
    FunctionConstants& setInt(unsigned index, int32_t value);

    bool empty() const { return values_.empty(); }
    // A stable text form, e.g. "0:i5,1:b1" (values sorted by index).
    std::string key() const;
    // A new MTLFunctionConstantValues holding the values (owned by the caller).
    Ref<MTL::FunctionConstantValues> toMetal() const;

private:
    struct Value {
        unsigned index;
        bool isBool;
        int32_t value;
    };
    void set(Value v);
    std::vector<Value> values_;
};

// A built pipeline with the limits the dispatch helper sizes threadgroups from.
struct Pipeline {
    std::string name;  // kernel name and constants, for messages
    Ref<MTL::ComputePipelineState> state;
    unsigned maxThreadsPerThreadgroup;
    unsigned threadExecutionWidth;
};

class PipelineCache {
public:
    // `libraryDescription` says where the library came from, for error messages.
    PipelineCache(Ref<MTL::Device> device, Ref<MTL::Library> library,
                  std::string libraryDescription);

    // The pipeline of `kernel` specialised with `constants`; built on first use. MetalError
    // when the library has no such kernel or Metal cannot build it. Thread-safe; the
    // reference stays valid for the life of the cache.
    const Pipeline& get(const std::string& kernel, const FunctionConstants& constants = {});

    size_t size() const;
    const std::string& libraryDescription() const { return libraryDescription_; }

private:
    std::unique_ptr<Pipeline> build(const std::string& kernel, const FunctionConstants& constants) const;

    Ref<MTL::Device> device_;
    Ref<MTL::Library> library_;
    std::string libraryDescription_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;
};

}  // namespace mpsgrad::metal_backend
