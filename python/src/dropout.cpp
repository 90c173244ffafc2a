// Bindings of the dropout family (MPSCNNDropout.h).
#include "bindings.h"
#include "kernels/dropout.h"

namespace mpsgrad::python {
namespace {

Device dropoutDevice(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (!py::isinstance<Device>(device))
        throwTypeError("device: expected a Device or a device name, got ", std::string(py::repr(py::type::of(device))));
    return device.cast<Device>();
}

Size3 toMaskStride(py::handle value) {
    try {
        auto items = value.cast<std::vector<int64_t>>();
        if (items.size() == 3) {
            for (int64_t v : items)
                if (v != 0 && v != 1)
                    throwValueError("mask_stride_in_pixels: every component must be 0 (broadcast) or 1, got ",
                                    std::string(py::repr(value)));
            return Size3{uint64_t(items[0]), uint64_t(items[1]), uint64_t(items[2])};
        }
    } catch (const py::cast_error&) {
    }
    throwTypeError("mask_stride_in_pixels: expected (x, y, feature_channels) with components 0 or 1, got ",
                   std::string(py::repr(value)));
}

py::tuple strideTuple(const Size3& s) { return py::make_tuple(s.width, s.height, s.depth); }

double checkedProbability(double p) {
    if (!(p > 0.0 && p < 1.0)) throwValueError("keep_probability: must be in the open interval (0, 1), got ", p);
    return p;
}

}  // namespace

void bindDropout(py::module_& m) {
    py::class_<CNNDropoutGradientState, NNGradientState, std::shared_ptr<CNNDropoutGradientState>>(
        m, "CNNDropoutGradientState",
        "MPSCNNDropoutGradientState: what CNNDropoutGradient needs to regenerate the forward mask")
        .def(
            "mask_data",
            [](const CNNDropoutGradientState& s) {
                std::vector<uint8_t> data = s.maskData();
                const DropoutMask& k = s.mask;
                std::vector<py::ssize_t> shape{py::ssize_t(s.maskImages), py::ssize_t(k.strideY ? k.maskHeight : 1),
                                               py::ssize_t(k.strideX ? k.maskWidth : 1),
                                               py::ssize_t(k.strideZ ? k.maskChannels : 1)};
                if (data.empty()) shape = {0, 0, 0, 0};
                py::array_t<uint8_t> out(shape);
                std::copy(data.begin(), data.end(), out.mutable_data());
                return out;
            },
            "-[MPSCNNDropoutGradientState maskData]: the mask, 1 = kept, as uint8 (images, height, width, channels) "
            "of the mask grid (extent 1 along broadcast axes); empty before the forward pass has encoded")
        .def_property_readonly("keep_probability", [](const CNNDropoutGradientState& s) { return s.keepProbability; })
        .def_property_readonly("seed", [](const CNNDropoutGradientState& s) { return s.seed; });

    py::class_<CNNDropout, CNNKernel, std::shared_ptr<CNNDropout>>(
        m, "CNNDropout",
        "MPSCNNDropout: Y = X * m / keep_probability, m in {0, 1} with P(m = 1) = keep_probability, drawn from "
        "Philox4x32-10 keyed by seed (the same mask on every device). Each encode draws a fresh mask.")
        .def(py::init([](const DeviceArg& device, double keep, uint64_t seed, py::handle stride) {
                 return std::make_shared<CNNDropout>(dropoutDevice(device), float(checkedProbability(keep)), seed,
                                                     toMaskStride(stride));
             }),
             py::arg("device"), py::arg("keep_probability"), py::arg("seed") = 0,
             py::arg("mask_stride_in_pixels") = py::make_tuple(1, 1, 1),
             "-[MPSCNNDropout initWithDevice:keepProbability:seed:maskStrideInPixels:]")
        .def_property_readonly("keep_probability", &CNNDropout::keepProbability)
        .def_property_readonly("seed", &CNNDropout::seed)
        .def_property_readonly("mask_stride_in_pixels",
                               [](const CNNDropout& k) { return strideTuple(k.maskStrideInPixels()); })
        .def_property_readonly("encode_count", &CNNDropout::encodeCount,
                               "mpsgrad: forward encodes so far (the Philox stream of the next encode)");

    py::class_<CNNDropoutGradient, CNNGradientKernel, std::shared_ptr<CNNDropoutGradient>>(
        m, "CNNDropoutGradient",
        "MPSCNNDropoutGradient: dX = G * m / keep_probability with the mask of the forward pass that made "
        "gradient_state. source_image is not read.")
        .def(py::init([](const DeviceArg& device, double keep, uint64_t seed, py::handle stride) {
                 return std::make_shared<CNNDropoutGradient>(dropoutDevice(device), float(checkedProbability(keep)),
                                                             seed, toMaskStride(stride));
             }),
             py::arg("device"), py::arg("keep_probability"), py::arg("seed") = 0,
             py::arg("mask_stride_in_pixels") = py::make_tuple(1, 1, 1),
             "-[MPSCNNDropoutGradient initWithDevice:keepProbability:seed:maskStrideInPixels:]")
        .def_property_readonly("keep_probability", &CNNDropoutGradient::keepProbability)
        .def_property_readonly("seed", &CNNDropoutGradient::seed)
        .def_property_readonly("mask_stride_in_pixels",
                               [](const CNNDropoutGradient& k) { return strideTuple(k.maskStrideInPixels()); });
}

}  // namespace mpsgrad::python
