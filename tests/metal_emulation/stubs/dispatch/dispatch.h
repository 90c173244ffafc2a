/* Linux stand-in for libdispatch's <dispatch/dispatch.h> (opaque types only). */
#pragma once

typedef struct dispatch_queue_s* dispatch_queue_t;
typedef struct dispatch_data_s* dispatch_data_t;
