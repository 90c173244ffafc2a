// Image format conversion of the CPU backend (metal/convert_params.h): float16 <-> float32 over
// whole image storage (padding lanes included), for the float32 shadows of FLOAT16 images
// (core/float16_shadow.h, docs/float16.md).
//
// On x86-64 processors with F16C (every x86-64 CPU since 2012/2013) the conversion runs 8 lanes at
// a time with vcvtph2ps / vcvtps2ph, chosen at run time so that the build still targets baseline
// x86-64; elsewhere (and for the tail) the portable scalar code of core/half.h runs. Both round
// float -> half to nearest even with overflow to infinity, so the result is the same bit for bit
// except for the payload bits of NaNs.
#include <cstdint>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/half_simd.h"
#include "backend/cpu/parallel.h"
#include "core/half.h"

namespace mpsgrad::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements per parallel chunk: large enough to amortize the fork

void convertChunk(bool toHalf, const void* source, void* destination, int64_t begin, int64_t end) {
    if (toHalf)
        floatsToHalves(static_cast<const float*>(source) + begin, static_cast<uint16_t*>(destination) + begin,
                       end - begin);
    else
        halvesToFloats(static_cast<const uint16_t*>(source) + begin, static_cast<float*>(destination) + begin,
                       end - begin);
}
}  // namespace

void convertImageFormat(const ConvertFormatParams& p, const void* source, void* destination) {
    parallelFor(p.count, kGrain,
                [&](int64_t begin, int64_t end) { convertChunk(p.toHalf != 0, source, destination, begin, end); });
}

}  // namespace mpsgrad::cpu
