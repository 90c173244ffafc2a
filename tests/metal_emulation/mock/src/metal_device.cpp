// The fake MTLDevice and what it creates directly: buffers, libraries,
// functions (with function constants) and compute pipeline states. Also the
// test hooks of mtlemu/mtlemu.h that concern them.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device_config.h"
#include "metal_objects.h"
#include "mtlemu/mtlemu.h"

namespace mtlemu {
namespace metal {

using objc::addClassMethod;
using objc::addMethod;
using objc::autorelease;
using objc::classNamed;
using objc::create;
using objc::defineClass;
using objc::imp;
using objc::makeString;
using objc::retain;
using objc::setError;
using objc::stringValue;

Settings& settings() {
    static Settings* s = new Settings();
    return *s;
}
Counters& counters() {
    static Counters* c = new Counters();
    return *c;
}

namespace {

constexpr const char* kDeviceName = "mtlemu CPU emulation of an Apple GPU";
constexpr const char* kLibraryErrorDomain = "MTLLibraryErrorDomain";
constexpr long kLibraryErrorInternal = 2;
constexpr long kLibraryErrorFunctionNotFound = 5;
constexpr long kLibraryErrorFileNotFound = 6;
constexpr long kLibraryErrorCompileFailure = 3;
constexpr NSUInteger kMaxBufferLength = NSUInteger(8) << 30;

std::atomic<std::uint64_t> gAllocated{0};
String* gDeviceName = nullptr;

id asId(const void* p) { return reinterpret_cast<id>(const_cast<void*>(p)); }

// ------------------------------------------------------------- MetalObject

id objLabel(MetalObject* self, SEL) { return asId(self->label); }
void objSetLabel(MetalObject* self, SEL, Object* label) {
    objc::assign(self->label, static_cast<String*>(label));
}
id objDevice(MetalObject*, SEL) { return asId(device()); }

// ------------------------------------------------------------------ device

id devName(Device*, SEL) { return asId(gDeviceName); }
std::uint64_t devRegistryID(Device*, SEL) { return 0x6d746c656d75ull; }
Size devMaxThreadsPerThreadgroup(Device*, SEL) {
    const NSUInteger n = deviceConfig().maxThreadsPerThreadgroup;
    return Size{n, n, n};
}
NSUInteger devMaxThreadgroupMemory(Device*, SEL) { return deviceConfig().threadgroupMemory; }
NSUInteger devMaxBufferLength(Device*, SEL) { return kMaxBufferLength; }
bool devYes(Device*, SEL) { return true; }
bool devNo(Device*, SEL) { return false; }
std::uint64_t devWorkingSet(Device*, SEL) { return std::uint64_t(16) << 30; }
NSUInteger devAllocated(Device*, SEL) { return NSUInteger(gAllocated.load()); }
// The configured family (default Apple7, an M1: Apple1-7, Mac2, Common1-3, Metal3).
bool devSupportsFamily(Device*, SEL, NSInteger family) { return supportsFamily(family); }

id devNewQueue(Device*, SEL) { return asId(create<CommandQueue>(classNamed("MTLFakeCommandQueue"))); }
id devNewQueueMax(Device* self, SEL, NSUInteger) { return devNewQueue(self, nullptr); }

Buffer* newBuffer(NSUInteger length, NSUInteger options) {
    if (length == 0 || length > kMaxBufferLength) return nullptr;  // Metal returns nil
    Buffer* b = create<Buffer>(classNamed("MTLFakeBuffer"));
    // One exact-size heap block per buffer, so AddressSanitizer reports any
    // access past its end.
    b->data = static_cast<unsigned char*>(std::malloc(length));
    if (!b->data) objc::fatal("out of memory allocating a %lu-byte MTLBuffer", length);
    b->length = length;
    b->options = options;
    gAllocated += length;
    return b;
}
id devNewBuffer(Device*, SEL, NSUInteger length, NSUInteger options) {
    Buffer* b = newBuffer(length, options);
    if (b) std::memset(b->data, int(settings().newBufferFill.load()), length);
    return asId(b);
}
id devNewBufferWithBytes(Device*, SEL, const void* bytes, NSUInteger length, NSUInteger options) {
    Buffer* b = newBuffer(length, options);
    if (b) std::memcpy(b->data, bytes, length);
    return asId(b);
}
id devNewBufferNoCopy(Device*, SEL, void* pointer, NSUInteger length, NSUInteger options,
                      DeallocatorBlock deallocator) {
    const NSUInteger page = 16384;  // Apple silicon page size; Metal returns nil otherwise
    if (!pointer || length == 0 || reinterpret_cast<std::uintptr_t>(pointer) % page != 0 || length % page != 0)
        return nullptr;
    Buffer* b = create<Buffer>(classNamed("MTLFakeBuffer"));
    b->data = static_cast<unsigned char*>(pointer);
    b->length = length;
    b->options = options;
    if (deallocator) b->deallocator = Block_copy(deallocator);
    return asId(b);
}

// True (and the NSError set) when a test injected a failure of this library load.
bool injectedLibraryFailure(void* error) {
    std::lock_guard<std::mutex> lock(settings().mutex);
    if (!settings().failNextLibrary) return false;
    settings().failNextLibrary = false;
    setError(error, kLibraryErrorDomain, kLibraryErrorFileNotFound, settings().failLibraryMessage);
    return true;
}

// Every library holds every kernel linked into the process.
Library* newLibrary(void* error, const std::string& origin) {
    if (injectedLibraryFailure(error)) return nullptr;
    if (rt::allKernels().empty())
        std::fprintf(stderr,
                     "mtlemu: warning: a Metal library was loaded but no emulated kernels are registered "
                     "(link the mpsgrad_add_emulated_metal_kernels() OBJECT library into the final binary)\n");
    Library* l = create<Library>(classNamed("MTLFakeLibrary"));
    l->origin = origin;
    return l;
}
// A library file must exist and list exactly the kernels of this build (see device_config.h).
Library* newLibraryFromFile(void* error, const std::string& path) {
    if (injectedLibraryFailure(error)) return nullptr;
    const std::string problem = checkLibraryFile(path);
    if (!problem.empty()) {
        setError(error, kLibraryErrorDomain, kLibraryErrorFileNotFound, problem);
        return nullptr;
    }
    return newLibrary(error, path);
}
id devNewLibraryWithURL(Device*, SEL, objc::URL* url, void* error) {
    return asId(newLibraryFromFile(error, url ? stringValue(url->path) : std::string()));
}
id devNewLibraryWithFile(Device*, SEL, Object* path, void* error) {
    return asId(newLibraryFromFile(error, stringValue(path)));
}
id devNewDefaultLibrary(Device*, SEL) { return asId(newLibrary(nullptr, "default.metallib")); }
id devNewDefaultLibraryWithBundle(Device*, SEL, Object*, void* error) {
    return asId(newLibrary(error, "default.metallib"));
}
id devNewLibraryWithSource(Device*, SEL, Object*, Object*, void* error) {
    setError(error, kLibraryErrorDomain, kLibraryErrorCompileFailure,
             "newLibraryWithSource:options:error: is not supported by the Metal emulation: kernels are "
             "translated ahead of time (mpsgrad_add_emulated_metal_kernels) and loaded with newLibraryWithURL:, "
             "newLibraryWithFile: or newDefaultLibrary");
    return nullptr;
}

ComputePipeline* newPipeline(Function* fn, void* error) {
    if (!fn) {
        setError(error, kLibraryErrorDomain, kLibraryErrorInternal, "compute pipeline from a nil function");
        return nullptr;
    }
    if (!fn->unspecialized.empty()) {
        setError(error, kLibraryErrorDomain, kLibraryErrorInternal, fn->unspecialized);
        return nullptr;
    }
    ComputePipeline* p = create<ComputePipeline>(classNamed("MTLFakeComputePipelineState"));
    p->kernel = fn->kernel;
    p->constants = fn->constants;
    return p;
}
id devNewPipeline(Device*, SEL, Function* fn, void* error) { return asId(newPipeline(fn, error)); }
id devNewPipelineReflection(Device*, SEL, Function* fn, NSUInteger, void* reflection, void* error) {
    if (reflection) *static_cast<void**>(reflection) = nullptr;
    return asId(newPipeline(fn, error));
}

// ------------------------------------------------------------------ buffer

void* bufContents(Buffer* self, SEL) { return self->isPrivate() ? nullptr : self->data; }
NSUInteger bufLength(Buffer* self, SEL) { return self->length; }
void bufDidModifyRange(Buffer* self, SEL, Range range) {
    if (range.location + range.length > self->length)
        objc::fatal("-[MTLBuffer didModifyRange:]: range [%lu, %lu) exceeds the buffer length %lu", range.location,
                    range.location + range.length, self->length);
}
NSUInteger bufStorageMode(Buffer* self, SEL) { return (self->options >> kStorageModeShift) & 0xF; }
NSUInteger bufCpuCacheMode(Buffer* self, SEL) { return self->options & 0xF; }
NSUInteger bufHazardTracking(Buffer* self, SEL) { return (self->options >> 8) & 0x3; }
NSUInteger bufOptions(Buffer* self, SEL) { return self->options; }
std::uint64_t bufGpuAddress(Buffer* self, SEL) { return reinterpret_cast<std::uintptr_t>(self->data); }
NSUInteger bufSetPurgeable(Buffer*, SEL, NSUInteger) { return 2; /* MTLPurgeableStateNonVolatile */ }

// ----------------------------------------------------------------- library

id libFunctionNames(Library*, SEL) {
    std::vector<Object*> names;
    for (const rt::KernelInfo* k : rt::allKernels()) names.push_back(autorelease(makeString(k->name)));
    return asId(autorelease(objc::makeArray(names)));
}

Function* makeFunction(const rt::KernelInfo* k) {
    Function* f = create<Function>(classNamed("MTLFakeFunction"));
    f->kernel = k;
    f->name = makeString(k->name);
    return f;
}

id libNewFunction(Library*, SEL, Object* name) {
    const rt::KernelInfo* k = rt::findKernel(objc::stringChars(name));
    if (!k) return nullptr;  // Metal returns nil for an unknown name
    Function* f = makeFunction(k);
    for (unsigned i = 0; i < k->numConstants; ++i) {
        if (!k->constants[i].optional) {
            f->unspecialized = std::string("function '") + k->name + "' uses function constants (" +
                               k->constants[i].name +
                               ", ...): create it with newFunctionWithName:constantValues:error:";
            break;
        }
    }
    return asId(f);
}

id libNewFunctionWithConstants(Library*, SEL, Object* name, FunctionConstantValues* values, void* error) {
    const std::string n = stringValue(name);
    const rt::KernelInfo* k = rt::findKernel(n.c_str());
    if (!k) {
        setError(error, kLibraryErrorDomain, kLibraryErrorFunctionNotFound,
                 "Function " + n + " was not found in the library");
        return nullptr;
    }
    rt::ConstantValues resolved;
    for (unsigned i = 0; i < k->numConstants; ++i) {
        const rt::FunctionConstantDecl& decl = k->constants[i];
        const FunctionConstantValues::Entry* found = nullptr;
        if (values) {
            for (const auto& e : values->entries)
                if (e.byName ? e.name == decl.name : e.index == decl.index) found = &e;
        }
        const std::string what = std::string("function constant '") + decl.name + "' [[function_constant(" +
                                 std::to_string(decl.index) + ")]] of type " + rt::dataTypeName(decl.dataType);
        if (!found) {
            if (decl.optional) continue;
            setError(error, kLibraryErrorDomain, kLibraryErrorInternal,
                     "function '" + n + "': " + what + " has no value");
            return nullptr;
        }
        if (found->type != decl.dataType) {
            setError(error, kLibraryErrorDomain, kLibraryErrorInternal,
                     "function '" + n + "': " + what + " was given a value of type " +
                         rt::dataTypeName(unsigned(found->type)));
            return nullptr;
        }
        rt::ConstantValue v{};
        v.index = decl.index;
        v.dataType = decl.dataType;
        std::memcpy(v.bytes, found->bytes, sizeof v.bytes);
        resolved.values.push_back(v);
    }
    Function* f = makeFunction(k);
    f->constants = std::move(resolved);
    return asId(f);
}

// ---------------------------------------------------------------- function

id fnName(Function* self, SEL) { return asId(self->name); }
NSUInteger fnFunctionType(Function*, SEL) { return 3; /* MTLFunctionTypeKernel */ }

// ---------------------------------------------------- function constant values

void addConstant(FunctionConstantValues* self, const void* value, NSUInteger type, bool byName, NSUInteger index,
                 const std::string& name) {
    const std::size_t size = rt::dataTypeSize(unsigned(type));
    if (size == 0)
        objc::fatal("-[MTLFunctionConstantValues setConstantValue:type:...]: MTLDataType %lu is not supported by "
                    "the Metal emulation",
                    type);
    FunctionConstantValues::Entry e{};
    e.byName = byName;
    e.index = index;
    e.name = name;
    e.type = type;
    std::memcpy(e.bytes, value, size);
    for (auto& old : self->entries) {
        if (old.byName == byName && (byName ? old.name == name : old.index == index)) {
            old = e;
            return;
        }
    }
    self->entries.push_back(e);
}
void fcvSetAtIndex(FunctionConstantValues* self, SEL, const void* value, NSUInteger type, NSUInteger index) {
    addConstant(self, value, type, false, index, "");
}
void fcvSetWithName(FunctionConstantValues* self, SEL, const void* value, NSUInteger type, Object* name) {
    addConstant(self, value, type, true, 0, stringValue(name));
}
void fcvSetRange(FunctionConstantValues* self, SEL, const void* values, NSUInteger type, Range range) {
    const std::size_t size = rt::dataTypeSize(unsigned(type));
    for (NSUInteger i = 0; i < range.length; ++i)
        addConstant(self, static_cast<const unsigned char*>(values) + i * size, type, false, range.location + i, "");
}
void fcvReset(FunctionConstantValues* self, SEL) { self->entries.clear(); }

// ---------------------------------------------------------------- pipeline

NSUInteger plMaxThreads(ComputePipeline* self, SEL) { return pipelineMaxThreads(*self->kernel); }
NSUInteger plExecutionWidth(ComputePipeline*, SEL) { return deviceConfig().simdWidth; }
NSUInteger plStaticTgMemory(ComputePipeline* self, SEL) {
    return (self->kernel->staticThreadgroupMemory + 15) / 16 * 16;
}
bool plNo(ComputePipeline*, SEL) { return false; }

}  // namespace

Buffer::~Buffer() {
    if (deallocator) {
        deallocator(data, length);
        Block_release(deallocator);
    } else {
        gAllocated -= length;
        std::free(data);
    }
}

Device* device() {
    objc::ensureInitialized();
    static Device* d = [] {
        Device* dev = create<Device>(classNamed("MTLFakeDevice"));
        objc::makeImmortal(dev);
        gDeviceName = makeString(kDeviceName);
        objc::makeImmortal(gDeviceName);
        return dev;
    }();
    return d;
}

void validationFailure(CommandBuffer* cb, const std::string& message) {
    std::fprintf(stderr, "mtlemu: Metal API validation: %s\n", message.c_str());
    if (settings().abortOnValidation) std::abort();
    if (cb && cb->validationError.empty()) cb->validationError = message;
}

std::string describe(const MetalObject* o, const char* kind, int index) {
    std::string s = std::string(kind) + " " + std::to_string(index);
    if (o && o->label) s += " ('" + stringValue(o->label) + "')";
    return s;
}

}  // namespace metal

namespace objc {

void registerMetalClasses() {
    using namespace metal;
    ClassInfo* base = defineClass<MetalObject>("MTLFakeObject", "NSObject");
    addMethod(base, "label", imp(objLabel));
    addMethod(base, "setLabel:", imp(objSetLabel));
    addMethod(base, "device", imp(objDevice));

    ClassInfo* d = defineClass<Device>("MTLFakeDevice", "MTLFakeObject");
    addMethod(d, "name", imp(devName));
    addMethod(d, "registryID", imp(devRegistryID));
    addMethod(d, "maxThreadsPerThreadgroup", imp(devMaxThreadsPerThreadgroup));
    addMethod(d, "maxThreadgroupMemoryLength", imp(devMaxThreadgroupMemory));
    addMethod(d, "maxBufferLength", imp(devMaxBufferLength));
    addMethod(d, "hasUnifiedMemory", imp(devYes));
    addMethod(d, "isLowPower", imp(devNo));
    addMethod(d, "isHeadless", imp(devNo));
    addMethod(d, "isRemovable", imp(devNo));
    addMethod(d, "recommendedMaxWorkingSetSize", imp(devWorkingSet));
    addMethod(d, "currentAllocatedSize", imp(devAllocated));
    addMethod(d, "supportsFamily:", imp(devSupportsFamily));
    addMethod(d, "newCommandQueue", imp(devNewQueue));
    addMethod(d, "newCommandQueueWithMaxCommandBufferCount:", imp(devNewQueueMax));
    addMethod(d, "newBufferWithLength:options:", imp(devNewBuffer));
    addMethod(d, "newBufferWithBytes:length:options:", imp(devNewBufferWithBytes));
    addMethod(d, "newBufferWithBytesNoCopy:length:options:deallocator:", imp(devNewBufferNoCopy));
    addMethod(d, "newLibraryWithURL:error:", imp(devNewLibraryWithURL));
    addMethod(d, "newLibraryWithFile:error:", imp(devNewLibraryWithFile));
    addMethod(d, "newDefaultLibrary", imp(devNewDefaultLibrary));
    addMethod(d, "newDefaultLibraryWithBundle:error:", imp(devNewDefaultLibraryWithBundle));
    addMethod(d, "newLibraryWithSource:options:error:", imp(devNewLibraryWithSource));
    addMethod(d, "newComputePipelineStateWithFunction:error:", imp(devNewPipeline));
    addMethod(d, "newComputePipelineStateWithFunction:options:reflection:error:", imp(devNewPipelineReflection));

    ClassInfo* b = defineClass<Buffer>("MTLFakeBuffer", "MTLFakeObject");
    addMethod(b, "contents", imp(bufContents));
    addMethod(b, "length", imp(bufLength));
    addMethod(b, "allocatedSize", imp(bufLength));
    addMethod(b, "didModifyRange:", imp(bufDidModifyRange));
    addMethod(b, "storageMode", imp(bufStorageMode));
    addMethod(b, "cpuCacheMode", imp(bufCpuCacheMode));
    addMethod(b, "hazardTrackingMode", imp(bufHazardTracking));
    addMethod(b, "resourceOptions", imp(bufOptions));
    addMethod(b, "gpuAddress", imp(bufGpuAddress));
    addMethod(b, "setPurgeableState:", imp(bufSetPurgeable));

    ClassInfo* l = defineClass<Library>("MTLFakeLibrary", "MTLFakeObject");
    addMethod(l, "functionNames", imp(libFunctionNames));
    addMethod(l, "newFunctionWithName:", imp(libNewFunction));
    addMethod(l, "newFunctionWithName:constantValues:error:", imp(libNewFunctionWithConstants));

    ClassInfo* f = defineClass<Function>("MTLFakeFunction", "MTLFakeObject");
    addMethod(f, "name", imp(fnName));
    addMethod(f, "functionType", imp(fnFunctionType));

    ClassInfo* v = defineClass<FunctionConstantValues>("MTLFunctionConstantValues", "NSObject");
    addMethod(v, "setConstantValue:type:atIndex:", imp(fcvSetAtIndex));
    addMethod(v, "setConstantValue:type:withName:", imp(fcvSetWithName));
    addMethod(v, "setConstantValues:type:withRange:", imp(fcvSetRange));
    addMethod(v, "reset", imp(fcvReset));

    // MTLCompileOptions can be made (for newLibraryWithSource:), not configured.
    defineClass<Object>("MTLCompileOptions", "NSObject");

    ClassInfo* p = defineClass<ComputePipeline>("MTLFakeComputePipelineState", "MTLFakeObject");
    addMethod(p, "maxTotalThreadsPerThreadgroup", imp(plMaxThreads));
    addMethod(p, "threadExecutionWidth", imp(plExecutionWidth));
    addMethod(p, "staticThreadgroupMemoryLength", imp(plStaticTgMemory));
    addMethod(p, "supportIndirectCommandBuffers", imp(plNo));

    registerCommandClasses();
}

}  // namespace objc

// ===================================================================== hooks

void failNextCommandBuffer(const char* message, long code) {
    auto& s = metal::settings();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.failNextCommandBuffer = true;
    s.failMessage = message ? message : "";
    s.failCode = code;
}

void failNextLibraryLoad(const char* message) {
    auto& s = metal::settings();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.failNextLibrary = true;
    s.failLibraryMessage = message ? message : "";
}

void setWorkerThreads(unsigned n) { rt::setWorkerThreads(n); }
void setReverseThreadOrder(bool reverse) { rt::setReverseThreadOrder(reverse); }
void setNewBufferFill(unsigned char byte) { metal::settings().newBufferFill = byte; }
void setAbortOnValidationError(bool abortOnError) { metal::settings().abortOnValidation = abortOnError; }

Stats stats() {
    auto& c = metal::counters();
    Stats s;
    s.commandBuffers = c.commandBuffers;
    s.failedCommandBuffers = c.failedCommandBuffers;
    s.dispatches = c.dispatches;
    s.blits = c.blits;
    s.threadgroups = c.threadgroups;
    s.threads = c.threads;
    s.barriers = c.barriers;
    s.simdOps = c.simdOps;
    return s;
}

void resetStats() {
    auto& c = metal::counters();
    c.commandBuffers = c.failedCommandBuffers = c.dispatches = c.blits = 0;
    c.threadgroups = c.threads = c.barriers = c.simdOps = 0;
}

std::vector<std::string> kernelNames() {
    std::vector<std::string> out;
    for (const rt::KernelInfo* k : rt::allKernels()) out.push_back(k->name);
    return out;
}

}  // namespace mtlemu

// ============================================================ Metal C API

extern "C" {

__attribute__((visibility("default"))) void* MTLCreateSystemDefaultDevice(void) {
    return mtlemu::metal::device();  // a +1 reference to the shared device (immortal here)
}

__attribute__((visibility("default"))) void* MTLCopyAllDevices(void) {
    mtlemu::objc::Object* d = mtlemu::metal::device();
    return mtlemu::objc::makeArray({d});
}

__attribute__((visibility("default"))) void* MTLCopyAllDevicesWithObserver(void** observer, void* /*handler*/) {
    if (observer) *observer = nullptr;  // devices never come and go here
    return MTLCopyAllDevices();
}

__attribute__((visibility("default"))) void MTLRemoveDeviceObserver(const void*) {}

void mtlemu_fail_next_command_buffer(const char* message) { mtlemu::failNextCommandBuffer(message); }
void mtlemu_fail_next_library_load(const char* message) { mtlemu::failNextLibraryLoad(message); }
void mtlemu_set_worker_threads(unsigned n) { mtlemu::setWorkerThreads(n); }
void mtlemu_set_reverse_thread_order(int reverse) { mtlemu::setReverseThreadOrder(reverse != 0); }
void mtlemu_set_new_buffer_fill(unsigned char byte) { mtlemu::setNewBufferFill(byte); }

}  // extern "C"
