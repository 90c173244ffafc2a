// The binary format (Writer, Reader, envelope) and the serialization of the core classes:
// ImageDescriptor, the kernel base classes' properties, State. docs/serialization.md is the
// byte-level reference; keep the two in step.
#include "core/serialization.h"

#include <array>
#include <cstring>
#include <mutex>
#include <typeinfo>

#include "core/host_access.h"
#include "core/image.h"
#include "core/kernel.h"
#include "core/multiary.h"
#include "core/padding.h"
#include "core/state.h"

namespace mpsgrad {
namespace serial {

// ---- checksum -------------------------------------------------------------------------------------

uint32_t crc32(const uint8_t* data, size_t size) {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

namespace {

void putU32(std::vector<uint8_t>& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
void putU64(std::vector<uint8_t>& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
uint32_t getU32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
    return v;
}
uint64_t getU64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
}

bool validTagCharacter(uint8_t c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

// Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), so Python can always
// turn a decoded label into a str.
bool validUtf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t extra;
        uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= extra) return false;
        for (size_t k = 1; k <= extra; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t minimum[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < minimum[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += extra + 1;
    }
    return true;
}

}  // namespace

// ---- Writer ---------------------------------------------------------------------------------------

void Writer::u32(uint32_t value) { putU32(payload_, value); }
void Writer::u64(uint64_t value) { putU64(payload_, value); }

void Writer::f32(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    u32(bits);
}

void Writer::bytes(const void* data, size_t size) {
    u64(size);
    const auto* p = static_cast<const uint8_t*>(data);
    if (size) payload_.insert(payload_.end(), p, p + size);
}

void Writer::floats(const float* values, size_t count) {
    u64(count);
    for (size_t i = 0; i < count; ++i) f32(values[i]);
}

void Writer::offset(const Offset& value) {
    i64(value.x);
    i64(value.y);
    i64(value.z);
}

void Writer::region(const Region& value) {
    i64(value.origin.x);
    i64(value.origin.y);
    i64(value.origin.z);
    u64(value.size.width);
    u64(value.size.height);
    u64(value.size.depth);
}

std::vector<uint8_t> Writer::finish(const std::string& classTag, uint32_t classVersion) const {
    if (classTag.empty() || classTag.size() > kMaxClassTagLength)
        throwValueError("class tag: must have 1 to ", kMaxClassTagLength, " characters, got ", classTag.size());
    std::vector<uint8_t> out(kMagic, kMagic + 8);
    out.reserve(kEnvelopeBytes + classTag.size() + payload_.size());
    putU32(out, kFormatVersion);
    putU32(out, classVersion);
    putU32(out, uint32_t(classTag.size()));
    out.insert(out.end(), classTag.begin(), classTag.end());
    putU64(out, payload_.size());
    out.insert(out.end(), payload_.begin(), payload_.end());
    putU32(out, crc32(out.data(), out.size()));
    return out;
}

// ---- Reader ---------------------------------------------------------------------------------------

void Reader::fail(const std::string& what, const std::string& problem) const {
    throwSerializationError("data: ", classTag_.empty() ? std::string() : classTag_ + ".", what, ": ", problem);
}

const uint8_t* Reader::take(size_t count, const char* what) {
    if (count > remaining())
        fail(what, detail::concat("needs ", count, " byte(s) at payload offset ", position_, " but only ",
                                  remaining(), " remain (truncated or corrupted data)"));
    const uint8_t* p = data_ + position_;
    position_ += count;
    return p;
}

uint8_t Reader::u8(const char* what) { return *take(1, what); }

bool Reader::boolean(const char* what) {
    uint8_t v = u8(what);
    if (v > 1) fail(what, detail::concat("a boolean must be 0 or 1, got ", int(v)));
    return v == 1;
}

uint32_t Reader::u32(const char* what) { return getU32(take(4, what)); }
uint64_t Reader::u64(const char* what) { return getU64(take(8, what)); }

float Reader::f32(const char* what) {
    uint32_t bits = u32(what);
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

std::pair<const uint8_t*, size_t> Reader::bytes(const char* what) {
    uint64_t size = u64(what);
    if (size > remaining())
        fail(what, detail::concat("declares ", size, " byte(s) but only ", remaining(), " remain"));
    return {take(size_t(size), what), size_t(size)};
}

std::string Reader::string(const char* what) {
    auto [p, n] = bytes(what);
    if (!validUtf8(p, n)) fail(what, "is not valid UTF-8");
    return std::string(reinterpret_cast<const char*>(p), n);
}

std::vector<float> Reader::floats(const char* what) {
    uint64_t count = u64(what);
    // Validate the declared count against the input before allocating anything.
    if (count > remaining() / 4)
        fail(what, detail::concat("declares ", count, " float32 value(s) but only ", remaining(), " byte(s) remain"));
    const uint8_t* p = take(size_t(count) * 4, what);
    std::vector<float> out(static_cast<size_t>(count));
    for (size_t i = 0; i < out.size(); ++i) {
        uint32_t bits = getU32(p + 4 * i);
        std::memcpy(&out[i], &bits, 4);
    }
    return out;
}

Offset Reader::offset(const char* what) {
    Offset o;
    o.x = i64(what);
    o.y = i64(what);
    o.z = i64(what);
    return o;
}

Region Reader::region(const char* what) {
    Region r;
    r.origin.x = i64(what);
    r.origin.y = i64(what);
    r.origin.z = i64(what);
    r.size.width = u64(what);
    r.size.height = u64(what);
    r.size.depth = u64(what);
    return r;
}

uint32_t Reader::oneOf(const char* what, std::initializer_list<uint32_t> allowed) {
    uint32_t v = u32(what);
    for (uint32_t a : allowed)
        if (a == v) return v;
    fail(what, detail::concat("value ", v, " is not one of the enum's values"));
}

int64_t Reader::i64InRange(const char* what, int64_t lo, int64_t hi) {
    int64_t v = i64(what);
    if (v < lo || v > hi) fail(what, detail::concat("must lie in [", lo, ", ", hi, "], got ", v));
    return v;
}

void Reader::expectEnd() const {
    if (remaining())
        throwSerializationError("data: ", remaining(), " unexpected byte(s) after the ", classTag_, " payload");
}

// ---- envelope -------------------------------------------------------------------------------------

Envelope open(const uint8_t* data, size_t size) {
    if (!data && size) throwSerializationError("data: null pointer");
    if (size < kEnvelopeBytes + 1)
        throwSerializationError("data: ", size, " byte(s) is shorter than the smallest mpsgrad blob (",
                                kEnvelopeBytes + 1, " bytes); truncated or not mpsgrad data");
    if (std::memcmp(data, kMagic, 8) != 0)
        throwSerializationError("data: does not start with the mpsgrad magic \"MPSGRAD\\0\"; not mpsgrad data");
    uint32_t format = getU32(data + 8);
    if (format != kFormatVersion)
        throwSerializationError("data: format version ", format, " is not supported (this build reads version ",
                                kFormatVersion, ")");
    Envelope e;
    e.classVersion = getU32(data + 12);
    uint32_t tagLength = getU32(data + 16);
    if (tagLength < 1 || tagLength > kMaxClassTagLength)
        throwSerializationError("data: class tag length ", tagLength, " is outside [1, ", kMaxClassTagLength, "]");
    size_t headerEnd = 20 + size_t(tagLength) + 8;
    if (size < headerEnd + 4)
        throwSerializationError("data: ", size, " byte(s) cannot hold the header (", headerEnd + 4,
                                " bytes with the checksum); truncated data");
    for (uint32_t i = 0; i < tagLength; ++i)
        if (!validTagCharacter(data[20 + i]))
            throwSerializationError("data: the class tag holds a byte outside [A-Za-z0-9_]");
    e.classTag.assign(reinterpret_cast<const char*>(data + 20), tagLength);
    uint64_t payloadSize = getU64(data + 20 + tagLength);
    if (payloadSize != size - headerEnd - 4)
        throwSerializationError("data: the header declares a ", payloadSize, "-byte payload but ",
                                size - headerEnd - 4, " byte(s) follow it (truncated or corrupted data)");
    uint32_t stored = getU32(data + size - 4);
    uint32_t computed = crc32(data, size - 4);
    if (stored != computed)
        throwSerializationError("data: CRC-32 mismatch (stored ", stored, ", computed ", computed,
                                "); the data is corrupted");
    e.payload = data + headerEnd;
    e.payloadSize = size_t(payloadSize);
    return e;
}

Reader openAs(const uint8_t* data, size_t size, const std::string& expectedTag, uint32_t maxClassVersion) {
    Envelope e = open(data, size);
    if (e.classTag != expectedTag)
        throwSerializationError("data: holds a serialized ", e.classTag, ", expected a ", expectedTag);
    if (e.classVersion < 1 || e.classVersion > maxClassVersion)
        throwSerializationError("data: ", e.classTag, " class version ", e.classVersion,
                                " is not supported (this build reads 1 to ", maxClassVersion, ")");
    return e.reader();
}

}  // namespace serial

// ---- ImageDescriptor ------------------------------------------------------------------------------

std::vector<uint8_t> ImageDescriptor::serialize() const {
    serial::Writer w;
    w.u32(static_cast<uint32_t>(featureChannelFormat));
    w.i64(width);
    w.i64(height);
    w.i64(featureChannels);
    w.i64(numberOfImages);
    w.u32(usage);
    return w.finish("ImageDescriptor", 1);
}

ImageDescriptor ImageDescriptor::deserialize(const uint8_t* data, size_t size) {
    serial::Reader r = serial::openAs(data, size, "ImageDescriptor");
    ImageDescriptor d;
    d.featureChannelFormat = static_cast<ImageFeatureChannelFormat>(r.oneOf("channel_format", {0, 1, 2, 3, 4}));
    d.width = r.i64("width");
    d.height = r.i64("height");
    d.featureChannels = r.i64("feature_channels");
    d.numberOfImages = r.i64("number_of_images");
    d.usage = r.u32("usage");
    r.expectEnd();
    return d;
}

// ---- kernels: base-class properties ------------------------------------------------------------------

namespace {

// Padding record: u8 kind (0 default policy, 1 NNDefaultPadding + u32 method, 2 external).
void encodePadding(serial::Writer& w, const std::shared_ptr<NNPadding>& padding, const char* kernel) {
    if (!padding) return w.u8(0);
    if (auto* builtin = dynamic_cast<const NNDefaultPadding*>(padding.get())) {
        w.u8(1);
        return w.u32(builtin->paddingMethod());
    }
    if (!w.allowExternalObjects)
        throwValueError("padding: ", kernel, " uses a custom NNPadding, which to_bytes() cannot encode; "
                        "pickle the kernel instead (the policy is pickled by Python), or set padding to an "
                        "NNDefaultPadding or None first (docs/serialization.md)");
    w.u8(2);
}

std::shared_ptr<NNPadding> decodePadding(serial::Reader& r) {
    uint8_t kind = r.u8("padding");
    if (kind == 0) return nullptr;
    if (kind == 1) {
        uint32_t method = r.u32("padding.method");
        try {
            return NNDefaultPadding::paddingWithMethod(method);
        } catch (const ValueError& e) {
            r.fail("padding.method", e.what());
        }
    }
    if (kind == 2) {
        // A SerializationError (a ValueError): the bytes name a policy they do not hold, which a
        // corrupted record can do as well as a custom padding the caller must pass.
        if (!r.externals.padding)
            r.fail("padding", "the data was written with a custom NNPadding it does not contain; pass that "
                              "policy as padding= when decoding");
        r.externalPaddingUsed = true;
        return r.externals.padding;
    }
    r.fail("padding", detail::concat("record kind ", int(kind), " is not 0, 1 or 2"));
}

// Allocator record: u8 kind (0 none, 1 temporary, 2 persistent, 3 external).
void encodeAllocator(serial::Writer& w, const std::shared_ptr<ImageAllocator>& allocator, const char* kernel) {
    if (!allocator) return w.u8(0);
    if (allocator == ImageAllocator::temporaryAllocator()) return w.u8(1);
    if (allocator == ImageAllocator::persistentAllocator()) return w.u8(2);
    if (!w.allowExternalObjects)
        throwValueError("destination_image_allocator: ", kernel, " uses a custom ImageAllocator, which to_bytes() "
                        "cannot encode; pickle the kernel instead, or reset the allocator first (docs/serialization.md)");
    w.u8(3);
}

std::shared_ptr<ImageAllocator> decodeAllocator(serial::Reader& r) {
    switch (r.u8("destination_image_allocator")) {
        case 0: return nullptr;
        case 1: return ImageAllocator::temporaryAllocator();
        case 2: return ImageAllocator::persistentAllocator();
        case 3:
            if (!r.externals.allocator)
                throwValueError("destination_image_allocator: the data was written with a custom ImageAllocator it "
                                "does not contain; pass that allocator when decoding");
            r.externalAllocatorUsed = true;
            return r.externals.allocator;
        default: r.fail("destination_image_allocator", "record kind is not 0, 1, 2 or 3");
    }
}

ImageEdgeMode decodeEdgeMode(serial::Reader& r, const char* what) {
    return static_cast<ImageEdgeMode>(r.oneOf(what, {0, 1, 2, 3, 4}));
}

}  // namespace

void Kernel::encodeWithCoder(serial::Writer&) const {
    throwTypeError(className(), " is not serializable (docs/serialization.md lists the serializable classes)");
}

std::vector<uint8_t> Kernel::serialize(bool allowExternalObjects) const {
    serial::Writer w;
    w.allowExternalObjects = allowExternalObjects;
    encodeWithCoder(w);
    return w.finish(className(), 1);
}

std::shared_ptr<Kernel> Kernel::deserialize(const uint8_t* data, size_t size, const Device& device,
                                            const serial::ExternalObjects& externals) {
    return serial::decodeRegistered<Kernel>(data, size, device, "kernel", externals);
}

void Kernel::encodeKernelProperties(serial::Writer& w) const {
    w.u32(options);
    w.string(label);
}

void Kernel::decodeKernelProperties(serial::Reader& r) {
    options = r.u32("options");
    label = r.string("label");
}

void CNNKernel::encodeCNNKernelProperties(serial::Writer& w) const {
    encodeKernelProperties(w);
    w.offset(offset);
    w.region(clipRect);
    w.i64(destinationFeatureChannelOffset);
    w.i64(sourceFeatureChannelOffset);
    w.u64(sourceFeatureChannelMaxCount);
    w.u32(static_cast<uint32_t>(edgeMode));
    encodePadding(w, padding, className());
    encodeAllocator(w, destinationImageAllocator, className());
}

void CNNKernel::decodeCNNKernelProperties(serial::Reader& r) {
    decodeKernelProperties(r);
    offset = r.offset("offset");
    clipRect = r.region("clip_rect");
    destinationFeatureChannelOffset = r.i64("destination_feature_channel_offset");
    sourceFeatureChannelOffset = r.i64("source_feature_channel_offset");
    sourceFeatureChannelMaxCount = r.u64("source_feature_channel_max_count");
    edgeMode = decodeEdgeMode(r, "edge_mode");
    padding = decodePadding(r);
    destinationImageAllocator = decodeAllocator(r);
}

void CNNBinaryKernel::encodeBinaryKernelProperties(serial::Writer& w) const {
    encodeKernelProperties(w);
    w.offset(primaryOffset);
    w.offset(secondaryOffset);
    w.region(clipRect);
    w.i64(destinationFeatureChannelOffset);
    w.i64(primarySourceFeatureChannelOffset);
    w.i64(secondarySourceFeatureChannelOffset);
    w.u64(primarySourceFeatureChannelMaxCount);
    w.u64(secondarySourceFeatureChannelMaxCount);
    w.u32(static_cast<uint32_t>(primaryEdgeMode));
    w.u32(static_cast<uint32_t>(secondaryEdgeMode));
    w.i64(primaryStrideInPixelsX);
    w.i64(primaryStrideInPixelsY);
    w.i64(secondaryStrideInPixelsX);
    w.i64(secondaryStrideInPixelsY);
    encodePadding(w, padding, className());
    encodeAllocator(w, destinationImageAllocator, className());
}

void CNNBinaryKernel::decodeBinaryKernelProperties(serial::Reader& r) {
    decodeKernelProperties(r);
    primaryOffset = r.offset("primary_offset");
    secondaryOffset = r.offset("secondary_offset");
    clipRect = r.region("clip_rect");
    destinationFeatureChannelOffset = r.i64("destination_feature_channel_offset");
    primarySourceFeatureChannelOffset = r.i64("primary_source_feature_channel_offset");
    secondarySourceFeatureChannelOffset = r.i64("secondary_source_feature_channel_offset");
    primarySourceFeatureChannelMaxCount = r.u64("primary_source_feature_channel_max_count");
    secondarySourceFeatureChannelMaxCount = r.u64("secondary_source_feature_channel_max_count");
    primaryEdgeMode = decodeEdgeMode(r, "primary_edge_mode");
    secondaryEdgeMode = decodeEdgeMode(r, "secondary_edge_mode");
    primaryStrideInPixelsX = r.i64("primary_stride_in_pixels_x");
    primaryStrideInPixelsY = r.i64("primary_stride_in_pixels_y");
    secondaryStrideInPixelsX = r.i64("secondary_stride_in_pixels_x");
    secondaryStrideInPixelsY = r.i64("secondary_stride_in_pixels_y");
    padding = decodePadding(r);
    destinationImageAllocator = decodeAllocator(r);
}

void CNNGradientKernel::encodeGradientKernelProperties(serial::Writer& w) const {
    encodeBinaryKernelProperties(w);
    w.i64(kernelOffsetX);
    w.i64(kernelOffsetY);
}

void CNNGradientKernel::decodeGradientKernelProperties(serial::Reader& r) {
    decodeBinaryKernelProperties(r);
    kernelOffsetX = r.i64("kernel_offset_x");
    kernelOffsetY = r.i64("kernel_offset_y");
}

// CNNMultiaryKernel (core/multiary.h): the kernel properties, source_count, then per source index
// offset, channel offset and max count, edge mode, kernel size, strides and dilation rates.
void CNNMultiaryKernel::encodeMultiaryKernelProperties(serial::Writer& w) const {
    encodeKernelProperties(w);
    w.u64(sourceCount());
    for (size_t i = 0; i < sourceCount(); ++i) {
        w.offset(offsets_[i]);
        w.i64(channelOffsets_[i]);
        w.u64(channelMaxCounts_[i]);
        w.u32(static_cast<uint32_t>(edgeModes_[i]));
        for (const auto* v : {&kernelWidths_, &kernelHeights_, &strideXs_, &strideYs_, &dilationXs_, &dilationYs_})
            w.i64((*v)[i]);
    }
    w.region(clipRect);
    w.i64(destinationFeatureChannelOffset);
    encodePadding(w, padding, className());
    encodeAllocator(w, destinationImageAllocator, className());
}

void CNNMultiaryKernel::decodeMultiaryKernelProperties(serial::Reader& r) {
    decodeKernelProperties(r);
    const uint64_t count = r.u64("source_count");
    if (count != sourceCount())
        r.fail("source_count", detail::concat("is ", count, " but the kernel was built with ", sourceCount()));
    for (size_t i = 0; i < sourceCount(); ++i) {
        offsets_[i] = r.offset("offset");
        channelOffsets_[i] = r.i64("source_feature_channel_offset");
        if (channelOffsets_[i] < 0 || channelOffsets_[i] % 4 != 0)
            r.fail("source_feature_channel_offset", "must be a non-negative multiple of 4");
        channelMaxCounts_[i] = r.u64("source_feature_channel_max_count");
        edgeModes_[i] = decodeEdgeMode(r, "edge_mode");
        for (auto* v : {&kernelWidths_, &kernelHeights_, &strideXs_, &strideYs_, &dilationXs_, &dilationYs_}) {
            (*v)[i] = r.i64("kernel size, stride or dilation rate");
            if ((*v)[i] < 1) r.fail("kernel size, stride or dilation rate", "must be >= 1");
        }
    }
    clipRect = r.region("clip_rect");
    destinationFeatureChannelOffset = r.i64("destination_feature_channel_offset");
    padding = decodePadding(r);
    destinationImageAllocator = decodeAllocator(r);
}

// ---- State --------------------------------------------------------------------------------------------

void State::encodeWithCoder(serial::Writer& w) const {
    if (dynamic_cast<const NNGradientState*>(this) || dynamic_cast<const NNBinaryGradientState*>(this) ||
        dynamic_cast<const NNMultiaryGradientState*>(this))
        throwTypeError(className(), " is not serializable: a gradient state belongs to one forward pass (it records "
                       "which images that pass read and wrote); read its buffers as arrays instead "
                       "(docs/serialization.md)");
    if (typeid(*this) != typeid(State))
        throwTypeError(className(), " is not serializable (docs/serialization.md lists the serializable classes)");
    w.string(label);
    w.u64(buffers_.size());
    for (const auto& b : buffers_) {
        size_t length = b.buffer ? b.buffer->length() - b.offset : 0;
        w.bytes(b.buffer ? static_cast<const char*>(b.buffer->contents()) + b.offset : nullptr, length);
    }
}

std::vector<uint8_t> State::serialize() const {
    if (temporary_)
        throwValueError("state: a temporary ", className(), " lives only on its command buffer and is not "
                        "serializable; serialize a persistent state");
    // The bytes are a host read of the buffers: not while a pending command buffer writes them.
    for (const auto& b : buffers_)
        if (b.buffer) host_access::checkHostRead(b, b.buffer->length() - b.offset, "to_bytes");
    serial::Writer w;
    encodeWithCoder(w);
    return w.finish(className(), 1);
}

std::shared_ptr<State> State::deserialize(const uint8_t* data, size_t size, const Device& device) {
    return serial::decodeRegistered<State>(data, size, device, "state");
}

std::shared_ptr<State> State::initWithCoder(serial::Reader& r, const Device& device) {
    std::string label = r.string("label");
    uint64_t count = r.u64("resource_count");
    if (count > r.remaining() / 8)  // each resource record is at least its 8-byte size
        r.fail("resource_count", detail::concat(count, " resources cannot fit in ", r.remaining(), " byte(s)"));
    std::vector<std::pair<const uint8_t*, size_t>> contents;
    std::vector<size_t> sizes;
    for (uint64_t i = 0; i < count; ++i) {
        contents.push_back(r.bytes("resource"));
        sizes.push_back(contents.back().second);
    }
    auto state = std::make_shared<State>(device, sizes);
    for (size_t i = 0; i < contents.size(); ++i)
        if (contents[i].second) std::memcpy(state->buffers_[i].buffer->contents(), contents[i].first, contents[i].second);
    state->label = std::move(label);
    return state;
}

// ---- built-in classes -----------------------------------------------------------------------------------

namespace serial {

void registerBuiltinClasses();  // kernels/serialization.cpp

void ensureBuiltinClassesRegistered() {
    static std::once_flag once;
    std::call_once(once, [] {
        Registry<State>::instance().add("State", [](Reader& r, const Device& device, uint32_t) {
            return State::initWithCoder(r, device);
        });
        registerBuiltinClasses();
    });
}

}  // namespace serial
}  // namespace mpsgrad
