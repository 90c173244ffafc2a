// NSString, NSError, NSURL and NSArray for the mock runtime: the subset that
// metal-cpp's Foundation wrappers and a Metal compute backend use.
#include "foundation.h"

#include <cstdlib>
#include <cstring>

namespace mtlemu {
namespace objc {

using unichar = unsigned short;

void String::set(const char* s, std::size_t n) {
    char* copy = new char[n + 1];
    if (n) std::memcpy(copy, s, n);
    copy[n] = '\0';
    delete[] owned;
    owned = copy;
    chars = copy;
    length = long(n);
}

Error::~Error() {
    release(domain);
    release(description);
}
URL::~URL() { release(path); }
Array::~Array() {
    for (Object* o : items) release(o);
}

String* makeString(const std::string& s) {
    String* o = create<String>(classNamed("NSString"));
    o->set(s.data(), s.size());
    return o;
}

Error* makeError(const char* domain, long code, const std::string& message) {
    Error* e = create<Error>(classNamed("NSError"));
    e->domain = makeString(domain);
    e->code = code;
    e->description = makeString(message);
    return e;
}

Array* makeArray(const std::vector<Object*>& items) {
    Array* a = create<Array>(classNamed("NSArray"));
    for (Object* o : items) a->items.push_back(retain(o));
    return a;
}

const char* stringChars(const Object* s) {
    return s ? static_cast<const String*>(s)->chars : "";
}

std::string stringValue(const Object* s) {
    if (!s) return std::string();
    const String* str = static_cast<const String*>(s);
    return std::string(str->chars, std::size_t(str->length));
}

void setError(void* out, const char* domain, long code, const std::string& message) {
    if (!out) return;
    *static_cast<Object**>(out) = autorelease(makeError(domain, code, message));
}

namespace {

struct Range {
    NSUInteger location, length;
};

// --------------------------------------------------------------------- NSString
id strAutoreleased(const std::string& s) { return reinterpret_cast<id>(autorelease(makeString(s))); }

id strClassString(ClassInfo*, SEL) { return strAutoreleased(""); }
id strClassWithString(ClassInfo*, SEL, Object* s) { return strAutoreleased(stringValue(s)); }
id strClassWithCString(ClassInfo*, SEL, const char* s, NSUInteger) { return strAutoreleased(s ? s : ""); }
id strClassWithUTF8(ClassInfo*, SEL, const char* s) { return strAutoreleased(s ? s : ""); }
id strInitWithString(String* self, SEL, Object* s) {
    const std::string v = stringValue(s);
    self->set(v.data(), v.size());
    return reinterpret_cast<id>(self);
}
id strInitWithCString(String* self, SEL, const char* s, NSUInteger) {
    self->set(s ? s : "", s ? std::strlen(s) : 0);
    return reinterpret_cast<id>(self);
}
id strInitWithUTF8(String* self, SEL, const char* s) { return strInitWithCString(self, nullptr, s, 4); }
id strInitWithBytesNoCopy(String* self, SEL, void* bytes, NSUInteger len, NSUInteger, bool freeWhenDone) {
    self->set(static_cast<const char*>(bytes), len);
    if (freeWhenDone) std::free(bytes);
    return reinterpret_cast<id>(self);
}
const char* strUTF8(String* self, SEL) { return self->chars; }
const char* strCString(String* self, SEL, NSUInteger) { return self->chars; }
NSUInteger strLength(String* self, SEL) { return NSUInteger(self->length); }
NSUInteger strLengthOfBytes(String* self, SEL, NSUInteger) { return NSUInteger(self->length); }
NSUInteger strMaxLengthOfBytes(String* self, SEL, NSUInteger) { return NSUInteger(self->length) * 3; }
unichar strCharacterAt(String* self, SEL, NSUInteger i) {
    if (i >= NSUInteger(self->length)) fatal("-[NSString characterAtIndex:]: index %lu beyond bounds", i);
    return unichar(static_cast<unsigned char>(self->chars[i]));
}
bool strIsEqualToString(String* self, SEL, Object* other) {
    return other && stringValue(self) == stringValue(other);
}
bool strIsEqual(String* self, SEL, Object* other) {
    return other && classOf(other) == classNamed("NSString") && strIsEqualToString(self, nullptr, other);
}
NSUInteger strHash(String* self, SEL) { return NSUInteger(std::hash<std::string>()(stringValue(self))); }
id strSelf(String* self, SEL) { return reinterpret_cast<id>(self); }
id strAppending(String* self, SEL, Object* other) { return strAutoreleased(stringValue(self) + stringValue(other)); }
long strCaseInsensitiveCompare(String* self, SEL, Object* other) {
    const int c = strcasecmp(self->chars, stringChars(other));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
}
Range strRangeOfString(String* self, SEL, Object* other, NSUInteger) {
    const std::size_t at = stringValue(self).find(stringValue(other));
    if (at == std::string::npos) return Range{NSUInteger(~0ul >> 1), 0};  // NSNotFound
    return Range{NSUInteger(at), NSUInteger(stringValue(other).size())};
}

// ---------------------------------------------------------------------- NSError
std::string genericDescription(const std::string& domain, long code) {
    return "The operation couldn't be completed. (" + domain + " error " + std::to_string(code) + ".)";
}
id errClassWithDomain(ClassInfo*, SEL, Object* domain, long code, Object* /*userInfo*/) {
    const std::string d = stringValue(domain);
    return reinterpret_cast<id>(autorelease(makeError(d.c_str(), code, genericDescription(d, code))));
}
// Stores a new object (one reference, owned by the slot) in slot.
template <class T>
void replace(T*& slot, T* owned) {
    T* old = slot;
    slot = owned;
    release(old);
}

id errInitWithDomain(Error* self, SEL, Object* domain, long code, Object*) {
    replace(self->domain, makeString(stringValue(domain)));
    self->code = code;
    replace(self->description, makeString(genericDescription(stringValue(domain), code)));
    return reinterpret_cast<id>(self);
}
long errCode(Error* self, SEL) { return self->code; }
id errDomain(Error* self, SEL) { return reinterpret_cast<id>(self->domain); }
id errDescription(Error* self, SEL) { return reinterpret_cast<id>(self->description); }
id errNil(Error*, SEL) { return nullptr; }

// ------------------------------------------------------------------------ NSURL
void setPath(URL* url, const std::string& path) { replace(url->path, makeString(path)); }
id urlClassFileURLWithPath(ClassInfo*, SEL, Object* path) {
    URL* u = create<URL>(classNamed("NSURL"));
    setPath(u, stringValue(path));
    return reinterpret_cast<id>(autorelease(u));
}
id urlInitFileURLWithPath(URL* self, SEL, Object* path) {
    setPath(self, stringValue(path));
    return reinterpret_cast<id>(self);
}
id urlInitWithString(URL* self, SEL, Object* s) {
    std::string v = stringValue(s);
    if (v.compare(0, 7, "file://") == 0) v = v.substr(7);
    setPath(self, v);
    return reinterpret_cast<id>(self);
}
id urlPath(URL* self, SEL) { return reinterpret_cast<id>(self->path); }
const char* urlFileSystemRepresentation(URL* self, SEL) { return stringChars(self->path); }
id urlAbsoluteString(URL* self, SEL) { return strAutoreleased("file://" + stringValue(self->path)); }

// ---------------------------------------------------------------------- NSArray
id arrClassArray(ClassInfo*, SEL) { return reinterpret_cast<id>(autorelease(makeArray({}))); }
id arrClassWithObject(ClassInfo*, SEL, Object* o) { return reinterpret_cast<id>(autorelease(makeArray({o}))); }
id arrClassWithObjects(ClassInfo*, SEL, Object* const* objects, NSUInteger count) {
    return reinterpret_cast<id>(autorelease(makeArray(std::vector<Object*>(objects, objects + count))));
}
id arrInitWithObjects(Array* self, SEL, Object* const* objects, NSUInteger count) {
    for (NSUInteger i = 0; i < count; ++i) self->items.push_back(retain(objects[i]));
    return reinterpret_cast<id>(self);
}
NSUInteger arrCount(Array* self, SEL) { return self->items.size(); }
id arrObjectAt(Array* self, SEL, NSUInteger i) {
    if (i >= self->items.size())
        fatal("-[NSArray objectAtIndex:]: index %lu beyond bounds [0 .. %zu) (NSRangeException)", i,
              self->items.size());
    return reinterpret_cast<id>(self->items[i]);
}

}  // namespace

void registerFoundationClasses() {
    ClassInfo* s = defineClass<String>("NSString", "NSObject");
    addClassMethod(s, "string", imp(strClassString));
    addClassMethod(s, "stringWithString:", imp(strClassWithString));
    addClassMethod(s, "stringWithCString:encoding:", imp(strClassWithCString));
    addClassMethod(s, "stringWithUTF8String:", imp(strClassWithUTF8));
    addMethod(s, "initWithString:", imp(strInitWithString));
    addMethod(s, "initWithCString:encoding:", imp(strInitWithCString));
    addMethod(s, "initWithUTF8String:", imp(strInitWithUTF8));
    addMethod(s, "initWithBytesNoCopy:length:encoding:freeWhenDone:", imp(strInitWithBytesNoCopy));
    addMethod(s, "UTF8String", imp(strUTF8));
    addMethod(s, "cStringUsingEncoding:", imp(strCString));
    addMethod(s, "fileSystemRepresentation", imp(strUTF8));
    addMethod(s, "length", imp(strLength));
    addMethod(s, "lengthOfBytesUsingEncoding:", imp(strLengthOfBytes));
    addMethod(s, "maximumLengthOfBytesUsingEncoding:", imp(strMaxLengthOfBytes));
    addMethod(s, "characterAtIndex:", imp(strCharacterAt));
    addMethod(s, "isEqualToString:", imp(strIsEqualToString));
    addMethod(s, "isEqual:", imp(strIsEqual));
    addMethod(s, "hash", imp(strHash));
    addMethod(s, "description", imp(strSelf));
    addMethod(s, "stringByAppendingString:", imp(strAppending));
    addMethod(s, "caseInsensitiveCompare:", imp(strCaseInsensitiveCompare));
    addMethod(s, "rangeOfString:options:", imp(strRangeOfString));

    ClassInfo* e = defineClass<Error>("NSError", "NSObject");
    addClassMethod(e, "errorWithDomain:code:userInfo:", imp(errClassWithDomain));
    addMethod(e, "initWithDomain:code:userInfo:", imp(errInitWithDomain));
    addMethod(e, "code", imp(errCode));
    addMethod(e, "domain", imp(errDomain));
    addMethod(e, "localizedDescription", imp(errDescription));
    addMethod(e, "description", imp(errDescription));
    addMethod(e, "userInfo", imp(errNil));
    addMethod(e, "localizedFailureReason", imp(errNil));
    addMethod(e, "localizedRecoverySuggestion", imp(errNil));
    addMethod(e, "localizedRecoveryOptions", imp(errNil));

    ClassInfo* u = defineClass<URL>("NSURL", "NSObject");
    addClassMethod(u, "fileURLWithPath:", imp(urlClassFileURLWithPath));
    addMethod(u, "initFileURLWithPath:", imp(urlInitFileURLWithPath));
    addMethod(u, "initWithString:", imp(urlInitWithString));
    addMethod(u, "path", imp(urlPath));
    addMethod(u, "fileSystemRepresentation", imp(urlFileSystemRepresentation));
    addMethod(u, "absoluteString", imp(urlAbsoluteString));

    ClassInfo* a = defineClass<Array>("NSArray", "NSObject");
    addClassMethod(a, "array", imp(arrClassArray));
    addClassMethod(a, "arrayWithObject:", imp(arrClassWithObject));
    addClassMethod(a, "arrayWithObjects:count:", imp(arrClassWithObjects));
    addMethod(a, "initWithObjects:count:", imp(arrInitWithObjects));
    addMethod(a, "count", imp(arrCount));
    addMethod(a, "objectAtIndex:", imp(arrObjectAt));
    addMethod(a, "objectAtIndexedSubscript:", imp(arrObjectAt));
}

}  // namespace objc
}  // namespace mtlemu
