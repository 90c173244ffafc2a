// Internal object model of the mock Objective-C runtime.
//
// Objects are C++ structs whose first member is the `isa` pointer to their
// class, like Apple's runtime, so `id`, metal-cpp's NS::Object* and these
// structs are interchangeable pointers. Methods are plain C++ functions with
// the exact signature of the Objective-C method (receiver, selector, then the
// arguments); objc_msgSend finds them in the class tables and jumps to them
// with the caller's argument registers intact.
#pragma once

#include <objc/runtime.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace mtlemu {
namespace objc {

using NSUInteger = unsigned long;
using NSInteger = long;

struct ClassInfo;

// Common header of every object: 16 bytes, like an Apple constant CFString
// header ({isa, int32 flags}), so constant strings can be messaged too.
struct Object {
    ClassInfo* isa = nullptr;
    std::atomic<std::int32_t> refs{1};
    std::uint32_t reserved = 0;
};
static_assert(sizeof(Object) == 16, "object header layout");

using Allocator = Object* (*)(ClassInfo* cls);
using Destroyer = void (*)(Object* obj);

struct ClassInfo : Object {
    std::string name;
    ClassInfo* super = nullptr;
    std::unordered_map<SEL, IMP> instanceMethods;
    std::unordered_map<SEL, IMP> classMethods;
    Allocator allocate = nullptr;   // +alloc; inherited when null
    Destroyer destroy = nullptr;    // runs at refcount zero; inherited when null
};

// Makes sure every class of the emulation is defined (idempotent, thread-safe).
void ensureInitialized();

// Class and selector tables. These do not call ensureInitialized(), so the
// registration functions can use them.
ClassInfo* classNamed(const char* name);  // created empty on first use
SEL selector(const char* name);

template <class T>
Object* allocateAs(ClassInfo* cls);
template <class T>
void destroyAs(Object* obj) {
    delete static_cast<T*>(obj);
}

// Defines (or completes) class `name` whose instances are C++ objects of type T.
template <class T>
ClassInfo* defineClass(const char* name, const char* superName) {
    ClassInfo* c = classNamed(name);
    c->super = superName ? classNamed(superName) : nullptr;
    c->allocate = &allocateAs<T>;
    c->destroy = &destroyAs<T>;
    return c;
}

void addMethod(ClassInfo* cls, const char* sel, IMP imp);
void addClassMethod(ClassInfo* cls, const char* sel, IMP imp);
template <class F>
IMP imp(F* f) {
    return reinterpret_cast<IMP>(f);
}

void noteCreated();   // live-object accounting
void noteDestroyed();

// A new object of class `cls` with one reference (the caller's).
template <class T>
T* create(ClassInfo* cls) {
    T* o = new T();
    o->isa = cls;
    noteCreated();
    return o;
}
template <class T>
Object* allocateAs(ClassInfo* cls) {
    return create<T>(cls);
}

bool isConstantString(const Object* o);
// Makes retain/release/autorelease no-ops for o (singletons).
void makeImmortal(Object* o);
ClassInfo* classOf(const Object* o);
Object* retain(Object* o);
void release(Object* o);
// Adds o to the innermost autorelease pool of this thread (or keeps it
// alive forever if there is none, as Apple's runtime leaks it).
Object* autorelease(Object* o);

// Replaces *slot with value, retaining the new and releasing the old object.
template <class T>
void assign(T*& slot, T* value) {
    if (value) retain(value);
    T* old = slot;
    slot = value;
    if (old) release(old);
}

// Prints "mtlemu: <message>" to stderr and aborts (programming errors).
[[noreturn]] void fatal(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace objc
}  // namespace mtlemu
