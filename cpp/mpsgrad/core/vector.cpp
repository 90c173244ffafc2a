#include "core/vector.h"

#include <cstdint>

#include "core/errors.h"

namespace mpsgrad {

VectorDescriptor VectorDescriptor::make(int64_t length, DataType dataType) {
    if (length < 0) throwValueError("length: must be >= 0, got ", length);
    return make(length, 1, vectorBytesForLength(length, dataType), dataType);
}

VectorDescriptor VectorDescriptor::make(int64_t length, int64_t vectors, size_t vectorBytes, DataType dataType) {
    VectorDescriptor d;
    d.length = length;
    d.vectors = vectors;
    d.vectorBytes = vectorBytes;
    d.dataType = dataType;
    d.validate();
    return d;
}

size_t VectorDescriptor::vectorBytesForLength(int64_t length, DataType dataType) {
    if (dataType != DataType::Float32) throwValueError("data_type: only DataType.FLOAT32 vectors are supported");
    if (length < 0 || length > INT32_MAX) throwValueError("length: must be in [0, 2^31 - 1], got ", length);
    return size_t(length) * sizeof(float);
}

void VectorDescriptor::validate() const {
    if (dataType != DataType::Float32) throwValueError("data_type: only DataType.FLOAT32 vectors are supported");
    if (length < 1 || length > INT32_MAX) throwValueError("length: must be in [1, 2^31 - 1], got ", length);
    if (vectors < 1 || vectors > INT32_MAX) throwValueError("vectors: must be in [1, 2^31 - 1], got ", vectors);
    if (vectorBytes % sizeof(float) != 0 || vectorBytes < size_t(length) * sizeof(float))
        throwValueError("vector_bytes: must be a multiple of 4 and at least length * 4 = ", length * 4, ", got ",
                        vectorBytes);
    // The span in floats must fit the backends' 32-bit element indices.
    const uint64_t spanFloats = (uint64_t(vectors) - 1) * (vectorBytes / sizeof(float)) + uint64_t(length);
    if (vectors > 1 && vectorBytes / sizeof(float) > uint64_t(INT32_MAX) / uint64_t(vectors - 1))
        throwValueError("vectors: ", vectors, " vectors of ", vectorBytes, " bytes exceed 2^31 - 1 floats");
    if (spanFloats > uint64_t(INT32_MAX))
        throwValueError("vectors: ", vectors, " vectors of ", vectorBytes, " bytes exceed 2^31 - 1 floats");
}

size_t VectorDescriptor::spanBytes() const { return size_t(vectors - 1) * vectorBytes + size_t(length) * sizeof(float); }

Vector::Vector(const Device& device, const VectorDescriptor& descriptor) : device_(device), descriptor_(descriptor) {
    descriptor_.validate();
    data_ = BufferSlice{device_.backend().newBuffer(descriptor_.spanBytes()), 0};
}

Vector::Vector(const Device& device, BufferSlice buffer, const VectorDescriptor& descriptor)
    : device_(device), descriptor_(descriptor) {
    descriptor_.validate();
    data_ = aliasSlice(buffer, 0, descriptor_.spanBytes(), "buffer", "offset");
}

BufferSlice aliasSlice(const BufferSlice& base, size_t offset, size_t bytes, const char* what, const char* offsetName) {
    if (!base) throwValueError(what, ": missing buffer");
    // The backends bind float32 elements: a misaligned start would split every element.
    if (offset % sizeof(float) != 0 || base.offset % sizeof(float) != 0)
        throwValueError(offsetName, ": must be a multiple of 4 bytes, got ", offset, " (the buffer's own offset is ",
                        base.offset, ")");
    const size_t length = base.buffer->length();
    // Compared without adding offsets, so a huge offset cannot wrap around.
    if (base.offset > length || offset > length - base.offset || bytes > length - base.offset - offset)
        throwValueError(what, ": the buffer holds ", length, " bytes, too few for ", bytes, " bytes at ", offsetName,
                        " ", offset, " (", base.offset, " + ", offset, " bytes into it)");
    return base.advancedBy(offset);
}

}  // namespace mpsgrad
