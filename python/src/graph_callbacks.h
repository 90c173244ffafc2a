// The Python side of the graph's per-encode callbacks (MPSNNLossCallback, MPSNNGramMatrixCallback):
// an object with the protocol's method, or any callable, taking (source_image, destination_image)
// and returning a number.
#pragma once

#include <memory>
#include <utility>

#include "bindings.h"
#include "conversions.h"

namespace mpsgrad::python {

// A Python callback held by a C++ callback interface `Base` whose one method returns a float.
class PythonImageCallback {
public:
    PythonImageCallback(py::object object, const char* method)
        : object_(std::make_shared<PythonReference>(std::move(object))), method_(method) {}

    // object.<method>(source, destination), or object(source, destination) for a plain callable.
    float call(const ImagePtr& source, const ImagePtr& destination, const char* what) const {
        py::gil_scoped_acquire gil;
        const py::object& object = object_->object;
        py::object fn = py::hasattr(object, method_) ? object.attr(method_) : object;
        py::object value = fn(source, destination);
        if (!py::isinstance<py::float_>(value) && !py::isinstance<py::int_>(value))
            throwTypeError("property_call_back: must return a float (", what, "), returned ", typeName(value));
        return value.cast<float>();
    }
    py::object object() const { return object_->object; }

    // TypeError unless `object` has `method` or is callable (None is handled by the caller).
    static void check(const py::object& object, const char* method) {
        if (!py::hasattr(object, method) && !PyCallable_Check(object.ptr()))
            throwTypeError("property_call_back: expected None, an object with ", method,
                           "(source_image, destination_image) or a callable (source_image, destination_image) -> "
                           "float, got ", typeName(object));
    }

private:
    std::shared_ptr<PythonReference> object_;
    const char* method_;
};

// The property's getter and setter for a node member `std::shared_ptr<Base>`; `Adapter` derives
// from Base and PythonImageCallback and is constructed from the Python object.
template <class Adapter, class Base>
py::object callbackObject(const std::shared_ptr<Base>& callback) {
    if (auto* python = dynamic_cast<Adapter*>(callback.get())) return python->object();
    return py::none();
}

template <class Adapter, class Base>
std::shared_ptr<Base> toCallback(py::object object, const char* method) {
    if (object.is_none()) return nullptr;
    PythonImageCallback::check(object, method);
    return std::make_shared<Adapter>(std::move(object));
}

}  // namespace mpsgrad::python
