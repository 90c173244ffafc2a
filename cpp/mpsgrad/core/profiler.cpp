#include "core/profiler.h"

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

namespace mpsgrad::profiler {
namespace {

std::atomic<bool> gEnabled{false};
std::mutex gMutex;
std::vector<Event> gEvents;                     // guarded by gMutex
std::chrono::steady_clock::time_point gOrigin;  // guarded by gMutex (written when switched on)
std::atomic<uint32_t> gNextThread{0};
thread_local std::string tScope;

double processCpuMicros() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e6 + double(t.tv_nsec) * 1e-3;
}

uint32_t threadNumber() {
    thread_local uint32_t number = gNextThread.fetch_add(1, std::memory_order_relaxed);
    return number;
}

}  // namespace

bool enabled() { return gEnabled.load(std::memory_order_relaxed); }

void setEnabled(bool on) {
    std::lock_guard<std::mutex> lock(gMutex);
    if (on) {
        gEvents.clear();
        gOrigin = std::chrono::steady_clock::now();
    }
    gEnabled.store(on, std::memory_order_relaxed);
}

std::vector<Event> take() {
    std::lock_guard<std::mutex> lock(gMutex);
    std::vector<Event> events;
    events.swap(gEvents);
    return events;
}

EncodeScope::EncodeScope(std::string label) : active_(enabled()) {
    if (!active_) return;  // nothing reads the scope while the profiler is off
    previous_ = std::move(tScope);
    tScope = std::move(label);
}

EncodeScope::~EncodeScope() {
    if (active_) tScope = std::move(previous_);
}

std::function<void()> timed(const char* op, const char* backend, uint64_t commandBuffer,
                            std::function<void()> work) {
    if (!enabled()) return work;
    return [op, backend, commandBuffer, scope = tScope, work = std::move(work)] {
        const auto start = std::chrono::steady_clock::now();
        const double cpuStart = processCpuMicros();
        work();  // an exception propagates unrecorded: the command buffer fails there
        const double cpuEnd = processCpuMicros();
        const auto end = std::chrono::steady_clock::now();
        std::lock_guard<std::mutex> lock(gMutex);
        if (!gEnabled.load(std::memory_order_relaxed)) return;  // switched off meanwhile
        const auto micros = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
        gEvents.push_back(Event{op, scope, backend, commandBuffer, micros(start - gOrigin), micros(end - start),
                                cpuEnd - cpuStart, threadNumber()});
    };
}

}  // namespace mpsgrad::profiler
