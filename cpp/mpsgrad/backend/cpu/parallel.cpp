#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mpsgrad::cpu {
namespace {

thread_local bool insideParallelRegion = false;

// Tells the core a spin-wait is in progress (less power, and the sibling hyper-thread runs).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Spins until ready() or `budget` has passed; returns ready(). A training loop issues its ops
// back to back, tens of microseconds apart: a worker that went to sleep after one op must be
// woken through the kernel for the next (a futex wake-up and a reschedule, tens of
// microseconds, as much as a whole element-wise op on an L3-resident tensor). Spinning a
// little first keeps the pool warm across consecutive ops, as OpenMP runtimes do.
template <class Ready>
bool spinUntil(Ready ready, std::chrono::microseconds budget) {
    if (budget.count() <= 0) return ready();
    const auto deadline = std::chrono::steady_clock::now() + budget;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (ready()) return true;
            cpuRelax();
        }
        if (std::chrono::steady_clock::now() >= deadline) return ready();
    }
}

int usableCpus();
int spinMicroseconds();

// Persistent workers; each parallelFor publishes one job that the workers and the
// caller drain chunk by chunk.
class Pool {
public:
    // `spin`: how long idle threads spin before they sleep (none when the pool has more threads
    // than the CPUs it may use: a spinning thread would then hold a CPU another one needs).
    Pool(int threads, std::chrono::microseconds spin)
        : spin_(threads <= usableCpus() ? spin : std::chrono::microseconds(0)) {
        int extra = threads - 1;
        for (int i = 0; i < extra; ++i) workers_.emplace_back([this] { workerLoop(); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (auto& t : workers_) t.join();
    }

    void run(int64_t chunks, const std::function<void(int64_t)>& chunk) {
        std::unique_lock<std::mutex> jobLock(jobMutex_);  // one job at a time
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &chunk;
            chunkCount_ = chunks;
            nextChunk_ = 0;
            pending_.store(chunks, std::memory_order_relaxed);
            error_ = nullptr;
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();  // no system call when every worker is spinning
        drain();
        spinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; }, spin_);
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_.load(std::memory_order_relaxed) == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void workerLoop() {
        uint64_t seen = 0;
        for (;;) {
            spinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; }, spin_);
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
                if (stopping_) return;
                seen = generation_.load(std::memory_order_relaxed);
            }
            drain();
        }
    }

    void drain() {
        insideParallelRegion = true;
        for (;;) {
            int64_t index;
            const std::function<void(int64_t)>* job;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (job_ == nullptr || nextChunk_ >= chunkCount_) break;
                index = nextChunk_++;
                job = job_;
            }
            try {
                (*job)(index);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex_);
                if (!error_) error_ = std::current_exception();
            }
            std::lock_guard<std::mutex> lock(mutex_);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_all();
        }
        insideParallelRegion = false;
    }

    std::vector<std::thread> workers_;
    std::mutex jobMutex_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t chunkCount_ = 0, nextChunk_ = 0;
    // Written under mutex_; atomic so that spinning threads may read them without it.
    std::atomic<int64_t> pending_{0};
    std::atomic<uint64_t> generation_{0};
    bool stopping_ = false;
    const std::chrono::microseconds spin_;
    std::exception_ptr error_;
};

// The current pool. setThreadCount swaps in a new one; a parallelFor already running keeps
// the old one alive (shared_ptr) until it returns, and the last owner joins its workers.
std::mutex poolMutex;
std::shared_ptr<Pool> currentPool;
std::atomic<int> currentCount{0};

std::shared_ptr<Pool> pool() {
    std::lock_guard<std::mutex> lock(poolMutex);
    if (!currentPool)
        currentPool = std::make_shared<Pool>(threadCount(), std::chrono::microseconds(spinMicroseconds()));
    return currentPool;
}

// A strictly positive integer, or 0 when `text` is not one.
int parsePositive(const char* text) {
    if (!text || !*text) return 0;
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    while (end && (*end == ' ' || *end == '\n' || *end == '\t')) ++end;
    if (!end || *end != '\0' || v < 1 || v > 4096) return 0;
    return int(v);
}

// CPUs allowed by a cgroup quota (rounded up), 0 when there is none.
int cgroupQuotaCpus() {
    double quota = -1, period = -1;
    {
        std::ifstream v2("/sys/fs/cgroup/cpu.max");  // "max 100000" or "200000 100000"
        std::string q;
        if (v2 >> q >> period && q != "max") quota = std::atof(q.c_str());
    }
    if (quota <= 0) {
        std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
        if (!(q1 >> quota) || !(p1 >> period)) quota = -1;
    }
    if (quota <= 0 || period <= 0) return 0;
    return std::max(1, int(std::ceil(quota / period)));
}

// The CPUs this process may use: its CPU affinity mask (sched_getaffinity), capped by a cgroup
// CPU quota rounded up; std::thread::hardware_concurrency() where neither is available; >= 1.
int usableCpus() {
    static const int cpus = [] {
        int count = int(std::thread::hardware_concurrency());
#if defined(__linux__)
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) == 0) count = CPU_COUNT(&set);
#endif
        if (int quota = cgroupQuotaCpus()) count = count > 0 ? std::min(count, quota) : quota;
        return std::max(1, count);
    }();
    return cpus;
}

// How long idle pool threads spin before sleeping: MPSGRAD_SPIN_MICROSECONDS when it holds an
// integer in [0, 100000] (0: sleep at once), else 100 us (longer than the Python work between
// two ops of a training loop, short enough to cost nothing visible when the program stops
// issuing ops).
int spinMicroseconds() {
    static const int micros = [] {
        const char* text = std::getenv("MPSGRAD_SPIN_MICROSECONDS");
        if (text && *text) {
            char* end = nullptr;
            long v = std::strtol(text, &end, 10);
            if (end && *end == '\0' && v >= 0 && v <= 100000) return int(v);
        }
        return 100;
    }();
    return micros;
}

}  // namespace

int defaultThreadCount() {
    if (int fromEnv = parsePositive(std::getenv("MPSGRAD_NUM_THREADS"))) return fromEnv;
    return usableCpus();
}

int threadCount() {
    int count = currentCount.load(std::memory_order_relaxed);
    if (count == 0) {
        static const int initial = defaultThreadCount();
        int expected = 0;
        currentCount.compare_exchange_strong(expected, initial);
        count = currentCount.load();
    }
    return count;
}

void setThreadCount(int count) {
    if (count < 1)
        throw std::invalid_argument("thread count must be >= 1, got " + std::to_string(count));
    std::shared_ptr<Pool> old;
    {
        std::lock_guard<std::mutex> lock(poolMutex);
        currentCount.store(count);
        old = std::move(currentPool);  // the next parallelFor builds a pool of `count` threads
    }
    // `old` is released here, outside the lock (its destructor joins its workers), unless a
    // running parallelFor still holds it.
}

void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    if (count <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int threads = threadCount();
    int64_t maxChunks = (count + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(maxChunks, int64_t(threads) * 4);
    if (chunks <= 1 || insideParallelRegion || threads == 1) {
        body(0, count);
        return;
    }
    int64_t per = (count + chunks - 1) / chunks;
    std::shared_ptr<Pool> p = pool();
    p->run(chunks, [&](int64_t c) {
        int64_t begin = c * per;
        int64_t end = std::min(count, begin + per);
        if (begin < end) body(begin, end);
    });
}

}  // namespace mpsgrad::cpu
