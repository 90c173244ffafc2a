// Bindings of the core object model: enums, Device, CommandQueue, CommandBuffer, images,
// states (MPSCore / Metal semantics).
#include <cstring>
#include <mutex>

#include "aliasing.h"
#include "bindings.h"
#include "core/batch_helpers.h"
#include "core/host_access.h"

namespace mpsgrad::python {

// ---- helpers shared with the other binding files ---------------------------------------------

py::array floatView(const BufferSlice& slice, std::vector<py::ssize_t> shape, std::vector<py::ssize_t> strides) {
    if (strides.empty()) {
        strides.resize(shape.size());
        py::ssize_t s = 1;
        for (size_t i = shape.size(); i-- > 0;) {
            strides[i] = s;
            s *= shape[i];
        }
    }
    // Every host view of a state's (or data source's) buffer comes through here: refuse it while a
    // pending command buffer writes the buffer, or once a temporary state's command buffer completed.
    if (slice.buffer)
        host_access::checkHostRead(slice, slice.buffer->length() - slice.offset, "host view of a state buffer");
    for (auto& s : strides) s *= py::ssize_t(sizeof(float));
    auto keepAlive = new std::shared_ptr<Buffer>(slice.buffer);
    py::capsule owner(keepAlive, [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); });
    return py::array(py::dtype::of<float>(), shape, strides, slice.floats(), owner);
}

// ---- interpreter lifetime -------------------------------------------------------------------

bool pythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return !Py_IsInitialized() || Py_IsFinalizing();
#else
    return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

PythonReference::~PythonReference() {
    if (!object) return;
    if (pythonFinalizing()) {
        object.release();  // leaked: the interpreter is going away and no thread may take the GIL
        return;
    }
    py::gil_scoped_acquire gil;
    object = py::object();
}

namespace {
std::mutex committedMutex;
std::vector<std::weak_ptr<CommandBuffer>> committedBuffers;
}  // namespace

void noteCommitted(const std::shared_ptr<CommandBuffer>& cb) {
    std::lock_guard<std::mutex> lock(committedMutex);
    // Forget buffers that are gone or done, so the list stays as short as the work in flight.
    std::vector<std::weak_ptr<CommandBuffer>> live;
    for (auto& weak : committedBuffers)
        if (auto b = weak.lock())
            if (b->status() == CommandBufferStatus::Committed) live.push_back(weak);
    live.push_back(cb);
    committedBuffers.swap(live);
}

void drainCommitted() {
    std::vector<std::weak_ptr<CommandBuffer>> pending;
    {
        std::lock_guard<std::mutex> lock(committedMutex);
        pending.swap(committedBuffers);
    }
    py::gil_scoped_release release;  // completed handlers need the GIL while we wait
    for (size_t i = 0; i < pending.size(); ++i)
        if (auto b = pending[i].lock()) {
            try {
                b->waitUntilCompleted();
            } catch (const CommandBufferError& e) {
                // Only a wait that could never return raises here: mpsgrad.synchronize() from a
                // completed handler or host callback of a pending buffer (or of an earlier buffer
                // of its queue). Raise instead of hanging, and keep the buffers not waited for.
                std::lock_guard<std::mutex> lock(committedMutex);
                committedBuffers.insert(committedBuffers.begin(), pending.begin() + i, pending.end());
                throw CommandBufferError(std::string("synchronize: ") + e.what());
            }
        }
}

Offset toOffset(py::handle value, const char* what) {
    if (py::isinstance<Offset>(value)) return value.cast<Offset>();
    if (py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value)) {
        auto seq = value.cast<py::sequence>();
        if (seq.size() == 2 || seq.size() == 3) {
            Offset o;
            o.x = toInt64(seq[0], what);
            o.y = toInt64(seq[1], what);
            o.z = seq.size() == 3 ? toInt64(seq[2], what) : 0;
            return o;
        }
    }
    throwTypeError(what, ": expected an Offset or a tuple (x, y[, z]), got ", std::string(py::repr(value)));
}

Region toRegion(py::handle value, const char* what) {
    if (py::isinstance<Region>(value)) return value.cast<Region>();
    if (py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value)) {
        auto seq = value.cast<py::sequence>();
        auto isPair = [](py::handle v) {
            return py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v) &&
                   (py::len(v) == 2 || py::len(v) == 3);
        };
        if (seq.size() == 2 && isPair(seq[0]) && isPair(seq[1])) {
            auto origin = seq[0].cast<py::sequence>();
            auto size = seq[1].cast<py::sequence>();
            Region r;
            r.origin = Origin{toInt64(origin[0], what), toInt64(origin[1], what),
                              origin.size() == 3 ? toInt64(origin[2], what) : 0};
            // Sizes are unsigned (MTLSize), so RECT_NO_CLIP's 2**64 - 1 is expressible.
            r.size = Size3{toUInt64(size[0], what), toUInt64(size[1], what),
                           size.size() == 3 ? toUInt64(size[2], what) : 1};
            return r;
        }
    }
    throwTypeError(what, ": expected a Region or ((x, y[, z]), (width, height[, depth])), got ",
                   std::string(py::repr(value)));
}

ImageBatch toImageBatch(py::handle value, const char* what) {
    ImageBatch batch;
    if (value.is_none()) return batch;
    if (!py::isinstance<py::sequence>(value) || py::isinstance<Image>(value))
        throwTypeError(what, ": expected a list of Image, got ", std::string(py::repr(py::type::of(value))));
    for (auto item : value) {
        if (!py::isinstance<Image>(item))
            throwTypeError(what, ": expected a list of Image, found ", std::string(py::repr(py::type::of(item))));
        batch.push_back(item.cast<ImagePtr>());
    }
    return batch;
}

StateBatch toStateBatch(py::handle value, const char* what) {
    StateBatch batch;
    if (value.is_none()) return batch;
    if (!py::isinstance<py::sequence>(value) || py::isinstance<State>(value))
        throwTypeError(what, ": expected a list of State, got ", std::string(py::repr(py::type::of(value))));
    for (auto item : value) {
        if (!py::isinstance<State>(item))
            throwTypeError(what, ": expected a list of State, found ", std::string(py::repr(py::type::of(item))));
        batch.push_back(item.cast<StatePtr>());
    }
    return batch;
}

py::array_t<float, py::array::c_style | py::array::forcecast> floatArrayOfShape(py::handle data,
                                                                                const std::vector<py::ssize_t>& shape,
                                                                                const char* what) {
    using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    auto describe = [](const std::vector<py::ssize_t>& s) {
        std::string out = "(";
        for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
        return out + (s.size() == 1 ? ",)" : ")");
    };
    if (py::isinstance<py::bytes>(data) || py::isinstance<py::bytearray>(data) || py::isinstance<py::memoryview>(data)) {
        py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
        py::ssize_t expected = 1;
        for (auto s : shape) expected *= s;
        py::ssize_t bytes = info.size * info.itemsize;
        if (bytes != expected * py::ssize_t(sizeof(float)))
            throwValueError(what, ": expected ", expected * sizeof(float), " bytes (float32 ", describe(shape),
                            "), got ", bytes);
        Array array(shape);
        std::memcpy(array.mutable_data(), info.ptr, size_t(bytes));
        return array;
    }
    Array array;
    try {
        array = Array::ensure(data);
    } catch (...) {
    }
    if (!array) throwTypeError(what, ": expected a float32 array-like or bytes, got ", std::string(py::repr(py::type::of(data))));
    std::vector<py::ssize_t> got(array.shape(), array.shape() + array.ndim());
    if (got != shape)
        throwValueError(what, ": expected shape ", describe(shape), ", got ", describe(got));
    return array;
}

namespace {

// Runs a Python completed handler on the worker thread under the GIL, and releases the
// Python callable under the GIL too.
using PythonCallback = PythonReference;

// The array shape of `channels` channels of one image in `layout`: (H, W, C) or (C, H, W).
std::vector<py::ssize_t> readWriteShape(const Image& image, int64_t channels, DataLayout layout) {
    if (layout == DataLayout::HeightxWidthxFeatureChannels)
        return {py::ssize_t(image.height()), py::ssize_t(image.width()), py::ssize_t(channels)};
    return {py::ssize_t(channels), py::ssize_t(image.height()), py::ssize_t(image.width())};
}

// number_of_feature_channels: None means "all after the offset"; a number must be >= 1.
int64_t channelCountArgument(const py::object& channelCount) {
    if (channelCount.is_none()) return -1;
    int64_t n = toInt64(channelCount, "number_of_feature_channels");
    if (n < 1) throwValueError("number_of_feature_channels: must be >= 1 (or None for all), got ", n);
    return n;
}

// ---- image data in and out (docs/storage_formats.md) -------------------------------------------
// Arrays of the storage's own dtype (float32, float16, uint8 for UNORM8, uint16 for UNORM16) are
// copied as they are; floating-point arrays of another dtype are float32 values that the storage
// rounds (FLOAT16) or normalizes (UNORM: clamp to [0, 1], round); raw bytes are float32.

// The NumPy dtype of a format's stored elements.
py::dtype storageDtype(ImageFeatureChannelFormat format) {
    switch (format) {
        case ImageFeatureChannelFormat::Float16: return py::dtype("float16");
        case ImageFeatureChannelFormat::Unorm8: return py::dtype("uint8");
        case ImageFeatureChannelFormat::Unorm16: return py::dtype("uint16");
        default: return py::dtype::of<float>();
    }
}

bool isUnormFormat(ImageFeatureChannelFormat f) {
    return f == ImageFeatureChannelFormat::Unorm8 || f == ImageFeatureChannelFormat::Unorm16;
}

bool isBytesLike(py::handle data) {
    return py::isinstance<py::bytes>(data) || py::isinstance<py::bytearray>(data) || py::isinstance<py::memoryview>(data);
}

// `data` as a NumPy array (lists and other array-likes converted by NumPy), or a TypeError.
py::array asArray(py::handle data, const char* what) {
    try {
        return py::module_::import("numpy").attr("asarray")(data);
    } catch (py::error_already_set&) {
        throwTypeError(what, ": expected an array-like, got ", std::string(py::repr(py::type::of(data))));
    }
}

// Throws TypeError when an array of `dtype` cannot be written into storage of `format` without
// guessing: integer codes of a unorm dtype into float storage (0..255 would become floats, not
// 0..1), or anything but the storage's dtype and floating-point values into UNORM storage.
void checkDtypeFits(const py::dtype& dtype, ImageFeatureChannelFormat format, const char* what) {
    if (dtype.is(storageDtype(format)) || dtype.kind() == 'f') return;
    const std::string name = featureChannelFormatName(format), got = std::string(py::str(dtype));
    const bool unormCodes = dtype.is(py::dtype("uint8")) || dtype.is(py::dtype("uint16"));
    if (!isUnormFormat(format)) {
        if (!unormCodes) return;  // other numbers (int64 from a list of ints, bool) are their values
        const bool eight = dtype.is(py::dtype("uint8"));
        throwTypeError(what, ": a ", got, " array cannot be written into a ", name, " image (its codes 0..",
                       eight ? "255" : "65535", " would be stored as float values); write data / ",
                       eight ? "255" : "65535", " for normalized values, or use a ", eight ? "UNORM8" : "UNORM16",
                       " image (channel_format=ImageFeatureChannelFormat.", eight ? "UNORM8" : "UNORM16", ")");
    }
    throwTypeError(what, ": a ", got, " array cannot be written into a ", name, " image, which takes ",
                   std::string(py::str(storageDtype(format))), " arrays (stored as they are) or floating-point "
                   "arrays (normalized values: clamped to [0, 1] and rounded to the nearest code)");
}

py::array readImage(const Image& image, DataLayout layout, int64_t imageIndex, int64_t channelOffset,
                    py::object channelCount) {
    host_access::checkHostRead(image, "read_bytes");
    ImageReadWriteParams params{channelOffset, channelCountArgument(channelCount)};
    int64_t channels = image.channelsForReadWrite(params);
    py::array out(storageDtype(image.featureChannelFormat()), readWriteShape(image, channels, layout));
    image.readElements(out.mutable_data(), layout, imageIndex, params);
    return out;
}

py::array imageToNumpy(const Image& image) {
    host_access::checkHostRead(image, "to_numpy");
    py::array out(storageDtype(image.featureChannelFormat()),
                  std::vector<py::ssize_t>{py::ssize_t(image.numberOfImages()), py::ssize_t(image.height()),
                                           py::ssize_t(image.width()), py::ssize_t(image.featureChannels())});
    const size_t per = size_t(image.height() * image.width() * image.featureChannels()) * image.bytesPerElement();
    for (int64_t n = 0; n < image.numberOfImages(); ++n)
        image.readElements(static_cast<char*>(out.mutable_data()) + n * per, DataLayout::HeightxWidthxFeatureChannels, n);
    return out;
}

// `array` C-contiguous in its own dtype, with exactly `shape` (ValueError naming `what` otherwise).
py::array contiguousOfShape(const py::array& array, const std::vector<py::ssize_t>& shape, const char* what) {
    std::vector<py::ssize_t> got(array.shape(), array.shape() + array.ndim());
    if (got != shape) floatArrayOfShape(array, shape, what);  // raises its shape error
    return py::module_::import("numpy").attr("ascontiguousarray")(array);
}

void writeImage(Image& image, py::handle data, DataLayout layout, int64_t imageIndex, int64_t channelOffset,
                py::object channelCount) {
    ImageReadWriteParams params{channelOffset, channelCountArgument(channelCount)};
    int64_t channels = image.channelsForReadWrite(params);
    std::vector<py::ssize_t> shape = readWriteShape(image, channels, layout);
    if (!isBytesLike(data)) {
        py::array array = asArray(data, "data");
        checkDtypeFits(array.dtype(), image.featureChannelFormat(), "data");
        if (array.dtype().is(storageDtype(image.featureChannelFormat()))) {  // stored as it is
            py::array elements = contiguousOfShape(array, shape, "data");
            image.writeElements(elements.data(), layout, imageIndex, params);
            return;
        }
    }
    auto array = floatArrayOfShape(data, shape, "data");
    image.writeBytes(array.data(), layout, imageIndex, params);
}

Device deviceOr(const DeviceArg& device) { return toDevice(device, "device"); }

// The buffer sizes of a StateResourceList argument (MPSStateResourceList, core/batch_helpers.h).
std::vector<size_t> resourceListSizes(py::handle resourceList) {
    if (!py::isinstance<StateResourceList>(resourceList))
        throwTypeError("resource_list: expected a StateResourceList, got ", typeName(resourceList));
    return resourceList.cast<const StateResourceList&>().bufferSizes();
}

// (H, W, C) or (N, H, W, C) array -> its 4-D (N, H, W, C) form (N = 1 for 3-D input), in its own dtype.
py::array asNHWC(py::handle data, const char* what) {
    py::array array = asArray(data, what);
    if (array.ndim() == 3) array = array.reshape({py::ssize_t(1), array.shape(0), array.shape(1), array.shape(2)});
    if (array.ndim() != 4)
        throwValueError(what, ": expected an array of shape (height, width, channels) or (n, height, width, channels), "
                              "got ", array.ndim(), " dimension(s)");
    for (int i = 0; i < 4; ++i)
        if (array.shape(i) < 1) throwValueError(what, ": every dimension must be >= 1");
    return array;
}

// channel_format: None takes the array's dtype (float16 -> FLOAT16, uint8 -> UNORM8, uint16 ->
// UNORM16, anything else FLOAT32).
ImageFeatureChannelFormat formatFor(const py::array& array, const py::object& channelFormat) {
    if (!channelFormat.is_none()) {
        auto format = fromPython<ImageFeatureChannelFormat>(channelFormat, "channel_format");
        if (ImageDescriptor::make(format, 1, 1, 1).bytesPerElement() == 0)
            throwValueError("channel_format: expected ImageFeatureChannelFormat.FLOAT32, FLOAT16, UNORM8 or UNORM16, "
                            "got ", featureChannelFormatName(format));
        return format;
    }
    for (auto format : {ImageFeatureChannelFormat::Float16, ImageFeatureChannelFormat::Unorm8,
                        ImageFeatureChannelFormat::Unorm16})
        if (array.dtype().is(storageDtype(format))) return format;
    return ImageFeatureChannelFormat::Float32;
}

// Writes image n of the (N, H, W, C) `array` into images[n] (image index imageIndex(n)): as stored
// elements when the dtype is the storage's, else as float32 values.
template <class ImageOf>
void writeNHWC(const py::array& array, ImageFeatureChannelFormat format, ImageOf imageOf) {
    checkDtypeFits(array.dtype(), format, "array");
    const int64_t count = array.shape(0), per = array.shape(1) * array.shape(2) * array.shape(3);
    if (array.dtype().is(storageDtype(format))) {
        py::array elements = py::module_::import("numpy").attr("ascontiguousarray")(array);
        const auto* base = static_cast<const char*>(elements.data());
        for (int64_t n = 0; n < count; ++n) {
            auto [image, index] = imageOf(n);
            image->writeElements(base + n * per * elements.itemsize(), DataLayout::HeightxWidthxFeatureChannels, index);
        }
        return;
    }
    auto floats = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
    if (!floats) throwTypeError("array: expected numbers, got an array of ", std::string(py::str(array.dtype())));
    for (int64_t n = 0; n < count; ++n) {
        auto [image, index] = imageOf(n);
        image->writeBytes(floats.data() + n * per, DataLayout::HeightxWidthxFeatureChannels, index);
    }
}

ImagePtr imageFromNumpy(py::handle data, const DeviceArg& device, const py::object& channelFormat) {
    py::array array = asNHWC(data, "array");
    const ImageFeatureChannelFormat format = formatFor(array, channelFormat);
    checkDtypeFits(array.dtype(), format, "array");  // before allocating
    auto d = ImageDescriptor::make(format, array.shape(2), array.shape(1), array.shape(3), array.shape(0));
    auto image = std::make_shared<Image>(deviceOr(device), d);
    writeNHWC(array, format, [&](int64_t n) { return std::make_pair(image, n); });
    return image;
}

ImageBatch batchFromNumpy(py::handle data, const DeviceArg& device, const py::object& channelFormat) {
    py::array array = asNHWC(data, "array");
    const ImageFeatureChannelFormat format = formatFor(array, channelFormat);
    checkDtypeFits(array.dtype(), format, "array");
    auto d = ImageDescriptor::make(format, array.shape(2), array.shape(1), array.shape(3));
    auto batch = Image::makeBatch(deviceOr(device), d, size_t(array.shape(0)));
    writeNHWC(array, format, [&](int64_t n) { return std::make_pair(batch[size_t(n)], int64_t(0)); });
    return batch;
}

// Zero-copy view of all images: (N, H, W, C) with the padded pixel stride, in the storage's dtype
// (float32, float16, uint8 or uint16).
py::array numpyView(const Image& image) {
    host_access::checkHostRead(image, "DLPack export");  // __dlpack__ goes through this view
    BufferSlice base = image.storage(0);
    ImageLayout l = image.storageLayout(0, image.featureChannels());
    const py::ssize_t element = py::ssize_t(image.bytesPerElement());
    base = base.advancedBy(size_t(l.channelOffset) * size_t(element));
    std::vector<py::ssize_t> shape{py::ssize_t(image.numberOfImages()), py::ssize_t(image.height()),
                                   py::ssize_t(image.width()), py::ssize_t(image.featureChannels())};
    std::vector<py::ssize_t> strides{py::ssize_t(image.imageStride()), py::ssize_t(image.width() * image.pixelStride()),
                                     py::ssize_t(image.pixelStride()), 1};
    if (image.isFloat32()) return floatView(base, shape, strides);
    for (auto& s : strides) s *= element;
    auto keepAlive = new std::shared_ptr<Buffer>(base.buffer);
    py::capsule owner(keepAlive, [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); });
    return py::array(storageDtype(image.featureChannelFormat()), shape, strides, static_cast<const void*>(base.floats()),
                     owner);
}

// Wraps a C-contiguous (N, H, W, C) CPU array of a storage dtype (float32, float16, uint8, uint16)
// without copying when C is a multiple of 4 (the image layout's pixel stride); otherwise copies.
ImagePtr imageFromArrayZeroCopy(py::array array, const DeviceArg& device) {
    Device dev = deviceOr(device);
    const ImageFeatureChannelFormat format = formatFor(array, py::none());
    const bool storable = array.dtype().is(storageDtype(format));
    if (dev.name() == "cpu" && storable && (array.flags() & py::array::c_style) && array.ndim() == 4 &&
        array.shape(3) % 4 == 0 && array.writeable()) {
        auto d = ImageDescriptor::make(format, array.shape(2), array.shape(1), array.shape(3), array.shape(0));
        size_t bytes = size_t(array.nbytes());
        auto buffer = std::make_shared<PythonOwnedBuffer>(array, array.mutable_data(), bytes);
        return Image::wrap(dev, d, BufferSlice{buffer, 0}, array.shape(3));
    }
    return imageFromNumpy(array, device, py::none());
}

}  // namespace

void bindCore(py::module_& m) {
    m.def("_is_initialized", [](py::handle object) {
        // False for an instance made by Cls.__new__(Cls) whose __init__ has not run (its C++ object
        // does not exist yet); used by the package's __new__ guard.
        if (py::detail::all_type_info(Py_TYPE(object.ptr())).empty())
            throwTypeError("object: expected an mpsgrad object, got ", typeName(object));
        auto* instance = reinterpret_cast<py::detail::instance*>(object.ptr());
        for (auto vh : py::detail::values_and_holders(instance))
            if (!vh.holder_constructed()) return false;
        return true;
    }, py::arg("object"), "Internal: whether a bound object's C++ part has been constructed.");

    // ---- enums (exact MPS / Metal values) -------------------------------------------------
    py::enum_<ImageEdgeMode>(m, "ImageEdgeMode", "MPSImageEdgeMode")
        .value("ZERO", ImageEdgeMode::Zero)
        .value("CLAMP", ImageEdgeMode::Clamp)
        .value("MIRROR", ImageEdgeMode::Mirror)
        .value("MIRROR_WITH_EDGE", ImageEdgeMode::MirrorWithEdge)
        .value("CONSTANT", ImageEdgeMode::Constant);
    py::enum_<ImageFeatureChannelFormat>(m, "ImageFeatureChannelFormat", "MPSImageFeatureChannelFormat")
        .value("NONE", ImageFeatureChannelFormat::None)
        .value("UNORM8", ImageFeatureChannelFormat::Unorm8)
        .value("UNORM16", ImageFeatureChannelFormat::Unorm16)
        .value("FLOAT16", ImageFeatureChannelFormat::Float16)
        .value("FLOAT32", ImageFeatureChannelFormat::Float32);
    py::enum_<DataLayout>(m, "DataLayout", "MPSDataLayout")
        .value("HEIGHT_X_WIDTH_X_FEATURE_CHANNELS", DataLayout::HeightxWidthxFeatureChannels)
        .value("FEATURE_CHANNELS_X_HEIGHT_X_WIDTH", DataLayout::FeatureChannelsxHeightxWidth);
    py::enum_<DataType>(m, "DataType", "MPSDataType")
        .value("INVALID", DataType::Invalid)
        .value("FLOAT32", DataType::Float32)
        .value("FLOAT16", DataType::Float16)
        .value("INT8", DataType::Int8)
        .value("INT16", DataType::Int16)
        .value("INT32", DataType::Int32)
        .value("UINT8", DataType::UInt8)
        .value("UINT16", DataType::UInt16)
        .value("UINT32", DataType::UInt32)
        .value("UNORM1", DataType::Unorm1)
        .value("UNORM8", DataType::Unorm8);
    py::enum_<CommandBufferStatus>(m, "CommandBufferStatus", "MTLCommandBufferStatus")
        .value("NOT_ENQUEUED", CommandBufferStatus::NotEnqueued)
        .value("ENQUEUED", CommandBufferStatus::Enqueued)
        .value("COMMITTED", CommandBufferStatus::Committed)
        .value("SCHEDULED", CommandBufferStatus::Scheduled)
        .value("COMPLETED", CommandBufferStatus::Completed)
        .value("ERROR", CommandBufferStatus::Error);
    py::enum_<StateResourceType>(m, "StateResourceType", "MPSStateResourceType")
        .value("NONE", StateResourceType::None)
        .value("BUFFER", StateResourceType::Buffer)
        .value("TEXTURE", StateResourceType::Texture);

    // ---- value types ----------------------------------------------------------------------
    py::class_<Offset>(m, "Offset", "MPSOffset {x, y, z}")
        .def(py::init([](IntArg x, IntArg y, IntArg z) {
                 return Offset{toInt64(x.value, "x"), toInt64(y.value, "y"), toInt64(z.value, "z")};
             }),
             py::arg("x") = 0, py::arg("y") = 0, py::arg("z") = 0)
        .def_property("x", getter(&Offset::x), setter(&Offset::x, "x"))
        .def_property("y", getter(&Offset::y), setter(&Offset::y, "y"))
        .def_property("z", getter(&Offset::z), setter(&Offset::z, "z"))
        .def("__eq__", [](const Offset& a, py::handle b) {
            try { return a == toOffset(b, "other"); } catch (...) { return false; }
        })
        .def("__iter__", [](const Offset& o) { return py::iter(py::make_tuple(o.x, o.y, o.z)); })
        .def("__repr__", [](const Offset& o) {
            return "Offset(x=" + std::to_string(o.x) + ", y=" + std::to_string(o.y) + ", z=" + std::to_string(o.z) + ")";
        });
    py::class_<Region>(m, "Region", "MTLRegion {origin (x, y, z), size (width, height, depth)}")
        .def(py::init([](py::object origin, py::object size) {
                 return toRegion(py::make_tuple(origin, size), "Region");
             }),
             py::arg("origin"), py::arg("size"))
        .def_property_readonly("origin", [](const Region& r) { return py::make_tuple(r.origin.x, r.origin.y, r.origin.z); })
        .def_property_readonly("size", [](const Region& r) { return py::make_tuple(r.size.width, r.size.height, r.size.depth); })
        .def("__repr__", [](const Region& r) {
            return "Region(origin=(" + std::to_string(r.origin.x) + ", " + std::to_string(r.origin.y) + ", " +
                   std::to_string(r.origin.z) + "), size=(" + std::to_string(r.size.width) + ", " +
                   std::to_string(r.size.height) + ", " + std::to_string(r.size.depth) + "))";
        });
    m.attr("RECT_NO_CLIP") = rectNoClip();

    // ---- Device, queue, command buffer ------------------------------------------------------
    py::class_<Device>(m, "Device", "A compute device: 'cpu', or 'metal' (MTLDevice) where the build has it.")
        .def(py::init<const std::string&>(), py::arg("name"), "Device('cpu') or Device('metal')")
        .def_static("default", &Device::defaultDevice, "MTLCreateSystemDefaultDevice: Metal where present, else the CPU.")
        .def_static("available", &Device::availableDevices, "Names of the devices this build and machine provide.")
        .def_property_readonly("name", &Device::name)
        .def("__eq__", &Device::operator==)
        .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.name()); })
        .def("__repr__", [](const Device& d) { return "Device('" + d.name() + "')"; });

    py::class_<CommandBuffer, std::shared_ptr<CommandBuffer>>(m, "CommandBuffer", "MTLCommandBuffer")
        .def_property_readonly("device", &CommandBuffer::device)
        .def_property_readonly("status", &CommandBuffer::status, "MTLCommandBuffer.status")
        .def_property_readonly("error", [](const CommandBuffer& cb) -> py::object {
            std::string e = cb.error();
            if (e.empty()) return py::none();
            return py::str(e);
        }, "MTLCommandBuffer.error: the failure's description, or None")
        .def_property("label", getter(&CommandBuffer::label), setter(&CommandBuffer::label, "label"))
        .def("commit", [](const std::shared_ptr<CommandBuffer>& cb) {
            cb->commit();
            noteCommitted(cb);
        }, "-[MTLCommandBuffer commit]: submit the encoded work (asynchronous).")
        .def("fail_on_commit", &CommandBuffer::failOnCommit, py::arg("message") = "",
             "Test hook (not in Metal): when committed, the buffer fails with `message` instead of running its "
             "work: status ERROR, error set, handlers run, wait_until_completed raises CommandBufferError. "
             "See docs/verification.md.")
        .def("wait_until_completed", [](CommandBuffer& cb) {
            {
                py::gil_scoped_release release;
                cb.waitUntilCompleted();
            }
            if (cb.status() == CommandBufferStatus::Error) throw CommandBufferError(cb.error());
        }, "-[MTLCommandBuffer waitUntilCompleted]; raises CommandBufferError when the work failed.")
        .def("add_completed_handler", [](CommandBuffer& cb, py::function handler) {
            auto callback = std::make_shared<PythonCallback>(handler);
            cb.addCompletedHandler([callback](CommandBuffer& done) {
                if (pythonFinalizing()) return;  // atexit drained what it could; nothing may run Python now
                py::gil_scoped_acquire gil;
                try {
                    callback->object(done.shared_from_this());
                } catch (py::error_already_set& e) {
                    e.discard_as_unraisable("mpsgrad completed handler");
                } catch (const std::exception& e) {
                    // A C++ error raised by an mpsgrad call inside the handler: reported like a Python one.
                    PyErr_SetString(PyExc_RuntimeError, e.what());
                    PyErr_WriteUnraisable(callback->object.ptr());
                }
            });
        }, py::arg("handler"), "-[MTLCommandBuffer addCompletedHandler:]: handler(command_buffer) runs once the work is done.")
        .def("encode_host_callback", [](CommandBuffer& cb, py::object callback) {
            if (!PyCallable_Check(callback.ptr()))
                throwTypeError("callback: expected a callable(), got ", typeName(callback));
            auto reference = std::make_shared<PythonCallback>(std::move(callback));
            cb.encodeHostCallback([reference] {
                if (pythonFinalizing()) throw std::runtime_error("the Python interpreter is shutting down");
                py::gil_scoped_acquire gil;
                try {
                    reference->object();
                } catch (py::error_already_set& e) {
                    throw std::runtime_error(e.what());  // fails the command buffer with the Python message
                }
            });
        }, py::arg("callback"),
             "mpsgrad extension (docs/metal.md \"Host points\"): callback() runs on a host thread once all the "
             "work encoded before this call has completed and before any work encoded after it starts (it may "
             "read and write that work's images and states). An exception fails the command buffer: status "
             "ERROR, error 'host callback failed: ...', CommandBufferError at the wait. Waiting in it for this "
             "command buffer (wait_until_completed or mpsgrad.synchronize) or a later one of its queue could never "
             "return, so it raises CommandBufferError.");

    py::class_<CommandQueue, std::shared_ptr<CommandQueue>>(m, "CommandQueue", "MTLCommandQueue")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CommandQueue>(deviceOr(device)); }),
             py::arg("device") = py::none(), "-[MTLDevice newCommandQueue]")
        .def_property_readonly("device", &CommandQueue::device)
        .def_property("label", getter(&CommandQueue::label), setter(&CommandQueue::label, "label"))
        .def("command_buffer", &CommandQueue::commandBuffer, "-[MTLCommandQueue commandBuffer]");

    // ---- images ---------------------------------------------------------------------------------
    py::class_<ImageDescriptor>(m, "ImageDescriptor", "MPSImageDescriptor")
        .def(py::init([](IntArg width, IntArg height, IntArg featureChannels, IntArg numberOfImages,
                         py::handle format, IntArg usage) {
                 return ImageDescriptor::make(fromPython<ImageFeatureChannelFormat>(format, "channel_format"),
                                              toInt64(width.value, "width"), toInt64(height.value, "height"),
                                              toInt64(featureChannels.value, "feature_channels"),
                                              toInt64(numberOfImages.value, "number_of_images"),
                                              fromPython<uint32_t>(usage.value, "usage"));
             }),
             py::arg("width") = 1, py::arg("height") = 1, py::arg("feature_channels") = 1,
             py::arg("number_of_images") = 1, py::arg_v("channel_format", ImageFeatureChannelFormat::Float32, "ImageFeatureChannelFormat.FLOAT32"),
             py::arg("usage") = 3,
             "+[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:numberOfImages:usage:]")
        .def_property("width", getter(&ImageDescriptor::width), setter(&ImageDescriptor::width, "width"))
        .def_property("height", getter(&ImageDescriptor::height), setter(&ImageDescriptor::height, "height"))
        .def_property("feature_channels", getter(&ImageDescriptor::featureChannels), setter(&ImageDescriptor::featureChannels, "feature_channels"))
        .def_property("number_of_images", getter(&ImageDescriptor::numberOfImages), setter(&ImageDescriptor::numberOfImages, "number_of_images"))
        .def_property("channel_format", getter(&ImageDescriptor::featureChannelFormat), setter(&ImageDescriptor::featureChannelFormat, "channel_format"))
        .def_property("usage", getter(&ImageDescriptor::usage), setter(&ImageDescriptor::usage, "usage"))
        .def("__repr__", [](const ImageDescriptor& d) {
            return "ImageDescriptor(width=" + std::to_string(d.width) + ", height=" + std::to_string(d.height) +
                   ", feature_channels=" + std::to_string(d.featureChannels) +
                   ", number_of_images=" + std::to_string(d.numberOfImages) + ")";
        });

    py::class_<Image, std::shared_ptr<Image>>(m, "Image", "MPSImage: float32, float16, unorm8 or unorm16 feature channels, NHWC storage.")
        .def(py::init([](const DeviceArg& device, py::handle d) {
                 return std::make_shared<Image>(deviceOr(device), fromPython<ImageDescriptor>(d, "image_descriptor"));
             }),
             py::arg("device"), py::arg("image_descriptor"), "-[MPSImage initWithDevice:imageDescriptor:]")
        .def_property_readonly("device", &Image::device)
        .def_property_readonly("width", &Image::width)
        .def_property_readonly("height", &Image::height)
        .def_property_readonly("feature_channels", &Image::featureChannels)
        .def_property_readonly("number_of_images", &Image::numberOfImages)
        .def_property_readonly("feature_channel_format", &Image::featureChannelFormat)
        .def_property_readonly("precision", &Image::precision)
        .def_property_readonly("pixel_size", &Image::pixelSize)
        .def_property_readonly("usage", &Image::usage)
        .def_property_readonly("parent", &Image::parent)
        .def_property_readonly("is_temporary", &Image::isTemporary)
        .def_property_readonly("resource_size", &Image::resourceSize, "-[MPSImage resourceSize]")
        .def_property_readonly("shape", [](const Image& i) {
            return py::make_tuple(i.numberOfImages(), i.height(), i.width(), i.featureChannels());
        }, "(number_of_images, height, width, feature_channels)")
        .def_property("label", getter(&Image::label), setter(&Image::label, "label"))
        .def("sub_image_with_feature_channel_range", &Image::subImageWithFeatureChannelRange, py::arg("location"),
             py::arg("length"), "-[MPSImage subImageWithFeatureChannelRange:] (aliases the storage)")
        .def("batch_representation", &Image::batchRepresentation, "-[MPSImage batchRepresentation]")
        .def("read_bytes", &readImage, py::arg_v("data_layout", DataLayout::HeightxWidthxFeatureChannels, "DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS"),
             py::arg("image_index") = 0, py::arg("feature_channel_offset") = 0,
             py::arg("number_of_feature_channels") = py::none(),
             "-[MPSImage readBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:] → an array "
             "(height, width, channels) or (channels, height, width) of the storage's dtype, values as stored "
             "(float32, float16, uint8 for UNORM8, uint16 for UNORM16). Host reads follow Metal "
             "(docs/user_guide.md \"Reading results\"): CommandBufferError while a command buffer that has not "
             "completed writes the image, ValueError for a temporary image once its command buffer completed.")
        .def("write_bytes", &writeImage, py::arg("data"),
             py::arg_v("data_layout", DataLayout::HeightxWidthxFeatureChannels, "DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS"), py::arg("image_index") = 0,
             py::arg("feature_channel_offset") = 0, py::arg("number_of_feature_channels") = py::none(),
             "-[MPSImage writeBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:]; `data` must have "
             "exactly the shape of the region written (or as many float32 bytes). An array of the storage's dtype "
             "is stored as it is; other floating-point values are rounded (FLOAT16: to nearest even; UNORM: "
             "clamped to [0, 1], times 255 or 65535, to nearest even, NaN to 0). uint8 / uint16 arrays into "
             "FLOAT32 or FLOAT16 storage, and non-float arrays into UNORM storage, raise TypeError.")
        .def("synchronize_on_command_buffer", &Image::synchronizeOnCommandBuffer, py::arg("command_buffer"),
             "-[MPSImage synchronizeOnCommandBuffer:]")
        .def("to_numpy", &imageToNumpy,
             "A copy of the image as an array (number_of_images, height, width, feature_channels) of the storage's "
             "dtype, values as stored: float32, float16 (FLOAT16), uint8 (UNORM8) or uint16 (UNORM16). Host reads "
             "follow Metal, as for read_bytes.")
        .def_static("from_numpy", &imageFromNumpy, py::arg("array"), py::arg("device") = py::none(),
                    py::arg("channel_format") = py::none(),
                    "A new image holding a copy of a (height, width, channels) or (n, height, width, channels) array; "
                    "channel_format None takes the array's dtype (float16 -> FLOAT16, uint8 -> UNORM8, uint16 -> "
                    "UNORM16, else FLOAT32); values are written as write_bytes writes them.")
        .def("_numpy_view", &numpyView, "Zero-copy (n, height, width, channels) view of the storage.")
        .def_static("_from_array_zero_copy", &imageFromArrayZeroCopy, py::arg("array"), py::arg("device") = py::none());

    py::class_<TemporaryImage, Image, std::shared_ptr<TemporaryImage>>(m, "TemporaryImage", "MPSTemporaryImage")
        .def(py::init([](CommandBuffer& cb, const ImageDescriptor& d) { return std::make_shared<TemporaryImage>(cb, d); }),
             py::arg("command_buffer"), py::arg("image_descriptor"),
             "+[MPSTemporaryImage temporaryImageWithCommandBuffer:imageDescriptor:]")
        .def_property("read_count", &TemporaryImage::readCount, &TemporaryImage::setReadCount,
                      "MPSTemporaryImage.readCount: reads left before the storage is released");

    m.def("batch_from_numpy", &batchFromNumpy, py::arg("array"), py::arg("device") = py::none(),
          py::arg("channel_format") = py::none(),
          "An image batch (list of Image, one contiguous allocation) from an (n, height, width, channels) array; "
          "channel_format as for Image.from_numpy.");
    m.def("image_batch_increment_read_count", &imageBatchIncrementReadCount, py::arg("batch"), py::arg("amount"),
          "MPSImageBatchIncrementReadCount: each unique temporary image once; returns the unique count.");

    class PyImageAllocator : public ImageAllocator {
    public:
        ImagePtr imageForCommandBuffer(CommandBuffer& cb, const ImageDescriptor& d, const Kernel* kernel) override {
            PYBIND11_OVERRIDE_PURE_NAME(ImagePtr, ImageAllocator, "image_for_command_buffer", imageForCommandBuffer,
                                        cb.shared_from_this(), d, kernel ? py::cast(kernel) : py::none());
        }
    };
    py::class_<ImageAllocator, PyImageAllocator, std::shared_ptr<ImageAllocator>>(
        m, "ImageAllocator", "MPSImageAllocator; subclass and implement image_for_command_buffer(cb, descriptor, kernel)")
        .def(py::init<>())
        .def_static("temporary", &ImageAllocator::temporaryAllocator, "+[MPSTemporaryImage defaultAllocator]")
        .def_static("persistent", &ImageAllocator::persistentAllocator, "+[MPSImage defaultAllocator]");

    // ---- states ---------------------------------------------------------------------------------
    py::class_<State, std::shared_ptr<State>>(m, "State", "MPSState: buffers with a read count")
        .def(py::init([](const DeviceArg& device, size_t bufferSize, py::object resourceList) {
                 if (resourceList.is_none()) return std::make_shared<State>(deviceOr(device), bufferSize);
                 if (bufferSize != 0)
                     throwValueError("resource_list: pass either buffer_size or resource_list, not both");
                 return std::make_shared<State>(deviceOr(device), resourceListSizes(resourceList));
             }),
             py::arg("device"), py::arg("buffer_size") = 0, py::arg("resource_list") = py::none(),
             "-[MPSState initWithDevice:bufferSize:] / -initWithDevice:resourceList: (a StateResourceList)")
        .def_static("temporary", [](CommandBuffer& cb, std::vector<size_t> sizes, py::object resourceList) {
                        if (resourceList.is_none()) return State::temporary(cb, sizes);
                        if (!sizes.empty())
                            throwValueError("resource_list: pass either buffer_sizes or resource_list, not both");
                        return State::temporary(cb, resourceListSizes(resourceList));
                    },
                    py::arg("command_buffer"), py::arg("buffer_sizes") = std::vector<size_t>{},
                    py::arg("resource_list") = py::none(),
                    "+[MPSState temporaryStateWithCommandBuffer:bufferSize:] / ...resourceList: (buffer_sizes, or "
                    "a StateResourceList)")
        .def_property_readonly("device", &State::device)
        .def_property_readonly("is_temporary", &State::isTemporary)
        .def_property("read_count", &State::readCount, &State::setReadCount, "MPSState.readCount")
        .def_property_readonly("resource_count", &State::resourceCount)
        .def_property_readonly("resource_size", &State::resourceSize)
        .def("buffer_size_at_index", &State::bufferSizeAtIndex, py::arg("index"))
        .def("resource_type_at_index", &State::resourceTypeAtIndex, py::arg("index"))
        .def("buffer_at_index", [](const State& s, size_t index) {
            BufferSlice b = s.resourceAtIndex(index);
            // From the resource's offset (a state over another object's buffer starts inside it).
            return floatView(b, {py::ssize_t((b.buffer->length() - b.offset) / sizeof(float))});
        }, py::arg("index"), "-[MPSState resourceAtIndex:allocateMemory:] as a float32 NumPy view (from the "
           "resource's offset to the end of its buffer)")
        .def("vector_at_index", [](const State& s, size_t index, py::object length) {
            BufferSlice b = s.resourceAtIndex(index);
            const int64_t available = int64_t((b.buffer->length() - b.offset) / sizeof(float));
            const int64_t n = length.is_none() ? available : toInt64(length, "length", 1, available);
            return vectorOver(s, b, n);
        }, py::arg("index"), py::arg("length") = py::none(),
           "[[MPSVector alloc] initWithBuffer:[state resourceAtIndex:index allocateMemory:YES] descriptor:...]: a "
           "Vector of `length` floats (None: to the end of the buffer) that aliases the resource, so an optimizer "
           "can read or update it in place")
        .def("synchronize_on_command_buffer", &State::synchronizeOnCommandBuffer, py::arg("command_buffer"),
             "-[MPSState synchronizeOnCommandBuffer:]")
        .def_property("label", getter(&State::label), setter(&State::label, "label"))
        .def("__repr__", [](const State& s) {
            return std::string("<mpsgrad.") + s.className() + (s.isTemporary() ? " temporary" : "") +
                   " read_count=" + std::to_string(s.readCount()) + ">";
        });
    py::class_<NNGradientState, State, std::shared_ptr<NNGradientState>>(m, "NNGradientState", "MPSNNGradientState");
    py::class_<NNBinaryGradientState, State, std::shared_ptr<NNBinaryGradientState>>(m, "NNBinaryGradientState",
                                                                                      "MPSNNBinaryGradientState");
    m.def("state_batch_increment_read_count", &stateBatchIncrementReadCount, py::arg("batch"), py::arg("amount"),
          "MPSStateBatchIncrementReadCount: each unique state once; returns the unique count.");
}

}  // namespace mpsgrad::python
