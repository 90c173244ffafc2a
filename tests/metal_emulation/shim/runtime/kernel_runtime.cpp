// Kernel runtime of the Linux Metal emulation: runs translated .metal kernels
// on the CPU with Metal's execution model.
//
// * A dispatch is split into threadgroups; worker threads take threadgroups
//   from a shared counter (the calling thread is one of the workers).
// * A threadgroup runs on one worker. If its kernel uses no barrier and no
//   simdgroup function, its threads simply run one after the other ("fast
//   path"). Otherwise every GPU thread is a fiber (its own stack, switched in
//   user space) and the worker schedules them cooperatively: a fiber runs until
//   it reaches a barrier or a simdgroup function, and the scheduler releases a
//   barrier once every thread that has to arrive has arrived.
// * Lanes are grouped into 32-wide simdgroups by thread_index_in_threadgroup.
//   Lanes that returned are inactive and excluded from simdgroup functions.
// * Misuse that Metal leaves undefined (returning before a barrier others wait
//   at, barriers in divergent control flow) fails the dispatch with a message
//   naming the .metal file and line, instead of hanging or crashing.
// * Threadgroup memory is allocated per threadgroup, exactly sized (so ASan
//   sees overflows) and filled with 0xFF bytes, which read as NaN.
#include "mtlemu/kernel_runtime.h"

#include "race_detector.h"
#include "random_order.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MTLEMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(MTLEMU_ASAN)
#define MTLEMU_ASAN 1
#endif
#ifdef MTLEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(MTLEMU_USE_UCONTEXT)
#define MTLEMU_FAST_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace mtlemu {
namespace rt {

// ===================================================================== registry

namespace {

std::mutex& registryMutex() {
    static std::mutex m;
    return m;
}
std::map<std::string, KernelInfo>& registry() {
    static std::map<std::string, KernelInfo> r;
    return r;
}

}  // namespace

Registrar::Registrar(const KernelInfo& info) {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = registry().find(info.name);
    if (it != registry().end()) {
        // The same translated file linked twice into one process is harmless;
        // two different files defining one name is what a metallib link rejects.
        if (std::strcmp(it->second.file, info.file) == 0) return;
        std::fprintf(stderr, "mtlemu: kernel '%s' is defined twice, in %s:%u and in %s:%u\n", info.name,
                     it->second.file, it->second.line, info.file, info.line);
        std::abort();
    }
    registry().emplace(info.name, info);
}

const KernelInfo* findKernel(const char* name) {
    if (!name) return nullptr;
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = registry().find(name);
    return it == registry().end() ? nullptr : &it->second;
}

std::vector<const KernelInfo*> allKernels() {
    std::lock_guard<std::mutex> lock(registryMutex());
    std::vector<const KernelInfo*> out;
    for (auto& kv : registry()) out.push_back(&kv.second);
    return out;
}

std::size_t dataTypeSize(unsigned t) {
    switch (t) {
        case kDataTypeBool: case kDataTypeChar: case kDataTypeUChar: return 1;
        case kDataTypeHalf: case kDataTypeShort: case kDataTypeUShort: return 2;
        case kDataTypeFloat: case kDataTypeInt: case kDataTypeUInt: return 4;
        case kDataTypeLong: case kDataTypeULong: return 8;
        default: return 0;
    }
}

const char* dataTypeName(unsigned t) {
    switch (t) {
        case kDataTypeBool: return "bool";
        case kDataTypeChar: return "char";
        case kDataTypeUChar: return "uchar";
        case kDataTypeHalf: return "half";
        case kDataTypeShort: return "short";
        case kDataTypeUShort: return "ushort";
        case kDataTypeFloat: return "float";
        case kDataTypeInt: return "int";
        case kDataTypeUInt: return "uint";
        case kDataTypeLong: return "long";
        case kDataTypeULong: return "ulong";
        default: return "unsupported type";
    }
}

// ====================================================================== fibers

#ifdef MTLEMU_FAST_SWITCH
// void mtlemu_fiber_switch(void** saveSp, void* loadSp)
// Saves the callee-saved registers and the SSE/x87 control words on the
// current stack, stores the stack pointer in *saveSp, then restores the same
// set from loadSp and returns on that stack. No system calls.
asm(R"(
    .text
    .p2align 4
    .globl mtlemu_fiber_switch
    .hidden mtlemu_fiber_switch
    .type mtlemu_fiber_switch,@function
mtlemu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mtlemu_fiber_switch,.-mtlemu_fiber_switch
)");
extern "C" __attribute__((visibility("hidden"))) void mtlemu_fiber_switch(void** saveSp, void* loadSp);
#endif

namespace {

struct KernelFault {
    std::string message;
};

enum class FiberState : unsigned char { Runnable, AtBarrier, AtSimd, Done };

std::size_t fiberStackSize() {
    static const std::size_t size = [] {
        std::size_t kb = 256;
#ifdef MTLEMU_ASAN
        kb = 512;  // ASan's redzones make frames larger
#endif
        if (const char* env = std::getenv("MTLEMU_FIBER_STACK_KB")) {
            long v = std::atol(env);
            if (v >= 64) kb = std::size_t(v);
        }
        return kb * 1024;
    }();
    return size;
}

std::size_t pageSize() {
    static const std::size_t p = std::size_t(sysconf(_SC_PAGESIZE));
    return p;
}

struct Fiber {
    void* sp = nullptr;              // saved stack pointer while switched out
#ifndef MTLEMU_FAST_SWITCH
    ucontext_t ctx;
#endif
    char* mapping = nullptr;         // guard page + stack
    char* stackBottom = nullptr;
    std::size_t stackSize = 0;
    ThreadIds ids;
    FiberState state = FiberState::Done;
    bool abandoned = false;          // stopped mid-kernel: its stack needs cleaning before reuse
    // Where the fiber waits, and with which simdgroup operation.
    const char* what = nullptr;
    const char* file = nullptr;
    unsigned line = 0;
    unsigned memFlags = 0;           // of the threadgroup_barrier it waits at
    SimdCombineFn combine = nullptr;
#ifdef MTLEMU_ASAN
    void* fakeStack = nullptr;
#endif

    void allocate() {
        const std::size_t guard = pageSize();
        stackSize = fiberStackSize();
        void* m = mmap(nullptr, stackSize + guard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) {
            std::perror("mtlemu: mmap of a fiber stack failed");
            std::abort();
        }
        mapping = static_cast<char*>(m);
        mprotect(mapping, guard, PROT_NONE);  // stack overflow faults instead of corrupting memory
        stackBottom = mapping + guard;
    }
    void release() {
        if (mapping) munmap(mapping, stackSize + pageSize());
        mapping = nullptr;
    }
};

struct TgAllocation {
    const char* key;
    void* ptr;
};

// Per-OS-thread state: the fibers (kept across dispatches) and the state of
// the threadgroup being run.
struct Worker {
    std::vector<Fiber> fibers;
    std::vector<SimdLane> lanes;
    unsigned current = 0;
    bool inFiber = false;
    void* schedulerSp = nullptr;
#ifndef MTLEMU_FAST_SWITCH
    ucontext_t schedulerCtx;
#endif
#ifdef MTLEMU_ASAN
    const void* schedulerBottom = nullptr;
    std::size_t schedulerSize = 0;
#endif
    const DispatchDesc* desc = nullptr;
    const ThreadIds* currentIds = nullptr;
    void* tgBuffers[kMaxBufferBindings] = {};
    std::vector<TgAllocation> tgStatic;
    std::vector<void*> tgOwned;
    std::size_t tgBytes = 0;
    bool faulted = false;
    std::string error;
    std::uint64_t barriers = 0, simdOps = 0;
    bool race = false;                       // the race detector watches this dispatch
    std::uint64_t orderSeed = 0;             // random order: seed of the running threadgroup, 0: off
    std::uint64_t orderRound = 0;
    unsigned char laneOrder[kSimdWidth];     // for the simd reduction being released

    ~Worker() {
        for (Fiber& f : fibers) f.release();
        freeThreadgroupMemory();
    }
    void freeThreadgroupMemory() {
        for (void* p : tgOwned) std::free(p);
        tgOwned.clear();
        tgStatic.clear();
        for (auto& b : tgBuffers) b = nullptr;
        tgBytes = 0;
    }
    void setFault(std::string message) {
        if (!faulted) {
            faulted = true;
            error = std::move(message);
        }
    }
};

thread_local Worker* tlsWorker = nullptr;

Worker& thisWorker() {
    static thread_local std::unique_ptr<Worker> owned;
    if (!owned) owned.reset(new Worker());
    return *owned;
}

void* allocPoisoned(std::size_t bytes, std::size_t align) {
    std::size_t n = bytes ? bytes : 1;
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n)
                                                 : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) {
        std::fprintf(stderr, "mtlemu: out of memory allocating threadgroup memory\n");
        std::abort();
    }
    std::memset(p, 0xFF, n);
    return p;
}

// ------------------------------------------------------------- context switches

[[noreturn]] void fiberMain();

void prepareFiber(Fiber& f) {
    if (!f.mapping) f.allocate();
#ifdef MTLEMU_ASAN
    if (f.abandoned) __asan_unpoison_memory_region(f.stackBottom, f.stackSize);
    f.fakeStack = nullptr;
#endif
    f.abandoned = false;
#ifdef MTLEMU_FAST_SWITCH
    // Build the frame mtlemu_fiber_switch pops: control words, six callee-saved
    // registers, then fiberMain as the return address, entered with the stack
    // aligned like after a call.
    std::uintptr_t top = reinterpret_cast<std::uintptr_t>(f.stackBottom + f.stackSize) & ~std::uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                                       // fiberMain's (never used) return address
    *--sp = reinterpret_cast<void*>(&fiberMain);
    for (int i = 0; i < 6; ++i) *--sp = nullptr;           // rbp rbx r12 r13 r14 r15
    --sp;
    unsigned mxcsr;
    unsigned short fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    std::memcpy(sp, &mxcsr, 4);
    std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stackBottom;
    f.ctx.uc_stack.ss_size = f.stackSize;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, reinterpret_cast<void (*)()>(&fiberMain), 0);
#endif
}

// Scheduler -> fiber; returns when the fiber yields or finishes.
void resumeFiber(Worker& w, Fiber& f) {
    w.inFiber = true;
#ifdef MTLEMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stackBottom, f.stackSize);
#endif
#ifdef MTLEMU_FAST_SWITCH
    mtlemu_fiber_switch(&w.schedulerSp, f.sp);
#else
    swapcontext(&w.schedulerCtx, &f.ctx);
#endif
#ifdef MTLEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    w.inFiber = false;
}

// Fiber -> scheduler. `finished` fibers are never resumed.
void yieldToScheduler(Worker& w, Fiber& f, bool finished) {
#ifdef MTLEMU_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &f.fakeStack, w.schedulerBottom, w.schedulerSize);
#else
    (void)finished;
#endif
#ifdef MTLEMU_FAST_SWITCH
    mtlemu_fiber_switch(&f.sp, w.schedulerSp);
#else
    swapcontext(&f.ctx, &w.schedulerCtx);
#endif
#ifdef MTLEMU_ASAN
    __sanitizer_finish_switch_fiber(f.fakeStack, &w.schedulerBottom, &w.schedulerSize);
#endif
}

[[noreturn]] void fiberMain() {
    Worker& w = *tlsWorker;
#ifdef MTLEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &w.schedulerBottom, &w.schedulerSize);
#endif
    Fiber& f = w.fibers[w.current];
    try {
        w.desc->kernel->entry(w.desc->buffers, w.tgBuffers, f.ids);
    } catch (KernelFault& e) {
        w.setFault(std::move(e.message));
    }
    f.state = FiberState::Done;
    yieldToScheduler(w, f, /*finished=*/true);
    std::abort();  // unreachable: a finished fiber is never resumed
}

// ------------------------------------------------------------------ scheduling

std::string site(const char* what, const char* file, unsigned line) {
    return std::string(what ? what : "?") + " at " + (file ? file : "?") + ":" + std::to_string(line);
}

bool sameSite(const Fiber& a, const Fiber& b) {
    if (a.line != b.line || a.combine != b.combine) return false;
    if (a.file == b.file) return true;
    return a.file && b.file && std::strcmp(a.file, b.file) == 0;
}

// The values shared by all threads of a threadgroup.
void setGroupIds(ThreadIds& t, const unsigned size[3], const unsigned group[3], const unsigned groups[3],
                 const DispatchDesc& d) {
    const unsigned n = size[0] * size[1] * size[2];
    t.threadgroup_position_in_grid = uint3v{group[0], group[1], group[2]};
    t.threads_per_threadgroup = uint3v{size[0], size[1], size[2]};
    t.dispatch_threads_per_threadgroup =
        uint3v{d.threadsPerThreadgroup[0], d.threadsPerThreadgroup[1], d.threadsPerThreadgroup[2]};
    t.threadgroups_per_grid = uint3v{groups[0], groups[1], groups[2]};
    t.threads_per_grid = d.gridIsThreads ? uint3v{d.grid[0], d.grid[1], d.grid[2]}
                                         : t.threadgroups_per_grid * t.dispatch_threads_per_threadgroup;
    t.threads_per_simdgroup = kSimdWidth;
    t.simdgroups_per_threadgroup = (n + kSimdWidth - 1) / kSimdWidth;
}

// The values of thread (x, y, z), flat index i, of the threadgroup.
inline void setThreadIds(ThreadIds& t, unsigned i, unsigned x, unsigned y, unsigned z) {
    t.thread_position_in_threadgroup = uint3v{x, y, z};
    t.thread_position_in_grid =
        t.threadgroup_position_in_grid * t.dispatch_threads_per_threadgroup + t.thread_position_in_threadgroup;
    t.thread_index_in_threadgroup = i;
    t.thread_index_in_simdgroup = i % kSimdWidth;
    t.simdgroup_index_in_threadgroup = i / kSimdWidth;
}

// ---------------------------------------------------------------- random order

// A permutation of 0..n-1 for the next scheduling decision of the threadgroup: forward, reverse,
// or shuffled by the threadgroup's seed and a round counter (random_order.h).
void fillOrder(Worker& w, unsigned* order, unsigned n, bool reverse) {
    fillPermutation(order, n, reverse, w.orderSeed, w.orderSeed ? ++w.orderRound : 0);
}

void setLaneOrder(Worker& w) {
    unsigned order[kSimdWidth];
    fillOrder(w, order, kSimdWidth, false);
    for (unsigned i = 0; i < kSimdWidth; ++i) w.laneOrder[i] = static_cast<unsigned char>(order[i]);
}

// Releases what can be released after every fiber stopped. Returns false and
// sets an error if nothing can make progress.
bool releaseWaiters(Worker& w, unsigned n) {
    bool released = false;
    const unsigned simdgroups = (n + kSimdWidth - 1) / kSimdWidth;
    for (unsigned s = 0; s < simdgroups; ++s) {
        const unsigned lo = s * kSimdWidth, hi = std::min(n, lo + kSimdWidth);
        unsigned live = 0, atSimd = 0;
        const Fiber* first = nullptr;
        std::uint32_t active = 0;
        for (unsigned i = lo; i < hi; ++i) {
            const Fiber& f = w.fibers[i];
            if (f.state == FiberState::Done) continue;
            ++live;
            active |= 1u << (i - lo);
            if (f.state != FiberState::AtSimd) continue;
            ++atSimd;
            if (!first) {
                first = &f;
            } else if (!sameSite(*first, f)) {
                w.setFault("lanes of simdgroup " + std::to_string(s) + " wait at different simdgroup functions: " +
                           site(first->what, first->file, first->line) + " and " + site(f.what, f.file, f.line) +
                           " (divergent control flow around simdgroup functions is not modelled by the emulation)");
                return false;
            }
        }
        if (live == 0 || atSimd != live) continue;
        if (first->combine) {
            setLaneOrder(w);
            first->combine(&w.lanes[lo], active);
        } else if (w.race) {  // simdgroup_barrier: arg holds its mem_flags
            race::simdgroupBarrier(s, w.lanes[unsigned(first - &w.fibers[0])].arg);
        }
        for (unsigned i = lo; i < hi; ++i)
            if (w.fibers[i].state == FiberState::AtSimd) w.fibers[i].state = FiberState::Runnable;
        ++w.simdOps;
        released = true;
    }
    if (released) return true;

    unsigned done = 0, atBarrier = 0;
    const Fiber* barrier = nullptr;
    for (unsigned i = 0; i < n; ++i) {
        const Fiber& f = w.fibers[i];
        if (f.state == FiberState::Done) {
            ++done;
        } else if (f.state == FiberState::AtBarrier) {
            ++atBarrier;
            if (!barrier) {
                barrier = &f;
            } else if (!sameSite(*barrier, f)) {
                w.setFault("threads wait at different threadgroup barriers: " +
                           site(barrier->what, barrier->file, barrier->line) + " and " +
                           site(f.what, f.file, f.line) + " (barrier in divergent control flow)");
                return false;
            }
        }
    }
    if (atBarrier > 0 && atBarrier + done == n) {
        if (done > 0) {
            w.setFault(std::to_string(done) + " of " + std::to_string(n) + " threads returned before " +
                       site(barrier->what, barrier->file, barrier->line) +
                       " that the others wait at (undefined behaviour in Metal)");
            return false;
        }
        for (unsigned i = 0; i < n; ++i) w.fibers[i].state = FiberState::Runnable;
        if (w.race) race::threadgroupBarrier(barrier->memFlags);
        ++w.barriers;
        return true;
    }

    // Nothing can move: describe where the threads are.
    std::string where;
    for (unsigned i = 0; i < n; ++i) {
        const Fiber& f = w.fibers[i];
        if (f.state == FiberState::AtSimd || f.state == FiberState::AtBarrier) {
            std::string s = site(f.what, f.file, f.line);
            if (where.find(s) == std::string::npos) where += (where.empty() ? "" : ", ") + s;
        }
    }
    w.setFault("threads of one simdgroup wait at different points (" + where +
               "): divergent control flow around a barrier or simdgroup function");
    return false;
}

// The fast path's plain loops, forward or reverse.
void runInOrder(Worker& w, const KernelInfo& k, const DispatchDesc& d, ThreadIds& ids, const unsigned size[3],
                bool reverse) {
    const unsigned n = size[0] * size[1] * size[2];
    if (!reverse) {
        unsigned i = 0;
        for (unsigned z = 0; z < size[2]; ++z)
            for (unsigned y = 0; y < size[1]; ++y)
                for (unsigned x = 0; x < size[0]; ++x, ++i) {
                    setThreadIds(ids, i, x, y, z);
                    k.entry(d.buffers, w.tgBuffers, ids);
                }
    } else {
        unsigned i = n;
        for (unsigned z = size[2]; z-- > 0;)
            for (unsigned y = size[1]; y-- > 0;)
                for (unsigned x = size[0]; x-- > 0;) {
                    setThreadIds(ids, --i, x, y, z);
                    k.entry(d.buffers, w.tgBuffers, ids);
                }
    }
}

bool runGroup(Worker& w, const DispatchDesc& d, const unsigned group[3], const unsigned size[3],
              const unsigned groups[3], bool reverse) {
    const KernelInfo& k = *d.kernel;
    const unsigned n = size[0] * size[1] * size[2];
    const std::uint64_t groupLinear =
        group[0] + std::uint64_t(groups[0]) * (group[1] + std::uint64_t(groups[1]) * group[2]);
    w.faulted = false;
    w.error.clear();
    w.orderRound = 0;
    if (w.orderSeed) w.orderSeed = groupSeed(k.name, groupLinear);
    if (w.race) race::beginGroup(groupLinear, n);

    // Dynamic threadgroup memory ([[threadgroup(i)]] arguments).
    for (unsigned p = 0; p < k.numThreadgroupBuffers; ++p) {
        const unsigned idx = k.threadgroupBuffers[p].index;
        const std::size_t len = d.threadgroupLengths[idx];
        w.tgBuffers[idx] = allocPoisoned(len, 16);
        w.tgOwned.push_back(w.tgBuffers[idx]);
        w.tgBytes += len;
        if (w.race)
            race::addThreadgroupMemory(w.tgBuffers[idx], len, std::string("[[threadgroup(") + std::to_string(idx) +
                                                              ")]] '" + k.threadgroupBuffers[p].name + "'");
    }

    bool ok = true;
    if (!k.needsSync) {
        // Fast path: no barriers, no simdgroup functions; threads run in turn.
        ThreadIds ids;
        setGroupIds(ids, size, group, groups, d);
        w.currentIds = &ids;
        try {
            if (!w.race && !w.orderSeed) {
                runInOrder(w, k, d, ids, size, reverse);
            } else {
                std::vector<unsigned> order(n);
                fillOrder(w, order.data(), n, reverse);
                for (unsigned i : order) {
                    setThreadIds(ids, i, i % size[0], (i / size[0]) % size[1], i / (size[0] * size[1]));
                    if (w.race) race::setCurrentThread(i, i / kSimdWidth);
                    k.entry(d.buffers, w.tgBuffers, ids);
                }
                if (w.race) race::clearCurrentThread();
            }
        } catch (KernelFault& e) {
            w.setFault(std::move(e.message));
            ok = false;
        }
        w.currentIds = nullptr;
    } else {
        if (w.fibers.size() < n) w.fibers.resize(n);
        w.lanes.resize((n + kSimdWidth - 1) / kSimdWidth * kSimdWidth);
        ThreadIds shared;
        setGroupIds(shared, size, group, groups, d);
        for (unsigned i = 0; i < n; ++i) {
            Fiber& f = w.fibers[i];
            f.ids = shared;
            setThreadIds(f.ids, i, i % size[0], (i / size[0]) % size[1], i / (size[0] * size[1]));
            f.state = FiberState::Runnable;
            f.what = f.file = nullptr;
            f.line = 0;
            f.memFlags = 0;
            f.combine = nullptr;
            prepareFiber(f);
        }
        std::vector<unsigned> order(n);
        for (;;) {
            bool anyLive = false;
            fillOrder(w, order.data(), n, reverse);
            for (unsigned j = 0; j < n && !w.faulted; ++j) {
                const unsigned i = order[j];
                Fiber& f = w.fibers[i];
                if (f.state != FiberState::Runnable) continue;
                w.current = i;
                w.currentIds = &f.ids;
                if (w.race) race::setCurrentThread(i, i / kSimdWidth);
                resumeFiber(w, f);
                if (w.race) race::clearCurrentThread();
                w.currentIds = nullptr;
            }
            if (w.faulted) {
                ok = false;
                break;
            }
            for (unsigned i = 0; i < n; ++i) anyLive |= w.fibers[i].state != FiberState::Done;
            if (!anyLive) break;
            if (!releaseWaiters(w, n)) {
                ok = false;
                break;
            }
        }
        if (!ok)
            for (unsigned i = 0; i < n; ++i)
                if (w.fibers[i].state != FiberState::Done) w.fibers[i].abandoned = true;
    }
    if (w.race) {
        std::string racy = race::endGroup();
        if (!racy.empty() && ok) {
            w.setFault(std::move(racy));
            ok = false;
        }
    }
    w.freeThreadgroupMemory();
    return ok;
}

// ---------------------------------------------------------------- worker pool

// Persistent helper threads; the thread calling run() works too.
class Pool {
public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (std::thread& t : threads_) t.join();
    }

    void run(unsigned participants, const std::function<void()>& job) {
        const unsigned helpers = participants > 0 ? participants - 1 : 0;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            while (threads_.size() < helpers) {
                const unsigned index = unsigned(threads_.size());
                threads_.emplace_back([this, index] { helperLoop(index); });
            }
            job_ = &job;
            helpers_ = helpers;
            pending_ = helpers;
            ++generation_;
        }
        wake_.notify_all();
        job();
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_ == 0; });
        job_ = nullptr;
    }

private:
    void helperLoop(unsigned index) {
        std::uint64_t seen = 0;
        for (;;) {
            const std::function<void()>* job = nullptr;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
                if (index >= helpers_) continue;
                job = job_;
            }
            (*job)();
            std::lock_guard<std::mutex> lock(mutex_);
            if (--pending_ == 0) done_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> threads_;
    const std::function<void()>* job_ = nullptr;
    std::uint64_t generation_ = 0;
    unsigned helpers_ = 0, pending_ = 0;
    bool stop_ = false;
};

Pool& pool() {
    static Pool p;
    return p;
}

std::mutex& dispatchMutex() {
    static std::mutex m;
    return m;
}

std::atomic<unsigned> gWorkers{0};
std::atomic<bool> gReverse{false};

unsigned defaultWorkers() {
    if (const char* env = std::getenv("MTLEMU_WORKERS")) {
        long v = std::atol(env);
        if (v > 0) return unsigned(std::min(v, 64L));
    }
    unsigned hw = std::thread::hardware_concurrency();
    return std::max(1u, std::min(hw, 8u));
}

std::string groupName(const unsigned g[3]) {
    return "(" + std::to_string(g[0]) + "," + std::to_string(g[1]) + "," + std::to_string(g[2]) + ")";
}

}  // namespace

void setWorkerThreads(unsigned n) { gWorkers = n; }
unsigned workerThreads() {
    unsigned n = gWorkers;
    return n ? n : defaultWorkers();
}
void setReverseThreadOrder(bool reverse) { gReverse = reverse; }
bool reverseThreadOrder() { return gReverse; }

void setRaceCheck(bool on) { race::setEnabled(on); }
bool raceCheck() { return race::enabled(); }

// ===================================================================== dispatch

DispatchResult dispatch(const DispatchDesc& d) {
    DispatchResult r;
    if (!d.kernel) {
        r.ok = false;
        r.error = "dispatch without a kernel";
        return r;
    }
    const KernelInfo& k = *d.kernel;
    const std::string who = std::string("kernel '") + k.name + "' (" + k.file + ":" + std::to_string(k.line) + ")";
    std::uint64_t perGroup = 1;
    unsigned groups[3];
    for (int i = 0; i < 3; ++i) {
        if (d.threadsPerThreadgroup[i] == 0 || d.grid[i] == 0) {
            r.ok = false;
            r.error = who + ": zero-sized grid or threadgroup";
            return r;
        }
        perGroup *= d.threadsPerThreadgroup[i];
        groups[i] = d.gridIsThreads ? (d.grid[i] + d.threadsPerThreadgroup[i] - 1) / d.threadsPerThreadgroup[i]
                                    : d.grid[i];
    }
    if (perGroup > kMaxThreadsPerThreadgroup) {
        r.ok = false;
        r.error = who + ": " + std::to_string(perGroup) + " threads per threadgroup exceed " +
                  std::to_string(kMaxThreadsPerThreadgroup);
        return r;
    }
    const std::uint64_t total = std::uint64_t(groups[0]) * groups[1] * groups[2];
    const bool reverse = gReverse;
    const bool racecheck = race::enabled();
    const bool random = randomOrder();

    std::lock_guard<std::mutex> serial(dispatchMutex());
    if (racecheck) race::beginDispatch(d, groups);
    std::atomic<std::uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex resultMutex;

    auto job = [&] {
        Worker& w = thisWorker();
        Worker* previous = tlsWorker;
        tlsWorker = &w;
        w.desc = &d;
        w.barriers = w.simdOps = 0;
        w.race = racecheck;
        w.orderSeed = random ? 1 : 0;
        std::uint64_t threads = 0, groupsRun = 0;
        for (;;) {
            const std::uint64_t g = next.fetch_add(1);
            if (g >= total || failed.load(std::memory_order_relaxed)) break;
            const unsigned group[3] = {unsigned(g % groups[0]), unsigned((g / groups[0]) % groups[1]),
                                       unsigned(g / (std::uint64_t(groups[0]) * groups[1]))};
            unsigned size[3];
            for (int i = 0; i < 3; ++i) {
                size[i] = d.threadsPerThreadgroup[i];
                if (d.gridIsThreads)  // non-uniform threadgroups at the edges of the grid
                    size[i] = std::min(size[i], d.grid[i] - group[i] * d.threadsPerThreadgroup[i]);
            }
            if (!runGroup(w, d, group, size, groups, reverse)) {
                failed = true;
                std::lock_guard<std::mutex> lock(resultMutex);
                if (r.ok) {
                    r.ok = false;
                    r.error = who + ", threadgroup " + groupName(group) + ": " + w.error;
                }
                break;
            }
            threads += std::uint64_t(size[0]) * size[1] * size[2];
            ++groupsRun;
        }
        {
            std::lock_guard<std::mutex> lock(resultMutex);
            r.threads += threads;
            r.threadgroups += groupsRun;
            r.barriers += w.barriers;
            r.simdOps += w.simdOps;
        }
        w.desc = nullptr;
        tlsWorker = previous;
    };

    // The race detector's shadow state is not thread-safe: one worker while it watches.
    const unsigned participants = racecheck ? 1u : unsigned(std::min<std::uint64_t>(workerThreads(), total));
    if (participants <= 1)
        job();
    else
        pool().run(participants, job);
    if (racecheck) race::endDispatch();
    return r;
}

// ===================================================== called from kernel code

void fault(const char* file, unsigned line, const std::string& message) {
    throw KernelFault{std::string(file ? file : "?") + ":" + std::to_string(line) + ": " + message};
}

namespace {
Worker& kernelWorker(const char* what, const char* file, unsigned line) {
    Worker* w = tlsWorker;
    if (!w || !w->desc) {
        std::fprintf(stderr, "mtlemu: %s at %s:%u called outside a kernel dispatch\n", what, file, line);
        std::abort();
    }
    return *w;
}

void needFiber(Worker& w, const char* what, const char* file, unsigned line) {
    if (!w.inFiber)
        fault(file, line,
              std::string(what) + " in a kernel that msl2cpp.py classified as free of barriers and simdgroup "
                                  "functions (is it called through a function defined outside the .metal file and "
                                  "its quoted includes?)");
}
}  // namespace

void threadgroupBarrier(const char* file, unsigned line, unsigned memFlags) {
    Worker& w = kernelWorker("threadgroup_barrier", file, line);
    needFiber(w, "threadgroup_barrier", file, line);
    Fiber& f = w.fibers[w.current];
    f.state = FiberState::AtBarrier;
    f.what = "threadgroup_barrier";
    f.file = file;
    f.line = line;
    f.memFlags = memFlags;
    f.combine = nullptr;
    yieldToScheduler(w, f, false);
}

void simdExchange(SimdCombineFn combine, const void* in, std::size_t inSize, unsigned arg, void* out,
                  std::size_t outSize, const char* what, const char* file, unsigned line) {
    Worker& w = kernelWorker(what, file, line);
    needFiber(w, what, file, line);
    Fiber& f = w.fibers[w.current];
    SimdLane& lane = w.lanes[w.current];
    if (inSize) std::memcpy(lane.in, in, inSize);
    lane.arg = arg;
    f.state = FiberState::AtSimd;
    f.what = what;
    f.file = file;
    f.line = line;
    f.combine = combine;
    yieldToScheduler(w, f, false);
    if (outSize && out) std::memcpy(out, w.lanes[w.current].out, outSize);
}

void* threadgroupStatic(const char* key, std::size_t bytes, std::size_t align, const char* file, unsigned line) {
    Worker& w = kernelWorker("threadgroup declaration", file, line);
    for (const TgAllocation& a : w.tgStatic)
        if (a.key == key) return a.ptr;
    if (w.tgBytes + bytes > kMaxThreadgroupMemory)
        fault(file, line,
              "threadgroup memory of the threadgroup exceeds " + std::to_string(kMaxThreadgroupMemory) + " bytes");
    void* p = allocPoisoned(bytes, align);
    w.tgOwned.push_back(p);
    w.tgStatic.push_back(TgAllocation{key, p});
    w.tgBytes += bytes;
    if (w.race) race::addThreadgroupMemory(p, bytes, std::string("'") + key + "'");
    return p;
}

const ThreadIds& currentThread() {
    Worker* w = tlsWorker;
    if (!w || !w->currentIds) {
        std::fprintf(stderr, "mtlemu: a built-in thread value was read outside a kernel dispatch\n");
        std::abort();
    }
    return *w->currentIds;
}

const unsigned char* simdLaneOrder() {
    static const unsigned char identity[kSimdWidth] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                                       11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                       22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    Worker* w = tlsWorker;
    return w && w->orderSeed ? w->laneOrder : identity;
}

const ConstantValue* functionConstant(unsigned index) {
    Worker* w = tlsWorker;
    if (!w || !w->desc || !w->desc->constants) return nullptr;
    return w->desc->constants->find(index);
}

}  // namespace rt
}  // namespace mtlemu
