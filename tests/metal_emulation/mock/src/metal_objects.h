// The fake Metal objects of the emulation (internal).
//
// The device models one Apple-silicon GPU (unified memory, 32-wide
// simdgroups, 1024 threads and 32 KiB of threadgroup memory per threadgroup).
// Kernels come from the mtlemu kernel registry; command buffers execute when
// someone waits for them, in queue order, on the kernel runtime's workers.
#pragma once

#include <Block.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "foundation.h"
#include "mtlemu/kernel_runtime.h"

namespace mtlemu {
namespace metal {

using objc::ClassInfo;
using objc::NSInteger;
using objc::NSUInteger;
using objc::Object;
using objc::String;

// ABI twins of MTL::Size and NS::Range (passed by value in messages).
struct Size {
    NSUInteger width, height, depth;
};
struct Range {
    NSUInteger location, length;
};

// MTLCommandBufferStatus
enum : NSUInteger {
    kStatusNotEnqueued = 0,
    kStatusEnqueued = 1,
    kStatusCommitted = 2,
    kStatusScheduled = 3,
    kStatusCompleted = 4,
    kStatusError = 5,
};
// MTLCommandBufferError
enum : long {
    kCommandBufferErrorInternal = 1,
    kCommandBufferErrorInvalidResource = 9,
};
// MTLResourceOptions: storage mode in bits 4-7, CPU cache mode in bits 0-3,
// hazard tracking in bits 8-9.
constexpr NSUInteger kStorageModeShift = 4;
constexpr NSUInteger kStorageModePrivate = 2;
constexpr NSUInteger kBufferBindings = rt::kMaxBufferBindings;
constexpr NSUInteger kMaxSetBytesLength = 4096;

using CompletionBlock = void (^)(void* commandBuffer);
using DeallocatorBlock = void (^)(void* pointer, NSUInteger length);

// Objects with a label property (every Metal object here).
struct MetalObject : Object {
    String* label = nullptr;
    ~MetalObject() { objc::release(label); }
};

struct Device : MetalObject {};

struct Buffer : MetalObject {
    unsigned char* data = nullptr;
    NSUInteger length = 0;
    NSUInteger options = 0;
    DeallocatorBlock deallocator = nullptr;  // newBufferWithBytesNoCopy:...
    ~Buffer();
    bool isPrivate() const { return ((options >> kStorageModeShift) & 0xF) == kStorageModePrivate; }
};

struct Library : MetalObject {
    std::string origin;  // the path or URL it was "loaded" from
};

struct Function : MetalObject {
    const rt::KernelInfo* kernel = nullptr;
    rt::ConstantValues constants;
    std::string unspecialized;  // non-empty: why a pipeline cannot be made from it
    String* name = nullptr;
    ~Function() { objc::release(name); }
};

struct ComputePipeline : MetalObject {
    const rt::KernelInfo* kernel = nullptr;
    rt::ConstantValues constants;
};

struct FunctionConstantValues : Object {
    struct Entry {
        bool byName;
        NSUInteger index;
        std::string name;
        NSUInteger type;
        unsigned char bytes[8];
    };
    std::vector<Entry> entries;
};

// A buffer binding of an encoder: a buffer and offset, or setBytes data.
struct Binding {
    Buffer* buffer = nullptr;
    NSUInteger offset = 0;
    std::shared_ptr<unsigned char> bytes;  // exactly bytesLength bytes, so ASan sees overreads
    NSUInteger bytesLength = 0;
    bool bound = false;
};

struct Command {
    enum Kind { kDispatch, kCopy, kFill } kind = kDispatch;
    std::string where;  // "compute encoder 0 ('label'), dispatch 1" for messages
    // kDispatch
    ComputePipeline* pipeline = nullptr;
    Binding bindings[kBufferBindings];
    NSUInteger threadgroupLengths[kBufferBindings] = {};
    unsigned grid[3] = {1, 1, 1};
    unsigned threadsPerThreadgroup[3] = {1, 1, 1};
    bool gridIsThreads = false;
    // kCopy / kFill
    Buffer* source = nullptr;
    NSUInteger sourceOffset = 0;
    Buffer* destination = nullptr;
    NSUInteger destinationOffset = 0;
    NSUInteger size = 0;
    unsigned char value = 0;
};

struct CommandBuffer;

struct CommandQueue : MetalObject {
    std::mutex listMutex;
    std::deque<CommandBuffer*> pending;  // committed or enqueued, not yet executed (each retained)
    std::recursive_mutex executeMutex;   // held while this queue's command buffers execute
};

struct CommandBuffer : MetalObject {
    CommandQueue* queue = nullptr;  // retained
    bool retainedReferences = true;
    std::atomic<NSUInteger> status{kStatusNotEnqueued};
    objc::Error* error = nullptr;
    std::vector<Command> commands;
    std::vector<Object*> kept;  // resources retained until completion
    std::vector<CompletionBlock> completedHandlers, scheduledHandlers;
    Object* activeEncoder = nullptr;  // not retained
    int encoders = 0;
    std::string validationError;       // first Metal API validation failure
    bool forceFailure = false;
    std::string forcedMessage;
    long forcedCode = 0;
    ~CommandBuffer();

    bool finished() const {
        const NSUInteger s = status.load();
        return s == kStatusCompleted || s == kStatusError;
    }
    void keep(Object* o);
    void releaseResources();
};

struct ComputeEncoder : MetalObject {
    CommandBuffer* commandBuffer = nullptr;  // retained
    ComputePipeline* pipeline = nullptr;      // not retained (the command keeps it)
    Binding bindings[kBufferBindings];
    NSUInteger threadgroupLengths[kBufferBindings] = {};
    bool ended = false;
    int index = 0;
    int dispatches = 0;
    ~ComputeEncoder();
};

struct BlitEncoder : MetalObject {
    CommandBuffer* commandBuffer = nullptr;  // retained
    bool ended = false;
    int index = 0;
    int commands = 0;
    ~BlitEncoder();
};

// ------------------------------------------------------------------ shared state

Device* device();
// Records a Metal API validation failure on cb (or aborts, if so configured).
void validationFailure(CommandBuffer* cb, const std::string& message);
std::string describe(const MetalObject* o, const char* kind, int index);

struct Settings {
    std::atomic<unsigned> newBufferFill{0};
    std::atomic<bool> abortOnValidation{false};
    std::mutex mutex;
    bool failNextCommandBuffer = false;
    std::string failMessage;
    long failCode = 0;
    bool failNextLibrary = false;
    std::string failLibraryMessage;
};
Settings& settings();

struct Counters {
    std::atomic<std::uint64_t> commandBuffers{0}, failedCommandBuffers{0}, dispatches{0}, blits{0},
        threadgroups{0}, threads{0}, barriers{0}, simdOps{0};
};
Counters& counters();

void registerCommandClasses();  // metal_commands.cpp

}  // namespace metal
}  // namespace mtlemu
