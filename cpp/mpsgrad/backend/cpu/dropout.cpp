// CPU backend: dropout forward and gradient (the same op: Y = mask ? X / p : 0).
//
// Semantics are exactly those written in metal/dropout_params.h; the mask comes from the
// Philox4x32-10 function of metal/philox.h, the code the Metal kernels run, so both backends draw
// the same bits. Rows are split across threads; a pixel's channels walk their mask elements in
// order, computing each Philox block of four words once.
#include <cstdint>
#include <string>

#include "../../../../metal/dropout_params.h"
#include "cpu_ops.h"
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

}  // namespace

void dropout(const DropoutParams& p, const BufferSlice& sourceSlice, const BufferSlice& destinationSlice) {
    static const char* op = "dropout";
    const DropoutMask& m = p.mask;
    checkMask(op, m);
    checkClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight, p.batch);
    checkImageBinding(op, "source", sourceSlice, p.source, p.batch);
    checkImageBinding(op, "destination", destinationSlice, p.destination, p.batch);
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
    const float* x = sourceSlice.floats();
    float* y = destinationSlice.floats();
    const float keep = m.keepProbability;
    const int64_t rows = int64_t(p.batch) * p.clipHeight;
    parallelFor(rows, rowGrain(int64_t(p.clipWidth) * N * 8), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.clipHeight;
            const int32_t row = int32_t(r % p.clipHeight);
            for (int32_t i = 0; i < p.clipWidth; ++i) {
                const float* in = x + pixelIndex(p.source, n, p.sourceX + i, p.sourceY + row);
                float* out = y + pixelIndex(p.destination, n, p.clipX + i, p.clipY + row);
                DropoutIndex cached = ~DropoutIndex(0);
                PhiloxWords bits{};
                for (int32_t c = 0; c < N; ++c) {
                    const DropoutIndex e = dropoutElement(m, m.firstImage + int32_t(n), m.maskX + i, m.maskY + row, c);
                    if ((e >> 2) != cached) cached = e >> 2, bits = dropoutBlock(m, cached);
                    out[c] = dropoutKeeps(m, bits, e) ? in[c] / keep : 0.0f;
                }
            }
        }
    });
}

}  // namespace mpsgrad::cpu
