// Race detector of the Linux Metal emulation: see race_detector.h for the model.
#include "race_detector.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace mtlemu {
namespace race {

namespace {

constexpr std::size_t kWordsPerPage = 1024;  // shadow pages cover 4 KiB of data

// One access: who, when (barrier epochs of its address space), where (code address).
struct Access {
    const void* pc = nullptr;
    std::uint64_t group = 0;
    std::uint32_t tgEpoch = 0;
    std::uint32_t sgEpoch = 0;
    std::uint16_t thread = 0;
    std::uint16_t simd = 0;
    std::uint8_t mask = 0;  // bytes of the word touched; 0: no access recorded
};

struct Word {
    Access write;
    Access read[2];         // reads since the last write, by two different threads
    std::uint8_t written;   // bytes written since the dispatch (device) or threadgroup started
};

struct Range {
    std::uintptr_t lo = 0, hi = 0;
    Space space = kDevice;
    std::string name;
    std::vector<std::unique_ptr<Word[]>> pages;

    Word& word(std::uintptr_t addr) {
        const std::size_t w = (addr - lo) / 4;
        std::unique_ptr<Word[]>& page = pages[w / kWordsPerPage];
        if (!page) page.reset(new Word[kWordsPerPage]());
        return page[w % kWordsPerPage];
    }
};

struct Detector {
    bool on = false;
    const rt::DispatchDesc* desc = nullptr;
    unsigned groups[3] = {1, 1, 1};
    std::vector<std::unique_ptr<Range>> ranges;  // sorted by lo, disjoint
    Range* last = nullptr;
    // The running threadgroup.
    std::uint64_t group = 0;
    std::uint32_t tgEpoch[2] = {0, 0};
    std::vector<std::uint32_t> sgEpoch[2];
    std::string firstRace;
    std::set<std::pair<const void*, const void*>> printed;
    // For the summary printed at exit: what was checked, and how many problems were found.
    std::map<std::string, std::uint64_t> dispatches;
    std::uint64_t problems = 0;

    ~Detector() {
        if (dispatches.empty()) return;
        std::uint64_t n = 0;
        std::string names;
        for (const auto& kv : dispatches) {
            n += kv.second;
            names += (names.empty() ? "" : " ") + kv.first;
        }
        std::fprintf(stderr, "mtlemu: race check: %llu dispatches of %zu kernels checked, %llu problems reported (%s)\n",
                     static_cast<unsigned long long>(n), dispatches.size(), static_cast<unsigned long long>(problems),
                     names.c_str());
    }
};

Detector& det() {
    static Detector d;
    return d;
}

// The GPU thread running on this OS thread (null: no instrumented dispatch running).
struct Current {
    std::uint16_t thread;
    std::uint16_t simd;
};
__attribute__((tls_model("initial-exec"))) thread_local Current tlsCurrent;
__attribute__((tls_model("initial-exec"))) thread_local bool tlsActive = false;

bool envEnabled() {
    const char* e = std::getenv("MTLEMU_RACECHECK");
    return e && *e && std::strcmp(e, "0") != 0;
}

// -------------------------------------------------------------------- symbolization

std::string symbolizerPath() {
    if (const char* e = std::getenv("MTLEMU_SYMBOLIZER")) return e;
    for (const char* name : {"llvm-symbolizer-16", "llvm-symbolizer"}) {
        const char* path = std::getenv("PATH");
        std::string p = path ? path : "/usr/bin:/bin";
        std::size_t start = 0;
        while (start <= p.size()) {
            std::size_t end = p.find(':', start);
            if (end == std::string::npos) end = p.size();
            std::string cand = p.substr(start, end - start) + "/" + name;
            if (!cand.empty() && access(cand.c_str(), X_OK) == 0) return cand;
            start = end + 1;
        }
    }
    return "";
}

std::string shellQuote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// "metal/x.metal:54" of a code address in a translated kernel (the innermost source line, then
// the functions it was inlined into), or "module+0xoffset" without llvm-symbolizer.
std::string describePc(const void* pc) {
    static std::mutex m;
    static std::map<const void*, std::string> cache;
    std::lock_guard<std::mutex> lock(m);
    auto it = cache.find(pc);
    if (it != cache.end()) return it->second;
    Dl_info info{};
    std::string out = "?";
    if (dladdr(pc, &info) && info.dli_fname) {
        const std::uintptr_t offset =
            reinterpret_cast<std::uintptr_t>(pc) - reinterpret_cast<std::uintptr_t>(info.dli_fbase) - 1;
        char hex[32];
        std::snprintf(hex, sizeof hex, "0x%zx", std::size_t(offset));
        out = std::string(info.dli_fname) + "+" + hex;
        const std::string tool = symbolizerPath();
        if (!tool.empty()) {
            const std::string cmd = shellQuote(tool) + " --inlining --obj=" + shellQuote(info.dli_fname) + " " + hex +
                                    " 2>/dev/null";
            if (FILE* f = popen(cmd.c_str(), "r")) {
                std::vector<std::string> frames;
                char line[4096];
                bool fn = true, wrapper = false;
                while (std::fgets(line, sizeof line, f)) {
                    std::string s(line);
                    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
                    if (s.empty()) break;
                    if (fn) {
                        // the generated entry wrapper sits on the kernel's closing line: not a source site
                        wrapper = s.find("mtlemu_entry_") != std::string::npos;
                    } else if (!wrapper) {
                        // file:line:column -> file:line
                        const std::size_t c2 = s.rfind(':');
                        if (c2 != std::string::npos && s.rfind(':', c2 - 1) != std::string::npos) s.resize(c2);
                        frames.push_back(s);
                    }
                    fn = !fn;
                }
                pclose(f);
                if (!frames.empty() && frames[0].compare(0, 2, "??") != 0) {
                    out = frames[0];
                    std::string chain;
                    for (std::size_t i = 1; i < frames.size(); ++i)
                        if (frames[i] != frames[i - 1]) chain += (chain.empty() ? "" : ", ") + frames[i];
                    if (!chain.empty()) out += " (inlined into " + chain + ")";
                }
            }
        }
    }
    cache.emplace(pc, out);
    return out;
}

// Paths relative to the directory the kernels' display names are relative to.
std::string relative(std::string s, const char* kernelFile) {
    if (!kernelFile) return s;
    const std::string file(kernelFile);
    const std::size_t at = s.find("/" + file);
    if (at == std::string::npos) return s;
    const std::string root = s.substr(0, at + 1);
    std::size_t pos;
    while ((pos = s.find(root)) != std::string::npos) s.erase(pos, root.size());
    return s;
}

// ------------------------------------------------------------------------- checking

std::string groupName(std::uint64_t g) {
    const Detector& d = det();
    return "(" + std::to_string(g % d.groups[0]) + "," + std::to_string((g / d.groups[0]) % d.groups[1]) + "," +
           std::to_string(g / (std::uint64_t(d.groups[0]) * d.groups[1])) + ")";
}

// Both accesses carry the epochs of the word's address space.
bool ordered(const Access& a, const Access& b) {
    if (a.group != b.group) return false;  // threadgroups of one dispatch are never ordered
    if (a.thread == b.thread) return true;
    if (a.tgEpoch != b.tgEpoch) return true;
    return a.simd == b.simd && a.sgEpoch != b.sgEpoch;
}

const char* barrierFor(Space s) {
    return s == kThreadgroup ? "threadgroup_barrier(mem_flags::mem_threadgroup)"
                             : "threadgroup_barrier(mem_flags::mem_device)";
}

void report(const Range& r, std::uintptr_t addr, const Access& earlier, bool earlierWrite, const Access& now,
            bool nowWrite) {
    Detector& d = det();
    const char* file = d.desc && d.desc->kernel ? d.desc->kernel->file : nullptr;
    const std::string first = relative(describePc(earlier.pc), file);
    const std::string second = relative(describePc(now.pc), file);
    auto who = [&](const Access& a) {
        return "thread " + std::to_string(a.thread) + " of threadgroup " + groupName(a.group);
    };
    std::string msg = "data race on " + r.name + " (byte " + std::to_string(addr - r.lo) + "): " +
                      (earlierWrite ? "write" : "read") + " at " + first + " by " + who(earlier) + ", then " +
                      (nowWrite ? "write" : "read") + " at " + second + " by " + who(now) + "; ";
    if (earlier.group != now.group)
        msg += "threadgroups of one dispatch are not ordered (use atomics or a separate dispatch)";
    else
        msg += std::string("no ") + barrierFor(r.space) + " (or simdgroup_barrier within a simdgroup) between them";
    if (d.firstRace.empty()) d.firstRace = msg;
    ++d.problems;
    if (d.printed.size() < 64 && d.printed.insert({earlier.pc, now.pc}).second)
        std::fprintf(stderr, "mtlemu: race check: kernel '%s': %s\n",
                     d.desc && d.desc->kernel ? d.desc->kernel->name : "?", msg.c_str());
}

// A read of threadgroup memory that no thread wrote: the kernel uses the poison (NaN).
void reportUnwritten(const Range& r, std::uintptr_t addr, const Access& now) {
    Detector& d = det();
    const char* file = d.desc && d.desc->kernel ? d.desc->kernel->file : nullptr;
    const std::string msg = "read of " + r.name + " (byte " + std::to_string(addr - r.lo) +
                            ") that no thread of the threadgroup wrote, at " + relative(describePc(now.pc), file) +
                            " by thread " + std::to_string(now.thread) + " of threadgroup " + groupName(now.group);
    if (d.firstRace.empty()) d.firstRace = msg;
    ++d.problems;
    if (d.printed.size() < 64 && d.printed.insert({now.pc, nullptr}).second)
        std::fprintf(stderr, "mtlemu: race check: kernel '%s': %s\n",
                     d.desc && d.desc->kernel ? d.desc->kernel->name : "?", msg.c_str());
}

void recordRead(Word& w, const Access& now) {
    for (Access& r : w.read)
        if (!r.mask || (r.thread == now.thread && r.group == now.group) || ordered(r, now)) {
            r = now;
            return;
        }
    w.read[1] = now;  // keep two live readers from different threads
}

void accessWord(Range& r, std::uintptr_t wordAddr, std::uint8_t mask, bool isWrite, const Access& base) {
    Word& w = r.word(wordAddr);
    Access now = base;
    now.mask = mask;
    if (w.write.mask & mask && !ordered(w.write, now)) report(r, wordAddr, w.write, true, now, isWrite);
    if (!isWrite && r.space == kThreadgroup && (mask & ~w.written)) reportUnwritten(r, wordAddr, now);
    if (isWrite) {
        w.written |= mask;
        for (const Access& rd : w.read)
            if (rd.mask & mask && !ordered(rd, now)) {
                report(r, wordAddr, rd, false, now, true);
                break;
            }
        w.write = now;
        w.read[0].mask = w.read[1].mask = 0;
    } else {
        recordRead(w, now);
    }
}

Range* findRange(std::uintptr_t a) {
    Detector& d = det();
    if (d.last && a >= d.last->lo && a < d.last->hi) return d.last;
    for (auto& r : d.ranges)
        if (a >= r->lo && a < r->hi) return d.last = r.get();
    return nullptr;
}

void checkAccess(Range* r, std::uintptr_t a, std::size_t size, bool isWrite, const void* pc) {
    Detector& d = det();
    const Space s = r->space;
    Access base;
    base.pc = pc;
    base.group = d.group;
    base.thread = tlsCurrent.thread;
    base.simd = tlsCurrent.simd;
    base.tgEpoch = d.tgEpoch[s];
    base.sgEpoch = tlsCurrent.simd < d.sgEpoch[s].size() ? d.sgEpoch[s][tlsCurrent.simd] : 0;
    const std::uintptr_t end = std::min<std::uintptr_t>(a + size, r->hi);
    while (a < end) {
        const std::uintptr_t word = r->lo + (a - r->lo) / 4 * 4;
        const std::uintptr_t stop = std::min<std::uintptr_t>(end, word + 4);
        std::uint8_t mask = 0;
        for (std::uintptr_t b = a; b < stop; ++b) mask |= std::uint8_t(1u << (b - word));
        accessWord(*r, word, mask, isWrite, base);
        a = stop;
    }
}

// Vector (8- and 16-byte) accesses of the running thread, checked when it yields. Clang stores
// one component of a vector in memory (`tile[i][j].y = v`, legal MSL that writes 4 bytes) as a
// load of the whole vector and a store of the whole vector; checked as such, neighbouring threads
// that write the other components would race. So a vector store to the address the same thread
// just loaded as a vector counts as a write of only the words whose bytes it changed, and that
// load as no read.
struct Pending {
    Range* range;
    std::uintptr_t addr;
    const void* pc;
    std::uint8_t size;
    bool write;
    bool merged;  // a load that is the first half of a component store
    unsigned char old[16];
};
constexpr std::size_t kMaxPending = 1024;
thread_local std::vector<Pending> tlsPending;

void flushPending() {
    for (Pending& q : tlsPending) {
        if (!q.write) {
            if (!q.merged) checkAccess(q.range, q.addr, q.size, false, q.pc);
            continue;
        }
        bool changed = false;
        for (std::size_t off = 0; off < q.size && q.addr + off < q.range->hi; off += 4) {
            const std::size_t n = std::min<std::size_t>({4, q.size - off, q.range->hi - (q.addr + off)});
            if (std::memcmp(q.old + off, reinterpret_cast<const unsigned char*>(q.addr) + off, n) != 0) {
                checkAccess(q.range, q.addr + off, n, true, q.pc);
                changed = true;
            }
        }
        // Nothing changed: a component store of the value already there, or an update of memory
        // still holding the NaN poison (`x += v` before anything wrote x), which is a bug.
        if (!changed && q.range->space == kThreadgroup) {
            bool unwritten = false;
            for (std::size_t off = 0; off < q.size && q.addr + off < q.range->hi; off += 4)
                unwritten |= q.range->word(q.addr + off).written != 0xF;
            if (unwritten) checkAccess(q.range, q.addr, q.size, false, q.pc);
        }
    }
    tlsPending.clear();
}

void onAccess(const void* p, std::size_t size, bool isWrite, const void* pc) {
    std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
    Range* r = findRange(a);
    if (!r) return;
    if (size < 8) {
        checkAccess(r, a, size, isWrite, pc);
        return;
    }
    Pending q{r, a, pc, std::uint8_t(size), isWrite, false, {}};
    if (isWrite) {
        bool component = false;
        for (auto it = tlsPending.rbegin(); it != tlsPending.rend(); ++it)
            if (it->addr == a && it->size == size && !it->write) {
                it->merged = component = true;
                break;
            }
        if (!component) {
            checkAccess(r, a, size, true, pc);
            return;
        }
        std::memcpy(q.old, p, std::min<std::size_t>(size, std::min<std::size_t>(16, r->hi - a)));
    }
    tlsPending.push_back(q);
    if (tlsPending.size() >= kMaxPending) flushPending();
}

void addRange(std::uintptr_t lo, std::uintptr_t hi, Space s, std::string name) {
    Detector& d = det();
    // Overlapping bindings of one buffer share one range.
    for (auto& r : d.ranges)
        if (lo < r->hi && r->lo < hi) {
            if (lo >= r->lo && hi <= r->hi) return;
            lo = std::min(lo, r->lo);
            hi = std::max(hi, r->hi);
            name = r->name + " and " + name;
            r.reset();
        }
    d.ranges.erase(std::remove(d.ranges.begin(), d.ranges.end(), nullptr), d.ranges.end());
    std::unique_ptr<Range> r(new Range());
    r->lo = lo;
    r->hi = hi;
    r->space = s;
    r->name = std::move(name);
    r->pages.resize((hi - lo + 4 * kWordsPerPage - 1) / (4 * kWordsPerPage));
    d.ranges.push_back(std::move(r));
    std::sort(d.ranges.begin(), d.ranges.end(), [](const auto& a, const auto& b) { return a->lo < b->lo; });
    d.last = nullptr;
}

}  // namespace

bool enabled() {
    static const bool initial = [] {
        det().on = envEnabled();
        return true;
    }();
    (void)initial;
    return det().on;
}

void setEnabled(bool on) {
    enabled();
    det().on = on;
}

void beginDispatch(const rt::DispatchDesc& desc, const unsigned groups[3]) {
    Detector& d = det();
    d.desc = &desc;
    for (int i = 0; i < 3; ++i) d.groups[i] = groups[i];
    d.ranges.clear();
    d.last = nullptr;
    const rt::KernelInfo& k = *desc.kernel;
    ++d.dispatches[k.name];
    for (unsigned i = 0; i < k.numBuffers; ++i) {
        const unsigned idx = k.buffers[i].index;
        if (idx >= rt::kMaxBufferBindings || !desc.buffers[idx] || !desc.bufferLengths[idx]) continue;
        const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(desc.buffers[idx]);
        addRange(lo, lo + desc.bufferLengths[idx], kDevice,
                 "device buffer(" + std::to_string(idx) + ") '" + k.buffers[i].name + "'");
    }
}

void endDispatch() {
    Detector& d = det();
    d.ranges.clear();
    d.last = nullptr;
    d.desc = nullptr;
    tlsActive = false;
}

void beginGroup(std::uint64_t groupLinear, unsigned threads) {
    Detector& d = det();
    d.group = groupLinear;
    d.firstRace.clear();
    for (int s = 0; s < 2; ++s) {
        d.tgEpoch[s] = 0;
        d.sgEpoch[s].assign((threads + rt::kSimdWidth - 1) / rt::kSimdWidth + 1, 0);
    }
}

void addThreadgroupMemory(const void* p, std::size_t bytes, const std::string& name) {
    if (!bytes) return;
    const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(p);
    addRange(lo, lo + bytes, kThreadgroup, "threadgroup memory " + name);
}

std::string endGroup() {
    flushPending();
    Detector& d = det();
    d.ranges.erase(std::remove_if(d.ranges.begin(), d.ranges.end(),
                                  [](const std::unique_ptr<Range>& r) { return r->space == kThreadgroup; }),
                   d.ranges.end());
    d.last = nullptr;
    tlsActive = false;
    return std::move(d.firstRace);
}

void setCurrentThread(unsigned threadIndex, unsigned simdgroup) {
    flushPending();
    tlsCurrent.thread = std::uint16_t(threadIndex);
    tlsCurrent.simd = std::uint16_t(simdgroup);
    tlsActive = true;
}

void clearCurrentThread() {
    flushPending();
    tlsActive = false;
}

void threadgroupBarrier(unsigned memFlags) {
    Detector& d = det();
    const unsigned flags[2] = {1u /* mem_device */, 2u /* mem_threadgroup */};
    for (int s = 0; s < 2; ++s)
        if (memFlags & flags[s]) {
            ++d.tgEpoch[s];
            for (std::uint32_t& e : d.sgEpoch[s]) ++e;
        }
}

void simdgroupBarrier(unsigned simdgroup, unsigned memFlags) {
    Detector& d = det();
    const unsigned flags[2] = {1u, 2u};
    for (int s = 0; s < 2; ++s)
        if (memFlags & flags[s] && simdgroup < d.sgEpoch[s].size()) ++d.sgEpoch[s][simdgroup];
}

}  // namespace race
}  // namespace mtlemu

// ------------------------------------------------- callbacks of the instrumented kernel code
// -fsanitize-coverage=trace-loads,trace-stores makes every load and store of a translated kernel
// call these with the address; the return address is the instruction in the kernel.

using mtlemu::race::onAccess;
using mtlemu::race::tlsActive;

#define MTLEMU_RACE_CALLBACKS(N)                                                                 \
    extern "C" __attribute__((visibility("default"))) void __sanitizer_cov_load##N(void* p) {   \
        if (tlsActive) onAccess(p, N, false, __builtin_return_address(0));                       \
    }                                                                                            \
    extern "C" __attribute__((visibility("default"))) void __sanitizer_cov_store##N(void* p) {  \
        if (tlsActive) onAccess(p, N, true, __builtin_return_address(0));                        \
    }
MTLEMU_RACE_CALLBACKS(1)
MTLEMU_RACE_CALLBACKS(2)
MTLEMU_RACE_CALLBACKS(4)
MTLEMU_RACE_CALLBACKS(8)
MTLEMU_RACE_CALLBACKS(16)
#undef MTLEMU_RACE_CALLBACKS
