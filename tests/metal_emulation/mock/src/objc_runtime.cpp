// A mock of the Apple Objective-C runtime, just large enough to run metal-cpp
// host code on Linux x86-64: class and selector tables, objc_msgSend and its
// _stret/_fpret variants, NSObject's reference counting, autorelease pools
// and a trace of every message sent.
#include "objc_runtime.h"

#include <objc/message.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "mtlemu/mtlemu.h"

#if !defined(__x86_64__)
#error "the mtlemu objc_msgSend trampoline is written for x86-64 (System V)"
#endif

// Clang compiles MTLSTR("...") (__builtin___CFStringMakeConstantString) into a
// constant {isa = __CFConstantStringClassReference, flags, chars, length}.
extern "C" {
__attribute__((visibility("default"))) std::uintptr_t __CFConstantStringClassReference[16];
}

namespace mtlemu {
namespace objc {

void registerFoundationClasses();  // foundation.cpp
void registerMetalClasses();       // metal_device.cpp, metal_commands.cpp

namespace {

constexpr std::uint32_t kImmortal = 1;

struct Tables {
    std::shared_mutex mutex;
    std::unordered_map<std::string, ClassInfo*> classes;
    std::unordered_map<std::string, std::unique_ptr<char[]>> selectors;
    std::unordered_map<std::string, std::unique_ptr<char>> protocols;
};
Tables& tables() {
    static Tables* t = new Tables();  // never destroyed: messages may be sent during exit
    return *t;
}

// The isa of every class object.
ClassInfo& metaclass() {
    static ClassInfo* m = [] {
        ClassInfo* c = new ClassInfo();
        c->name = "<metaclass>";
        c->reserved = kImmortal;
        return c;
    }();
    return *m;
}

// ------------------------------------------------------------------ trace

struct TraceEntry {
    const ClassInfo* cls;
    SEL sel;
    bool classMethod;
};
struct Trace {
    std::mutex mutex;
    std::vector<TraceEntry> entries;
    std::atomic<bool> enabled{true};
};
Trace& traceLog() {
    static Trace* t = new Trace();
    return *t;
}
constexpr std::size_t kMaxTrace = std::size_t(1) << 20;

void record(const ClassInfo* cls, SEL sel, bool classMethod) {
    Trace& t = traceLog();
    if (!t.enabled.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.entries.size() >= kMaxTrace) t.entries.erase(t.entries.begin(), t.entries.begin() + kMaxTrace / 2);
    t.entries.push_back(TraceEntry{cls, sel, classMethod});
}

std::string format(const TraceEntry& e) {
    return std::string(e.classMethod ? "+[" : "-[") + (e.cls ? e.cls->name : std::string("nil")) + " " +
           reinterpret_cast<const char*>(e.sel) + "]";
}

std::atomic<long> gLive{0};

// ---------------------------------------------------------- autorelease pools

struct AutoreleasePool : Object {
    std::vector<Object*> objects;
};
// This thread's pools, innermost last.
std::vector<AutoreleasePool*>& pools() {
    static thread_local std::vector<AutoreleasePool*> stack;
    return stack;
}

// Objects autoreleased with no pool in place: kept reachable (Apple's runtime
// leaks them with a warning), so leak checkers stay quiet.
std::vector<Object*>& orphans() {
    static std::vector<Object*>* v = new std::vector<Object*>();
    return *v;
}
std::mutex& orphanMutex() {
    static std::mutex* m = new std::mutex();
    return *m;
}

void drainPool(AutoreleasePool* pool) {
    // Objects released here may autorelease more objects into this pool.
    while (!pool->objects.empty()) {
        std::vector<Object*> batch;
        batch.swap(pool->objects);
        for (Object* o : batch) release(o);
    }
}

// Pops `pool` and every pool pushed after it on this thread.
void popPool(AutoreleasePool* pool) {
    auto& stack = pools();
    for (std::size_t i = stack.size(); i-- > 0;) {
        if (stack[i] != pool) continue;
        while (stack.size() > i) {
            AutoreleasePool* top = stack.back();
            drainPool(top);
            stack.pop_back();
            if (top != pool) {  // an inner pool the host never drained
                destroyAs<AutoreleasePool>(top);
                noteDestroyed();
            }
        }
        break;
    }
    drainPool(pool);
}

// ----------------------------------------------------------- NSObject methods

id nsRetain(Object* self, SEL) { return reinterpret_cast<id>(retain(self)); }
void nsRelease(Object* self, SEL) { release(self); }
id nsAutorelease(Object* self, SEL) { return reinterpret_cast<id>(autorelease(self)); }
NSUInteger nsRetainCount(Object* self, SEL) {
    if (isConstantString(self) || (self->reserved & kImmortal)) return NSUInteger(-1);
    return NSUInteger(self->refs.load());
}
id nsSelf(Object* self, SEL) { return reinterpret_cast<id>(self); }
id nsCopy(Object* self, SEL) { return reinterpret_cast<id>(retain(self)); }  // immutable objects
NSUInteger nsHash(Object* self, SEL) { return NSUInteger(reinterpret_cast<std::uintptr_t>(self)); }
bool nsIsEqual(Object* self, SEL, Object* other) { return self == other; }
bool nsRespondsToSelector(Object* self, SEL, SEL sel) {
    for (ClassInfo* c = classOf(self); c; c = c->super)
        if (c->instanceMethods.count(sel)) return true;
    return false;
}
id nsNil(Object*, SEL, ...) { return nullptr; }
bool nsConformsToProtocol(Object*, SEL, void*) { return true; }

id nsAlloc(ClassInfo* cls, SEL) {
    for (ClassInfo* c = cls; c; c = c->super)
        if (c->allocate) return reinterpret_cast<id>(c->allocate(cls));
    fatal("+[%s alloc]: the class cannot be instantiated by the Metal emulation", cls->name.c_str());
}
id nsNew(ClassInfo* cls, SEL) {
    id o = nsAlloc(cls, nullptr);
    using Init = id (*)(id, SEL);
    return reinterpret_cast<Init>(&objc_msgSend)(o, selector("init"));
}

id poolInit(AutoreleasePool* self, SEL) {
    pools().push_back(self);
    return reinterpret_cast<id>(self);
}
void poolDrain(AutoreleasePool* self, SEL) {
    popPool(self);
    destroyAs<AutoreleasePool>(self);
    noteDestroyed();
}
void poolAddObject(AutoreleasePool* self, SEL, Object* o) { self->objects.push_back(o); }
void poolClassAddObject(ClassInfo*, SEL, Object* o) { autorelease(o); }

void registerNSObject() {
    ClassInfo* root = defineClass<Object>("NSObject", nullptr);
    addMethod(root, "retain", imp(nsRetain));
    addMethod(root, "release", imp(nsRelease));
    addMethod(root, "autorelease", imp(nsAutorelease));
    addMethod(root, "retainCount", imp(nsRetainCount));
    addMethod(root, "init", imp(nsSelf));
    addMethod(root, "copy", imp(nsCopy));
    addMethod(root, "hash", imp(nsHash));
    addMethod(root, "isEqual:", imp(nsIsEqual));
    addMethod(root, "respondsToSelector:", imp(nsRespondsToSelector));
    addMethod(root, "methodSignatureForSelector:", imp(nsNil));
    addMethod(root, "conformsToProtocol:", imp(nsConformsToProtocol));
    addClassMethod(root, "alloc", imp(nsAlloc));
    addClassMethod(root, "new", imp(nsNew));

    ClassInfo* pool = defineClass<AutoreleasePool>("NSAutoreleasePool", "NSObject");
    addMethod(pool, "init", imp(poolInit));
    addMethod(pool, "drain", imp(poolDrain));
    addMethod(pool, "release", imp(poolDrain));
    addMethod(pool, "addObject:", imp(poolAddObject));
    addClassMethod(pool, "addObject:", imp(poolClassAddObject));
}

}  // namespace

// ===================================================================== tables

ClassInfo* classNamed(const char* name) {
    Tables& t = tables();
    {
        std::shared_lock<std::shared_mutex> lock(t.mutex);
        auto it = t.classes.find(name);
        if (it != t.classes.end()) return it->second;
    }
    std::unique_lock<std::shared_mutex> lock(t.mutex);
    ClassInfo*& slot = t.classes[name];
    if (!slot) {
        slot = new ClassInfo();
        slot->isa = &metaclass();
        slot->name = name;
        slot->reserved = kImmortal;
    }
    return slot;
}

SEL selector(const char* name) {
    Tables& t = tables();
    {
        std::shared_lock<std::shared_mutex> lock(t.mutex);
        auto it = t.selectors.find(name);
        if (it != t.selectors.end()) return reinterpret_cast<SEL>(it->second.get());
    }
    std::unique_lock<std::shared_mutex> lock(t.mutex);
    auto& slot = t.selectors[name];
    if (!slot) {
        const std::size_t n = std::strlen(name) + 1;
        slot.reset(new char[n]);
        std::memcpy(slot.get(), name, n);
    }
    return reinterpret_cast<SEL>(slot.get());
}

void addMethod(ClassInfo* cls, const char* sel, IMP imp) {
    SEL s = selector(sel);
    std::unique_lock<std::shared_mutex> lock(tables().mutex);
    cls->instanceMethods[s] = imp;
}
void addClassMethod(ClassInfo* cls, const char* sel, IMP imp) {
    SEL s = selector(sel);
    std::unique_lock<std::shared_mutex> lock(tables().mutex);
    cls->classMethods[s] = imp;
}

void ensureInitialized() {
    static std::once_flag once;
    std::call_once(once, [] {
        registerNSObject();
        registerFoundationClasses();
        registerMetalClasses();
    });
}

// ============================================================ reference counts

void noteCreated() { gLive.fetch_add(1, std::memory_order_relaxed); }
void noteDestroyed() { gLive.fetch_sub(1, std::memory_order_relaxed); }

bool isConstantString(const Object* o) {
    return reinterpret_cast<const void*>(o->isa) == static_cast<const void*>(__CFConstantStringClassReference);
}

void makeImmortal(Object* o) { o->reserved |= kImmortal; }

ClassInfo* classOf(const Object* o) {
    if (isConstantString(o)) return classNamed("NSString");
    return o->isa;
}

Object* retain(Object* o) {
    if (!o || isConstantString(o) || (o->reserved & kImmortal)) return o;
    if (o->refs.fetch_add(1, std::memory_order_relaxed) <= 0)
        fatal("retain of a deallocated %s object (use after release)", o->isa->name.c_str());
    return o;
}

void release(Object* o) {
    if (!o || isConstantString(o) || (o->reserved & kImmortal)) return;
    const std::int32_t before = o->refs.fetch_sub(1, std::memory_order_acq_rel);
    if (before > 1) return;
    if (before < 1) fatal("release of a deallocated %s object (over-release)", o->isa->name.c_str());
    for (ClassInfo* c = o->isa; c; c = c->super) {
        if (c->destroy) {
            c->destroy(o);
            noteDestroyed();
            return;
        }
    }
    fatal("class %s has no destructor", o->isa->name.c_str());
}

Object* autorelease(Object* o) {
    if (!o || isConstantString(o) || (o->reserved & kImmortal)) return o;
    auto& stack = pools();
    if (!stack.empty()) {
        stack.back()->objects.push_back(o);
    } else {
        std::lock_guard<std::mutex> lock(orphanMutex());
        orphans().push_back(o);
    }
    return o;
}

void fatal(const char* format, ...) {
    std::fflush(stdout);
    std::fputs("mtlemu: ", stderr);
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    std::abort();
}

}  // namespace objc
}  // namespace mtlemu

// ================================================================ objc_msgSend

using mtlemu::objc::ClassInfo;
using mtlemu::objc::Object;

extern "C" __attribute__((visibility("hidden"))) void mtlemu_objc_nil(void);

// Finds the method for a message; called by the trampolines below.
extern "C" __attribute__((visibility("hidden"))) IMP mtlemu_objc_lookup(Object* self, SEL sel) {
    using namespace mtlemu::objc;
    ensureInitialized();
    if (!self) {
        record(nullptr, sel, false);
        return reinterpret_cast<IMP>(&mtlemu_objc_nil);  // messages to nil return zero
    }
    const bool isClass = self->isa == &metaclass();
    ClassInfo* cls = isClass ? static_cast<ClassInfo*>(self) : classOf(self);
    record(cls, sel, isClass);
    {
        std::shared_lock<std::shared_mutex> lock(tables().mutex);
        for (ClassInfo* c = cls; c; c = c->super) {
            auto& methods = isClass ? c->classMethods : c->instanceMethods;
            auto it = methods.find(sel);
            if (it != methods.end()) return it->second;
        }
    }
    fatal("%c[%s %s] is not implemented by the Metal emulation (add it to tests/metal_emulation/mock/)",
          isClass ? '+' : '-', cls->name.c_str(), reinterpret_cast<const char*>(sel));
}

// Each trampoline saves the argument registers (rdi rsi rdx rcx r8 r9, rax for
// varargs calls, xmm0-7), asks mtlemu_objc_lookup for the method, restores
// the registers and jumps to the method. Stack arguments are untouched, so a
// method defined as an ordinary C++ function with the exact signature of the
// message receives exactly what the caller passed, for any signature.
// _stret: a hidden pointer to the returned struct comes first, so self and
// _cmd are in rsi and rdx.
#define MTLEMU_TRAMPOLINE(NAME, SELF_SEL)                               \
    asm(".text\n"                                                       \
        ".p2align 4\n"                                                  \
        ".globl " NAME "\n"                                             \
        ".type " NAME ",@function\n" NAME                               \
        ":\n"                                                           \
        "    pushq %rbp\n"                                              \
        "    movq %rsp, %rbp\n"                                         \
        "    subq $192, %rsp\n"                                         \
        "    movq %rdi, 0(%rsp)\n"                                      \
        "    movq %rsi, 8(%rsp)\n"                                      \
        "    movq %rdx, 16(%rsp)\n"                                     \
        "    movq %rcx, 24(%rsp)\n"                                     \
        "    movq %r8, 32(%rsp)\n"                                      \
        "    movq %r9, 40(%rsp)\n"                                      \
        "    movq %rax, 48(%rsp)\n"                                     \
        "    movdqu %xmm0, 64(%rsp)\n"                                  \
        "    movdqu %xmm1, 80(%rsp)\n"                                  \
        "    movdqu %xmm2, 96(%rsp)\n"                                  \
        "    movdqu %xmm3, 112(%rsp)\n"                                 \
        "    movdqu %xmm4, 128(%rsp)\n"                                 \
        "    movdqu %xmm5, 144(%rsp)\n"                                 \
        "    movdqu %xmm6, 160(%rsp)\n"                                 \
        "    movdqu %xmm7, 176(%rsp)\n" SELF_SEL                        \
        "    call mtlemu_objc_lookup\n"                                 \
        "    movq %rax, %r11\n"                                         \
        "    movq 0(%rsp), %rdi\n"                                      \
        "    movq 8(%rsp), %rsi\n"                                      \
        "    movq 16(%rsp), %rdx\n"                                     \
        "    movq 24(%rsp), %rcx\n"                                     \
        "    movq 32(%rsp), %r8\n"                                      \
        "    movq 40(%rsp), %r9\n"                                      \
        "    movq 48(%rsp), %rax\n"                                     \
        "    movdqu 64(%rsp), %xmm0\n"                                  \
        "    movdqu 80(%rsp), %xmm1\n"                                  \
        "    movdqu 96(%rsp), %xmm2\n"                                  \
        "    movdqu 112(%rsp), %xmm3\n"                                 \
        "    movdqu 128(%rsp), %xmm4\n"                                 \
        "    movdqu 144(%rsp), %xmm5\n"                                 \
        "    movdqu 160(%rsp), %xmm6\n"                                 \
        "    movdqu 176(%rsp), %xmm7\n"                                 \
        "    leave\n"                                                   \
        "    jmp *%r11\n"                                               \
        ".size " NAME ",.-" NAME "\n")

MTLEMU_TRAMPOLINE("objc_msgSend", "");
MTLEMU_TRAMPOLINE("objc_msgSend_fpret", "");
MTLEMU_TRAMPOLINE("objc_msgSend_stret", "    movq %rsi, %rdi\n    movq %rdx, %rsi\n");

// The method of every message to nil: returns 0 in every return register.
asm(".text\n"
    ".p2align 4\n"
    ".globl mtlemu_objc_nil\n"
    ".hidden mtlemu_objc_nil\n"
    ".type mtlemu_objc_nil,@function\n"
    "mtlemu_objc_nil:\n"
    "    xorl %eax, %eax\n"
    "    xorl %edx, %edx\n"
    "    xorps %xmm0, %xmm0\n"
    "    xorps %xmm1, %xmm1\n"
    "    ret\n"
    ".size mtlemu_objc_nil,.-mtlemu_objc_nil\n");

// ============================================================ runtime C API

extern "C" {

Class objc_lookUpClass(const char* name) {
    mtlemu::objc::ensureInitialized();
    return name ? reinterpret_cast<Class>(mtlemu::objc::classNamed(name)) : nullptr;
}
Class objc_getClass(const char* name) { return objc_lookUpClass(name); }

Protocol* objc_getProtocol(const char* name) {
    // Distinct non-null handles; the emulation does not check conformance.
    auto& t = mtlemu::objc::tables();
    std::unique_lock<std::shared_mutex> lock(t.mutex);
    auto& slot = t.protocols[name ? name : ""];
    if (!slot) slot.reset(new char(0));
    return reinterpret_cast<Protocol*>(slot.get());
}

SEL sel_registerName(const char* name) { return mtlemu::objc::selector(name); }
SEL sel_getUid(const char* name) { return mtlemu::objc::selector(name); }
const char* sel_getName(SEL sel) { return reinterpret_cast<const char*>(sel); }

BOOL class_addMethod(Class cls, SEL name, IMP imp, const char*) {
    auto* c = reinterpret_cast<ClassInfo*>(cls);
    std::unique_lock<std::shared_mutex> lock(mtlemu::objc::tables().mutex);
    return c->instanceMethods.emplace(name, imp).second ? YES : NO;
}

const char* class_getName(Class cls) {
    return cls ? reinterpret_cast<ClassInfo*>(cls)->name.c_str() : "nil";
}

Class object_getClass(id obj) {
    return obj ? reinterpret_cast<Class>(mtlemu::objc::classOf(reinterpret_cast<Object*>(obj))) : nullptr;
}

}  // extern "C"

// ================================================================ test hooks

namespace mtlemu {

void setTraceEnabled(bool enabled) { objc::traceLog().enabled = enabled; }

std::vector<std::string> trace() {
    auto& t = objc::traceLog();
    std::lock_guard<std::mutex> lock(t.mutex);
    std::vector<std::string> out;
    out.reserve(t.entries.size());
    for (const auto& e : t.entries) out.push_back(objc::format(e));
    return out;
}

void clearTrace() {
    auto& t = objc::traceLog();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.entries.clear();
}

std::size_t traceCount(const std::string& entry) {
    auto& t = objc::traceLog();
    std::lock_guard<std::mutex> lock(t.mutex);
    std::size_t n = 0;
    for (const auto& e : t.entries) n += objc::format(e) == entry;
    return n;
}

long liveObjectCount() { return objc::gLive.load(); }

}  // namespace mtlemu

extern "C" {
void mtlemu_set_trace_enabled(int enabled) { mtlemu::setTraceEnabled(enabled != 0); }
void mtlemu_clear_trace(void) { mtlemu::clearTrace(); }
std::size_t mtlemu_trace_count(const char* entry) { return mtlemu::traceCount(entry ? entry : ""); }
long mtlemu_live_object_count(void) { return mtlemu::liveObjectCount(); }
}
