// The Foundation classes of the mock runtime (NSString, NSError, NSURL,
// NSArray) and the helpers the fake Metal classes use to make them.
#pragma once

#include <string>
#include <vector>

#include "objc_runtime.h"

namespace mtlemu {
namespace objc {

// Same layout as the constant strings clang emits for MTLSTR("..."):
// {isa, int32 flags, const char* chars, long length}.
struct String : Object {
    const char* chars = "";
    long length = 0;
    char* owned = nullptr;  // chars, when this object allocated them
    ~String() { delete[] owned; }
    void set(const char* s, std::size_t n);
};

struct Error : Object {
    String* domain = nullptr;
    long code = 0;
    String* description = nullptr;
    ~Error();
};

struct URL : Object {
    String* path = nullptr;
    ~URL();
};

struct Array : Object {
    std::vector<Object*> items;  // each retained
    ~Array();
};

// New objects with one reference owned by the caller.
String* makeString(const std::string& s);
Error* makeError(const char* domain, long code, const std::string& message);
Array* makeArray(const std::vector<Object*>& items);

// chars/length of an NSString (also of a constant string); "" for nil.
const char* stringChars(const Object* s);
std::string stringValue(const Object* s);

// Stores an autoreleased error in *out, if out is not null (the NSError**
// convention).
void setError(void* out, const char* domain, long code, const std::string& message);

}  // namespace objc
}  // namespace mtlemu
