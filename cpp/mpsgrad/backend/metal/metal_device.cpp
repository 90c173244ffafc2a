#include "backend/metal/metal_device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_context.h"

namespace mpsgrad::metal_backend {

namespace {

constexpr const char* kLibraryFile = "mpsgrad.metallib";
constexpr NS::UInteger kSimdWidth = 32;            // the simd_sum reductions of the kernels assume it
constexpr NS::UInteger kLargestThreadgroup = 256;  // the widest threadgroup a kernel is written for

std::string errorText(NS::Error* error) {
    NS::String* text = error ? error->localizedDescription() : nullptr;
    return text && text->utf8String() ? text->utf8String() : "no error description";
}

bool readable(const std::string& path) { return !path.empty() && access(path.c_str(), R_OK) == 0; }

// The directory of the shared object (or executable) this function was linked into.
std::string ownBinaryDirectory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ownBinaryDirectory), &info) == 0 || !info.dli_fname) return "";
    std::string path = info.dli_fname;
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

Ref<MTL::Library> loadFile(MTL::Device* device, const std::string& path, std::string& error) {
    AutoreleaseScope pool;
    NS::URL* url = NS::URL::fileURLWithPath(NS::String::string(path.c_str(), NS::UTF8StringEncoding));
    NS::Error* nsError = nullptr;
    auto library = adopt(device->newLibrary(url, &nsError));
    if (!library) error = path + ": " + errorText(nsError);
    return library;
}

}  // namespace

bool supportsKernels(MTL::Device* device) {
    return device->supportsFamily(MTL::GPUFamilyApple7) || device->supportsFamily(MTL::GPUFamilyMac2);
}

std::string unsuitableReason(MTL::Device* device, MTL::Library* library) {
    if (!supportsKernels(device)) return "lacks SIMD-group reductions (GPU family Apple7 or Mac2 needed)";
    const NS::UInteger maxThreads = device->maxThreadsPerThreadgroup().width;
    if (maxThreads < kLargestThreadgroup)
        return "allows " + std::to_string(maxThreads) + " threads per threadgroup; the kernels need " +
               std::to_string(kLargestThreadgroup);
    // The SIMD width is a property of pipelines, not of the device: build the smallest kernel.
    AutoreleaseScope pool;
    auto constants = adopt(MTL::FunctionConstantValues::alloc()->init());
    const bool no = false;
    for (NS::UInteger index : {1u, 3u}) constants->setConstantValue(&no, MTL::DataTypeBool, index);
    NS::Error* error = nullptr;
    auto function = adopt(library->newFunction(MTLSTR("fill_floats"), constants.get(), &error));
    if (!function) return "cannot specialise the kernel fill_floats: " + errorText(error);
    auto probe = adopt(device->newComputePipelineState(function.get(), &error));
    if (!probe) return "cannot build the pipeline of fill_floats: " + errorText(error);
    const NS::UInteger width = probe->threadExecutionWidth();
    if (width != kSimdWidth)
        return "runs " + std::to_string(width) + "-wide SIMD groups; mpsgrad's kernels are written for " +
               std::to_string(kSimdWidth) + "-wide ones (Apple GPUs)";
    return "";
}

Ref<MTL::Device> selectDevice() {
    Ref<MTL::Device> fallback = adopt(MTL::CreateSystemDefaultDevice());
    if (fallback && supportsKernels(fallback.get())) return fallback;
    // Command-line processes (and CI virtual machines) may get no default device while
    // MTLCopyAllDevices still lists one; a default device without the needed features may have a
    // capable sibling (a Mac with two GPUs).
    NS::Array* all = MTL::CopyAllDevices();
    Ref<MTL::Device> chosen;
    for (NS::UInteger i = 0; all && i < all->count() && !chosen; ++i) {
        auto* device = all->object<MTL::Device>(i);
        if (!fallback) fallback = retain(device);
        if (supportsKernels(device)) chosen = retain(device);
    }
    if (all) all->release();
    return chosen ? chosen : fallback;
}

KernelLibrary loadKernelLibrary(MTL::Device* device) {
    std::string error;
    if (const char* env = std::getenv("MPSGRAD_METALLIB"); env && *env) {
        auto library = loadFile(device, env, error);
        if (!library) throw MetalError("MPSGRAD_METALLIB names a kernel library Metal cannot load: " + error);
        return {library, env};
    }

    std::vector<std::string> tried;
    std::vector<std::string> candidates = {ownBinaryDirectory() + "/" + kLibraryFile};
#ifdef MPSGRAD_METALLIB_BUILD_PATH
    candidates.push_back(MPSGRAD_METALLIB_BUILD_PATH);
#endif
    for (const std::string& path : candidates) {
        if (!readable(path)) {
            tried.push_back(path + " (not found)");
            continue;
        }
        if (auto library = loadFile(device, path, error)) return {library, path};
        tried.push_back(error);
    }

    AutoreleaseScope pool;
    if (auto library = adopt(device->newDefaultLibrary())) return {library, "the default library"};
    tried.push_back("the default library (none)");

    std::string list;
    for (const std::string& t : tried) list += (list.empty() ? "" : "; ") + t;
    throw MetalError(std::string("no Metal kernel library (") + kLibraryFile +
                     "): set MPSGRAD_METALLIB to its path. Tried: " + list);
}

}  // namespace mpsgrad::metal_backend
