// Params of the arithmetic family's backend ops (MPSCNNAdd/Subtract/Multiply/Divide, MPSNNCompare,
// MPSCNNAdd/Subtract/MultiplyGradient and mpsgrad's DivideGradient extension), shared by C++ and
// Metal. Spec §2.10.
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/arithmetic.cpp). The
// element-wise conventions of neuron_params.h apply (clip rectangle, channel ranges, batches,
// edge modes); this family adds broadcasting, described per operand by ArithmeticOperand.
#pragma once

#include "common_params.h"

namespace mpsgrad {

// The binary operator of MPSCNNArithmetic's subclasses.
enum ArithmeticOpCode : int32_t {
    kArithmeticAdd = 0,       // MPSCNNAdd
    kArithmeticSubtract = 1,  // MPSCNNSubtract
    kArithmeticMultiply = 2,  // MPSCNNMultiply
    kArithmeticDivide = 3,    // MPSCNNDivide
};

// MPSNNComparisonType values (declaration order in MPSCNNMath.h).
enum CompareTypeCode : int32_t {
    kCompareEqual = 0,           // |x - y| <= threshold
    kCompareNotEqual = 1,        // !(|x - y| <= threshold)   (true when either side is NaN)
    kCompareLess = 2,            // x < y
    kCompareLessOrEqual = 3,     // x <= y
    kCompareGreater = 4,         // x > y
    kCompareGreaterOrEqual = 5,  // x >= y
};

// What the forward op writes into the gradient state's resource (ArithmeticParams::stateMode) and
// how the gradient op uses it (ArithmeticGradientParams::clampMode).
enum ArithmeticClampStateCode : int32_t {
    kArithmeticClampNone = 0,        // nothing written / G used as is (no clamp differentiation)
    kArithmeticClampMask = 1,        // mask: 1.0f where minimumValue <= u <= maximumValue, else 0.0f
    kArithmeticClampUnclamped = 2,   // the unclamped result u itself; the gradient op rebuilds the
                                     //   mask from its own minimumValue / maximumValue
};

// One input of a binary element-wise op with its broadcasting, i.e. where the element for output
// pixel p = (x, y) of the clip rectangle, channel c and batch index n is read:
//   V(n, p, c) = image[strideImages * n]
//                     [offsetY + strideY * y][offsetX + strideX * x]
//                     [image.channelOffset + strideChannels * c]
// Each stride is 0 or 1 (MPS primary/secondaryStrideInPixelsX/Y and ...StrideInFeatureChannels).
// Stride 0 broadcasts the input along that axis: it reads only coordinate offset (pixel axes),
// channel image.channelOffset (channels) or image 0 (batch). All pixel strides 0 read a single
// pixel; strideChannels 0 broadcasts channel 0 of the slice to every output channel.
// strideImages = 0 (an mpsgrad extension; MPS passes the same image in every batch slot) shares
// one image across the whole batch. Off-image pixels follow edgeMode.
struct ArithmeticOperand {
    ImageLayout image;        // channels: destination.channels when strideChannels = 1, else >= 1
    int32_t offsetX;          // pixel read for the clip origin (MPS primaryOffset / secondaryOffset)
    int32_t offsetY;
    int32_t strideX;          // 0 or 1
    int32_t strideY;          // 0 or 1
    int32_t strideChannels;   // 0 or 1
    int32_t strideImages;     // 0 or 1
    int32_t edgeMode;         // EdgeModeCode for off-image reads
};

// MPSCNNArithmetic forward, with x = primary, y = secondary:
//   u = (primaryScale * x(n,p,c)) OP (secondaryScale * y(n,p,c)) + bias
//   R[n][clipY+y][clipX+x][destination.channelOffset + c] = clamp(u, minimumValue, maximumValue)
// for 0 <= c < destination.channels, OP = op (ArithmeticOpCode). clamp(u, lo, hi) =
// u < lo ? lo : (u > hi ? hi : u) (a NaN u stays NaN). Division follows IEEE (x/0 = ±inf or NaN).
//
// Gradient state (stateMode != kArithmeticClampNone): for every written element,
//   S[n][y][x][clampState.channelOffset + c] = mask(u)  (kArithmeticClampMask)
//                                             or u       (kArithmeticClampUnclamped)
// where the state image covers the clip rectangle: clampState.width = clipWidth, height =
// clipHeight, channels = destination.channels, and pixel (x, y) belongs to R's (clipX+x, clipY+y).
// mask(u) = (minimumValue <= u && u <= maximumValue) ? 1 : 0 (0 for NaN), i.e. the derivative of
// the clamp, 1 on the boundary (as torch.clamp's autograd).
struct ArithmeticParams {
    ArithmeticOperand primary;    // x
    ArithmeticOperand secondary;  // y
    ImageLayout destination;      // R; channels = channels computed
    ImageLayout clampState;       // the gradient state's resource (ignored when stateMode = 0)
    int32_t batch;
    int32_t op;                   // ArithmeticOpCode
    float primaryScale;           // MPS primaryScale [1]
    float secondaryScale;         // MPS secondaryScale [1]
    float bias;                   // MPS bias [0]
    float minimumValue;           // MPS minimumValue [-FLT_MAX]
    float maximumValue;           // MPS maximumValue [FLT_MAX]
    int32_t clipX;                // first destination pixel written
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t stateMode;            // ArithmeticClampStateCode
};

// MPSNNCompare: the arithmetic formula with OP = the comparison, producing 1.0f or 0.0f:
//   xs = primaryScale * x(n,p,c), ys = secondaryScale * y(n,p,c)
//   R[n][clipY+y][clipX+x][destination.channelOffset + c] =
//       clamp((compare(xs, ys) ? 1 : 0) + bias, minimumValue, maximumValue)
// compare per CompareTypeCode; `threshold` is used only by Equal / NotEqual. MPSNNCompare inherits
// MPSCNNArithmetic's scale, bias and clamp properties; applying them exactly as the arithmetic
// ops do is mpsgrad's reading [I] (with their defaults the result is the plain 0/1 comparison).
struct CompareParams {
    ArithmeticOperand primary;    // x
    ArithmeticOperand secondary;  // y
    ImageLayout destination;
    int32_t batch;
    int32_t comparison;           // CompareTypeCode
    float threshold;              // MPSNNCompare threshold [0]
    float primaryScale;
    float secondaryScale;
    float bias;
    float minimumValue;
    float maximumValue;
    int32_t clipX;
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
};

// Gradient of the forward op above for ONE of its inputs (MPS needs one gradient filter per
// input): the exact chain rule, summed over every axis along which that input was broadcast so
// that dX has that input's shape.
//
// The sum runs over the forward index space n < batch, p in [0,width) x [0,height),
// c < gradient.channels (the forward destination's channel count C). With s = primary when
// forSecondary = 0, secondary otherwise, and x(n,p,c), y(n,p,c) read as in the forward op:
//   G'(n,p,c) = G[n][gradientY+p.y][gradientX+p.x][gradient.channelOffset + c] * m(n,p,c)
//   m = 1 (clampMode 0), S[n][p.y][p.x][clampState.channelOffset + c] (clampMode 1, the forward
//       op's mask), or (minimumValue <= S <= maximumValue ? 1 : 0) (clampMode 2, S = u).
//   D = dr/ds, from the forward scales pS = primaryScale, sS = secondaryScale:
//       add:       primary pS                      secondary sS
//       subtract:  primary pS                      secondary -sS
//       multiply:  primary pS*sS*y                 secondary pS*sS*x
//       divide:    primary pS/(sS*y)               secondary -pS*x/(sS*y*y)   (mpsgrad extension)
//   dX[s.strideImages*n][destinationY + s.strideY*p.y][destinationX + s.strideX*p.x]
//     [destination.channelOffset + s.strideChannels*c]  =  sum of G'(n,p,c) * D(n,p,c)
// over all (n,p,c) that map to that element (one term per axis with stride 1, the whole axis
// for stride 0). So dX's written region is (s.strideX ? width : 1) x (s.strideY ? height : 1)
// pixels from (destinationX, destinationY), (s.strideChannels ? C : 1) channels from
// destination.channelOffset, and (s.strideImages ? batch : 1) images; nothing else is touched.
// Terms whose dX pixel falls outside the destination image are dropped, and G pixels outside G's
// image read 0. The summation order is fixed by the shapes alone, so results are bitwise
// reproducible (independent of the thread count).
//
// The operand values are read only where D needs them: y for multiply-primary and divide, x for
// multiply-secondary and divide-secondary; the other operand's binding may be null (and its
// layout is then ignored). Bias does not enter the gradient.
//
// Clamps: MPS documents that its arithmetic gradient does not differentiate minimumValue /
// maximumValue (the user masks G). mpsgrad's decision: the gradient state stores the clamp mask
// (or u), and clampMode 1/2 applies it, so clamps ARE differentiated (torch.clamp semantics).
//
// Mapping from MPS's gradient-kernel properties (pS_g, sS_g = the gradient filter's
// primaryScale, secondaryScale; MPS computes (pS_g * G) op' (sS_g * other)):
//   MPSCNNAddGradient       primary: op add, primaryScale = pS_g; secondary: op add, secondaryScale = pS_g
//   MPSCNNSubtractGradient  primary: op subtract, primaryScale = pS_g;
//                           secondary: op subtract, secondaryScale = -pS_g (MPS asks for pS_g = -1)
//   MPSCNNMultiplyGradient  op multiply, primaryScale = pS_g, secondaryScale = sS_g
// Graph auto-construction passes the forward scales unchanged, which gives the exact derivative.
struct ArithmeticGradientParams {
    ImageLayout gradient;         // G = dL/dR (primary of the gradient kernel); channels = C
    ArithmeticOperand primary;    // forward x with its forward offsets/strides (relative to p)
    ArithmeticOperand secondary;  // forward y with its forward offsets/strides
    ImageLayout clampState;       // forward state resource, width x height pixels (clampMode != 0)
    ImageLayout destination;      // dX; channels = C or 1 (per the strides of the input)
    int32_t batch;
    int32_t width;                // forward clip size: the p range
    int32_t height;
    int32_t gradientX;            // G pixel of p = (0, 0) (MPS primaryOffset; normally the forward
    int32_t gradientY;            //   clipRect.origin)
    int32_t destinationX;         // dX pixel receiving p = (0, 0) (normally the input's forward
    int32_t destinationY;         //   offset, so dX aligns with the input; MPS clipRect.origin)
    int32_t op;                   // ArithmeticOpCode of the forward op
    int32_t forSecondary;         // 0: dX is for the primary input; 1: for the secondary input
    float primaryScale;           // forward pS (see the mapping above)
    float secondaryScale;         // forward sS
    float minimumValue;           // used by clampMode 2
    float maximumValue;
    int32_t clampMode;            // ArithmeticClampStateCode
};

}  // namespace mpsgrad
