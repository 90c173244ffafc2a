// Core object model: padding arithmetic, read-count lifecycles, command buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "backend/binding_checks.h"
#include "core/checked.h"
#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/image.h"
#include "core/padding.h"
#include "core/state.h"
#include "kernels/convolution.h"
#include "kernels/neuron.h"

namespace mpsgrad {
namespace {

using padding::Axis;

TEST(Padding, WorkedChecksOfTheSpec) {
    // S=5, k=3, s=2, Same: D=3, offset 0 (first window [-1, 1], as TF SAME).
    EXPECT_EQ(padding::destinationSize(5, 2, 3, 0), 3);
    EXPECT_EQ(padding::offset(5, 2, 3, PaddingMethod::SizeSame, Axis::X), 0);
    // S=4, k=2, s=2, Same: D=2, offset 1 (first window [0, 1]).
    EXPECT_EQ(padding::destinationSize(4, 2, 2, 0), 2);
    EXPECT_EQ(padding::offset(4, 2, 2, PaddingMethod::SizeSame, Axis::X), 1);
}

TEST(Padding, SizesOfEachStyle) {
    EXPECT_EQ(padding::destinationSize(7, 1, 3, -1), 5);  // valid
    EXPECT_EQ(padding::destinationSize(7, 1, 3, 0), 7);   // same
    EXPECT_EQ(padding::destinationSize(7, 1, 3, 1), 9);   // full
    EXPECT_EQ(padding::destinationSize(7, 2, 3, -1), 3);
    EXPECT_EQ(padding::destinationSize(2, 1, 5, -1), 0);  // too small
    EXPECT_EQ(padding::destinationSizeReverse(3, 2, 3, -1), 3);
    EXPECT_EQ(padding::destinationSizeReverse(3, 2, 3, 1), 7);
    EXPECT_THROW(padding::sizeStyle(PaddingMethod::SizeReserved), ValueError);
}

// TensorFlow SAME: pad_total = max((D-1)*s + k - S, 0), pad_before = pad_total / 2. MPS agrees
// whenever the windows need padding; when they cover less than the image (negative extra)
// the header's formula centres them instead of starting at pixel 0, and we keep that.
TEST(Padding, TensorflowSameMatchesBruteForce) {
    uint32_t tfSame = PaddingMethod::SizeSame | PaddingMethod::AlignCentered | PaddingMethod::AddRemainderToBottomRight;
    for (int64_t S = 1; S <= 12; ++S)
        for (int64_t k = 1; k <= 6; ++k)
            for (int64_t s = 1; s <= 3; ++s) {
                int64_t D = (S + s - 1) / s;
                EXPECT_EQ(padding::destinationSize(S, s, k, 0), D);
                int64_t extra = (D - 1) * s + k - S;
                int64_t before = extra / 2;  // TF pad_before when extra >= 0; centred (C division) below 0
                // offset = window centre of output 0 = -before + k/2
                EXPECT_EQ(padding::offset(S, s, k, tfSame, Axis::X), -before + (k >> 1)) << S << " " << k << " " << s;
                EXPECT_EQ(padding::offset(S, s, k, tfSame, Axis::Y), -before + (k >> 1));
            }
}

TEST(Padding, AlignmentAndRemainderBits) {
    // S=6, k=3, s=1, Full: D=8, readSize=10, extra=4 → centred left=2, offset=-1.
    EXPECT_EQ(padding::offset(6, 1, 3, PaddingMethod::SizeFull, Axis::X), -1);
    EXPECT_EQ(padding::offset(6, 1, 3, PaddingMethod::SizeFull | PaddingMethod::AlignTopLeft, Axis::X), 1 - 4);
    EXPECT_EQ(padding::offset(6, 1, 3, PaddingMethod::SizeFull | PaddingMethod::AlignBottomRight, Axis::X), 1);
    // Odd extra: S=6, k=4, s=1, Same: D=6, readSize=9, extra=3; top-left remainder → left 2, else 1.
    EXPECT_EQ(padding::offset(6, 1, 4, PaddingMethod::SizeSame, Axis::X), 2 - 2);
    EXPECT_EQ(padding::offset(6, 1, 4, PaddingMethod::SizeSame | PaddingMethod::AddRemainderToTopRight, Axis::X), 2 - 1);
    EXPECT_EQ(padding::offset(6, 1, 4, PaddingMethod::SizeSame | PaddingMethod::AddRemainderToTopRight, Axis::Y), 2 - 2);
    EXPECT_EQ(padding::offset(6, 1, 4, PaddingMethod::SizeSame | PaddingMethod::AddRemainderToBottomLeft, Axis::Y), 2 - 1);
}

TEST(Padding, InverseSwapsValidAndFull) {
    auto valid = NNDefaultPadding::paddingWithMethod(PaddingMethod::SizeValidOnly | PaddingMethod::AlignTopLeft);
    EXPECT_EQ(valid->inverse()->paddingMethod(), PaddingMethod::SizeFull | PaddingMethod::AlignTopLeft);
    auto same = NNDefaultPadding::paddingWithMethod(PaddingMethod::SizeSame);
    EXPECT_EQ(same->inverse()->paddingMethod(), PaddingMethod::SizeSame);
}

TEST(ReadCount, TemporaryImageIsConsumedByReads) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    auto d = ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 4, 4, 4);
    auto temp = std::make_shared<TemporaryImage>(*cb, d);
    EXPECT_EQ(temp->readCount(), 1);
    temp->setReadCount(2);
    temp->noteRead();
    EXPECT_EQ(temp->readCount(), 1);
    EXPECT_NO_THROW(temp->storage());
    temp->noteRead();
    EXPECT_EQ(temp->readCount(), 0);
    EXPECT_THROW(temp->storage(), ValueError);
    EXPECT_THROW(temp->noteRead(), ValueError);
    EXPECT_THROW(temp->setReadCount(3), ValueError);
    auto other = queue.commandBuffer();
    auto fresh = std::make_shared<TemporaryImage>(*cb, d);
    EXPECT_THROW(fresh->checkUsable(*other, "source_image"), ValueError);
}

TEST(ReadCount, BatchIncrementCountsUniqueImages) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    auto d = ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 2, 2, 4);
    auto a = std::make_shared<TemporaryImage>(*cb, d);
    auto b = std::make_shared<TemporaryImage>(*cb, d);
    EXPECT_EQ(imageBatchIncrementReadCount({a, a, b}, 2), 2u);
    EXPECT_EQ(a->readCount(), 3);
    EXPECT_EQ(b->readCount(), 3);
}

TEST(ReadCount, TemporaryAndPersistentStates) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    auto temp = State::temporary(*cb, {64});
    EXPECT_TRUE(temp->isTemporary());
    EXPECT_EQ(temp->readCount(), 1);
    temp->noteRead();
    EXPECT_EQ(temp->readCount(), 0);
    EXPECT_THROW(temp->checkUsable(*cb, "gradient_state"), ValueError);
    EXPECT_THROW(temp->resourceAtIndex(0), ValueError);
    State persistent(cpu, 64);
    EXPECT_EQ(persistent.readCount(), 0);
    persistent.noteRead();  // persistent states are never decremented
    EXPECT_NO_THROW(persistent.checkUsable(*cb, "gradient_state"));
    EXPECT_THROW(stateBatchIncrementReadCount({temp}, 1), ValueError);  // at 0 the count is final
    auto shared = State::temporary(*cb, {});
    EXPECT_EQ(stateBatchIncrementReadCount({shared, shared, nullptr}, 2), 1u);
    EXPECT_EQ(shared->readCount(), 3);
}

TEST(CommandBuffer, StatusHandlersAndMisuse) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    EXPECT_EQ(cb->status(), CommandBufferStatus::NotEnqueued);
    EXPECT_THROW(cb->waitUntilCompleted(), CommandBufferError);
    std::atomic<int> calls{0};
    cb->addCompletedHandler([&](CommandBuffer& done) {
        EXPECT_EQ(done.status(), CommandBufferStatus::Completed);
        ++calls;
    });
    cb->commit();
    EXPECT_THROW(cb->commit(), CommandBufferError);
    EXPECT_THROW(cb->checkEncodable(), CommandBufferError);
    cb->waitUntilCompleted();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed);
    EXPECT_TRUE(cb->error().empty());
}

TEST(CommandBuffer, FailingWorkReportsThroughStatusAndError) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    auto temp = State::temporary(*cb, {16});
    BufferSlice source = temp->resourceAtIndex(0);
    BufferSlice nowhere{};  // a missing destination is rejected when the op is encoded...
    EXPECT_THROW(cpu.backend().copyBuffer(*cb, source, nowhere, 16), ValueError);
    cpu.backend().copyBuffer(*cb, source, source, 16);
    cb->failOnCommit("copyBuffer: planned failure");  // ...so the run-time failure is injected
    std::atomic<int> calls{0};
    cb->addCompletedHandler([&](CommandBuffer& done) {
        EXPECT_EQ(done.status(), CommandBufferStatus::Error);
        ++calls;
    });
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Error);
    EXPECT_NE(cb->error().find("copyBuffer"), std::string::npos);
    EXPECT_EQ(calls.load(), 1);
    // The queue keeps working after a failed buffer.
    auto next = queue.commandBuffer();
    next->commit();
    next->waitUntilCompleted();
    EXPECT_EQ(next->status(), CommandBufferStatus::Completed);
}

TEST(Image, ReadWriteBothLayoutsWithChannelOffsets) {
    Device cpu("cpu");
    auto d = ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 3, 2, 6);
    Image image(cpu, d);
    std::vector<float> hwc(3 * 2 * 6);
    for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = float(i);
    image.writeBytes(hwc.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
    std::vector<float> chw(hwc.size());
    image.readBytes(chw.data(), DataLayout::FeatureChannelsxHeightxWidth, 0);
    for (int c = 0; c < 6; ++c)
        for (int p = 0; p < 6; ++p) EXPECT_EQ(chw[c * 6 + p], hwc[p * 6 + c]);
    std::vector<float> part(3 * 2 * 2);
    image.readBytes(part.data(), DataLayout::HeightxWidthxFeatureChannels, 0, {4, 2});
    for (int p = 0; p < 6; ++p) {
        EXPECT_EQ(part[p * 2], hwc[p * 6 + 4]);
        EXPECT_EQ(part[p * 2 + 1], hwc[p * 6 + 5]);
    }
    EXPECT_THROW(image.readBytes(part.data(), DataLayout::HeightxWidthxFeatureChannels, 0, {2, 2}), ValueError);
    EXPECT_THROW(image.readBytes(part.data(), DataLayout::HeightxWidthxFeatureChannels, 1), ValueError);
    // Padding lanes (channels 6, 7 of the 8-float pixel) stay zero.
    const float* raw = image.storage().floats();
    for (int p = 0; p < 6; ++p) {
        EXPECT_EQ(raw[p * 8 + 6], 0.0f);
        EXPECT_EQ(raw[p * 8 + 7], 0.0f);
    }
}

TEST(Convolution, DescriptorValidationNamesTheProperty) {
    CNNConvolutionDescriptor d(3, 3, 6, 8);
    d.groups = 4;
    try {
        d.validate();
        FAIL();
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("groups"), std::string::npos);
    }
    CNNConvolutionDescriptor zero(3, 3, 0, 8);
    EXPECT_THROW(zero.validate(), ValueError);
}

// ---- hardening (issue 8) -----------------------------------------------------------------------

TEST(Checked, ProductsAndNarrowing) {
    EXPECT_EQ(checked::product({3, 5, 7}, "x"), 105u);
    EXPECT_THROW(checked::product({int64_t(1) << 40, int64_t(1) << 40}, "x"), ValueError);
    EXPECT_THROW(checked::product({2, -1}, "x"), ValueError);
    EXPECT_THROW(checked::floatBytes(uint64_t(1) << 62, "x"), ValueError);
    EXPECT_EQ(checked::toInt32(int64_t(INT32_MAX), "x"), INT32_MAX);
    EXPECT_THROW(checked::toInt32(int64_t(1) << 32, "x"), ValueError);
    EXPECT_THROW(checked::toInt32(uint64_t(1) << 31, "x"), ValueError);
    EXPECT_THROW(checked::addSigned(INT64_MAX, 1, "x"), ValueError);
}

TEST(Hardening, OverflowingDescriptorsAndStatesAreRejected) {
    Device cpu("cpu");
    EXPECT_THROW(Image(cpu, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 1, 1, 4, int64_t(1) << 60)),
                 ValueError);
    EXPECT_THROW(State(cpu, SIZE_MAX), ValueError);
    EXPECT_THROW(padding::destinationSize(10, 0, 3, 0), ValueError);
    EXPECT_THROW(padding::offset(10, 0, 3, PaddingMethod::SizeSame, padding::Axis::X), ValueError);
    EXPECT_THROW(padding::destinationSize(10, 1, 3, 4), ValueError);
    EXPECT_THROW(NNDefaultPadding::paddingWithMethod(1u << 20), ValueError);
}

// Every backend op checks its bindings before it encodes, so a C++ caller with a hand-made params
// struct gets a ValueError instead of an out-of-bounds access.
TEST(Hardening, BackendOpsValidateTheirBindings) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    Backend& backend = cpu.backend();
    BufferSlice small{backend.newBuffer(4 * 4 * 4 * sizeof(float)), 0};  // one 4x4 image, 4 channels
    NeuronForwardParams p{};
    p.source = ImageLayout{4, 4, 4, 64, 0, 4};
    p.destination = p.source;
    p.batch = 1;
    p.clipWidth = p.clipHeight = 4;
    p.neuron.type = kNeuronReLU;
    EXPECT_NO_THROW(backend.neuronForward(*cb, p, small, {}, small));
    p.batch = 2;  // two images in a one-image buffer
    EXPECT_THROW(backend.neuronForward(*cb, p, small, {}, small), ValueError);
    p.batch = 1;
    EXPECT_THROW(backend.neuronForward(*cb, p, small.advancedBy(16), {}, small), ValueError);  // offset
    p.clipX = 1;  // clip beyond the destination
    EXPECT_THROW(backend.neuronForward(*cb, p, small, {}, small), ValueError);
    p.clipX = 0;
    p.neuron.hasChannelData = 1;  // PReLU data missing
    EXPECT_THROW(backend.neuronForward(*cb, p, small, {}, small), ValueError);
    p.neuron.hasChannelData = 0;
    p.source.channelOffset = 2;  // channel slice beyond the pixel stride
    EXPECT_THROW(backend.neuronForward(*cb, p, small, {}, small), ValueError);

    ConvolutionParams c{};
    c.source = c.destination = ImageLayout{4, 4, 4, 64, 0, 4};
    c.batch = 1;
    c.groups = 1;
    c.kernelWidth = c.kernelHeight = 3;
    c.strideX = c.strideY = c.dilationX = c.dilationY = 1;
    c.clipWidth = c.clipHeight = 4;
    BufferSlice weights{backend.newBuffer(4 * 9 * 4 * sizeof(float)), 0};
    EXPECT_NO_THROW(backend.convolutionForward(*cb, c, small, weights, {}, {}, small, {}));
    c.kernelWidth = 5;  // more weights than the buffer holds
    EXPECT_THROW(backend.convolutionForward(*cb, c, small, weights, {}, {}, small, {}), ValueError);
    c.kernelWidth = 3;
    c.hasBias = 1;  // bias binding missing
    EXPECT_THROW(backend.convolutionForward(*cb, c, small, weights, {}, {}, small, {}), ValueError);
    EXPECT_THROW(backend.copyBuffer(*cb, small, weights, 1 << 20), ValueError);
}

// A buffer that claims any length without memory behind it: lets a test build an image over
// 2**31 floats without allocating it (nothing may touch its contents).
class HollowBuffer final : public Buffer {
public:
    explicit HollowBuffer(size_t length) : length_(length) {}
    void* contents() override { return nullptr; }
    size_t length() const override { return length_; }

private:
    size_t length_;
};

TEST(Hardening, ImagesOverTwoToThe31FloatsAreRejectedUpFront) {
    Device cpu("cpu");
    auto d = ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 32768, 16384, 4);  // 2**31 floats
    try {
        Image::wrap(cpu, d, BufferSlice{std::make_shared<HollowBuffer>(size_t(1) << 33), 0}, 4);
        FAIL() << "an image of 2**31 floats was accepted";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("2**31"), std::string::npos) << e.what();
    }
    // The largest image allowed is fine (nothing touches its memory here).
    auto largest = ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 32767, 16384, 4);
    auto image = Image::wrap(cpu, largest, BufferSlice{std::make_shared<HollowBuffer>(size_t(1) << 33), 0}, 4);
    EXPECT_EQ(image->layout(0, 4).imageStride, 32767 * 16384 * 4);
    // A wrapped storage smaller than the descriptor needs is refused.
    EXPECT_THROW(Image::wrap(cpu, largest, BufferSlice{std::make_shared<HollowBuffer>(1024), 0}, 4), ValueError);
}

TEST(Hardening, WaitingInsideOwnHandlerIsAnError) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    std::atomic<int> errors{0};
    cb->addCompletedHandler([&](CommandBuffer& done) {
        try {
            done.waitUntilCompleted();
        } catch (const CommandBufferError&) {
            ++errors;
        }
    });
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(errors.load(), 1);
}

TEST(Hardening, FailOnCommitReportsThroughStatus) {
    Device cpu("cpu");
    CommandQueue queue(cpu);
    auto cb = queue.commandBuffer();
    cb->failOnCommit("planned");
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Error);
    EXPECT_EQ(cb->error(), "planned");
}

}  // namespace
}  // namespace mpsgrad
