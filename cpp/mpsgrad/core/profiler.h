// The profiler users get (mpsgrad.profile(), docs/performance.md "Profiling a step"): while it is
// on, every backend op that runs records its wall and process CPU time, with the op's name, the
// graph node (or kernel) that encoded it and the command buffer it ran in.
//
// Off, it costs one relaxed atomic load per encoded op. On, each op pays two clock reads at each
// end and one locked append. Process CPU time is the sum over all threads while the op ran, the
// BLAS and thread-pool threads included: ops of one queue run one after another, so with one
// queue busy it is the op's own CPU time (two queues running at once see each other's).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mpsgrad::profiler {

struct Event {
    std::string op;         // the backend op (e.g. "convolutionForward")
    std::string scope;      // what encoded it: a graph node ("CNNConvolutionNode conv1") or ""
    std::string backend;    // "cpu", "metal"
    uint64_t commandBuffer;  // CommandBuffer::id()
    double startMicros;     // since the profiler was switched on
    double wallMicros;
    double cpuMicros;       // process CPU time while the op ran (every thread)
    uint32_t thread;        // a small number per host thread that ran ops
};

bool enabled();
// Switching on clears the recorded events and restarts the clock.
void setEnabled(bool on);
// The events recorded so far (and forgets them).
std::vector<Event> take();

// Names what the calling thread encodes until the scope ends (nested scopes: the innermost).
class EncodeScope {
public:
    explicit EncodeScope(std::string label);
    ~EncodeScope();
    EncodeScope(const EncodeScope&) = delete;
    EncodeScope& operator=(const EncodeScope&) = delete;

private:
    std::string previous_;
    bool active_;
};

// `work` wrapped to record an Event when it runs, when the profiler is on now; else `work` itself.
// `op` must outlive the work (a string literal or __func__).
std::function<void()> timed(const char* op, const char* backend, uint64_t commandBuffer,
                            std::function<void()> work);

}  // namespace mpsgrad::profiler
