// The Gram matrix and spatial-mean family's Metal kernels (gram_matrix_forward, gram_matrix_gradient,
// spatial_mean_forward, spatial_mean_gradient: no function constants, one variant each) run through
// the kernel classes on Device("metal") and compared with Device("cpu"). The spatial mean sums in
// the same fixed order on both backends, so it must match bit for bit; the Gram matrix runs through
// the BLAS on the CPU (another summation order), so it is compared to a float32 rounding bound.
// The shapes reach every path of metal/reduction.metal: channel counts not multiples of 4 and above
// 32, a source region smaller than the image (dX zeros outside it), batches of two images.
//
// Also: the binding checks reject a Gram matrix destination too small and a region outside the image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "kernels/reduction.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::blankImage;
using testmetal::expectSameOnBothBackends;
using testmetal::metalAvailable;
using testmetal::noiseImage;

TEST(MetalVariantsReduction, GramMatrixForwardAndGradient) {
    REQUIRE_METAL();
    for (int64_t channels : {3, 37}) {
        expectSameOnBothBackends([channels](const Device& device, CommandBuffer& cb) {
            auto x = noiseImage(device, 9, 7, channels, 2, 1);
            auto k = std::make_shared<NNGramMatrixCalculation>(device, 0.25f);
            auto y = blankImage(device, channels, 1, channels, 2);
            StatePtr state = k->resultState(x, {}, y);
            k->encode(cb, x, state, y);
            auto g = noiseImage(device, channels, 1, channels, 2, 2);
            auto grad = std::make_shared<NNGramMatrixCalculationGradient>(device, 0.25f);
            auto dx = blankImage(device, 9, 7, channels, 2);
            grad->encode(cb, g, x, state, dx);
            return std::vector<ImagePtr>{y, dx};
        }, "gram matrix, " + std::to_string(channels) + " channels", 1e-5);
    }
}

TEST(MetalVariantsReduction, SpatialMeanForwardAndGradient) {
    REQUIRE_METAL();
    for (bool wholeImage : {true, false}) {
        expectSameOnBothBackends([wholeImage](const Device& device, CommandBuffer& cb) {
            auto x = noiseImage(device, 11, 6, 37, 2, 3);
            auto k = std::make_shared<NNReductionSpatialMean>(device);
            if (!wholeImage) k->clipRectSource = Region{{2, 1, 0}, {5, 3, 1}};
            auto y = blankImage(device, 1, 1, 37, 2);
            StatePtr state = k->resultState(x, {}, y);
            k->encode(cb, x, state, y);
            auto g = noiseImage(device, 1, 1, 37, 2, 4);
            auto grad = std::make_shared<NNReductionSpatialMeanGradient>(device);
            auto dx = blankImage(device, 11, 6, 37, 2);
            grad->encode(cb, g, x, state, dx);
            return std::vector<ImagePtr>{y, dx};
        }, wholeImage ? "spatial mean" : "spatial mean over a region", 0);
    }
}

TEST(MetalVariantsReduction, BindingChecksRejectBadGeometry) {
    for (const char* name : {"cpu", "metal"}) {
        if (std::string(name) == "metal" && !metalAvailable()) continue;
        Device device(name);
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        auto x = noiseImage(device, 3, 2, 5, 1, 5);
        auto small = noiseImage(device, 4, 1, 5, 1, 6);  // a 5-channel Gram matrix needs 5 x 1 pixels
        GramMatrixParams p{};
        p.source = x->layout(0, 5);
        p.destination = small->layout(0, 5);
        p.batch = 1;
        p.alpha = 1.0f;
        EXPECT_THROW(device.backend().gramMatrix(*cb, p, x->storage(0), small->storage(0)), ValueError) << name;
        SpatialMeanParams s{};
        s.source = x->layout(0, 5);
        s.destination = small->layout(0, 5);
        s.batch = 1;
        s.regionX = 1;
        s.regionWidth = 3;  // columns [1, 4) of a 3-wide image
        s.regionHeight = 1;
        EXPECT_THROW(device.backend().spatialMean(*cb, s, x->storage(0), small->storage(0)), ValueError) << name;
        s.regionWidth = 2;
        EXPECT_NO_THROW(device.backend().spatialMean(*cb, s, x->storage(0), small->storage(0))) << name;
        SpatialMeanGradientParams q{};
        q.gradient = small->layout(0, 5);
        q.destination = x->layout(0, 5);
        q.batch = 1;
        q.regionWidth = 3;
        q.regionHeight = 2;
        q.gradientX = 4;  // outside the 4-wide gradient
        EXPECT_THROW(device.backend().spatialMeanGradient(*cb, q, small->storage(0), x->storage(0)), ValueError) << name;
        cb->commit();
        cb->waitUntilCompleted();
    }
}

}  // namespace
}  // namespace mpsgrad
