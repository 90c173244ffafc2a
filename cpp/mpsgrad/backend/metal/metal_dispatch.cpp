#include "backend/metal/metal_dispatch.h"

#include <algorithm>
#include <limits>
#include <string>

#include "backend/metal/metal_allocator.h"
#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_command.h"
#include "core/command_buffer.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {
constexpr int64_t kMaxIndexableFloats = std::numeric_limits<int32_t>::max();
constexpr unsigned kMaxElementwiseThreadgroup = 256;

// Floats an image binding must hold: up to the last channel of the last pixel of the last image.
int64_t imageFloats(const ImageLayout& l, int batch) {
    if (batch <= 0 || l.width <= 0 || l.height <= 0 || l.channels <= 0) return 0;
    return int64_t(batch - 1) * l.imageStride + (int64_t(l.height) * l.width - 1) * l.pixelStride +
           l.channelOffset + l.channels;
}

MetalBuffer& metalBufferOf(const char* op, const char* name, const BufferSlice& slice) {
    auto* buffer = dynamic_cast<MetalBuffer*>(slice.buffer.get());
    if (!buffer) throwValueError(op, ": ", name, " is not memory of the Metal device");
    return *buffer;
}
}  // namespace

void checkLayout(const char* op, const char* name, const ImageLayout& l) {
    if (l.width < 0 || l.height < 0 || l.channels < 0 || l.channelOffset < 0 || l.pixelStride < 0 ||
        l.imageStride < 0 || l.channelOffset + l.channels > l.pixelStride)
        throwValueError(op, ": ", name, " layout is inconsistent (sizes must be non-negative and ",
                        "channelOffset + channels must fit pixelStride)");
}

void checkRect(const char* op, const char* name, const ImageLayout& l, int x, int y, int width, int height) {
    if (width < 0 || height < 0 || x < 0 || y < 0 || int64_t(x) + width > l.width ||
        int64_t(y) + height > l.height)
        throwValueError(op, ": the ", name, " rectangle (", x, ", ", y, ", ", width, " x ", height,
                        ") is not inside the image (", l.width, " x ", l.height, ")");
}

void checkFloats(const char* op, const char* name, const BufferSlice& slice, int64_t floats) {
    if (floats <= 0) return;
    if (!slice) throwValueError(op, ": ", name, " buffer is missing");
    metalBufferOf(op, name, slice);
    if (slice.offset % sizeof(float) != 0) throwValueError(op, ": ", name, " offset ", slice.offset, " is not float-aligned");
    const size_t length = slice.buffer->length();
    const int64_t available = slice.offset > length ? 0 : int64_t((length - slice.offset) / sizeof(float));
    if (floats > available)
        throwValueError(op, ": ", name, " needs ", floats, " floats but its buffer holds ", available,
                        " after offset ", slice.offset);
    if (floats > kMaxIndexableFloats)
        throwValueError(op, ": ", name, " spans ", floats, " floats; the Metal kernels index at most 2^31 - 1");
}

BufferSlice bindImage(const char* op, const char* name, const BufferSlice& slice, ImageLayout& layout, int batch) {
    checkLayout(op, name, layout);
    const int64_t floats = imageFloats(layout, batch);
    if (floats == 0) return BufferSlice{};
    checkFloats(op, name, slice, floats);
    const size_t misalignment = slice.offset % 16;
    layout.channelOffset += int32_t(misalignment / sizeof(float));
    return BufferSlice{slice.buffer, slice.offset - misalignment};
}

bool quadAligned(const ImageLayout& l) {
    return l.channelOffset % 4 == 0 && l.pixelStride % 4 == 0 && l.imageStride % 4 == 0;
}

KernelDispatch& KernelDispatch::buffer(unsigned index, const BufferSlice& slice) {
    buffers_.at(index) = slice;
    bindingCount_ = std::max(bindingCount_, index + 1);
    return *this;
}

MTL::Size KernelDispatch::threadgroupFor(const Pipeline& pipeline, MTL::Size threads) {
    const NS::UInteger limit = std::min<NS::UInteger>(pipeline.maxThreadsPerThreadgroup, kMaxElementwiseThreadgroup);
    const NS::UInteger x = std::max<NS::UInteger>(1, std::min<NS::UInteger>(threads.width, pipeline.threadExecutionWidth));
    const NS::UInteger y = std::max<NS::UInteger>(1, std::min<NS::UInteger>(threads.height, limit / x));
    const NS::UInteger z = std::max<NS::UInteger>(1, std::min<NS::UInteger>(threads.depth, limit / (x * y)));
    return MTL::Size(x, y, z);
}

void KernelDispatch::encodeThreadgroups(MetalContext& ctx, CommandBuffer& cb, MTL::Size groups,
                                        unsigned threadsPerGroup, bool simd32) {
    if (pipeline_.maxThreadsPerThreadgroup < threadsPerGroup)
        throw MetalError("Metal kernel " + pipeline_.name + " needs threadgroups of " +
                         std::to_string(threadsPerGroup) + " threads but this device allows " +
                         std::to_string(pipeline_.maxThreadsPerThreadgroup));
    if (simd32 && pipeline_.threadExecutionWidth != 32)
        throw MetalError("Metal kernel " + pipeline_.name + " assumes 32-wide simdgroups but this device runs " +
                         std::to_string(pipeline_.threadExecutionWidth));
    encode(ctx, cb, groups, MTL::Size(threadsPerGroup, 1, 1), false);
}

void KernelDispatch::encodeThreads(MetalContext& ctx, CommandBuffer& cb, MTL::Size threads) {
    encode(ctx, cb, threads, threadgroupFor(pipeline_, threads), true);
}

void KernelDispatch::encode(MetalContext& ctx, CommandBuffer& cb, MTL::Size grid, MTL::Size threadgroup,
                            bool gridInThreads) {
    MetalCommandBuffer& metal = metalCommandBuffer(cb);
    if (grid.width == 0 || grid.height == 0 || grid.depth == 0) return;  // no work; Metal rejects empty grids

    MTL::ComputeCommandEncoder* encoder = metal.computeEncoder();
    encoder->setComputePipelineState(pipeline_.state.get());
    for (unsigned i = 0; i < bindingCount_; ++i) {
        if (!bytes_[i].empty()) {
            encoder->setBytes(bytes_[i].data(), bytes_[i].size(), i);
            continue;
        }
        const BufferSlice& slice = buffers_[i] ? buffers_[i] : BufferSlice{ctx.placeholder, 0};
        encoder->setBuffer(metalBufferOf("dispatch", "binding", slice).mtlBuffer(), slice.offset, i);
        cb.retain(slice.buffer);
    }
    if (gridInThreads)
        encoder->dispatchThreads(grid, threadgroup);
    else
        encoder->dispatchThreadgroups(grid, threadgroup);
}

}  // namespace mpsgrad::metal_backend
