/* Linux stand-in for <CoreFoundation/CoreFoundation.h>: only what metal-cpp names. */
#pragma once

#include <math.h>   /* INFINITY etc., which the real header pulls in */
#include <stdint.h>
#include <dispatch/dispatch.h>

typedef double CFTimeInterval;
typedef const void* CFTypeRef;
typedef const struct __CFString* CFStringRef;
typedef signed long CFIndex;
typedef unsigned char Boolean;
