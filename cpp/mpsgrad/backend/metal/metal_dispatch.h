// Internal to the Metal backend: binding checks and the dispatch helper the op files share.
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/metal/metal_context.h"
#include "metal/common_params.h"

namespace mpsgrad {
class CommandBuffer;
}

namespace mpsgrad::metal_backend {

inline unsigned ceilDiv(int64_t value, int64_t divisor) { return unsigned((value + divisor - 1) / divisor); }

// ---- checks: a kernel indexes with 32-bit ints and trusts its geometry, so every binding is
// ---- checked at encode time (ValueError naming the op and the binding) instead of letting the
// ---- GPU read or write out of bounds.

// channelOffset + channels fits pixelStride, sizes are non-negative.
void checkLayout(const char* op, const char* name, const ImageLayout& layout);
// The rectangle (x, y, width, height) lies inside the image.
void checkRect(const char* op, const char* name, const ImageLayout& layout, int x, int y, int width, int height);
// `slice` holds at least `floats` floats at a float-aligned offset, and fewer than 2^31 of them.
void checkFloats(const char* op, const char* name, const BufferSlice& slice, int64_t floats);

// An image binding ready for a kernel: checked to hold `batch` images of `layout`, with its byte
// offset moved down to a 16-byte boundary and the difference (0..3 floats) added to
// layout.channelOffset, which addresses the same floats. Kernels can then use aligned float4
// accesses wherever quadAligned(layout) holds. An empty image (batch, width or height 0) needs
// no buffer.
BufferSlice bindImage(const char* op, const char* name, const BufferSlice& slice, ImageLayout& layout, int batch);

// Every pixel's channel slice starts on a 16-byte boundary (after bindImage): offsets and
// strides are multiples of 4 floats.
bool quadAligned(const ImageLayout& layout);

// A binding offset on a 16-byte boundary (vector loads of a plain float array).
inline bool quadAligned(const BufferSlice& slice) { return slice.offset % 16 == 0; }

// ---- the dispatch helper

// Collects a kernel's params and buffers, then encodes the dispatch into a command buffer's
// compute encoder in one go: nothing reaches the encoder unless every check has passed.
// Params go through setBytes (copied at encode time, at most 4 KiB); an index with neither bytes
// nor a buffer, or with an empty slice, binds the backend's placeholder buffer. The command buffer keeps every bound Buffer alive
// until it completes.
class KernelDispatch {
public:
    explicit KernelDispatch(const Pipeline& pipeline) : pipeline_(pipeline) {}

    // A small struct for a `constant T& x [[buffer(index)]]` parameter, copied by setBytes.
    template <class Params>
    KernelDispatch& bytes(unsigned index, const Params& p) {
        static_assert(std::is_trivially_copyable<Params>::value, "params go to the GPU as bytes");
        static_assert(sizeof(Params) <= 4096, "setBytes takes at most 4 KiB");
        std::vector<unsigned char>& b = bytes_.at(index);
        b.resize(sizeof(Params));
        std::memcpy(b.data(), &p, sizeof(Params));
        bindingCount_ = std::max(bindingCount_, index + 1);
        return *this;
    }
    // The kernel's params struct, at index 0 by convention.
    template <class Params>
    KernelDispatch& params(const Params& p) {
        return bytes(0, p);
    }
    KernelDispatch& buffer(unsigned index, const BufferSlice& slice);

    // `groups` threadgroups of `threadsPerGroup` threads: for kernels written for that exact
    // threadgroup size. `simd32`: the kernel also assumes 32-wide simdgroups.
    void encodeThreadgroups(MetalContext& ctx, CommandBuffer& cb, MTL::Size groups, unsigned threadsPerGroup,
                            bool simd32 = false);
    // A grid of `threads` threads (each kernel checks its own bounds), in threadgroups sized from
    // the pipeline's threadExecutionWidth and maxTotalThreadsPerThreadgroup.
    void encodeThreads(MetalContext& ctx, CommandBuffer& cb, MTL::Size threads);

    // The threadgroup encodeThreads uses for a grid: one simdgroup wide along x where the grid
    // allows, filled up along y then z, at most 256 threads (enough to hide latency, and small
    // enough to keep the partial groups at the grid's edges cheap).
    static MTL::Size threadgroupFor(const Pipeline& pipeline, MTL::Size threads);

private:
    void encode(MetalContext& ctx, CommandBuffer& cb, MTL::Size grid, MTL::Size threadgroup, bool gridInThreads);

    const Pipeline& pipeline_;
    std::array<std::vector<unsigned char>, 31> bytes_{};  // setBytes bindings (empty: none)
    std::array<BufferSlice, 31> buffers_{};
    unsigned bindingCount_ = 0;  // highest bound index + 1
};

}  // namespace mpsgrad::metal_backend
