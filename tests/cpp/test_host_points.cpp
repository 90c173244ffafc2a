// CommandBuffer::encodeHostCallback (docs/metal.md "Host points") on every device this build has:
// a host callback runs after the work encoded before it and before the work encoded after it,
// its exception fails the command buffer like any other failure, and nothing hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/command_buffer.h"
#include "core/device.h"
#include "core/errors.h"

namespace mpsgrad {
namespace {

// One float of device memory, readable and writable from the host.
struct Cell {
    BufferSlice slice;
    explicit Cell(Device& device, float value) : slice{device.backend().newBuffer(sizeof(float)), 0} {
        *slice.floats() = value;
    }
    float& operator*() const { return *slice.floats(); }
};

void copyCell(Device& device, CommandBuffer& cb, const Cell& from, const Cell& to) {
    device.backend().copyBuffer(cb, from.slice, to.slice, sizeof(float));
}

// Runs `body` once per device of the build.
template <typename Body>
void forEachDevice(Body body) {
    for (const auto& name : Device::availableDevices()) {
        SCOPED_TRACE("device " + name);
        Device device(name);
        body(device);
    }
}

TEST(HostPoints, RunBetweenTheWorkBeforeAndAfterThemInOrder) {
    forEachDevice([](Device& device) {
        CommandQueue queue(device);
        Cell a(device, 1.0f), b(device, 0.0f), c(device, 0.0f), d(device, 0.0f);
        std::vector<std::string> seen;  // the callbacks run one after another, never at once
        auto cb = queue.commandBuffer();
        copyCell(device, *cb, a, b);
        cb->encodeHostCallback([&] {
            seen.push_back("first saw b=" + std::to_string(int(*b)) + " c=" + std::to_string(int(*c)));
            *b = 10.0f;  // the copy encoded after this point must see it
        });
        copyCell(device, *cb, b, c);
        cb->encodeHostCallback([&] {
            seen.push_back("second saw c=" + std::to_string(int(*c)) + " d=" + std::to_string(int(*d)));
            *c += 5.0f;
        });
        copyCell(device, *cb, c, d);
        EXPECT_TRUE(seen.empty());  // nothing runs before commit
        cb->commit();
        cb->waitUntilCompleted();
        EXPECT_EQ(cb->status(), CommandBufferStatus::Completed) << cb->error();
        ASSERT_EQ(seen.size(), 2u);
        EXPECT_EQ(seen[0], "first saw b=1 c=0");
        EXPECT_EQ(seen[1], "second saw c=10 d=0");
        EXPECT_EQ(*d, 15.0f);
    });
}

TEST(HostPoints, AloneFirstOrLastInABuffer) {
    forEachDevice([](Device& device) {
        CommandQueue queue(device);
        std::atomic<int> calls{0};
        auto alone = queue.commandBuffer();  // a buffer with no device work at all
        alone->encodeHostCallback([&] { ++calls; });
        alone->commit();
        alone->waitUntilCompleted();
        EXPECT_EQ(alone->status(), CommandBufferStatus::Completed) << alone->error();
        EXPECT_EQ(calls.load(), 1);

        Cell a(device, 3.0f), b(device, 0.0f);
        auto edges = queue.commandBuffer();
        edges->encodeHostCallback([&] { *a = 7.0f; });  // before any work
        copyCell(device, *edges, a, b);
        edges->encodeHostCallback([&] { *b *= 2.0f; });  // after all of it
        edges->encodeHostCallback([&] { ++calls; });     // two points in a row
        edges->commit();
        edges->waitUntilCompleted();
        EXPECT_EQ(edges->status(), CommandBufferStatus::Completed) << edges->error();
        EXPECT_EQ(*b, 14.0f);
        EXPECT_EQ(calls.load(), 2);
    });
}

TEST(HostPoints, KeepTheQueueOrderWithLaterBuffers) {
    forEachDevice([](Device& device) {
        CommandQueue queue(device);
        Cell a(device, 0.0f), b(device, 0.0f), c(device, 0.0f);
        auto first = queue.commandBuffer();
        first->encodeHostCallback([&] { *a = 4.0f; });
        copyCell(device, *first, a, b);
        auto second = queue.commandBuffer();
        copyCell(device, *second, b, c);  // runs after all of `first`, host point included
        first->commit();
        second->commit();
        second->waitUntilCompleted();  // waiting on the later buffer only
        EXPECT_EQ(second->status(), CommandBufferStatus::Completed) << second->error();
        EXPECT_EQ(*c, 4.0f);
        first->waitUntilCompleted();
        EXPECT_EQ(first->status(), CommandBufferStatus::Completed) << first->error();
    });
}

TEST(HostPoints, AnExceptionFailsTheBufferAndSkipsLaterCallbacks) {
    forEachDevice([](Device& device) {
        CommandQueue queue(device);
        Cell a(device, 1.0f), b(device, 0.0f);
        std::atomic<int> later{0}, handlers{0};
        auto cb = queue.commandBuffer();
        copyCell(device, *cb, a, b);
        cb->encodeHostCallback([] { throw std::runtime_error("the peer went away"); });
        copyCell(device, *cb, b, a);
        cb->encodeHostCallback([&] { ++later; });
        cb->addCompletedHandler([&](CommandBuffer& done) {
            EXPECT_EQ(done.status(), CommandBufferStatus::Error);
            ++handlers;
        });
        cb->commit();
        cb->waitUntilCompleted();  // returns: no hang
        EXPECT_EQ(cb->status(), CommandBufferStatus::Error);
        EXPECT_NE(cb->error().find("host callback failed: the peer went away"), std::string::npos) << cb->error();
        EXPECT_EQ(later.load(), 0);
        EXPECT_EQ(handlers.load(), 1);
        EXPECT_EQ(*b, 1.0f);  // the work before the failing point ran

        // The queue goes on working.
        auto next = queue.commandBuffer();
        std::atomic<int> calls{0};
        next->encodeHostCallback([&] { ++calls; });
        next->commit();
        next->waitUntilCompleted();
        EXPECT_EQ(next->status(), CommandBufferStatus::Completed) << next->error();
        EXPECT_EQ(calls.load(), 1);
    });
}

TEST(HostPoints, MisuseIsRefused) {
    forEachDevice([](Device& device) {
        CommandQueue queue(device);
        auto cb = queue.commandBuffer();
        EXPECT_THROW(cb->encodeHostCallback(nullptr), ValueError);
        cb->commit();
        EXPECT_THROW(cb->encodeHostCallback([] {}), CommandBufferError);
        cb->waitUntilCompleted();
        // A buffer with host points that is never committed is simply dropped.
        auto dropped = queue.commandBuffer();
        dropped->encodeHostCallback([] { ADD_FAILURE() << "an uncommitted buffer's callback ran"; });
    });
}

}  // namespace
}  // namespace mpsgrad
