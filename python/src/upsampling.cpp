// Bindings of the upsampling family (MPSCNNUpsampling.h).
#include "bindings.h"
#include "kernels/upsampling.h"

namespace mpsgrad::python {
namespace {

Device upsamplingDevice(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (!py::isinstance<Device>(device))
        throwTypeError("device: expected a Device or a device name, got ", std::string(py::repr(py::type::of(device))));
    return device.cast<Device>();
}

}  // namespace

void bindUpsampling(py::module_& m) {
    py::enum_<UpsamplingCoordinateMode>(
        m, "UpsamplingCoordinateMode",
        "How CNNUpsamplingBilinear maps output to input coordinates when align_corners is False (mpsgrad option)")
        .value("HALF_PIXEL", UpsamplingCoordinateMode::HalfPixel,
               "src = (dst + 0.5) / scale - 0.5, clamped at 0 (PyTorch align_corners=False); the default")
        .value("ASYMMETRIC", UpsamplingCoordinateMode::Asymmetric, "src = dst / scale (TensorFlow 1 legacy)");

    py::class_<CNNUpsamplingGradientState, NNGradientState, std::shared_ptr<CNNUpsamplingGradientState>>(
        m, "CNNUpsamplingGradientState",
        "The MPSNNGradientState the upsampling kernels write for their gradients (scale factors, corner alignment, "
        "coordinate mode and the input extent)")
        .def_property_readonly("is_bilinear", [](const CNNUpsamplingGradientState& s) { return s.bilinear; })
        .def_property_readonly("align_corners", [](const CNNUpsamplingGradientState& s) { return s.alignCorners; })
        .def_property_readonly("coordinate_mode", [](const CNNUpsamplingGradientState& s) { return s.coordinateMode; });

    py::class_<CNNUpsampling, CNNKernel, std::shared_ptr<CNNUpsampling>>(
        m, "CNNUpsampling",
        "MPSCNNUpsampling: the upsampling base class. The input is the source from `offset` (default (0, 0)) to its "
        "edges; the returning encode forms make a destination of the source's size times the scale factors.")
        .def_property_readonly("scale_factor_x", &CNNUpsampling::scaleFactorX)
        .def_property_readonly("scale_factor_y", &CNNUpsampling::scaleFactorY)
        .def_property_readonly("align_corners", &CNNUpsampling::alignCorners);
    py::class_<CNNUpsamplingNearest, CNNUpsampling, std::shared_ptr<CNNUpsamplingNearest>>(
        m, "CNNUpsamplingNearest", "MPSCNNUpsamplingNearest: Y[y][x] = X[y // sy][x // sx].")
        .def(py::init([](const DeviceArg& device, int64_t sx, int64_t sy) {
                 return std::make_shared<CNNUpsamplingNearest>(upsamplingDevice(device), sx, sy);
             }),
             py::arg("device"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"),
             "-[MPSCNNUpsamplingNearest initWithDevice:integerScaleFactorX:integerScaleFactorY:]");
    py::class_<CNNUpsamplingBilinear, CNNUpsampling, std::shared_ptr<CNNUpsamplingBilinear>>(
        m, "CNNUpsamplingBilinear",
        "MPSCNNUpsamplingBilinear: bilinear interpolation. align_corners=True maps the corner pixel centers onto "
        "each other (src = dst * (W_in - 1) / (W_out - 1)); otherwise coordinate_mode decides (HALF_PIXEL default).")
        .def(py::init([](const DeviceArg& device, int64_t sx, int64_t sy, Hinted<bool> alignCorners) {
                 return std::make_shared<CNNUpsamplingBilinear>(upsamplingDevice(device), sx, sy,
                                                                toBool(alignCorners, "align_corners"));
             }),
             py::arg("device"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"),
             py::arg("align_corners") = py::bool_(false),
             "-[MPSCNNUpsamplingBilinear initWithDevice:integerScaleFactorX:integerScaleFactorY:alignCorners:]")
        .def_readwrite("coordinate_mode", &CNNUpsamplingBilinear::coordinateMode,
                       "mpsgrad option: the output-to-input coordinate rule when align_corners is False");

    py::class_<CNNUpsamplingGradient, CNNGradientKernel, std::shared_ptr<CNNUpsamplingGradient>>(
        m, "CNNUpsamplingGradient",
        "MPSCNNUpsamplingGradient: the upsampling gradient base class. primary = dL/dY; the secondary (the forward "
        "source) only sizes the result. Corner alignment and coordinate mode come from the gradient state.")
        .def_property_readonly("scale_factor_x", &CNNUpsamplingGradient::scaleFactorX)
        .def_property_readonly("scale_factor_y", &CNNUpsamplingGradient::scaleFactorY);
    py::class_<CNNUpsamplingNearestGradient, CNNUpsamplingGradient, std::shared_ptr<CNNUpsamplingNearestGradient>>(
        m, "CNNUpsamplingNearestGradient", "MPSCNNUpsamplingNearestGradient: dX = the sum of each sy x sx block of G.")
        .def(py::init([](const DeviceArg& device, int64_t sx, int64_t sy) {
                 return std::make_shared<CNNUpsamplingNearestGradient>(upsamplingDevice(device), sx, sy);
             }),
             py::arg("device"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"),
             "-[MPSCNNUpsamplingNearestGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]");
    py::class_<CNNUpsamplingBilinearGradient, CNNUpsamplingGradient, std::shared_ptr<CNNUpsamplingBilinearGradient>>(
        m, "CNNUpsamplingBilinearGradient",
        "MPSCNNUpsamplingBilinearGradient: each G pixel goes back to its four taps with the forward weights.")
        .def(py::init([](const DeviceArg& device, int64_t sx, int64_t sy) {
                 return std::make_shared<CNNUpsamplingBilinearGradient>(upsamplingDevice(device), sx, sy);
             }),
             py::arg("device"), py::arg("integer_scale_factor_x"), py::arg("integer_scale_factor_y"),
             "-[MPSCNNUpsamplingBilinearGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]");
}

}  // namespace mpsgrad::python
