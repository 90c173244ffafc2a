// Float16 image storage (docs/float16.md): the scalar conversions of core/half.h, the
// convertImageFormat op on every device (both Metal kernels, convert.metal, against the CPU
// backend), its binding checks, and the float32 shadows of the kernel funnels.
//
// Oracle for float -> half: the compiler's own _Float16 conversion (IEEE round to nearest even,
// gcc >= 12 and clang on x86-64/arm64); every half -> float -> half round trip is checked
// exhaustively.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/binding_checks.h"
#include "core/command_buffer.h"
#include "core/errors.h"
#include "core/half.h"
#include "core/image.h"
#include "core/unorm.h"
#include "kernels/neuron.h"

namespace mpsgrad {
namespace {

float fromBits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

bool isNanHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Floats that reach every branch of floatToHalfBits, then random bit patterns.
std::vector<float> testFloats() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e30f,
                            INFINITY, -INFINITY, 6.103515625e-05f, 6.0e-05f, 5.9604645e-08f, 2.9802322e-08f,
                            2.99e-08f, 2.98e-08f, 1e-40f, -1e-45f, 1.00048828125f, 1.00146484375f, 2049.0f, 2051.0f};
    std::mt19937 gen(1234);
    for (int i = 0; i < 200000; ++i) v.push_back(fromBits(uint32_t(gen())));
    return v;
}

TEST(Float16, EveryHalfRoundTripsExactly) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = halfBitsToFloat(uint16_t(h));
        if (isNanHalf(uint16_t(h))) {
            EXPECT_TRUE(std::isnan(f)) << h;
            EXPECT_TRUE(isNanHalf(floatToHalfBits(f))) << h;
            continue;
        }
        ASSERT_EQ(floatToHalfBits(f), uint16_t(h)) << "half bits " << h << " -> " << f;
    }
}

#if defined(__FLT16_MAX__)
TEST(Float16, FloatToHalfMatchesTheCompilersConversion) {
    for (float f : testFloats()) {
        const _Float16 oracle = static_cast<_Float16>(f);
        uint16_t bits;
        std::memcpy(&bits, &oracle, sizeof bits);
        const uint16_t ours = floatToHalfBits(f);
        if (std::isnan(f)) {
            EXPECT_TRUE(isNanHalf(ours));
            continue;
        }
        ASSERT_EQ(ours, bits) << "float " << f;
        ASSERT_EQ(halfBitsToFloat(ours), float(oracle));
    }
}
#endif

// Runs p on `device` over the given data, returns the destination's bytes.
template <class Out, class In>
std::vector<Out> convertOn(const std::string& deviceName, const std::vector<In>& input, bool toHalf,
                           int32_t storage = kStorageFloat16) {
    Device device(deviceName);
    Backend& backend = device.backend();
    auto source = backend.newBuffer(input.size() * sizeof(In));
    std::memcpy(source->contents(), input.data(), input.size() * sizeof(In));
    auto destination = backend.newBuffer(input.size() * sizeof(Out));
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    backend.convertImageFormat(*cb, ConvertFormatParams{int32_t(input.size()), toHalf ? 1 : 0, storage},
                               BufferSlice{source, 0}, BufferSlice{destination, 0});
    cb->commit();
    cb->waitUntilCompleted();
    EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
    std::vector<Out> out(input.size());
    std::memcpy(out.data(), destination->contents(), out.size() * sizeof(Out));
    return out;
}

TEST(Float16, ConvertOpMatchesScalarCodeOnEveryDevice) {
    const std::vector<float> floats = testFloats();
    std::vector<uint16_t> halves(65536);
    for (uint32_t h = 0; h < 65536; ++h) halves[h] = uint16_t(h);
    for (const auto& name : Device::availableDevices()) {
        SCOPED_TRACE(name);
        // float -> half, an odd count so that the vector loops' tails run
        std::vector<float> odd(floats.begin(), floats.begin() + 100003);
        const auto toHalf = convertOn<uint16_t>(name, odd, true);
        for (size_t i = 0; i < odd.size(); ++i) {
            if (std::isnan(odd[i])) {
                ASSERT_TRUE(isNanHalf(toHalf[i])) << i;
                continue;
            }
            ASSERT_EQ(toHalf[i], floatToHalfBits(odd[i])) << "float " << odd[i];
        }
        // half -> float: every half value
        const auto toFloat = convertOn<float>(name, halves, false);
        for (uint32_t h = 0; h < 65536; ++h) {
            const float expected = halfBitsToFloat(uint16_t(h));
            if (std::isnan(expected)) {
                ASSERT_TRUE(std::isnan(toFloat[h])) << h;
                continue;
            }
            ASSERT_EQ(std::memcmp(&toFloat[h], &expected, sizeof(float)), 0) << "half bits " << h;
        }
    }
}

// UNORM8 / UNORM16 (docs/storage_formats.md): the scalar rule's edges, and the convertImageFormat
// op of every device (convert.metal's unorm kernels on Metal) against it, bit for bit.
TEST(Unorm, ScalarRuleEdges) {
    EXPECT_EQ(floatToUnorm8(0.5f), 128);       // 127.5: ties to even
    EXPECT_EQ(floatToUnorm16(0.5f), 32768);    // 32767.5: ties to even
    EXPECT_EQ(floatToUnorm8(1.5f / 255.0f * (1.0f - 1e-7f)), 1);
    EXPECT_EQ(floatToUnorm8(NAN), 0);
    EXPECT_EQ(floatToUnorm8(-INFINITY), 0);
    EXPECT_EQ(floatToUnorm8(INFINITY), 255);
    EXPECT_EQ(floatToUnorm16(1.0000001f), 65535);
    EXPECT_EQ(floatToUnorm16(-0.0f), 0);
    for (uint32_t c = 0; c < 65536; ++c) {
        ASSERT_EQ(floatToUnorm16(unorm16ToFloat(uint16_t(c))), c);
        if (c < 256) ASSERT_EQ(floatToUnorm8(unorm8ToFloat(uint8_t(c))), c);
    }
    EXPECT_EQ(unorm8ToFloat(255), 1.0f);
    EXPECT_EQ(unorm16ToFloat(65535), 1.0f);
}

TEST(Unorm, ConvertOpMatchesScalarCodeOnEveryDevice) {
    std::vector<float> floats = testFloats();
    floats.resize(20001);  // odd: tails
    std::mt19937 gen(99);
    std::uniform_real_distribution<float> around(-0.25f, 1.25f);
    for (int i = 0; i < 20000; ++i) floats.push_back(around(gen));
    floats.push_back(NAN);
    std::vector<uint8_t> codes8(256);
    std::vector<uint16_t> codes16(65536);
    for (uint32_t c = 0; c < 65536; ++c) {
        codes16[c] = uint16_t(c);
        if (c < 256) codes8[c] = uint8_t(c);
    }
    for (const auto& name : Device::availableDevices()) {
        SCOPED_TRACE(name);
        const auto to8 = convertOn<uint8_t>(name, floats, true, kStorageUnorm8);
        const auto to16 = convertOn<uint16_t>(name, floats, true, kStorageUnorm16);
        for (size_t i = 0; i < floats.size(); ++i) {
            ASSERT_EQ(to8[i], floatToUnorm8(floats[i])) << floats[i];
            ASSERT_EQ(to16[i], floatToUnorm16(floats[i])) << floats[i];
        }
        const auto from8 = convertOn<float>(name, codes8, false, kStorageUnorm8);
        const auto from16 = convertOn<float>(name, codes16, false, kStorageUnorm16);
        for (uint32_t c = 0; c < 65536; ++c) {
            const float expected16 = unorm16ToFloat(uint16_t(c));
            ASSERT_EQ(std::memcmp(&from16[c], &expected16, sizeof(float)), 0) << c;
            if (c >= 256) continue;
            const float expected8 = unorm8ToFloat(uint8_t(c));
            ASSERT_EQ(std::memcmp(&from8[c], &expected8, sizeof(float)), 0) << c;
        }
    }
}

TEST(Float16, BindingChecks) {
    Device device("cpu");
    auto buffer = device.backend().newBuffer(64);
    const BufferSlice whole{buffer, 0};
    auto other = device.backend().newBuffer(64);
    const BufferSlice second{other, 0};
    EXPECT_NO_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{16, 0, kStorageFloat16}, whole, second));  // 32 -> 64 bytes
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{17, 0, kStorageFloat16}, whole, second), ValueError);
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{-1, 0, kStorageFloat16}, whole, second), ValueError);
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{4, 2, kStorageFloat16}, whole, second), ValueError);
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{4, 1, 0}, whole, second), ValueError);  // NONE
    // unorm8 storage: 16 floats (64 bytes) -> 16 bytes; the byte offset of a uint8 run may be odd.
    EXPECT_NO_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{16, 1, kStorageUnorm8}, second, BufferSlice{buffer, 1}));
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{4, 1, kStorageFloat16}, BufferSlice{buffer, 2}, second),
                 ValueError);  // a float binding at a 2-byte offset
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{4, 1, kStorageFloat16}, whole, BufferSlice{buffer, 8}),
                 ValueError);  // overlap
    EXPECT_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{4, 1, kStorageFloat16}, whole, BufferSlice{}), ValueError);
    EXPECT_NO_THROW(bindings::checkConvertImageFormat(ConvertFormatParams{0, 1, kStorageFloat16}, BufferSlice{}, BufferSlice{}));
    CommandQueue queue(device);
    auto cb = queue.commandBuffer();
    EXPECT_THROW(device.backend().convertImageFormat(*cb, ConvertFormatParams{17, 0, kStorageFloat16}, whole, second), ValueError);
}

ImagePtr halfImage(const Device& device, int64_t w, int64_t h, int64_t c) {
    return std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float16, w, h, c));
}

TEST(Float16, ImageSizesAndLayoutGuard) {
    Device device("cpu");
    auto image = halfImage(device, 3, 2, 5);
    EXPECT_EQ(image->pixelSize(), 16);
    EXPECT_EQ(image->resourceSize(), size_t(3 * 2 * 8 * 2));
    EXPECT_EQ(image->precision(), 11);
    EXPECT_THROW(image->layout(0, 5), ValueError);  // a float32 kernel must go through a shadow
    EXPECT_EQ(image->storageLayout(0, 5).pixelStride, 8);
    auto batch = Image::makeBatch(device, image->descriptor(), 3);
    EXPECT_TRUE(batch[0]->isFollowedBy(*batch[1]));
    EXPECT_EQ(batch[1]->storage(0).offset, image->resourceSize());
}

TEST(Float16, KernelsReadAndWriteThroughShadowsOnEveryDevice) {
    for (const auto& name : Device::availableDevices()) {
        SCOPED_TRACE(name);
        Device device(name);
        auto source = halfImage(device, 4, 3, 6);
        std::vector<float> values(4 * 3 * 6);
        for (size_t i = 0; i < values.size(); ++i) values[i] = 0.37f * float(int(i) - 30);
        source->writeBytes(values.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        auto temporary = std::make_shared<TemporaryImage>(*cb, source->descriptor());
        temporary->setReadCount(2);
        CNNNeuronLinear linear(device, 2.0f, 1.0f);
        linear.destinationImageAllocator = ImageAllocator::persistentAllocator();  // `first` is read at the end
        linear.encode(*cb, source, temporary);          // half -> shadow -> half
        ImagePtr first = linear.encode(*cb, temporary);  // returning: takes the source's format
        EXPECT_EQ(temporary->readCount(), 1);
        auto f32 = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 4, 3, 6));
        linear.encode(*cb, temporary, f32);
        EXPECT_EQ(temporary->readCount(), 0);
        cb->commit();
        cb->waitUntilCompleted();
        ASSERT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
        EXPECT_EQ(first->featureChannelFormat(), ImageFeatureChannelFormat::Float16);
        std::vector<float> got(values.size()), viaFirst(values.size());
        f32->readBytes(got.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        first->readBytes(viaFirst.data(), DataLayout::HeightxWidthxFeatureChannels, 0);
        for (size_t i = 0; i < values.size(); ++i) {
            const float x = halfBitsToFloat(floatToHalfBits(values[i]));
            const float y = halfBitsToFloat(floatToHalfBits(2.0f * x + 1.0f));  // the temporary image
            ASSERT_EQ(viaFirst[i], halfBitsToFloat(floatToHalfBits(2.0f * y + 1.0f))) << i;  // rounded to half
            ASSERT_EQ(got[i], 2.0f * y + 1.0f) << i;                                          // float32
        }
    }
}

}  // namespace
}  // namespace mpsgrad
