// NNGraph::beforeUpdates (docs/graph.md "Before the updates"): the hook runs once per encode after
// the work, before every CPU-style update, with the trainable nodes' gradient states; a gradient it
// changes is what the update sees; a GPU-style trainable node is refused while a hook is set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/errors.h"
#include "graph/filter_nodes.h"
#include "graph/graph.h"

namespace mpsgrad {
namespace {

constexpr int64_t kW = 3, kH = 2, kC = 4, kOut = 5;

// Fully connected weights that record the updates (and the first weight gradient they saw)
// without changing anything.
class RecordingSource final : public CNNConvolutionDataSource, public CNNConvolutionUpdatableDataSource {
public:
    explicit RecordingSource(std::vector<std::string>& events) : events_(events) {
        for (size_t i = 0; i < weights_.size(); ++i) weights_[i] = 0.05f * float(int(i % 11) - 5);
    }
    CNNConvolutionDescriptor descriptor() override { return CNNConvolutionDescriptor(kW, kH, kC, kOut); }
    const float* weights() override { return weights_.data(); }
    const float* biasTerms() override { return biases_.data(); }
    bool load() override { return true; }
    void purge() override {}

    std::shared_ptr<CNNConvolutionWeightsAndBiasesState> updateWithCommandBuffer(
        CommandBuffer&, const std::shared_ptr<CNNConvolutionGradientState>&,
        const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>&) override {
        return nullptr;
    }
    bool updateWithGradientState(const std::shared_ptr<CNNConvolutionGradientState>& gradient,
                                 const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>&) override {
        events_.push_back("update");
        seenGradient = gradient->gradientForWeights().floats()[0];
        return false;
    }
    bool supportsGPUUpdate() const override { return true; }
    bool supportsCPUUpdate() const override { return true; }

    float seenGradient = 0.0f;

private:
    std::vector<std::string>& events_;
    std::vector<float> weights_ = std::vector<float>(kOut * kH * kW * kC);
    std::vector<float> biases_ = std::vector<float>(kOut, 0.1f);
};

ImageBatch inputs(const Device& device) {
    ImageBatch images;
    for (int n = 0; n < 2; ++n) {
        std::vector<float> values(kW * kH * kC);
        for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * float(int(i % 7) - 3 + n);
        auto image = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, kW, kH, kC));
        image->writeBytes(values.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        images.push_back(image);
    }
    return images;
}

// x -> fully connected -> dL/dy = 1; the training graph of it, with `style` on the FC node.
struct Training {
    Training(const Device& device, NNTrainingStyle style) : source(std::make_shared<RecordingSource>(events)) {
        auto fc = std::make_shared<CNNFullyConnectedNode>(std::make_shared<NNImageNode>(), source);
        fc->trainingStyle = style;
        auto seed = std::make_shared<NNInitialGradientNode>(fc->resultImage());
        auto terminal = seed->trainingGraph(nullptr, nullptr);
        graph = std::make_unique<NNGraph>(device, terminal.front()->resultImage(), false);
        graph->format = ImageFeatureChannelFormat::Float32;
    }
    void step(const Device& device) {
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        graph->encodeBatch(*cb, {inputs(device)});
        cb->commit();
        cb->waitUntilCompleted();
    }
    std::vector<std::string> events;
    std::shared_ptr<RecordingSource> source;
    std::unique_ptr<NNGraph> graph;
};

TEST(GraphBeforeUpdates, RunsBeforeTheUpdatesWithTheGradientStates) {
    Device device("cpu");
    Training plain(device, NNTrainingStyle::UpdateDeviceCPU);
    plain.step(device);
    ASSERT_EQ(plain.events, std::vector<std::string>{"update"});
    ASSERT_NE(plain.source->seenGradient, 0.0f);

    Training hooked(device, NNTrainingStyle::UpdateDeviceCPU);
    size_t count = 0;
    hooked.graph->beforeUpdates = [&](const std::vector<StatePtr>& states) {
        hooked.events.push_back("hook");
        count = states.size();
        auto gradient = std::dynamic_pointer_cast<CNNConvolutionGradientState>(states.at(0));
        ASSERT_NE(gradient, nullptr);
        float* values = gradient->gradientForWeights().floats();
        for (int64_t i = 0; i < kOut * kH * kW * kC; ++i) values[i] *= 2.0f;  // what the update must see
    };
    hooked.step(device);
    hooked.step(device);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(hooked.events, (std::vector<std::string>{"hook", "update", "hook", "update"}));
    EXPECT_EQ(hooked.source->seenGradient, 2.0f * plain.source->seenGradient);
}

TEST(GraphBeforeUpdates, RefusesGpuStyleNodesAndIgnoresUntrainedOnes) {
    Device device("cpu");
    Training gpu(device, NNTrainingStyle::UpdateDeviceGPU);
    gpu.graph->beforeUpdates = [](const std::vector<StatePtr>&) {};
    EXPECT_THROW(gpu.step(device), ValueError);

    Training none(device, NNTrainingStyle::UpdateDeviceNone);
    size_t calls = 0, count = 99;
    none.graph->beforeUpdates = [&](const std::vector<StatePtr>& states) {
        ++calls;
        count = states.size();
    };
    none.step(device);
    EXPECT_EQ(calls, 1u);
    EXPECT_EQ(count, 0u);
    EXPECT_TRUE(none.events.empty());
}

}  // namespace
}  // namespace mpsgrad
