// The arithmetic family's kernels (MPSCNNAdd / Subtract / Multiply / Divide, MPSNNCompare and the
// arithmetic gradients). Semantics are exactly those of metal/arithmetic_params.h (the CPU backend,
// cpp/mpsgrad/backend/cpu/arithmetic.cpp, computes the same formulas). The host side is
// cpp/mpsgrad/backend/metal/metal_arithmetic.cpp.
//
// Forward ops: one thread handles one channel quad of kPixelsPerThread consecutive pixels of a clip
// row, reading each operand through its 0/1 strides (a channel-broadcast operand repeats channel 0
// in every lane), so neighbouring threads touch neighbouring quads.
//
// Gradient: every element of dX sums the terms G' * D of the forward elements that read it
// (one term when the input was not broadcast; a whole axis for each broadcast axis). A "unit" is
// one output pixel with one channel quad (or its single channel when the channels were
// broadcast). Small reductions run one unit per thread (arithmetic_gradient_direct); large ones a
// threadgroup of kReduceThreads per unit (arithmetic_gradient_reduce): thread i takes terms
// i, i + kReduceThreads, ... in order, then simd_sum and the simdgroups' sums in simdgroup order
// combine them. The order depends only on the shapes, so results are reproducible bit for bit.
//
// Function constants (set by the host per pipeline):
//   kOp              ArithmeticOpCode (forward, gradient) or CompareTypeCode (compare)
//   kStateMode       forward: ArithmeticClampStateCode written; gradient: clampMode applied
//   kForSecondary    gradient: dX is for the secondary input
//   kAligned*        the binding is read or written as aligned float4 quads (16-byte aligned quads
//                    and whole quads of channels)
#include <metal_stdlib>

#include "arithmetic_params.h"
#include "image_indexing.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant int kOp [[function_constant(0)]];
constant bool kAlignedPrimary [[function_constant(1)]];
constant bool kAlignedSecondary [[function_constant(2)]];
constant bool kAlignedDestination [[function_constant(3)]];
constant bool kAlignedState [[function_constant(4)]];
constant int kStateMode [[function_constant(5)]];
constant bool kForSecondary [[function_constant(6)]];
constant bool kAlignedGradient [[function_constant(7)]];

namespace arithmetic {

enum : int {
    kPixelsPerThread = 4,
    kReduceThreads = 128,  // threads per unit in arithmetic_gradient_reduce (4 simdgroups)
    kSimdWidth = 32,
};

// Channels c .. c + count of operand o at clip pixel (x, y) of image n, as a float4 (lanes past
// count are 0; a channel-broadcast operand gives channel 0 of its slice in every lane).
inline float4 readOperand(ArithmeticOperand o, device const float* data, int n, int x, int y, int c, int count,
                          bool aligned) {
    int idx = edgePixelIndex(o.image, o.edgeMode, o.strideImages != 0 ? n : 0, o.offsetY + o.strideY * y,
                             o.offsetX + o.strideX * x);
    if (idx < 0) return float4(0.0f);
    if (o.strideChannels == 0) return float4(data[idx]);
    return loadFloat4(data, idx + c, count, aligned);
}

inline float applyOp(int op, float x, float y) {
    switch (op) {
        case kArithmeticAdd: return x + y;
        case kArithmeticSubtract: return x - y;
        case kArithmeticMultiply: return x * y;
        default: return x / y;
    }
}

// NaN-propagating clamp (a NaN u stays NaN), as the CPU backend.
inline float clampValue(float u, float lo, float hi) {
    u = u < lo ? lo : u;
    return u > hi ? hi : u;
}

inline float maskValue(float u, float lo, float hi) { return (lo <= u && u <= hi) ? 1.0f : 0.0f; }

inline bool compareValues(int comparison, float x, float y, float threshold) {
    switch (comparison) {
        case kCompareEqual: return fabs(x - y) <= threshold;
        case kCompareNotEqual: return !(fabs(x - y) <= threshold);
        case kCompareLess: return x < y;
        case kCompareLessOrEqual: return x <= y;
        case kCompareGreater: return x > y;
        default: return x >= y;
    }
}

// The clip row and first pixel of a forward thread; `valid` is false past the dispatch.
struct RowSpan {
    int n;
    int y;
    int x0;
    int c;
    int count;
    bool valid;
};

inline RowSpan rowSpan(uint3 gid, int channels, int batch, int clipWidth, int clipHeight) {
    RowSpan s;
    s.c = 4 * int(gid.x);
    s.x0 = kPixelsPerThread * int(gid.y);
    int row = int(gid.z);
    s.valid = s.c < channels && s.x0 < clipWidth && row < batch * clipHeight;
    s.n = s.valid ? row / clipHeight : 0;
    s.y = row - s.n * clipHeight;
    s.count = min(4, channels - s.c);
    return s;
}

// ---- gradient ----------------------------------------------------------------------------------

// The output unit of grid position (quad, column, image * rows) and the reduction it sums.
struct Unit {
    int n;        // output image (dn)
    int y;        // output row (dy, relative to destinationY)
    int x;        // output column (dx, relative to destinationX)
    int c;        // first output channel of the unit (forward channel when channels are not reduced)
    int count;    // output channels of the unit: up to 4, or 1 when the channels are reduced
    int nCount;   // terms per axis: 1 along the axes the input walks, the whole axis otherwise
    int yCount;
    int xCount;
    int qCount;   // channel quads per term set: 1, or ceil(C / 4) when the channels are reduced
    int terms;
    bool valid;
};

inline Unit gradientUnit(constant ArithmeticGradientParams& p, uint3 pos) {
    const ArithmeticOperand s = kForSecondary ? p.secondary : p.primary;
    const int C = p.gradient.channels;
    const int DB = s.strideImages != 0 ? p.batch : 1;
    const int DH = s.strideY != 0 ? p.height : 1;
    const int DW = s.strideX != 0 ? p.width : 1;
    const int DQ = s.strideChannels != 0 ? ceilDiv(C, 4) : 1;
    Unit u;
    u.valid = int(pos.x) < DQ && int(pos.y) < DW && int(pos.z) < DB * DH;
    u.n = u.valid ? int(pos.z) / DH : 0;
    u.y = int(pos.z) - u.n * DH;
    u.x = int(pos.y);
    u.c = s.strideChannels != 0 ? 4 * int(pos.x) : 0;
    u.count = s.strideChannels != 0 ? min(4, C - u.c) : 1;
    u.nCount = s.strideImages != 0 ? 1 : p.batch;
    u.yCount = s.strideY != 0 ? 1 : p.height;
    u.xCount = s.strideX != 0 ? 1 : p.width;
    u.qCount = s.strideChannels != 0 ? 1 : ceilDiv(C, 4);
    u.terms = u.nCount * u.yCount * u.xCount * u.qCount;
    return u;
}

// Term t of unit u: G' * D for the four forward channels of the term (lanes past C give 0).
inline float4 gradientTerm(constant ArithmeticGradientParams& p, Unit u, int t, device const float* gradient,
                           device const float* primary, device const float* secondary,
                           device const float* clampState) {
    const int tq = t % u.qCount;
    int rest = t / u.qCount;
    const int tx = rest % u.xCount;
    rest /= u.xCount;
    const int ty = rest % u.yCount;
    const int tn = rest / u.yCount;
    const int n = u.nCount == 1 ? u.n : tn;
    const int py = u.yCount == 1 ? u.y : ty;
    const int px = u.xCount == 1 ? u.x : tx;
    const int c0 = u.qCount == 1 ? u.c : 4 * tq;
    const int C = p.gradient.channels;
    const int count = min(4, C - c0);

    const int gi = edgePixelIndex(p.gradient, kEdgeZero, n, p.gradientY + py, p.gradientX + px);
    float4 g = gi < 0 ? float4(0.0f) : loadFloat4(gradient, gi + c0, count, kAlignedGradient);
    if (kStateMode == kArithmeticClampMask) {
        g = g * loadFloat4(clampState, pixelIndex(p.clampState, n, py, px) + c0, count, kAlignedState);
    } else if (kStateMode == kArithmeticClampUnclamped) {
        float4 s = loadFloat4(clampState, pixelIndex(p.clampState, n, py, px) + c0, count, kAlignedState);
        for (int j = 0; j < 4; ++j) g[j] = g[j] * maskValue(s[j], p.minimumValue, p.maximumValue);
    }
    const float pS = p.primaryScale, sS = p.secondaryScale;
    float4 r;
    if (kOp == kArithmeticAdd) {
        r = g * (kForSecondary ? sS : pS);
    } else if (kOp == kArithmeticSubtract) {
        r = g * (kForSecondary ? -sS : pS);
    } else if (kOp == kArithmeticMultiply) {
        const float4 other = kForSecondary ? readOperand(p.primary, primary, n, px, py, c0, count, kAlignedPrimary)
                                           : readOperand(p.secondary, secondary, n, px, py, c0, count, kAlignedSecondary);
        r = g * ((pS * sS) * other);
    } else {
        const float4 yv = readOperand(p.secondary, secondary, n, px, py, c0, count, kAlignedSecondary);
        if (!kForSecondary) {
            r = g * (pS / (sS * yv));
        } else {
            const float4 xv = readOperand(p.primary, primary, n, px, py, c0, count, kAlignedPrimary);
            r = g * (-(pS * xv) / (sS * yv * yv));
        }
    }
    for (int j = 0; j < 4; ++j)
        if (j >= count) r[j] = 0.0f;  // lanes past C (a divisor there may be 0)
    return r;
}

// Writes a finished unit; pixels outside dX are dropped.
inline void writeUnit(constant ArithmeticGradientParams& p, Unit u, float4 sum, device float* destination) {
    const int xx = p.destinationX + u.x, yy = p.destinationY + u.y;
    if (xx < 0 || yy < 0 || xx >= p.destination.width || yy >= p.destination.height) return;
    const int index = pixelIndex(p.destination, u.n, yy, xx) + u.c;
    if (u.qCount == 1) {
        storeFloat4(destination, index, sum, u.count, kAlignedDestination);
    } else {
        destination[index] = (sum.x + sum.y) + (sum.z + sum.w);
    }
}

}  // namespace arithmetic

using namespace arithmetic;

// r = clamp((pS*x) OP (sS*y) + bias) and the clamp state. Grid (ceil(channels / 4),
// ceil(clipWidth / kPixelsPerThread), batch * clipHeight) threads. Bindings: 0 params, 1 primary x,
// 2 secondary y, 3 destination, 4 clamp state (kStateMode != 0).
kernel void arithmetic_forward(constant ArithmeticParams& p [[buffer(0)]],
                               device const float* primary [[buffer(1)]],
                               device const float* secondary [[buffer(2)]],
                               device float* destination [[buffer(3)]],
                               device float* clampState [[buffer(4)]],
                               uint3 gid [[thread_position_in_grid]]) {
    const RowSpan s = rowSpan(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!s.valid) return;
    const int xEnd = min(s.x0 + kPixelsPerThread, p.clipWidth);
    for (int x = s.x0; x < xEnd; ++x) {
        const float4 xv = readOperand(p.primary, primary, s.n, x, s.y, s.c, s.count, kAlignedPrimary);
        const float4 yv = readOperand(p.secondary, secondary, s.n, x, s.y, s.c, s.count, kAlignedSecondary);
        float4 r;
        float4 st;
        for (int j = 0; j < 4; ++j) {
            const float u = applyOp(kOp, p.primaryScale * xv[j], p.secondaryScale * yv[j]) + p.bias;
            r[j] = clampValue(u, p.minimumValue, p.maximumValue);
            st[j] = kStateMode == kArithmeticClampMask ? maskValue(u, p.minimumValue, p.maximumValue) : u;
        }
        const int d = pixelIndex(p.destination, s.n, p.clipY + s.y, p.clipX + x) + s.c;
        storeFloat4(destination, d, r, s.count, kAlignedDestination);
        if (kStateMode != kArithmeticClampNone)
            storeFloat4(clampState, pixelIndex(p.clampState, s.n, s.y, x) + s.c, st, s.count, kAlignedState);
    }
}

// r = clamp((compare(pS*x, sS*y) ? 1 : 0) + bias); kOp is the CompareTypeCode. Grid as
// arithmetic_forward. Bindings: 0 params, 1 primary x, 2 secondary y, 3 destination.
kernel void compare_forward(constant CompareParams& p [[buffer(0)]],
                            device const float* primary [[buffer(1)]],
                            device const float* secondary [[buffer(2)]],
                            device float* destination [[buffer(3)]],
                            uint3 gid [[thread_position_in_grid]]) {
    const RowSpan s = rowSpan(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!s.valid) return;
    const int xEnd = min(s.x0 + kPixelsPerThread, p.clipWidth);
    for (int x = s.x0; x < xEnd; ++x) {
        const float4 xv = readOperand(p.primary, primary, s.n, x, s.y, s.c, s.count, kAlignedPrimary);
        const float4 yv = readOperand(p.secondary, secondary, s.n, x, s.y, s.c, s.count, kAlignedSecondary);
        float4 r;
        for (int j = 0; j < 4; ++j) {
            const bool hit = compareValues(kOp, p.primaryScale * xv[j], p.secondaryScale * yv[j], p.threshold);
            r[j] = clampValue((hit ? 1.0f : 0.0f) + p.bias, p.minimumValue, p.maximumValue);
        }
        const int d = pixelIndex(p.destination, s.n, p.clipY + s.y, p.clipX + x) + s.c;
        storeFloat4(destination, d, r, s.count, kAlignedDestination);
    }
}

// One unit per thread, its terms summed in order. Grid (DQ, DW, DB * DH) threads, where DQ is
// the output channel quads (1 when the channels are reduced) and DW x DH x DB the output pixels
// and images. Bindings: 0 params, 1 gradient G, 2 forward x, 3 forward y, 4 clamp state,
// 5 destination dX.
kernel void arithmetic_gradient_direct(constant ArithmeticGradientParams& p [[buffer(0)]],
                                       device const float* gradient [[buffer(1)]],
                                       device const float* primary [[buffer(2)]],
                                       device const float* secondary [[buffer(3)]],
                                       device const float* clampState [[buffer(4)]],
                                       device float* destination [[buffer(5)]],
                                       uint3 gid [[thread_position_in_grid]]) {
    const Unit u = gradientUnit(p, gid);
    if (!u.valid) return;
    float4 sum = 0.0f;
    for (int t = 0; t < u.terms; ++t) sum += gradientTerm(p, u, t, gradient, primary, secondary, clampState);
    writeUnit(p, u, sum, destination);
}

// One unit per threadgroup of kReduceThreads threads. Grid (DQ, DW, DB * DH) threadgroups.
// Bindings as arithmetic_gradient_direct.
[[max_total_threads_per_threadgroup(128)]]
kernel void arithmetic_gradient_reduce(constant ArithmeticGradientParams& p [[buffer(0)]],
                                       device const float* gradient [[buffer(1)]],
                                       device const float* primary [[buffer(2)]],
                                       device const float* secondary [[buffer(3)]],
                                       device const float* clampState [[buffer(4)]],
                                       device float* destination [[buffer(5)]],
                                       uint3 group [[threadgroup_position_in_grid]],
                                       uint threadIndex [[thread_index_in_threadgroup]],
                                       uint lane [[thread_index_in_simdgroup]],
                                       uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float4 simdSums[kReduceThreads / kSimdWidth];
    const Unit u = gradientUnit(p, group);
    if (!u.valid) return;  // uniform across the threadgroup
    float4 partial = 0.0f;
    for (int t = int(threadIndex); t < u.terms; t += kReduceThreads)
        partial += gradientTerm(p, u, t, gradient, primary, secondary, clampState);
    const float4 s = simd_sum(partial);
    if (lane == 0) simdSums[simd] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (threadIndex == 0) {
        float4 total = simdSums[0];
        for (int i = 1; i < kReduceThreads / kSimdWidth; ++i) total += simdSums[i];
        writeUnit(p, u, total, destination);
    }
}
