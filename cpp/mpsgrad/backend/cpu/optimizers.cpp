// CPU backend: the optimizer update (metal/optimizer_math.h, one element at a time, split across
// threads in contiguous ranges; every element is independent, so results do not depend on the split).
#include <cstdint>

#include "../../../../metal/optimizer_math.h"
#include "backend/backend.h"
#include "core/errors.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
namespace {

void checkSlice(const char* name, const BufferSlice& slice, int32_t count) {
    if (!slice) throwValueError("optimizer_update: ", name, " buffer is missing");
    const size_t length = slice.buffer->length();
    const size_t bytes = size_t(count) * sizeof(float);
    if (slice.offset % sizeof(float) != 0 || slice.offset > length || bytes > length - slice.offset)
        throwValueError("optimizer_update: ", name, " holds ", length, " bytes, too few for ", count,
                        " floats at offset ", slice.offset);
}

}  // namespace

void checkOptimizerBindings(const OptimizerParams& p, const BufferSlice& gradient, const BufferSlice& values,
                            const BufferSlice& state0, const BufferSlice& state1, const BufferSlice& state2,
                            const BufferSlice& result) {
    if (p.count < 0) throwValueError("optimizer_update: count must be >= 0, got ", p.count);
    if (p.kind < kOptimizerSGD || p.kind > kOptimizerAdam) throwValueError("optimizer_update: unknown kind ", p.kind);
    if (p.count == 0) return;
    checkSlice("gradient", gradient, p.count);
    checkSlice("values", values, p.count);
    checkSlice("result", result, p.count);
    const bool s0 = p.kind != kOptimizerSGD || p.hasState0 != 0;
    if (s0) checkSlice("state0", state0, p.count);
    if (p.kind == kOptimizerAdam) checkSlice("state1", state1, p.count);
    if (p.kind == kOptimizerAdam && p.amsgrad != 0) checkSlice("state2", state2, p.count);
}

void optimizerUpdate(const OptimizerParams& p, const float* gradient, const float* values, float* state0,
                     float* state1, float* state2, float* result) {
    parallelFor(p.count, 1 << 14, [&](int64_t i0, int64_t i1) {
        float unused = 0.0f;
        for (int64_t i = i0; i < i1; ++i) {
            float& s0 = state0 ? state0[i] : unused;
            float& s1 = state1 ? state1[i] : unused;
            float& s2 = state2 ? state2[i] : unused;
            result[i] = mpsgrad::optimizerUpdate(p, gradient[i], values[i], s0, s1, s2);
        }
    });
}

}  // namespace mpsgrad::cpu
