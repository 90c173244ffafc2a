// The Metal backend's ops (cpp/mpsgrad/backend/metal, metal/*.metal) against the CPU backend's
// compute functions (cpp/mpsgrad/backend/cpu/cpu_ops.h), plus the backend's own machinery:
// buffer pool, pipeline cache, command-buffer errors. Runs wherever the build has Metal: on Apple
// GPUs, and on Linux in the emulation build (MPSGRAD_METAL_EMULATION), where the fake device runs
// the translated kernels and the harness hooks (tests/metal_emulation) inject failures.
//
// Both backends start from the same buffers (destinations pre-filled with noise), so elements an
// op must not write are compared bit for bit. Written elements are compared with
//     |metal - cpu| <= 2e-5 * (L * sum|terms| + |expected|)
// the same scale-aware bound as test_cpu_convolution.cpp (each backend is within 1e-5 of the
// double reference there; here 2e-5 covers both, and the GPU's fast math).
#ifdef MPSGRAD_HAS_METAL

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/metal/metal_backend.h"
#include "backend/metal/metal_utility.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "convolution_scenarios.h"
#include "reference_convolution.h"

#ifdef MPSGRAD_METAL_EMULATION
#include <mtlemu/mtlemu.h>
#endif

namespace {

using namespace mpsgrad;
using namespace mpsgrad::testconv;
namespace ref = mpsgrad::testref;

constexpr double kRelTol = 2e-5;

// ---- plumbing ----------------------------------------------------------------------------------

bool metalAvailable() {
    for (const auto& name : Device::availableDevices())
        if (name == "metal") return true;
    return false;
}

#define REQUIRE_METAL()                                                                     \
    do {                                                                                    \
        if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason(); \
    } while (0)

Device metalDevice() { return Device("metal"); }

// Device memory holding `data` at `offsetFloats` floats into its buffer (offsets that are not
// multiples of 4 floats exercise the backend's realignment of image bindings).
BufferSlice upload(Backend& backend, const std::vector<float>& data, size_t offsetFloats = 0) {
    auto buffer = backend.newBuffer((data.size() + offsetFloats) * sizeof(float));
    std::memcpy(static_cast<float*>(buffer->contents()) + offsetFloats, data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, offsetFloats * sizeof(float)};
}

std::vector<float> download(const BufferSlice& slice, size_t count) {
    const float* p = slice.floats();
    return std::vector<float>(p, p + count);
}

// Encodes with `encode`, commits, waits; the command buffer must complete.
void runOnMetal(const std::function<void(Backend&, CommandBuffer&)>& encode) {
    Device device = metalDevice();
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    encode(device.backend(), *cb);
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
}

// Metal's result against the CPU's: written elements within the scale-aware bound around the
// CPU value, unwritten ones bit-identical to `before` in both.
void expectClose(const std::vector<float>& metal, const std::vector<float>& cpu, const std::vector<float>& before,
                 const ref::Expected& ex, double lipschitz, const std::string& what) {
    ASSERT_EQ(metal.size(), cpu.size()) << what;
    int failures = 0;
    size_t written = 0;
    for (size_t i = 0; i < metal.size() && failures < 6; ++i) {
        if (ex.written[i]) {
            ++written;
            const double tol = kRelTol * (lipschitz * ex.magnitude[i] + std::fabs(ex.value[i])) + 1e-30;
            const double err = std::fabs(double(metal[i]) - double(cpu[i]));
            if (!(err <= tol))
                ++failures, ADD_FAILURE() << what << ": element " << i << ": metal " << metal[i] << ", cpu " << cpu[i]
                                          << " (error " << err << ", tolerance " << tol << ")";
        } else if (std::memcmp(&metal[i], &before[i], sizeof(float)) != 0) {
            ++failures, ADD_FAILURE() << what << ": element " << i << " must stay " << before[i] << " but is "
                                      << metal[i];
        }
    }
    EXPECT_EQ(failures, 0) << what;
    EXPECT_GT(written, 0u) << what << ": nothing written (bad test case)";
}

// ---- convolution cases -------------------------------------------------------------------------

// The shared scenarios plus Metal's own (binding misalignment, the weight gradient's split
// reduction, stride/dilation phases of the data gradient kernels).
std::vector<ConvCase> convCases() {
    std::vector<ConvCase> v = sharedConvCases();
    v.push_back(makeConvCase("Stride2Dilation3", [](ConvCase& c) {  // gcd(dilation, stride) = 1
        c.sX = c.sY = 2; c.dX = c.dY = 3; c.winLeft = c.winTop = -3; c.srcW = 10; c.srcH = 9;
    }));
    v.push_back(makeConvCase("Stride4Dilation2", [](ConvCase& c) {  // gcd 2: half the phases have no taps
        c.sX = c.sY = 4; c.dX = c.dY = 2; c.kW = c.kH = 4; c.winLeft = c.winTop = -3; c.srcW = 13; c.srcH = 12;
    }));
    v.push_back(makeConvCase("Kernel5x3", [](ConvCase& c) { c.kW = 5; c.kH = 3; c.winLeft = -2; }));
    v.push_back(makeConvCase("ClipNotAtOrigin", [](ConvCase& c) {
        c.clipX = 3; c.clipY = 2; c.clipW = 4; c.clipH = 3; c.dstW = 9; c.dstH = 7;
    }));
    v.push_back(makeConvCase("OddChannels7to13Stride2", [](ConvCase& c) { c.inC = 7; c.outC = 13; c.sX = 2; }));
    v.push_back(makeConvCase("ManyChannels", [](ConvCase& c) {  // several channel tiles, several k slices
        c.inC = 36; c.outC = 44; c.srcW = 6; c.srcH = 5; c.sX = 2;
    }));
    v.push_back(makeConvCase("SigmoidPreactivationClip", [](ConvCase& c) {
        c.neuron = kNeuronSigmoid; c.pre = true; c.clipX = 1; c.clipY = 2; c.dstW = 10; c.dstH = 9;
    }));
    v.push_back(makeConvCase("PReLUDepthwiseBatch2", [](ConvCase& c) {
        c.neuron = kNeuronPReLU; c.inC = c.outC = c.groups = 5; c.batch = 2;
    }));
    v.push_back(makeConvCase("DataGradientShiftedWindowStride3x2", [](ConvCase& c) {
        c.sX = 3; c.sY = 2; c.srcW = 11; c.dgShiftX = -1; c.dgShiftY = 3;
    }));
    v.push_back(makeConvCase("MisalignedBindings1", [](ConvCase& c) { c.misalign = 1; c.inC = 8; c.outC = 8; }));
    v.push_back(makeConvCase("MisalignedBindings3Depthwise", [](ConvCase& c) {
        c.misalign = 3; c.inC = c.outC = c.groups = 8; c.pre = true; c.neuron = kNeuronReLU;
    }));
    // Enough pixels and few enough dW tiles that the weight gradient splits its reduction
    // across threadgroups (partial sums per slice, then summed in slice order).
    v.push_back(makeConvCase("WeightGradientSplitOddRows", [](ConvCase& c) {
        c.batch = 2; c.inC = 3; c.outC = 5; c.srcW = 24; c.srcH = 20; c.misalign = 1;
    }));
    v.push_back(makeConvCase("WeightGradientSplitAligned", [](ConvCase& c) {
        c.batch = 2; c.inC = 8; c.outC = 8; c.srcW = 16; c.srcH = 16; c.neuron = kNeuronReLU;
    }));
    v.push_back(makeConvCase("Everything", [](ConvCase& c) {
        c.batch = 2; c.inC = 12; c.outC = 18; c.groups = 3; c.kW = 4; c.kH = 3; c.sX = 2; c.sY = 3;
        c.dX = 2; c.dY = 1; c.winLeft = -3; c.winTop = -1; c.srcW = 13; c.srcH = 11;
        c.clipX = 2; c.clipY = 1; c.clipW = 5; c.clipH = 3; c.dstW = 9; c.dstH = 6;
        c.srcChanOffset = 4; c.srcTotalC = 17; c.dstChanOffset = 4; c.dstTotalC = 23;
        c.edge = kEdgeClamp; c.neuron = kNeuronTanH; c.na = 1.0f; c.nb = 0.5f; c.pre = true; c.dgShiftX = 1;
        c.misalign = 2;
    }));
    return v;
}

class MetalConvolution : public ::testing::TestWithParam<ConvCase> {};

TEST_P(MetalConvolution, ForwardMatchesCpu) {
    REQUIRE_METAL();
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 100);
    const ConvolutionParams p = forwardParams(c);
    const std::vector<float> dstBefore = randomVector(bufferSize(p.destination, c.batch), 7, 10, 20);
    const std::vector<float> preBefore = randomVector(bufferSize(p.preactivation, c.batch), 8, 10, 20);

    std::vector<float> cpuDst = dstBefore, cpuPre = preBefore;
    cpu::convolutionForward(p, d.x.data(), d.w.data(), c.bias ? d.b.data() : nullptr,
                            p.neuron.hasChannelData ? d.neuronData.data() : nullptr, cpuDst.data(),
                            c.pre ? cpuPre.data() : nullptr);

    BufferSlice dst, pre;
    runOnMetal([&](Backend& backend, CommandBuffer& cb) {
        dst = upload(backend, dstBefore, c.misalign);
        pre = upload(backend, preBefore, c.misalign);
        backend.convolutionForward(cb, p, upload(backend, d.x, c.misalign), upload(backend, d.w, c.misalign),
                                   c.bias ? upload(backend, d.b, c.misalign) : BufferSlice{},
                                   p.neuron.hasChannelData ? upload(backend, d.neuronData) : BufferSlice{}, dst,
                                   c.pre ? pre : BufferSlice{});
    });

    ref::Expected exDst(cpuDst.size()), exPre(cpuPre.size());
    ref::forward(p, d.x, d.w, d.b, d.neuronData, exDst, &exPre);
    double maxChannelA = 0.0;
    for (float a : d.neuronData) maxChannelA = std::fmax(maxChannelA, a);
    expectClose(download(dst, cpuDst.size()), cpuDst, dstBefore, exDst,
                ref::neuronLipschitz(c.neuron, c.na, c.nb, maxChannelA), "destination");
    if (c.pre)
        expectClose(download(pre, cpuPre.size()), cpuPre, preBefore, exPre, 1.0, "preactivation");
    else
        EXPECT_EQ(download(pre, preBefore.size()), preBefore);
}

TEST_P(MetalConvolution, DataGradientMatchesCpu) {
    REQUIRE_METAL();
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 200);
    const ConvolutionDataGradientParams p = dataGradientParams(c);
    const std::vector<float> before = randomVector(bufferSize(p.destination, c.batch), 9, 10, 20);

    std::vector<float> cpuDx = before;
    cpu::convolutionDataGradient(p, d.e.data(), d.w.data(), nullptr, cpuDx.data());

    BufferSlice dx;
    runOnMetal([&](Backend& backend, CommandBuffer& cb) {
        dx = upload(backend, before, c.misalign);
        backend.convolutionDataGradient(cb, p, upload(backend, d.e, c.misalign), upload(backend, d.w, c.misalign),
                                        BufferSlice{}, dx);
    });

    ref::Expected ex(cpuDx.size());
    ref::dataGradient(p, d.e, d.w, ex);
    expectClose(download(dx, cpuDx.size()), cpuDx, before, ex, 1.0, "dX");
}

TEST_P(MetalConvolution, WeightAndBiasGradientsMatchCpu) {
    REQUIRE_METAL();
    const ConvCase& c = GetParam();
    const ConvData d = makeConvData(c, 300);
    for (int accumulate = 0; accumulate < 2; ++accumulate) {
        ConvolutionWeightGradientParams p = weightGradientParams(c);
        p.accumulate = accumulate;
        const std::vector<float> wBefore = randomVector(c.weightCount(), 11, 10, 20);
        const std::vector<float> bBefore = randomVector(size_t(c.outC), 12, 10, 20);

        std::vector<float> cpuW = wBefore, cpuB = bBefore;
        cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), cpuW.data(), cpuB.data());

        BufferSlice dw, db;
        runOnMetal([&](Backend& backend, CommandBuffer& cb) {
            dw = upload(backend, wBefore, c.misalign);
            db = upload(backend, bBefore, c.misalign);
            backend.convolutionWeightGradient(cb, p, upload(backend, d.e, c.misalign), upload(backend, d.x, c.misalign),
                                              dw, db);
        });

        ref::Expected exW(cpuW.size()), exB(cpuB.size());
        ref::weightGradient(p, d.e, d.x, wBefore, bBefore, exW, exB);
        const std::string tag = accumulate ? " (accumulate)" : "";
        expectClose(download(dw, cpuW.size()), cpuW, wBefore, exW, 1.0, "dW" + tag);
        expectClose(download(db, cpuB.size()), cpuB, bBefore, exB, 1.0, "dB" + tag);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, MetalConvolution, ::testing::ValuesIn(convCases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// computeWeights / computeBiases each alone write only their own buffer.
TEST(MetalConvolutionFlags, WeightsOnlyAndBiasesOnly) {
    REQUIRE_METAL();
    const ConvCase c = makeConvCase("flags", [](ConvCase& k) { k.inC = 8; k.outC = 8; });
    const ConvData d = makeConvData(c, 500);
    for (int which = 0; which < 2; ++which) {
        ConvolutionWeightGradientParams p = weightGradientParams(c);
        p.computeWeights = which == 0;
        p.computeBiases = which == 1;
        const std::vector<float> wBefore = randomVector(c.weightCount(), 13, 10, 20);
        const std::vector<float> bBefore = randomVector(size_t(c.outC), 14, 10, 20);
        std::vector<float> cpuW = wBefore, cpuB = bBefore;
        cpu::convolutionWeightGradient(p, d.e.data(), d.x.data(), cpuW.data(), cpuB.data());
        BufferSlice dw, db;
        runOnMetal([&](Backend& backend, CommandBuffer& cb) {
            dw = upload(backend, wBefore);
            db = upload(backend, bBefore);
            backend.convolutionWeightGradient(cb, p, upload(backend, d.e), upload(backend, d.x),
                                              p.computeWeights ? dw : BufferSlice{}, p.computeBiases ? db : BufferSlice{});
        });
        ref::Expected exW(cpuW.size()), exB(cpuB.size());
        ref::weightGradient(p, d.e, d.x, wBefore, bBefore, exW, exB);
        if (p.computeWeights) {
            expectClose(download(dw, cpuW.size()), cpuW, wBefore, exW, 1.0, "dW");
            EXPECT_EQ(download(db, bBefore.size()), bBefore);
        } else {
            expectClose(download(db, cpuB.size()), cpuB, bBefore, exB, 1.0, "dB");
            EXPECT_EQ(download(dw, wBefore.size()), wBefore);
        }
    }
}

// Gradients are reproducible bit for bit: the reductions have a fixed order.
TEST(MetalConvolutionDeterminism, GradientsAreBitwiseReproducible) {
    REQUIRE_METAL();
    const ConvCase c = makeConvCase("determinism", [](ConvCase& k) {
        k.batch = 2; k.inC = 8; k.outC = 12; k.srcW = 9; k.srcH = 8; k.sX = 2;
    });
    const ConvData d = makeConvData(c, 600);
    const ConvolutionWeightGradientParams wp = weightGradientParams(c);
    const ConvolutionDataGradientParams dp = dataGradientParams(c);
    auto run = [&] {
        BufferSlice dw, db, dx;
        runOnMetal([&](Backend& backend, CommandBuffer& cb) {
            dw = upload(backend, std::vector<float>(c.weightCount(), 0.0f));
            db = upload(backend, std::vector<float>(size_t(c.outC), 0.0f));
            dx = upload(backend, std::vector<float>(bufferSize(dp.destination, c.batch), 0.0f));
            BufferSlice e = upload(backend, d.e);
            backend.convolutionWeightGradient(cb, wp, e, upload(backend, d.x), dw, db);
            backend.convolutionDataGradient(cb, dp, e, upload(backend, d.w), BufferSlice{}, dx);
        });
        std::vector<float> all = download(dw, c.weightCount());
        for (float v : download(db, size_t(c.outC))) all.push_back(v);
        for (float v : download(dx, bufferSize(dp.destination, c.batch))) all.push_back(v);
        return all;
    };
    const std::vector<float> first = run();
    const std::vector<float> second = run();
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

// Ops encoded into one command buffer run in order: a forward pass feeding its neuron and the
// neuron's gradient feeding the data gradient, each reading what the previous one wrote.
TEST(MetalOrdering, ChainedOpsInOneCommandBufferSeeEachOthersWrites) {
    REQUIRE_METAL();
    const ConvCase c = makeConvCase("chain", [](ConvCase& k) { k.inC = 4; k.outC = 4; });
    const ConvData d = makeConvData(c, 700);
    ConvolutionParams fp = forwardParams(c);
    fp.hasBias = 0;
    NeuronForwardParams np{};
    np.source = fp.destination;
    np.destination = fp.destination;
    np.batch = c.batch;
    np.clipWidth = c.clipW;
    np.clipHeight = c.clipH;
    np.neuron.type = kNeuronTanH;
    np.neuron.a = 1.0f;
    np.neuron.b = 1.0f;
    const size_t ySize = bufferSize(fp.destination, c.batch);

    std::vector<float> cpuY(ySize, 0.0f), cpuZ(ySize, 0.0f);
    cpu::convolutionForward(fp, d.x.data(), d.w.data(), nullptr, nullptr, cpuY.data(), nullptr);
    cpu::cnnNeuronForward(np, cpuY.data(), nullptr, cpuZ.data());

    BufferSlice z;
    runOnMetal([&](Backend& backend, CommandBuffer& cb) {
        BufferSlice y = upload(backend, std::vector<float>(ySize, 0.0f));
        z = upload(backend, std::vector<float>(ySize, 0.0f));
        backend.convolutionForward(cb, fp, upload(backend, d.x), upload(backend, d.w), {}, {}, y, {});
        backend.neuronForward(cb, np, y, {}, z);
    });
    const std::vector<float> got = download(z, ySize);
    for (size_t i = 0; i < ySize; ++i) ASSERT_NEAR(got[i], cpuZ[i], 1e-5) << i;
}

// ---- neuron ops --------------------------------------------------------------------------------

struct NeuronCase {
    std::string name;
    int type;
    float a = 1.0f, b = 0.0f, c = 1.0f;
    float lo = -2.0f, hi = 2.0f;  // input range (kept away from each formula's singularities)
};

std::ostream& operator<<(std::ostream& os, const NeuronCase& c) { return os << c.name; }

std::vector<NeuronCase> neuronCases() {
    return {
        {"None", kNeuronNone},
        {"ReLU", kNeuronReLU, 0.1f},
        {"Linear", kNeuronLinear, 1.5f, -0.25f},
        {"Sigmoid", kNeuronSigmoid},
        {"HardSigmoid", kNeuronHardSigmoid, 0.2f, 0.5f},
        {"TanH", kNeuronTanH, 1.2f, 0.8f},
        {"Absolute", kNeuronAbsolute},
        {"SoftPlus", kNeuronSoftPlus, 1.1f, 0.9f},
        {"SoftSign", kNeuronSoftSign},
        {"ELU", kNeuronELU, 0.7f},
        {"PReLU", kNeuronPReLU},
        {"ReLUN", kNeuronReLUN, 0.1f, 1.0f},
        {"Power", kNeuronPower, 0.5f, 2.5f, 2.0f, -2.0f, 2.0f},
        {"Exponential", kNeuronExponential, 0.5f, 0.1f, -1.0f},
        {"ExponentialBase2", kNeuronExponential, 0.5f, 0.1f, 2.0f},
        {"Logarithm", kNeuronLogarithm, 0.5f, 2.0f, -1.0f},
        {"LogarithmBase10", kNeuronLogarithm, 0.5f, 2.0f, 10.0f},
        {"GeLU", kNeuronGeLU, 1.0f, 0.0f, 1.0f, -4.0f, 4.0f},
    };
}

// Geometry shared by the neuron tests: channel slices inside wider pixels, an input read at an
// offset partly off the image (edge modes), a clip rectangle inside the destination.
struct NeuronGeometry {
    int channels;
    int batch = 2;
    ImageLayout source, gradient, destination;
    int sourceX = -1, sourceY = 1, gradientX = 1, gradientY = -1;
    int clipX = 1, clipY = 1, clipW = 6, clipH = 4;
};

NeuronGeometry neuronGeometry(int channels, int channelOffset) {
    NeuronGeometry g;
    g.channels = channels;
    g.source = makeLayout(6, 5, channelOffset + channels + 3, channelOffset, channels);
    g.gradient = makeLayout(7, 4, channels, 0, channels);
    g.destination = makeLayout(8, 6, channelOffset + channels, channelOffset, channels);
    return g;
}

class MetalNeuron : public ::testing::TestWithParam<NeuronCase> {};

void expectNear(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what) {
    ASSERT_EQ(metal.size(), cpu.size());
    int failures = 0;
    for (size_t i = 0; i < metal.size() && failures < 6; ++i) {
        const bool same = std::memcmp(&metal[i], &cpu[i], sizeof(float)) == 0;
        const double tol = 2e-5 * std::fabs(double(cpu[i])) + 2e-6;
        if (!same && !(std::fabs(double(metal[i]) - double(cpu[i])) <= tol))
            ++failures, ADD_FAILURE() << what << ": element " << i << ": metal " << metal[i] << ", cpu " << cpu[i];
    }
    EXPECT_EQ(failures, 0) << what;
}

TEST_P(MetalNeuron, ForwardAndGradientMatchCpu) {
    REQUIRE_METAL();
    const NeuronCase& nc = GetParam();
    for (int channels : {3, 8}) {
        for (int edge : {int(kEdgeZero), int(kEdgeClamp)}) {
            const NeuronGeometry g = neuronGeometry(channels, channels == 8 ? 4 : 2);
            const std::string what = nc.name + " C=" + std::to_string(channels) + (edge ? " clamp" : " zero");
            const std::vector<float> x = randomVector(bufferSize(g.source, g.batch), 21, nc.lo, nc.hi);
            const std::vector<float> e = randomVector(bufferSize(g.gradient, g.batch), 22);
            const std::vector<float> slopes = randomVector(size_t(channels) + 5, 23, 0.05f, 0.5f);
            const std::vector<float> before = randomVector(bufferSize(g.destination, g.batch), 24, 10, 20);

            NeuronParams neuron{nc.type, nc.a, nc.b, nc.c, nc.type == kNeuronPReLU ? 1 : 0};
            NeuronForwardParams fp{};
            fp.source = g.source;
            fp.destination = g.destination;
            fp.batch = g.batch;
            fp.sourceX = g.sourceX;
            fp.sourceY = g.sourceY;
            fp.clipX = g.clipX;
            fp.clipY = g.clipY;
            fp.clipWidth = g.clipW;
            fp.clipHeight = g.clipH;
            fp.edgeMode = edge;
            fp.neuronDataOffset = 5;
            fp.neuron = neuron;
            NeuronGradientParams gp{};
            gp.gradient = g.gradient;
            gp.source = g.source;
            gp.destination = g.destination;
            gp.batch = g.batch;
            gp.gradientX = g.gradientX;
            gp.gradientY = g.gradientY;
            gp.sourceX = g.sourceX;
            gp.sourceY = g.sourceY;
            gp.clipX = g.clipX;
            gp.clipY = g.clipY;
            gp.clipWidth = g.clipW;
            gp.clipHeight = g.clipH;
            gp.gradientEdgeMode = edge;
            gp.sourceEdgeMode = kEdgeClamp - edge;
            gp.neuronDataOffset = 5;
            gp.neuron = neuron;

            std::vector<float> cpuY = before, cpuDx = before;
            cpu::cnnNeuronForward(fp, x.data(), slopes.data(), cpuY.data());
            cpu::cnnNeuronGradient(gp, e.data(), x.data(), slopes.data(), cpuDx.data());

            BufferSlice y, dx;
            runOnMetal([&](Backend& backend, CommandBuffer& cb) {
                y = upload(backend, before, 1);
                dx = upload(backend, before);
                BufferSlice xs = upload(backend, x, 2), data = upload(backend, slopes);
                backend.neuronForward(cb, fp, xs, data, y);
                backend.neuronGradient(cb, gp, upload(backend, e, 3), xs, data, dx);
            });
            expectNear(download(y, before.size()), cpuY, what + " forward");
            expectNear(download(dx, before.size()), cpuDx, what + " gradient");
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MetalNeuron, ::testing::ValuesIn(neuronCases()),
                         [](const ::testing::TestParamInfo<NeuronCase>& info) { return info.param.name; });

// ---- utility ops -------------------------------------------------------------------------------

TEST(MetalUtility, CopyBufferMatchesMemmove) {
    REQUIRE_METAL();
    const std::vector<float> data = randomVector(64, 31);
    struct Copy {
        size_t from, to, floats;
    };
    // Disjoint ranges, then overlapping ranges of one buffer (forwards and backwards).
    for (const Copy& copy : {Copy{0, 40, 20}, Copy{3, 9, 30}, Copy{20, 5, 33}}) {
        std::vector<float> expected = data;
        std::memmove(expected.data() + copy.to, expected.data() + copy.from, copy.floats * sizeof(float));
        BufferSlice buffer;
        runOnMetal([&](Backend& backend, CommandBuffer& cb) {
            buffer = upload(backend, data);
            backend.copyBuffer(cb, buffer.advancedBy(copy.from * 4), buffer.advancedBy(copy.to * 4), copy.floats * 4);
        });
        EXPECT_EQ(download(buffer, data.size()), expected) << copy.from << " -> " << copy.to;
    }
}

TEST(MetalUtility, FillCopyAndChannelCopy) {
    REQUIRE_METAL();
    const std::vector<float> data = randomVector(50, 32);
    ChannelCopyParams cp{};
    cp.source = makeLayout(5, 3, 9, 2, 6);
    cp.destination = makeLayout(5, 3, 11, 4, 6);
    cp.batch = 2;
    const std::vector<float> image = randomVector(bufferSize(cp.source, 2), 33);
    const std::vector<float> before = randomVector(bufferSize(cp.destination, 2), 34, 10, 20);
    std::vector<float> expected = before;
    for (int n = 0; n < 2; ++n)
        for (int p = 0; p < 15; ++p)
            for (int c = 0; c < 6; ++c)
                expected[size_t(n * cp.destination.imageStride + p * cp.destination.pixelStride + 4 + c)] =
                    image[size_t(n * cp.source.imageStride + p * cp.source.pixelStride + 2 + c)];

    BufferSlice filled, copied, channels;
    runOnMetal([&](Backend& backend, CommandBuffer& cb) {
        filled = upload(backend, data, 1);
        copied = upload(backend, std::vector<float>(data.size(), 0.0f), 2);
        channels = upload(backend, before, 3);
        metalFill(backend, cb, filled.advancedBy(4), 45, 2.5f);
        metalCopyFloats(backend, cb, upload(backend, data), copied, data.size());
        metalCopyChannels(backend, cb, cp, upload(backend, image, 1), channels);
    });
    std::vector<float> expectedFill = data;
    for (size_t i = 1; i < 46; ++i) expectedFill[i] = 2.5f;
    EXPECT_EQ(download(filled, data.size()), expectedFill);
    EXPECT_EQ(download(copied, data.size()), data);
    EXPECT_EQ(download(channels, before.size()), expected);
}

// ---- backend machinery -------------------------------------------------------------------------

TEST(MetalBackend, FreedBuffersAreReusedAndZeroed) {
    REQUIRE_METAL();
    Backend& backend = metalDevice().backend();
    metalTrimBufferPool(backend);
    const MetalBackendStats start = metalBackendStats(backend);
    {
        auto buffer = backend.newBuffer(1000);
        std::memset(buffer->contents(), 0x7F, 1000);
    }
    EXPECT_EQ(metalBackendStats(backend).pooledBuffers, 1u);
    // Same bucket (1 KiB), or the same size when MPSGRAD_METAL_EXACT_BUFFERS sizes buffers exactly.
    const char* exact = std::getenv("MPSGRAD_METAL_EXACT_BUFFERS");
    auto again = backend.newBuffer(exact && *exact && *exact != '0' ? 1000 : 900);
    const MetalBackendStats after = metalBackendStats(backend);
    EXPECT_EQ(after.buffersReused, start.buffersReused + 1);
    EXPECT_EQ(after.buffersCreated, start.buffersCreated + 1);
    const auto* bytes = static_cast<const unsigned char*>(again->contents());
    for (size_t i = 0; i < again->length(); ++i) ASSERT_EQ(bytes[i], 0) << i;
}

// One pipeline per (kernel, function constants): a repeated op builds nothing new, another
// neuron type is another specialisation.
TEST(MetalBackend, PipelinesAreCachedPerFunctionConstants) {
    REQUIRE_METAL();
    Backend& backend = metalDevice().backend();
    const ImageLayout l = makeLayout(4, 3, 4, 0, 4);
    auto encode = [&](int type) {
        NeuronForwardParams p{};
        p.source = p.destination = l;
        p.batch = 1;
        p.clipWidth = 4;
        p.clipHeight = 3;
        p.neuron.type = type;
        p.neuron.a = 1.0f;
        runOnMetal([&](Backend& b, CommandBuffer& cb) {
            b.neuronForward(cb, p, upload(b, std::vector<float>(48, 1.0f)), {}, upload(b, std::vector<float>(48, 0.0f)));
        });
    };
    encode(kNeuronSigmoid);
    const size_t built = metalBackendStats(backend).pipelines;
    encode(kNeuronSigmoid);
    EXPECT_EQ(metalBackendStats(backend).pipelines, built);
    encode(kNeuronSoftSign);
    EXPECT_EQ(metalBackendStats(backend).pipelines, built + 1);
}

TEST(MetalErrors, UnknownKernelIsAMetalErrorNamingIt) {
    REQUIRE_METAL();
    Backend& backend = metalDevice().backend();
    try {
        metalPreparePipeline(backend, "no_such_kernel");
        FAIL() << "expected MetalError";
    } catch (const MetalError& e) {
        EXPECT_NE(std::string(e.what()).find("'no_such_kernel'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("kernel library"), std::string::npos) << e.what();
    }
    // The failure is not cached: it is reported again, the same way.
    EXPECT_THROW(metalPreparePipeline(backend, "no_such_kernel"), MetalError);
}

TEST(MetalErrors, BadBindingsAreValueErrorsAtEncodeTime) {
    REQUIRE_METAL();
    Device device = metalDevice();
    Backend& backend = device.backend();
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    const ConvCase c = makeConvCase("bad", [](ConvCase&) {});
    const ConvolutionParams p = forwardParams(c);
    const ConvData d = makeConvData(c, 800);
    BufferSlice x = upload(backend, d.x), w = upload(backend, d.w), b = upload(backend, d.b);
    BufferSlice y = upload(backend, std::vector<float>(bufferSize(p.destination, 1), 0.0f));
    // Weights one output channel short.
    BufferSlice shortW = upload(backend, std::vector<float>(d.w.size() - 36, 0.0f));
    EXPECT_THROW(backend.convolutionForward(*cb, p, x, shortW, b, {}, y, {}), ValueError);
    // A missing destination.
    EXPECT_THROW(backend.convolutionForward(*cb, p, x, w, b, {}, {}, {}), ValueError);
    // Groups that do not divide the channels.
    ConvolutionParams badGroups = p;
    badGroups.groups = 3;
    EXPECT_THROW(backend.convolutionForward(*cb, badGroups, x, w, b, {}, y, {}), ValueError);
    // A clip rectangle outside the destination.
    ConvolutionParams badClip = p;
    badClip.clipX = 2;
    EXPECT_THROW(backend.convolutionForward(*cb, badClip, x, w, b, {}, y, {}), ValueError);
    // A buffer of the CPU device.
    BufferSlice cpuX{Device("cpu").backend().newBuffer(d.x.size() * 4), 0};
    EXPECT_THROW(backend.convolutionForward(*cb, p, cpuX, w, b, {}, y, {}), ValueError);
    // None of these encoded anything: the command buffer still runs (empty) to completion.
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
}

TEST(MetalErrors, EncodingIntoACommittedBufferOrAnotherDevicesBufferThrows) {
    REQUIRE_METAL();
    Device device = metalDevice();
    Backend& backend = device.backend();
    BufferSlice a = upload(backend, std::vector<float>(16, 1.0f)), b = upload(backend, std::vector<float>(16, 0.0f));

    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    cb->commit();
    EXPECT_THROW(backend.copyBuffer(*cb, a, b, 64), CommandBufferError);
    cb->waitUntilCompleted();

    CommandQueue cpuQueue{Device("cpu")};
    auto cpuCb = cpuQueue.commandBuffer();
    EXPECT_THROW(backend.copyBuffer(*cpuCb, a, b, 64), ValueError);
}

#ifdef MPSGRAD_METAL_EMULATION
// A command buffer that fails on the device reports Metal's description through status() and
// error(), runs its completed handlers, and leaves later command buffers unaffected.
TEST(MetalErrors, FailingCommandBufferIsReportedNotFatal) {
    REQUIRE_METAL();
    Device device = metalDevice();
    Backend& backend = device.backend();
    BufferSlice a = upload(backend, std::vector<float>(16, 1.0f)), b = upload(backend, std::vector<float>(16, 0.0f));
    CommandQueue queue(device);

    auto failing = queue.commandBuffer();
    backend.copyBuffer(*failing, a, b, 64);
    bool handlerRan = false;
    CommandBufferStatus seen = CommandBufferStatus::NotEnqueued;
    failing->addCompletedHandler([&](CommandBuffer& done) {
        handlerRan = true;
        seen = done.status();
    });
    mtlemu::failNextCommandBuffer("injected GPU fault (test)");
    failing->commit();
    failing->waitUntilCompleted();
    EXPECT_EQ(failing->status(), CommandBufferStatus::Error);
    EXPECT_NE(failing->error().find("injected GPU fault (test)"), std::string::npos) << failing->error();
    EXPECT_TRUE(handlerRan);
    EXPECT_EQ(seen, CommandBufferStatus::Error);
    EXPECT_EQ(download(b, 16), std::vector<float>(16, 0.0f));  // its commands did not run

    auto next = queue.commandBuffer();
    backend.copyBuffer(*next, a, b, 64);
    next->commit();
    next->waitUntilCompleted();
    EXPECT_EQ(next->status(), CommandBufferStatus::Completed) << next->error();
    EXPECT_EQ(download(b, 16), std::vector<float>(16, 1.0f));
}

// A missing barrier shows up as results that depend on the order the threads of a threadgroup
// run in: the emulation runs them last to first on request, which must give the same bits.
TEST(MetalConvolutionDeterminism, ThreadOrderDoesNotChangeResults) {
    REQUIRE_METAL();
    for (const ConvCase& c : convCases()) {
        if (c.name != "Everything" && c.name != "ManyChannels" && c.name != "DepthwiseDilated5x5") continue;
        const ConvData d = makeConvData(c, 1000);
        const ConvolutionParams fp = forwardParams(c);
        const ConvolutionDataGradientParams dp = dataGradientParams(c);
        const ConvolutionWeightGradientParams wp = weightGradientParams(c);
        auto run = [&] {
            BufferSlice y, pre, dx, dw, db;
            runOnMetal([&](Backend& backend, CommandBuffer& cb) {
                y = upload(backend, std::vector<float>(bufferSize(fp.destination, c.batch), 0.0f));
                pre = upload(backend, std::vector<float>(bufferSize(fp.preactivation, c.batch), 0.0f));
                dx = upload(backend, std::vector<float>(bufferSize(dp.destination, c.batch), 0.0f));
                dw = upload(backend, std::vector<float>(c.weightCount(), 0.0f));
                db = upload(backend, std::vector<float>(size_t(c.outC), 0.0f));
                BufferSlice x = upload(backend, d.x), w = upload(backend, d.w), e = upload(backend, d.e);
                backend.convolutionForward(cb, fp, x, w, upload(backend, d.b),
                                           fp.neuron.hasChannelData ? upload(backend, d.neuronData) : BufferSlice{},
                                           y, fp.writePreactivation ? pre : BufferSlice{});
                backend.convolutionDataGradient(cb, dp, e, w, BufferSlice{}, dx);
                backend.convolutionWeightGradient(cb, wp, e, x, dw, db);
            });
            std::vector<float> all;
            for (auto [slice, count] : {std::pair{y, bufferSize(fp.destination, c.batch)},
                                        std::pair{pre, bufferSize(fp.preactivation, c.batch)},
                                        std::pair{dx, bufferSize(dp.destination, c.batch)},
                                        std::pair{dw, c.weightCount()}, std::pair{db, size_t(c.outC)}})
                for (float v : download(slice, count)) all.push_back(v);
            return all;
        };
        const std::vector<float> forward = run();
        mtlemu::setReverseThreadOrder(true);
        const std::vector<float> reversed = run();
        mtlemu::setReverseThreadOrder(false);
        ASSERT_EQ(forward.size(), reversed.size());
        EXPECT_EQ(std::memcmp(forward.data(), reversed.data(), forward.size() * sizeof(float)), 0) << c.name;
    }
}

// Once the pool and the pipeline cache are warm, a whole encode-commit-wait cycle leaves no
// Objective-C object behind (every retain has its release).
TEST(MetalBackend, NoObjectsLeakAcrossACommandBufferCycle) {
    REQUIRE_METAL();
    const ConvCase c = makeConvCase("leak", [](ConvCase&) {});
    const ConvData d = makeConvData(c, 900);
    const ConvolutionParams p = forwardParams(c);
    auto cycle = [&] {
        runOnMetal([&](Backend& backend, CommandBuffer& cb) {
            BufferSlice y = upload(backend, std::vector<float>(bufferSize(p.destination, 1), 0.0f));
            backend.convolutionForward(cb, p, upload(backend, d.x), upload(backend, d.w), upload(backend, d.b), {}, y, {});
            backend.copyBuffer(cb, y, y.advancedBy(16), 32);
        });
    };
    cycle();
    const long live = mtlemu::liveObjectCount();
    cycle();
    cycle();
    EXPECT_EQ(mtlemu::liveObjectCount(), live);
}
#endif  // MPSGRAD_METAL_EMULATION

}  // namespace

#endif  // MPSGRAD_HAS_METAL
