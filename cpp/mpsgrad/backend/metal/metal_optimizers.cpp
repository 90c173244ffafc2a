// Encoding of the optimizer update (kernel: metal/optimizers.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

void encodeOptimizerUpdate(MetalContext& ctx, CommandBuffer& cb, const OptimizerParams& p, const BufferSlice& gradient,
                           const BufferSlice& values, const BufferSlice& state0, const BufferSlice& state1,
                           const BufferSlice& state2, const BufferSlice& result) {
    const char* op = "optimizer_update";
    if (p.count < 0) throwValueError(op, ": count must be >= 0, got ", p.count);
    if (p.kind < kOptimizerSGD || p.kind > kOptimizerAdam) throwValueError(op, ": unknown kind ", p.kind);
    if (p.count == 0) {
        metalCommandBuffer(cb);
        return;
    }
    checkFloats(op, "gradient", gradient, p.count);
    checkFloats(op, "values", values, p.count);
    checkFloats(op, "result", result, p.count);
    const bool usesState0 = p.kind != kOptimizerSGD || p.hasState0 != 0;
    if (usesState0) checkFloats(op, "state0", state0, p.count);
    if (p.kind == kOptimizerAdam) checkFloats(op, "state1", state1, p.count);
    if (p.kind == kOptimizerAdam && p.amsgrad != 0) checkFloats(op, "state2", state2, p.count);
    KernelDispatch dispatch(ctx.pipelines->get("optimizer_update", FunctionConstants{}));
    dispatch.params(p).buffer(1, gradient).buffer(2, values).buffer(6, result);
    if (usesState0) dispatch.buffer(3, state0);
    if (p.kind == kOptimizerAdam) dispatch.buffer(4, state1);
    if (p.kind == kOptimizerAdam && p.amsgrad != 0) dispatch.buffer(5, state2);
    dispatch.encodeThreads(ctx, cb, MTL::Size(NS::UInteger(p.count), 1, 1));
}

}  // namespace mpsgrad::metal_backend
