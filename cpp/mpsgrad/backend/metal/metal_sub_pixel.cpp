// Encoding of the sub-pixel shuffle ops (kernels: metal/sub_pixel.metal). The bindings were
// checked by bindings::checkSubPixelShuffle (metal_backend.cpp) before these run.
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// One thread per element of a (channels, width, batch * height) grid: dispatches it, or only
// makes sure the command buffer exists when the grid is empty.
void dispatchElements(MetalContext& ctx, CommandBuffer& cb, const char* kernel, const SubPixelShuffleParams& p,
                      const BufferSlice& from, const BufferSlice& to, int64_t channels, int64_t width,
                      int64_t height) {
    const int64_t rows = int64_t(p.batch) * height;
    if (rows > INT32_MAX) throwValueError(kernel, ": too many rows in one dispatch");
    if (channels <= 0 || width <= 0 || rows <= 0) {
        metalCommandBuffer(cb);
        return;
    }
    KernelDispatch dispatch(ctx.pipelines->get(kernel, FunctionConstants{}));
    dispatch.params(p).buffer(1, from).buffer(2, to);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(channels), NS::UInteger(width), NS::UInteger(rows)));
}

}  // namespace

void encodeSubPixelShuffle(MetalContext& ctx, CommandBuffer& cb, SubPixelShuffleParams p, const BufferSlice& low,
                           const BufferSlice& high) {
    const char* op = "sub_pixel_shuffle";
    const BufferSlice lo = bindImage(op, "low", low, p.low, p.batch);
    const BufferSlice hi = bindImage(op, "high", high, p.high, p.batch);
    dispatchElements(ctx, cb, op, p, lo, hi, p.high.channels, p.clipWidth, p.clipHeight);
}

void encodeSubPixelUnshuffle(MetalContext& ctx, CommandBuffer& cb, SubPixelShuffleParams p, const BufferSlice& high,
                             const BufferSlice& low) {
    const char* op = "sub_pixel_unshuffle";
    const BufferSlice hi = bindImage(op, "high", high, p.high, p.batch);
    const BufferSlice lo = bindImage(op, "low", low, p.low, p.batch);
    dispatchElements(ctx, cb, op, p, hi, lo, p.low.channels, p.low.width, p.low.height);
}

}  // namespace mpsgrad::metal_backend
