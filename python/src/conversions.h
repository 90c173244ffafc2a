// Argument conversion for the bindings: every Python value a public entry point receives goes
// through here, so a wrong type is a TypeError and an out-of-range value a ValueError, both
// naming the parameter and what was expected (never pybind11's RuntimeError "unable to cast").
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/device.h"
#include "core/errors.h"

namespace mpsgrad::python {

namespace py = pybind11;

// A parameter the signature and the stubs show as T (or T1 | T2 ...) but whose value reaches the
// binding unconverted, so that the to*() functions below check it and name the parameter in the
// error. (pybind11's own casters would convert None or 1 to a bool, and fail with a message that
// names no parameter.)
template <typename... T>
using Hinted = py::typing::Union<T...>;

// Every `device` parameter: a Device or a device name ("cpu", "metal"); toDevice checks it.
using DeviceArg = Hinted<Device, py::str>;

inline std::string typeName(py::handle value) {
    return std::string(py::str(py::type::of(value).attr("__qualname__")));
}

// An integer (int, NumPy integer, anything with __index__; not float, not str, not bool).
inline int64_t toInt64(py::handle value, const char* what, int64_t lo = std::numeric_limits<int64_t>::min(),
                       int64_t hi = std::numeric_limits<int64_t>::max()) {
    if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
        throwTypeError(what, ": expected an int, got ", typeName(value));
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!index) throw py::error_already_set();
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow || v < lo || v > hi)
        throwValueError(what, ": ", std::string(py::str(index)), " is out of range [", lo, ", ", hi, "]");
    return v;
}

inline uint64_t toUInt64(py::handle value, const char* what,
                         uint64_t hi = std::numeric_limits<uint64_t>::max()) {
    if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
        throwTypeError(what, ": expected an int, got ", typeName(value));
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!index) throw py::error_already_set();
    if (PyObject_RichCompareBool(index.ptr(), py::int_(0).ptr(), Py_LT) == 1)
        throwValueError(what, ": must be >= 0, got ", std::string(py::str(index)));
    unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
    if (PyErr_Occurred()) {
        PyErr_Clear();
        throwValueError(what, ": ", std::string(py::str(index)), " is out of range [0, ", hi, "]");
    }
    if (v > hi) throwValueError(what, ": ", v, " is out of range [0, ", hi, "]");
    return v;
}

// True or False (also NumPy's bool_); ints and other truthy objects are a TypeError.
inline bool toBool(py::handle value, const char* what) {
    if (PyBool_Check(value.ptr())) return value.ptr() == Py_True;
    py::module_ numpy = py::module_::import("numpy");
    if (py::isinstance(value, numpy.attr("bool_"))) return PyObject_IsTrue(value.ptr()) == 1;
    throwTypeError(what, ": expected a bool, got ", typeName(value));
}

// A real number (int or float, also NumPy scalars; not str, not bool).
inline double toDouble(py::handle value, const char* what) {
    if (PyBool_Check(value.ptr()) || PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) ||
        !(PyFloat_Check(value.ptr()) || PyIndex_Check(value.ptr()) || PyNumber_Check(value.ptr())) ||
        PyComplex_Check(value.ptr()))
        throwTypeError(what, ": expected a float, got ", typeName(value));
    double v = PyFloat_AsDouble(value.ptr());
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throwTypeError(what, ": expected a float, got ", typeName(value));
    }
    return v;
}

// None (the default device), a device name, or a Device.
inline Device toDevice(py::handle value, const char* what = "device") {
    if (value.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(value)) return Device(value.cast<std::string>());
    if (py::isinstance<Device>(value)) return value.cast<Device>();
    throwTypeError(what, ": expected a Device, a device name ('cpu', 'metal') or None, got ", typeName(value));
}

// The conversion of a property setter's value to the member's type T.
template <class T>
T fromPython(py::handle value, const char* what) {
    if constexpr (std::is_same_v<T, bool>) {
        return toBool(value, what);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        return T(toInt64(value, what, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
    } else if constexpr (std::is_integral_v<T>) {
        return T(toUInt64(value, what, std::numeric_limits<T>::max()));
    } else if constexpr (std::is_floating_point_v<T>) {
        return T(toDouble(value, what));
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (!py::isinstance<py::str>(value)) throwTypeError(what, ": expected a str, got ", typeName(value));
        return value.cast<std::string>();
    } else if constexpr (std::is_enum_v<T>) {
        py::handle type = py::detail::get_type_handle(typeid(T), false);
        if (!type || !py::isinstance(value, type))
            throwTypeError(what, ": expected a ", type ? std::string(py::str(type.attr("__name__"))) : py::type_id<T>(),
                           ", got ", typeName(value));
        return value.cast<T>();
    } else {
        try {
            return value.cast<T>();
        } catch (const py::cast_error&) {
            throwTypeError(what, ": expected ", py::type_id<T>(), ", got ", typeName(value));
        }
    }
}

// A Python value taken unconverted (so the conversion above can name the parameter in its error)
// but shown in signatures and stubs with the type it expects: Arg<IntHint> is "typing.SupportsInt".
template <class Hint>
struct Arg {
    py::handle value;
    operator py::handle() const { return value; }  // NOLINT: passes on to the converters
    bool is_none() const { return value.is_none(); }
};
struct IntHint {
    static constexpr auto name = py::detail::const_name("typing.SupportsInt");
};
struct FloatHint {
    static constexpr auto name = py::detail::const_name("typing.SupportsFloat");
};
struct BoolHint {
    static constexpr auto name = py::detail::const_name("bool");
};
struct StrHint {
    static constexpr auto name = py::detail::const_name("str");
};
using IntArg = Arg<IntHint>;

// Hints of the object arguments the kernels' encode methods convert themselves (names as in the
// stubs; the conversions accept exactly these).
#define MPSGRAD_HINT(Name, text)                                  \
    struct Name {                                                 \
        static constexpr auto name = py::detail::const_name(text); \
    }
MPSGRAD_HINT(ImageHint, "Image");
MPSGRAD_HINT(OptionalImageHint, "Image | None");
MPSGRAD_HINT(ImageListHint, "list[Image]");
MPSGRAD_HINT(OptionalImageListHint, "list[Image] | None");
MPSGRAD_HINT(ImageListsHint, "list[list[Image]]");
MPSGRAD_HINT(StateHint, "State");
MPSGRAD_HINT(OptionalStateHint, "State | None");
MPSGRAD_HINT(StateListHint, "list[State]");
MPSGRAD_HINT(OptionalStateListHint, "list[State] | None");
MPSGRAD_HINT(OptionalBoolHint, "bool | None");
MPSGRAD_HINT(OptionalPaddingHint, "NNPadding | None");
MPSGRAD_HINT(OptionalAllocatorHint, "ImageAllocator | None");
MPSGRAD_HINT(OffsetHint, "Offset | tuple[int, int] | tuple[int, int, int]");
MPSGRAD_HINT(RegionHint, "Region | tuple[tuple[int, ...], tuple[int, ...]]");
#undef MPSGRAD_HINT

// The Arg type a setter of a member of type T takes (py::handle, shown as Any, for other types).
template <class T>
struct SetterArg {
    using type = std::conditional_t<
        std::is_same_v<T, bool>, Arg<BoolHint>,
        std::conditional_t<std::is_integral_v<T>, Arg<IntHint>,
                           std::conditional_t<std::is_floating_point_v<T>, Arg<FloatHint>,
                                              std::conditional_t<std::is_same_v<T, std::string>, Arg<StrHint>,
                                                                 py::handle>>>>;
};
template <class Hint>
py::handle handleOf(const Arg<Hint>& a) {
    return a.value;
}
inline py::handle handleOf(py::handle h) { return h; }

// Property accessors for a data member, with a setter that converts through fromPython and so
// names the property in its errors: .def_property("x", getter(&C::x), setter(&C::x, "x")).
template <class C, class T>
auto getter(T C::*member) {
    return [member](const C& self) -> T { return self.*member; };
}
template <class C, class T>
auto setter(T C::*member, const char* name) {
    return [member, name](C& self, typename SetterArg<T>::type value) {
        self.*member = fromPython<T>(handleOf(value), name);
    };
}

}  // namespace mpsgrad::python

namespace pybind11::detail {
template <class Hint>
struct type_caster<mpsgrad::python::Arg<Hint>> {
    PYBIND11_TYPE_CASTER(mpsgrad::python::Arg<Hint>, Hint::name);
    bool load(handle src, bool) {
        value.value = src;
        return true;
    }
    static handle cast(const mpsgrad::python::Arg<Hint>& a, return_value_policy, handle) {
        return a.value.inc_ref();
    }
};
}  // namespace pybind11::detail
