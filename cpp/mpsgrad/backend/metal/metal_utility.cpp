// Encoding of the utility ops: buffer copies (blits) and the fill / copy kernels of
// metal/utility.metal.
#include "backend/metal/metal_utility.h"

#include <cstdint>

#include "backend/metal/metal_allocator.h"
#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/command_buffer.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

constexpr int kFloatsPerThread = 4;  // utility.metal's kFloatsPerThread

// The MTLBuffer behind a checked slice holding `bytes` bytes.
MTL::Buffer* blitBuffer(const char* name, const BufferSlice& slice, size_t bytes) {
    if (!slice) throwValueError("copy_buffer: ", name, " buffer is missing");
    auto* buffer = dynamic_cast<MetalBuffer*>(slice.buffer.get());
    if (!buffer) throwValueError("copy_buffer: ", name, " is not memory of the Metal device");
    if (slice.offset > buffer->length() || bytes > buffer->length() - slice.offset)
        throwValueError("copy_buffer: ", name, " holds ", buffer->length(), " bytes, too few for ", bytes,
                        " bytes at offset ", slice.offset);
    return buffer->mtlBuffer();
}

int32_t checkedCount(const char* op, size_t count) {
    if (count > size_t(INT32_MAX)) throwValueError(op, ": ", count, " floats; at most 2^31 - 1");
    return int32_t(count);
}

}  // namespace

void encodeCopyBuffer(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                      size_t bytes) {
    MetalCommandBuffer& metal = metalCommandBuffer(cb);
    if (bytes == 0) return;
    MTL::Buffer* from = blitBuffer("source", source, bytes);
    MTL::Buffer* to = blitBuffer("destination", destination, bytes);
    // macOS blits move whole 4-byte words.
    if (source.offset % 4 != 0 || destination.offset % 4 != 0 || bytes % 4 != 0)
        throwValueError("copy_buffer: offsets (", source.offset, ", ", destination.offset, ") and size (", bytes,
                        ") must be multiples of 4 bytes on the Metal device");
    cb.retain(source.buffer);
    cb.retain(destination.buffer);

    const bool overlapping = from == to && source.offset < destination.offset + bytes &&
                             destination.offset < source.offset + bytes;
    if (!overlapping) {
        metal.blitEncoder()->copyFromBuffer(from, source.offset, to, destination.offset, bytes);
        return;
    }
    // A blit's source and destination must not overlap: go through a scratch buffer, in two
    // encoders so that the second copy is ordered after the first.
    std::shared_ptr<Buffer> scratch = ctx.buffers->allocate(bytes);
    cb.retain(scratch);
    MTL::Buffer* middle = static_cast<MetalBuffer&>(*scratch).mtlBuffer();
    metal.blitEncoder()->copyFromBuffer(from, source.offset, middle, 0, bytes);
    metal.endEncoding();
    metal.blitEncoder()->copyFromBuffer(middle, 0, to, destination.offset, bytes);
}

void encodeFill(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& destination, size_t count, float value) {
    const char* op = "fill";
    const int32_t n = checkedCount(op, count);
    checkFloats(op, "destination", destination, n);
    FunctionConstants constants;
    constants.setBool(kConstantAlignedDestination, quadAligned(destination));
    KernelDispatch dispatch(ctx.pipelines->get("fill_floats", constants));
    dispatch.params(FillParams{n, value}).buffer(1, destination);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(n, kFloatsPerThread), 1, 1));
}

void encodeCopyFloats(MetalContext& ctx, CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                      size_t count) {
    const char* op = "copy_floats";
    const int32_t n = checkedCount(op, count);
    checkFloats(op, "source", source, n);
    checkFloats(op, "destination", destination, n);
    if (n > 0 && source.buffer == destination.buffer && source.offset < destination.offset + count * sizeof(float) &&
        destination.offset < source.offset + count * sizeof(float))
        throwValueError(op, ": source and destination overlap");
    FunctionConstants constants;
    constants.setBool(kConstantAlignedSource, quadAligned(source))
        .setBool(kConstantAlignedDestination, quadAligned(destination));
    KernelDispatch dispatch(ctx.pipelines->get("copy_floats", constants));
    dispatch.params(CopyParams{n}).buffer(1, source).buffer(2, destination);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(n, kFloatsPerThread), 1, 1));
}

void encodeCopyChannels(MetalContext& ctx, CommandBuffer& cb, ChannelCopyParams p, const BufferSlice& source,
                        const BufferSlice& destination) {
    const char* op = "copy_channels";
    if (p.batch < 0) throwValueError(op, ": batch must be >= 0, got ", p.batch);
    if (p.destination.width != p.source.width || p.destination.height != p.source.height ||
        p.destination.channels != p.source.channels)
        throwValueError(op, ": source (", p.source.width, " x ", p.source.height, " x ", p.source.channels,
                        ") and destination (", p.destination.width, " x ", p.destination.height, " x ",
                        p.destination.channels, ") differ in size");
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int channels = p.source.channels;
    FunctionConstants constants;
    constants.setBool(kConstantAlignedSource, channels % 4 == 0 && quadAligned(p.source))
        .setBool(kConstantAlignedDestination, channels % 4 == 0 && quadAligned(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("copy_channels", constants));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb,
                           MTL::Size(ceilDiv(channels, 4), p.source.width, NS::UInteger(p.batch) * p.source.height));
}

}  // namespace mpsgrad::metal_backend

namespace mpsgrad {

void metalFill(Backend& backend, CommandBuffer& cb, const BufferSlice& destination, size_t count, float value) {
    metal_backend::AutoreleaseScope pool;
    metal_backend::encodeFill(metal_backend::contextOf(backend), cb, destination, count, value);
}

void metalCopyFloats(Backend& backend, CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                     size_t count) {
    metal_backend::AutoreleaseScope pool;
    metal_backend::encodeCopyFloats(metal_backend::contextOf(backend), cb, source, destination, count);
}

void metalCopyChannels(Backend& backend, CommandBuffer& cb, const ChannelCopyParams& params,
                       const BufferSlice& source, const BufferSlice& destination) {
    metal_backend::AutoreleaseScope pool;
    metal_backend::encodeCopyChannels(metal_backend::contextOf(backend), cb, params, source, destination);
}

}  // namespace mpsgrad
