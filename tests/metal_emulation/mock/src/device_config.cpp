// What the fake device says about itself, and what it records for coverage:
//
// * its capabilities (GPU family, SIMD width, threads per threadgroup, threadgroup memory), from
//   the MTLEMU_* environment or mtlemu::setDeviceConfig, so tests can play an unsuitable GPU;
// * the kernel variants (kernel + function-constant values) dispatched, appended to
//   $MTLEMU_VARIANT_LOG for the coverage report (tests/metal_emulation/coverage);
// * the check of a kernel library file ("mpsgrad.metallib" of the emulation build: a manifest of
//   the kernels it was built from) against the kernels linked into the process.
#include "device_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

namespace mtlemu {
namespace metal {

namespace {

std::mutex gConfigMutex;

unsigned envUnsigned(const char* name, unsigned fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (*end != '\0' || n == 0) objc::fatal("%s=%s: expected a positive integer", name, v);
    return unsigned(n);
}

// Parses "apple7", "mac2", ... into (kind, generation).
bool parseFamily(const std::string& text, char& kind, int& generation) {
    std::string lower;
    for (char c : text) lower += char(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("apple", 0) == 0) kind = 'a', lower = lower.substr(5);
    else if (lower.rfind("mac", 0) == 0) kind = 'm', lower = lower.substr(3);
    else return false;
    if (lower.empty() || lower.find_first_not_of("0123456789") != std::string::npos) return false;
    generation = std::atoi(lower.c_str());
    return kind == 'a' ? generation >= 1 && generation <= 9 : generation >= 1 && generation <= 2;
}

DeviceConfig fromEnvironment() {
    DeviceConfig c;
    if (const char* f = std::getenv("MTLEMU_GPU_FAMILY"); f && *f) c.family = f;
    c.simdWidth = envUnsigned("MTLEMU_SIMD_WIDTH", c.simdWidth);
    c.maxThreadsPerThreadgroup = envUnsigned("MTLEMU_MAX_THREADS_PER_THREADGROUP", c.maxThreadsPerThreadgroup);
    c.threadgroupMemory = envUnsigned("MTLEMU_THREADGROUP_MEMORY", unsigned(c.threadgroupMemory));
    return c;
}

void validate(const DeviceConfig& c) {
    char kind;
    int generation;
    if (!parseFamily(c.family, kind, generation))
        objc::fatal("mtlemu: GPU family '%s' is not one of apple1..apple9, mac1, mac2", c.family.c_str());
    if (c.simdWidth == 0 || c.simdWidth > 64 || (c.simdWidth & (c.simdWidth - 1)) != 0)
        objc::fatal("mtlemu: SIMD width %u is not a power of two up to 64", c.simdWidth);
    if (c.maxThreadsPerThreadgroup == 0 || c.maxThreadsPerThreadgroup > rt::kMaxThreadsPerThreadgroup)
        objc::fatal("mtlemu: max threads per threadgroup %u is not in 1..%u", c.maxThreadsPerThreadgroup,
                    rt::kMaxThreadsPerThreadgroup);
    if (c.threadgroupMemory == 0 || c.threadgroupMemory > rt::kMaxThreadgroupMemory)
        objc::fatal("mtlemu: threadgroup memory %zu is not in 1..%zu bytes", c.threadgroupMemory,
                    rt::kMaxThreadgroupMemory);
}

DeviceConfig& current() {
    static DeviceConfig* c = [] {
        auto* config = new DeviceConfig(fromEnvironment());
        validate(*config);
        return config;
    }();
    return *c;
}

// MTLGPUFamily values.
constexpr long kFamilyApple1 = 1001, kFamilyMac1 = 2001, kFamilyCommon1 = 3001, kFamilyCommon3 = 3003,
               kFamilyMetal3 = 5001;

}  // namespace

DeviceConfig deviceConfig() {
    std::lock_guard<std::mutex> lock(gConfigMutex);
    return current();
}

bool supportsFamily(long family) {
    const DeviceConfig c = deviceConfig();
    char kind;
    int generation;
    parseFamily(c.family, kind, generation);
    if (family >= kFamilyCommon1 && family <= kFamilyCommon3) return true;
    if (kind == 'a') {
        // Apple silicon: AppleN and every earlier Apple family; M1 and later (Apple7+) are also
        // Mac2 GPUs and Metal 3 devices.
        if (family >= kFamilyApple1 && family < kFamilyApple1 + generation) return true;
        return generation >= 7 && (family == kFamilyMac1 + 1 || family == kFamilyMetal3);
    }
    // An Intel or AMD Mac GPU: Mac1 (and Mac2), Metal 3 from Mac2.
    if (family >= kFamilyMac1 && family < kFamilyMac1 + generation) return true;
    return generation >= 2 && family == kFamilyMetal3;
}

unsigned pipelineMaxThreads(const rt::KernelInfo& kernel) {
    const unsigned device = deviceConfig().maxThreadsPerThreadgroup;
    return kernel.maxTotalThreadsPerThreadgroup < device ? kernel.maxTotalThreadsPerThreadgroup : device;
}

// ------------------------------------------------------------------- variant log

void recordVariant(const rt::KernelInfo& kernel, const rt::ConstantValues& constants) {
    static std::mutex mutex;
    static std::set<std::string>* seen = new std::set<std::string>();
    static const char* path = std::getenv("MTLEMU_VARIANT_LOG");
    if (!path || !*path) return;
    std::string line = kernel.name;
    line += '\t';
    bool first = true;
    for (unsigned i = 0; i < kernel.numConstants; ++i) {
        const rt::FunctionConstantDecl& decl = kernel.constants[i];
        const rt::ConstantValue* v = constants.find(decl.index);
        if (!v) continue;  // an optional constant left undefined
        long long value = 0;
        const std::size_t size = rt::dataTypeSize(v->dataType);
        if (size == 1) value = static_cast<signed char>(v->bytes[0]);
        else if (size == 2) { short s; std::memcpy(&s, v->bytes, 2); value = s; }
        else if (size == 4) { int s; std::memcpy(&s, v->bytes, 4); value = s; }
        else { std::memcpy(&value, v->bytes, 8); }
        line += (first ? "" : ",") + std::string(decl.name) + "=" + std::to_string(value);
        first = false;
    }
    line += '\n';
    std::lock_guard<std::mutex> lock(mutex);
    if (!seen->insert(line).second) return;
    // One write per line with O_APPEND: lines of concurrent test processes never interleave.
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) objc::fatal("mtlemu: cannot open MTLEMU_VARIANT_LOG=%s", path);
    const ssize_t written = ::write(fd, line.data(), line.size());
    ::close(fd);
    if (written != ssize_t(line.size())) objc::fatal("mtlemu: cannot write MTLEMU_VARIANT_LOG=%s", path);
}

// ----------------------------------------------------------------- per-kernel counters

namespace {
std::mutex gKernelStatsMutex;
std::map<std::string, KernelStats>& kernelStatsTable() {
    static auto* table = new std::map<std::string, KernelStats>();
    return *table;
}
}  // namespace

void recordKernelStats(const rt::KernelInfo& kernel, const rt::DispatchResult& result) {
    std::lock_guard<std::mutex> lock(gKernelStatsMutex);
    KernelStats& k = kernelStatsTable()[kernel.name];
    k.dispatches += 1;
    k.threadgroups += result.threadgroups;
    k.threads += result.threads;
    k.barriers += result.barriers;
    k.simdOps += result.simdOps;
}

// ------------------------------------------------------------ kernel library files

std::string checkLibraryFile(const std::string& path) {
    std::ifstream in(path);
    if (!in) return "no such file: " + path;
    std::string header;
    std::getline(in, header);
    if (header != kLibraryManifestHeader)
        return path + " is not a kernel library of the Metal emulation (first line '" + header.substr(0, 40) +
               "', expected '" + kLibraryManifestHeader + "')";
    std::set<std::string> listed, linked;
    for (std::string line; std::getline(in, line);)
        if (!line.empty() && line[0] != '#') listed.insert(line);
    for (const rt::KernelInfo* k : rt::allKernels()) linked.insert(k->name);
    std::string missing, extra;
    for (const std::string& name : listed)
        if (!linked.count(name)) missing += " " + name;
    for (const std::string& name : linked)
        if (!listed.count(name)) extra += " " + name;
    if (!missing.empty())
        return path + " lists kernels this process was not built with (a library of another build?):" + missing;
    if (!extra.empty()) return path + " lacks kernels this process was built with (a stale library?):" + extra;
    return "";
}

}  // namespace metal

DeviceConfig deviceConfig() { return metal::deviceConfig(); }

std::map<std::string, KernelStats> kernelStats() {
    std::lock_guard<std::mutex> lock(metal::gKernelStatsMutex);
    return metal::kernelStatsTable();
}

void resetKernelStats() {
    std::lock_guard<std::mutex> lock(metal::gKernelStatsMutex);
    metal::kernelStatsTable().clear();
}

void setDeviceConfig(const DeviceConfig& config) {
    metal::validate(config);
    std::lock_guard<std::mutex> lock(metal::gConfigMutex);
    metal::current() = config;
}

void resetDeviceConfig() {
    DeviceConfig c = metal::fromEnvironment();
    setDeviceConfig(c);
}

}  // namespace mtlemu

// C API (ctypes): "kernel dispatches threadgroups threads barriers simdOps" per line, sorted by
// kernel name; returns the length of the full text (copies at most size - 1 bytes, terminated).
extern "C" __attribute__((visibility("default"))) std::size_t mtlemu_kernel_stats(char* out, std::size_t size) {
    std::string text;
    for (const auto& [name, k] : mtlemu::kernelStats())
        text += name + " " + std::to_string(k.dispatches) + " " + std::to_string(k.threadgroups) + " " +
                std::to_string(k.threads) + " " + std::to_string(k.barriers) + " " + std::to_string(k.simdOps) + "\n";
    if (out && size) {
        const std::size_t n = text.size() < size - 1 ? text.size() : size - 1;
        std::memcpy(out, text.data(), n);
        out[n] = '\0';
    }
    return text.size();
}

extern "C" __attribute__((visibility("default"))) void mtlemu_reset_kernel_stats(void) { mtlemu::resetKernelStats(); }
