#include "aliasing.h"

namespace mpsgrad::python {
namespace {

AliasedStorage arrayStorage(py::handle source, py::handle device, const char* what) {
    py::array array = py::reinterpret_borrow<py::array>(source);
    if (!array.dtype().is(py::dtype::of<float>()))
        throwTypeError(what, ": expected float32 data to alias, got dtype ", std::string(py::str(array.dtype())));
    if (!array.writeable())
        throwValueError(what, ": the array is read-only; the object would write through it (pass a writable copy)");
    if (!(array.flags() & py::array::c_style))
        throwValueError(what, ": the array must be C-contiguous to be aliased (pass numpy.ascontiguousarray(...))");
    const Device resolved = device.is_none() ? Device("cpu") : toDevice(device, "device");
    // The host array's memory is not device memory of a GPU: no MTLBuffer can be made over it here.
    if (resolved.name() != "cpu")
        throwValueError(what, ": a NumPy array is host memory and can be aliased on the cpu device only, not '",
                        resolved.name(), "'; pass a Vector (device memory) instead");
    auto buffer = std::make_shared<PythonOwnedBuffer>(py::reinterpret_borrow<py::object>(array),
                                                      array.mutable_data(), size_t(array.nbytes()));
    return {resolved, BufferSlice{buffer, 0}, size_t(array.size())};
}

}  // namespace

AliasedStorage aliasedStorage(py::handle source, py::handle device, const char* what) {
    if (py::isinstance<Vector>(source)) {
        const Vector& v = source.cast<const Vector&>();
        if (!device.is_none() && toDevice(device, "device") != v.device())
            throwValueError(what, ": the Vector belongs to device '", v.device().name(), "' but device is '",
                            toDevice(device, "device").name(), "'");
        return {v.device(), v.data(), v.descriptor().spanBytes() / sizeof(float)};
    }
    if (py::isinstance<py::array>(source)) return arrayStorage(source, device, what);
    throwTypeError(what, ": expected a Vector or a writable float32 NumPy array to alias, got ", typeName(source));
}

size_t byteOffset(py::handle value, const char* what) { return size_t(toUInt64(value, what, uint64_t(PTRDIFF_MAX))); }

VectorPtr vectorOver(const State& state, const BufferSlice& slice, int64_t count) {
    return std::make_shared<Vector>(state.device(), slice, VectorDescriptor::make(count));
}

}  // namespace mpsgrad::python
