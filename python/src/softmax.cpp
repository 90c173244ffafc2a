// Bindings of the softmax family (MPSCNNSoftMax.h).
#include "bindings.h"
#include "kernels/softmax.h"

namespace mpsgrad::python {
namespace {

Device softmaxDevice(const DeviceArg& device) { return toDevice(device, "device"); }

}  // namespace

void bindSoftmax(py::module_& m) {
    py::class_<CNNSoftMaxGradientState, NNGradientState, std::shared_ptr<CNNSoftMaxGradientState>>(
        m, "CNNSoftMaxGradientState",
        "The MPSNNGradientState CNNSoftMax / CNNLogSoftMax write for their gradients (forward geometry, and which "
        "images were the forward input and output)")
        .def_property_readonly("is_log_softmax", [](const CNNSoftMaxGradientState& s) { return s.logSoftmax; });

    py::class_<CNNSoftMax, CNNKernel, std::shared_ptr<CNNSoftMax>>(
        m, "CNNSoftMax",
        "MPSCNNSoftMax: Y_k = exp(X_k - M) / sum_j exp(X_j - M) across the feature channels of every pixel "
        "(M = max_j X_j, so any magnitude is safe).")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNSoftMax>(softmaxDevice(device)); }),
             py::arg("device"), "-[MPSCNNSoftMax initWithDevice:]");
    py::class_<CNNLogSoftMax, CNNKernel, std::shared_ptr<CNNLogSoftMax>>(
        m, "CNNLogSoftMax",
        "MPSCNNLogSoftMax: Y_k = (X_k - M) - log(sum_j exp(X_j - M)) across the feature channels of every pixel.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNLogSoftMax>(softmaxDevice(device)); }),
             py::arg("device"), "-[MPSCNNLogSoftMax initWithDevice:]");
    py::class_<CNNSoftMaxGradient, CNNGradientKernel, std::shared_ptr<CNNSoftMaxGradient>>(
        m, "CNNSoftMaxGradient",
        "MPSCNNSoftMaxGradient: dX_k = Y_k * (G_k - sum_j G_j Y_j). source_image is the forward OUTPUT Y (not X); "
        "gradient_state is CNNSoftMax's result state.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNSoftMaxGradient>(softmaxDevice(device)); }),
             py::arg("device"), "-[MPSCNNSoftMaxGradient initWithDevice:]");
    py::class_<CNNLogSoftMaxGradient, CNNGradientKernel, std::shared_ptr<CNNLogSoftMaxGradient>>(
        m, "CNNLogSoftMaxGradient",
        "MPSCNNLogSoftMaxGradient: dX_k = G_k - exp(Y_k) * sum_j G_j. source_image is the forward OUTPUT Y "
        "(log-probabilities); gradient_state is CNNLogSoftMax's result state.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNLogSoftMaxGradient>(softmaxDevice(device)); }),
             py::arg("device"), "-[MPSCNNLogSoftMaxGradient initWithDevice:]");
}

}  // namespace mpsgrad::python
