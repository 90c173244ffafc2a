// Bindings of the local normalization kernels of MPSCNNNormalization.h: cross-channel (LRN),
// spatial and local contrast normalization, their gradients and their gradient state.
#include <deque>
#include <string>

#include "bindings.h"
#include "conversions.h"
#include "kernels/normalization.h"

namespace mpsgrad::python {
namespace {

using FloatArg = Arg<FloatHint>;

// A read/write float parameter (alpha, beta, ...) of a kernel's LocalNormalizationParameters.
template <class K, class Cls>
void defParameter(Cls& cls, const char* name, float LocalNormalizationParameters::*member, const char* doc) {
    cls.def_property(
        name, [member](const K& k) { return k.parameters.*member; },
        [member, name](K& k, FloatArg v) { k.parameters.*member = float(toDouble(v.value, name)); }, doc);
}

// alpha, beta, delta (and p0, pm, ps for local contrast) of a forward or gradient class.
template <class K, class Cls>
void defParameters(Cls& cls, const char* mpsClass, bool contrast) {
    const std::string prefix = std::string(mpsClass) + ".";
    static std::deque<std::string> docs;  // the docstrings must outlive the bindings (stable addresses)
    auto doc = [&](const char* property, const char* rest) {
        docs.push_back(prefix + property + rest);
        return docs.back().c_str();
    };
    defParameter<K>(cls, "alpha", &LocalNormalizationParameters::alpha,
                    doc("alpha", contrast ? " (default 0.0; must be >= 0)" : " (default 1.0; must be >= 0)"));
    defParameter<K>(cls, "beta", &LocalNormalizationParameters::beta,
                    doc("beta", contrast ? " (default 0.5)" : " (default 5.0)"));
    defParameter<K>(cls, "delta", &LocalNormalizationParameters::delta,
                    doc("delta", contrast ? " (default 1/1024; must be > 0)" : " (default 1.0; must be > 0)"));
    if (!contrast) return;
    defParameter<K>(cls, "p0", &LocalNormalizationParameters::p0, doc("p0", " (default 1.0): weight of the mean"));
    defParameter<K>(cls, "pm", &LocalNormalizationParameters::pm, doc("pm", " (default 0.0): added to the result"));
    defParameter<K>(cls, "ps", &LocalNormalizationParameters::ps, doc("ps", " (default 1.0): scale of the result"));
}

// A class with -initWithDevice:kernelSize: (cross-channel).
template <class T, class Parent>
py::class_<T, Parent, std::shared_ptr<T>> bindChannelClass(py::module_& m, const char* name, const char* doc,
                                                             const char* selector) {
    py::class_<T, Parent, std::shared_ptr<T>> cls(m, name, doc);
    cls.def(py::init([](const DeviceArg& device, IntArg size) {
                return std::make_shared<T>(toDevice(device), toInt64(size.value, "kernel_size"));
            }),
            py::arg("device"), py::arg("kernel_size") = 5, selector)
        .def_property_readonly("kernel_size", &T::kernelSize, "kernelSize: channels in the window (default 5)");
    return cls;
}

// A class with -initWithDevice:kernelWidth:kernelHeight: (spatial, local contrast).
template <class T, class Parent>
py::class_<T, Parent, std::shared_ptr<T>> bindWindowClass(py::module_& m, const char* name, const char* doc,
                                                            const char* selector) {
    py::class_<T, Parent, std::shared_ptr<T>> cls(m, name, doc);
    cls.def(py::init([](const DeviceArg& device, IntArg kw, IntArg kh) {
                return std::make_shared<T>(toDevice(device), toInt64(kw.value, "kernel_width"),
                                           toInt64(kh.value, "kernel_height"));
            }),
            py::arg("device"), py::arg("kernel_width"), py::arg("kernel_height"), selector);
    return cls;
}

constexpr const char* kCrossChannelDoc =
    "MPSCNNCrossChannelNormalization (LRN across feature channels): Y(k) = X(k) * L(k)^-beta with "
    "L(k) = delta + alpha / kernel_size * sum of X(q)^2 over q in [k - (kernel_size >> 1), "
    "k + ((kernel_size - 1) >> 1)] cut to the processed channels; PyTorch's local_response_norm(size=kernel_size, "
    "alpha=alpha, beta=beta, k=delta).";
constexpr const char* kSpatialDoc =
    "MPSCNNSpatialNormalization: Y = X * (delta + alpha / N * sum of X^2 over the kernel_width x kernel_height "
    "window)^-beta, N = kernel_width * kernel_height, per channel. The window of destination pixel "
    "clip_rect.origin + p is centered at source pixel offset + p, taps from center - (kernel >> 1); off-image taps "
    "read 0 (ImageEdgeMode.ZERO only). kernel_width must equal kernel_height.";
constexpr const char* kContrastDoc =
    "MPSCNNLocalContrastNormalization: Y = pm + ps * (X - p0 * M) / (delta + alpha * V)^beta with M and V the "
    "mean and (population) variance of the window, per channel; windows as CNNSpatialNormalization. "
    "kernel_width must equal kernel_height.";
constexpr const char* kGradientDoc =
    " primary = dL/dY, secondary = the forward INPUT X; every parameter must match the forward kernel's. "
    "destination_image_descriptor copies the forward geometry from the state: primary_offset = forward clip origin, "
    "secondary_offset = forward offset (window centers), clip_rect = the whole dX (X's coordinates). The exact "
    "derivatives are in docs/normalization.md.";

}  // namespace

void bindLocalNormalization(py::module_& m) {
    py::enum_<LocalNormalizationKind>(m, "LocalNormalizationKind",
                                      "Which forward kernel a CNNLocalNormalizationGradientState comes from")
        .value("CROSS_CHANNEL", LocalNormalizationKind::CrossChannel)
        .value("SPATIAL", LocalNormalizationKind::Spatial)
        .value("LOCAL_CONTRAST", LocalNormalizationKind::LocalContrast);

    py::class_<CNNLocalNormalizationGradientState, NNGradientState,
               std::shared_ptr<CNNLocalNormalizationGradientState>>(
        m, "CNNLocalNormalizationGradientState",
        "The MPSNNGradientState the cross-channel, spatial and local contrast normalization kernels write for their "
        "gradients: the forward geometry, window and parameters")
        .def_property_readonly("kind", [](const CNNLocalNormalizationGradientState& s) { return s.kind; })
        .def_property_readonly("alpha", [](const CNNLocalNormalizationGradientState& s) { return s.parameters.alpha; })
        .def_property_readonly("beta", [](const CNNLocalNormalizationGradientState& s) { return s.parameters.beta; })
        .def_property_readonly("delta", [](const CNNLocalNormalizationGradientState& s) { return s.parameters.delta; });

    auto cross = bindChannelClass<CNNCrossChannelNormalization, CNNKernel>(
        m, "CNNCrossChannelNormalization", kCrossChannelDoc, "-[MPSCNNCrossChannelNormalization initWithDevice:kernelSize:]");
    defParameters<CNNCrossChannelNormalization>(cross, "MPSCNNCrossChannelNormalization", false);
    auto spatial = bindWindowClass<CNNSpatialNormalization, CNNKernel>(
        m, "CNNSpatialNormalization", kSpatialDoc,
        "-[MPSCNNSpatialNormalization initWithDevice:kernelWidth:kernelHeight:]");
    defParameters<CNNSpatialNormalization>(spatial, "MPSCNNSpatialNormalization", false);
    auto contrast = bindWindowClass<CNNLocalContrastNormalization, CNNKernel>(
        m, "CNNLocalContrastNormalization", kContrastDoc,
        "-[MPSCNNLocalContrastNormalization initWithDevice:kernelWidth:kernelHeight:]");
    defParameters<CNNLocalContrastNormalization>(contrast, "MPSCNNLocalContrastNormalization", true);

    static const std::string crossGradientDoc = std::string("MPSCNNCrossChannelNormalizationGradient:") + kGradientDoc;
    static const std::string spatialGradientDoc = std::string("MPSCNNSpatialNormalizationGradient:") + kGradientDoc;
    static const std::string contrastGradientDoc =
        std::string("MPSCNNLocalContrastNormalizationGradient:") + kGradientDoc;
    auto crossGradient = bindChannelClass<CNNCrossChannelNormalizationGradient, CNNGradientKernel>(
        m, "CNNCrossChannelNormalizationGradient", crossGradientDoc.c_str(),
        "-[MPSCNNCrossChannelNormalizationGradient initWithDevice:kernelSize:]");
    defParameters<CNNCrossChannelNormalizationGradient>(crossGradient, "MPSCNNCrossChannelNormalizationGradient",
                                                        false);
    auto spatialGradient = bindWindowClass<CNNSpatialNormalizationGradient, CNNGradientKernel>(
        m, "CNNSpatialNormalizationGradient", spatialGradientDoc.c_str(),
        "-[MPSCNNSpatialNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]");
    spatialGradient.def_property_readonly("kernel_width", &CNNSpatialNormalizationGradient::kernelWidth)
        .def_property_readonly("kernel_height", &CNNSpatialNormalizationGradient::kernelHeight);
    defParameters<CNNSpatialNormalizationGradient>(spatialGradient, "MPSCNNSpatialNormalizationGradient", false);
    auto contrastGradient = bindWindowClass<CNNLocalContrastNormalizationGradient, CNNGradientKernel>(
        m, "CNNLocalContrastNormalizationGradient", contrastGradientDoc.c_str(),
        "-[MPSCNNLocalContrastNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]");
    contrastGradient.def_property_readonly("kernel_width", &CNNLocalContrastNormalizationGradient::kernelWidth)
        .def_property_readonly("kernel_height", &CNNLocalContrastNormalizationGradient::kernelHeight);
    defParameters<CNNLocalContrastNormalizationGradient>(contrastGradient, "MPSCNNLocalContrastNormalizationGradient",
                                                         true);
}

}  // namespace mpsgrad::python
