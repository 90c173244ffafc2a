// Encoding of the reshape and pad family's ops (kernels: metal/reshape_pad.metal). The bindings,
// index tables included, were checked by bindings::check* (metal_backend.cpp) before these run.
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// One thread per element of a (channels, width, batch * height) grid; nothing to do when empty.
bool emptyGrid(CommandBuffer& cb, int64_t channels, int64_t width, int64_t rows) {
    if (channels > 0 && width > 0 && rows > 0) return false;
    metalCommandBuffer(cb);
    return true;
}

void checkRows(const char* op, int64_t batch, int64_t height) {
    if (batch * height > INT32_MAX) throwValueError(op, ": too many rows in one dispatch");
}

}  // namespace

void encodeReshapeCopy(MetalContext& ctx, CommandBuffer& cb, ReshapeParams p, const BufferSlice& source,
                       const BufferSlice& destination) {
    const char* op = "reshape_copy";
    checkRows(op, p.batch, p.destination.height);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t rows = int64_t(p.batch) * p.destination.height;
    if (emptyGrid(cb, p.destination.channels, p.destination.width, rows)) return;
    KernelDispatch dispatch(ctx.pipelines->get("reshape_copy", FunctionConstants{}));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(p.destination.channels), NS::UInteger(p.destination.width),
                                              NS::UInteger(rows)));
}

void encodePadForward(MetalContext& ctx, CommandBuffer& cb, PadParams p, const BufferSlice& source,
                      const BufferSlice& destination, const BufferSlice& maps, const BufferSlice& fill) {
    const char* op = "pad_forward";
    checkRows(op, p.batch, p.clipHeight);
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    if (emptyGrid(cb, p.destination.channels, p.clipWidth, rows)) return;
    KernelDispatch dispatch(ctx.pipelines->get("pad_forward", FunctionConstants{}));
    dispatch.params(p).buffer(1, src).buffer(2, dst).buffer(3, maps).buffer(4, fill);
    dispatch.encodeThreads(ctx, cb,
                           MTL::Size(NS::UInteger(p.destination.channels), NS::UInteger(p.clipWidth), NS::UInteger(rows)));
}

void encodePadGradient(MetalContext& ctx, CommandBuffer& cb, PadGradientParams p, const BufferSlice& gradient,
                       const BufferSlice& destination, const BufferSlice& maps) {
    const char* op = "pad_gradient";
    checkRows(op, p.batch, p.destination.height);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t rows = int64_t(p.batch) * p.destination.height;
    if (emptyGrid(cb, p.destination.channels, p.destination.width, rows)) return;
    KernelDispatch dispatch(ctx.pipelines->get("pad_gradient", FunctionConstants{}));
    dispatch.params(p).buffer(1, g).buffer(2, dst).buffer(3, maps);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(p.destination.channels), NS::UInteger(p.destination.width),
                                              NS::UInteger(rows)));
}

}  // namespace mpsgrad::metal_backend
