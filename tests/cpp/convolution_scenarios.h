// Convolution scenarios shared by test_cpu_convolution.cpp (CPU backend against the naive
// reference) and test_metal_backend.cpp (Metal backend against the CPU backend): the scenario
// type, the scenarios both suites run, their random inputs, and the ConvolutionParams /
// ConvolutionDataGradientParams / ConvolutionWeightGradientParams a scenario describes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "metal/convolution_params.h"

namespace mpsgrad::testconv {

inline int roundUp4(int v) { return (v + 3) / 4 * 4; }

// A layout of `channels` channels at `offset` inside images of `total` channels; images of the
// batch are separated by a few extra floats so that imageStride is not width*height*pixelStride.
inline ImageLayout makeLayout(int width, int height, int total, int offset, int channels) {
    ImageLayout l{};
    l.width = width;
    l.height = height;
    l.pixelStride = roundUp4(total);
    l.imageStride = width * height * l.pixelStride + 8;
    l.channelOffset = offset;
    l.channels = channels;
    return l;
}

inline size_t bufferSize(const ImageLayout& l, int batch) { return size_t(batch) * size_t(l.imageStride); }

inline std::vector<float> randomVector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// One convolution scenario; the data and weight gradients use geometry consistent with it.
struct ConvCase {
    std::string name;
    int batch = 1, inC = 4, outC = 8, groups = 1;
    int kW = 3, kH = 3, sX = 1, sY = 1, dX = 1, dY = 1;
    int srcW = 7, srcH = 6;
    int winLeft = -1, winTop = -1;             // forward window left/top
    int clipX = 0, clipY = 0, clipW = -1, clipH = -1;  // -1: ceil(src / stride)
    int dstW = -1, dstH = -1;                  // -1: clip origin + clip size
    int srcChanOffset = 0, srcTotalC = -1;     // -1: inC
    int dstChanOffset = 0, dstTotalC = -1;     // -1: outC
    int edge = kEdgeZero;
    bool bias = true;
    int neuron = kNeuronNone;
    float na = 1.0f, nb = 0.0f;
    bool pre = false;
    // Data gradient: clip rect in the source image (-1: whole) and a shift of its window from
    // the forward's adjoint.
    int dgClipX = 0, dgClipY = 0, dgClipW = -1, dgClipH = -1, dgShiftX = 0, dgShiftY = 0;
    size_t misalign = 0;  // Metal: floats every binding is offset by inside its buffer

    void resolve() {
        if (clipW < 0) clipW = (srcW + sX - 1) / sX;
        if (clipH < 0) clipH = (srcH + sY - 1) / sY;
        if (dstW < 0) dstW = clipX + clipW;
        if (dstH < 0) dstH = clipY + clipH;
        if (srcTotalC < 0) srcTotalC = srcChanOffset + inC;
        if (dstTotalC < 0) dstTotalC = dstChanOffset + outC;
        if (dgClipW < 0) dgClipW = srcW - dgClipX;
        if (dgClipH < 0) dgClipH = srcH - dgClipY;
    }
    ImageLayout source() const { return makeLayout(srcW, srcH, srcTotalC, srcChanOffset, inC); }
    ImageLayout destination() const { return makeLayout(dstW, dstH, dstTotalC, dstChanOffset, outC); }
    // E is sized like the forward clip rect, laid out like the destination image.
    ImageLayout gradient() const { return makeLayout(clipW, clipH, dstTotalC, dstChanOffset, outC); }
    size_t weightCount() const { return size_t(outC) * kH * kW * (inC / groups); }
};

inline std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name; }

inline ConvCase makeConvCase(const std::string& name, const std::function<void(ConvCase&)>& edit) {
    ConvCase c;
    c.name = name;
    edit(c);
    c.resolve();
    return c;
}

// The scenarios both suites run (each suite adds its own). Small sizes: in the Metal emulation
// every GPU thread is a CPU fiber.
inline std::vector<ConvCase> sharedConvCases() {
    std::vector<ConvCase> v;
    v.push_back(makeConvCase("Basic3x3", [](ConvCase&) {}));
    v.push_back(makeConvCase("Stride2", [](ConvCase& c) { c.sX = c.sY = 2; c.srcW = 9; c.srcH = 8; }));
    v.push_back(makeConvCase("Stride2Clamp", [](ConvCase& c) { c.sX = c.sY = 2; c.edge = kEdgeClamp; c.srcW = 8; }));
    v.push_back(makeConvCase("Dilation2", [](ConvCase& c) { c.dX = c.dY = 2; c.winLeft = c.winTop = -2; c.srcW = 9; }));
    v.push_back(makeConvCase("Dilation2Stride2Clamp", [](ConvCase& c) {
        c.dX = c.dY = 2; c.sX = c.sY = 2; c.winLeft = -2; c.winTop = -1; c.edge = kEdgeClamp;
        c.srcW = 11; c.srcH = 9;
    }));
    v.push_back(makeConvCase("Kernel1x1", [](ConvCase& c) { c.kW = c.kH = 1; c.winLeft = c.winTop = 0; }));
    v.push_back(makeConvCase("Kernel2x2Stride3", [](ConvCase& c) {  // phases with no taps in the data gradient
        c.kW = c.kH = 2; c.winLeft = c.winTop = 0; c.sX = c.sY = 3; c.srcW = 10; c.srcH = 9;
    }));
    v.push_back(makeConvCase("Groups2", [](ConvCase& c) { c.inC = 8; c.outC = 8; c.groups = 2; }));
    v.push_back(makeConvCase("Groups2OddChannels", [](ConvCase& c) { c.inC = 6; c.outC = 10; c.groups = 2; }));
    v.push_back(makeConvCase("Groups4Clamp", [](ConvCase& c) {
        c.inC = 16; c.outC = 8; c.groups = 4; c.edge = kEdgeClamp;
    }));
    v.push_back(makeConvCase("Depthwise", [](ConvCase& c) { c.inC = c.outC = c.groups = 8; }));
    v.push_back(makeConvCase("DepthwiseOddStride2Clamp", [](ConvCase& c) {
        c.inC = c.outC = c.groups = 6; c.sX = c.sY = 2; c.edge = kEdgeClamp; c.srcW = 9;
    }));
    v.push_back(makeConvCase("DepthwiseDilated5x5", [](ConvCase& c) {
        c.inC = c.outC = c.groups = 5; c.kW = c.kH = 5; c.dX = c.dY = 2; c.winLeft = c.winTop = -4;
        c.srcW = 10; c.srcH = 9;
    }));
    v.push_back(makeConvCase("PositiveWindowClampOffImage", [](ConvCase& c) {  // windows fully off the image
        c.winLeft = 3; c.winTop = 2; c.edge = kEdgeClamp;
    }));
    v.push_back(makeConvCase("ChannelOffsets", [](ConvCase& c) {
        c.srcChanOffset = 4; c.srcTotalC = 14; c.dstChanOffset = 4; c.dstTotalC = 15;
    }));
    v.push_back(makeConvCase("ChannelOffsetsGroups2", [](ConvCase& c) {
        c.inC = 8; c.outC = 8; c.groups = 2; c.srcChanOffset = 8; c.srcTotalC = 20;
        c.dstChanOffset = 4; c.dstTotalC = 13;
    }));
    v.push_back(makeConvCase("ChannelOffsetsDepthwise", [](ConvCase& c) {
        c.inC = c.outC = c.groups = 4; c.srcChanOffset = 4; c.srcTotalC = 10; c.dstChanOffset = 8;
        c.dstTotalC = 14;
    }));
    v.push_back(makeConvCase("Batch3Stride2Groups2", [](ConvCase& c) {
        c.batch = 3; c.inC = 8; c.outC = 8; c.groups = 2; c.sX = c.sY = 2; c.srcW = 8;
    }));
    v.push_back(makeConvCase("OddChannels3to5", [](ConvCase& c) { c.inC = 3; c.outC = 5; }));
    v.push_back(makeConvCase("NoBias", [](ConvCase& c) { c.bias = false; }));
    v.push_back(makeConvCase("LeakyReLUPreactivation", [](ConvCase& c) {
        c.neuron = kNeuronReLU; c.na = 0.1f; c.pre = true;
    }));
    v.push_back(makeConvCase("TanH", [](ConvCase& c) { c.neuron = kNeuronTanH; c.na = 1.5f; c.nb = 0.7f; }));
    v.push_back(makeConvCase("LinearDepthwisePreactivation", [](ConvCase& c) {
        c.neuron = kNeuronLinear; c.na = 2.0f; c.nb = -0.5f; c.pre = true;
        c.inC = c.outC = c.groups = 7;
    }));
    v.push_back(makeConvCase("PReLUGroups2Preactivation", [](ConvCase& c) {
        c.neuron = kNeuronPReLU; c.inC = 8; c.outC = 12; c.groups = 2; c.pre = true;
    }));
    return v;
}

struct ConvData {
    std::vector<float> x, w, b, neuronData, e;
};

inline ConvData makeConvData(const ConvCase& c, uint32_t seed) {
    ConvData d;
    d.x = randomVector(bufferSize(c.source(), c.batch), seed + 1);
    d.w = randomVector(c.weightCount(), seed + 2);
    d.b = randomVector(size_t(c.outC), seed + 3);
    d.neuronData = randomVector(size_t(c.outC), seed + 4, 0.05f, 0.5f);
    d.e = randomVector(bufferSize(c.gradient(), c.batch), seed + 5);
    return d;
}

// The fields the forward, data gradient and weight gradient params share.
template <class Params>
void setKernelGeometry(Params& p, const ConvCase& c) {
    p.batch = c.batch;
    p.groups = c.groups;
    p.kernelWidth = c.kW;
    p.kernelHeight = c.kH;
    p.strideX = c.sX;
    p.strideY = c.sY;
    p.dilationX = c.dX;
    p.dilationY = c.dY;
}

inline ConvolutionParams forwardParams(const ConvCase& c) {
    ConvolutionParams p{};
    p.source = c.source();
    p.destination = c.destination();
    // Preactivation: its own layout, channel offset 4 inside wider pixels.
    p.preactivation = makeLayout(c.clipW, c.clipH, c.outC + 6, 4, c.outC);
    setKernelGeometry(p, c);
    p.windowLeftX = c.winLeft;
    p.windowTopY = c.winTop;
    p.clipX = c.clipX;
    p.clipY = c.clipY;
    p.clipWidth = c.clipW;
    p.clipHeight = c.clipH;
    p.edgeMode = c.edge;
    p.hasBias = c.bias;
    p.writePreactivation = c.pre;
    p.neuron.type = c.neuron;
    p.neuron.a = c.na;
    p.neuron.b = c.nb;
    p.neuron.c = 1.0f;
    p.neuron.hasChannelData = c.neuron == kNeuronPReLU;
    return p;
}

inline ConvolutionDataGradientParams dataGradientParams(const ConvCase& c) {
    ConvolutionDataGradientParams p{};
    p.gradient = c.gradient();
    p.destination = c.source();
    setKernelGeometry(p, c);
    // The window consistent with the forward pass (the adjoint), plus the case's shift:
    // forward source x = winLeft + sX*i + dX*kx, here z = wL + x + dX*(kW-1-kx) with z = sX*i.
    p.windowLeftX = c.dgClipX - c.winLeft - c.dX * (c.kW - 1) + c.dgShiftX;
    p.windowTopY = c.dgClipY - c.winTop - c.dY * (c.kH - 1) + c.dgShiftY;
    p.clipX = c.dgClipX;
    p.clipY = c.dgClipY;
    p.clipWidth = c.dgClipW;
    p.clipHeight = c.dgClipH;
    return p;
}

inline ConvolutionWeightGradientParams weightGradientParams(const ConvCase& c) {
    ConvolutionWeightGradientParams p{};
    p.gradient = c.gradient();
    p.source = c.source();
    setKernelGeometry(p, c);
    p.windowLeftX = c.winLeft;
    p.windowTopY = c.winTop;
    p.edgeMode = c.edge;
    p.accumulate = 0;
    p.computeWeights = 1;
    p.computeBiases = 1;
    return p;
}

}  // namespace mpsgrad::testconv
