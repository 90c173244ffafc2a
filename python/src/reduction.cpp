// Bindings of the Gram matrix and spatial-mean family (MPSNNGramMatrixCalculation[Gradient] of
// MPSCNNConvolution.h; the kernels of MPSNNReductionSpatialMeanNode / ...GradientNode).
#include "bindings.h"
#include "kernels/reduction.h"

namespace mpsgrad::python {

void bindReduction(py::module_& m) {
    py::class_<NNGramMatrixCalculationGradientState, NNGradientState,
               std::shared_ptr<NNGramMatrixCalculationGradientState>>(
        m, "NNGramMatrixCalculationGradientState",
        "The MPSNNGradientState NNGramMatrixCalculation writes for NNGramMatrixCalculationGradient");
    py::class_<NNReductionSpatialMeanGradientState, NNGradientState,
               std::shared_ptr<NNReductionSpatialMeanGradientState>>(
        m, "NNReductionSpatialMeanGradientState",
        "The MPSNNGradientState NNReductionSpatialMean writes for NNReductionSpatialMeanGradient (the region averaged)");

    py::class_<NNGramMatrixCalculation, CNNKernel, std::shared_ptr<NNGramMatrixCalculation>>(
        m, "NNGramMatrixCalculation",
        "MPSNNGramMatrixCalculation: per image, G[f][c] = alpha * sum over pixels of X[f] * X[c] for the N source "
        "channels read, written as an N-wide, 1-high image of N feature channels (pixel x = f holds row f). offset.x/y "
        "must be 0 and clip_rect must cover the N x 1 result (docs/gram_matrix_spatial_mean.md).")
        .def(py::init([](const DeviceArg& device, py::handle alpha) {
                 const float a = alpha.is_none() ? 1.0f : fromPython<float>(alpha, "alpha");
                 return std::make_shared<NNGramMatrixCalculation>(toDevice(device, "device"), a);
             }),
             py::arg("device"), py::arg("alpha") = py::none(),
             "-[MPSNNGramMatrixCalculation initWithDevice:] (alpha 1) / -initWithDevice:alpha:")
        .def_property("alpha", getter(&NNGramMatrixCalculation::alpha),
                      setter(&NNGramMatrixCalculation::alpha, "alpha"), "MPSNNGramMatrixCalculation.alpha");

    py::class_<NNGramMatrixCalculationGradient, CNNGradientKernel, std::shared_ptr<NNGramMatrixCalculationGradient>>(
        m, "NNGramMatrixCalculationGradient",
        "MPSNNGramMatrixCalculationGradient: dX[p][f] = alpha * sum over c of X[p][c] * (Gr[f][c] + Gr[c][f]). "
        "source_gradient = Gr (N x 1 x N), source_image = the forward source X, gradient_state = the forward's state.")
        .def(py::init([](const DeviceArg& device, py::handle alpha) {
                 const float a = alpha.is_none() ? 1.0f : fromPython<float>(alpha, "alpha");
                 return std::make_shared<NNGramMatrixCalculationGradient>(toDevice(device, "device"), a);
             }),
             py::arg("device"), py::arg("alpha") = py::none(),
             "-[MPSNNGramMatrixCalculationGradient initWithDevice:] (alpha 1) / -initWithDevice:alpha:")
        .def_property("alpha", getter(&NNGramMatrixCalculationGradient::alpha),
                      setter(&NNGramMatrixCalculationGradient::alpha, "alpha"),
                      "MPSNNGramMatrixCalculationGradient.alpha");

    py::class_<NNReductionSpatialMean, CNNKernel, std::shared_ptr<NNReductionSpatialMean>>(
        m, "NNReductionSpatialMean",
        "The spatial mean of MPSNNReductionSpatialMeanNode (mpsgrad name; Apple publishes no kernel class): one "
        "pixel per image holding each feature channel's mean over clip_rect_source (default: the whole source), "
        "written at clip_rect.origin; the returning encode forms make a 1 x 1 destination.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNReductionSpatialMean>(toDevice(device, "device")); }),
             py::arg("device"), "Kernel of MPSNNReductionSpatialMeanNode (initWithDevice:)")
        .def_property(
            "clip_rect_source", [](const NNReductionSpatialMean& k) { return k.clipRectSource; },
            [](NNReductionSpatialMean& k, py::handle v) { k.clipRectSource = toRegion(v, "clip_rect_source"); },
            "MPSNNUnaryReductionNode.clipRectSource: the source region averaged (intersected with the source)");

    py::class_<NNReductionSpatialMeanGradient, CNNGradientKernel, std::shared_ptr<NNReductionSpatialMeanGradient>>(
        m, "NNReductionSpatialMeanGradient",
        "The gradient of the spatial mean (MPSNNReductionSpatialMeanGradientNode's kernel; mpsgrad name): "
        "dX = G / (w * h) over the forward's source region, 0 elsewhere.")
        .def(py::init([](const DeviceArg& device) {
                 return std::make_shared<NNReductionSpatialMeanGradient>(toDevice(device, "device"));
             }),
             py::arg("device"), "Kernel of MPSNNReductionSpatialMeanGradientNode (initWithDevice:)");
}

}  // namespace mpsgrad::python
