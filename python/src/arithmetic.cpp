// Bindings of the arithmetic family (MPSCNNMath.h): CNNAdd / CNNSubtract / CNNMultiply /
// CNNDivide, NNCompare, CNNArithmeticGradientState and the gradient filters.
#include <cfloat>

#include "bindings.h"
#include "kernels/arithmetic.h"

namespace mpsgrad::python {
namespace {

Device arithmeticDevice(const DeviceArg& device) { return toDevice(device, "device"); }

// A 0/1 stride property: ValueError naming the property for anything else.
template <class Cls, class K>
void bindStride(Cls& c, const char* name, int64_t K::*member, const char* doc) {
    c.def_property(
        name, [member](const K& k) { return k.*member; },
        [member, name](K& k, int64_t v) {
            if (v != 0 && v != 1) throwValueError(name, ": must be 0 (broadcast) or 1, got ", v);
            k.*member = v;
        },
        doc);
}

const char* kForwardDoc =
    "r = clamp((primary_scale * x) OP (secondary_scale * y) + bias, minimum_value, maximum_value) with x = primary, "
    "y = secondary. Broadcasting: primary/secondary_stride_in_pixels_x/y and primary/secondary_stride_in_feature_"
    "channels are 0 or 1; 0 repeats one column / row / channel of that input (all pixel strides 0: a scalar). "
    "Training: encode(..., destination_state=result_state(...)) or destination_state_is_temporary=... writes a "
    "CNNArithmeticGradientState (clamp mask, forward parameters) for the gradient filters.";

}  // namespace

void bindArithmetic(py::module_& m) {
    py::enum_<NNComparisonType>(m, "NNComparisonType", "MPSNNComparisonType")
        .value("EQUAL", NNComparisonType::Equal)
        .value("NOT_EQUAL", NNComparisonType::NotEqual)
        .value("LESS", NNComparisonType::Less)
        .value("LESS_OR_EQUAL", NNComparisonType::LessOrEqual)
        .value("GREATER", NNComparisonType::Greater)
        .value("GREATER_OR_EQUAL", NNComparisonType::GreaterOrEqual);

    py::class_<CNNArithmeticGradientState, NNBinaryGradientState, std::shared_ptr<CNNArithmeticGradientState>>(
        m, "CNNArithmeticGradientState",
        "MPSCNNArithmeticGradientState: the forward arithmetic kernel's parameters, its operands' broadcast "
        "parameters, the clamp mask (when a clamp is set) and, for CNNDivide, a copy of y.")
        .def_property_readonly("has_clamp_mask", [](const CNNArithmeticGradientState& s) { return s.hasClampMask; })
        .def_property_readonly("primary_scale", [](const CNNArithmeticGradientState& s) { return s.primaryScale; })
        .def_property_readonly("secondary_scale", [](const CNNArithmeticGradientState& s) { return s.secondaryScale; })
        .def_property_readonly("minimum_value", [](const CNNArithmeticGradientState& s) { return s.minimumValue; })
        .def_property_readonly("maximum_value", [](const CNNArithmeticGradientState& s) { return s.maximumValue; });

    py::class_<CNNArithmetic, CNNBinaryKernel, std::shared_ptr<CNNArithmetic>> arithmetic(
        m, "CNNArithmetic", (std::string("MPSCNNArithmetic (abstract). ") + kForwardDoc).c_str());
    arithmetic.def_property("primary_scale", getter(&CNNArithmetic::primaryScale), setter(&CNNArithmetic::primaryScale, "primary_scale"), "MPSCNNArithmetic.primaryScale [1]")
        .def_property("secondary_scale", getter(&CNNArithmetic::secondaryScale), setter(&CNNArithmetic::secondaryScale, "secondary_scale"), "MPSCNNArithmetic.secondaryScale [1]")
        .def_property("bias", getter(&CNNArithmetic::bias), setter(&CNNArithmetic::bias, "bias"), "MPSCNNArithmetic.bias [0]")
        .def_property("minimum_value", getter(&CNNArithmetic::minimumValue), setter(&CNNArithmetic::minimumValue, "minimum_value"), "MPSCNNArithmetic.minimumValue [-FLT_MAX]")
        .def_property("maximum_value", getter(&CNNArithmetic::maximumValue), setter(&CNNArithmetic::maximumValue, "maximum_value"), "MPSCNNArithmetic.maximumValue [FLT_MAX]");
    bindStride(arithmetic, "primary_stride_in_feature_channels", &CNNArithmetic::primaryStrideInFeatureChannels,
               "MPSCNNArithmetic.primaryStrideInFeatureChannels [1]: 0 broadcasts channel 0 of the primary's slice");
    bindStride(arithmetic, "secondary_stride_in_feature_channels", &CNNArithmetic::secondaryStrideInFeatureChannels,
               "MPSCNNArithmetic.secondaryStrideInFeatureChannels [1]: 0 broadcasts channel 0 of the secondary's "
               "slice");

    py::class_<CNNAdd, CNNArithmetic, std::shared_ptr<CNNAdd>>(m, "CNNAdd", "MPSCNNAdd: OP = +")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNAdd>(arithmeticDevice(device)); }),
             py::arg("device"), "-[MPSCNNAdd initWithDevice:]");
    py::class_<CNNSubtract, CNNArithmetic, std::shared_ptr<CNNSubtract>>(m, "CNNSubtract", "MPSCNNSubtract: OP = -")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNSubtract>(arithmeticDevice(device)); }),
             py::arg("device"), "-[MPSCNNSubtract initWithDevice:]");
    py::class_<CNNMultiply, CNNArithmetic, std::shared_ptr<CNNMultiply>>(m, "CNNMultiply", "MPSCNNMultiply: OP = *")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNMultiply>(arithmeticDevice(device)); }),
             py::arg("device"), "-[MPSCNNMultiply initWithDevice:]");
    py::class_<CNNDivide, CNNArithmetic, std::shared_ptr<CNNDivide>>(
        m, "CNNDivide", "MPSCNNDivide: OP = / (IEEE division; x/0 gives ±inf or NaN)")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<CNNDivide>(arithmeticDevice(device)); }),
             py::arg("device"), "-[MPSCNNDivide initWithDevice:]");
    py::class_<NNCompare, CNNArithmetic, std::shared_ptr<NNCompare>>(
        m, "NNCompare",
        "MPSNNCompare: r = clamp((compare(primary_scale*x, secondary_scale*y) ? 1 : 0) + bias, minimum_value, "
        "maximum_value); forward only (no gradient, no state). threshold is used by EQUAL / NOT_EQUAL only: "
        "|x - y| <= threshold.")
        .def(py::init([](const DeviceArg& device) { return std::make_shared<NNCompare>(arithmeticDevice(device)); }),
             py::arg("device"), "-[MPSNNCompare initWithDevice:]")
        .def_property("comparison_type", getter(&NNCompare::comparisonType), setter(&NNCompare::comparisonType, "comparison_type"), "MPSNNCompare.comparisonType [EQUAL]")
        .def_property("threshold", getter(&NNCompare::threshold), setter(&NNCompare::threshold, "threshold"), "MPSNNCompare.threshold [0]");

    py::class_<CNNArithmeticGradient, CNNGradientKernel, std::shared_ptr<CNNArithmeticGradient>> gradient(
        m, "CNNArithmeticGradient",
        "MPSCNNArithmeticGradient (abstract): the gradient of a forward arithmetic kernel with respect to one input "
        "(is_secondary_source_filter). source_gradient = G, source_image = the OTHER forward operand (y for the "
        "primary filter, x for the secondary filter; read by multiply and divide only), gradient_state = the forward "
        "CNNArithmeticGradientState. Exact chain rule through the scales (mpsgrad): the scales, strides and clamp "
        "bounds describe the forward op and the returning encode forms copy them from the state; broadcast axes are "
        "summed so the result has its input's shape; the clamp is differentiated through the mask in the state.");
    gradient.def_property("primary_scale", getter(&CNNArithmeticGradient::primaryScale), setter(&CNNArithmeticGradient::primaryScale, "primary_scale"),
                           "MPSCNNArithmeticGradient.primaryScale (the forward pS)")
        .def_property("secondary_scale", getter(&CNNArithmeticGradient::secondaryScale), setter(&CNNArithmeticGradient::secondaryScale, "secondary_scale"),
                       "MPSCNNArithmeticGradient.secondaryScale (the forward sS)")
        .def_property("bias", getter(&CNNArithmeticGradient::bias), setter(&CNNArithmeticGradient::bias, "bias"), "MPSCNNArithmeticGradient.bias (ignored, as in MPS)")
        .def_property("minimum_value", getter(&CNNArithmeticGradient::minimumValue), setter(&CNNArithmeticGradient::minimumValue, "minimum_value"),
                       "MPSCNNArithmeticGradient.minimumValue (informational: the state's clamp mask is applied)")
        .def_property("maximum_value", getter(&CNNArithmeticGradient::maximumValue), setter(&CNNArithmeticGradient::maximumValue, "maximum_value"),
                       "MPSCNNArithmeticGradient.maximumValue (informational: the state's clamp mask is applied)")
        .def_property_readonly("is_secondary_source_filter", &CNNArithmeticGradient::isSecondarySourceFilter,
                               "MPSCNNArithmeticGradient.isSecondarySourceFilter");
    bindStride(gradient, "primary_stride_in_feature_channels",
               &CNNArithmeticGradient::primaryStrideInFeatureChannels,
               "The forward primary's feature-channel stride (must equal the forward kernel's)");
    bindStride(gradient, "secondary_stride_in_feature_channels",
               &CNNArithmeticGradient::secondaryStrideInFeatureChannels,
               "MPSCNNArithmeticGradient.secondaryStrideInFeatureChannels (must equal the forward kernel's)");

    py::class_<CNNAddGradient, CNNArithmeticGradient, std::shared_ptr<CNNAddGradient>>(
        m, "CNNAddGradient", "MPSCNNAddGradient: primary dX = primary_scale*G, secondary dY = secondary_scale*G")
        .def(py::init([](const DeviceArg& device, Hinted<bool> secondary) {
                 return std::make_shared<CNNAddGradient>(arithmeticDevice(device),
                                                 toBool(secondary, "is_secondary_source_filter"));
             }),
             py::arg("device"), py::arg("is_secondary_source_filter"),
             "-[MPSCNNAddGradient initWithDevice:isSecondarySourceFilter:]");
    py::class_<CNNSubtractGradient, CNNArithmeticGradient, std::shared_ptr<CNNSubtractGradient>>(
        m, "CNNSubtractGradient",
        "MPSCNNSubtractGradient: primary dX = primary_scale*G, secondary dY = -secondary_scale*G (MPS code that "
        "sets primary_scale = -1 on the secondary filter still gets -G)")
        .def(py::init([](const DeviceArg& device, Hinted<bool> secondary) {
                 return std::make_shared<CNNSubtractGradient>(arithmeticDevice(device),
                                                 toBool(secondary, "is_secondary_source_filter"));
             }),
             py::arg("device"), py::arg("is_secondary_source_filter"),
             "-[MPSCNNSubtractGradient initWithDevice:isSecondarySourceFilter:]");
    py::class_<CNNMultiplyGradient, CNNArithmeticGradient, std::shared_ptr<CNNMultiplyGradient>>(
        m, "CNNMultiplyGradient",
        "MPSCNNMultiplyGradient: primary dX = pS*sS*y*G (source_image = y), secondary dY = pS*sS*x*G "
        "(source_image = x)")
        .def(py::init([](const DeviceArg& device, Hinted<bool> secondary) {
                 return std::make_shared<CNNMultiplyGradient>(arithmeticDevice(device),
                                                 toBool(secondary, "is_secondary_source_filter"));
             }),
             py::arg("device"), py::arg("is_secondary_source_filter"),
             "-[MPSCNNMultiplyGradient initWithDevice:isSecondarySourceFilter:]");
    py::class_<CNNDivideGradient, CNNArithmeticGradient, std::shared_ptr<CNNDivideGradient>>(
        m, "CNNDivideGradient",
        "mpsgrad extension (MPS has no divide gradient): primary dX = G*pS/(sS*y) (source_image = y), secondary "
        "dY = -G*pS*x/(sS*y^2) (source_image = x; y is the copy CNNDivide stored in the state)")
        .def(py::init([](const DeviceArg& device, Hinted<bool> secondary) {
                 return std::make_shared<CNNDivideGradient>(arithmeticDevice(device),
                                                 toBool(secondary, "is_secondary_source_filter"));
             }),
             py::arg("device"), py::arg("is_secondary_source_filter"),
             "CNNDivideGradient(device, is_secondary_source_filter), shaped like the MPS arithmetic gradient inits");
}

}  // namespace mpsgrad::python
