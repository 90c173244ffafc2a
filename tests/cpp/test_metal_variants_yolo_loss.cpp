// The YOLO loss kernels (yolo_prepare, yolo_finish; metal/yolo_loss.metal) run on the Metal
// backend and compared with the CPU backend through the backends' own ops. They read no function
// constants (one variant each, tests/metal_emulation/coverage/kernel_variants.py); what varies is
// the params: anchors and classes, rescore, the raw or sigmoid confidence, thresholds that make
// anchors present / ignored / absent, per-element or reduced losses, grids of several simdgroups,
// every binding at offset 0 or shifted by one float. Every output buffer starts as noise.
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

using testmetal::metalAvailable;
using testmetal::upload;
using testpool::denseLayout;
using testpool::floatsOf;
using testpool::noise;

using Encode = std::function<void(Backend&, CommandBuffer&, const std::vector<BufferSlice>&)>;

std::vector<std::vector<float>> runOn(const char* name, const std::vector<std::vector<float>>& inputs, bool shift,
                                      const Encode& encode) {
    Device device(name);
    CommandQueue queue(device);
    std::vector<BufferSlice> slices;
    for (const auto& input : inputs) slices.push_back(upload(device.backend(), input, shift));
    auto cb = queue.commandBuffer();
    encode(device.backend(), *cb, slices);
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const float* p = slices[i].floats();
        out.emplace_back(p, p + inputs[i].size());
    }
    return out;
}

void compareBackends(const std::vector<std::vector<float>>& inputs, bool shift, const Encode& encode,
                     const std::string& what) {
    auto metal = runOn("metal", inputs, shift, encode);
    auto cpu = runOn("cpu", inputs, shift, encode);
    for (size_t b = 0; b < inputs.size(); ++b) {
        int failures = 0;
        for (size_t i = 0; i < inputs[b].size() && failures < 4; ++i) {
            const double m = metal[b][i], c = cpu[b][i];
            if (std::memcmp(&metal[b][i], &cpu[b][i], sizeof(float)) == 0) continue;
            if (!(std::fabs(m - c) <= 1e-5 * std::fabs(c) + 1e-6))
                ++failures, ADD_FAILURE() << what << ", binding " << b << ", element " << i << ": metal " << m
                                          << ", cpu " << c;
        }
    }
}

struct Case {
    int width, height, anchors, classes;
    bool rescore, confidenceRaw;
    float minIOU, maxIOU;
};

// Labels with an object in every third cell (anchor = cell % anchors); the raw predictions are
// noise, and the anchor after the labelled one predicts the labelled box (IOU ~1: present).
void makeInputs(const Case& c, std::vector<float>& source, std::vector<float>& labels) {
    const int S = 5 + c.classes, C = c.anchors * S, cells = c.width * c.height;
    const ImageLayout l = denseLayout(c.width, c.height, C);
    source = noise(floatsOf(l, 1), 11);
    labels.assign(floatsOf(l, 1), 0.0f);
    for (int i = 0; i < cells; i += 3) {
        const int a = i % c.anchors;
        float* t = &labels[size_t(i) * l.pixelStride + size_t(a) * S];
        t[0] = 0.3f, t[1] = 0.6f, t[2] = 1.1f, t[3] = 0.7f, t[4] = 1.0f;
        t[5 + i % c.classes] = 1.0f;
        if (c.anchors > 1) {  // anchor boxes are all 1 x 1 here: W = log(1.1), H = log(0.7)
            float* s = &source[size_t(i) * l.pixelStride + size_t((a + 1) % c.anchors) * S];
            s[0] = std::log(0.3f / 0.7f), s[1] = std::log(0.6f / 0.4f), s[2] = std::log(1.1f), s[3] = std::log(0.7f);
        }
    }
}

void prepareCase(const Case& c, bool shift) {
    const int S = 5 + c.classes, C = c.anchors * S, PW = c.width * c.anchors;
    YoloPrepareParams p{};
    p.source = p.labels = denseLayout(c.width, c.height, C);
    p.xy = denseLayout(PW, c.height, 2), p.wh = denseLayout(PW, c.height, 2);
    p.confidence = denseLayout(PW, c.height, 1), p.classes = denseLayout(PW, c.height, c.classes);
    p.anchors = c.anchors, p.classCount = c.classes;
    p.rescore = c.rescore, p.confidenceRaw = c.confidenceRaw;
    p.weightXY = 10, p.weightWH = 9, p.weightObject = 100, p.weightNoObject = 5, p.weightClass = 2;
    p.minIOUForObjectPresence = c.minIOU, p.maxIOUForObjectAbsence = c.maxIOU;
    std::vector<std::vector<float>> inputs(15);
    makeInputs(c, inputs[0], inputs[1]);
    inputs[2].assign(size_t(2 * c.anchors), 1.0f);
    const ImageLayout* parts[4] = {&p.xy, &p.wh, &p.confidence, &p.classes};
    for (int i = 0; i < 12; ++i) inputs[3 + i] = noise(floatsOf(*parts[i % 4], 1), 20 + i);
    compareBackends(inputs, shift, [&](Backend& b, CommandBuffer& cb, const std::vector<BufferSlice>& s) {
        b.yoloPrepare(cb, p, s[0], s[1], s[2], {s[3], s[4], s[5], s[6]}, {s[7], s[8], s[9], s[10]},
                      {s[11], s[12], s[13], s[14]});
    }, "yolo_prepare " + std::to_string(c.width) + "x" + std::to_string(c.height) + " A" +
           std::to_string(c.anchors) + " K" + std::to_string(c.classes));
}

void finishCase(const Case& c, bool perElement, bool shift) {
    const int S = 5 + c.classes, C = c.anchors * S, PW = c.width * c.anchors;
    YoloFinishParams p{};
    p.source = p.destination = p.loss = denseLayout(c.width, c.height, C);
    p.xy = denseLayout(PW, c.height, 2), p.wh = denseLayout(PW, c.height, 2);
    p.confidence = denseLayout(PW, c.height, 1), p.classes = denseLayout(PW, c.height, c.classes);
    p.anchors = c.anchors, p.classCount = c.classes, p.confidenceRaw = c.confidenceRaw;
    p.perElement = perElement;
    const ImageLayout* parts[4] = {&p.xy, &p.wh, &p.confidence, &p.classes};
    std::vector<std::vector<float>> inputs(11);
    inputs[0] = noise(floatsOf(p.source, 1), 31);
    for (int i = 0; i < 4; ++i) inputs[1 + i] = noise(floatsOf(*parts[i], 1), 40 + i);
    for (int i = 0; i < 4; ++i) inputs[5 + i] = noise(perElement ? floatsOf(*parts[i], 1) : 1, 50 + i);
    inputs[9] = noise(floatsOf(p.destination, 1), 60);
    inputs[10] = noise(perElement ? floatsOf(p.loss, 1) : 1, 61);
    compareBackends(inputs, shift, [&](Backend& b, CommandBuffer& cb, const std::vector<BufferSlice>& s) {
        b.yoloFinish(cb, p, s[0], {s[1], s[2], s[3], s[4]}, {s[5], s[6], s[7], s[8]}, s[9], s[10]);
    }, std::string("yolo_finish ") + (perElement ? "per element" : "reduced"));
}

const Case kCases[] = {
    {3, 2, 1, 1, true, true, 0.7f, 0.3f},
    {9, 7, 2, 3, true, true, 0.7f, 0.3f},     // 63 cells: several simdgroups
    {5, 4, 3, 4, false, false, 0.5f, 0.5f},   // sigmoid confidence, no ignored band
    {4, 3, 5, 20, true, false, 1.0f, 0.0f},   // every unlabelled anchor ignored
};

TEST(MetalVariantsYoloLoss, PrepareEveryCaseAndAlignment) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    for (const Case& c : kCases)
        for (bool shift : {false, true}) prepareCase(c, shift);
}

TEST(MetalVariantsYoloLoss, FinishEveryCaseReductionAndAlignment) {
    if (!metalAvailable()) GTEST_SKIP() << "no Metal device: " << metalUnavailableReason();
    for (const Case& c : kCases)
        for (bool perElement : {false, true})
            for (bool shift : {false, true}) finishCase(c, perElement, shift);
}

}  // namespace
}  // namespace mpsgrad

#endif  // MPSGRAD_HAS_METAL
