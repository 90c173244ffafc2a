// Bindings of the pooling family (MPSCNNPooling.h).
#include "bindings.h"
#include "kernels/pooling.h"

namespace mpsgrad::python {
namespace {

Device poolingDevice(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (!py::isinstance<Device>(device))
        throwTypeError("device: expected a Device or a device name, got ", std::string(py::repr(py::type::of(device))));
    return device.cast<Device>();
}

py::tuple sizeTuple(const Size3& s) { return py::make_tuple(s.width, s.height, s.depth); }

Size3 toSize(py::handle value) {
    try {
        auto items = value.cast<std::vector<int64_t>>();
        if (items.size() == 2 || items.size() == 3) {
            for (int64_t v : items)
                if (v < 0) throwValueError("source_size: components must be >= 0, got ", v);
            return Size3{uint64_t(items[0]), uint64_t(items[1]), items.size() == 3 ? uint64_t(items[2]) : kNoClipSize};
        }
    } catch (const py::cast_error&) {
    }
    throwTypeError("source_size: expected (width, height[, depth]) of non-negative ints, got ",
                   std::string(py::repr(value)));
}

// The forward classes: (device, kernel_width, kernel_height, stride_in_pixels_x=1, stride_in_pixels_y=1).
template <class T, class Parent>
py::class_<T, Parent, std::shared_ptr<T>> bindPooling(py::module_& m, const char* name, const char* doc,
                                                      const char* selector) {
    py::class_<T, Parent, std::shared_ptr<T>> cls(m, name, doc);
    cls.def(py::init([](const DeviceArg& device, int64_t kw, int64_t kh, int64_t sx, int64_t sy) {
                return std::make_shared<T>(poolingDevice(device), kw, kh, sx, sy);
            }),
            py::arg("device"), py::arg("kernel_width"), py::arg("kernel_height"), py::arg("stride_in_pixels_x") = 1,
            py::arg("stride_in_pixels_y") = 1, selector);
    return cls;
}

template <class T, class Parent>
void bindDilated(py::module_& m, const char* name, const char* doc, const char* selector) {
    py::class_<T, Parent, std::shared_ptr<T>>(m, name, doc)
        .def(py::init([](const DeviceArg& device, int64_t kw, int64_t kh, int64_t dx, int64_t dy, int64_t sx, int64_t sy) {
                 return std::make_shared<T>(poolingDevice(device), kw, kh, dx, dy, sx, sy);
             }),
             py::arg("device"), py::arg("kernel_width"), py::arg("kernel_height"), py::arg("dilation_rate_x") = 1,
             py::arg("dilation_rate_y") = 1, py::arg("stride_in_pixels_x") = 1, py::arg("stride_in_pixels_y") = 1,
             selector);
}

}  // namespace

void bindPooling(py::module_& m) {
    py::enum_<PoolingKind>(m, "PoolingKind", "Which forward pooling kernel a CNNPoolingGradientState comes from")
        .value("MAX", PoolingKind::Max)
        .value("AVERAGE", PoolingKind::Average)
        .value("L2_NORM", PoolingKind::L2Norm)
        .value("DILATED_MAX", PoolingKind::DilatedMax);

    py::class_<CNNPoolingGradientState, NNGradientState, std::shared_ptr<CNNPoolingGradientState>>(
        m, "CNNPoolingGradientState",
        "The MPSNNGradientState the pooling kernels write for their gradients (forward window geometry and the "
        "average normalization in force)")
        .def_property_readonly("kind", [](const CNNPoolingGradientState& s) { return s.kind; })
        .def_property_readonly("zero_pad_size_x", [](const CNNPoolingGradientState& s) { return s.zeroPadSizeX; })
        .def_property_readonly("zero_pad_size_y", [](const CNNPoolingGradientState& s) { return s.zeroPadSizeY; });

    py::class_<CNNPooling, CNNKernel, std::shared_ptr<CNNPooling>>(
        m, "CNNPooling",
        "MPSCNNPooling: the pooling base class. Window of destination pixel clip_rect.origin + (x, y): center "
        "offset + stride * (x, y), taps at center - (E >> 1) + dilation * t with E = (k - 1) * dilation + 1.")
        .def_property_readonly("kind", &CNNPooling::kind);
    bindPooling<CNNPoolingMax, CNNPooling>(
        m, "CNNPoolingMax",
        "MPSCNNPoolingMax: the maximum over the window (first maximum in scan order on ties). Off-image taps read 0 "
        "under ImageEdgeMode.ZERO and the nearest pixel under CLAMP.",
        "-[MPSCNNPoolingMax initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]");
    bindPooling<CNNPoolingAverage, CNNPooling>(
        m, "CNNPoolingAverage",
        "MPSCNNPoolingAverage: the sum of the in-image taps over N. ZERO edge mode: N = kernel_width * "
        "kernel_height. CLAMP (or the padding method's EXCLUDE_EDGES bit): N = the taps inside the image widened "
        "by zero_pad_size_x/y on each side; a window with none gives 0.",
        "-[MPSCNNPoolingAverage initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]")
        .def_readwrite("zero_pad_size_x", &CNNPoolingAverage::zeroPadSizeX, "MPSCNNPoolingAverage.zeroPadSizeX")
        .def_readwrite("zero_pad_size_y", &CNNPoolingAverage::zeroPadSizeY, "MPSCNNPoolingAverage.zeroPadSizeY");
    bindPooling<CNNPoolingL2Norm, CNNPooling>(
        m, "CNNPoolingL2Norm", "MPSCNNPoolingL2Norm: sqrt of the sum of the squares over the window.",
        "-[MPSCNNPoolingL2Norm initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]");
    bindDilated<CNNDilatedPoolingMax, CNNPooling>(
        m, "CNNDilatedPoolingMax", "MPSCNNDilatedPoolingMax: the maximum over dilated taps.",
        "-[MPSCNNDilatedPoolingMax initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:"
        "strideInPixelsX:strideInPixelsY:]");

    py::class_<CNNPoolingGradient, CNNGradientKernel, std::shared_ptr<CNNPoolingGradient>>(
        m, "CNNPoolingGradient",
        "MPSCNNPoolingGradient: the pooling gradient base class. primary = dL/dY, secondary = the forward source X "
        "(average pooling reads only its size). destination_image_descriptor copies the forward geometry from the "
        "state: primary_offset = forward clip origin, source_size = forward clip size, secondary_offset = forward "
        "offset, clip_rect = the whole dX. Pixels no window reaches get 0.")
        .def_property(
            "source_size", [](const CNNPoolingGradient& k) { return sizeTuple(k.sourceSize); },
            [](CNNPoolingGradient& k, py::handle v) { k.sourceSize = toSize(v); },
            "MPSCNNPoolingGradient.sourceSize (width, height, depth): the G pixels from primary_offset that contribute")
        .def_property_readonly("kind", &CNNPoolingGradient::kind)
        .def_property_readonly("kernel_width", &CNNPoolingGradient::kernelWidth)
        .def_property_readonly("kernel_height", &CNNPoolingGradient::kernelHeight)
        .def_property_readonly("stride_in_pixels_x", &CNNPoolingGradient::strideInPixelsX)
        .def_property_readonly("stride_in_pixels_y", &CNNPoolingGradient::strideInPixelsY)
        .def_property_readonly("dilation_rate_x", &CNNPoolingGradient::dilationRateX)
        .def_property_readonly("dilation_rate_y", &CNNPoolingGradient::dilationRateY);
    bindPooling<CNNPoolingMaxGradient, CNNPoolingGradient>(
        m, "CNNPoolingMaxGradient",
        "MPSCNNPoolingMaxGradient: G goes to the argmax tap of each window, recomputed from X.",
        "-[MPSCNNPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]");
    bindPooling<CNNPoolingAverageGradient, CNNPoolingGradient>(
        m, "CNNPoolingAverageGradient",
        "MPSCNNPoolingAverageGradient: G / N to every in-image tap of each window.",
        "-[MPSCNNPoolingAverageGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]")
        .def_readwrite("zero_pad_size_x", &CNNPoolingAverageGradient::zeroPadSizeX,
                       "MPSCNNPoolingAverageGradient.zeroPadSizeX (copied from the state by destination_image_descriptor)")
        .def_readwrite("zero_pad_size_y", &CNNPoolingAverageGradient::zeroPadSizeY,
                       "MPSCNNPoolingAverageGradient.zeroPadSizeY");
    bindPooling<CNNPoolingL2NormGradient, CNNPoolingGradient>(
        m, "CNNPoolingL2NormGradient",
        "MPSCNNPoolingL2NormGradient: dX = sum over windows of G * X / out (0 where out = 0), out recomputed from X.",
        "-[MPSCNNPoolingL2NormGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]");
    bindDilated<CNNDilatedPoolingMaxGradient, CNNPoolingGradient>(
        m, "CNNDilatedPoolingMaxGradient", "MPSCNNDilatedPoolingMaxGradient: the max gradient over dilated taps.",
        "-[MPSCNNDilatedPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:"
        "strideInPixelsX:strideInPixelsY:]");
}

}  // namespace mpsgrad::python
