/*
 * Linux stand-in for Apple's <objc/runtime.h>, just large enough for metal-cpp.
 *
 * The declarations match Apple's modern runtime (OBJC_OLD_DISPATCH_PROTOTYPES=0).
 * They are implemented by the mpsgrad Metal emulation (mock/src/objc_runtime.cpp).
 */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct objc_class* Class;
/* metal-cpp derives NS::Object from objc_object, so it must be complete. */
struct objc_object {
    Class isa;
};
typedef struct objc_object* id;
typedef struct objc_selector* SEL;
typedef struct objc_protocol Protocol;
typedef void (*IMP)(void);

typedef signed char BOOL; /* x86-64 macOS spelling */
#ifndef YES
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#endif
#ifndef nil
#ifdef __cplusplus
#define nil nullptr
#else
#define nil ((void*)0)
#endif
#endif

Class objc_lookUpClass(const char* name);
Class objc_getClass(const char* name);
Protocol* objc_getProtocol(const char* name);
SEL sel_registerName(const char* name);
SEL sel_getUid(const char* name);
const char* sel_getName(SEL sel);
BOOL class_addMethod(Class cls, SEL name, IMP imp, const char* types);
const char* class_getName(Class cls);
Class object_getClass(id obj);

#ifdef __cplusplus
}
#endif
