// Every kernel of the optimizer and loss families (optimizer_update, loss_elements, loss_reduce,
// loss_scale_gradient) run on the Metal backend and compared with the CPU backend, through the
// backends' own ops, every binding offset by 0 or 1 float.
//
// These kernels read no function constants, so each has a single variant
// (tests/metal_emulation/coverage/kernel_variants.py); what varies is the params: every optimizer
// rule (SGD with and without momentum, Nesterov, RMSProp, Adam, AMSGrad) with clipping and each
// regularization, and every loss type under each reduction, with and without a weights image,
// across the batch or per image. Each case checks every output buffer (pre-filled with noise).
#ifdef MPSGRAD_HAS_METAL

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/metal/metal_backend.h"
#include "core/command_buffer.h"
#include "core/device.h"
#include "pooling_scenarios.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::download;
using testmetal::upload;

// Same bits, or within 1e-5 relative (1e-6 absolute): the backends may sum in other orders.
void expectMatches(const std::vector<float>& metal, const std::vector<float>& cpu, const std::string& what) {
    testmetal::expectMatches(metal, cpu, what, 1e-5, 1e-6);
}

using testpool::denseLayout;
using testpool::floatsOf;
using testpool::noise;

// Uploads `inputs` to `device` (binding i shifted by one float when bit i of mask is set), runs
// `encode` on them and returns every binding's contents afterwards.
using Encode = std::function<void(Backend&, CommandBuffer&, const std::vector<BufferSlice>&)>;
std::vector<std::vector<float>> runOn(const char* name, const std::vector<std::vector<float>>& inputs, unsigned mask,
                                      const Encode& encode) {
    Device device(name);
    CommandQueue queue(device);
    std::vector<BufferSlice> slices;
    for (size_t i = 0; i < inputs.size(); ++i) slices.push_back(upload(device.backend(), inputs[i], (mask >> i) & 1u));
    auto cb = queue.commandBuffer();
    encode(device.backend(), *cb, slices);
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < inputs.size(); ++i) out.push_back(download(slices[i], inputs[i].size()));
    return out;
}

void compareBackends(const std::vector<std::vector<float>>& inputs, unsigned mask, const Encode& encode,
                     const std::string& what) {
    auto metal = runOn("metal", inputs, mask, encode);
    auto cpu = runOn("cpu", inputs, mask, encode);
    for (size_t i = 0; i < inputs.size(); ++i)
        expectMatches(metal[i], cpu[i], what + ", binding " + std::to_string(i) + ", mask " + std::to_string(mask));
}

// Values in (lo, hi): probabilities for the log-based losses.
std::vector<float> uniform(size_t count, uint32_t seed, float lo, float hi) {
    std::vector<float> v = noise(count, seed);
    for (float& f : v) f = lo + (hi - lo) * (0.5f + 0.5f * std::tanh(f));
    return v;
}

// ---- optimizers -------------------------------------------------------------------------------

constexpr int kCount = 37;  // not a multiple of any SIMD width

OptimizerParams optimizerCase(int kind, int variant) {
    OptimizerParams p{};
    p.count = kCount;
    p.kind = kind;
    p.learningRate = 0.05f;
    p.gradientRescale = variant == 1 ? 0.5f : 1.0f;
    p.applyGradientClipping = variant >= 1;
    p.gradientClipMax = 0.8f, p.gradientClipMin = -0.6f;
    p.regularizationType = variant % 3;  // none, L1, L2
    p.regularizationScale = 0.01f;
    p.hasState0 = variant != 0 || kind != kOptimizerSGD;
    p.useNesterov = variant == 2;
    p.momentumScale = 0.9f;
    p.decay = 0.9f, p.beta1 = 0.9f, p.beta2 = 0.999f, p.epsilon = 1e-6f;
    p.amsgrad = kind == kOptimizerAdam && variant == 2;
    return p;
}

TEST(MetalVariantsOptimizers, EveryRuleAndAlignment) {
    REQUIRE_METAL();
    for (int kind : {kOptimizerSGD, kOptimizerRMSProp, kOptimizerAdam})
        for (int variant = 0; variant < 3; ++variant)
            for (unsigned mask : {0u, 0x7Fu, 0x55u, 0x2Au}) {
                const OptimizerParams p = optimizerCase(kind, variant);
                // Bindings: gradient, values, state0..2 (non-negative: squares), result.
                std::vector<std::vector<float>> inputs = {noise(kCount, 1), noise(kCount, 2),
                                                          noise(kCount, 3), uniform(kCount, 4, 0.0f, 1.0f),
                                                          uniform(kCount, 5, 0.0f, 1.0f), noise(kCount, 6)};
                compareBackends(inputs, mask, [&](Backend& b, CommandBuffer& cb, const std::vector<BufferSlice>& s) {
                    b.optimizerUpdate(cb, p, s[0], s[1], s[2], s[3], s[4], s[5]);
                }, "optimizer kind " + std::to_string(kind) + " variant " + std::to_string(variant));
            }
}

// ---- losses -----------------------------------------------------------------------------------

constexpr int kBatch = 2, kWidth = 5, kHeight = 3, kChannels = 6;

// loss_elements, then (reduced losses) loss_reduce and loss_scale_gradient, on one command buffer.
// Bindings: 0 source, 1 labels, 2 weights, 3 destination, 4 loss, 5 partials, 6 results.
// labelGradients: the destination receives dL/dt (NNLossGradient.computeLabelGradients).
void lossCase(int lossType, int reduction, bool weights, bool acrossBatch, unsigned mask, bool labelGradients = false) {
    LossElementsParams p{};
    p.source = denseLayout(kWidth, kHeight, kChannels);
    p.labels = denseLayout(kWidth, kHeight, kChannels, 1);
    p.weights = denseLayout(kWidth, kHeight, kChannels);
    p.destination = denseLayout(kWidth, kHeight, kChannels, 2);
    p.loss = denseLayout(kWidth, kHeight, kChannels);
    p.batch = kBatch;
    p.lossType = lossType;
    p.reductionType = reduction;
    p.hasWeights = weights;
    p.weight = 0.75f;
    p.labelSmoothing = acrossBatch ? 0.1f : 0.0f;
    p.numberOfClasses = kChannels;
    p.epsilon = 1e-7f;
    p.delta = 0.5f;
    p.partialsOffset = 0;
    p.labelGradients = labelGradients ? 1 : 0;
    const int pixels = kWidth * kHeight;

    LossReduceParams r{};
    r.images = kBatch;
    r.pixelsPerImage = pixels;
    r.reductionType = reduction;
    r.acrossBatch = acrossBatch;
    r.meanCount = float(lossType == kLossSoftMaxCrossEntropy ? pixels : pixels * kChannels);
    r.scaleGradient = 1;
    LossScaleParams s{};
    s.destination = p.destination;
    s.batch = kBatch;
    s.resultIndex = 0;

    const bool logBased = lossType == kLossLog || lossType == kLossKullbackLeiblerDivergence ||
                          lossType == kLossCategoricalCrossEntropy;
    std::vector<float> weightValues = uniform(floatsOf(p.weights, kBatch), 13, 0.0f, 2.0f);
    for (size_t i = 0; i < weightValues.size(); i += 5) weightValues[i] = 0.0f;  // zero weights count apart
    std::vector<std::vector<float>> inputs = {
        logBased ? uniform(floatsOf(p.source, kBatch), 11, 0.05f, 0.95f) : noise(floatsOf(p.source, kBatch), 11),
        uniform(floatsOf(p.labels, kBatch), 12, 0.0f, 1.0f),
        weightValues,
        noise(floatsOf(p.destination, kBatch), 14),
        noise(floatsOf(p.loss, kBatch), 15),
        noise(size_t(2) * kBatch * pixels, 16),
        noise(size_t(2) * kBatch, 17)};
    compareBackends(inputs, mask, [&](Backend& b, CommandBuffer& cb, const std::vector<BufferSlice>& v) {
        b.lossElements(cb, p, v[0], v[1], weights ? v[2] : BufferSlice{}, v[3],
                       reduction == kReductionNone ? v[4] : BufferSlice{},
                       reduction == kReductionNone ? BufferSlice{} : v[5]);
        if (reduction == kReductionNone) return;
        b.lossReduce(cb, r, v[5], v[6]);
        b.lossScaleGradient(cb, s, v[6], v[3]);
    }, "loss " + std::to_string(lossType) + " reduction " + std::to_string(reduction) + " weights " +
           std::to_string(weights) + " across " + std::to_string(acrossBatch) + " label gradients " +
           std::to_string(labelGradients));
}

TEST(MetalVariantsLoss, EveryTypeReductionAndAlignment) {
    REQUIRE_METAL();
    for (int type = 0; type < kLossTypeCount; ++type)
        for (int reduction : {kReductionNone, kReductionSum, kReductionMean, kReductionSumByNonZeroWeights}) {
            if (type == kLossCosineDistance && reduction != kReductionSum) continue;  // MPS: Sum only
            for (bool weights : {false, true})
                for (unsigned mask : {0u, 0x7Fu, 0x2Au}) lossCase(type, reduction, weights, mask == 0x2Au, mask);
        }
}

TEST(MetalVariantsLoss, LabelGradientsOfEveryType) {
    REQUIRE_METAL();
    for (int type = 0; type < kLossTypeCount; ++type)
        for (bool smoothing : {false, true})  // acrossBatch also sets label smoothing 0.1
            lossCase(type, type == kLossCosineDistance ? kReductionSum : kReductionMean, smoothing, smoothing,
                     smoothing ? 0x2Au : 0u, true);
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
