// CPU backend: dropout forward and gradient (the same op: Y = mask ? X / p : 0).
//
// Semantics are exactly those written in metal/dropout_params.h; the mask comes from the
// Philox4x32-10 function of metal/philox.h, the code the Metal kernels run, so both backends draw
// the same bits. Rows are split across threads; a pixel's channels walk their mask elements in
// order, computing each Philox block of four words once. FLOAT16 bindings are read and written
// natively, a row at a time through float32 row buffers (half_streaming.h).
#include <cstdint>
#include <string>

#include "../../../../metal/dropout_params.h"
#include "cpu_ops.h"
#include "half_streaming.h"
#include "image_binding.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

using namespace elementwise;

void checkMask(const char* op, const DropoutMask& m) {
    if (!(m.keepProbability > 0.0f && m.keepProbability < 1.0f)) invalid(op, "keepProbability must be in (0, 1)");
    if (m.maskWidth < 1 || m.maskHeight < 1 || m.maskChannels < 1) invalid(op, "the mask grid is empty");
    for (int32_t s : {m.strideX, m.strideY, m.strideZ})
        if (s != 0 && s != 1) invalid(op, "mask strides must be 0 or 1");
    if (m.firstImage < 0) invalid(op, "negative firstImage");
}

// The op over rows of the clip for X stored as XT and Y as DT (float, or uint16_t: IEEE half).
template <class XT, class DT>
void dropoutRows(const DropoutParams& p, const void* source, void* destination) {
    const DropoutMask& m = p.mask;
    const int32_t N = p.destination.channels;
    const float keep = m.keepProbability;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N * 8), [&](int64_t r0, int64_t r1) {
        RowReader<XT> x(source, p.source);
        RowWriter<DT> y(destination, p.destination);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t row = int32_t(r % p.clipHeight);
            // The source rectangle is inside the image (checked): one run of consecutive pixels.
            const Run in = x.runs(n, p.sourceX, saturatedIndex(p.sourceY, row), p.clipWidth, kEdgeZero, nullptr).runs[0];
            float* outRow = y.row(n, p.clipX, p.clipY + row, p.clipWidth);
            for (int32_t i = 0; i < p.clipWidth; ++i) {
                const float* xp = in.ptr + i * in.stride;
                float* out = outRow + int64_t(i) * p.destination.pixelStride;
                DropoutIndex cached = ~DropoutIndex(0);
                PhiloxWords bits{};
                for (int32_t c = 0; c < N; ++c) {
                    const DropoutIndex e = dropoutElement(m, m.firstImage + int32_t(n), m.maskX + i, m.maskY + row, c);
                    if ((e >> 2) != cached) cached = e >> 2, bits = dropoutBlock(m, cached);
                    out[c] = dropoutKeeps(m, bits, e) ? xp[c] / keep : 0.0f;
                }
            }
            y.commit();
        }
    });
}

}  // namespace

void dropout(const DropoutParams& p, const HalfBindings& formats, const BufferSlice& sourceSlice,
             const BufferSlice& destinationSlice) {
    static const char* op = "dropout";
    const DropoutMask& m = p.mask;
    checkMask(op, m);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkImageBinding(op, "source", sourceSlice, p.source, p.batch, formats.source);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch, formats.destination);
    const int32_t N = p.destination.channels;
    if (p.source.channels != N) invalid(op, "source and destination channel counts differ");
    if (N == 0 || p.clipWidth == 0 || p.clipHeight == 0 || p.batch == 0) return;
    if (p.sourceX < 0 || p.sourceY < 0 || int64_t(p.sourceX) + p.clipWidth > p.source.width ||
        int64_t(p.sourceY) + p.clipHeight > p.source.height)
        invalid(op, "the source rectangle is not inside the source image");
    // Mask coordinates stay on the grid (broadcast axes read coordinate 0 whatever the position).
    if ((m.strideX && (m.maskX < 0 || int64_t(m.maskX) + p.clipWidth > m.maskWidth)) ||
        (m.strideY && (m.maskY < 0 || int64_t(m.maskY) + p.clipHeight > m.maskHeight)) ||
        (m.strideZ && N > m.maskChannels))
        invalid(op, "the clip reaches beyond the mask grid");
    // floats() is the binding's address whatever its element type.
    const void* source = sourceSlice.floats();
    void* destination = destinationSlice.floats();
    withFormats(
        [&](auto x, auto d) {
            dropoutRows<typename decltype(x)::type, typename decltype(d)::type>(p, source, destination);
        },
        formats.source, formats.destination);
}

void dropout(const DropoutParams& p, const BufferSlice& source, const BufferSlice& destination) {
    dropout(p, HalfBindings{}, source, destination);
}

}  // namespace mpsgrad::cpu
