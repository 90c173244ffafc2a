// Naive double-precision references for the CPU element-wise ops (neuron, arithmetic, softmax)
// and the test images they run on. The references follow the formulas written in
// metal/*_params.h and the reference spec (§2.2, §2.4, §2.10) directly, one element at a time,
// sharing no code with the backend (not even neuron_math.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "metal/arithmetic_params.h"
#include "metal/neuron_params.h"
#include "metal/softmax_params.h"

namespace mpsgrad::testref {

// Value of every destination element an op must not touch.
constexpr float kSentinel = -777.25f;

// A batch of images in a float buffer with the ImageLayout addressing of common_params.h.
struct TestImage {
    ImageLayout layout{};
    int32_t batch = 0;
    std::vector<float> data;

    static TestImage make(int32_t batch, int32_t width, int32_t height, int32_t pixelStride,
                          int32_t channelOffset, int32_t channels, int32_t imagePadding = 0) {
        TestImage t;
        t.batch = batch;
        t.layout.width = width;
        t.layout.height = height;
        t.layout.pixelStride = pixelStride;
        t.layout.imageStride = width * height * pixelStride + imagePadding;
        t.layout.channelOffset = channelOffset;
        t.layout.channels = channels;
        t.data.assign(size_t(std::max(1, batch)) * size_t(t.layout.imageStride), kSentinel);
        return t;
    }
    // Index of channel c (relative to channelOffset) of pixel (x, y) of image n.
    size_t index(int64_t n, int64_t x, int64_t y, int64_t c) const {
        return size_t(n * layout.imageStride + (y * layout.width + x) * layout.pixelStride +
                      layout.channelOffset + c);
    }
    float& at(int64_t n, int64_t x, int64_t y, int64_t c) { return data[index(n, x, y, c)]; }
    float at(int64_t n, int64_t x, int64_t y, int64_t c) const { return data[index(n, x, y, c)]; }

    // Input images: the addressed channels get uniform values in [lo, hi), every other float
    // (padding lanes, other slices, image padding) is NaN, so reading one shows up in results.
    template <class Rng>
    void fillInput(Rng& rng, double lo, double hi) {
        std::fill(data.begin(), data.end(), std::numeric_limits<float>::quiet_NaN());
        std::uniform_real_distribution<double> u(lo, hi);
        forEach([&](size_t i) { data[i] = float(u(rng)); });
    }
    template <class F>
    void forEach(F&& f) const {
        for (int64_t n = 0; n < batch; ++n)
            for (int64_t y = 0; y < layout.height; ++y)
                for (int64_t x = 0; x < layout.width; ++x)
                    for (int64_t c = 0; c < layout.channels; ++c) f(index(n, x, y, c));
    }
    std::string where(size_t i) const {
        std::ostringstream s;
        int64_t n = int64_t(i) / layout.imageStride, r = int64_t(i) % layout.imageStride;
        int64_t pix = r / layout.pixelStride, ch = r % layout.pixelStride;
        s << "(n=" << n << ", x=" << pix % std::max(1, layout.width) << ", y=" << pix / std::max(1, layout.width)
          << ", lane=" << ch << ")";
        return s.str();
    }
};

// Expected destination contents: a value for every element the op writes.
struct Expected {
    std::vector<double> value;
    std::vector<double> magnitude;  // scale for the tolerance (sum of |terms| of a reduction)
    std::vector<char> written;
    explicit Expected(size_t size) : value(size, 0.0), magnitude(size, 0.0), written(size, 0) {}
    void set(size_t i, double v) {
        value[i] = v;
        magnitude[i] = std::fabs(v);
        written[i] = 1;
    }
};

// Written elements within atol + rtol * magnitude of the reference (NaN matches NaN, inf matches
// the same inf); every other element still holds kSentinel, bit for bit.
inline ::testing::AssertionResult matches(const TestImage& got, const Expected& want, double rtol, double atol) {
    int failures = 0;
    std::ostringstream msg;
    size_t writtenCount = 0;
    for (size_t i = 0; i < got.data.size(); ++i) {
        const float g = got.data[i];
        bool ok;
        if (!want.written[i]) {
            ok = std::memcmp(&g, &kSentinel, sizeof(float)) == 0;
        } else {
            ++writtenCount;
            const double w = want.value[i];
            if (std::isnan(w)) ok = std::isnan(g);
            else if (std::isinf(w)) ok = double(g) == w;
            else ok = std::fabs(double(g) - w) <= atol + rtol * want.magnitude[i];
        }
        if (!ok && failures++ < 8)
            msg << "\n  at " << got.where(i) << ": got " << g << ", expected "
                << (want.written[i] ? std::to_string(want.value[i]) : std::string("untouched sentinel"));
    }
    if (writtenCount == 0) return ::testing::AssertionFailure() << "reference writes nothing (test bug)";
    if (failures == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << failures << " mismatching elements" << msg.str();
}

// Reads channel c (relative to channelOffset) of pixel (x, y) of image n with an edge mode.
template <class T>
double read(const ImageLayout& l, const T* d, int64_t n, int64_t x, int64_t y, int64_t c, int32_t edge) {
    if (x < 0 || x >= l.width || y < 0 || y >= l.height) {
        if (edge != kEdgeClamp) return 0.0;
        x = std::min<int64_t>(std::max<int64_t>(x, 0), l.width - 1);
        y = std::min<int64_t>(std::max<int64_t>(y, 0), l.height - 1);
    }
    return double(d[n * l.imageStride + (y * l.width + x) * l.pixelStride + l.channelOffset + c]);
}

inline size_t at(const ImageLayout& l, int64_t n, int64_t x, int64_t y, int64_t c) {
    return size_t(n * l.imageStride + (y * l.width + x) * l.pixelStride + l.channelOffset + c);
}

// ---- neuron ----------------------------------------------------------------------------------

// f(x), spec §2.2 table, in double.
inline double neuronF(int32_t type, double a, double b, double c, double channelA, double x) {
    switch (type) {
        case kNeuronNone: return x;
        case kNeuronReLU: return x >= 0 ? x : a * x;
        case kNeuronLinear: return a * x + b;
        case kNeuronSigmoid: return 1.0 / (1.0 + std::exp(-x));
        case kNeuronHardSigmoid: return std::min(std::max(a * x + b, 0.0), 1.0);
        case kNeuronTanH: return a * std::tanh(b * x);
        case kNeuronAbsolute: return std::fabs(x);
        case kNeuronSoftPlus: {
            double z = b * x;
            return a * (z > 30 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)));
        }
        case kNeuronSoftSign: return x / (1.0 + std::fabs(x));
        case kNeuronELU: return x >= 0 ? x : a * std::expm1(x);
        case kNeuronPReLU: return x >= 0 ? x : channelA * x;
        case kNeuronReLUN: return std::min(x >= 0 ? x : a * x, b);
        case kNeuronPower: return std::pow(a * x + b, c);
        case kNeuronExponential: return c == -1.0 ? std::exp(a * x + b) : std::pow(c, a * x + b);
        case kNeuronLogarithm: return c == -1.0 ? std::log(a * x + b) : std::log(a * x + b) / std::log(c);
        case kNeuronGeLU: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    }
    return std::numeric_limits<double>::quiet_NaN();
}

// df/dx, spec §2.2 (with its corrected HardSigmoid, ReLUN and GeLU rows), in double.
inline double neuronDf(int32_t type, double a, double b, double c, double channelA, double x) {
    const double pi = 3.14159265358979323846;
    switch (type) {
        case kNeuronNone: return 1.0;
        case kNeuronReLU: return x >= 0 ? 1.0 : a;
        case kNeuronLinear: return a;
        case kNeuronSigmoid: return std::exp(x) / ((std::exp(x) + 1) * (std::exp(x) + 1));
        case kNeuronHardSigmoid: return (a * x + b > 0 && a * x + b < 1) ? a : 0.0;
        case kNeuronTanH: return a * b * (1 - std::tanh(b * x) * std::tanh(b * x));
        case kNeuronAbsolute: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
        case kNeuronSoftPlus: return a * b / (1.0 + std::exp(-b * x));
        case kNeuronSoftSign: return 1.0 / ((1 + std::fabs(x)) * (1 + std::fabs(x)));
        case kNeuronELU: return x < 0 ? a * std::exp(x) : 1.0;
        case kNeuronPReLU: return x >= 0 ? 1.0 : channelA;
        case kNeuronReLUN: {
            double pre = x >= 0 ? x : a * x;
            return pre >= b ? 0.0 : (x >= 0 ? 1.0 : a);
        }
        case kNeuronPower: return c == 0 ? 0.0 : a * c * std::pow(a * x + b, c - 1);
        case kNeuronExponential:
            return c == -1.0 ? a * std::exp(a * x + b) : a * std::log(c) * std::pow(c, a * x + b);
        case kNeuronLogarithm: return c == -1.0 ? a / (a * x + b) : a / (std::log(c) * (a * x + b));
        case kNeuronGeLU:
            return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-x * x / 2) / std::sqrt(2 * pi);
    }
    return std::numeric_limits<double>::quiet_NaN();
}

inline double channelA(const NeuronParams& np, const float* data, int32_t offset, int64_t c) {
    return np.hasChannelData ? double(data[offset + c]) : 0.0;
}

inline Expected neuronForward(const NeuronForwardParams& p, const float* x, const float* data, size_t size) {
    Expected e(size);
    const NeuronParams& np = p.neuron;
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t y = 0; y < p.clipHeight; ++y)
            for (int64_t xx = 0; xx < p.clipWidth; ++xx)
                for (int64_t c = 0; c < p.destination.channels; ++c) {
                    double v = read(p.source, x, n, p.sourceX + xx, p.sourceY + y, c, p.edgeMode);
                    e.set(at(p.destination, n, p.clipX + xx, p.clipY + y, c),
                          neuronF(np.type, np.a, np.b, np.c, channelA(np, data, p.neuronDataOffset, c), v));
                }
    return e;
}

inline Expected neuronGradient(const NeuronGradientParams& p, const float* g, const float* x, const float* data,
                               size_t size) {
    Expected e(size);
    const NeuronParams& np = p.neuron;
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t y = 0; y < p.clipHeight; ++y)
            for (int64_t xx = 0; xx < p.clipWidth; ++xx)
                for (int64_t c = 0; c < p.destination.channels; ++c) {
                    double gv = read(p.gradient, g, n, p.gradientX + xx, p.gradientY + y, c, p.gradientEdgeMode);
                    double xv = read(p.source, x, n, p.sourceX + xx, p.sourceY + y, c, p.sourceEdgeMode);
                    e.set(at(p.destination, n, p.clipX + xx, p.clipY + y, c),
                          gv * neuronDf(np.type, np.a, np.b, np.c, channelA(np, data, p.neuronDataOffset, c), xv));
                }
    return e;
}

// ---- arithmetic ------------------------------------------------------------------------------

template <class T>
double operand(const ArithmeticOperand& o, const T* d, int64_t n, int64_t x, int64_t y, int64_t c) {
    return read(o.image, d, o.strideImages ? n : 0, o.offsetX + (o.strideX ? x : 0),
                o.offsetY + (o.strideY ? y : 0), o.strideChannels ? c : 0, o.edgeMode);
}

inline double arith(int32_t op, double x, double y) {
    switch (op) {
        case kArithmeticAdd: return x + y;
        case kArithmeticSubtract: return x - y;
        case kArithmeticMultiply: return x * y;
        default: return x / y;
    }
}

inline double clampD(double u, double lo, double hi) { return std::min(std::max(u, lo), hi); }

// u (before the clamp) of forward element (n, p, c).
template <class T>
double arithmeticU(const ArithmeticParams& p, const T* x, const T* y, int64_t n, int64_t px, int64_t py, int64_t c) {
    return arith(p.op, double(p.primaryScale) * operand(p.primary, x, n, px, py, c),
                 double(p.secondaryScale) * operand(p.secondary, y, n, px, py, c)) +
           double(p.bias);
}

inline Expected arithmeticForward(const ArithmeticParams& p, const float* x, const float* y, size_t size) {
    Expected e(size);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.clipHeight; ++py)
            for (int64_t px = 0; px < p.clipWidth; ++px)
                for (int64_t c = 0; c < p.destination.channels; ++c)
                    e.set(at(p.destination, n, p.clipX + px, p.clipY + py, c),
                          clampD(arithmeticU(p, x, y, n, px, py, c), p.minimumValue, p.maximumValue));
    return e;
}

// The clamp state the forward op writes (stateMode 1: mask, 2: u). Elements whose u lies within
// `guard` of a clamp bound are left unwritten in `ambiguous` (float and double may disagree).
inline Expected arithmeticState(const ArithmeticParams& p, const float* x, const float* y, size_t size,
                                std::vector<char>* ambiguous, double guard) {
    Expected e(size);
    if (ambiguous) ambiguous->assign(size, 0);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.clipHeight; ++py)
            for (int64_t px = 0; px < p.clipWidth; ++px)
                for (int64_t c = 0; c < p.destination.channels; ++c) {
                    double u = arithmeticU(p, x, y, n, px, py, c);
                    size_t i = at(p.clampState, n, px, py, c);
                    if (p.stateMode == kArithmeticClampMask) {
                        e.set(i, (p.minimumValue <= u && u <= p.maximumValue) ? 1.0 : 0.0);
                        if (ambiguous && (std::fabs(u - p.minimumValue) < guard || std::fabs(u - p.maximumValue) < guard))
                            (*ambiguous)[i] = 1;
                    } else {
                        e.set(i, u);
                    }
                }
    return e;
}

inline bool compareD(int32_t type, double x, double y, double t) {
    switch (type) {
        case kCompareEqual: return std::fabs(x - y) <= t;
        case kCompareNotEqual: return !(std::fabs(x - y) <= t);
        case kCompareLess: return x < y;
        case kCompareLessOrEqual: return x <= y;
        case kCompareGreater: return x > y;
        default: return x >= y;
    }
}

inline Expected compareForward(const CompareParams& p, const float* x, const float* y, size_t size) {
    Expected e(size);
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.clipHeight; ++py)
            for (int64_t px = 0; px < p.clipWidth; ++px)
                for (int64_t c = 0; c < p.destination.channels; ++c) {
                    double xs = double(p.primaryScale) * operand(p.primary, x, n, px, py, c);
                    double ys = double(p.secondaryScale) * operand(p.secondary, y, n, px, py, c);
                    double r = compareD(p.comparison, xs, ys, p.threshold) ? 1.0 : 0.0;
                    e.set(at(p.destination, n, p.clipX + px, p.clipY + py, c),
                          clampD(r + p.bias, p.minimumValue, p.maximumValue));
                }
    return e;
}

// dr/ds of one element (the table in arithmetic_params.h).
inline double arithmeticDerivative(int32_t op, bool forSecondary, double pS, double sS, double x, double y) {
    switch (op) {
        case kArithmeticAdd: return forSecondary ? sS : pS;
        case kArithmeticSubtract: return forSecondary ? -sS : pS;
        case kArithmeticMultiply: return forSecondary ? pS * sS * x : pS * sS * y;
        default: return forSecondary ? -pS * x / (sS * y * y) : pS / (sS * y);
    }
}

// Scatter of every term into dX (summed in double), with the sum of |terms| as tolerance scale.
inline Expected arithmeticGradient(const ArithmeticGradientParams& p, const float* g, const float* x,
                                   const float* y, const float* state, size_t size) {
    Expected e(size);
    const bool fs = p.forSecondary != 0;
    const ArithmeticOperand& s = fs ? p.secondary : p.primary;
    const int32_t C = p.gradient.channels;
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.height; ++py)
            for (int64_t px = 0; px < p.width; ++px)
                for (int64_t c = 0; c < C; ++c) {
                    double gv = read(p.gradient, g, n, p.gradientX + px, p.gradientY + py, c, kEdgeZero);
                    if (p.clampMode == kArithmeticClampMask) {
                        gv *= double(state[at(p.clampState, n, px, py, c)]);
                    } else if (p.clampMode == kArithmeticClampUnclamped) {
                        double u = state[at(p.clampState, n, px, py, c)];
                        gv *= (p.minimumValue <= u && u <= p.maximumValue) ? 1.0 : 0.0;
                    }
                    double xv = x ? operand(p.primary, x, n, px, py, c) : 0.0;
                    double yv = y ? operand(p.secondary, y, n, px, py, c) : 0.0;
                    double term = gv * arithmeticDerivative(p.op, fs, p.primaryScale, p.secondaryScale, xv, yv);
                    int64_t dn = s.strideImages ? n : 0;
                    int64_t dx = p.destinationX + (s.strideX ? px : 0);
                    int64_t dy = p.destinationY + (s.strideY ? py : 0);
                    int64_t dc = s.strideChannels ? c : 0;
                    if (dx < 0 || dx >= p.destination.width || dy < 0 || dy >= p.destination.height) continue;
                    size_t i = at(p.destination, dn, dx, dy, dc);
                    e.value[i] += term;
                    e.magnitude[i] += std::fabs(term);
                    e.written[i] = 1;
                }
    return e;
}

// ---- softmax ---------------------------------------------------------------------------------

inline Expected softmaxForward(const SoftmaxParams& p, const float* x, size_t size) {
    Expected e(size);
    const int64_t N = p.destination.channels;
    std::vector<double> v(static_cast<size_t>(N));
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.clipHeight; ++py)
            for (int64_t px = 0; px < p.clipWidth; ++px) {
                double m = -std::numeric_limits<double>::infinity();
                for (int64_t k = 0; k < N; ++k) {
                    v[size_t(k)] = read(p.source, x, n, p.sourceX + px, p.sourceY + py, k, p.edgeMode);
                    m = std::max(m, v[size_t(k)]);
                }
                double sum = 0;
                for (int64_t k = 0; k < N; ++k) sum += std::exp(v[size_t(k)] - m);
                for (int64_t k = 0; k < N; ++k) {
                    double r = p.logSoftmax ? v[size_t(k)] - m - std::log(sum) : std::exp(v[size_t(k)] - m) / sum;
                    e.set(at(p.destination, n, p.clipX + px, p.clipY + py, k), r);
                }
            }
    return e;
}

inline Expected softmaxGradient(const SoftmaxGradientParams& p, const float* g, const float* y, size_t size) {
    Expected e(size);
    const int64_t N = p.destination.channels;
    std::vector<double> gv(static_cast<size_t>(N)), yv(static_cast<size_t>(N));
    for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t py = 0; py < p.clipHeight; ++py)
            for (int64_t px = 0; px < p.clipWidth; ++px) {
                double dot = 0, sumG = 0, mag = 0;
                for (int64_t k = 0; k < N; ++k) {
                    gv[size_t(k)] = read(p.gradient, g, n, p.gradientX + px, p.gradientY + py, k, p.gradientEdgeMode);
                    yv[size_t(k)] = read(p.output, y, n, p.outputX + px, p.outputY + py, k, p.outputEdgeMode);
                    dot += gv[size_t(k)] * yv[size_t(k)];
                    sumG += gv[size_t(k)];
                    mag += std::fabs(gv[size_t(k)]) * (p.logSoftmax ? 1.0 : std::fabs(yv[size_t(k)]));
                }
                for (int64_t k = 0; k < N; ++k) {
                    size_t i = at(p.destination, n, p.clipX + px, p.clipY + py, k);
                    double r = p.logSoftmax ? gv[size_t(k)] - std::exp(yv[size_t(k)]) * sumG
                                            : yv[size_t(k)] * (gv[size_t(k)] - dot);
                    e.set(i, r);
                    // Tolerance scale: the reduction's magnitude times this element's factor.
                    e.magnitude[i] = std::fabs(gv[size_t(k)]) +
                                     mag * (p.logSoftmax ? std::exp(yv[size_t(k)]) : std::fabs(yv[size_t(k)]));
                }
            }
    return e;
}

}  // namespace mpsgrad::testref
