// Test hooks of the Linux Metal emulation.
//
// Host code talks to the emulation only through metal-cpp, exactly as on
// Apple platforms. Tests additionally use these functions to inject failures,
// inspect the messages the host sent and tune the kernel runtime. Every
// function is also available with C linkage (mtlemu_*), e.g. for ctypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mtlemu {

// ------------------------------------------------------------ failure injection

// The next command buffer committed (on any queue) fails when it executes:
// its commands do not run, status() becomes MTLCommandBufferStatusError and
// error() is an NSError in MTLCommandBufferErrorDomain with `code` and
// localizedDescription `message`. Completion handlers still run.
void failNextCommandBuffer(const char* message, long code = 1 /* MTLCommandBufferErrorInternal */);

// The next newLibraryWithURL:/newLibraryWithFile:/newDefaultLibrary returns
// nil (setting its NSError** to an error with `message`, where it has one).
void failNextLibraryLoad(const char* message);

// ------------------------------------------------------------------ message trace

// Every message sent through objc_msgSend is recorded as "-[Class selector]"
// (or "+[Class selector]" for class methods); on by default.
void setTraceEnabled(bool enabled);
std::vector<std::string> trace();
void clearTrace();
// Number of trace entries equal to `entry`, e.g. "-[MTLFakeCommandBuffer commit]".
std::size_t traceCount(const std::string& entry);

// -------------------------------------------------------------- object accounting

// Objects of the emulation currently alive (created and not yet deallocated);
// compare before and after a piece of host code to find leaks.
long liveObjectCount();

// -------------------------------------------------------------------- execution

// Worker threads running threadgroups (0: MTLEMU_WORKERS or the hardware's, at most 8).
void setWorkerThreads(unsigned n);
// Run the threads of each threadgroup last to first: results that change
// reveal a missing barrier.
void setReverseThreadOrder(bool reverse);
// Byte that fills newBufferWithLength: buffers (default 0, as Metal zero-fills);
// e.g. 0xFF makes code that relies on fresh buffers being zero visible.
void setNewBufferFill(unsigned char byte);
// Metal API validation failures (setBytes over 4 KiB, unbound buffers, ...)
// make the command buffer fail with the message (default). With abort on,
// they abort the process like Metal's validation layer does.
void setAbortOnValidationError(bool abortOnError);

struct Stats {
    std::uint64_t commandBuffers = 0;   // executed
    std::uint64_t failedCommandBuffers = 0;
    std::uint64_t dispatches = 0;
    std::uint64_t blits = 0;
    std::uint64_t threadgroups = 0;
    std::uint64_t threads = 0;
    std::uint64_t barriers = 0;
    std::uint64_t simdOps = 0;
};
Stats stats();
void resetStats();

// Names of the kernels linked into the process (what a library contains).
std::vector<std::string> kernelNames();

// The counters of Stats per kernel (by Metal function name), since the start or the last reset;
// for the performance model (benchmarks/metal_roofline.py).
struct KernelStats {
    std::uint64_t dispatches = 0, threadgroups = 0, threads = 0, barriers = 0, simdOps = 0;
};
std::map<std::string, KernelStats> kernelStats();
void resetKernelStats();

// ------------------------------------------------------------ the device's capabilities

// What the fake MTLDevice reports and enforces. Defaults: an Apple7 GPU (M1). The environment
// sets the initial values: MTLEMU_GPU_FAMILY (apple1..apple9, mac1, mac2), MTLEMU_SIMD_WIDTH,
// MTLEMU_MAX_THREADS_PER_THREADGROUP, MTLEMU_THREADGROUP_MEMORY (bytes).
struct DeviceConfig {
    // The newest GPU family: "appleN" supports Apple1..AppleN (and Mac2 and Metal3 from Apple7,
    // as Apple silicon Macs do); "mac2" is an Intel or AMD Mac GPU (Mac1, Mac2, Metal3).
    std::string family = "apple7";
    // Every pipeline's threadExecutionWidth. The kernel runtime executes 32-wide simdgroups
    // only: a dispatch on a device of another width fails, naming the width.
    unsigned simdWidth = 32;
    // The device's maxThreadsPerThreadgroup, and the cap on every pipeline's
    // maxTotalThreadsPerThreadgroup (real pipelines may allow fewer than 1024 threads);
    // dispatches beyond a pipeline's cap fail validation.
    unsigned maxThreadsPerThreadgroup = 1024;
    // maxThreadgroupMemoryLength; dispatches using more fail validation.
    std::size_t threadgroupMemory = 32 * 1024;
};
DeviceConfig deviceConfig();
// Takes effect for every later query and dispatch (objects already made keep working).
void setDeviceConfig(const DeviceConfig& config);
// Back to the environment's values (or the defaults).
void resetDeviceConfig();

}  // namespace mtlemu

extern "C" {
void mtlemu_fail_next_command_buffer(const char* message);
void mtlemu_fail_next_library_load(const char* message);
void mtlemu_set_trace_enabled(int enabled);
void mtlemu_clear_trace(void);
std::size_t mtlemu_trace_count(const char* entry);
long mtlemu_live_object_count(void);
void mtlemu_set_worker_threads(unsigned n);
void mtlemu_set_reverse_thread_order(int reverse);
void mtlemu_set_new_buffer_fill(unsigned char byte);
// kernelStats() as text, one "name dispatches threadgroups threads barriers simdOps" line per kernel.
std::size_t mtlemu_kernel_stats(char* out, std::size_t size);
void mtlemu_reset_kernel_stats(void);
}
