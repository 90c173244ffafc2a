// Serialization: mpsgrad's -encodeWithCoder: / -initWithCoder:device:.
//
// One versioned binary format for every object MPS can encode with an NSCoder: kernels,
// descriptors, data sources that hold data, persistent states (and later graphs). A blob is
//     magic "MPSGRAD\0" | format version | class version | class tag | payload size | payload | CRC-32
// all little-endian; docs/serialization.md documents it byte by byte.
//
// Decoding treats its input as hostile: every read is bounds-checked, every declared size is
// compared with the bytes that remain BEFORE anything is allocated, enum values and flags are
// range-checked, and any defect raises SerializationError (a ValueError; Python:
// mpsgrad.SerializationError). Nothing here crashes or allocates more than the input's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/types.h"

namespace mpsgrad {

class Device;
class Kernel;
class State;
class NNPadding;
class ImageAllocator;

// Malformed serialized data: truncated, corrupted, wrong magic/version/class, sizes that do not fit.
class SerializationError : public ValueError {
public:
    using ValueError::ValueError;
};

template <class... Parts>
[[noreturn]] void throwSerializationError(Parts&&... parts) {
    throw SerializationError(detail::concat(std::forward<Parts>(parts)...));
}

namespace serial {

inline constexpr char kMagic[8] = {'M', 'P', 'S', 'G', 'R', 'A', 'D', '\0'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kMaxClassTagLength = 64;
// magic + format version + class version + tag length + payload size + CRC-32 (tag excluded)
inline constexpr size_t kEnvelopeBytes = 8 + 4 + 4 + 4 + 8 + 4;

// CRC-32 (IEEE 802.3, the polynomial of zlib.crc32) of `size` bytes.
uint32_t crc32(const uint8_t* data, size_t size);

// Appends little-endian fields to a payload; finish() wraps it in the envelope.
class Writer {
public:
    void u8(uint8_t value) { payload_.push_back(value); }
    void boolean(bool value) { u8(value ? 1 : 0); }
    void u32(uint32_t value);
    void i32(int32_t value) { u32(static_cast<uint32_t>(value)); }
    void u64(uint64_t value);
    void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
    void f32(float value);  // IEEE-754 bits, NaN payloads kept
    // u64 byte count, then the bytes.
    void bytes(const void* data, size_t size);
    void string(const std::string& value) { bytes(value.data(), value.size()); }
    // u64 element count, then the float32 values.
    void floats(const float* values, size_t count);
    void floats(const std::vector<float>& values) { floats(values.data(), values.size()); }
    // A nested object: a complete blob written with bytes().
    void object(const std::vector<uint8_t>& blob) { bytes(blob.data(), blob.size()); }
    void offset(const Offset& value);
    void region(const Region& value);

    // The complete blob: envelope around the payload written so far.
    std::vector<uint8_t> finish(const std::string& classTag, uint32_t classVersion) const;

    // When set, kernels may reference a custom NNPadding / ImageAllocator they cannot encode
    // ("external" records); the decoder must be given the objects back (Reader::external*).
    bool allowExternalObjects = false;

private:
    std::vector<uint8_t> payload_;
};

// The objects a blob can only reference: a custom (Python) NNPadding or ImageAllocator.
struct ExternalObjects {
    std::shared_ptr<NNPadding> padding;
    std::shared_ptr<ImageAllocator> allocator;
};

// A bounds-checked view of a payload. Every read names what it reads (`what`) in its error.
class Reader {
public:
    Reader(const uint8_t* data, size_t size, std::string classTag = {})
        : data_(data), size_(size), classTag_(std::move(classTag)) {}

    uint8_t u8(const char* what);
    bool boolean(const char* what);  // 0 or 1 only
    uint32_t u32(const char* what);
    int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
    uint64_t u64(const char* what);
    int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
    float f32(const char* what);
    // A u64-length-prefixed byte range, as a view into the input (no copy).
    std::pair<const uint8_t*, size_t> bytes(const char* what);
    std::string string(const char* what);  // must be valid UTF-8
    std::vector<float> floats(const char* what);
    Offset offset(const char* what);
    Region region(const char* what);
    // A nested object's blob (see Writer::object); open it with open()/openAs().
    std::pair<const uint8_t*, size_t> object(const char* what) { return bytes(what); }
    // An enum stored as u32 that must be one of `allowed`.
    uint32_t oneOf(const char* what, std::initializer_list<uint32_t> allowed);
    // An i64 that must lie in [lo, hi].
    int64_t i64InRange(const char* what, int64_t lo, int64_t hi);

    size_t remaining() const { return size_ - position_; }
    const std::string& classTag() const { return classTag_; }
    // SerializationError unless every byte was consumed.
    void expectEnd() const;
    [[noreturn]] void fail(const std::string& what, const std::string& problem) const;

    // Objects the caller supplies for "external" records (see Writer::allowExternalObjects),
    // and whether a record used them (an unused one is an error: it would be silently dropped).
    ExternalObjects externals;
    bool externalPaddingUsed = false, externalAllocatorUsed = false;

private:
    const uint8_t* take(size_t count, const char* what);

    const uint8_t* data_;
    size_t size_;
    size_t position_ = 0;
    std::string classTag_;
};

// The envelope of a blob, checked: magic, format version, tag, sizes and CRC-32.
struct Envelope {
    std::string classTag;
    uint32_t classVersion = 0;
    const uint8_t* payload = nullptr;
    size_t payloadSize = 0;
    Reader reader() const { return Reader(payload, payloadSize, classTag); }
};
Envelope open(const uint8_t* data, size_t size);
// open(), then SerializationError unless the tag is `expectedTag` and the class version is
// between 1 and `maxClassVersion`.
Reader openAs(const uint8_t* data, size_t size, const std::string& expectedTag, uint32_t maxClassVersion = 1);

// Class tag → factory, one registry per base class (Kernel, State). The factory reads the
// whole payload of its class version and returns the object on `device`.
template <class Base>
class Registry {
public:
    using Factory = std::function<std::shared_ptr<Base>(Reader&, const Device&, uint32_t classVersion)>;
    struct Entry {
        Factory factory;
        uint32_t maxClassVersion = 1;
    };

    static Registry& instance() {
        static Registry registry;
        return registry;
    }
    void add(const std::string& classTag, Factory factory, uint32_t maxClassVersion = 1) {
        entries_[classTag] = Entry{std::move(factory), maxClassVersion};
    }
    // Null when the tag is unknown.
    const Entry* find(const std::string& classTag) const {
        auto it = entries_.find(classTag);
        return it == entries_.end() ? nullptr : &it->second;
    }
    std::vector<std::string> tags() const {
        std::vector<std::string> out;
        for (const auto& [tag, entry] : entries_) out.push_back(tag);
        return out;
    }

private:
    std::map<std::string, Entry> entries_;
};

// Registers every built-in serializable class once (thread-safe). The list lives with the
// kernels (kernels/serialization.cpp): the one place a new family adds its classes.
void ensureBuiltinClassesRegistered();

// Decodes a blob of any class registered for `Base`: opens the envelope, looks the tag up,
// runs the factory, requires every payload byte and every external object to be used.
// `kind` names the base in messages ("kernel", "state").
template <class Base>
std::shared_ptr<Base> decodeRegistered(const uint8_t* data, size_t size, const Device& device, const char* kind,
                                       const ExternalObjects& externals = {}) {
    ensureBuiltinClassesRegistered();
    Envelope envelope = open(data, size);
    const auto* entry = Registry<Base>::instance().find(envelope.classTag);
    if (!entry)
        throwSerializationError("data: class tag '", envelope.classTag, "' is not a serializable ", kind,
                                " class of this build");
    if (envelope.classVersion < 1 || envelope.classVersion > entry->maxClassVersion)
        throwSerializationError("data: ", envelope.classTag, " class version ", envelope.classVersion,
                                " is not supported (this build reads 1 to ", entry->maxClassVersion, ")");
    Reader reader = envelope.reader();
    reader.externals = externals;
    std::shared_ptr<Base> object = entry->factory(reader, device, envelope.classVersion);
    reader.expectEnd();
    if (externals.padding && !reader.externalPaddingUsed)
        throwValueError("padding: the serialized ", envelope.classTag,
                        " has no custom padding policy to replace; pass padding=None");
    if (externals.allocator && !reader.externalAllocatorUsed)
        throwValueError("destination_image_allocator: the serialized ", envelope.classTag,
                        " has no custom allocator to replace; pass destination_image_allocator=None");
    return object;
}

}  // namespace serial
}  // namespace mpsgrad
