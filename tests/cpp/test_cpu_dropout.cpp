// The dropout mask generator and the CPU dropout op: Philox4x32-10 (metal/philox.h) against the
// known-answer vectors published with the Random123 library (Salmon et al., SC 2011), the op
// against the mask function applied element by element, and the binding checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/device.h"
#include "metal/dropout_params.h"

namespace mpsgrad {
namespace {

TEST(Philox4x32_10, KnownAnswers) {
    struct Vector {
        PhiloxWords counter;
        uint32_t k0, k1;
        PhiloxWords expected;
    };
    const Vector vectors[] = {
        {{0u, 0u, 0u, 0u}, 0u, 0u, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu,
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u,
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (const Vector& v : vectors) {
        const PhiloxWords r = philox4x32_10(v.counter, v.k0, v.k1);
        EXPECT_EQ(r.v0, v.expected.v0);
        EXPECT_EQ(r.v1, v.expected.v1);
        EXPECT_EQ(r.v2, v.expected.v2);
        EXPECT_EQ(r.v3, v.expected.v3);
    }
}

BufferSlice hostBuffer(const std::vector<float>& data) {
    auto buffer = Device("cpu").backend().newBuffer(data.size() * sizeof(float));
    std::memcpy(buffer->contents(), data.data(), data.size() * sizeof(float));
    return BufferSlice{buffer, 0};
}

DropoutParams params(int width, int height, int channels, int batch) {
    DropoutParams p{};
    ImageLayout l{};
    l.width = width, l.height = height, l.pixelStride = (channels + 3) / 4 * 4;
    l.imageStride = l.pixelStride * width * height, l.channelOffset = 0, l.channels = channels;
    p.source = p.destination = l;
    p.batch = batch, p.clipWidth = width, p.clipHeight = height;
    p.mask.seedLo = 0x12345678u, p.mask.seedHi = 0x9abcdef0u, p.mask.streamLo = 3;
    p.mask.keepProbability = 0.3f;
    p.mask.threshold = uint32_t(std::floor(0.3 * 4294967296.0));
    p.mask.maskWidth = width, p.mask.maskHeight = height, p.mask.maskChannels = channels;
    p.mask.strideX = p.mask.strideY = p.mask.strideZ = 1;
    p.mask.firstImage = 2;
    return p;
}

TEST(CpuDropout, AppliesTheMaskFunctionElementByElement) {
    const DropoutParams p = params(5, 3, 7, 2);
    std::vector<float> x(size_t(p.source.imageStride) * p.batch);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + float(i % 13);
    BufferSlice xs = hostBuffer(x), ys = hostBuffer(std::vector<float>(x.size(), -9.0f));
    cpu::dropout(p, xs, ys);
    const float* y = ys.floats();
    int kept = 0;
    for (int n = 0; n < p.batch; ++n)
        for (int yy = 0; yy < 3; ++yy)
            for (int xx = 0; xx < 5; ++xx)
                for (int c = 0; c < 8; ++c) {
                    const size_t i = size_t(n) * p.source.imageStride + (size_t(yy) * 5 + xx) * 8 + c;
                    if (c >= 7) {
                        EXPECT_EQ(y[i], -9.0f) << "padding lane written";
                        continue;
                    }
                    const DropoutIndex e = dropoutElement(p.mask, 2 + n, xx, yy, c);
                    EXPECT_EQ(e, DropoutIndex(((2 + n) * 3 + yy) * 5 + xx) * 7 + c);
                    const bool keep = dropoutKeeps(p.mask, dropoutBlock(p.mask, e >> 2), e);
                    kept += keep;
                    EXPECT_EQ(y[i], keep ? x[i] / 0.3f : 0.0f) << "element " << i;
                }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, 2 * 3 * 5 * 7);
}

TEST(CpuDropout, RefusesBadParamsAndBindingsTooSmall) {
    const DropoutParams p = params(4, 4, 4, 1);
    std::vector<float> x(size_t(p.source.imageStride));
    BufferSlice xs = hostBuffer(x), ys = hostBuffer(x), shortY = hostBuffer(std::vector<float>(x.size() - 1));
    EXPECT_NO_THROW(cpu::dropout(p, xs, ys));
    EXPECT_THROW(cpu::dropout(p, xs, shortY), std::invalid_argument);
    DropoutParams bad = p;
    bad.mask.keepProbability = 1.0f;
    EXPECT_THROW(cpu::dropout(bad, xs, ys), std::invalid_argument);
    bad = p;
    bad.mask.strideY = 2;
    EXPECT_THROW(cpu::dropout(bad, xs, ys), std::invalid_argument);
    bad = p;
    bad.mask.maskX = 1;  // the clip would reach beyond the mask grid
    EXPECT_THROW(cpu::dropout(bad, xs, ys), std::invalid_argument);
}

}  // namespace
}  // namespace mpsgrad
