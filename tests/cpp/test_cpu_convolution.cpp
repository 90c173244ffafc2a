// CPU backend convolution ops (cpp/mpsgrad/backend/cpu/convolution.cpp) against the naive
// double-precision reference of tests/cpp/reference_convolution.h.
//
// Tolerance: an element that is a sum of float products is compared with
//     |got - expected| <= 1e-5 * (L * sum|terms| + |expected|)
// i.e. a relative error of 1e-5 measured against the scale of the summed terms (the quantity
// float rounding errors are proportional to; for sums without cancellation it is the plain
// relative error), with L the neuron's largest slope. Elements an op must not write (other
// channels, padding lanes, pixels outside the clip rectangle) must keep their exact bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpp/mpsgrad/backend/cpu/cpu_ops.h"
#include "convolution_scenarios.h"
#include "reference_convolution.h"

namespace {

using namespace mpsgrad;
using namespace mpsgrad::testconv;
namespace ref = mpsgrad::testref;

constexpr double kRelTol = 1e-5;

// Checks written elements against the reference and the others for unchanged bits.
void expectMatches(const std::vector<float>& got, const std::vector<float>& before,
                   const ref::Expected& ex, double lipschitz, const std::string& what) {
    ASSERT_EQ(got.size(), ex.value.size()) << what;
    int failures = 0;
    size_t written = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (ex.written[i]) {
            ++written;
            const double tol = kRelTol * (lipschitz * ex.magnitude[i] + std::fabs(ex.value[i])) + 1e-30;
            const double err = std::fabs(double(got[i]) - ex.value[i]);
            if (!(err <= tol) && ++failures <= 5)
                ADD_FAILURE() << what << ": element " << i << " = " << got[i] << ", expected "
                              << ex.value[i] << " (error " << err << ", tolerance " << tol << ")";
        } else if (std::memcmp(&got[i], &before[i], sizeof(float)) != 0 && ++failures <= 5) {
            ADD_FAILURE() << what << ": element " << i << " must stay " << before[i] << " but is "
                          << got[i];
        }
    }
    EXPECT_EQ(failures, 0) << what << ": " << failures << " bad elements";
    EXPECT_GT(written, 0u) << what << ": the reference writes nothing (bad test case)";
}

// The shared scenarios plus the CPU's own (the CPU is cheap: more shapes, larger sizes).
std::vector<ConvCase> cases() {
    std::vector<ConvCase> v = sharedConvCases();
    v.push_back(makeConvCase("StrideXOnly", [](ConvCase& c) { c.sX = 2; c.sY = 1; c.srcW = 10; }));
    v.push_back(makeConvCase("DilationXOnly", [](ConvCase& c) { c.dX = 2; c.dY = 1; c.winLeft = -2; }));
    v.push_back(makeConvCase("Kernel1x1Stride2", [](ConvCase& c) {
        c.kW = c.kH = 1; c.winLeft = c.winTop = 0; c.sX = c.sY = 2; c.srcW = 8;
    }));
    v.push_back(makeConvCase("Kernel2x2", [](ConvCase& c) { c.kW = c.kH = 2; c.winLeft = c.winTop = 0; }));
    v.push_back(makeConvCase("Kernel2x2Stride2", [](ConvCase& c) {
        c.kW = c.kH = 2; c.winLeft = c.winTop = 0; c.sX = c.sY = 2; c.srcW = 8;
    }));
    v.push_back(makeConvCase("Kernel4x4", [](ConvCase& c) { c.kW = c.kH = 4; c.winLeft = c.winTop = -2; c.srcW = 9; }));
    v.push_back(makeConvCase("Kernel5x5", [](ConvCase& c) { c.kW = c.kH = 5; c.winLeft = c.winTop = -2; }));
    v.push_back(makeConvCase("Kernel5x5Stride2Clamp", [](ConvCase& c) {
        c.kW = c.kH = 5; c.winLeft = c.winTop = -2; c.sX = c.sY = 2; c.edge = kEdgeClamp; c.srcW = 9;
    }));
    v.push_back(makeConvCase("Kernel3x1", [](ConvCase& c) { c.kW = 3; c.kH = 1; c.winTop = 0; }));
    v.push_back(makeConvCase("Kernel1x3", [](ConvCase& c) { c.kW = 1; c.kH = 3; c.winLeft = 0; }));
    v.push_back(makeConvCase("Groups2Widening", [](ConvCase& c) { c.inC = 8; c.outC = 16; c.groups = 2; c.sX = 2; }));
    v.push_back(makeConvCase("ClipNotAtOrigin", [](ConvCase& c) {
        c.clipX = 3; c.clipY = 2; c.clipW = 4; c.clipH = 3; c.dstW = 9; c.dstH = 7;
        c.dgClipX = 2; c.dgClipY = 1; c.dgClipW = 4; c.dgClipH = 4;
    }));
    v.push_back(makeConvCase("NegativeWindow", [](ConvCase& c) { c.winLeft = -3; c.winTop = -4; c.edge = kEdgeClamp; }));
    v.push_back(makeConvCase("PositiveWindow", [](ConvCase& c) {
        c.winLeft = 2; c.winTop = 1; c.clipW = 4; c.clipH = 4;
    }));
    v.push_back(makeConvCase("Batch3", [](ConvCase& c) { c.batch = 3; }));
    v.push_back(makeConvCase("OddChannels1to1", [](ConvCase& c) { c.inC = 1; c.outC = 1; }));
    v.push_back(makeConvCase("OddChannels7to13", [](ConvCase& c) { c.inC = 7; c.outC = 13; c.sX = 2; }));
    v.push_back(makeConvCase("ReLU", [](ConvCase& c) { c.neuron = kNeuronReLU; c.na = 0.0f; }));
    v.push_back(makeConvCase("SigmoidPreactivation", [](ConvCase& c) {
        c.neuron = kNeuronSigmoid; c.pre = true; c.clipX = 1; c.clipY = 2; c.dstW = 10; c.dstH = 9;
    }));
    v.push_back(makeConvCase("PReLUChannelData", [](ConvCase& c) { c.neuron = kNeuronPReLU; c.outC = 6; }));
    v.push_back(makeConvCase("PReLUDepthwiseBatch3", [](ConvCase& c) {
        c.neuron = kNeuronPReLU; c.inC = c.outC = c.groups = 5; c.batch = 3;
    }));
    v.push_back(makeConvCase("DataGradientShiftedWindow", [](ConvCase& c) {
        c.sX = c.sY = 2; c.srcW = 9; c.dgShiftX = 1; c.dgShiftY = -2;
    }));
    v.push_back(makeConvCase("DataGradientShiftedWindowStride3", [](ConvCase& c) {
        c.sX = 3; c.sY = 2; c.srcW = 11; c.dgShiftX = -1; c.dgShiftY = 3; c.dgClipX = 1;
        c.dgClipW = 8;
    }));
    v.push_back(makeConvCase("WideRowManyBlocks", [](ConvCase& c) {  // clip rows longer than one pixel block
        c.srcW = 150; c.srcH = 3; c.inC = 2; c.outC = 3;
    }));
    v.push_back(makeConvCase("FullyConnectedLike", [](ConvCase& c) {  // kernel = source, 1x1 output
        c.batch = 3; c.inC = 6; c.outC = 20; c.srcW = 5; c.srcH = 4; c.kW = 5; c.kH = 4;
        c.winLeft = c.winTop = 0; c.clipW = c.clipH = 1; c.neuron = kNeuronReLU;
    }));
    v.push_back(makeConvCase("ManyChannels", [](ConvCase& c) {
        c.inC = 36; c.outC = 44; c.srcW = 9; c.srcH = 8; c.batch = 2; c.sX = 2;
    }));
    v.push_back(makeConvCase("Everything", [](ConvCase& c) {
        c.batch = 3; c.inC = 12; c.outC = 18; c.groups = 3; c.kW = 4; c.kH = 3; c.sX = 2; c.sY = 3;
        c.dX = 2; c.dY = 1; c.winLeft = -3; c.winTop = -1; c.srcW = 13; c.srcH = 11;
        c.clipX = 2; c.clipY = 1; c.clipW = 5; c.clipH = 3; c.dstW = 9; c.dstH = 6;
        c.srcChanOffset = 4; c.srcTotalC = 17; c.dstChanOffset = 4; c.dstTotalC = 23;
        c.edge = kEdgeClamp; c.neuron = kNeuronTanH; c.na = 1.0f; c.nb = 0.5f; c.pre = true;
        c.dgClipX = 1; c.dgClipY = 2; c.dgClipW = 10; c.dgClipH = 8; c.dgShiftX = 1;
    }));
    return v;
}

class CpuConvolution : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CpuConvolution, ForwardMatchesReference) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 100);
    const ConvolutionParams p = forwardParams(c);

    const std::vector<float> dstBefore = randomVector(bufferSize(p.destination, c.batch), 7, 10, 20);
    const std::vector<float> preBefore = randomVector(bufferSize(p.preactivation, c.batch), 8, 10, 20);
    std::vector<float> dst = dstBefore, pre = preBefore;
    cpu::convolutionForward(p, d.x.data(), d.w.data(), c.bias ? d.b.data() : nullptr,
                            p.neuron.hasChannelData ? d.neuronData.data() : nullptr, dst.data(),
                            c.pre ? pre.data() : nullptr);

    ref::Expected exDst(dst.size()), exPre(pre.size());
    ref::forward(p, d.x, d.w, d.b, d.neuronData, exDst, &exPre);
    double maxChannelA = 0.0;
    for (float a : d.neuronData) maxChannelA = std::fmax(maxChannelA, a);
    expectMatches(dst, dstBefore, exDst, ref::neuronLipschitz(c.neuron, c.na, c.nb, maxChannelA),
                  "destination");
    if (c.pre)
        expectMatches(pre, preBefore, exPre, 1.0, "preactivation");
    else
        EXPECT_EQ(pre, preBefore);
}

TEST_P(CpuConvolution, DataGradientMatchesReference) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 200);
    const ConvolutionDataGradientParams p = dataGradientParams(c);

    const std::vector<float> before = randomVector(bufferSize(p.destination, c.batch), 9, 10, 20);
    std::vector<float> dx = before;
    cpu::convolutionDataGradient(p, d.e.data(), d.w.data(), nullptr, dx.data());

    ref::Expected ex(dx.size());
    ref::dataGradient(p, d.e, d.w, ex);
    expectMatches(dx, before, ex, 1.0, "dX");
}

TEST_P(CpuConvolution, WeightGradientMatchesReference) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 300);
    const ConvolutionWeightGradientParams p = weightGradientParams(c);

    const std::vector<float> wBefore = randomVector(c.weightCount(), 11, 10, 20);
    const std::vector<float> bBefore = randomVector(size_t(c.outC), 12, 10, 20);
    std::vector<float> dw = wBefore, db = bBefore;
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), db.data());

    ref::Expected exW(dw.size()), exB(db.size());
    ref::weightGradient(p, d.e, d.x, wBefore, bBefore, exW, exB);
    expectMatches(dw, wBefore, exW, 1.0, "dW");
    expectMatches(db, bBefore, exB, 1.0, "dB");
}

// Same inputs, same bits: the ops are deterministic run to run.
TEST_P(CpuConvolution, Deterministic) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 400);
    const ConvolutionParams fp = forwardParams(c);
    const ConvolutionDataGradientParams dp = dataGradientParams(c);
    const ConvolutionWeightGradientParams wp = weightGradientParams(c);
    auto run = [&] {
        std::vector<float> y(bufferSize(fp.destination, c.batch), 0.0f);
        std::vector<float> pre(bufferSize(fp.preactivation, c.batch), 0.0f);
        std::vector<float> dx(bufferSize(dp.destination, c.batch), 0.0f);
        std::vector<float> dw(c.weightCount(), 0.0f), db(size_t(c.outC), 0.0f);
        cpu::convolutionForward(fp, d.x.data(), d.w.data(), d.b.data(), d.neuronData.data(),
                                y.data(), pre.data());
        cpu::convolutionDataGradient(dp, d.e.data(), d.w.data(), nullptr, dx.data());
        cpu::convolutionWeightGradient(wp, d.e.data(), d.x.data(), dw.data(), db.data());
        std::vector<float> all;
        for (auto* v : {&y, &pre, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
        return all;
    };
    const std::vector<float> first = run();
    for (int i = 0; i < 3; ++i) {
        const std::vector<float> again = run();
        ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuConvolution, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// ---- weight-gradient flags ------------------------------------------------------------------

class CpuConvolutionWeightGradient : public ::testing::TestWithParam<ConvCase> {};

std::vector<ConvCase> flagCases() {
    return {makeConvCase("Groups2", [](ConvCase& c) {
                c.batch = 3; c.inC = 6; c.outC = 10; c.groups = 2; c.sX = 2; c.srcW = 12; c.srcH = 10;
                c.edge = kEdgeClamp;
            }),
            makeConvCase("Depthwise", [](ConvCase& c) {
                c.batch = 3; c.inC = c.outC = c.groups = 6; c.sY = 2; c.srcW = 11; c.srcH = 10;
                c.edge = kEdgeClamp;
            })};
}

TEST_P(CpuConvolutionWeightGradient, AccumulateAddsToExistingValues) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 500);
    ConvolutionWeightGradientParams p = weightGradientParams(c);
    p.accumulate = 1;
    const std::vector<float> wBefore = randomVector(c.weightCount(), 13);
    const std::vector<float> bBefore = randomVector(size_t(c.outC), 14);
    std::vector<float> dw = wBefore, db = bBefore;
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), db.data());
    ref::Expected exW(dw.size()), exB(db.size());
    ref::weightGradient(p, d.e, d.x, wBefore, bBefore, exW, exB);
    expectMatches(dw, wBefore, exW, 1.0, "dW accumulated");
    expectMatches(db, bBefore, exB, 1.0, "dB accumulated");

    // Twice accumulated = initial + 2 * gradient.
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), db.data());
    p.accumulate = 0;
    std::vector<float> gw(dw.size()), gb(db.size());
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), gw.data(), gb.data());
    for (size_t i = 0; i < dw.size(); ++i)
        EXPECT_NEAR(dw[i], wBefore[i] + 2.0 * gw[i], 1e-5 * (std::fabs(wBefore[i]) + 2 * exW.magnitude[i]));
}

TEST_P(CpuConvolutionWeightGradient, ComputeWeightsOnly) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 600);
    ConvolutionWeightGradientParams p = weightGradientParams(c);
    p.computeBiases = 0;
    const std::vector<float> wBefore = randomVector(c.weightCount(), 15);
    std::vector<float> dw = wBefore;
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), nullptr);
    ref::Expected exW(dw.size()), exB(size_t(c.outC));
    ref::weightGradient(p, d.e, d.x, wBefore, {}, exW, exB);
    expectMatches(dw, wBefore, exW, 1.0, "dW");

    // And a bias buffer that is passed is left alone.
    const std::vector<float> bBefore = randomVector(size_t(c.outC), 16);
    std::vector<float> db = bBefore;
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), db.data());
    EXPECT_EQ(db, bBefore);
}

TEST_P(CpuConvolutionWeightGradient, ComputeBiasesOnly) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 700);
    ConvolutionWeightGradientParams p = weightGradientParams(c);
    p.computeWeights = 0;
    for (int accumulate : {0, 1}) {
        p.accumulate = accumulate;
        const std::vector<float> bBefore = randomVector(size_t(c.outC), 17);
        std::vector<float> db = bBefore;
        cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), nullptr, db.data());
        ref::Expected exW(c.weightCount()), exB(db.size());
        ref::weightGradient(p, d.e, d.x, {}, bBefore, exW, exB);
        expectMatches(db, bBefore, exB, 1.0, "dB");

        const std::vector<float> wBefore = randomVector(c.weightCount(), 18);
        std::vector<float> dw = wBefore;
        db = bBefore;
        cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), dw.data(), db.data());
        EXPECT_EQ(dw, wBefore);
    }
}

TEST_P(CpuConvolutionWeightGradient, NothingToCompute) {
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 800);
    ConvolutionWeightGradientParams p = weightGradientParams(c);
    p.computeWeights = 0;
    p.computeBiases = 0;
    cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), nullptr, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuConvolutionWeightGradient, ::testing::ValuesIn(flagCases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// ---- adjoint identities ---------------------------------------------------------------------
//
// For a convolution without neuron, y = conv(x; W, b) over the full output image:
//   <conv(x), e> = <x, dataGradient(e)>             (zero edge mode, dX over the whole source)
//   <conv(x), e> = <W, dW(e, x)> + <b, dB(e)>       (any edge mode)
// checked in double with a relative tolerance of 1e-5 of the sum of absolute products.

double dotLayout(const std::vector<float>& a, const std::vector<float>& b, const ImageLayout& l,
                 int batch, double* absSum) {
    double s = 0.0;
    for (int n = 0; n < batch; ++n)
        for (int y = 0; y < l.height; ++y)
            for (int x = 0; x < l.width; ++x)
                for (int c = 0; c < l.channels; ++c) {
                    const size_t i = size_t(ref::index(l, n, y, x, c));
                    s += double(a[i]) * b[i];
                    *absSum += std::fabs(double(a[i]) * b[i]);
                }
    return s;
}

class CpuConvolutionAdjoint : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CpuConvolutionAdjoint, DataGradientIsAdjointOfForward) {
    ConvCase c = GetParam();
    c.edge = kEdgeZero;
    const ConvData d = makeConvData(c, 900);
    ConvolutionParams fp = forwardParams(c);
    fp.hasBias = 0;
    std::vector<float> y(bufferSize(fp.destination, c.batch), 0.0f);
    cpu::convolutionForward(fp, d.x.data(), d.w.data(), nullptr, nullptr, y.data(), nullptr);

    const ConvolutionDataGradientParams dp = dataGradientParams(c);
    std::vector<float> dx(bufferSize(dp.destination, c.batch), 0.0f);
    cpu::convolutionDataGradient(dp, d.e.data(), d.w.data(), nullptr, dx.data());

    double abs1 = 0.0, abs2 = 0.0;
    const double lhs = dotLayout(y, d.e, c.gradient(), c.batch, &abs1);  // E and Y share geometry
    const double rhs = dotLayout(d.x, dx, c.source(), c.batch, &abs2);
    EXPECT_NEAR(lhs, rhs, kRelTol * (abs1 + abs2)) << "<conv(x), e> vs <x, dataGrad(e)>";
}

TEST_P(CpuConvolutionAdjoint, WeightGradientIsAdjointOfForward) {
    const ConvCase& c = GetParam();
    for (int edge : {int(kEdgeZero), int(kEdgeClamp)}) {
        ConvCase cc = c;
        cc.edge = edge;
        const ConvData d = makeConvData(cc, 1000 + edge);
        const ConvolutionParams fp = forwardParams(cc);
        std::vector<float> y(bufferSize(fp.destination, cc.batch), 0.0f);
        cpu::convolutionForward(fp, d.x.data(), d.w.data(), d.b.data(), nullptr, y.data(), nullptr);

        const ConvolutionWeightGradientParams wp = weightGradientParams(cc);
        std::vector<float> dw(cc.weightCount()), db(size_t(cc.outC));
        cpu::convolutionWeightGradient(wp, d.e.data(), d.x.data(), dw.data(), db.data());

        double abs1 = 0.0, abs2 = 0.0;
        const double lhs = dotLayout(y, d.e, cc.gradient(), cc.batch, &abs1);
        double rhs = 0.0;
        for (size_t i = 0; i < dw.size(); ++i) {
            rhs += double(d.w[i]) * dw[i];
            abs2 += std::fabs(double(d.w[i]) * dw[i]);
        }
        for (size_t i = 0; i < db.size(); ++i) {
            rhs += double(d.b[i]) * db[i];
            abs2 += std::fabs(double(d.b[i]) * db[i]);
        }
        EXPECT_NEAR(lhs, rhs, kRelTol * (abs1 + abs2)) << "edge mode " << edge;
    }
}

// Full-image geometry: the forward clip covers its whole output, the data gradient the whole source.
std::vector<ConvCase> adjointCases() {
    auto full = [](const std::string& name, const std::function<void(ConvCase&)>& edit) {
        return makeConvCase(name, [&](ConvCase& c) {
            edit(c);
            c.neuron = kNeuronNone;
            c.pre = false;
        });
    };
    std::vector<ConvCase> v;
    v.push_back(full("Same3x3", [](ConvCase&) {}));
    v.push_back(full("Stride2", [](ConvCase& c) { c.sX = c.sY = 2; c.srcW = 11; c.srcH = 9; }));
    v.push_back(full("Stride2Dilation2Kernel4x4", [](ConvCase& c) {
        c.sX = c.sY = 2; c.dX = c.dY = 2; c.kW = c.kH = 4; c.winLeft = c.winTop = -3; c.srcW = 12; c.srcH = 10;
    }));
    v.push_back(full("Stride3Kernel2x2", [](ConvCase& c) {
        c.sX = c.sY = 3; c.kW = c.kH = 2; c.winLeft = c.winTop = 0; c.srcW = 12; c.srcH = 9;
    }));
    v.push_back(full("ValidKernel5x3Stride2x1", [](ConvCase& c) {
        c.kW = 5; c.kH = 3; c.sX = 2; c.sY = 1; c.winLeft = 0; c.winTop = 0; c.srcW = 13; c.srcH = 7;
        c.clipW = 5; c.clipH = 5;
    }));
    v.push_back(full("Groups2Batch3ChannelOffsets", [](ConvCase& c) {
        c.batch = 3; c.inC = 8; c.outC = 12; c.groups = 2; c.srcChanOffset = 4; c.srcTotalC = 13;
        c.dstChanOffset = 4; c.dstTotalC = 17; c.sX = 2;
    }));
    v.push_back(full("Depthwise5x5", [](ConvCase& c) {
        c.inC = c.outC = c.groups = 6; c.kW = c.kH = 5; c.winLeft = c.winTop = -2; c.sX = c.sY = 2;
        c.srcW = 10; c.srcH = 9;
    }));
    v.push_back(full("FullyConnectedLike", [](ConvCase& c) {
        c.batch = 3; c.inC = 6; c.outC = 20; c.srcW = 5; c.srcH = 4; c.kW = 5; c.kH = 4;
        c.winLeft = c.winTop = 0; c.clipW = c.clipH = 1;
    }));
    v.push_back(full("Kernel1x1Stride2OddChannels", [](ConvCase& c) {
        c.kW = c.kH = 1; c.winLeft = c.winTop = 0; c.sX = c.sY = 2; c.inC = 3; c.outC = 5;
    }));
    return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuConvolutionAdjoint, ::testing::ValuesIn(adjointCases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// ---- argument validation ----------------------------------------------------------------------

TEST(CpuConvolutionValidation, RejectsBadGeometry) {
    const ConvCase c = makeConvCase("Bad", [](ConvCase&) {});
    const ConvData d = makeConvData(c, 1100);
    ConvolutionParams p = forwardParams(c);
    std::vector<float> y(bufferSize(p.destination, c.batch));
    p.groups = 3;  // does not divide 4 input channels
    EXPECT_THROW(cpu::convolutionForward(p, d.x.data(), d.w.data(), d.b.data(), nullptr, y.data(), nullptr),
                 std::invalid_argument);
    p = forwardParams(c);
    p.clipX = 1;  // clip rect leaves the destination
    EXPECT_THROW(cpu::convolutionForward(p, d.x.data(), d.w.data(), d.b.data(), nullptr, y.data(), nullptr),
                 std::invalid_argument);
    p = forwardParams(c);
    p.strideX = 0;
    EXPECT_THROW(cpu::convolutionForward(p, d.x.data(), d.w.data(), d.b.data(), nullptr, y.data(), nullptr),
                 std::invalid_argument);
}

}  // namespace
