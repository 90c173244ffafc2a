// Serialization from C++: serialize() / deserialize(bytes, device) of kernels, descriptors and
// states, the envelope's checks, and hostile input (every truncation, every single-bit flip with
// the CRC repaired, huge declared sizes) raising SerializationError.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/command_buffer.h"
#include "core/serialization.h"
#include "kernels/arithmetic.h"
#include "kernels/convolution.h"
#include "kernels/neuron.h"
#include "kernels/softmax.h"

namespace mpsgrad {
namespace {

std::shared_ptr<CNNConvolutionWeightsDataSource> weightsSource() {
    CNNConvolutionDescriptor d(3, 3, 4, 8);
    d.strideInPixelsX = 2;
    d.fusedNeuronDescriptor = NNNeuronDescriptor::withType(CNNNeuronType::ReLU, 0.25f);
    std::vector<float> w(size_t(d.weightCount())), b(8);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 7) * 0.125f - 0.375f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i) * 0.5f;
    return std::make_shared<CNNConvolutionWeightsDataSource>(d, w, b, "weights");
}

std::vector<uint8_t> withCrcRepaired(std::vector<uint8_t> blob) {
    uint32_t crc = serial::crc32(blob.data(), blob.size() - 4);
    for (int i = 0; i < 4; ++i) blob[blob.size() - 4 + i] = uint8_t(crc >> (8 * i));
    return blob;
}

TEST(Serialization, WriterReaderRoundTripAndBounds) {
    serial::Writer w;
    w.u8(7);
    w.boolean(true);
    w.i32(-5);
    w.u64(1ull << 40);
    w.f32(-0.0f);
    w.string("h\xc3\xa9");
    w.floats(std::vector<float>{1.5f, 2.5f});
    auto blob = w.finish("Test", 3);
    serial::Envelope e = serial::open(blob.data(), blob.size());
    EXPECT_EQ(e.classTag, "Test");
    EXPECT_EQ(e.classVersion, 3u);
    serial::Reader r = e.reader();
    EXPECT_EQ(r.u8("a"), 7);
    EXPECT_TRUE(r.boolean("b"));
    EXPECT_EQ(r.i32("c"), -5);
    EXPECT_EQ(r.u64("d"), 1ull << 40);
    float z = r.f32("e");
    EXPECT_TRUE(z == 0.0f && std::signbit(z));
    EXPECT_EQ(r.string("f"), "h\xc3\xa9");
    EXPECT_EQ(r.floats("g"), (std::vector<float>{1.5f, 2.5f}));
    r.expectEnd();
    EXPECT_THROW(r.u8("past the end"), SerializationError);
}

TEST(Serialization, ReaderRejectsHugeSizesBeforeAllocating) {
    uint8_t huge[8];
    for (int i = 0; i < 8; ++i) huge[i] = uint8_t((1ull << 62) >> (8 * i));
    serial::Reader floats(huge, 8);
    EXPECT_THROW(floats.floats("values"), SerializationError);
    serial::Reader bytes(huge, 8);
    EXPECT_THROW(bytes.bytes("bytes"), SerializationError);
    const uint8_t invalidUtf8[] = {2, 0, 0, 0, 0, 0, 0, 0, 0xC0, 0x80};  // overlong NUL
    serial::Reader text(invalidUtf8, sizeof invalidUtf8);
    EXPECT_THROW(text.string("label"), SerializationError);
    const uint8_t two[] = {2};
    serial::Reader flag(two, 1);
    EXPECT_THROW(flag.boolean("flag"), SerializationError);
}

TEST(Serialization, ConvolutionRoundTripComputesTheSame) {
    Device cpu("cpu");
    auto conv = std::make_shared<CNNConvolution>(cpu, weightsSource());
    conv->label = "conv";
    conv->offset = Offset{1, 0, 0};
    conv->edgeMode = ImageEdgeMode::Clamp;
    conv->padding = NNDefaultPadding::paddingWithMethod(PaddingMethod::SizeValidOnly);
    conv->accumulatorPrecisionOption = NNConvolutionAccumulatorPrecisionOption::Half;
    std::vector<uint8_t> blob = conv->serialize();

    for (const std::string& name : Device::availableDevices()) {
        Device device(name);
        auto back = Kernel::deserializeAs<CNNConvolution>(blob, device);
        EXPECT_EQ(back->label, "conv");
        EXPECT_EQ(back->offset, conv->offset);
        EXPECT_EQ(back->edgeMode, ImageEdgeMode::Clamp);
        EXPECT_EQ(back->padding->paddingMethod(), PaddingMethod::SizeValidOnly);
        EXPECT_EQ(back->accumulatorPrecisionOption, NNConvolutionAccumulatorPrecisionOption::Half);
        EXPECT_EQ(back->fusedNeuronDescriptor().a, 0.25f);
        EXPECT_EQ(back->dataSource()->label(), "weights");
        EXPECT_EQ(back->serialize(), blob);

        // Same output, bit for bit, on the same input.
        auto source = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 7, 5, 4));
        std::vector<float> x(7 * 5 * 4);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
        source->writeBytes(x.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        auto original = std::make_shared<CNNConvolution>(device, weightsSource());
        original->offset = conv->offset;
        original->edgeMode = conv->edgeMode;
        original->padding = conv->padding;
        original->destinationImageAllocator = back->destinationImageAllocator = ImageAllocator::persistentAllocator();
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        ImagePtr a = original->encode(*cb, source);
        ImagePtr b = back->encode(*cb, source);
        cb->commit();
        cb->waitUntilCompleted();
        ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
        std::vector<float> ya(size_t(a->width() * a->height() * 8)), yb(ya.size());
        a->readBytes(ya.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        b->readBytes(yb.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        EXPECT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)), 0) << "on " << name;
    }
    EXPECT_THROW(Kernel::deserializeAs<CNNNeuron>(blob, cpu), SerializationError);
}

TEST(Serialization, EveryKernelFamilyRoundTrips) {
    Device cpu("cpu");
    std::vector<std::shared_ptr<Kernel>> kernels = {
        std::make_shared<CNNNeuron>(cpu, NNNeuronDescriptor::preluWithData({0.5f, 0.25f})),
        std::make_shared<CNNNeuronGradient>(cpu, NNNeuronDescriptor::withType(CNNNeuronType::TanH, 2.0f, 0.5f)),
        std::make_shared<CNNConvolutionGradient>(cpu, weightsSource()),
        std::make_shared<CNNMultiply>(cpu),
        std::make_shared<NNCompare>(cpu),
        std::make_shared<CNNDivideGradient>(cpu, true),
        std::make_shared<CNNLogSoftMax>(cpu),
        std::make_shared<CNNSoftMaxGradient>(cpu),
    };
    for (const auto& kernel : kernels) {
        kernel->label = kernel->className();
        kernel->options = KernelOptionsVerbose;
        std::vector<uint8_t> blob = kernel->serialize();
        auto back = Kernel::deserialize(blob, cpu);
        EXPECT_STREQ(back->className(), kernel->className());
        EXPECT_EQ(back->label, kernel->className());
        EXPECT_EQ(back->serialize(), blob) << kernel->className();
    }
    auto divide = std::dynamic_pointer_cast<CNNDivideGradient>(Kernel::deserialize(kernels[5]->serialize(), cpu));
    ASSERT_TRUE(divide);
    EXPECT_TRUE(divide->isSecondarySourceFilter());
}

TEST(Serialization, DescriptorsAndStates) {
    CNNConvolutionDescriptor d(5, 3, 8, 16);
    d.groups = 2;
    d.setBatchNormalizationParametersForInference(std::vector<float>(16, 0.5f), std::vector<float>(16, 2.0f),
                                                  std::vector<float>(16, 1.0f), std::vector<float>(16, 0.0f), 1e-3f);
    auto blob = d.serialize();
    auto back = CNNConvolutionDescriptor::deserialize(blob.data(), blob.size());
    EXPECT_EQ(back.groups, 2);
    EXPECT_EQ(back.foldedScale, d.foldedScale);
    EXPECT_EQ(back.serialize(), blob);
    EXPECT_THROW(NNNeuronDescriptor::deserialize(blob.data(), blob.size()), SerializationError);

    Device cpu("cpu");
    CNNConvolutionWeightsAndBiasesState state(cpu, CNNConvolutionDescriptor(1, 1, 4, 4));
    state.weights().floats()[3] = 42.0f;
    auto stateBlob = state.serialize();
    auto decoded = std::dynamic_pointer_cast<CNNConvolutionWeightsAndBiasesState>(
        State::deserialize(stateBlob.data(), stateBlob.size(), cpu));
    ASSERT_TRUE(decoded);
    EXPECT_EQ(decoded->weights().floats()[3], 42.0f);

    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    EXPECT_THROW(State::temporary(*cb, {16})->serialize(), ValueError);
    NNGradientState gradient(cpu, false, nullptr);
    EXPECT_THROW(gradient.serialize(), TypeError);
}

TEST(Serialization, HostileInputRaises) {
    Device cpu("cpu");
    std::vector<uint8_t> blob = std::make_shared<CNNConvolution>(cpu, weightsSource())->serialize();
    // Every truncation (checksum repaired too, so the size checks are what rejects it).
    for (size_t n = 0; n < blob.size(); ++n) {
        std::vector<uint8_t> cut(blob.begin(), blob.begin() + long(n));
        EXPECT_THROW(Kernel::deserialize(cut, cpu), SerializationError) << n;
        if (n >= 4) EXPECT_THROW(Kernel::deserialize(withCrcRepaired(cut), cpu), SerializationError) << n;
    }
    // Every single-bit flip: rejected by the CRC; with the CRC repaired, a ValueError or a kernel
    // that serializes again.
    size_t decoded = 0;
    for (size_t bit = 0; bit < blob.size() * 8; ++bit) {
        std::vector<uint8_t> flipped = blob;
        flipped[bit / 8] ^= uint8_t(1u << (bit % 8));
        EXPECT_THROW(Kernel::deserialize(flipped, cpu), SerializationError);
        try {
            auto kernel = Kernel::deserialize(withCrcRepaired(flipped), cpu);
            kernel->serialize();
            ++decoded;
        } catch (const ValueError&) {
        }
    }
    EXPECT_GT(decoded, 0u);
    // A declared payload size of 2**62.
    std::vector<uint8_t> huge = blob;
    size_t sizeField = 20 + std::strlen("CNNConvolution");
    for (int i = 0; i < 8; ++i) huge[sizeField + size_t(i)] = uint8_t((1ull << 62) >> (8 * i));
    EXPECT_THROW(Kernel::deserialize(withCrcRepaired(huge), cpu), SerializationError);
}

}  // namespace
}  // namespace mpsgrad
