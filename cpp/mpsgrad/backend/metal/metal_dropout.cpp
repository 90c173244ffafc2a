// Encoding of the dropout family's op (kernel: metal/dropout.metal).
#include <cstdint>

#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad::metal_backend {

namespace {

// dropout.metal's function constants.
enum : unsigned { kDropoutAlignedSource = 1, kDropoutAlignedDestination = 3 };

bool alignedQuads(const ImageLayout& l) { return l.channels % 4 == 0 && quadAligned(l); }

}  // namespace

void encodeDropout(MetalContext& ctx, CommandBuffer& cb, DropoutParams p, const BufferSlice& source,
                   const BufferSlice& destination) {
    const char* op = "dropout";
    const DropoutMask& m = p.mask;
    const int N = p.destination.channels;
    if (!(m.keepProbability > 0.0f && m.keepProbability < 1.0f))
        throwValueError(op, ": keepProbability must be in (0, 1), got ", m.keepProbability);
    if (m.maskWidth < 1 || m.maskHeight < 1 || m.maskChannels < 1) throwValueError(op, ": the mask grid is empty");
    for (int32_t s : {m.strideX, m.strideY, m.strideZ})
        if (s != 0 && s != 1) throwValueError(op, ": mask strides must be 0 or 1, got ", s);
    if (m.firstImage < 0) throwValueError(op, ": negative firstImage");
    checkLayout(op, "source", p.source);
    checkLayout(op, "destination", p.destination);
    checkRect(op, "destination clip", p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    checkRect(op, "source", p.source, p.sourceX, p.sourceY, p.clipWidth, p.clipHeight);
    if (p.batch < 0 || int64_t(p.batch) * p.clipHeight > INT32_MAX) throwValueError(op, ": bad batch size ", p.batch);
    if (p.source.channels != N) throwValueError(op, ": source has ", p.source.channels, " channels, destination ", N);
    if ((m.strideX && (m.maskX < 0 || int64_t(m.maskX) + p.clipWidth > m.maskWidth)) ||
        (m.strideY && (m.maskY < 0 || int64_t(m.maskY) + p.clipHeight > m.maskHeight)) ||
        (m.strideZ && N > m.maskChannels))
        throwValueError(op, ": the clip reaches beyond the mask grid");
    const BufferSlice src = bindImage(op, "source", source, p.source, p.batch);
    const BufferSlice dst = bindImage(op, "destination", destination, p.destination, p.batch);
    if (N == 0 || p.batch == 0 || p.clipWidth == 0 || p.clipHeight == 0) {
        metalCommandBuffer(cb);
        return;
    }
    FunctionConstants constants;
    constants.setBool(kDropoutAlignedSource, alignedQuads(p.source))
        .setBool(kDropoutAlignedDestination, alignedQuads(p.destination));
    KernelDispatch dispatch(ctx.pipelines->get("dropout_apply", constants));
    dispatch.params(p).buffer(1, src).buffer(2, dst);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(N, 4), NS::UInteger(p.clipWidth),
                                              NS::UInteger(int64_t(p.batch) * p.clipHeight)));
}

}  // namespace mpsgrad::metal_backend
