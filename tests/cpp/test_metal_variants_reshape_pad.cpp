// The reshape and pad family's Metal kernels (reshape_copy, pad_forward, pad_gradient: no function
// constants, one variant each) run through the kernel classes on Device("metal") and compared bit
// for bit with Device("cpu"): copies and fixed-order sums give identical floats on both backends.
// The shapes reach every path of metal/reshape_pad.metal: channel counts not multiples of 4, a
// grid of several threadgroups, every edge mode (index tables with -1 entries, clamped and
// reflected entries, empty and multi-entry gradient lists), batches of two images.
//
// Also: the binding checks reject index tables that point outside an image (both backends).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"
#include "kernels/reshape_pad.h"
#include "metal_variant_support.h"

namespace mpsgrad {
namespace {

using testmetal::contents;
using testmetal::expectSameOnBothBackends;
using testmetal::metalAvailable;
using testmetal::noiseImage;

TEST(MetalVariantsReshapePad, ReshapeForwardAndGradient) {
    REQUIRE_METAL();
    expectSameOnBothBackends([](const Device& device, CommandBuffer& cb) {
        auto x = noiseImage(device, 9, 7, 6, 1, 1);  // 378 elements, reshaped to 14 x 9 x 3
        auto k = std::make_shared<NNReshape>(device);
        k->destinationImageAllocator = ImageAllocator::persistentAllocator();  // results read after completion
        StatePtr state;
        ImagePtr y = k->encode(cb, x, &state, false, 14, 9, 3);
        auto g = noiseImage(device, 14, 9, 3, 1, 2);
        auto grad = std::make_shared<NNReshapeGradient>(device);
        grad->destinationImageAllocator = ImageAllocator::persistentAllocator();
        ImagePtr dx = grad->encode(cb, g, x, state);
        return std::vector<ImagePtr>{y, dx};
    }, "reshape");
}

TEST(MetalVariantsReshapePad, PadEveryEdgeModeAndBatch) {
    REQUIRE_METAL();
    for (ImageEdgeMode mode : {ImageEdgeMode::Zero, ImageEdgeMode::Clamp, ImageEdgeMode::Mirror,
                               ImageEdgeMode::MirrorWithEdge, ImageEdgeMode::Constant}) {
        expectSameOnBothBackends([mode](const Device& device, CommandBuffer& cb) {
            // 2 images of 5 x 3 x 5; padding beyond the image size reflects more than once.
            auto x = noiseImage(device, 5, 3, 5, 2, 3);
            auto k = std::make_shared<NNPad>(device, ImageCoordinate{7, 4, 2}, ImageCoordinate{3, 5, 6});
            k->edgeMode = mode;
            k->fillValue = 0.75f;
            auto y = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 15,
                                                                             12, 13, 2));
            StatePtr state = k->resultState(x, {}, y);
            k->offset = Offset{-7, -4, 0};
            k->encode(cb, x, state, y);
            auto g = noiseImage(device, 15, 12, 13, 2, 4);
            auto dx = std::make_shared<Image>(device, ImageDescriptor::make(ImageFeatureChannelFormat::Float32, 5, 3,
                                                                              5, 2));
            auto grad = std::make_shared<NNPadGradient>(device);
            grad->destinationImageDescriptor({g, x}, {state});
            grad->encode(cb, g, x, state, dx);
            return std::vector<ImagePtr>{y, dx};
        }, std::string("pad, edge mode ") + std::to_string(int(mode)));
    }
}

TEST(MetalVariantsReshapePad, BindingChecksRejectBadIndexTables) {
    // A hand-built pad whose column table points past the source: refused before encoding.
    for (const char* name : {"cpu", "metal"}) {
        if (std::string(name) == "metal" && !metalAvailable()) continue;
        Device device(name);
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        auto x = noiseImage(device, 2, 2, 4, 1, 5);
        auto y = noiseImage(device, 3, 2, 4, 1, 6);
        PadParams p{};
        p.source = x->layout(0, 4);
        p.destination = y->layout(0, 4);
        p.batch = 1;
        p.clipWidth = 3;
        p.clipHeight = 2;
        std::vector<int32_t> maps = {0, 1, 2, 0, 1, 0, 1, 2, 3};  // mapX[2] = 2 >= width 2
        BufferSlice mapSlice{device.backend().newBuffer(maps.size() * 4), 0};
        std::memcpy(mapSlice.buffer->contents(), maps.data(), maps.size() * 4);
        BufferSlice fill{device.backend().newBuffer(16), 0};
        EXPECT_THROW(device.backend().padForward(*cb, p, x->storage(0), y->storage(0), mapSlice, fill), ValueError)
            << name;
        maps[2] = -1;
        std::memcpy(mapSlice.buffer->contents(), maps.data(), maps.size() * 4);
        EXPECT_NO_THROW(device.backend().padForward(*cb, p, x->storage(0), y->storage(0), mapSlice, fill)) << name;
        PadGradientParams q{};
        q.gradient = y->layout(0, 4);
        q.destination = x->layout(0, 4);
        q.batch = 1;
        std::vector<int32_t> csr = {0, 1, 1, /*y*/ 0, 0, 0, /*c*/ 0, 0, 0, 0, 0, /*listX*/ 7};
        q.startX = 0, q.startY = 3, q.startC = 6, q.listX = 11, q.listY = 12, q.listC = 12, q.listCount = 12;
        BufferSlice csrSlice{device.backend().newBuffer(csr.size() * 4), 0};
        std::memcpy(csrSlice.buffer->contents(), csr.data(), csr.size() * 4);
        EXPECT_THROW(device.backend().padGradient(*cb, q, y->storage(0), x->storage(0), csrSlice), ValueError) << name;
        ReshapeParams r{};
        r.source = x->layout(0, 4);
        r.destination = y->layout(0, 4);
        r.batch = 1;
        EXPECT_THROW(device.backend().reshapeCopy(*cb, r, x->storage(0), y->storage(0)), ValueError) << name;
        cb->commit();
        cb->waitUntilCompleted();
    }
}

}  // namespace
}  // namespace mpsgrad
