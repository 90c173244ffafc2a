/*
 * Linux stand-in for Apple's <objc/message.h>.
 *
 * As in Apple's headers the dispatch functions are declared without a
 * prototype; callers (metal-cpp's NS::Object::sendMessage) cast them to the
 * exact signature of the method before calling.
 */
#pragma once

#include <objc/runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

void objc_msgSend(void);
void objc_msgSend_stret(void);
void objc_msgSend_fpret(void);

#ifdef __cplusplus
}
#endif
