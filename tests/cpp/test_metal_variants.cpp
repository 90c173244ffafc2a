// Every kernel variant the Metal backend can request, run once and compared with the CPU backend.
//
// A variant is a kernel plus its function-constant values (tests/metal_emulation/coverage/
// kernel_variants.py lists them: neuron type, arithmetic op, clamp mode, log-softmax, and one
// "aligned" flag per binding). The host picks the aligned flags from the bindings: a binding whose
// image starts one float past a 16-byte boundary is read with scalar loads, so offsetting each
// binding by 0 or 1 float reaches every combination. Each case checks the whole destination
// buffer (pre-filled with noise) against the CPU backend's result, so a variant that reads or
// writes the wrong floats fails here. The coverage stage of CI (docs/verification.md) counts the
// variants these tests dispatch.
#ifdef MPSGRAD_HAS_METAL

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_utility.h"
#include "convolution_scenarios.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "metal_variant_support.h"

namespace {

using namespace mpsgrad;
using testmetal::download;
using testmetal::runOnMetal;
using testmetal::upload;

// Same bits, or within 1e-4 relative (1e-5 absolute): the backends may sum in other orders.
void expectMatches(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what) {
    testmetal::expectMatches(metal, cpu, what, 1e-4, 1e-5);
}

using namespace mpsgrad::testconv;

// Bit i of `mask`: binding i is misaligned by one float (its aligned flag becomes false).
bool misaligned(unsigned mask, int i) { return (mask >> i) & 1u; }

std::vector<float> noise(size_t n, uint32_t seed) { return randomVector(n, seed, 10.0f, 20.0f); }

// Neuron parameters that keep every type's formula finite on inputs in [-1, 1].
NeuronParams neuronOf(int type) {
    NeuronParams n{type, 0.5f, 0.25f, 1.0f, type == kNeuronPReLU ? 1 : 0};
    if (type == kNeuronPower) n = NeuronParams{type, 0.5f, 2.0f, 2.0f, 0};
    if (type == kNeuronLogarithm) n = NeuronParams{type, 0.5f, 2.0f, -1.0f, 0};
    if (type == kNeuronExponential) n = NeuronParams{type, 0.5f, 0.1f, 2.0f, 0};
    if (type == kNeuronReLUN) n = NeuronParams{type, 0.1f, 0.5f, 1.0f, 0};
    return n;
}

// ---- convolution ------------------------------------------------------------------------------

ConvCase variantConvCase(bool depthwise) {
    return makeConvCase(depthwise ? "depthwise" : "general", [&](ConvCase& c) {
        c.inC = c.outC = 8;
        c.groups = depthwise ? 8 : 1;
        c.srcW = 5;
        c.srcH = 4;
    });
}

// Bindings: 0 source, 1 weights, 2 destination, 3 preactivation (weights unused when depthwise).
void convForwardVariant(bool depthwise, int neuronType, unsigned mask) {
    ConvCase c = variantConvCase(depthwise);
    c.pre = true;
    c.neuron = neuronType;
    ConvolutionParams p = forwardParams(c);
    p.neuron = neuronOf(neuronType);
    ConvData d = makeConvData(c, 40 + mask);
    for (float& w : d.w) w *= 0.1f;  // outputs stay in [-1, 1], inside every neuron's domain
    const std::vector<float> y0 = noise(bufferSize(p.destination, c.batch), 1), z0 = noise(bufferSize(p.preactivation, 1), 2);
    std::vector<float> y = y0, z = z0;
    cpu::convolutionForward(p, d.x.data(), d.w.data(), d.b.data(), d.neuronData.data(), y.data(), z.data());
    BufferSlice my, mz;
    runOnMetal([&](Backend& b, CommandBuffer& cb) {
        my = upload(b, y0, misaligned(mask, 2));
        mz = upload(b, z0, misaligned(mask, 3));
        b.convolutionForward(cb, p, upload(b, d.x, misaligned(mask, 0)), upload(b, d.w, misaligned(mask, 1)),
                             upload(b, d.b, false), upload(b, d.neuronData, false), my, mz);
    });
    const std::string what = std::string(depthwise ? "depthwise" : "general") + " forward, neuron " +
                             std::to_string(neuronType) + ", mask " + std::to_string(mask);
    expectMatches(download(my, y.size()), y, what + ": destination");
    expectMatches(download(mz, z.size()), z, what + ": preactivation");
}

TEST(MetalVariants, ConvolutionForwardEveryNeuronAndAlignment) {
    REQUIRE_METAL();
    for (int type = 0; type < kNeuronCount; ++type) {
        for (unsigned mask = 0; mask < 16; ++mask) convForwardVariant(false, type, mask);
        for (unsigned mask = 0; mask < 16; ++mask)
            if (!misaligned(mask, 1)) convForwardVariant(true, type, mask);  // depthwise: no weights flag
    }
}

// Bindings: 0 gradient E, 1 weights, 2 destination dX; with and without the bias epilogue (the
// transposed convolution's forward pass).
TEST(MetalVariants, ConvolutionDataGradientEveryAlignment) {
    REQUIRE_METAL();
    for (bool depthwise : {false, true})
        for (int hasBias : {0, 1}) {
            const ConvCase c = variantConvCase(depthwise);
            ConvolutionDataGradientParams p = dataGradientParams(c);
            p.hasBias = hasBias;
            const ConvData d = makeConvData(c, 60);
            const std::vector<float> bias = noise(size_t(p.destination.channels), 9);
            for (unsigned mask = 0; mask < 8; ++mask) {
                const std::vector<float> x0 = noise(bufferSize(p.destination, c.batch), 3);
                std::vector<float> x = x0;
                cpu::convolutionDataGradient(p, d.e.data(), d.w.data(), bias.data(), x.data());
                BufferSlice mx;
                runOnMetal([&](Backend& b, CommandBuffer& cb) {
                    mx = upload(b, x0, misaligned(mask, 2));
                    b.convolutionDataGradient(cb, p, upload(b, d.e, misaligned(mask, 0)),
                                              upload(b, d.w, misaligned(mask, 1)), upload(b, bias, false), mx);
                });
                expectMatches(download(mx, x.size()), x,
                              std::string(depthwise ? "depthwise" : "general") + " dX, bias " +
                                  std::to_string(hasBias) + ", mask " + std::to_string(mask));
            }
        }
}

// The transposed convolution's weight rotation (one variant): exact copies, grouped and not, and
// applying it twice (with the channel counts swapped) gives the weights back.
TEST(MetalVariants, ConvolutionTransposeWeights) {
    REQUIRE_METAL();
    for (int groups : {1, 2}) {
        ConvolutionTransposeWeightsParams p{groups, 3, 2, 8, 12};
        const std::vector<float> w = noise(size_t(8 * 3 * 2 * 12 / groups), 11);
        std::vector<float> r(w.size()), back(w.size());
        cpu::convolutionTransposeWeights(p, w.data(), r.data());
        ConvolutionTransposeWeightsParams q{groups, 3, 2, 12, 8};
        cpu::convolutionTransposeWeights(q, r.data(), back.data());
        EXPECT_EQ(back, w) << "rotating twice restores the weights";
        BufferSlice mr;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            mr = upload(b, std::vector<float>(w.size(), -1.0f), false);
            b.convolutionTransposeWeights(cb, p, upload(b, w, false), mr);
        });
        EXPECT_EQ(download(mr, r.size()), r) << "groups " << groups;
    }
}

// Bindings: 0 source X, 1 gradient E, 2 weight gradient dW (also the sum_slices destination),
// 3 bias gradient. Large enough that the general kernel splits its reduction (sum_slices runs);
// 5 output channels of 3 make dW a length that is not a multiple of 4 (sum_slices unaligned).
TEST(MetalVariants, ConvolutionWeightGradientsEveryAlignment) {
    REQUIRE_METAL();
    for (int shape = 0; shape < 3; ++shape) {
        const ConvCase c = makeConvCase("wg", [&](ConvCase& k) {
            k.batch = 2;
            k.inC = shape == 1 ? 3 : 8;
            k.outC = shape == 1 ? 5 : 8;
            k.groups = shape == 2 ? 8 : 1;
            k.srcW = 24;
            k.srcH = 20;
        });
        const ConvolutionWeightGradientParams p = weightGradientParams(c);
        const ConvData d = makeConvData(c, 70 + shape);
        for (unsigned mask = 0; mask < 16; ++mask) {
            const std::vector<float> w0 = noise(c.weightCount(), 4), b0 = noise(size_t(c.outC), 5);
            std::vector<float> w = w0, bias = b0;
            cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), w.data(), bias.data());
            BufferSlice mw, mb;
            runOnMetal([&](Backend& b, CommandBuffer& cb) {
                mw = upload(b, w0, misaligned(mask, 2));
                mb = upload(b, b0, misaligned(mask, 3));
                b.convolutionWeightGradient(cb, p, upload(b, d.e, misaligned(mask, 1)),
                                            upload(b, d.x, misaligned(mask, 0)), mw, mb);
            });
            const std::string what = "weight gradient shape " + std::to_string(shape) + ", mask " + std::to_string(mask);
            expectMatches(download(mw, w.size()), w, what + ": dW");
            expectMatches(download(mb, bias.size()), bias, what + ": dB");
        }
    }
}

// ---- neuron -----------------------------------------------------------------------------------

// Bindings: 0 source X, 1 destination, 2 gradient G.
TEST(MetalVariants, NeuronEveryTypeAndAlignment) {
    REQUIRE_METAL();
    const int C = 8, batch = 2;
    const ImageLayout l = makeLayout(6, 5, C, 0, C);
    const std::vector<float> x = randomVector(bufferSize(l, batch), 80), g = randomVector(bufferSize(l, batch), 81);
    const std::vector<float> slopes = randomVector(C, 82, 0.05f, 0.5f);
    for (int type = 0; type < kNeuronCount; ++type) {
        for (unsigned mask = 0; mask < 8; ++mask) {
            NeuronForwardParams fp{};
            fp.source = fp.destination = l;
            fp.batch = batch;
            fp.clipWidth = 6;
            fp.clipHeight = 5;
            fp.neuron = neuronOf(type);
            NeuronGradientParams gp{};
            gp.gradient = gp.source = gp.destination = l;
            gp.batch = batch;
            gp.clipWidth = 6;
            gp.clipHeight = 5;
            gp.neuron = fp.neuron;
            const std::vector<float> before = noise(x.size(), 6);
            std::vector<float> y = before, dx = before;
            cpu::cnnNeuronForward(fp, x.data(), slopes.data(), y.data());
            cpu::cnnNeuronGradient(gp, g.data(), x.data(), slopes.data(), dx.data());
            BufferSlice my, mdx;
            runOnMetal([&](Backend& b, CommandBuffer& cb) {
                my = upload(b, before, misaligned(mask, 1));
                mdx = upload(b, before, misaligned(mask, 1));
                BufferSlice xs = upload(b, x, misaligned(mask, 0)), a = upload(b, slopes, false);
                if (mask < 4) b.neuronForward(cb, fp, xs, a, my);
                b.neuronGradient(cb, gp, upload(b, g, misaligned(mask, 2)), xs, a, mdx);
            });
            const std::string what = "neuron " + std::to_string(type) + ", mask " + std::to_string(mask);
            if (mask < 4) expectMatches(download(my, y.size()), y, what + ": forward");
            expectMatches(download(mdx, dx.size()), dx, what + ": gradient");
        }
    }
}

// PReLU's slope gradient on a 40 x 40 image: 1600 pixels keep all 128 threads (four simdgroups,
// every lane) of each channel quad's threadgroup busy, so a reduction that dropped a lane or a
// simdgroup would be off by a large fraction. Bindings: 0 source X, 1 gradient G.
TEST(MetalVariants, PReLUSlopeGradientEveryAlignmentAllLanesBusy) {
    REQUIRE_METAL();
    const int C = 8;
    const ImageLayout l = makeLayout(40, 40, C, 0, C);
    const std::vector<float> x = randomVector(bufferSize(l, 1), 130), g = randomVector(bufferSize(l, 1), 131);
    for (unsigned mask = 0; mask < 4; ++mask) {
        NeuronGradientParams p{};
        p.gradient = p.source = p.destination = l;
        p.batch = 1;
        p.clipWidth = p.clipHeight = 40;
        p.neuronDataOffset = 3;
        p.neuron = neuronOf(kNeuronPReLU);
        const std::vector<float> before = noise(C + 5, 14);
        std::vector<float> da = before;
        cpu::cnnNeuronPReLUWeightGradient(p, g.data(), x.data(), da.data());
        BufferSlice mda;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            mda = upload(b, before, false);
            b.neuronPReLUWeightGradient(cb, p, upload(b, g, misaligned(mask, 1)), upload(b, x, misaligned(mask, 0)),
                                        mda);
        });
        expectMatches(download(mda, da.size()), da, "PReLU slope gradient, mask " + std::to_string(mask));
    }
}

// ---- softmax ----------------------------------------------------------------------------------

// Bindings: 0 source / gradient G, 1 destination, 2 output Y. N = 12 runs the thread-per-pixel
// kernels, N = 40 the simdgroup-per-pixel ones.
TEST(MetalVariants, SoftmaxEveryKernelModeAndAlignment) {
    REQUIRE_METAL();
    for (int N : {12, 40}) {
        const ImageLayout l = makeLayout(3, 2, N, 0, N);
        const std::vector<float> x = randomVector(bufferSize(l, 2), 90, -3.0f, 3.0f);
        const std::vector<float> g = randomVector(x.size(), 91);
        for (int log = 0; log < 2; ++log) {
            for (unsigned mask = 0; mask < 8; ++mask) {
                SoftmaxParams fp{};
                fp.source = fp.destination = l;
                fp.batch = 2;
                fp.clipWidth = 3;
                fp.clipHeight = 2;
                fp.logSoftmax = log;
                SoftmaxGradientParams gp{};
                gp.gradient = gp.output = gp.destination = l;
                gp.batch = 2;
                gp.clipWidth = 3;
                gp.clipHeight = 2;
                gp.logSoftmax = log;
                const std::vector<float> before = noise(x.size(), 7);
                std::vector<float> y = before, dx = before;
                cpu::softmaxForward(fp, x.data(), y.data());
                cpu::softmaxGradient(gp, g.data(), y.data(), dx.data());
                BufferSlice my, mdx;
                runOnMetal([&](Backend& b, CommandBuffer& cb) {
                    my = upload(b, before, misaligned(mask, 1));
                    mdx = upload(b, before, misaligned(mask, 1));
                    if (mask < 4) b.softmaxForward(cb, fp, upload(b, x, misaligned(mask, 0)), my);
                    b.softmaxGradient(cb, gp, upload(b, g, misaligned(mask, 0)), upload(b, y, misaligned(mask, 2)), mdx);
                });
                const std::string what = "softmax N=" + std::to_string(N) + " log " + std::to_string(log) +
                                         ", mask " + std::to_string(mask);
                if (mask < 4) expectMatches(download(my, y.size()), y, what + ": forward");
                expectMatches(download(mdx, dx.size()), dx, what + ": gradient");
            }
        }
    }
}

// ---- arithmetic --------------------------------------------------------------------------------

ArithmeticOperand fullOperand(const ImageLayout& image) {
    ArithmeticOperand o{};
    o.image = image;
    o.strideX = o.strideY = o.strideChannels = o.strideImages = 1;
    o.edgeMode = kEdgeZero;
    return o;
}

constexpr int kArithC = 8, kArithW = 5, kArithH = 3, kArithBatch = 2;

ArithmeticParams forwardArithmetic(const ImageLayout& l, int op, int mode) {
    ArithmeticParams p{};
    p.primary = fullOperand(l);
    p.secondary = fullOperand(l);
    p.destination = p.clampState = l;
    p.batch = kArithBatch;
    p.op = op;
    p.primaryScale = 1.5f;
    p.secondaryScale = -0.5f;
    p.bias = 0.25f;
    p.minimumValue = -0.5f;
    p.maximumValue = 0.5f;
    p.clipWidth = kArithW;
    p.clipHeight = kArithH;
    p.stateMode = mode;
    return p;
}

// Bindings: 0 primary, 1 secondary, 2 destination, 3 clamp state.
TEST(MetalVariants, ArithmeticForwardEveryOpModeAndAlignment) {
    REQUIRE_METAL();
    const ImageLayout l = makeLayout(kArithW, kArithH, kArithC, 0, kArithC);
    const std::vector<float> x = randomVector(bufferSize(l, kArithBatch), 110);
    const std::vector<float> y = randomVector(x.size(), 111, 0.5f, 1.5f);  // no division by zero
    for (int op = 0; op < 4; ++op) {
        for (int mode = 0; mode < 3; ++mode) {
            for (unsigned mask = 0; mask < 16; ++mask) {
                if (mode == 0 && misaligned(mask, 3)) continue;  // no state, no state flag
                const ArithmeticParams p = forwardArithmetic(l, op, mode);
                const std::vector<float> before = noise(x.size(), 10), stateBefore = noise(x.size(), 11);
                std::vector<float> r = before, state = stateBefore;
                cpu::arithmeticForward(p, x.data(), y.data(), r.data(), mode ? state.data() : nullptr);
                BufferSlice mr, ms;
                runOnMetal([&](Backend& b, CommandBuffer& cb) {
                    mr = upload(b, before, misaligned(mask, 2));
                    ms = upload(b, stateBefore, misaligned(mask, 3));
                    b.arithmeticForward(cb, p, upload(b, x, misaligned(mask, 0)), upload(b, y, misaligned(mask, 1)), mr,
                                        ms);
                });
                const std::string what = "op " + std::to_string(op) + " mode " + std::to_string(mode) + ", mask " +
                                         std::to_string(mask);
                expectMatches(download(mr, r.size()), r, what + ": result");
                expectMatches(download(ms, state.size()), state, what + ": state");
            }
        }
    }
}

// Bindings: 0 primary, 1 secondary, 2 destination.
TEST(MetalVariants, CompareEveryComparisonAndAlignment) {
    REQUIRE_METAL();
    const ImageLayout l = makeLayout(kArithW, kArithH, kArithC, 0, kArithC);
    const std::vector<float> x = randomVector(bufferSize(l, kArithBatch), 112);
    std::vector<float> y = randomVector(x.size(), 113);
    for (size_t i = 0; i < y.size(); i += 3) y[i] = x[i];  // ties, for the equalities
    for (int comparison = 0; comparison < 6; ++comparison) {
        for (unsigned mask = 0; mask < 8; ++mask) {
            CompareParams q{};
            q.primary = fullOperand(l);
            q.secondary = fullOperand(l);
            q.destination = l;
            q.batch = kArithBatch;
            q.comparison = comparison;
            q.threshold = 0.125f;
            q.primaryScale = q.secondaryScale = 1.0f;
            q.minimumValue = -1e30f;
            q.maximumValue = 1e30f;
            q.clipWidth = kArithW;
            q.clipHeight = kArithH;
            const std::vector<float> before = noise(x.size(), 13);
            std::vector<float> r = before;
            cpu::compareForward(q, x.data(), y.data(), r.data());
            BufferSlice mr;
            runOnMetal([&](Backend& b, CommandBuffer& cb) {
                mr = upload(b, before, misaligned(mask, 2));
                b.compareForward(cb, q, upload(b, x, misaligned(mask, 0)), upload(b, y, misaligned(mask, 1)), mr);
            });
            expectMatches(download(mr, r.size()), r,
                          "comparison " + std::to_string(comparison) + ", mask " + std::to_string(mask));
        }
    }
}

// Bindings: 0 gradient G, 1 destination dX, 2 primary, 3 secondary, 4 clamp state. `reduce`:
// the input is broadcast along x over 36 pixels, so every dX element sums more terms than the
// one-thread-per-element kernel takes (arithmetic_gradient_reduce).
void arithmeticGradientVariants(bool reduce) {
    const int W = reduce ? 36 : kArithW, H = kArithH, B = kArithBatch, C = kArithC;
    const ImageLayout l = makeLayout(W, H, C, 0, C);
    const std::vector<float> g = randomVector(bufferSize(l, B), 120);
    const std::vector<float> x = randomVector(g.size(), 121), y = randomVector(g.size(), 122, 0.5f, 1.5f);
    const std::vector<float> s = randomVector(g.size(), 123, -1.0f, 2.0f);
    for (int op = 0; op < 4; ++op) {
        for (int clamp = 0; clamp < 3; ++clamp) {
            for (int second = 0; second < 2; ++second) {
                const bool needX = (op == 2 || op == 3) && second, needY = (op == 2 && !second) || op == 3;
                for (unsigned mask = 0; mask < 32; ++mask) {
                    if ((!needX && misaligned(mask, 2)) || (!needY && misaligned(mask, 3)) ||
                        (clamp == 0 && misaligned(mask, 4)))
                        continue;
                    ArithmeticGradientParams p{};
                    p.gradient = p.clampState = l;
                    p.primary = fullOperand(l);
                    p.secondary = fullOperand(l);
                    ArithmeticOperand& input = second ? p.secondary : p.primary;
                    if (reduce) input.strideX = 0;
                    p.destination = makeLayout(reduce ? 1 : W, H, C, 0, C);
                    p.batch = B;
                    p.width = W;
                    p.height = H;
                    p.op = op;
                    p.forSecondary = second;
                    p.primaryScale = 1.5f;
                    p.secondaryScale = -0.5f;
                    p.minimumValue = -0.5f;
                    p.maximumValue = 1.0f;
                    p.clampMode = clamp;
                    const std::vector<float> before = noise(bufferSize(p.destination, B), 12);
                    std::vector<float> dx = before;
                    cpu::arithmeticGradient(p, g.data(), x.data(), y.data(), s.data(), dx.data());
                    BufferSlice mdx;
                    runOnMetal([&](Backend& b, CommandBuffer& cb) {
                        mdx = upload(b, before, misaligned(mask, 1));
                        b.arithmeticGradient(cb, p, upload(b, g, misaligned(mask, 0)), upload(b, x, misaligned(mask, 2)),
                                             upload(b, y, misaligned(mask, 3)), upload(b, s, misaligned(mask, 4)), mdx);
                    });
                    expectMatches(download(mdx, dx.size()), dx,
                                  std::string(reduce ? "reduce" : "direct") + " gradient op " + std::to_string(op) +
                                      " clamp " + std::to_string(clamp) + " secondary " + std::to_string(second) +
                                      ", mask " + std::to_string(mask));
                }
            }
        }
    }
}

TEST(MetalVariants, ArithmeticGradientDirectEveryOpModeAndAlignment) {
    REQUIRE_METAL();
    arithmeticGradientVariants(false);
}

TEST(MetalVariants, ArithmeticGradientReduceEveryOpModeAndAlignment) {
    REQUIRE_METAL();
    arithmeticGradientVariants(true);
}

// One dominant logit per pixel, on a different lane (channel quad) for every pixel: a max taken
// from fewer lanes than all would overflow exp() into inf/NaN. N = 160 channels: 40 quads, so
// lanes 0-31 hold quads 0-31 and lanes 0-7 also quads 32-39.
TEST(MetalVariants, SoftmaxDominantLogitOnEveryLane) {
    REQUIRE_METAL();
    const int N = 160, pixels = 40;
    const ImageLayout l = makeLayout(pixels, 1, N, 0, N);
    std::vector<float> x = randomVector(bufferSize(l, 1), 140, -1.0f, 1.0f);
    for (int p = 0; p < pixels; ++p) x[size_t(p * N + 4 * p + p % 4)] = 200.0f;  // exp(200) overflows float
    for (int log = 0; log < 2; ++log) {
        SoftmaxParams fp{};
        fp.source = fp.destination = l;
        fp.batch = 1;
        fp.clipWidth = pixels;
        fp.clipHeight = 1;
        fp.logSoftmax = log;
        std::vector<float> y(x.size(), 0.0f);
        cpu::softmaxForward(fp, x.data(), y.data());
        BufferSlice my;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            my = upload(b, std::vector<float>(x.size(), 0.0f), false);
            b.softmaxForward(cb, fp, upload(b, x, false), my);
        });
        const std::vector<float> got = download(my, y.size());
        for (float v : got) ASSERT_TRUE(std::isfinite(v)) << "log " << log;
        expectMatches(got, y, "dominant logit, log " + std::to_string(log));
    }
}

// ---- utility ----------------------------------------------------------------------------------

TEST(MetalVariants, UtilityKernelsEveryAlignment) {
    REQUIRE_METAL();
    const std::vector<float> data = randomVector(37, 100);
    ChannelCopyParams cp{};
    cp.source = makeLayout(3, 2, 8, 0, 8);
    cp.destination = makeLayout(3, 2, 12, 4, 8);
    cp.batch = 2;
    const std::vector<float> image = randomVector(bufferSize(cp.source, 2), 101);
    for (unsigned mask = 0; mask < 4; ++mask) {
        const std::vector<float> before = noise(64, 8);
        std::vector<float> filled = before, copied = before, channels = noise(bufferSize(cp.destination, 2), 9);
        const std::vector<float> channelsBefore = channels;
        for (size_t i = 0; i < 37; ++i) filled[i] = 1.5f, copied[i] = data[i];
        for (int n = 0; n < 2; ++n)
            for (int px = 0; px < 6; ++px)
                for (int c = 0; c < 8; ++c)
                    channels[size_t(n * cp.destination.imageStride + px * 12 + 4 + c)] =
                        image[size_t(n * cp.source.imageStride + px * 8 + c)];
        BufferSlice mf, mc, mch;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            mf = upload(b, before, misaligned(mask, 1));
            mc = upload(b, before, misaligned(mask, 1));
            mch = upload(b, channelsBefore, misaligned(mask, 1));
            metalFill(b, cb, mf, 37, 1.5f);
            metalCopyFloats(b, cb, upload(b, data, misaligned(mask, 0)), mc, 37);
            metalCopyChannels(b, cb, cp, upload(b, image, misaligned(mask, 0)), mch);
        });
        const std::string what = "utility, mask " + std::to_string(mask);
        EXPECT_EQ(download(mf, 64), filled) << what;
        EXPECT_EQ(download(mc, 64), copied) << what;
        EXPECT_EQ(download(mch, channels.size()), channels) << what;
    }
}

}  // namespace

#endif  // MPSGRAD_HAS_METAL
