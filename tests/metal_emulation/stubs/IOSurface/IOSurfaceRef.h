/* Linux stand-in for <IOSurface/IOSurfaceRef.h> (opaque type only). */
#pragma once

typedef struct __IOSurface* IOSurfaceRef;
