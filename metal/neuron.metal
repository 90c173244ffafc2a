// The neuron family's kernels (MPSCNNNeuron, MPSCNNNeuronGradient). Semantics are exactly those
// of metal/neuron_params.h, with f and f' from metal/neuron_math.h (shared with the CPU backend).
// The host side is cpp/mpsgrad/backend/metal/metal_neuron.cpp.
//
// One thread handles one channel quad of kPixelsPerThread consecutive pixels of a clip row:
// neighbouring threads take neighbouring quads, so a simdgroup reads contiguous memory.
//
// Function constants (set by the host per pipeline; the untaken branches compile away):
//   kNeuronType   NeuronTypeCode (the switch in neuron_math.h folds to one formula)
//   kAligned*     the binding is read or written as aligned float4 quads; the host sets it only
//                 when every access of the dispatch is 16-byte aligned and channels % 4 == 0
#include <metal_stdlib>

#include "image_indexing.h"
#include "neuron_math.h"
#include "neuron_params.h"
#include "vector_access.h"

using namespace metal;
using namespace mpsgrad;

constant int kNeuronType [[function_constant(0)]];
constant bool kAlignedSource [[function_constant(1)]];
constant bool kAlignedGradient [[function_constant(2)]];
constant bool kAlignedDestination [[function_constant(3)]];

namespace neuron {

enum : int { kPixelsPerThread = 4 };

// PReLU's per-channel a for channels c .. c + count (zeros for the other neuron types).
inline float4 channelSlopes(NeuronParams n, device const float* neuronData, int offset, int count) {
    return n.hasChannelData ? loadFloat4(neuronData, offset, count, false) : float4(0.0f);
}

// The clip row and first pixel a thread handles; `valid` is false past the dispatch.
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

}  // namespace neuron

using namespace neuron;

// Y = f(X). Grid (ceil(channels / 4), ceil(clipWidth / kPixelsPerThread), batch * clipHeight)
// threads. Bindings: 0 params, 1 source X, 2 neuron data (PReLU a), 3 destination Y.
kernel void neuron_forward(constant NeuronForwardParams& p [[buffer(0)]],
                           device const float* source [[buffer(1)]],
                           device const float* neuronData [[buffer(2)]],
                           device float* destination [[buffer(3)]],
                           uint3 gid [[thread_position_in_grid]]) {
    const RowSpan s = rowSpan(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!s.valid) return;
    const float4 slopes = channelSlopes(p.neuron, neuronData, p.neuronDataOffset + s.c, s.count);
    const int xEnd = min(s.x0 + kPixelsPerThread, p.clipWidth);
    for (int x = s.x0; x < xEnd; ++x) {
        // An off-image read under kEdgeZero sees zeros, so the destination gets f(0).
        int idx = edgePixelIndex(p.source, p.edgeMode, s.n, p.sourceY + s.y, p.sourceX + x);
        float4 v = idx < 0 ? float4(0.0f) : loadFloat4(source, idx + s.c, s.count, kAlignedSource);
        float4 r;
        for (int j = 0; j < 4; ++j)
            r[j] = neuronForward(kNeuronType, p.neuron.a, p.neuron.b, p.neuron.c, slopes[j], v[j]);
        int d = pixelIndex(p.destination, s.n, p.clipY + s.y, p.clipX + x) + s.c;
        storeFloat4(destination, d, r, s.count, kAlignedDestination);
    }
}

// dX = G * f'(X). Grid as neuron_forward. Bindings: 0 params, 1 gradient G, 2 source X (the
// forward input), 3 neuron data (PReLU a), 4 destination dX.
kernel void neuron_gradient(constant NeuronGradientParams& p [[buffer(0)]],
                            device const float* gradient [[buffer(1)]],
                            device const float* source [[buffer(2)]],
                            device const float* neuronData [[buffer(3)]],
                            device float* destination [[buffer(4)]],
                            uint3 gid [[thread_position_in_grid]]) {
    const RowSpan s = rowSpan(gid, p.destination.channels, p.batch, p.clipWidth, p.clipHeight);
    if (!s.valid) return;
    const float4 slopes = channelSlopes(p.neuron, neuronData, p.neuronDataOffset + s.c, s.count);
    const int xEnd = min(s.x0 + kPixelsPerThread, p.clipWidth);
    for (int x = s.x0; x < xEnd; ++x) {
        int gi = edgePixelIndex(p.gradient, p.gradientEdgeMode, s.n, p.gradientY + s.y, p.gradientX + x);
        int xi = edgePixelIndex(p.source, p.sourceEdgeMode, s.n, p.sourceY + s.y, p.sourceX + x);
        float4 gv = gi < 0 ? float4(0.0f) : loadFloat4(gradient, gi + s.c, s.count, kAlignedGradient);
        float4 xv = xi < 0 ? float4(0.0f) : loadFloat4(source, xi + s.c, s.count, kAlignedSource);
        float4 r;
        for (int j = 0; j < 4; ++j)
            r[j] = gv[j] * neuronDerivative(kNeuronType, p.neuron.a, p.neuron.b, p.neuron.c, slopes[j], xv[j]);
        int d = pixelIndex(p.destination, s.n, p.clipY + s.y, p.clipX + x) + s.c;
        storeFloat4(destination, d, r, s.count, kAlignedDestination);
    }
}
