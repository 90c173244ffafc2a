// Bindings of the optimizers (MPSNNOptimizers.h) and of the plain vectors they update
// (MPSVector, MPSVectorDescriptor; mpsgrad's core/vector.h).
#include <cfloat>
#include <cstring>

#include "aliasing.h"
#include "bindings.h"
#include "core/vector.h"
#include "kernels/batch_normalization.h"
#include "kernels/convolution.h"
#include "kernels/optimizers.h"

namespace mpsgrad::python {
namespace {

Device optimizerDevice(const DeviceArg& device) {
    if (device.is_none()) return Device::defaultDevice();
    if (py::isinstance<py::str>(device)) return Device(device.cast<std::string>());
    if (!py::isinstance<Device>(device))
        throwTypeError("device: expected a Device or a device name, got ", std::string(py::repr(py::type::of(device))));
    return device.cast<Device>();
}

// ---- vectors

VectorDescriptor makeDescriptor(int64_t length, int64_t vectors, const py::object& vectorBytes, DataType dataType) {
    if (length < 1 || length > INT32_MAX) throwValueError("length: must be in [1, 2^31 - 1], got ", length);
    if (vectors < 1 || vectors > INT32_MAX) throwValueError("vectors: must be in [1, 2^31 - 1], got ", vectors);
    size_t bytes = VectorDescriptor::vectorBytesForLength(length, dataType);
    if (!vectorBytes.is_none()) {
        const int64_t b = vectorBytes.cast<int64_t>();
        if (b < 0) throwValueError("vector_bytes: must be >= 0, got ", b);
        bytes = size_t(b);
    }
    return VectorDescriptor::make(length, vectors, bytes, dataType);
}

// Zero-copy view: (length,) for one vector, else (vectors, length) with the vector_bytes stride.
py::array vectorView(const Vector& v) {
    if (v.vectors() == 1) return floatView(v.data(), {py::ssize_t(v.length())});
    return floatView(v.data(), {py::ssize_t(v.vectors()), py::ssize_t(v.length())},
                     {py::ssize_t(v.vectorBytes() / sizeof(float)), 1});
}

// A new vector holding a copy of a 1-D (length,) or 2-D (vectors, length) float array.
VectorPtr vectorFromNumpy(const py::object& data, const DeviceArg& device) {
    auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(data);
    if (!array) throwTypeError("array: expected array-like float data");
    if (array.ndim() != 1 && array.ndim() != 2)
        throwValueError("array: expected shape (length,) or (vectors, length), got ", array.ndim(), " dimensions");
    const int64_t vectors = array.ndim() == 2 ? int64_t(array.shape(0)) : 1;
    const int64_t length = int64_t(array.shape(array.ndim() - 1));
    auto v = std::make_shared<Vector>(optimizerDevice(device),
                                      makeDescriptor(length, vectors, py::none(), DataType::Float32));
    std::memcpy(v->data().floats(), array.data(), size_t(length) * size_t(vectors) * sizeof(float));
    return v;
}

VectorDescriptor descriptorArgument(const py::object& descriptor) {
    if (py::isinstance<py::int_>(descriptor))
        return makeDescriptor(descriptor.cast<int64_t>(), 1, py::none(), DataType::Float32);
    if (!py::isinstance<VectorDescriptor>(descriptor))
        throwTypeError("descriptor: expected a VectorDescriptor or a length, got ",
                       std::string(py::repr(py::type::of(descriptor))));
    return descriptor.cast<VectorDescriptor>();
}

// -initWithBuffer:offset:descriptor: over a Vector's storage (offset counted from its first
// element) or a writable float32 NumPy array (cpu).
VectorPtr vectorOverBuffer(py::handle buffer, const py::object& descriptor, py::handle offset, py::handle device) {
    const VectorDescriptor d = descriptorArgument(descriptor);
    AliasedStorage storage = aliasedStorage(buffer, device, "buffer");
    BufferSlice slice = aliasSlice(storage.slice, byteOffset(offset, "offset"), d.spanBytes(), "buffer", "offset");
    return std::make_shared<Vector>(storage.device, slice, d);
}

void bindVectors(py::module_& m) {
    py::class_<VectorDescriptor>(m, "VectorDescriptor",
                                 "MPSVectorDescriptor: `vectors` vectors of `length` float32 elements, "
                                 "`vector_bytes` apart")
        .def(py::init(&makeDescriptor), py::arg("length"), py::arg("vectors") = 1,
             py::arg("vector_bytes") = py::none(), py::arg_v("data_type", DataType::Float32, "DataType.FLOAT32"),
             "+vectorDescriptorWithLength:[vectors:vectorBytes:]dataType: (vector_bytes None: length * 4)")
        .def_static("vector_bytes_for_length", [](int64_t length, DataType t) {
            return VectorDescriptor::vectorBytesForLength(length, t);
        }, py::arg("length"), py::arg_v("data_type", DataType::Float32, "DataType.FLOAT32"),
            "+vectorBytesForLength:dataType:")
        .def_readonly("length", &VectorDescriptor::length)
        .def_readonly("vectors", &VectorDescriptor::vectors)
        .def_readonly("vector_bytes", &VectorDescriptor::vectorBytes)
        .def_readonly("data_type", &VectorDescriptor::dataType)
        .def("__repr__", [](const VectorDescriptor& d) {
            return "VectorDescriptor(length=" + std::to_string(d.length) + ", vectors=" + std::to_string(d.vectors) +
                   ", vector_bytes=" + std::to_string(d.vectorBytes) + ")";
        });

    py::class_<Vector, std::shared_ptr<Vector>>(
        m, "Vector",
        "MPSVector: float32 vectors in device memory. numpy() is a zero-copy view of the storage (read it after the "
        "command buffer that wrote it completed; write it before encoding).")
        .def(py::init([](const DeviceArg& device, py::object descriptor) {
                 return std::make_shared<Vector>(optimizerDevice(device), descriptorArgument(descriptor));
             }),
             py::arg("device"), py::arg("descriptor"),
             "-[MPSVector initWithDevice:descriptor:] (zero-filled); descriptor may be a length")
        .def(py::init(&vectorOverBuffer), py::kw_only(), py::arg("buffer"), py::arg("descriptor"),
             py::arg("offset") = 0, py::arg("device") = py::none(),
             "-[MPSVector initWithBuffer:offset:descriptor:] (and -initWithBuffer:descriptor:): a Vector over another "
             "object's memory, no copy. `buffer` is a Vector (offset counts bytes from its first element; its "
             "device) or a writable C-contiguous float32 NumPy array (the cpu device only). `offset` must be a "
             "multiple of 4 and the buffer must hold the descriptor's span after it (ValueError).")
        .def_static("from_numpy", &vectorFromNumpy, py::arg("array"), py::arg("device") = py::none(),
                    "A new Vector holding a copy of a (length,) or (vectors, length) array")
        .def_property_readonly("device", &Vector::device)
        .def_property_readonly("length", &Vector::length)
        .def_property_readonly("vectors", &Vector::vectors)
        .def_property_readonly("vector_bytes", &Vector::vectorBytes)
        .def_property_readonly("data_type", &Vector::dataType)
        .def_property_readonly("offset", &Vector::offset)
        .def_property_readonly("resource_size", &Vector::resourceSize, "-[MPSVector resourceSize]")
        .def("numpy", &vectorView, "Zero-copy writable view: (length,) or (vectors, length)")
        .def("to_numpy", [](const Vector& v) { return vectorView(v).attr("copy")(); }, "A copy of the elements")
        .def("__repr__", [](const Vector& v) {
            return "Vector(length=" + std::to_string(v.length()) + ", vectors=" + std::to_string(v.vectors()) +
                   ", device='" + v.device().name() + "')";
        });
}

// ---- optimizers

NNOptimizerDescriptor descriptorOrLearningRate(const py::object& learningRate, const py::object& descriptor) {
    if (!descriptor.is_none()) {
        if (!learningRate.is_none())
            throwTypeError("learning_rate: give either learning_rate or optimizer_descriptor, not both");
        if (!py::isinstance<NNOptimizerDescriptor>(descriptor))
            throwTypeError("optimizer_descriptor: expected an NNOptimizerDescriptor, got ",
                           std::string(py::repr(py::type::of(descriptor))));
        return descriptor.cast<NNOptimizerDescriptor>();
    }
    NNOptimizerDescriptor d;
    if (!learningRate.is_none()) d.learningRate = learningRate.cast<float>();
    d.validate();
    return d;
}

// A descriptor field setter that validates the whole descriptor and restores it on error.
template <class T>
auto checkedSetter(T NNOptimizerDescriptor::*field) {
    return [field](NNOptimizerDescriptor& d, T value) {
        const NNOptimizerDescriptor before = d;
        d.*field = value;
        try {
            d.validate();
        } catch (...) {
            d = before;
            throw;
        }
    };
}

std::vector<VectorPtr> vectorList(const py::object& value, const char* what) {
    if (value.is_none()) return {};
    if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value))
        throwTypeError(what, ": expected a list of Vectors or None");
    std::vector<VectorPtr> out;
    for (py::handle item : value) {
        if (!py::isinstance<Vector>(item))
            throwTypeError(what, ": expected a list of Vectors, got an item of type ",
                           std::string(py::repr(py::type::of(item))));
        out.push_back(item.cast<VectorPtr>());
    }
    return out;
}

const Vector& resultOr(const VectorPtr& result, const Vector& values) { return result ? *result : values; }

using BNState = CNNBatchNormalizationState;
using GammaBeta = std::shared_ptr<CNNNormalizationGammaAndBetaState>;

CNNNormalizationGammaAndBetaState* requiredResult(const GammaBeta& result) {
    if (!result) throwValueError("result_state: required (a CNNNormalizationGammaAndBetaState)");
    return result.get();
}

// The batch-normalization encodes take the gradient + source form first, so that a call with one
// state (its third argument a list or None, not a state) falls through to the single-state form.
constexpr const char* kBnSourceDoc = " (batch_normalization_gradient_state + batch_normalization_source_state form)";

void bindOptimizerBase(py::module_& m) {
    py::enum_<NNRegularizationType>(m, "NNRegularizationType", "MPSNNRegularizationType")
        .value("NONE", NNRegularizationType::None)
        .value("L1", NNRegularizationType::L1)
        .value("L2", NNRegularizationType::L2);

    py::class_<NNOptimizerDescriptor>(
        m, "NNOptimizerDescriptor",
        "MPSNNOptimizerDescriptor. Gradient preprocessing per element: g = clamp(g, gradient_clip_min, "
        "gradient_clip_max) if apply_gradient_clipping; g = gradient_rescale * g; g += regularization_scale * "
        "sign(w) (L1) or * w (L2).")
        .def(py::init([](float lr, float rescale, bool clip, float clipMax, float clipMin, NNRegularizationType type,
                         float scale) {
                 return NNOptimizerDescriptor(lr, rescale, clip, clipMax, clipMin, type, scale);
             }),
             py::arg("learning_rate") = 0.001f, py::arg("gradient_rescale") = 1.0f,
             py::arg("apply_gradient_clipping") = false, py::arg("gradient_clip_max") = FLT_MAX,
             py::arg("gradient_clip_min") = -FLT_MAX,
             py::arg_v("regularization_type", NNRegularizationType::None, "NNRegularizationType.NONE"),
             py::arg("regularization_scale") = 0.0f,
             "-initWithLearningRate:gradientRescale:[applyGradientClipping:gradientClipMax:gradientClipMin:]"
             "regularizationType:regularizationScale:")
        .def_property("learning_rate", [](const NNOptimizerDescriptor& d) { return d.learningRate; },
                      checkedSetter(&NNOptimizerDescriptor::learningRate))
        .def_property("gradient_rescale", [](const NNOptimizerDescriptor& d) { return d.gradientRescale; },
                      checkedSetter(&NNOptimizerDescriptor::gradientRescale))
        .def_property("apply_gradient_clipping",
                      [](const NNOptimizerDescriptor& d) { return d.applyGradientClipping; },
                      checkedSetter(&NNOptimizerDescriptor::applyGradientClipping))
        .def_property("gradient_clip_max", [](const NNOptimizerDescriptor& d) { return d.gradientClipMax; },
                      checkedSetter(&NNOptimizerDescriptor::gradientClipMax))
        .def_property("gradient_clip_min", [](const NNOptimizerDescriptor& d) { return d.gradientClipMin; },
                      checkedSetter(&NNOptimizerDescriptor::gradientClipMin))
        .def_property("regularization_scale", [](const NNOptimizerDescriptor& d) { return d.regularizationScale; },
                      checkedSetter(&NNOptimizerDescriptor::regularizationScale))
        .def_property("regularization_type", [](const NNOptimizerDescriptor& d) { return d.regularizationType; },
                      checkedSetter(&NNOptimizerDescriptor::regularizationType));

    py::class_<NNOptimizer, Kernel, std::shared_ptr<NNOptimizer>>(
        m, "NNOptimizer", "MPSNNOptimizer (abstract): the descriptor's fields, read-only except as noted")
        .def_property_readonly("learning_rate", &NNOptimizer::learningRate)
        .def("set_learning_rate", &NNOptimizer::setLearningRate, py::arg("learning_rate"), "-setLearningRate:")
        .def_property_readonly("gradient_rescale", &NNOptimizer::gradientRescale)
        .def_property("apply_gradient_clipping", &NNOptimizer::applyGradientClipping,
                      &NNOptimizer::setApplyGradientClipping, "MPSNNOptimizer.applyGradientClipping (read/write)")
        .def_property_readonly("gradient_clip_max", &NNOptimizer::gradientClipMax)
        .def_property_readonly("gradient_clip_min", &NNOptimizer::gradientClipMin)
        .def_property_readonly("regularization_scale", &NNOptimizer::regularizationScale)
        .def_property_readonly("regularization_type", &NNOptimizer::regularizationType);
}

void bindSgd(py::module_& m) {
    using SGD = NNOptimizerStochasticGradientDescent;
    py::class_<SGD, NNOptimizer, std::shared_ptr<SGD>>(
        m, "NNOptimizerStochasticGradientDescent",
        "MPSNNOptimizerStochasticGradientDescent: m = mu*m + lr*g, w -= m; Nesterov: m = mu*m + g, "
        "w -= lr*(g + mu*m); no momentum vector: w -= lr*g")
        .def(py::init([](const DeviceArg& device, py::object lr, float momentum, py::object nesterov, py::object nestrov,
                         py::object descriptor) {
                 if (!nesterov.is_none() && !nestrov.is_none() && nesterov.cast<bool>() != nestrov.cast<bool>())
                     throwValueError("use_nesterov_momentum: differs from use_nestrov_momentum (the same property "
                                     "under its original MPS spelling); give one of them");
                 const bool useNesterov = !nesterov.is_none() ? nesterov.cast<bool>()
                                                              : (!nestrov.is_none() && nestrov.cast<bool>());
                 return std::make_shared<SGD>(optimizerDevice(device), momentum, useNesterov,
                                              descriptorOrLearningRate(lr, descriptor));
             }),
             py::arg("device"), py::arg("learning_rate") = py::none(), py::kw_only(),
             py::arg("momentum_scale") = 0.0f, py::arg("use_nesterov_momentum") = py::none(),
             py::arg("use_nestrov_momentum") = py::none(), py::arg("optimizer_descriptor") = py::none(),
             "-initWithDevice:learningRate: / -initWithDevice:momentumScale:useNestrovMomentum:optimizerDescriptor:")
        .def_property_readonly("momentum_scale", &SGD::momentumScale)
        .def_property_readonly("use_nesterov_momentum", &SGD::useNesterovMomentum)
        .def_property_readonly("use_nestrov_momentum", &SGD::useNesterovMomentum,
                               "MPS's original (misspelled) name of use_nesterov_momentum")
        .def("encode", [](SGD& o, CommandBuffer& cb, const Vector& g, const Vector& w, const VectorPtr& momentum,
                          const VectorPtr& result) {
                 o.encode(cb, g, w, momentum.get(), resultOr(result, w));
             },
             py::arg("command_buffer"), py::arg("input_gradient_vector"), py::arg("input_values_vector"),
             py::arg("input_momentum_vector") = py::none(), py::arg("result_values_vector") = py::none(),
             "-encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:resultValuesVector: "
             "(result None: in place)")
        .def("encode", [](SGD& o, CommandBuffer& cb, CNNConvolutionGradientState& gs,
                          CNNConvolutionWeightsAndBiasesState& source, py::object momentum,
                          const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& result) {
                 o.encode(cb, gs, source, vectorList(momentum, "input_momentum_vectors"), result.get());
             },
             py::arg("command_buffer"), py::arg("convolution_gradient_state"), py::arg("convolution_source_state"),
             py::arg("input_momentum_vectors") = py::none(), py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:"
             "resultState: ([weights] or [weights, biases]; result None: in place)")
        .def("encode", [](SGD& o, CommandBuffer& cb, BNState& gs, BNState& source, py::object momentum,
                          const GammaBeta& result) {
                 o.encode(cb, gs, &source, vectorList(momentum, "input_momentum_vectors"), requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_gradient_state"),
             py::arg("batch_normalization_source_state"), py::arg("input_momentum_vectors") = py::none(),
             py::arg("result_state") = py::none(),
             (std::string("-encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:"
                          "inputMomentumVectors:resultState:") + kBnSourceDoc).c_str())
        .def("encode", [](SGD& o, CommandBuffer& cb, BNState& state, py::object momentum, const GammaBeta& result) {
                 o.encode(cb, state, nullptr, vectorList(momentum, "input_momentum_vectors"), requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_state"),
             py::arg("input_momentum_vectors") = py::none(), py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:resultState: ([gamma] or "
             "[gamma, beta]; result_state, a CNNNormalizationGammaAndBetaState, is required)");
}

void bindRmsProp(py::module_& m) {
    py::class_<NNOptimizerRMSProp, NNOptimizer, std::shared_ptr<NNOptimizerRMSProp>>(
        m, "NNOptimizerRMSProp", "MPSNNOptimizerRMSProp: s = decay*s + (1-decay)*g^2, w -= lr*g/(sqrt(s) + epsilon)")
        .def(py::init([](const DeviceArg& device, py::object lr, double decay, float epsilon, py::object descriptor) {
                 return std::make_shared<NNOptimizerRMSProp>(optimizerDevice(device), decay, epsilon,
                                                             descriptorOrLearningRate(lr, descriptor));
             }),
             py::arg("device"), py::arg("learning_rate") = py::none(), py::kw_only(), py::arg("decay") = 0.9,
             py::arg("epsilon") = 1e-8f, py::arg("optimizer_descriptor") = py::none(),
             "-initWithDevice:learningRate: / -initWithDevice:decay:epsilon:optimizerDescriptor:")
        .def_property_readonly("decay", &NNOptimizerRMSProp::decay)
        .def_property_readonly("epsilon", &NNOptimizerRMSProp::epsilon)
        .def("encode", [](NNOptimizerRMSProp& o, CommandBuffer& cb, const Vector& g, const Vector& w,
                          const Vector& s, const VectorPtr& result) { o.encode(cb, g, w, s, resultOr(result, w)); },
             py::arg("command_buffer"), py::arg("input_gradient_vector"), py::arg("input_values_vector"),
             py::arg("input_sum_of_squares_vector"), py::arg("result_values_vector") = py::none(),
             "-encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputSumOfSquaresVector:"
             "resultValuesVector:")
        .def("encode", [](NNOptimizerRMSProp& o, CommandBuffer& cb, CNNConvolutionGradientState& gs,
                          CNNConvolutionWeightsAndBiasesState& source, py::object s,
                          const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& result) {
                 o.encode(cb, gs, source, vectorList(s, "input_sum_of_squares_vectors"), result.get());
             },
             py::arg("command_buffer"), py::arg("convolution_gradient_state"), py::arg("convolution_source_state"),
             py::arg("input_sum_of_squares_vectors"), py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputSumOfSquaresVectors:"
             "resultState:")
        .def("encode", [](NNOptimizerRMSProp& o, CommandBuffer& cb, BNState& gs, BNState& source, py::object s,
                          const GammaBeta& result) {
                 o.encode(cb, gs, &source, vectorList(s, "input_sum_of_squares_vectors"), requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_gradient_state"),
             py::arg("batch_normalization_source_state"), py::arg("input_sum_of_squares_vectors"),
             py::arg("result_state") = py::none(),
             (std::string("-encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:"
                          "inputSumOfSquaresVectors:resultState:") + kBnSourceDoc).c_str())
        .def("encode", [](NNOptimizerRMSProp& o, CommandBuffer& cb, BNState& state, py::object s,
                          const GammaBeta& result) {
                 o.encode(cb, state, nullptr, vectorList(s, "input_sum_of_squares_vectors"), requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_state"), py::arg("input_sum_of_squares_vectors"),
             py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:batchNormalizationState:inputSumOfSquaresVectors:resultState: ([gamma] or "
             "[gamma, beta]; result_state required)");
}

void bindAdam(py::module_& m) {
    py::class_<NNOptimizerAdam, NNOptimizer, std::shared_ptr<NNOptimizerAdam>>(
        m, "NNOptimizerAdam",
        "MPSNNOptimizerAdam: t += 1; lr_t = lr*sqrt(1-beta2^t)/(1-beta1^t); m = beta1*m + (1-beta1)*g; "
        "v = beta2*v + (1-beta2)*g^2; AMSGrad: vmax = max(vmax, v) replaces v; w -= lr_t*m/(sqrt(v) + epsilon). "
        "Every encode advances time_step by one.")
        .def(py::init([](const DeviceArg& device, py::object lr, double beta1, double beta2, float epsilon,
                         int64_t timeStep, py::object descriptor) {
                 if (timeStep < 0) throwValueError("time_step: must be >= 0, got ", timeStep);
                 return std::make_shared<NNOptimizerAdam>(optimizerDevice(device), beta1, beta2, epsilon,
                                                          uint64_t(timeStep), descriptorOrLearningRate(lr, descriptor));
             }),
             py::arg("device"), py::arg("learning_rate") = py::none(), py::kw_only(), py::arg("beta1") = 0.9,
             py::arg("beta2") = 0.999, py::arg("epsilon") = 1e-8f, py::arg("time_step") = 0,
             py::arg("optimizer_descriptor") = py::none(),
             "-initWithDevice:learningRate: / -initWithDevice:beta1:beta2:epsilon:timeStep:optimizerDescriptor:")
        .def_property_readonly("beta1", &NNOptimizerAdam::beta1)
        .def_property_readonly("beta2", &NNOptimizerAdam::beta2)
        .def_property_readonly("epsilon", &NNOptimizerAdam::epsilon)
        .def_property("time_step", &NNOptimizerAdam::timeStep, [](NNOptimizerAdam& o, int64_t t) {
            if (t < 0) throwValueError("time_step: must be >= 0, got ", t);
            o.setTimeStep(uint64_t(t));
        }, "MPSNNOptimizerAdam.timeStep: updates done so far (read/write)")
        .def("encode", [](NNOptimizerAdam& o, CommandBuffer& cb, const Vector& g, const Vector& w, const Vector& mom,
                          const Vector& vel, const VectorPtr& maxVel, const VectorPtr& result) {
                 o.encode(cb, g, w, mom, vel, maxVel.get(), resultOr(result, w));
             },
             py::arg("command_buffer"), py::arg("input_gradient_vector"), py::arg("input_values_vector"),
             py::arg("input_momentum_vector"), py::arg("input_velocity_vector"),
             py::arg("maximum_velocity_vector") = py::none(), py::arg("result_values_vector") = py::none(),
             "-encodeToCommandBuffer:inputGradientVector:inputValuesVector:inputMomentumVector:inputVelocityVector:"
             "[maximumVelocityVector:]resultValuesVector: (maximum_velocity_vector: AMSGrad)")
        .def("encode", [](NNOptimizerAdam& o, CommandBuffer& cb, CNNConvolutionGradientState& gs,
                          CNNConvolutionWeightsAndBiasesState& source, py::object mom, py::object vel,
                          py::object maxVel, const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& result) {
                 o.encode(cb, gs, source, vectorList(mom, "input_momentum_vectors"),
                          vectorList(vel, "input_velocity_vectors"), vectorList(maxVel, "maximum_velocity_vectors"),
                          result.get());
             },
             py::arg("command_buffer"), py::arg("convolution_gradient_state"), py::arg("convolution_source_state"),
             py::arg("input_momentum_vectors"), py::arg("input_velocity_vectors"),
             py::arg("maximum_velocity_vectors") = py::none(), py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:"
             "inputVelocityVectors:[maximumVelocityVectors:]resultState:")
        .def("encode", [](NNOptimizerAdam& o, CommandBuffer& cb, BNState& gs, BNState& source, py::object mom,
                          py::object vel, py::object maxVel, const GammaBeta& result) {
                 o.encode(cb, gs, &source, vectorList(mom, "input_momentum_vectors"),
                          vectorList(vel, "input_velocity_vectors"), vectorList(maxVel, "maximum_velocity_vectors"),
                          requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_gradient_state"),
             py::arg("batch_normalization_source_state"), py::arg("input_momentum_vectors"),
             py::arg("input_velocity_vectors"), py::arg("maximum_velocity_vectors") = py::none(),
             py::arg("result_state") = py::none(),
             (std::string("-encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:"
                          "inputMomentumVectors:inputVelocityVectors:[maximumVelocityVectors:]resultState:") +
              kBnSourceDoc).c_str())
        .def("encode", [](NNOptimizerAdam& o, CommandBuffer& cb, BNState& state, py::object mom, py::object vel,
                          py::object maxVel, const GammaBeta& result) {
                 o.encode(cb, state, nullptr, vectorList(mom, "input_momentum_vectors"),
                          vectorList(vel, "input_velocity_vectors"), vectorList(maxVel, "maximum_velocity_vectors"),
                          requiredResult(result));
             },
             py::arg("command_buffer"), py::arg("batch_normalization_state"), py::arg("input_momentum_vectors"),
             py::arg("input_velocity_vectors"), py::arg("maximum_velocity_vectors") = py::none(),
             py::arg("result_state") = py::none(),
             "-encodeToCommandBuffer:batchNormalizationState:inputMomentumVectors:inputVelocityVectors:"
             "[maximumVelocityVectors:]resultState: ([gamma] or [gamma, beta]; result_state required)");
}

}  // namespace

void bindOptimizers(py::module_& m) {
    bindVectors(m);
    bindOptimizerBase(m);
    bindSgd(m);
    bindRmsProp(m);
    bindAdam(m);
}

}  // namespace mpsgrad::python
