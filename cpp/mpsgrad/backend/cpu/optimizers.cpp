// CPU backend: the optimizer update (metal/optimizer_math.h, one element at a time, split across
// threads in contiguous ranges; every element is independent, so results do not depend on the split).
#include <cstdint>

#include "../../../../metal/optimizer_math.h"
#include "backend/backend.h"
#include "core/errors.h"
#include "cpu_ops.h"
#include "parallel.h"

namespace mpsgrad::cpu {
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
