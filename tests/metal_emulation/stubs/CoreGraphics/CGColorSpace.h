/* Linux stand-in for <CoreGraphics/CGColorSpace.h> (opaque type only). */
#pragma once

#include <CoreGraphics/CGGeometry.h>

typedef struct CGColorSpace* CGColorSpaceRef;
