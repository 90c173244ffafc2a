// Encoding of the arithmetic family's ops (kernels: metal/arithmetic.metal).
#include <algorithm>
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// arithmetic.metal's function constants and sizes.
enum : unsigned {
    kArithOp = 0,
    kArithAlignedPrimary = 1,
    kArithAlignedSecondary = 2,
    kArithAlignedDestination = 3,
    kArithAlignedState = 4,
    kArithStateMode = 5,
    kArithForSecondary = 6,
    kArithAlignedGradient = 7,
};
constexpr int kPixelsPerThread = 4;     // arithmetic.metal's kPixelsPerThread
constexpr unsigned kReduceThreads = 128;  // arithmetic.metal's kReduceThreads
// Reductions of at most this many terms (float4 each) run one output unit per thread.
constexpr int64_t kDirectTerms = 32;

bool bit(int32_t v) { return v == 0 || v == 1; }

void checkOperand(const char* op, const char* name, const ArithmeticOperand& o, int channels) {
    checkLayout(op, name, o.image);
    if (!bit(o.strideX) || !bit(o.strideY) || !bit(o.strideChannels) || !bit(o.strideImages))
        throwValueError(op, ": ", name, " strides must be 0 or 1");
    const int needed = o.strideChannels ? channels : std::min(channels, 1);
    if (o.image.channels < needed)
        throwValueError(op, ": ", name, " has ", o.image.channels, " channels, the op reads ", needed);
    if (o.edgeMode != kEdgeZero && o.edgeMode != kEdgeClamp) throwValueError(op, ": ", name, " has an unknown edge mode");
}

void checkClip(const char* op, const ImageLayout& destination, int x, int y, int width, int height, int batch) {
    if (batch < 0) throwValueError(op, ": batch must be >= 0, got ", batch);
    checkRect(op, "destination clip", destination, x, y, width, height);
    if (int64_t(batch) * width * height > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
}

// Binds an operand's image for `batch` images (one when the batch shares it).
BufferSlice bindOperand(const char* op, const char* name, const BufferSlice& slice, ArithmeticOperand& o, int batch) {
    return bindImage(op, name, slice, o.image, o.strideImages ? batch : std::min(batch, 1));
}

// Whole aligned quads for a channel-walking operand.
bool alignedOperand(const ArithmeticOperand& o, int channels) {
    return o.strideChannels != 0 && channels % 4 == 0 && quadAligned(o.image);
}

bool alignedQuads(const ImageLayout& l, int channels) { return channels % 4 == 0 && quadAligned(l); }

MTL::Size forwardGrid(int channels, int clipWidth, int clipHeight, int batch) {
    return MTL::Size(ceilDiv(channels, 4), ceilDiv(clipWidth, kPixelsPerThread), NS::UInteger(batch) * clipHeight);
}

bool empty(int channels, int batch, int width, int height) {
    return channels == 0 || batch == 0 || width == 0 || height == 0;
}

}  // namespace

void encodeArithmeticForward(MetalContext& ctx, CommandBuffer& cb, ArithmeticParams p, const BufferSlice& primary,
                             const BufferSlice& secondary, const BufferSlice& destination,
                             const BufferSlice& clampState) {
    const char* op = "arithmetic_forward";
    const int C = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkOperand(op, "primary", p.primary, C);
    checkOperand(op, "secondary", p.secondary, C);
    if (p.op < kArithmeticAdd || p.op > kArithmeticDivide) throwValueError(op, ": unknown op ", p.op);
    if (p.stateMode < kArithmeticClampNone || p.stateMode > kArithmeticClampUnclamped)
        throwValueError(op, ": unknown stateMode ", p.stateMode);
    const BufferSlice x = bindOperand(op, "primary", primary, p.primary, p.batch);
    const BufferSlice y = bindOperand(op, "secondary", secondary, p.secondary, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    BufferSlice state;
    if (p.stateMode != kArithmeticClampNone) {
        if (p.clampState.width < p.clipWidth || p.clampState.height < p.clipHeight || p.clampState.channels != C)
            throwValueError(op, ": the clamp state must cover the clip rectangle with the destination's channels");
        state = bindImage(op, "clamp state", clampState, p.clampState, p.batch);
    }
    if (empty(C, p.batch, p.clipWidth, p.clipHeight)) {
        metalCommandBuffer(cb);
        return;
    }
    FunctionConstants constants;
    constants.setInt(kArithOp, p.op)
        .setInt(kArithStateMode, p.stateMode)
        .setBool(kArithAlignedPrimary, alignedOperand(p.primary, C))
        .setBool(kArithAlignedSecondary, alignedOperand(p.secondary, C))
        .setBool(kArithAlignedDestination, alignedQuads(p.destination, C))
        .setBool(kArithAlignedState, p.stateMode != kArithmeticClampNone && alignedQuads(p.clampState, C))
        .setBool(kArithForSecondary, false)
        .setBool(kArithAlignedGradient, false);
    KernelDispatch dispatch(ctx.pipelines->get("arithmetic_forward", constants));
    dispatch.params(p).buffer(1, x).buffer(2, y).buffer(3, dst).buffer(4, state);
    dispatch.encodeThreads(ctx, cb, forwardGrid(C, p.clipWidth, p.clipHeight, p.batch));
}

void encodeCompareForward(MetalContext& ctx, CommandBuffer& cb, CompareParams p, const BufferSlice& primary,
                          const BufferSlice& secondary, const BufferSlice& destination) {
    const char* op = "compare_forward";
    const int C = p.destination.channels;
    checkLayout(op, "destination", p.destination);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkOperand(op, "primary", p.primary, C);
    checkOperand(op, "secondary", p.secondary, C);
    if (p.comparison < kCompareEqual || p.comparison > kCompareGreaterOrEqual)
        throwValueError(op, ": unknown comparison ", p.comparison);
    const BufferSlice x = bindOperand(op, "primary", primary, p.primary, p.batch);
    const BufferSlice y = bindOperand(op, "secondary", secondary, p.secondary, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (empty(C, p.batch, p.clipWidth, p.clipHeight)) {
        metalCommandBuffer(cb);
        return;
    }
    FunctionConstants constants;
    constants.setInt(kArithOp, p.comparison)
        .setInt(kArithStateMode, kArithmeticClampNone)
        .setBool(kArithAlignedPrimary, alignedOperand(p.primary, C))
        .setBool(kArithAlignedSecondary, alignedOperand(p.secondary, C))
        .setBool(kArithAlignedDestination, alignedQuads(p.destination, C))
        .setBool(kArithAlignedState, false)
        .setBool(kArithForSecondary, false)
        .setBool(kArithAlignedGradient, false);
    KernelDispatch dispatch(ctx.pipelines->get("compare_forward", constants));
    dispatch.params(p).buffer(1, x).buffer(2, y).buffer(3, dst);
    dispatch.encodeThreads(ctx, cb, forwardGrid(C, p.clipWidth, p.clipHeight, p.batch));
}

void encodeArithmeticGradient(MetalContext& ctx, CommandBuffer& cb, ArithmeticGradientParams p,
                              const BufferSlice& gradient, const BufferSlice& primary, const BufferSlice& secondary,
                              const BufferSlice& clampState, const BufferSlice& destination) {
    const char* op = "arithmetic_gradient";
    const int C = p.gradient.channels;
    const int B = p.batch, H = p.height, W = p.width;
    checkLayout(op, "gradient", p.gradient);
    checkLayout(op, "destination", p.destination);
    if (B < 0 || H < 0 || W < 0) throwValueError(op, ": negative batch or size");
    if (int64_t(B) * H * W > INT32_MAX) throwValueError(op, ": too many pixels in one dispatch");
    if (p.op < kArithmeticAdd || p.op > kArithmeticDivide) throwValueError(op, ": unknown op ", p.op);
    if (p.clampMode < kArithmeticClampNone || p.clampMode > kArithmeticClampUnclamped)
        throwValueError(op, ": unknown clampMode ", p.clampMode);
    const bool forSecondary = p.forSecondary != 0;
    const bool needX = (p.op == kArithmeticMultiply || p.op == kArithmeticDivide) && forSecondary;
    const bool needY = (p.op == kArithmeticMultiply && !forSecondary) || p.op == kArithmeticDivide;
    const ArithmeticOperand& s = forSecondary ? p.secondary : p.primary;
    if (!bit(s.strideX) || !bit(s.strideY) || !bit(s.strideChannels) || !bit(s.strideImages))
        throwValueError(op, ": strides of the input must be 0 or 1");
    const int DB = s.strideImages ? B : 1, DH = s.strideY ? H : 1, DW = s.strideX ? W : 1;
    const int DC = s.strideChannels ? C : 1;
    if (p.destination.channels != DC)
        throwValueError(op, ": destination has ", p.destination.channels, " channels, expected ", DC);

    const BufferSlice g = bindImage(op, "gradient", gradient, p.gradient, B);
    BufferSlice x, y, state;
    if (needX) {
        checkOperand(op, "primary", p.primary, C);
        x = bindOperand(op, "primary", primary, p.primary, B);
    }
    if (needY) {
        checkOperand(op, "secondary", p.secondary, C);
        y = bindOperand(op, "secondary", secondary, p.secondary, B);
    }
    if (p.clampMode != kArithmeticClampNone) {
        if (p.clampState.width < W || p.clampState.height < H || p.clampState.channels != C)
            throwValueError(op, ": the clamp state must cover width x height pixels with the gradient's channels");
        state = bindImage(op, "clamp state", clampState, p.clampState, B);
    }
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, DB);
    if (empty(C, B, W, H)) {
        metalCommandBuffer(cb);
        return;
    }

    FunctionConstants constants;
    constants.setInt(kArithOp, p.op)
        .setInt(kArithStateMode, p.clampMode)
        .setBool(kArithForSecondary, forSecondary)
        .setBool(kArithAlignedGradient, alignedQuads(p.gradient, C))
        .setBool(kArithAlignedPrimary, needX && alignedOperand(p.primary, C))
        .setBool(kArithAlignedSecondary, needY && alignedOperand(p.secondary, C))
        .setBool(kArithAlignedState, p.clampMode != kArithmeticClampNone && alignedQuads(p.clampState, C))
        .setBool(kArithAlignedDestination, s.strideChannels != 0 && alignedQuads(p.destination, C));

    // Units: output channel quads (1 when the channels are reduced) x output pixels x images.
    const int64_t DQ = s.strideChannels ? ceilDiv(C, 4) : 1;
    const MTL::Size units(NS::UInteger(DQ), NS::UInteger(DW), NS::UInteger(DB) * NS::UInteger(DH));
    const int64_t terms = int64_t(B / DB) * (H / DH) * (W / DW) * (s.strideChannels ? 1 : ceilDiv(C, 4));
    const bool direct = terms <= kDirectTerms;
    KernelDispatch dispatch(
        ctx.pipelines->get(direct ? "arithmetic_gradient_direct" : "arithmetic_gradient_reduce", constants));
    dispatch.params(p).buffer(1, g).buffer(2, x).buffer(3, y).buffer(4, state).buffer(5, dst);
    if (direct)
        dispatch.encodeThreads(ctx, cb, units);
    else
        dispatch.encodeThreadgroups(ctx, cb, units, kReduceThreads, true);
}

}  // namespace mpsgrad::metal_backend
