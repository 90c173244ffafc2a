/* Linux stand-in for <TargetConditionals.h>: metal-cpp takes its macOS branches. */
#pragma once

#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_VISION 0
#define TARGET_OS_SIMULATOR 0

/* Normally from <Availability.h>: build as for macOS 14, so that metal-cpp's
   version-gated functions (MTL::CopyAllDevices) call into the runtime. */
#ifndef __MAC_OS_X_VERSION_MIN_REQUIRED
#define __MAC_OS_X_VERSION_MIN_REQUIRED 140000
#endif
