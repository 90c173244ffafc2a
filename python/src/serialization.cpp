// Python side of serialization (docs/serialization.md): to_bytes() / from_bytes() and pickle
// (__reduce_ex__, every protocol 0-5) for the serializable classes, pickling of the value types,
// padding policies, allocators and enums, and a clear TypeError when pickling anything else.
//
// bindSerialization() must run after every other bind function: it walks the module's classes.
#include "bindings.h"
#include "core/padding.h"
#include "core/serialization.h"
#include "kernels/convolution.h"
#include "kernels/neuron.h"

namespace mpsgrad::python {
namespace {

// A read-only view of a bytes-like object (bytes, bytearray, memoryview, NumPy uint8 array...).
class ByteView {
public:
    explicit ByteView(py::handle data) {
        if (data.is_none() || py::isinstance<py::str>(data) || !PyObject_CheckBuffer(data.ptr()))
            throwTypeError("data: expected a bytes-like object (bytes, bytearray, memoryview), got ",
                           std::string(py::repr(py::type::handle_of(data))));
        if (PyObject_GetBuffer(data.ptr(), &view_, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            throwTypeError("data: expected a C-contiguous bytes-like object, got ", std::string(py::repr(py::type::handle_of(data))));
        }
    }
    ~ByteView() { PyBuffer_Release(&view_); }
    ByteView(const ByteView&) = delete;
    ByteView& operator=(const ByteView&) = delete;

    const uint8_t* data() const { return static_cast<const uint8_t*>(view_.buf); }
    size_t size() const { return size_t(view_.len); }

private:
    Py_buffer view_{};
};

py::bytes toBytes(const std::vector<uint8_t>& blob) {
    return py::bytes(reinterpret_cast<const char*>(blob.data()), blob.size());
}

Device deviceArgument(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (py::isinstance<Device>(device)) return device.cast<Device>();
    throwTypeError("device: expected a Device, a device name ('cpu', 'metal') or None, got ",
                   std::string(py::repr(py::type::handle_of(device))));
}

// SerializationError unless `object` is an instance of the class from_bytes was called on.
py::object requireInstance(py::object object, py::handle cls, const char* className) {
    if (!py::isinstance(object, cls))
        throw SerializationError(std::string("data: holds a serialized ") + className + ", not a " +
                                 py::str(cls.attr("__name__")).cast<std::string>());
    return object;
}

// Attaches fn to `cls` as a classmethod named `name`.
void addClassMethod(py::handle cls, const char* name, py::cpp_function fn) {
    py::setattr(cls, name, py::reinterpret_steal<py::object>(PyClassMethod_New(fn.ptr())));
}

// Defines both __reduce_ex__(protocol) and __reduce__() on `cls` with the same result, so pickle
// and anything that looks at either (copy, guards that defer to a class's own __reduce__) agree.
void setReduce(py::handle cls, std::function<py::object(py::object)> reduce, const char* doc = "") {
    py::setattr(cls, "__reduce_ex__", py::cpp_function([reduce](py::object self, int) { return reduce(self); },
                                                       py::name("__reduce_ex__"), py::is_method(cls),
                                                       py::arg("protocol"), doc));
    py::setattr(cls, "__reduce__", py::cpp_function([reduce](py::object self) { return reduce(self); },
                                                    py::name("__reduce__"), py::is_method(cls), doc));
}

// (cls.from_bytes, args): what __reduce_ex__ returns for a bytes-serializable object.
py::tuple reduceThrough(py::handle self, py::tuple args) {
    return py::make_tuple(py::getattr(py::type::handle_of(self), "from_bytes"), std::move(args));
}

bool isCustomPadding(py::handle padding) {
    return !padding.is_none() && !py::isinstance<NNDefaultPadding>(padding);
}

bool isCustomAllocator(py::handle allocator) {
    if (allocator.is_none()) return false;
    auto a = allocator.cast<std::shared_ptr<ImageAllocator>>();
    return a != ImageAllocator::temporaryAllocator() && a != ImageAllocator::persistentAllocator();
}

// ---- kernels ---------------------------------------------------------------------------------------

void bindKernelSerialization(py::module_& m) {
    py::object kernel = m.attr("Kernel");
    py::setattr(kernel, "to_bytes", py::cpp_function(
        [](const Kernel& k) { return toBytes(k.serialize()); }, py::name("to_bytes"), py::is_method(kernel),
        "-encodeWithCoder: the kernel as bytes (constructor arguments, weights included, and every property; "
        "docs/serialization.md). TypeError for a kernel class that is not serializable, ValueError for a custom "
        "padding policy or image allocator (pickle handles those)."));
    addClassMethod(kernel, "from_bytes", py::cpp_function(
        [](py::object cls, py::handle data, const DeviceArg& device, py::object padding, py::object allocator) {
            ByteView bytes(data);
            serial::ExternalObjects externals;
            if (!padding.is_none()) {
                if (!py::isinstance<NNPadding>(padding))
                    throwTypeError("padding: expected an NNPadding or None, got ", std::string(py::repr(py::type::handle_of(padding))));
                externals.padding = padding.cast<std::shared_ptr<NNPadding>>();
            }
            if (!allocator.is_none()) {
                if (!py::isinstance<ImageAllocator>(allocator))
                    throwTypeError("destination_image_allocator: expected an ImageAllocator or None, got ",
                                   std::string(py::repr(py::type::handle_of(allocator))));
                externals.allocator = allocator.cast<std::shared_ptr<ImageAllocator>>();
            }
            auto result = Kernel::deserialize(bytes.data(), bytes.size(), deviceArgument(device), externals);
            py::object object = py::cast(result);
            // The kernel keeps the Python policy objects themselves alive (not only their C++ part),
            // so a Python subclass's overrides keep working: set them through the properties (which
            // own that job) and tie them to this Python object as well.
            if (!padding.is_none()) {
                py::setattr(object, "padding", padding);
                py::detail::keep_alive_impl(object, padding);
            }
            if (!allocator.is_none()) {
                py::setattr(object, "destination_image_allocator", allocator);
                py::detail::keep_alive_impl(object, allocator);
            }
            return requireInstance(object, cls, result->className());
        },
        py::name("from_bytes"), py::arg("cls"), py::arg("data"), py::arg("device") = py::none(), py::arg("padding") = py::none(),
        py::arg("destination_image_allocator") = py::none(),
        "-initWithCoder:device: a kernel from to_bytes() data, rebuilt on `device` (a Device, 'cpu', 'metal' or None "
        "for the default). Called on a subclass, the data must hold that class. `padding` / "
        "`destination_image_allocator` give back a custom policy the data references (pickle passes them). Raises "
        "SerializationError (a ValueError) for malformed data."));
    setReduce(kernel,
        [](py::object self) -> py::object {
            const Kernel& k = self.cast<const Kernel&>();
            py::object padding = py::getattr(self, "padding", py::none());
            py::object allocator = py::getattr(self, "destination_image_allocator", py::none());
            padding = isCustomPadding(padding) ? padding : py::none();
            allocator = isCustomAllocator(allocator) ? allocator : py::none();
            return reduceThrough(self, py::make_tuple(toBytes(k.serialize(true)), k.device().name(), padding, allocator));
        },
        "Pickle support (every protocol): the to_bytes() data plus any custom padding policy or image allocator, "
        "which Python pickles itself.");
}

// ---- states ----------------------------------------------------------------------------------------

void bindStateSerialization(py::module_& m) {
    py::object state = m.attr("State");
    py::setattr(state, "to_bytes", py::cpp_function(
        [](const State& s) { return toBytes(s.serialize()); }, py::name("to_bytes"), py::is_method(state),
        "The state as bytes: persistent State (label, buffers) and CNNConvolutionWeightsAndBiasesState (label, "
        "descriptor, weights, biases). ValueError for a temporary state, TypeError for gradient states."));
    addClassMethod(state, "from_bytes", py::cpp_function(
        [](py::object cls, py::handle data, const DeviceArg& device) {
            ByteView bytes(data);
            auto result = State::deserialize(bytes.data(), bytes.size(), deviceArgument(device));
            return requireInstance(py::cast(result), cls, result->className());
        },
        py::name("from_bytes"), py::arg("cls"), py::arg("data"), py::arg("device") = py::none(),
        "A persistent state from to_bytes() data, on `device`. SerializationError (a ValueError) for malformed data."));
    setReduce(state, [](py::object self) -> py::object {
        const State& s = self.cast<const State&>();
        return reduceThrough(self, py::make_tuple(toBytes(s.serialize()), s.device().name()));
    }, "Pickle support (every protocol).");
}

// ---- descriptors and data sources (device independent) -------------------------------------------

template <class T, class Deserialize>
void bindValueSerialization(py::module_& m, const char* name, Deserialize deserialize) {
    py::object cls = m.attr(name);
    py::setattr(cls, "to_bytes", py::cpp_function([](const T& value) { return toBytes(value.serialize()); },
                                                  py::name("to_bytes"), py::is_method(cls),
                                                  "The object as bytes (docs/serialization.md)."));
    addClassMethod(cls, "from_bytes", py::cpp_function(
        [deserialize](py::object, py::handle data) {
            ByteView bytes(data);
            return py::cast(deserialize(bytes.data(), bytes.size()));
        },
        py::name("from_bytes"), py::arg("cls"), py::arg("data"),
        "The object from to_bytes() data. SerializationError (a ValueError) for malformed data."));
    setReduce(cls, [](py::object self) -> py::object {
        return reduceThrough(self, py::make_tuple(toBytes(self.cast<const T&>().serialize())));
    }, "Pickle support (every protocol).");
}

// ---- value types, policies, enums, and everything else ------------------------------------------

void bindPickleOfValues(py::module_& m) {
    py::object offset = m.attr("Offset");
    setReduce(offset, [offset](py::object self) -> py::object {
        const Offset& o = self.cast<const Offset&>();
        return py::make_tuple(offset, py::make_tuple(o.x, o.y, o.z));
    });
    py::object region = m.attr("Region");
    addClassMethod(region, "_from_fields", py::cpp_function(
        [](py::object, int64_t x, int64_t y, int64_t z, uint64_t w, uint64_t h, uint64_t d) {
            return Region{{x, y, z}, {w, h, d}};
        },
        py::name("_from_fields"), py::arg("cls"), py::arg("x"), py::arg("y"), py::arg("z"), py::arg("width"),
        py::arg("height"), py::arg("depth"), "Unpickling helper: a Region from its six fields (sizes up to 2**64 - 1)."));
    setReduce(region, [](py::object self) -> py::object {
        const Region& r = self.cast<const Region&>();
        return py::make_tuple(py::getattr(py::type::handle_of(self), "_from_fields"),
                              py::make_tuple(r.origin.x, r.origin.y, r.origin.z, r.size.width, r.size.height,
                                             r.size.depth));
    });
    py::object device = m.attr("Device");
    setReduce(device, [device](py::object self) -> py::object {
        return py::make_tuple(device, py::make_tuple(self.cast<const Device&>().name()));
    });

    py::object defaultPadding = m.attr("NNDefaultPadding");
    setReduce(defaultPadding, [defaultPadding](py::object self) -> py::object {
        return py::make_tuple(defaultPadding, py::make_tuple(self.cast<const NNDefaultPadding&>().paddingMethod()));
    });
    // A Python subclass of NNPadding / ImageAllocator is rebuilt by calling its class without
    // arguments and restoring its __dict__ (a subclass needing arguments defines __reduce__).
    py::object allocatorClass = m.attr("ImageAllocator");
    addClassMethod(allocatorClass, "_builtin", py::cpp_function(
        [](py::object, const std::string& which) {
            if (which == "temporary") return ImageAllocator::temporaryAllocator();
            if (which == "persistent") return ImageAllocator::persistentAllocator();
            throwValueError("which: expected 'temporary' or 'persistent', got '", which, "'");
        },
        py::name("_builtin"), py::arg("cls"), py::arg("which"), "Unpickling helper: a built-in allocator by name."));
    for (const char* name : {"NNPadding", "ImageAllocator"}) {
        py::object base = m.attr(name);
        setReduce(base,
            [](py::object self) -> py::object {
                if (py::isinstance<ImageAllocator>(self)) {
                    auto a = self.cast<std::shared_ptr<ImageAllocator>>();
                    py::object builtin = py::module_::import("mpsgrad._mpsgrad").attr("ImageAllocator").attr("_builtin");
                    if (a == ImageAllocator::temporaryAllocator()) return py::make_tuple(builtin, py::make_tuple("temporary"));
                    if (a == ImageAllocator::persistentAllocator()) return py::make_tuple(builtin, py::make_tuple("persistent"));
                }
                py::object state = py::getattr(self, "__dict__", py::none());
                return py::make_tuple(py::type::handle_of(self), py::tuple(), state);
            },
            "Pickle support: the built-in objects by name; a Python subclass as cls() plus its __dict__.");
    }
}

// Enums pickle as cls(int(value)); every other class of the module that still has object's
// __reduce_ex__ raises a TypeError that says what to do instead (protocols 0 and 1 used to
// abort the process through copyreg).
void bindPickleOfEverythingElse(py::module_& m) {
    py::object objectReduce = py::module_::import("builtins").attr("object").attr("__reduce_ex__");
    py::dict names = m.attr("__dict__");
    for (auto [key, value] : names) {
        if (!PyType_Check(value.ptr())) continue;
        py::object cls = py::reinterpret_borrow<py::object>(value);
        if (py::str(cls.attr("__module__")).cast<std::string>() != "mpsgrad._mpsgrad") continue;
        if (py::hasattr(cls, "__members__")) {
            setReduce(cls, [cls](py::object self) -> py::object {
                return py::make_tuple(cls, py::make_tuple(py::int_(self)));
            });
            continue;
        }
        if (!py::hasattr(cls, "__reduce_ex__") || !py::object(cls.attr("__reduce_ex__")).is(objectReduce)) continue;
        std::string qualified = "mpsgrad." + py::str(cls.attr("__name__")).cast<std::string>();
        if (!PyObject_IsSubclass(cls.ptr(), PyExc_BaseException))
            setReduce(cls, [qualified](py::object) -> py::object {
                throwTypeError("cannot pickle '", qualified, "' object: only kernels, descriptors, data sources "
                               "holding data, persistent states, value types and enums are serializable "
                               "(docs/serialization.md); images: save to_numpy() instead");
            });
    }
}

}  // namespace

void bindSerialization(py::module_& m) {
    py::register_exception<SerializationError>(m, "SerializationError", PyExc_ValueError);
    bindKernelSerialization(m);
    bindStateSerialization(m);
    bindValueSerialization<ImageDescriptor>(m, "ImageDescriptor", &ImageDescriptor::deserialize);
    bindValueSerialization<NNNeuronDescriptor>(m, "NNNeuronDescriptor", &NNNeuronDescriptor::deserialize);
    bindValueSerialization<CNNConvolutionDescriptor>(m, "CNNConvolutionDescriptor",
                                                     &CNNConvolutionDescriptor::deserialize);
    // A sub-pixel descriptor decodes as its own class (the payload's class version 2).
    addClassMethod(m.attr("CNNConvolutionDescriptor"), "from_bytes", py::cpp_function(
        [](py::object, py::handle data) {
            ByteView bytes(data);
            return convolutionDescriptorObject(CNNConvolutionDescriptor::deserialize(bytes.data(), bytes.size()));
        },
        py::name("from_bytes"), py::arg("cls"), py::arg("data"),
        "The object from to_bytes() data. SerializationError (a ValueError) for malformed data."));
    bindValueSerialization<CNNConvolutionWeightsDataSource>(m, "CNNConvolutionWeightsDataSource",
                                                            &CNNConvolutionWeightsDataSource::deserialize);
    bindPickleOfValues(m);
    bindPickleOfEverythingElse(m);
}

}  // namespace mpsgrad::python
