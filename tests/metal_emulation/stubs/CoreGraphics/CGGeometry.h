/* Linux stand-in for <CoreGraphics/CGGeometry.h> (64-bit layout). */
#pragma once

typedef double CGFloat;
typedef struct CGPoint { CGFloat x, y; } CGPoint;
typedef struct CGSize { CGFloat width, height; } CGSize;
typedef struct CGRect { CGPoint origin; CGSize size; } CGRect;
