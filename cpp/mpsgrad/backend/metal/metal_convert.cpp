// Encoding of the image format conversion (metal/convert.metal, docs/float16.md, docs/storage_formats.md). The bindings
// were checked by bindings::checkConvertImageFormat (element counts, alignment, no overlap).
#include "backend/metal/metal_command.h"
#include "backend/metal/metal_dispatch.h"
#include "backend/metal/metal_ops.h"
#include "core/command_buffer.h"

namespace mpsgrad::metal_backend {

namespace {
constexpr int kElementsPerThread = 4;  // convert.metal's kElementsPerThread

// The kernel of a conversion (bindings::checkConvertImageFormat accepted its params).
const char* kernelName(const ConvertFormatParams& p) {
    switch (p.storage) {
        case kStorageUnorm8: return p.toStorage ? "convert_float_to_unorm8" : "convert_unorm8_to_float";
        case kStorageUnorm16: return p.toStorage ? "convert_float_to_unorm16" : "convert_unorm16_to_float";
        default: return p.toStorage ? "convert_float_to_half" : "convert_half_to_float";
    }
}
}  // namespace

void encodeConvertImageFormat(MetalContext& ctx, CommandBuffer& cb, const ConvertFormatParams& p,
                              const BufferSlice& source, const BufferSlice& destination) {
    if (p.count == 0) return;
    KernelDispatch dispatch(
        ctx.pipelines->get(kernelName(p), FunctionConstants{}));
    dispatch.params(p).buffer(1, source).buffer(2, destination);
    dispatch.encodeThreads(ctx, cb, MTL::Size(ceilDiv(p.count, kElementsPerThread), 1, 1));
}

}  // namespace mpsgrad::metal_backend
