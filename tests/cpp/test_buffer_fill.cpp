// BufferFill: new buffers are zero unless a kernel's returning encode knows it overwrites every
// float of its destination (backend.h, kernel.cpp). ctest runs every test with
// MPSGRAD_POISON_UNSPECIFIED_BUFFERS=1, so storage that skipped the fill reads as NaN here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/command_buffer.h"
#include "core/image.h"
#include "kernels/neuron.h"

namespace mpsgrad {
namespace {

std::vector<std::string> devices() { return Device::availableDevices(); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Runs a sigmoid through the returning encode (so 0 would read back as 0.5 had it been computed).
ImagePtr returningSigmoid(const Device& device, const ImagePtr& source, CNNNeuron& neuron) {
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    // Read after completion: a persistent result (a built-in allocator, so the fill rule still applies).
    neuron.destinationImageAllocator = ImageAllocator::persistentAllocator();
    ImagePtr result = neuron.encode(*cb, source);
    cb->commit();
    cb->waitUntilCompleted();
    return result;
}

ImagePtr sourceImage(const Device& device, int64_t channels) {
    auto image = std::make_shared<Image>(
        device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 5, 4, channels));
    std::vector<float> values(size_t(5 * 4 * channels));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * float(int(i % 17) - 8);
    image->writeBytes(values.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
    return image;
}

TEST(BufferFill, UnspecifiedBuffersArePoisonedUnderCtest) {
    if (!poisonUnspecifiedBuffers()) GTEST_SKIP() << "MPSGRAD_POISON_UNSPECIFIED_BUFFERS is not 1 (run through ctest)";
    for (const auto& name : devices()) {
        Backend& backend = Device(name).backend();
        auto poisoned = backend.newBuffer(1000, BufferFill::Unspecified);
        auto zeroed = backend.newBuffer(1000, BufferFill::Zero);
        const auto* p = static_cast<const uint8_t*>(poisoned->contents());
        const auto* z = static_cast<const uint8_t*>(zeroed->contents());
        for (size_t i = 0; i < 1000; ++i) {
            ASSERT_EQ(p[i], 0xFF) << name << " byte " << i;
            ASSERT_EQ(z[i], 0) << name << " byte " << i;
        }
        EXPECT_TRUE(std::isnan(BufferSlice{poisoned, 0}.floats()[0])) << name;
    }
}

TEST(BufferFill, WholeDestinationsAreComputedEverywhere) {
    for (const auto& name : devices()) {
        Device device(name);
        CNNNeuron neuron(device, NNNeuronDescriptor::withType(CNNNeuronType::Sigmoid));
        auto source = sourceImage(device, 8);
        auto result = returningSigmoid(device, source, neuron);
        std::vector<float> x(5 * 4 * 8), y(5 * 4 * 8);
        source->readBytes(x.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        result->readBytes(y.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], sigmoid(x[i]), 1e-6f) << name << " float " << i;
    }
}

TEST(BufferFill, PartlyWrittenDestinationsKeepTheZeroFill) {
    for (const auto& name : devices()) {
        Device device(name);
        // A clip rect: the pixels outside it are not written and stay 0 (not NaN, not 0.5).
        CNNNeuron clipped(device, NNNeuronDescriptor::withType(CNNNeuronType::Sigmoid));
        clipped.clipRect = Region{{1, 1, 0}, {2, 2, 1}};
        auto clippedResult = returningSigmoid(device, sourceImage(device, 8), clipped);
        std::vector<float> y(5 * 4 * 8);
        clippedResult->readBytes(y.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        for (int64_t py = 0; py < 4; ++py)
            for (int64_t px = 0; px < 5; ++px) {
                const bool inside = px >= 1 && px < 3 && py >= 1 && py < 3;
                const float v = y[size_t((py * 5 + px) * 8)];
                if (!inside) ASSERT_EQ(v, 0.0f) << name << " pixel " << px << "," << py;
                else ASSERT_TRUE(std::isfinite(v) && v > 0.0f) << name;
            }

        // Three channels: the fourth lane of each pixel is padding, zero by contract.
        CNNNeuron narrow(device, NNNeuronDescriptor::withType(CNNNeuronType::Sigmoid));
        auto narrowResult = returningSigmoid(device, sourceImage(device, 3), narrow);
        const float* storage = narrowResult->storage().floats();
        for (int64_t pixel = 0; pixel < 5 * 4; ++pixel)
            ASSERT_EQ(storage[pixel * narrowResult->pixelStride() + 3], 0.0f) << name << " pixel " << pixel;
    }
}

}  // namespace
}  // namespace mpsgrad
