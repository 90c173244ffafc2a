// Runs of float16 <-> float32 conversions for the CPU backend: F16C (8 lanes) when the processor
// has it, checked once at run time, else the portable scalar code of core/half.h. Used by the
// format conversion op (convert.cpp) and by the element-wise kernels that read and write FLOAT16
// storage natively (docs/float16.md).
#pragma once

#include <cstdint>

namespace mpsgrad::cpu {

// True when the F16C path is used (x86-64 with F16C and AVX; false elsewhere).
bool hasHardwareHalfConversion();

// destination[i] = float(source[i]) for i < count (exact).
void halvesToFloats(const uint16_t* source, float* destination, int64_t count);
// destination[i] = half(source[i]) for i < count, rounding to nearest even, overflow to infinity.
void floatsToHalves(const float* source, uint16_t* destination, int64_t count);
// destination[r * count + i] = float(sources[r][i]) for r < rows, i < count, and zeros for a null
// sources[r]: many short runs (the pixels of a Winograd tile) with one dispatch.
void gatherHalvesToFloats(const uint16_t* const* sources, int rows, int64_t count, float* destination);

}  // namespace mpsgrad::cpu
