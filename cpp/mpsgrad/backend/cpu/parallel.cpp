#include "parallel.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mpsgrad::cpu {
namespace {

thread_local bool insideParallelRegion = false;

// Persistent workers; each parallelFor publishes one job that the workers and the
// caller drain chunk by chunk.
class Pool {
public:
    Pool() {
        int extra = threadCount() - 1;
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
            pending_ = chunks;
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        drain();
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void workerLoop() {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
                if (stopping_) return;
                seen = generation_;
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
            if (--pending_ == 0) done_.notify_all();
        }
        insideParallelRegion = false;
    }

    std::vector<std::thread> workers_;
    std::mutex jobMutex_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t chunkCount_ = 0, nextChunk_ = 0, pending_ = 0;
    uint64_t generation_ = 0;
    bool stopping_ = false;
    std::exception_ptr error_;
};

Pool& pool() {
    static Pool instance;
    return instance;
}

}  // namespace

int threadCount() {
    static const int count = std::max(1u, std::thread::hardware_concurrency());
    return count;
}

void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    if (count <= 0) return;
    grain = std::max<int64_t>(1, grain);
    int64_t maxChunks = (count + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(maxChunks, int64_t(threadCount()) * 4);
    if (chunks <= 1 || insideParallelRegion || threadCount() == 1) {
        body(0, count);
        return;
    }
    int64_t per = (count + chunks - 1) / chunks;
    pool().run(chunks, [&](int64_t c) {
        int64_t begin = c * per;
        int64_t end = std::min(count, begin + per);
        if (begin < end) body(begin, end);
    });
}

}  // namespace mpsgrad::cpu
