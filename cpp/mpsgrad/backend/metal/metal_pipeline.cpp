#include "backend/metal/metal_pipeline.h"

#include <algorithm>

#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_context.h"

namespace mpsgrad::metal_backend {

FunctionConstants& FunctionConstants::setBool(unsigned index, bool value) {
    set(Value{index, true, value ? 1 : 0});
    return *this;
}

FunctionConstants& FunctionConstants::setInt(unsigned index, int32_t value) {
    set(Value{index, false, value});
    return *this;
}

void FunctionConstants::set(Value v) {
    auto at = std::lower_bound(values_.begin(), values_.end(), v.index,
                               [](const Value& a, unsigned index) { return a.index < index; });
    if (at != values_.end() && at->index == v.index)
        *at = v;
    else
        values_.insert(at, v);
}

std::string FunctionConstants::key() const {
    std::string key;
    for (const Value& v : values_) {
        if (!key.empty()) key += ',';
        key += std::to_string(v.index) + (v.isBool ? ":b" : ":i") + std::to_string(v.value);
    }
    return key;
}

Ref<MTL::FunctionConstantValues> FunctionConstants::toMetal() const {
    auto values = adopt(MTL::FunctionConstantValues::alloc()->init());
    for (const Value& v : values_) {
        if (v.isBool) {
            bool b = v.value != 0;
            values->setConstantValue(&b, MTL::DataTypeBool, v.index);
        } else {
            values->setConstantValue(&v.value, MTL::DataTypeInt, v.index);
        }
    }
    return values;
}

PipelineCache::PipelineCache(Ref<MTL::Device> device, Ref<MTL::Library> library,
                             std::string libraryDescription)
    : device_(std::move(device)), library_(std::move(library)), libraryDescription_(std::move(libraryDescription)) {}

size_t PipelineCache::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipelines_.size();
}

const Pipeline& PipelineCache::get(const std::string& kernel, const FunctionConstants& constants) {
    const std::string key = constants.empty() ? kernel : kernel + '[' + constants.key() + ']';
    // Building under the lock keeps one pipeline per key; builds are rare (once per variant).
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = pipelines_.find(key);
    if (found != pipelines_.end()) return *found->second;
    std::unique_ptr<Pipeline> built = build(kernel, constants);
    built->name = key;
    return *pipelines_.emplace(key, std::move(built)).first->second;
}

namespace {

std::string describe(NS::Error* error) {
    if (!error) return "no error description";
    NS::String* text = error->localizedDescription();
    return text ? text->utf8String() : "no error description";
}

}  // namespace

std::unique_ptr<Pipeline> PipelineCache::build(const std::string& kernel, const FunctionConstants& constants) const {
    AutoreleaseScope pool;
    NS::String* name = NS::String::string(kernel.c_str(), NS::UTF8StringEncoding);
    NS::Error* error = nullptr;
    Ref<MTL::Function> function;
    if (constants.empty()) {
        function = adopt(library_->newFunction(name));
    } else {
        function = adopt(library_->newFunction(name, constants.toMetal().get(), &error));
    }
    if (!function) {
        throw MetalError("Metal kernel '" + kernel + "' is not in the kernel library (" + libraryDescription_ +
                         ")" + (error ? ": " + describe(error) : std::string()) +
                         "; the library and the mpsgrad binary may come from different builds");
    }
    error = nullptr;
    auto state = adopt(device_->newComputePipelineState(function.get(), &error));
    if (!state)
        throw MetalError("Metal could not build the pipeline of kernel '" + kernel + "' (" + constants.key() +
                         "): " + describe(error));
    auto pipeline = std::make_unique<Pipeline>();
    pipeline->state = state;
    pipeline->maxThreadsPerThreadgroup = unsigned(state->maxTotalThreadsPerThreadgroup());
    pipeline->threadExecutionWidth = unsigned(state->threadExecutionWidth());
    return pipeline;
}

}  // namespace mpsgrad::metal_backend
