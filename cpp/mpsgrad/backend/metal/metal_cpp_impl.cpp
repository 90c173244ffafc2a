// The one translation unit that instantiates metal-cpp's selector and class tables (metal-cpp
// is header-only; exactly one TU of a binary defines these macros).
#define NS_PRIVATE_IMPLEMENTATION
#define MTL_PRIVATE_IMPLEMENTATION
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>
