// Command queues, command buffers and the compute and blit encoders of the
// fake Metal device.
//
// Encoding only records commands (setBytes data is copied at that moment).
// Nothing runs at commit: a queue executes its committed command buffers, in
// order, when the host waits for one of them (waitUntilCompleted), so host
// code that reads results without waiting sees stale memory, as it may on a
// GPU. A failing command (kernel fault, Metal API validation failure, injected
// failure) makes its command buffer's status MTLCommandBufferStatusError with
// an NSError describing it; completion handlers run either way.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device_config.h"
#include "metal_objects.h"

namespace mtlemu {
namespace metal {

using objc::addMethod;
using objc::autorelease;
using objc::classNamed;
using objc::create;
using objc::defineClass;
using objc::fatal;
using objc::imp;
using objc::release;
using objc::retain;
using objc::stringValue;

namespace {

id asId(const void* p) { return reinterpret_cast<id>(const_cast<void*>(p)); }

std::string cbName(const CommandBuffer* cb) {
    return cb->label ? "command buffer '" + stringValue(cb->label) + "'" : std::string("command buffer");
}

const char* statusName(NSUInteger s) {
    switch (s) {
        case kStatusNotEnqueued: return "not enqueued";
        case kStatusEnqueued: return "enqueued";
        case kStatusCommitted: return "committed";
        case kStatusScheduled: return "scheduled";
        case kStatusCompleted: return "completed";
        default: return "failed";
    }
}

// ---------------------------------------------------------------- execution

std::string executeCommand(Command& c) {
    switch (c.kind) {
        case Command::kDispatch: {
            rt::DispatchDesc d;
            d.kernel = c.pipeline->kernel;
            for (NSUInteger i = 0; i < kBufferBindings; ++i) {
                const Binding& b = c.bindings[i];
                if (b.bytes) {
                    d.buffers[i] = b.bytes.get();
                    d.bufferLengths[i] = b.bytesLength;
                } else if (b.buffer) {
                    d.buffers[i] = b.buffer->data + b.offset;
                    d.bufferLengths[i] = b.buffer->length - b.offset;
                }
                d.threadgroupLengths[i] = c.threadgroupLengths[i];
            }
            for (int i = 0; i < 3; ++i) {
                d.grid[i] = c.grid[i];
                d.threadsPerThreadgroup[i] = c.threadsPerThreadgroup[i];
            }
            d.gridIsThreads = c.gridIsThreads;
            d.constants = &c.pipeline->constants;
            recordVariant(*c.pipeline->kernel, c.pipeline->constants);
            const rt::DispatchResult r = rt::dispatch(d);
            recordKernelStats(*c.pipeline->kernel, r);
            Counters& n = counters();
            n.dispatches++;
            n.threadgroups += r.threadgroups;
            n.threads += r.threads;
            n.barriers += r.barriers;
            n.simdOps += r.simdOps;
            return r.ok ? std::string() : r.error;
        }
        case Command::kCopy:
            std::memmove(c.destination->data + c.destinationOffset, c.source->data + c.sourceOffset, c.size);
            counters().blits++;
            return std::string();
        case Command::kFill:
            std::memset(c.destination->data + c.destinationOffset, c.value, c.size);
            counters().blits++;
            return std::string();
    }
    return "unknown command";
}

void runCommandBuffer(CommandBuffer* cb) {
    cb->status = kStatusScheduled;
    for (CompletionBlock h : cb->scheduledHandlers) {
        h(cb);
        Block_release(h);
    }
    cb->scheduledHandlers.clear();

    std::string error;
    long code = kCommandBufferErrorInternal;
    if (cb->forceFailure) {
        error = cb->forcedMessage;
        code = cb->forcedCode;
    } else if (!cb->validationError.empty()) {
        error = cbName(cb) + ": Metal API validation failed: " + cb->validationError;
        code = kCommandBufferErrorInvalidResource;
    } else {
        for (Command& c : cb->commands) {
            std::string e = executeCommand(c);
            if (!e.empty()) {
                error = cbName(cb) + ", " + c.where + ": " + e;
                break;
            }
        }
    }
    counters().commandBuffers++;
    if (error.empty()) {
        cb->status = kStatusCompleted;
    } else {
        counters().failedCommandBuffers++;
        objc::release(cb->error);
        cb->error = objc::makeError("MTLCommandBufferErrorDomain", code, error);
        cb->status = kStatusError;
        if (std::getenv("MTLEMU_LOG")) std::fprintf(stderr, "mtlemu: %s\n", error.c_str());
    }
    cb->commands.clear();
    cb->releaseResources();
    std::vector<CompletionBlock> handlers;
    handlers.swap(cb->completedHandlers);
    for (CompletionBlock h : handlers) {
        h(cb);
        Block_release(h);
    }
}

// Runs the queue's pending command buffers up to and including cb.
void waitFor(CommandBuffer* cb) {
    CommandQueue* q = cb->queue;
    std::lock_guard<std::recursive_mutex> exec(q->executeMutex);
    while (!cb->finished()) {
        CommandBuffer* next = nullptr;
        {
            std::lock_guard<std::mutex> lock(q->listMutex);
            if (q->pending.empty()) fatal("internal error: %s is not in its queue", cbName(cb).c_str());
            next = q->pending.front();
            if (next->status == kStatusEnqueued)
                fatal("waitUntilCompleted: %s was enqueued before %s but never committed; Metal would wait "
                      "forever",
                      cbName(next).c_str(), cbName(cb).c_str());
            q->pending.pop_front();
        }
        runCommandBuffer(next);
        release(next);
    }
}

// --------------------------------------------------------------------- queue

CommandBuffer* newCommandBuffer(CommandQueue* q, bool retained) {
    CommandBuffer* cb = create<CommandBuffer>(classNamed("MTLFakeCommandBuffer"));
    cb->queue = static_cast<CommandQueue*>(retain(q));
    cb->retainedReferences = retained;
    return static_cast<CommandBuffer*>(autorelease(cb));
}
id queueCommandBuffer(CommandQueue* self, SEL) { return asId(newCommandBuffer(self, true)); }
id queueCommandBufferUnretained(CommandQueue* self, SEL) { return asId(newCommandBuffer(self, false)); }
void queueNoop(CommandQueue*, SEL) {}

// ------------------------------------------------------------ command buffer

void requireNotCommitted(CommandBuffer* cb, const char* what) {
    if (cb->status >= kStatusCommitted)
        fatal("%s on %s, which was already committed (Metal asserts)", what, cbName(cb).c_str());
}

bool beginEncoder(CommandBuffer* cb, const char* what) {
    requireNotCommitted(cb, what);
    if (cb->activeEncoder) {
        validationFailure(cb, std::string(what) + ": another encoder of " + cbName(cb) +
                                  " has not called endEncoding");
        return false;
    }
    return true;
}

id cbComputeEncoder(CommandBuffer* self, SEL) {
    beginEncoder(self, "computeCommandEncoder");
    ComputeEncoder* e = create<ComputeEncoder>(classNamed("MTLFakeComputeCommandEncoder"));
    e->commandBuffer = static_cast<CommandBuffer*>(retain(self));
    e->index = self->encoders++;
    self->activeEncoder = e;
    return asId(autorelease(e));
}
id cbComputeEncoderWithType(CommandBuffer* self, SEL, NSUInteger) { return cbComputeEncoder(self, nullptr); }

id cbBlitEncoder(CommandBuffer* self, SEL) {
    beginEncoder(self, "blitCommandEncoder");
    BlitEncoder* e = create<BlitEncoder>(classNamed("MTLFakeBlitCommandEncoder"));
    e->commandBuffer = static_cast<CommandBuffer*>(retain(self));
    e->index = self->encoders++;
    self->activeEncoder = e;
    return asId(autorelease(e));
}

void enqueueOnQueue(CommandBuffer* cb) {
    std::lock_guard<std::mutex> lock(cb->queue->listMutex);
    cb->queue->pending.push_back(static_cast<CommandBuffer*>(retain(cb)));
}

void cbEnqueue(CommandBuffer* self, SEL) {
    if (self->status != kStatusNotEnqueued) fatal("enqueue on %s, which is %s", cbName(self).c_str(),
                                                  statusName(self->status));
    self->status = kStatusEnqueued;
    enqueueOnQueue(self);
}

void cbCommit(CommandBuffer* self, SEL) {
    const NSUInteger s = self->status;
    if (s != kStatusNotEnqueued && s != kStatusEnqueued)
        fatal("commit on %s, which is already %s (Metal asserts)", cbName(self).c_str(), statusName(s));
    if (self->activeEncoder)
        validationFailure(self, "commit while an encoder of " + cbName(self) + " has not called endEncoding");
    {
        Settings& st = settings();
        std::lock_guard<std::mutex> lock(st.mutex);
        if (st.failNextCommandBuffer) {
            st.failNextCommandBuffer = false;
            self->forceFailure = true;
            self->forcedMessage = st.failMessage;
            self->forcedCode = st.failCode;
        }
    }
    self->status = kStatusCommitted;
    if (s == kStatusNotEnqueued) enqueueOnQueue(self);
}

void cbWaitUntilCompleted(CommandBuffer* self, SEL) {
    if (self->status < kStatusCommitted)
        fatal("waitUntilCompleted on %s, which was never committed (Metal would wait forever)", cbName(self).c_str());
    waitFor(self);
}

void cbWaitUntilScheduled(CommandBuffer* self, SEL) {
    if (self->status < kStatusCommitted)
        fatal("waitUntilScheduled on %s, which was never committed (Metal would wait forever)", cbName(self).c_str());
    // Work is scheduled when someone waits for completion; nothing to do here.
}

NSUInteger cbStatus(CommandBuffer* self, SEL) { return self->status; }
id cbError(CommandBuffer* self, SEL) { return asId(self->error); }
NSUInteger cbErrorOptions(CommandBuffer*, SEL) { return 0; }
id cbQueue(CommandBuffer* self, SEL) { return asId(self->queue); }
bool cbRetainedReferences(CommandBuffer* self, SEL) { return self->retainedReferences; }
double cbZeroTime(CommandBuffer*, SEL) { return 0.0; }
id cbNil(CommandBuffer*, SEL) { return nullptr; }

void cbAddCompletedHandler(CommandBuffer* self, SEL, CompletionBlock block) {
    requireNotCommitted(self, "addCompletedHandler:");
    self->completedHandlers.push_back(Block_copy(block));
}
void cbAddScheduledHandler(CommandBuffer* self, SEL, CompletionBlock block) {
    requireNotCommitted(self, "addScheduledHandler:");
    self->scheduledHandlers.push_back(Block_copy(block));
}
void debugNoop(Object*, SEL) {}
void debugNoopArg(Object*, SEL, Object*) {}

// ----------------------------------------------------------- compute encoder

bool usable(ComputeEncoder* e, const char* what) {
    requireNotCommitted(e->commandBuffer, what);
    if (e->ended) {
        validationFailure(e->commandBuffer,
                          std::string(what) + " after endEncoding of " + describe(e, "compute encoder", e->index));
        return false;
    }
    return true;
}

bool validIndex(ComputeEncoder* e, NSUInteger index, const char* what) {
    if (index < kBufferBindings) return true;
    validationFailure(e->commandBuffer, std::string(what) + ": index " + std::to_string(index) +
                                            " is beyond the last buffer binding (" +
                                            std::to_string(kBufferBindings - 1) + ")");
    return false;
}

void ceSetPipeline(ComputeEncoder* self, SEL, ComputePipeline* p) {
    if (usable(self, "setComputePipelineState:")) self->pipeline = p;
}

void bindBuffer(ComputeEncoder* self, Buffer* buffer, NSUInteger offset, NSUInteger index) {
    if (!validIndex(self, index, "setBuffer:offset:atIndex:")) return;
    Binding& b = self->bindings[index];
    b = Binding();
    if (!buffer) return;
    if (offset >= buffer->length) {
        validationFailure(self->commandBuffer, "setBuffer:offset:atIndex:" + std::to_string(index) + ": offset " +
                                                   std::to_string(offset) + " is not inside the buffer (length " +
                                                   std::to_string(buffer->length) + ")");
        return;
    }
    b.buffer = buffer;
    b.offset = offset;
    b.bound = true;
}
void ceSetBuffer(ComputeEncoder* self, SEL, Buffer* buffer, NSUInteger offset, NSUInteger index) {
    if (usable(self, "setBuffer:offset:atIndex:")) bindBuffer(self, buffer, offset, index);
}
void ceSetBuffers(ComputeEncoder* self, SEL, Buffer* const* buffers, const NSUInteger* offsets, Range range) {
    if (!usable(self, "setBuffers:offsets:withRange:")) return;
    for (NSUInteger i = 0; i < range.length; ++i) bindBuffer(self, buffers[i], offsets[i], range.location + i);
}
void ceSetBufferOffset(ComputeEncoder* self, SEL, NSUInteger offset, NSUInteger index) {
    if (!usable(self, "setBufferOffset:atIndex:") || !validIndex(self, index, "setBufferOffset:atIndex:")) return;
    Binding& b = self->bindings[index];
    if (!b.buffer) {
        validationFailure(self->commandBuffer,
                          "setBufferOffset:atIndex:" + std::to_string(index) + ": no buffer is bound there");
        return;
    }
    bindBuffer(self, b.buffer, offset, index);
}
void ceSetBytes(ComputeEncoder* self, SEL, const void* bytes, NSUInteger length, NSUInteger index) {
    if (!usable(self, "setBytes:length:atIndex:") || !validIndex(self, index, "setBytes:length:atIndex:")) return;
    if (length > kMaxSetBytesLength) {
        validationFailure(self->commandBuffer, "setBytes:length:" + std::to_string(length) + " atIndex:" +
                                                   std::to_string(index) + ": more than " +
                                                   std::to_string(kMaxSetBytesLength) +
                                                   " bytes (use a buffer for larger data)");
        return;
    }
    Binding& b = self->bindings[index];
    b = Binding();
    // Copied now, as Metal does: the caller may reuse its memory at once.
    b.bytes.reset(new unsigned char[length ? length : 1], std::default_delete<unsigned char[]>());
    if (length) std::memcpy(b.bytes.get(), bytes, length);
    b.bytesLength = length;
    b.bound = true;
}
void ceSetThreadgroupMemory(ComputeEncoder* self, SEL, NSUInteger length, NSUInteger index) {
    if (!usable(self, "setThreadgroupMemoryLength:atIndex:") ||
        !validIndex(self, index, "setThreadgroupMemoryLength:atIndex:"))
        return;
    if (length % 16 != 0) {
        validationFailure(self->commandBuffer, "setThreadgroupMemoryLength:" + std::to_string(length) +
                                                   " atIndex:" + std::to_string(index) +
                                                   ": the length must be a multiple of 16 bytes");
        return;
    }
    self->threadgroupLengths[index] = length;
}

void encodeDispatch(ComputeEncoder* self, Size grid, Size group, bool gridIsThreads) {
    const char* what = gridIsThreads ? "dispatchThreads:threadsPerThreadgroup:"
                                     : "dispatchThreadgroups:threadsPerThreadgroup:";
    if (!usable(self, what)) return;
    CommandBuffer* cb = self->commandBuffer;
    const std::string where = describe(self, "compute encoder", self->index) + ", dispatch " +
                              std::to_string(self->dispatches++);
    auto fail = [&](const std::string& message) { validationFailure(cb, where + ": " + what + " " + message); };
    ComputePipeline* p = self->pipeline;
    if (!p) return fail("without a compute pipeline state");
    const rt::KernelInfo& k = *p->kernel;
    const std::string kname = std::string("kernel '") + k.name + "'";
    const NSUInteger threads = group.width * group.height * group.depth;
    const unsigned maxThreads = pipelineMaxThreads(k);
    if (threads == 0 || threads > maxThreads)
        return fail("with " + std::to_string(threads) + " threads per threadgroup; the pipeline of " + kname +
                    " allows 1 to " + std::to_string(maxThreads) + " (its maxTotalThreadsPerThreadgroup)");
    const NSUInteger dims[3] = {grid.width, grid.height, grid.depth};
    for (NSUInteger d : dims)
        if (d == 0 || d > 0xFFFFFFFFul) return fail("with an empty or oversized grid");
    for (unsigned i = 0; i < k.numBuffers; ++i) {
        const rt::BufferParam& bp = k.buffers[i];
        const Binding& b = self->bindings[bp.index];
        const std::string param = "buffer(" + std::to_string(bp.index) + ") '" + bp.name + "' of " + kname;
        if (!b.bound) return fail("but " + param + " is not bound");
        const NSUInteger available = b.bytes ? b.bytesLength : b.buffer->length - b.offset;
        if (bp.minBytes > available)
            return fail("but " + param + " reads " + std::to_string(bp.minBytes) + " bytes and only " +
                        std::to_string(available) + " are bound");
    }
    std::size_t tgMemory = k.staticThreadgroupMemory;
    for (unsigned i = 0; i < k.numThreadgroupBuffers; ++i) {
        const rt::ThreadgroupParam& tp = k.threadgroupBuffers[i];
        const NSUInteger len = self->threadgroupLengths[tp.index];
        if (len == 0)
            return fail("but threadgroup(" + std::to_string(tp.index) + ") '" + tp.name + "' of " + kname +
                        " has no length (setThreadgroupMemoryLength:atIndex:)");
        tgMemory += len;
    }
    const DeviceConfig config = deviceConfig();
    if (tgMemory > config.threadgroupMemory)
        return fail("with " + std::to_string(tgMemory) + " bytes of threadgroup memory (the device's "
                    "maxThreadgroupMemoryLength is " + std::to_string(config.threadgroupMemory) + ")");
    if (config.simdWidth != rt::kSimdWidth)
        return fail("on a device with " + std::to_string(config.simdWidth) + "-wide simdgroups: the Metal "
                    "emulation executes " + std::to_string(rt::kSimdWidth) + "-wide simdgroups only");

    Command c;
    c.kind = Command::kDispatch;
    c.where = where;
    c.pipeline = p;
    cb->keep(p);  // pipelines are always kept alive until the work completes
    for (NSUInteger i = 0; i < kBufferBindings; ++i) {
        c.bindings[i] = self->bindings[i];
        c.threadgroupLengths[i] = self->threadgroupLengths[i];
        if (c.bindings[i].buffer && cb->retainedReferences) cb->keep(c.bindings[i].buffer);
    }
    for (int i = 0; i < 3; ++i) c.grid[i] = unsigned(dims[i]);
    c.threadsPerThreadgroup[0] = unsigned(group.width);
    c.threadsPerThreadgroup[1] = unsigned(group.height);
    c.threadsPerThreadgroup[2] = unsigned(group.depth);
    c.gridIsThreads = gridIsThreads;
    cb->commands.push_back(std::move(c));
}
void ceDispatchThreads(ComputeEncoder* self, SEL, Size grid, Size group) { encodeDispatch(self, grid, group, true); }
void ceDispatchThreadgroups(ComputeEncoder* self, SEL, Size groups, Size group) {
    encodeDispatch(self, groups, group, false);
}

void ceEndEncoding(ComputeEncoder* self, SEL) {
    if (!usable(self, "endEncoding")) return;
    self->ended = true;
    for (Binding& b : self->bindings) b = Binding();
    if (self->commandBuffer->activeEncoder == self) self->commandBuffer->activeEncoder = nullptr;
}
// The emulation runs commands one after the other: barriers have nothing to do.
void ceMemoryBarrierScope(ComputeEncoder*, SEL, NSUInteger) {}
void ceMemoryBarrierResources(ComputeEncoder*, SEL, const void*, NSUInteger) {}
void ceUseResource(ComputeEncoder*, SEL, Object*, NSUInteger) {}
void ceUseResources(ComputeEncoder*, SEL, const void*, NSUInteger, NSUInteger) {}
NSUInteger ceDispatchType(ComputeEncoder*, SEL) { return 0; }

// -------------------------------------------------------------- blit encoder

bool usable(BlitEncoder* e, const char* what) {
    requireNotCommitted(e->commandBuffer, what);
    if (e->ended) {
        validationFailure(e->commandBuffer,
                          std::string(what) + " after endEncoding of " + describe(e, "blit encoder", e->index));
        return false;
    }
    return true;
}

bool checkRange(BlitEncoder* e, const char* what, Buffer* b, NSUInteger offset, NSUInteger size) {
    if (!b) {
        validationFailure(e->commandBuffer, std::string(what) + " with a nil buffer");
        return false;
    }
    if (offset > b->length || size > b->length - offset) {
        validationFailure(e->commandBuffer, std::string(what) + ": bytes [" + std::to_string(offset) + ", " +
                                                std::to_string(offset + size) + ") are outside the buffer (length " +
                                                std::to_string(b->length) + ")");
        return false;
    }
    return true;
}

void blitKeep(BlitEncoder* e, Buffer* b) {
    if (e->commandBuffer->retainedReferences) e->commandBuffer->keep(b);
}

void beCopy(BlitEncoder* self, SEL, Buffer* src, NSUInteger srcOffset, Buffer* dst, NSUInteger dstOffset,
            NSUInteger size) {
    const char* what = "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:";
    if (!usable(self, what) || !checkRange(self, what, src, srcOffset, size) ||
        !checkRange(self, what, dst, dstOffset, size))
        return;
    Command c;
    c.kind = Command::kCopy;
    c.where = describe(self, "blit encoder", self->index) + ", command " + std::to_string(self->commands++);
    c.source = src;
    c.sourceOffset = srcOffset;
    c.destination = dst;
    c.destinationOffset = dstOffset;
    c.size = size;
    blitKeep(self, src);
    blitKeep(self, dst);
    self->commandBuffer->commands.push_back(std::move(c));
}

void beFill(BlitEncoder* self, SEL, Buffer* buffer, Range range, unsigned char value) {
    const char* what = "fillBuffer:range:value:";
    if (!usable(self, what) || !checkRange(self, what, buffer, range.location, range.length)) return;
    Command c;
    c.kind = Command::kFill;
    c.where = describe(self, "blit encoder", self->index) + ", command " + std::to_string(self->commands++);
    c.destination = buffer;
    c.destinationOffset = range.location;
    c.size = range.length;
    c.value = value;
    blitKeep(self, buffer);
    self->commandBuffer->commands.push_back(std::move(c));
}

void beSynchronize(BlitEncoder*, SEL, Object*) {}  // unified memory: nothing to synchronise

void beEndEncoding(BlitEncoder* self, SEL) {
    if (!usable(self, "endEncoding")) return;
    self->ended = true;
    if (self->commandBuffer->activeEncoder == self) self->commandBuffer->activeEncoder = nullptr;
}

}  // namespace

// ------------------------------------------------------------ destructors

void CommandBuffer::keep(Object* o) {
    kept.push_back(retain(o));
}

void CommandBuffer::releaseResources() {
    std::vector<Object*> k;
    k.swap(kept);
    for (Object* o : k) release(o);
}

CommandBuffer::~CommandBuffer() {
    releaseResources();
    for (CompletionBlock h : completedHandlers) Block_release(h);
    for (CompletionBlock h : scheduledHandlers) Block_release(h);
    objc::release(error);
    objc::release(queue);
}

ComputeEncoder::~ComputeEncoder() {
    if (commandBuffer->activeEncoder == this) {
        commandBuffer->activeEncoder = nullptr;
        validationFailure(commandBuffer, describe(this, "compute encoder", index) +
                                             " was deallocated without endEncoding");
    }
    objc::release(commandBuffer);
}

BlitEncoder::~BlitEncoder() {
    if (commandBuffer->activeEncoder == this) {
        commandBuffer->activeEncoder = nullptr;
        validationFailure(commandBuffer, describe(this, "blit encoder", index) +
                                             " was deallocated without endEncoding");
    }
    objc::release(commandBuffer);
}

void registerCommandClasses() {
    ClassInfo* q = defineClass<CommandQueue>("MTLFakeCommandQueue", "MTLFakeObject");
    addMethod(q, "commandBuffer", imp(queueCommandBuffer));
    addMethod(q, "commandBufferWithUnretainedReferences", imp(queueCommandBufferUnretained));
    addMethod(q, "insertDebugCaptureBoundary", imp(queueNoop));

    ClassInfo* c = defineClass<CommandBuffer>("MTLFakeCommandBuffer", "MTLFakeObject");
    addMethod(c, "computeCommandEncoder", imp(cbComputeEncoder));
    addMethod(c, "computeCommandEncoderWithDispatchType:", imp(cbComputeEncoderWithType));
    addMethod(c, "blitCommandEncoder", imp(cbBlitEncoder));
    addMethod(c, "enqueue", imp(cbEnqueue));
    addMethod(c, "commit", imp(cbCommit));
    addMethod(c, "waitUntilCompleted", imp(cbWaitUntilCompleted));
    addMethod(c, "waitUntilScheduled", imp(cbWaitUntilScheduled));
    addMethod(c, "status", imp(cbStatus));
    addMethod(c, "error", imp(cbError));
    addMethod(c, "errorOptions", imp(cbErrorOptions));
    addMethod(c, "commandQueue", imp(cbQueue));
    addMethod(c, "retainedReferences", imp(cbRetainedReferences));
    addMethod(c, "GPUStartTime", imp(cbZeroTime));
    addMethod(c, "GPUEndTime", imp(cbZeroTime));
    addMethod(c, "kernelStartTime", imp(cbZeroTime));
    addMethod(c, "kernelEndTime", imp(cbZeroTime));
    addMethod(c, "logs", imp(cbNil));
    addMethod(c, "addCompletedHandler:", imp(cbAddCompletedHandler));
    addMethod(c, "addScheduledHandler:", imp(cbAddScheduledHandler));
    addMethod(c, "pushDebugGroup:", imp(debugNoopArg));
    addMethod(c, "popDebugGroup", imp(debugNoop));

    ClassInfo* e = defineClass<ComputeEncoder>("MTLFakeComputeCommandEncoder", "MTLFakeObject");
    addMethod(e, "setComputePipelineState:", imp(ceSetPipeline));
    addMethod(e, "setBuffer:offset:atIndex:", imp(ceSetBuffer));
    addMethod(e, "setBuffers:offsets:withRange:", imp(ceSetBuffers));
    addMethod(e, "setBufferOffset:atIndex:", imp(ceSetBufferOffset));
    addMethod(e, "setBytes:length:atIndex:", imp(ceSetBytes));
    addMethod(e, "setThreadgroupMemoryLength:atIndex:", imp(ceSetThreadgroupMemory));
    addMethod(e, "dispatchThreads:threadsPerThreadgroup:", imp(ceDispatchThreads));
    addMethod(e, "dispatchThreadgroups:threadsPerThreadgroup:", imp(ceDispatchThreadgroups));
    addMethod(e, "endEncoding", imp(ceEndEncoding));
    addMethod(e, "memoryBarrierWithScope:", imp(ceMemoryBarrierScope));
    addMethod(e, "memoryBarrierWithResources:count:", imp(ceMemoryBarrierResources));
    addMethod(e, "useResource:usage:", imp(ceUseResource));
    addMethod(e, "useResources:count:usage:", imp(ceUseResources));
    addMethod(e, "dispatchType", imp(ceDispatchType));
    addMethod(e, "pushDebugGroup:", imp(debugNoopArg));
    addMethod(e, "popDebugGroup", imp(debugNoop));
    addMethod(e, "insertDebugSignpost:", imp(debugNoopArg));

    ClassInfo* b = defineClass<BlitEncoder>("MTLFakeBlitCommandEncoder", "MTLFakeObject");
    addMethod(b, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", imp(beCopy));
    addMethod(b, "fillBuffer:range:value:", imp(beFill));
    addMethod(b, "synchronizeResource:", imp(beSynchronize));
    addMethod(b, "endEncoding", imp(beEndEncoding));
    addMethod(b, "pushDebugGroup:", imp(debugNoopArg));
    addMethod(b, "popDebugGroup", imp(debugNoop));
    addMethod(b, "insertDebugSignpost:", imp(debugNoopArg));
}

}  // namespace metal
}  // namespace mtlemu
