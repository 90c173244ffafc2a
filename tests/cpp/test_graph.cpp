// The graph layer from C++: an inference graph equals its kernels run by hand (bitwise; also for
// the fully connected node), and a training graph's input gradient for a residual neuron block
// equals the float64 chain rule.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/command_buffer.h"
#include "graph/filter_nodes.h"
#include "graph/filter_nodes_groups.h"
#include "graph/filter_nodes_loss.h"
#include "graph/filter_nodes_normalization.h"
#include "graph/graph.h"

namespace mpsgrad {
namespace {

constexpr int64_t kW = 5, kH = 4, kC = 6, kN = 2;

ImageBatch makeInputs(const Device& device, std::vector<std::vector<float>>& data) {
    std::mt19937 gen(7);
    std::normal_distribution<float> dist;
    ImageBatch images;
    for (int64_t n = 0; n < kN; ++n) {
        std::vector<float> values(kW * kH * kC);
        for (auto& v : values) v = dist(gen);
        auto image = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, kW, kH, kC));
        image->writeBytes(values.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        images.push_back(image);
        data.push_back(values);
    }
    return images;
}

std::vector<float> read(const ImagePtr& image) {
    std::vector<float> values(image->width() * image->height() * image->featureChannels());
    image->readBytes(values.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
    return values;
}

TEST(Graph, InferenceChainEqualsKernelsByHand) {
    Device device("cpu");
    std::vector<std::vector<float>> data;
    ImageBatch xs = makeInputs(device, data);
    auto source = std::make_shared<NNImageNode>(std::make_shared<LabelHandle>("x"));
    auto tanh = std::make_shared<CNNNeuronNode>(source, NNNeuronDescriptor::withType(CNNNeuronType::TanH));
    auto pool = std::make_shared<CNNPoolingNode>(tanh->resultImage(), PoolingKind::Average, 2, 2, 2, 2);
    NNGraph graph(device, pool->resultImage());
    EXPECT_EQ(graph.format, ImageFeatureChannelFormat::Float16);  // MPS's default
    graph.format = ImageFeatureChannelFormat::Float32;  // bit for bit with the float32 kernels by hand
    ASSERT_EQ(graph.sourceImageHandles().size(), 1u);
    EXPECT_EQ(graph.sourceImageHandles()[0]->label(), "x");

    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    ImageBatch ys = graph.encodeBatch(*cb, {xs});
    auto kTanh = std::make_shared<CNNNeuron>(device, NNNeuronDescriptor::withType(CNNNeuronType::TanH));
    auto kPool = std::make_shared<CNNPoolingAverage>(device, 2, 2, 2, 2);
    kPool->edgeMode = ImageEdgeMode::Clamp;  // the graph pooling nodes' default
    kPool->destinationImageAllocator = ImageAllocator::persistentAllocator();  // read after completion
    ImageBatch hand = kPool->encodeBatch(*cb, kTanh->encodeBatch(*cb, xs));
    cb->commit();
    cb->waitUntilCompleted();
    ASSERT_EQ(ys.size(), hand.size());
    for (size_t i = 0; i < ys.size(); ++i) EXPECT_EQ(read(ys[i]), read(hand[i]));
}

TEST(Graph, TrainingGraphSumsGradientsOfAResidualBlock) {
    Device device("cpu");
    std::vector<std::vector<float>> data;
    ImageBatch xs = makeInputs(device, data);
    auto source = std::make_shared<NNImageNode>();
    auto sigmoid = std::make_shared<CNNNeuronNode>(source, NNNeuronDescriptor::withType(CNNNeuronType::Sigmoid));
    auto add = std::make_shared<NNBinaryArithmeticNode>(std::vector<ImageNodePtr>{sigmoid->resultImage(), source},
                                                        kArithmeticAdd);
    auto seed = std::make_shared<NNInitialGradientNode>(add->resultImage());  // dL/dy = 1: L = sum(y)
    int inserted = 0;
    auto terminal = seed->trainingGraph(nullptr, [&](const FilterNodePtr&, const FilterNodePtr& inference,
                                                     const ImageNodePtr&, const ImageNodePtr&) {
        inserted += inference == nullptr;
    });
    EXPECT_EQ(inserted, 1);  // x has two consumers
    ASSERT_EQ(terminal.size(), 1u);
    NNGraph graph(device, terminal.front()->resultImage());

    // FLOAT32 intermediates: float32 precision. FLOAT16 (the default): the intermediates (the
    // incoming gradient, the neuron's gradient) are rounded to 11 bits, dx = 1 + s(1 - s) <= 1.25
    // within a few half ulps.
    for (auto format : {ImageFeatureChannelFormat::Float32, ImageFeatureChannelFormat::Float16}) {
        graph.format = format;
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        ImageBatch dxs = graph.encodeBatch(*cb, {xs});
        cb->commit();
        cb->waitUntilCompleted();
        double tolerance = format == ImageFeatureChannelFormat::Float32 ? 1e-6 : 2e-3;
        for (size_t n = 0; n < dxs.size(); ++n) {
            std::vector<float> dx = read(dxs[n]);
            for (size_t i = 0; i < dx.size(); ++i) {
                double s = 1.0 / (1.0 + std::exp(-double(data[n][i])));
                EXPECT_NEAR(dx[i], 1.0 + s * (1.0 - s), tolerance);
            }
        }
    }
}

TEST(Graph, FullyConnectedNodeUsesTheFullyConnectedKernels) {
    Device device("cpu");
    std::vector<std::vector<float>> data;
    ImageBatch xs = makeInputs(device, data);
    constexpr int64_t kOut = 3;
    std::vector<float> weights(kOut * kH * kW * kC), biases{0.1f, -0.2f, 0.3f};
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.01f * float(int(i % 17) - 8);
    auto ds = std::make_shared<CNNConvolutionWeightsDataSource>(CNNConvolutionDescriptor(kW, kH, kC, kOut), weights,
                                                                biases);
    auto source = std::make_shared<NNImageNode>();
    auto fc = std::make_shared<CNNFullyConnectedNode>(source, ds);
    fc->trainingStyle = NNTrainingStyle::UpdateDeviceNone;
    NNGraph graph(device, fc->resultImage());
    EXPECT_NE(dynamic_cast<CNNFullyConnected*>(fc->kernel().get()), nullptr);

    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    ImageBatch ys = graph.encodeBatch(*cb, {xs});
    auto kFc = std::make_shared<CNNFullyConnected>(device, ds);
    kFc->destinationImageAllocator = ImageAllocator::persistentAllocator();  // read after completion
    ImageBatch hand = kFc->encodeBatch(*cb, xs);
    cb->commit();
    cb->waitUntilCompleted();
    for (size_t i = 0; i < ys.size(); ++i) {
        EXPECT_EQ(ys[i]->width(), 1);
        EXPECT_EQ(read(ys[i]), read(hand[i]));
    }
    // Its gradient node is the fully connected one.
    auto gradients = fc->gradientFiltersWithSource(std::make_shared<NNImageNode>());
    ASSERT_EQ(gradients.size(), 1u);
    EXPECT_STREQ(gradients[0]->className(), "CNNFullyConnectedGradientNode");
}

TEST(Graph, MisuseIsRefused) {
    Device device("cpu");
    auto source = std::make_shared<NNImageNode>();
    EXPECT_THROW({ NNGraph g(device, source); }, std::exception);  // a graph input as the result
    auto relu = std::make_shared<CNNNeuronNode>(source, NNNeuronDescriptor::withType(CNNNeuronType::ReLU));
    NNGraph graph(device, relu->resultImage());
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    EXPECT_THROW(graph.encodeBatch(*cb, {}), std::exception);  // no source batch
    auto gradient = relu->gradientFilterWithSource(std::make_shared<NNImageNode>());
    EXPECT_THROW(gradient->gradientFilterWithSource(source), std::exception);  // no gradient of a gradient
}

// The gradient builders create MPS's per-type gradient classes (C++ types, not only names).
TEST(Graph, GradientBuildersCreateTheMpsClasses) {
    auto x = std::make_shared<NNImageNode>();
    auto g = std::make_shared<NNImageNode>();
    auto pool = std::make_shared<CNNPoolingNode>(x, PoolingKind::L2Norm, 2, 2, 2, 2);
    EXPECT_NE(std::dynamic_pointer_cast<CNNPoolingL2NormGradientNode>(pool->gradientFilterWithSource(g)), nullptr);
    auto up = std::make_shared<CNNUpsamplingNode>(x, true, 2, 2);
    EXPECT_NE(std::dynamic_pointer_cast<CNNUpsamplingBilinearGradientNode>(up->gradientFilterWithSource(g)), nullptr);
    auto logSoftMax = std::make_shared<CNNLogSoftMaxNode>(x);
    EXPECT_NE(std::dynamic_pointer_cast<CNNLogSoftMaxGradientNode>(logSoftMax->gradientFilterWithSource(g)), nullptr);
    auto mul = std::make_shared<NNBinaryArithmeticNode>(std::vector<ImageNodePtr>{x, g}, kArithmeticMultiply);
    for (const auto& node : mul->gradientFiltersWithSource(g))
        EXPECT_NE(std::dynamic_pointer_cast<NNMultiplicationGradientNode>(node), nullptr);
    auto lcn = std::make_shared<CNNLocalContrastNormalizationNode>(x, 3);
    EXPECT_EQ(lcn->parameters.alpha, 1.0f);  // the node's default, not the kernel's 0
    auto lcnGradient = std::dynamic_pointer_cast<CNNLocalContrastNormalizationGradientNode>(
        lcn->gradientFilterWithSource(g));
    ASSERT_NE(lcnGradient, nullptr);
    EXPECT_EQ(lcnGradient->parameters, lcn->parameters);
    auto gram = std::make_shared<NNGramMatrixCalculationNode>(x, 0.5f);
    auto gramGradient = std::dynamic_pointer_cast<NNGramMatrixCalculationGradientNode>(gram->gradientFilterWithSource(g));
    ASSERT_NE(gramGradient, nullptr);
    EXPECT_EQ(gramGradient->alpha, 0.5f);
    auto loss = std::make_shared<NNForwardLossNode>(std::vector<ImageNodePtr>{x, g},
                                                    CNNLossDescriptor::make(CNNLossType::MeanSquaredError,
                                                                            CNNReductionType::Sum));
    EXPECT_NE(std::dynamic_pointer_cast<NNLossGradientNode>(loss->gradientFilterWithSource(g)), nullptr);
    auto in = std::make_shared<CNNInstanceNormalizationNode>(
        x, std::make_shared<CNNInstanceNormalizationWeightsDataSource>(std::vector<float>{1, 1}, std::vector<float>{0, 0}));
    EXPECT_NE(std::dynamic_pointer_cast<CNNInstanceNormalizationGradientNode>(in->gradientFilterWithSource(g)), nullptr);
}

}  // namespace
}  // namespace mpsgrad
