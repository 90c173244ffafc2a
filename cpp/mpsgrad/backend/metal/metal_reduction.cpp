// Encoding of the Gram matrix and spatial-mean family's ops (kernels: metal/reduction.metal). The
// bindings were checked by bindings::check* (metal_backend.cpp) before these run.
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// Nothing to dispatch for an empty grid (the command buffer is still made Metal's).
bool emptyGrid(CommandBuffer& cb, int64_t a, int64_t b, int64_t c) {
    if (a > 0 && b > 0 && c > 0) return false;
    metalCommandBuffer(cb);
    return true;
}

void checkRows(const char* op, int64_t batch, int64_t height) {
    if (batch * height > INT32_MAX) throwValueError(op, ": too many rows in one dispatch");
}

MTL::Size grid(int64_t a, int64_t b, int64_t c) { return MTL::Size(NS::UInteger(a), NS::UInteger(b), NS::UInteger(c)); }

}  // namespace

void encodeGramMatrix(MetalContext& ctx, CommandBuffer& cb, GramMatrixParams p, const BufferSlice& source,
                      const BufferSlice& destination) {
    const char* op = "gram_matrix";
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (emptyGrid(cb, p.source.channels, p.source.channels, p.batch)) return;
    KernelDispatch dispatch(ctx.pipelines->get("gram_matrix_forward", FunctionConstants{}));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, grid(p.source.channels, p.source.channels, p.batch));
}

void encodeGramMatrixGradient(MetalContext& ctx, CommandBuffer& cb, GramMatrixGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "gram_matrix_gradient";
    checkRows(op, p.batch, p.destination.height);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice x = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t rows = int64_t(p.batch) * p.destination.height;
    if (emptyGrid(cb, p.destination.channels, p.destination.width, rows)) return;
    KernelDispatch dispatch(ctx.pipelines->get("gram_matrix_gradient", FunctionConstants{}));
    dispatch.params(p).buffer(1, g).buffer(2, x).buffer(3, dst);
    dispatch.encodeThreads(ctx, cb, grid(p.destination.channels, p.destination.width, rows));
}

void encodeSpatialMean(MetalContext& ctx, CommandBuffer& cb, SpatialMeanParams p, const BufferSlice& source,
                       const BufferSlice& destination) {
    const char* op = "spatial_mean";
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (emptyGrid(cb, p.source.channels, p.batch, 1)) return;
    KernelDispatch dispatch(ctx.pipelines->get("spatial_mean_forward", FunctionConstants{}));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, grid(p.source.channels, p.batch, 1));
}

void encodeSpatialMeanGradient(MetalContext& ctx, CommandBuffer& cb, SpatialMeanGradientParams p,
                               const BufferSlice& gradient, const BufferSlice& destination) {
    const char* op = "spatial_mean_gradient";
    checkRows(op, p.batch, p.destination.height);
    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    const int64_t rows = int64_t(p.batch) * p.destination.height;
    if (emptyGrid(cb, p.destination.channels, p.destination.width, rows)) return;
    KernelDispatch dispatch(ctx.pipelines->get("spatial_mean_gradient", FunctionConstants{}));
    dispatch.params(p).buffer(1, g).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, grid(p.destination.channels, p.destination.width, rows));
}

}  // namespace mpsgrad::metal_backend
