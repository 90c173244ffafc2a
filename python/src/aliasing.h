// Objects over another object's memory, as MPS programs share one MTLBuffer among several objects
// (-[MPSVector initWithBuffer:offset:descriptor:], -[MPSCNNConvolutionWeightsAndBiasesState
// initWithWeights:biases:], -initWithGamma:beta:, -initWithMean:variance: over existing buffers).
// Python has no MTLBuffer: a Vector stands for its storage from its first element, and a writable
// float32 NumPy array for its own memory (host memory, so the cpu device only). docs/porting.md,
// "Objects over another object's buffer".
#pragma once

#include "bindings.h"
#include "core/vector.h"

namespace mpsgrad::python {

// A Buffer over memory owned by a Python object (zero-copy DLPack / NumPy import, aliasing).
class PythonOwnedBuffer final : public Buffer {
public:
    PythonOwnedBuffer(py::object owner, void* data, size_t length)
        : owner_(std::move(owner)), data_(data), length_(length) {}
    void* contents() override { return data_; }
    size_t length() const override { return length_; }

private:
    PythonReference owner_;  // released under the GIL, or leaked at interpreter exit
    void* data_;
    size_t length_;
};

// The memory an aliasing object is built over, and the device it belongs to.
struct AliasedStorage {
    Device device;
    BufferSlice slice;   // from the source's first element
    size_t floats = 0;   // how many float32 elements the source spans from there
};

// `source` (parameter `what`) as storage: a Vector (its device; TypeError-free) or a writable,
// C-contiguous float32 NumPy array (the cpu device). `device` None takes the source's; a device
// that differs is a ValueError naming `what`; anything else a TypeError naming `what`.
AliasedStorage aliasedStorage(py::handle source, py::handle device, const char* what);

// A byte offset argument: a non-negative int (TypeError / ValueError naming `what`).
size_t byteOffset(py::handle value, const char* what);

// A Vector of `count` floats over a state's resource (the state's device): the MPS idiom
// [[MPSVector alloc] initWithBuffer:state.buffer descriptor:...].
VectorPtr vectorOver(const State& state, const BufferSlice& slice, int64_t count);

}  // namespace mpsgrad::python
