// Plain structs shared by the C++ host code and the .metal kernels.
//
// Every params struct that crosses the host/GPU boundary holds only 32-bit ints
// and floats so that its layout is identical in C++ and in the Metal Shading
// Language (no vectors, no pointers, no size_t).
#pragma once

#ifdef __METAL_VERSION__
#include <metal_stdlib>
#else
#include <cstdint>
#endif

namespace mpsgrad {

// Where one batch of images sits in a float buffer.
//
// Element (n, y, x, c) of the batch is at
//     n * imageStride + (y * width + x) * pixelStride + channelOffset + c
// counted in floats from the buffer binding's start. Images store their
// channels padded to a multiple of 4 (`pixelStride`), like MPS's RGBA slices.
struct ImageLayout {
    int32_t width;
    int32_t height;
    int32_t pixelStride;    // floats from one pixel to the next (channels rounded up to 4)
    int32_t imageStride;    // floats from one image of the batch to the next
    int32_t channelOffset;  // first feature channel read or written
    int32_t channels;       // feature channels read or written, starting at channelOffset
};

// MPSCNNNeuronType values (exact MPS numbering).
enum NeuronTypeCode : int32_t {
    kNeuronNone = 0,
    kNeuronReLU = 1,
    kNeuronLinear = 2,
    kNeuronSigmoid = 3,
    kNeuronHardSigmoid = 4,
    kNeuronTanH = 5,
    kNeuronAbsolute = 6,
    kNeuronSoftPlus = 7,
    kNeuronSoftSign = 8,
    kNeuronELU = 9,
    kNeuronPReLU = 10,
    kNeuronReLUN = 11,
    kNeuronPower = 12,
    kNeuronExponential = 13,
    kNeuronLogarithm = 14,
    kNeuronGeLU = 15,
    kNeuronCount = 16,
};

// A resolved neuron: its type and scalar parameters. PReLU's per-channel `a`
// values travel in a separate buffer (hasChannelData = 1).
struct NeuronParams {
    int32_t type;
    float a;
    float b;
    float c;
    int32_t hasChannelData;
};

// MPSImageEdgeMode values used by the kernels.
enum EdgeModeCode : int32_t {
    kEdgeZero = 0,
    kEdgeClamp = 1,
};

}  // namespace mpsgrad
