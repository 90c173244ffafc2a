// Params of the neuron family's backend ops (MPSCNNNeuron, MPSCNNNeuronGradient), shared by
// C++ and Metal. The formulas f and f' are in neuron_math.h (spec §2.2).
//
// Geometry is fully resolved by the kernel classes (cpp/mpsgrad/kernels/neuron.cpp): the
// backend ops know nothing of MPS offsets, clip rectangles, feature-channel offsets or states.
//
// Conventions shared by every params struct of the element-wise families (neuron, arithmetic,
// softmax):
//  * p = (x, y) runs over 0 <= x < clipWidth, 0 <= y < clipHeight; destination pixel
//    (clipX + x, clipY + y) reads each input at its own offset + p. The kernel class clips the
//    rectangle to the destination bounds (clipRect ∩ destination); the backend writes exactly it.
//  * Channel c runs over 0 <= c < destination.channels. It reads channel channelOffset + c of
//    every input (each input's `channels` equals destination.channels) and writes channel
//    destination.channelOffset + c. No other channel of any pixel is touched, so padding lanes
//    and neighbouring channel slices keep their values.
//  * n runs over 0 <= n < batch: image n of every binding (ImageLayout::imageStride apart).
//    Legacy multi-image MPSImages (offset.z, clipRect.origin.z) are handled by the kernel class
//    through the buffer binding offset (first image * imageStride floats).
//  * An input pixel outside its image (x < 0, x >= width, y < 0 or y >= height) is read per the
//    input's edge mode: kEdgeZero reads 0 in every channel, kEdgeClamp reads the nearest pixel of
//    the image (coordinates clamped to [0, width-1] x [0, height-1]).
#pragma once

#include "common_params.h"

namespace mpsgrad {

// MPSCNNNeuron:
//   Y[n][clipY+y][clipX+x][dc + c] = f( X[n][sourceY+y][sourceX+x][sc + c], aOf(c) )
// with dc = destination.channelOffset, sc = source.channelOffset, f = neuronForward(neuron.type,
// neuron.a, neuron.b, neuron.c, aOf(c), .), and
//   aOf(c) = neuron.hasChannelData ? neuronData[neuronDataOffset + c] : 0   (PReLU's per-channel a).
struct NeuronForwardParams {
    ImageLayout source;       // X
    ImageLayout destination;  // Y; channels = channels processed (= source.channels)
    int32_t batch;            // images in this dispatch
    int32_t sourceX;          // source pixel read for the clip origin (MPS `offset.x`)
    int32_t sourceY;          // (MPS `offset.y`)
    int32_t clipX;            // first destination pixel written (clipRect.origin, already
    int32_t clipY;            //   intersected with the destination)
    int32_t clipWidth;        // destination pixels written per row / rows written
    int32_t clipHeight;
    int32_t edgeMode;         // EdgeModeCode for off-image reads of X (Zero gives f(0))
    int32_t neuronDataOffset; // index into neuronData of the first processed channel's PReLU a
    NeuronParams neuron;      // type, a, b, c; hasChannelData = 1 for PReLU
};

// MPSCNNNeuronGradient (primary = incoming gradient G = dL/dY, secondary = forward input X):
//   dX[n][clipY+y][clipX+x][dc + c] =
//       G[n][gradientY+y][gradientX+x][gc + c] * f'( X[n][sourceY+y][sourceX+x][sc + c], aOf(c) )
// with f' = neuronDerivative(...) and aOf(c) as in NeuronForwardParams. The secondary is the
// forward INPUT X (spec §2.2), so a kernel class passes X with the forward offset as sourceX/Y.
//
// Extension (cpu::cnnNeuronPReLUWeightGradient): PReLU's a-gradient over the same geometry,
//   dA[neuronDataOffset + c] = sum_{n,y,x} G[...][gc + c] * (X[...][sc + c] < 0 ? X[...][sc + c] : 0),
// summed in a fixed order (deterministic, independent of the thread count) and overwriting dA.
struct NeuronGradientParams {
    ImageLayout gradient;     // G (primary); channels = destination.channels
    ImageLayout source;       // X (secondary); channels = destination.channels
    ImageLayout destination;  // dX
    int32_t batch;
    int32_t gradientX;        // G pixel read for the clip origin (MPS primaryOffset)
    int32_t gradientY;
    int32_t sourceX;          // X pixel read for the clip origin (MPS secondaryOffset)
    int32_t sourceY;
    int32_t clipX;            // first dX pixel written (clipRect.origin)
    int32_t clipY;
    int32_t clipWidth;
    int32_t clipHeight;
    int32_t gradientEdgeMode; // EdgeModeCode for off-image reads of G
    int32_t sourceEdgeMode;   // EdgeModeCode for off-image reads of X
    int32_t neuronDataOffset; // index into neuronData of the first processed channel's PReLU a
    NeuronParams neuron;
};

}  // namespace mpsgrad
