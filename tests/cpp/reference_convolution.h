// Naive double-precision reference of the convolution family's backend ops, written straight
// from the formulas in metal/convolution_params.h (one loop nest per formula, no cleverness).
//
// Each function returns, for every float of the destination buffer, the expected value, the
// sum of the absolute values of the terms that produced it (the scale of its rounding error)
// and whether the op writes it at all. Elements that are not written must stay unchanged.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "metal/convolution_params.h"

namespace mpsgrad::testref {

struct Expected {
    std::vector<double> value;      // expected value of written elements
    std::vector<double> magnitude;  // sum |term| of written elements (before any neuron)
    std::vector<uint8_t> written;   // 1 where the op writes

    explicit Expected(size_t size) : value(size, 0.0), magnitude(size, 0.0), written(size, 0) {}
};

inline int64_t index(const ImageLayout& l, int n, int y, int x, int c) {
    return int64_t(n) * l.imageStride + (int64_t(y) * l.width + x) * l.pixelStride +
           l.channelOffset + c;
}

// X[n][y][x][c] under an edge mode (zero: off-image reads give 0; clamp: nearest edge pixel).
inline double readEdge(const std::vector<float>& buf, const ImageLayout& l, int n, int y, int x,
                       int c, int edgeMode) {
    if (y < 0 || y >= l.height || x < 0 || x >= l.width) {
        if (edgeMode == kEdgeZero) return 0.0;
        y = y < 0 ? 0 : (y >= l.height ? l.height - 1 : y);
        x = x < 0 ? 0 : (x >= l.width ? l.width - 1 : x);
    }
    return buf[size_t(index(l, n, y, x, c))];
}

// The neuron types the tests use, in double, from the formulas of spec §2.2.
inline double neuron(int type, double a, double b, double channelA, double x) {
    switch (type) {
        case kNeuronNone: return x;
        case kNeuronReLU: return x >= 0 ? x : a * x;
        case kNeuronLinear: return a * x + b;
        case kNeuronSigmoid: return 1.0 / (1.0 + std::exp(-x));
        case kNeuronTanH: return a * std::tanh(b * x);
        case kNeuronPReLU: return x >= 0 ? x : channelA * x;
        default: return NAN;  // not used by the tests
    }
}

// Largest |f'(x)| of those neurons: scales the rounding error of the pre-neuron sum.
inline double neuronLipschitz(int type, double a, double b, double maxChannelA) {
    switch (type) {
        case kNeuronReLU: return std::fmax(1.0, std::fabs(a));
        case kNeuronLinear: return std::fabs(a);
        case kNeuronSigmoid: return 0.25;
        case kNeuronTanH: return std::fabs(a * b);
        case kNeuronPReLU: return std::fmax(1.0, maxChannelA);
        default: return 1.0;
    }
}

// Y[n][clipY+y][clipX+x][o] = f(b[o] + sum W[o][ky][kx][i] X[n][wT + sY*y + dY*ky][wL + sX*x + dX*kx][gs(o)+i])
// and, with writePreactivation, the value before f at (y, x) of the preactivation layout.
inline void forward(const ConvolutionParams& p, const std::vector<float>& x,
                    const std::vector<float>& w, const std::vector<float>& bias,
                    const std::vector<float>& neuronData, Expected& y, Expected* pre) {
    const int cinG = p.source.channels / p.groups, coutG = p.destination.channels / p.groups;
    for (int n = 0; n < p.batch; ++n)
        for (int oy = 0; oy < p.clipHeight; ++oy)
            for (int ox = 0; ox < p.clipWidth; ++ox)
                for (int o = 0; o < p.destination.channels; ++o) {
                    const int gs = (o / coutG) * cinG;
                    double sum = p.hasBias ? bias[size_t(o)] : 0.0;
                    double mag = std::fabs(sum);
                    for (int ky = 0; ky < p.kernelHeight; ++ky)
                        for (int kx = 0; kx < p.kernelWidth; ++kx)
                            for (int i = 0; i < cinG; ++i) {
                                const double wv =
                                    w[size_t(((o * p.kernelHeight + ky) * p.kernelWidth + kx) * cinG + i)];
                                const double xv = readEdge(
                                    x, p.source, n, p.windowTopY + p.strideY * oy + p.dilationY * ky,
                                    p.windowLeftX + p.strideX * ox + p.dilationX * kx, gs + i, p.edgeMode);
                                sum += wv * xv;
                                mag += std::fabs(wv * xv);
                            }
                    const double channelA = p.neuron.hasChannelData ? neuronData[size_t(o)] : 0.0;
                    const size_t d = size_t(index(p.destination, n, p.clipY + oy, p.clipX + ox, o));
                    y.value[d] = neuron(p.neuron.type, p.neuron.a, p.neuron.b, channelA, sum);
                    y.magnitude[d] = mag;
                    y.written[d] = 1;
                    if (pre && p.writePreactivation) {
                        const size_t q = size_t(index(p.preactivation, n, oy, ox, o));
                        pre->value[q] = sum;
                        pre->magnitude[q] = mag;
                        pre->written[q] = 1;
                    }
                }
}

// Z[sY*j][sX*i] = E[j][i], zero elsewhere.
inline double zeroInserted(const std::vector<float>& e, const ImageLayout& l, int sX, int sY,
                           int n, int zy, int zx, int c) {
    if (zy < 0 || zx < 0 || zy % sY != 0 || zx % sX != 0) return 0.0;
    const int j = zy / sY, i = zx / sX;
    if (j >= l.height || i >= l.width) return 0.0;
    return e[size_t(index(l, n, j, i, c))];
}

// dX[n][clipY+y][clipX+x][c] = sum_{ty,tx,o in group(c)}
//     Z[n][wT + y + dY*ty][wL + x + dX*tx][o] * W[o][kH-1-ty][kW-1-tx][c - groupStart(c)]
inline void dataGradient(const ConvolutionDataGradientParams& p, const std::vector<float>& e,
                         const std::vector<float>& w, Expected& dx) {
    const int cinG = p.destination.channels / p.groups, coutG = p.gradient.channels / p.groups;
    const int kH = p.kernelHeight, kW = p.kernelWidth;
    for (int n = 0; n < p.batch; ++n)
        for (int y = 0; y < p.clipHeight; ++y)
            for (int x = 0; x < p.clipWidth; ++x)
                for (int c = 0; c < p.destination.channels; ++c) {
                    const int g = c / cinG;
                    double sum = 0.0, mag = 0.0;
                    for (int ty = 0; ty < kH; ++ty)
                        for (int tx = 0; tx < kW; ++tx)
                            for (int o = g * coutG; o < (g + 1) * coutG; ++o) {
                                const double zv = zeroInserted(
                                    e, p.gradient, p.strideX, p.strideY, n,
                                    p.windowTopY + y + p.dilationY * ty, p.windowLeftX + x + p.dilationX * tx, o);
                                const double wv = w[size_t(
                                    ((o * kH + (kH - 1 - ty)) * kW + (kW - 1 - tx)) * cinG + (c - g * cinG))];
                                sum += zv * wv;
                                mag += std::fabs(zv * wv);
                            }
                    const size_t d = size_t(index(p.destination, n, p.clipY + y, p.clipX + x, c));
                    dx.value[d] = sum;
                    dx.magnitude[d] = mag;
                    dx.written[d] = 1;
                }
}

// dW[o][ky][kx][i] (+)= sum_{n,j,i'} E[n][j][i'][o] X[n][wT + sY*j + dY*ky][wL + sX*i' + dX*kx][gs(o)+i]
// dB[o] (+)= sum_{n,j,i'} E[n][j][i'][o]. `initialW/B` are the buffers' contents before the op.
inline void weightGradient(const ConvolutionWeightGradientParams& p, const std::vector<float>& e,
                           const std::vector<float>& x, const std::vector<float>& initialW,
                           const std::vector<float>& initialB, Expected& dw, Expected& db) {
    const int cinG = p.source.channels / p.groups, coutG = p.gradient.channels / p.groups;
    const int kH = p.kernelHeight, kW = p.kernelWidth;
    for (int o = 0; o < p.gradient.channels; ++o) {
        const int gs = (o / coutG) * cinG;
        if (p.computeWeights)
            for (int ky = 0; ky < kH; ++ky)
                for (int kx = 0; kx < kW; ++kx)
                    for (int i = 0; i < cinG; ++i) {
                        const size_t d = size_t(((o * kH + ky) * kW + kx) * cinG + i);
                        double sum = p.accumulate ? initialW[d] : 0.0;
                        double mag = std::fabs(sum);
                        for (int n = 0; n < p.batch; ++n)
                            for (int j = 0; j < p.gradient.height; ++j)
                                for (int ii = 0; ii < p.gradient.width; ++ii) {
                                    const double ev = e[size_t(index(p.gradient, n, j, ii, o))];
                                    const double xv = readEdge(
                                        x, p.source, n, p.windowTopY + p.strideY * j + p.dilationY * ky,
                                        p.windowLeftX + p.strideX * ii + p.dilationX * kx, gs + i, p.edgeMode);
                                    sum += ev * xv;
                                    mag += std::fabs(ev * xv);
                                }
                        dw.value[d] = sum;
                        dw.magnitude[d] = mag;
                        dw.written[d] = 1;
                    }
        if (p.computeBiases) {
            double sum = p.accumulate ? initialB[size_t(o)] : 0.0;
            double mag = std::fabs(sum);
            for (int n = 0; n < p.batch; ++n)
                for (int j = 0; j < p.gradient.height; ++j)
                    for (int ii = 0; ii < p.gradient.width; ++ii) {
                        const double ev = e[size_t(index(p.gradient, n, j, ii, o))];
                        sum += ev;
                        mag += std::fabs(ev);
                    }
            db.value[size_t(o)] = sum;
            db.magnitude[size_t(o)] = mag;
            db.written[size_t(o)] = 1;
        }
    }
}

}  // namespace mpsgrad::testref
