// MPSVectorDescriptor and MPSVector: mpsgrad's plain float vectors (the buffers the optimizers
// update when the parameters are not a convolution's or normalization's state).
//
// A Vector holds `vectors` vectors of `length` float32 elements; vector v starts `vectorBytes`
// bytes after vector v - 1, from `offset` bytes into its buffer. Storage is device memory that the
// host can read (Python: Vector.numpy(), a zero-copy view; read it after the command buffer that
// wrote it completed). Only float32 is supported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "core/device.h"
#include "core/types.h"

namespace mpsgrad {

// MPSVectorDescriptor
struct VectorDescriptor {
    int64_t length = 0;
    int64_t vectors = 1;
    size_t vectorBytes = 0;
    DataType dataType = DataType::Float32;

    // +vectorDescriptorWithLength:dataType:
    static VectorDescriptor make(int64_t length, DataType dataType = DataType::Float32);
    // +vectorDescriptorWithLength:vectors:vectorBytes:dataType:
    static VectorDescriptor make(int64_t length, int64_t vectors, size_t vectorBytes,
                                 DataType dataType = DataType::Float32);
    // +vectorBytesForLength:dataType: (no padding: length * element size)
    static size_t vectorBytesForLength(int64_t length, DataType dataType = DataType::Float32);

    // ValueError unless the sizes are positive, fit int32 element counts, and vectorBytes holds
    // `length` float32 elements at a 4-byte multiple.
    void validate() const;
    // Bytes the vectors span: (vectors - 1) * vectorBytes + length * 4.
    size_t spanBytes() const;
    // Every element back to back: vectorBytes == length * 4 or a single vector.
    bool isDense() const { return vectors == 1 || vectorBytes == size_t(length) * 4; }
};

// MPSVector
class Vector {
public:
    // -initWithDevice:descriptor: (zero-filled)
    Vector(const Device& device, const VectorDescriptor& descriptor);
    // -initWithBuffer:offset:descriptor: (aliases the buffer; ValueError unless it holds the span)
    Vector(const Device& device, BufferSlice buffer, const VectorDescriptor& descriptor);

    const Device& device() const { return device_; }
    const VectorDescriptor& descriptor() const { return descriptor_; }
    int64_t length() const { return descriptor_.length; }
    int64_t vectors() const { return descriptor_.vectors; }
    size_t vectorBytes() const { return descriptor_.vectorBytes; }
    DataType dataType() const { return descriptor_.dataType; }
    size_t offset() const { return data_.offset; }
    // -resourceSize: bytes of the span.
    size_t resourceSize() const { return descriptor_.spanBytes(); }
    // The storage (MPSVector.data at .offset).
    const BufferSlice& data() const { return data_; }
    // Elements a dense vector holds: length * vectors.
    int64_t elementCount() const { return descriptor_.length * descriptor_.vectors; }

private:
    Device device_;
    VectorDescriptor descriptor_;
    BufferSlice data_;
};

using VectorPtr = std::shared_ptr<Vector>;

// The storage `offset` bytes past `base`, for an object that aliases another one's buffer (MPS's
// -initWithBuffer:offset:..., -initWithWeights:weightsOffset:..., -initWithGamma:beta:): ValueError
// naming `offsetName` unless the offset is a multiple of 4, and naming `what` unless the buffer
// holds `bytes` bytes from there. The result shares the buffer: writes through either are seen by both.
BufferSlice aliasSlice(const BufferSlice& base, size_t offset, size_t bytes, const char* what, const char* offsetName);

}  // namespace mpsgrad
