// Serialization of the kernel families (-encodeWithCoder: / -initWithCoder:device:) and the one
// list of serializable classes. The format primitives and the base-class properties are in
// core/serialization.cpp; docs/serialization.md documents every payload below byte by byte.
//
// A new family adds: encodeWithCoder / initWithCoder for its classes (a section here), a line per
// class in registerBuiltinClasses(), a payload table in docs/serialization.md, and a case in
// tests/python/serialization_cases.py.
#include <climits>
#include <cstring>
#include <type_traits>

#include "core/serialization.h"
#include "kernels/concatenation.h"
#include "kernels/arithmetic.h"
#include "kernels/convolution.h"
#include "kernels/convolution_transpose.h"
#include "kernels/batch_normalization.h"
#include "kernels/dropout.h"
#include "kernels/fully_connected.h"
#include "kernels/group_normalization.h"
#include "kernels/instance_normalization.h"
#include "kernels/loss.h"
#include "kernels/optimizers.h"
#include "kernels/neuron.h"
#include "kernels/normalization.h"
#include "kernels/pooling.h"
#include "kernels/reduction.h"
#include "kernels/reshape_pad.h"
#include "kernels/softmax.h"
#include "kernels/upsampling.h"
#include "kernels/yolo_loss.h"
#include "kernels/serialization_support.h"

namespace mpsgrad {

using serial_support::asSerializationError;
using serial_support::readNeuronDescriptor;

// ---- neuron ---------------------------------------------------------------------------------------

std::vector<uint8_t> NNNeuronDescriptor::serialize() const {
    serial::Writer w;
    w.i32(static_cast<int32_t>(neuronType));
    w.f32(a);
    w.f32(b);
    w.f32(c);
    w.floats(data);
    return w.finish("NNNeuronDescriptor", 1);
}

NNNeuronDescriptor NNNeuronDescriptor::deserialize(const uint8_t* bytes, size_t size) {
    serial::Reader r = serial::openAs(bytes, size, "NNNeuronDescriptor");
    NNNeuronDescriptor d;
    int32_t type = r.i32("neuron_type");
    if (type < 0 || type >= int32_t(CNNNeuronType::Count))
        r.fail("neuron_type", detail::concat("must be a CNNNeuronType in [0, 15], got ", type));
    d.neuronType = static_cast<CNNNeuronType>(type);
    d.a = r.f32("a");
    d.b = r.f32("b");
    d.c = r.f32("c");
    d.data = r.floats("data");
    r.expectEnd();
    return d;
}

NNNeuronDescriptor serial_support::readNeuronDescriptor(serial::Reader& r, const char* what) {
    auto [p, n] = r.object(what);
    NNNeuronDescriptor d = NNNeuronDescriptor::deserialize(p, n);
    asSerializationError(r, what, [&] { d.validate(what); });
    return d;
}

void CNNNeuron::encodeWithCoder(serial::Writer& w) const {
    w.object(descriptor_.serialize());
    encodeCNNKernelProperties(w);
}

std::shared_ptr<CNNNeuron> CNNNeuron::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<CNNNeuron>(device, readNeuronDescriptor(r, "neuron_descriptor"));
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

template <class Derived, CNNNeuronType Type>
std::shared_ptr<Derived> CNNNeuronOfType<Derived, Type>::initWithCoder(serial::Reader& r, const Device& device) {
    NNNeuronDescriptor d = readNeuronDescriptor(r, "neuron_descriptor");
    auto kernel = asSerializationError(r, "neuron_descriptor", [&] { return std::make_shared<Derived>(device, d); });
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void CNNNeuronGradient::encodeWithCoder(serial::Writer& w) const {
    w.object(descriptor_.serialize());
    encodeGradientKernelProperties(w);
}

std::shared_ptr<CNNNeuronGradient> CNNNeuronGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<CNNNeuronGradient>(device, readNeuronDescriptor(r, "neuron_descriptor"));
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// ---- convolution ----------------------------------------------------------------------------------

std::vector<uint8_t> CNNConvolutionDescriptor::serialize() const {
    serial::Writer w;
    for (int64_t v : {kernelWidth, kernelHeight, inputFeatureChannels, outputFeatureChannels, strideInPixelsX,
                      strideInPixelsY, groups, dilationRateX, dilationRateY})
        w.i64(v);
    w.boolean(depthwise);
    w.object(fusedNeuronDescriptor.serialize());
    w.floats(foldedScale);
    w.floats(foldedShift);
    // Class version 2 appends the sub-pixel scale factor; a regular descriptor keeps version 1
    // (byte-identical to earlier builds, readable by them).
    if (subPixelScaleFactor == 1) return w.finish("CNNConvolutionDescriptor", 1);
    w.i64(subPixelScaleFactor);
    return w.finish("CNNConvolutionDescriptor", 2);
}

CNNConvolutionDescriptor CNNConvolutionDescriptor::deserialize(const uint8_t* bytes, size_t size) {
    const serial::Envelope envelope = serial::open(bytes, size);
    serial::Reader r = serial::openAs(bytes, size, "CNNConvolutionDescriptor", 2);
    CNNConvolutionDescriptor d;
    using Field = std::pair<int64_t*, const char*>;
    for (auto [field, name] : std::initializer_list<Field>{{&d.kernelWidth, "kernel_width"}, {&d.kernelHeight, "kernel_height"},
                               {&d.inputFeatureChannels, "input_feature_channels"},
                               {&d.outputFeatureChannels, "output_feature_channels"},
                               {&d.strideInPixelsX, "stride_in_pixels_x"}, {&d.strideInPixelsY, "stride_in_pixels_y"},
                               {&d.groups, "groups"}, {&d.dilationRateX, "dilation_rate_x"},
                               {&d.dilationRateY, "dilation_rate_y"}})
        *field = r.i64(name);
    d.depthwise = r.boolean("depthwise");
    auto [p, n] = r.object("fused_neuron_descriptor");
    d.fusedNeuronDescriptor = NNNeuronDescriptor::deserialize(p, n);
    d.foldedScale = r.floats("folded_scale");
    d.foldedShift = r.floats("folded_shift");
    if (d.foldedScale.size() != d.foldedShift.size())
        r.fail("folded_shift", detail::concat("has ", d.foldedShift.size(), " values but folded_scale has ",
                                              d.foldedScale.size()));
    if (envelope.classVersion >= 2) d.subPixelScaleFactor = r.i64InRange("sub_pixel_scale_factor", 2, 32768);
    r.expectEnd();
    return d;
}

namespace {

// A descriptor fit for weights: validated, its weight count computed without overflow.
CNNConvolutionDescriptor readValidDescriptor(serial::Reader& r, size_t& weightCount) {
    auto [p, n] = r.object("descriptor");
    CNNConvolutionDescriptor d = CNNConvolutionDescriptor::deserialize(p, n);
    asSerializationError(r, "descriptor", [&] { d.validate(); });
    uint64_t count = 0;
    uint64_t perGroupInput = uint64_t(d.inputFeatureChannels / d.effectiveGroups());
    if (__builtin_mul_overflow(uint64_t(d.kernelWidth), uint64_t(d.kernelHeight), &count) ||
        __builtin_mul_overflow(count, perGroupInput, &count) ||
        __builtin_mul_overflow(count, uint64_t(d.outputFeatureChannels), &count))
        r.fail("descriptor", "its weight count overflows 64 bits");
    if (!d.foldedScale.empty() && int64_t(d.foldedScale.size()) != d.outputFeatureChannels)
        r.fail("descriptor", "folded batch-norm parameters do not match output_feature_channels");
    weightCount = size_t(count);
    return d;
}

// Weights section shared by CNNConvolutionWeightsDataSource and both convolution kernels:
// descriptor, weights, has_bias, biases, label.
void writeWeights(serial::Writer& w, const CNNConvolutionDescriptor& descriptor, const float* weights,
                  size_t weightCount, const float* biases, size_t biasCount, const std::string& label) {
    w.object(descriptor.serialize());
    w.floats(weights, weightCount);
    w.boolean(biasCount > 0);
    w.floats(biases, biasCount);
    w.string(label);
}

std::shared_ptr<CNNConvolutionWeightsDataSource> readWeights(serial::Reader& r) {
    size_t weightCount = 0;
    CNNConvolutionDescriptor d = readValidDescriptor(r, weightCount);
    std::vector<float> weights = r.floats("weights");
    if (weights.size() != weightCount)
        r.fail("weights", detail::concat("has ", weights.size(), " values but the descriptor needs ", weightCount));
    bool hasBias = r.boolean("has_bias");
    std::vector<float> biases = r.floats("biases");
    if (biases.size() != (hasBias ? size_t(d.outputFeatureChannels) : 0))
        r.fail("biases", detail::concat("has ", biases.size(), " values, expected ",
                                        hasBias ? d.outputFeatureChannels : 0));
    std::string label = r.string("label");
    return asSerializationError(r, "weights", [&] {
        return std::make_shared<CNNConvolutionWeightsDataSource>(d, std::move(weights), std::move(biases),
                                                                 std::move(label));
    });
}

// The kernel's current weights (what it computes with). Batch norm is already folded into them,
// so the descriptor written drops the folding parameters.
void writeKernelWeights(serial::Writer& w, const ConvolutionWeights& current,
                        const std::shared_ptr<CNNConvolutionDataSource>& source) {
    CNNConvolutionDescriptor d = current.descriptor;
    d.foldedScale.clear();
    d.foldedShift.clear();
    writeWeights(w, d, current.weights.floats(), size_t(d.weightCount()), current.biases.floats(),
                 current.hasBias ? size_t(d.outputFeatureChannels) : 0, source ? source->label() : std::string());
}

}  // namespace

std::vector<uint8_t> CNNConvolutionWeightsDataSource::serialize() const {
    serial::Writer w;
    writeWeights(w, descriptor_, weights_.data(), weights_.size(), biases_.data(), biases_.size(), label_);
    return w.finish("CNNConvolutionWeightsDataSource", 1);
}

std::shared_ptr<CNNConvolutionWeightsDataSource> CNNConvolutionWeightsDataSource::deserialize(const uint8_t* bytes,
                                                                                             size_t size) {
    serial::Reader r = serial::openAs(bytes, size, "CNNConvolutionWeightsDataSource");
    auto source = readWeights(r);
    r.expectEnd();
    return source;
}

void CNNConvolutionWeightsAndBiasesState::encodeWithCoder(serial::Writer& w) const {
    w.string(label);
    w.object(descriptor_.serialize());
    w.floats(weights().floats(), size_t(descriptor_.weightCount()));
    w.floats(biases().floats(), size_t(descriptor_.outputFeatureChannels));
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolutionWeightsAndBiasesState::initWithCoder(
    serial::Reader& r, const Device& device) {
    std::string label = r.string("label");
    size_t weightCount = 0;
    CNNConvolutionDescriptor d = readValidDescriptor(r, weightCount);
    std::vector<float> weights = r.floats("weights");
    if (weights.size() != weightCount)
        r.fail("weights", detail::concat("has ", weights.size(), " values but the descriptor needs ", weightCount));
    std::vector<float> biases = r.floats("biases");
    if (biases.size() != size_t(d.outputFeatureChannels))
        r.fail("biases", detail::concat("has ", biases.size(), " values, expected ", d.outputFeatureChannels));
    auto state = std::make_shared<CNNConvolutionWeightsAndBiasesState>(device, d);
    if (!weights.empty()) std::memcpy(state->weights().floats(), weights.data(), weights.size() * sizeof(float));
    std::memcpy(state->biases().floats(), biases.data(), biases.size() * sizeof(float));
    state->label = std::move(label);
    return state;
}

void CNNConvolution::encodeWithCoder(serial::Writer& w) const {
    writeKernelWeights(w, weights_, dataSource_);
    encodeCNNKernelProperties(w);
    w.u32(static_cast<uint32_t>(accumulatorPrecisionOption));
}

std::shared_ptr<CNNConvolution> CNNConvolution::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<CNNConvolution>(device, readWeights(r));
    kernel->decodeCNNKernelProperties(r);
    kernel->accumulatorPrecisionOption =
        static_cast<NNConvolutionAccumulatorPrecisionOption>(r.oneOf("accumulator_precision_option", {0, 1}));
    return kernel;
}

void CNNConvolutionGradient::encodeWithCoder(serial::Writer& w) const {
    writeKernelWeights(w, weights_, dataSource_);
    encodeGradientKernelProperties(w);
    w.u32(static_cast<uint32_t>(gradientOption));
}

std::shared_ptr<CNNConvolutionGradient> CNNConvolutionGradient::initWithCoder(serial::Reader& r,
                                                                              const Device& device) {
    auto kernel = std::make_shared<CNNConvolutionGradient>(device, readWeights(r));
    kernel->decodeGradientKernelProperties(r);
    kernel->gradientOption = static_cast<CNNConvolutionGradientOption>(r.oneOf("gradient_option", {1, 2, 3}));
    return kernel;
}

// ---- fully connected: the convolution payloads, under their own class tags ---------------------------

std::shared_ptr<CNNFullyConnected> CNNFullyConnected::initWithCoder(serial::Reader& r, const Device& device) {
    auto source = readWeights(r);
    auto kernel = asSerializationError(r, "descriptor", [&] { return std::make_shared<CNNFullyConnected>(device, source); });
    kernel->decodeCNNKernelProperties(r);
    kernel->accumulatorPrecisionOption =
        static_cast<NNConvolutionAccumulatorPrecisionOption>(r.oneOf("accumulator_precision_option", {0, 1}));
    return kernel;
}

std::shared_ptr<CNNFullyConnectedGradient> CNNFullyConnectedGradient::initWithCoder(serial::Reader& r,
                                                                                    const Device& device) {
    auto source = readWeights(r);
    auto kernel = asSerializationError(r, "descriptor",
                                       [&] { return std::make_shared<CNNFullyConnectedGradient>(device, source); });
    kernel->decodeGradientKernelProperties(r);
    kernel->gradientOption = static_cast<CNNConvolutionGradientOption>(r.oneOf("gradient_option", {1, 2, 3}));
    return kernel;
}

// ---- transposed convolution: the weights as given, then the kernel properties -------------------------

void CNNConvolutionTranspose::encodeWithCoder(serial::Writer& w) const {
    writeKernelWeights(w, weights_.given, dataSource_);
    encodeCNNKernelProperties(w);
    w.i64(kernelOffsetX);
    w.i64(kernelOffsetY);
    w.u32(static_cast<uint32_t>(accumulatorPrecisionOption));
}

std::shared_ptr<CNNConvolutionTranspose> CNNConvolutionTranspose::initWithCoder(serial::Reader& r,
                                                                              const Device& device) {
    auto source = readWeights(r);
    auto kernel = asSerializationError(r, "descriptor",
                                       [&] { return std::make_shared<CNNConvolutionTranspose>(device, source); });
    kernel->decodeCNNKernelProperties(r);
    kernel->kernelOffsetX = r.i64("kernel_offset_x");
    kernel->kernelOffsetY = r.i64("kernel_offset_y");
    kernel->accumulatorPrecisionOption =
        static_cast<NNConvolutionAccumulatorPrecisionOption>(r.oneOf("accumulator_precision_option", {0, 1}));
    return kernel;
}

void CNNConvolutionTransposeGradient::encodeWithCoder(serial::Writer& w) const {
    writeKernelWeights(w, weights_.given, dataSource_);
    encodeGradientKernelProperties(w);
    w.u32(static_cast<uint32_t>(gradientOption));
}

std::shared_ptr<CNNConvolutionTransposeGradient> CNNConvolutionTransposeGradient::initWithCoder(serial::Reader& r,
                                                                                              const Device& device) {
    auto source = readWeights(r);
    auto kernel = asSerializationError(
        r, "descriptor", [&] { return std::make_shared<CNNConvolutionTransposeGradient>(device, source); });
    kernel->decodeGradientKernelProperties(r);
    kernel->gradientOption = static_cast<CNNConvolutionGradientOption>(r.oneOf("gradient_option", {1, 2, 3}));
    return kernel;
}

// ---- arithmetic -----------------------------------------------------------------------------------

namespace {

// The properties CNNArithmetic and CNNArithmeticGradient share, in declaration order.
template <class K>
void writeArithmeticProperties(serial::Writer& w, const K& k) {
    w.f32(k.primaryScale);
    w.f32(k.secondaryScale);
    w.f32(k.bias);
    w.i64(k.primaryStrideInFeatureChannels);
    w.i64(k.secondaryStrideInFeatureChannels);
    w.f32(k.minimumValue);
    w.f32(k.maximumValue);
}

template <class K>
void readArithmeticProperties(serial::Reader& r, K& k) {
    k.primaryScale = r.f32("primary_scale");
    k.secondaryScale = r.f32("secondary_scale");
    k.bias = r.f32("bias");
    k.primaryStrideInFeatureChannels = r.i64("primary_stride_in_feature_channels");
    k.secondaryStrideInFeatureChannels = r.i64("secondary_stride_in_feature_channels");
    k.minimumValue = r.f32("minimum_value");
    k.maximumValue = r.f32("maximum_value");
}

}  // namespace

void CNNArithmetic::encodeWithCoder(serial::Writer& w) const {
    encodeBinaryKernelProperties(w);
    writeArithmeticProperties(w, *this);
}

void CNNArithmetic::decodeWithCoder(serial::Reader& r) {
    decodeBinaryKernelProperties(r);
    readArithmeticProperties(r, *this);
}

void NNCompare::encodeWithCoder(serial::Writer& w) const {
    CNNArithmetic::encodeWithCoder(w);
    w.i32(static_cast<int32_t>(comparisonType));
    w.f32(threshold);
}

void NNCompare::decodeWithCoder(serial::Reader& r) {
    CNNArithmetic::decodeWithCoder(r);
    comparisonType = static_cast<NNComparisonType>(r.oneOf("comparison_type", {0, 1, 2, 3, 4, 5}));
    threshold = r.f32("threshold");
}

void CNNArithmeticGradient::encodeWithCoder(serial::Writer& w) const {
    w.boolean(secondaryFilter_);
    encodeGradientKernelProperties(w);
    writeArithmeticProperties(w, *this);
}

void CNNArithmeticGradient::decodeWithCoder(serial::Reader& r) {
    decodeGradientKernelProperties(r);
    readArithmeticProperties(r, *this);
}

// ---- pooling --------------------------------------------------------------------------------------

namespace {

// Pooling geometry (constructor arguments): kernel size, stride, dilation (1 unless dilated).
struct PoolingGeometry {
    int64_t kernelWidth, kernelHeight, strideX, strideY, dilationX, dilationY;
};

template <class K>
void writePoolingGeometry(serial::Writer& w, const K& k) {
    for (int64_t v : {k.kernelWidth(), k.kernelHeight(), k.strideInPixelsX(), k.strideInPixelsY(), k.dilationRateX(),
                      k.dilationRateY()})
        w.i64(v);
}

PoolingGeometry readPoolingGeometry(serial::Reader& r) {
    PoolingGeometry g{};
    g.kernelWidth = r.i64("kernel_width");
    g.kernelHeight = r.i64("kernel_height");
    g.strideX = r.i64("stride_in_pixels_x");
    g.strideY = r.i64("stride_in_pixels_y");
    g.dilationX = r.i64("dilation_rate_x");
    g.dilationY = r.i64("dilation_rate_y");
    return g;
}

// Builds a pooling kernel of class T through its public constructor (which validates the sizes).
// Only the dilated classes take dilation rates; the others must have been written with 1.
template <class T>
std::shared_ptr<T> makePooling(serial::Reader& r, const Device& device, const PoolingGeometry& g) {
    constexpr bool dilated = std::is_same_v<T, CNNDilatedPoolingMax> || std::is_same_v<T, CNNDilatedPoolingMaxGradient>;
    if (!dilated && (g.dilationX != 1 || g.dilationY != 1))
        r.fail("dilation_rate_x", detail::concat("must be 1 for a pooling kernel that is not dilated, got (",
                                                 g.dilationX, ", ", g.dilationY, ")"));
    return asSerializationError(r, "pooling geometry", [&] {
        if constexpr (dilated)
            return std::make_shared<T>(device, g.kernelWidth, g.kernelHeight, g.dilationX, g.dilationY, g.strideX,
                                       g.strideY);
        else
            return std::make_shared<T>(device, g.kernelWidth, g.kernelHeight, g.strideX, g.strideY);
    });
}

}  // namespace

// Local normalization (cross-channel, spatial, local contrast): the constructor arguments (window
// width, height and channel size), the CNN(Gradient)Kernel properties, then alpha, beta, delta,
// p0, pm, ps.
template <class K>
void writeLocalNormalization(serial::Writer& w, const K& k) {
    w.i64(k.window().width);
    w.i64(k.window().height);
    w.i64(k.window().channels);
}

// Malformed data is a SerializationError naming the field, like every other decoder: the window
// checks fail through the reader, the constructor's own checks (sizes, width == height) are rethrown.
template <class T>
std::shared_ptr<T> makeLocalNormalization(serial::Reader& r, const Device& device) {
    const int64_t width = r.i64("kernel_width"), height = r.i64("kernel_height"), channels = r.i64("kernel_size");
    if constexpr (std::is_same_v<T, CNNCrossChannelNormalization> ||
                  std::is_same_v<T, CNNCrossChannelNormalizationGradient>) {
        if (width != 1 || height != 1)
            r.fail("kernel_width", detail::concat("a cross-channel window is 1x1 in space, got ", width, "x", height));
        return asSerializationError(r, "kernel_size", [&] { return std::make_shared<T>(device, channels); });
    } else {
        if (channels != 1) r.fail("kernel_size", detail::concat("a spatial window spans 1 channel, got ", channels));
        return asSerializationError(r, "kernel_width", [&] { return std::make_shared<T>(device, width, height); });
    }
}

void writeLocalNormalizationParameters(serial::Writer& w, const LocalNormalizationParameters& q) {
    for (float v : {q.alpha, q.beta, q.delta, q.p0, q.pm, q.ps}) w.f32(v);
}

LocalNormalizationParameters readLocalNormalizationParameters(serial::Reader& r) {
    LocalNormalizationParameters q;
    q.alpha = r.f32("alpha");
    q.beta = r.f32("beta");
    q.delta = r.f32("delta");
    q.p0 = r.f32("p0");
    q.pm = r.f32("pm");
    q.ps = r.f32("ps");
    // The values a setter would refuse (non-finite, alpha < 0, delta <= 0) are malformed data too.
    asSerializationError(r, "parameters", [&] { q.validate(); });
    return q;
}

void CNNLocalNormalizationBase::encodeWithCoder(serial::Writer& w) const {
    writeLocalNormalization(w, *this);
    encodeCNNKernelProperties(w);
    writeLocalNormalizationParameters(w, parameters);
}

template <class T>
std::shared_ptr<T> CNNLocalNormalizationBase::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makeLocalNormalization<T>(r, device);
    static_cast<CNNLocalNormalizationBase&>(*kernel).decodeCNNKernelProperties(r);
    kernel->parameters = readLocalNormalizationParameters(r);
    return kernel;
}

void CNNLocalNormalizationGradientBase::encodeWithCoder(serial::Writer& w) const {
    writeLocalNormalization(w, *this);
    encodeGradientKernelProperties(w);
    writeLocalNormalizationParameters(w, parameters);
}

template <class T>
std::shared_ptr<T> CNNLocalNormalizationGradientBase::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makeLocalNormalization<T>(r, device);
    static_cast<CNNLocalNormalizationGradientBase&>(*kernel).decodeGradientKernelProperties(r);
    kernel->parameters = readLocalNormalizationParameters(r);
    return kernel;
}

void CNNPooling::encodeWithCoder(serial::Writer& w) const {
    writePoolingGeometry(w, *this);
    encodeCNNKernelProperties(w);
    if (kind_ == PoolingKind::Average) {
        w.i64(zeroPadX());
        w.i64(zeroPadY());
    }
}

template <class T>
std::shared_ptr<T> CNNPooling::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makePooling<T>(r, device, readPoolingGeometry(r));
    static_cast<CNNPooling&>(*kernel).decodeCNNKernelProperties(r);
    if constexpr (std::is_same_v<T, CNNPoolingAverage>) {
        kernel->zeroPadSizeX = r.i64("zero_pad_size_x");
        kernel->zeroPadSizeY = r.i64("zero_pad_size_y");
    }
    return kernel;
}

void CNNPoolingGradient::encodeWithCoder(serial::Writer& w) const {
    writePoolingGeometry(w, *this);
    encodeGradientKernelProperties(w);
    w.u64(sourceSize.width);
    w.u64(sourceSize.height);
    w.u64(sourceSize.depth);
    if (kind_ == PoolingKind::Average) {
        w.i64(zeroPadX());
        w.i64(zeroPadY());
    }
}

template <class T>
std::shared_ptr<T> CNNPoolingGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makePooling<T>(r, device, readPoolingGeometry(r));
    static_cast<CNNPoolingGradient&>(*kernel).decodeGradientKernelProperties(r);
    kernel->sourceSize.width = r.u64("source_size.width");
    kernel->sourceSize.height = r.u64("source_size.height");
    kernel->sourceSize.depth = r.u64("source_size.depth");
    if constexpr (std::is_same_v<T, CNNPoolingAverageGradient>) {
        kernel->zeroPadSizeX = r.i64("zero_pad_size_x");
        kernel->zeroPadSizeY = r.i64("zero_pad_size_y");
    }
    return kernel;
}

// ---- upsampling -----------------------------------------------------------------------------------

void CNNUpsampling::encodeWithCoder(serial::Writer& w) const {
    w.i64(scaleX_);
    w.i64(scaleY_);
    w.boolean(alignCorners_);
    encodeCNNKernelProperties(w);
    w.i32(static_cast<int32_t>(coordinateMode));
}

template <class T>
std::shared_ptr<T> CNNUpsampling::initWithCoder(serial::Reader& r, const Device& device) {
    int64_t scaleX = r.i64("integer_scale_factor_x");
    int64_t scaleY = r.i64("integer_scale_factor_y");
    bool alignCorners = r.boolean("align_corners");
    auto kernel = asSerializationError(r, "integer_scale_factor", [&] {
        if constexpr (std::is_same_v<T, CNNUpsamplingBilinear>)
            return std::make_shared<T>(device, scaleX, scaleY, alignCorners);
        else
            return std::make_shared<T>(device, scaleX, scaleY);
    });
    if (alignCorners != kernel->alignCorners())
        r.fail("align_corners", detail::concat("must be false for a ", kernel->className()));
    static_cast<CNNUpsampling&>(*kernel).decodeCNNKernelProperties(r);
    kernel->coordinateMode = static_cast<UpsamplingCoordinateMode>(r.oneOf("coordinate_mode", {0, 1}));
    return kernel;
}

void CNNUpsamplingGradient::encodeWithCoder(serial::Writer& w) const {
    w.i64(scaleX_);
    w.i64(scaleY_);
    encodeGradientKernelProperties(w);
}

template <class T>
std::shared_ptr<T> CNNUpsamplingGradient::initWithCoder(serial::Reader& r, const Device& device) {
    int64_t scaleX = r.i64("integer_scale_factor_x");
    int64_t scaleY = r.i64("integer_scale_factor_y");
    auto kernel =
        asSerializationError(r, "integer_scale_factor", [&] { return std::make_shared<T>(device, scaleX, scaleY); });
    static_cast<CNNUpsamplingGradient&>(*kernel).decodeGradientKernelProperties(r);
    return kernel;
}

// ---- dropout --------------------------------------------------------------------------------------

namespace {

// Constructor arguments of both dropout kernels: keep_probability, seed, mask_stride_in_pixels.
struct DropoutArguments {
    float keepProbability;
    uint64_t seed;
    Size3 maskStride;
};

template <class K>
void writeDropoutArguments(serial::Writer& w, const K& k) {
    w.f32(k.keepProbability());
    w.u64(k.seed());
    Size3 s = k.maskStrideInPixels();
    w.u64(s.width);
    w.u64(s.height);
    w.u64(s.depth);
}

DropoutArguments readDropoutArguments(serial::Reader& r) {
    DropoutArguments a{};
    a.keepProbability = r.f32("keep_probability");
    a.seed = r.u64("seed");
    a.maskStride.width = r.u64("mask_stride_in_pixels.width");
    a.maskStride.height = r.u64("mask_stride_in_pixels.height");
    a.maskStride.depth = r.u64("mask_stride_in_pixels.depth");
    return a;
}

template <class T>
std::shared_ptr<T> makeDropout(serial::Reader& r, const Device& device) {
    DropoutArguments a = readDropoutArguments(r);
    return asSerializationError(
        r, "dropout arguments", [&] { return std::make_shared<T>(device, a.keepProbability, a.seed, a.maskStride); });
}

}  // namespace

void CNNDropout::encodeWithCoder(serial::Writer& w) const {
    writeDropoutArguments(w, *this);
    encodeCNNKernelProperties(w);
    w.u64(encodes_);
}

std::shared_ptr<CNNDropout> CNNDropout::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makeDropout<CNNDropout>(r, device);
    kernel->decodeCNNKernelProperties(r);
    kernel->encodes_ = r.u64("encode_count");
    return kernel;
}

void CNNDropoutGradient::encodeWithCoder(serial::Writer& w) const {
    writeDropoutArguments(w, *this);
    encodeGradientKernelProperties(w);
}

std::shared_ptr<CNNDropoutGradient> CNNDropoutGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = makeDropout<CNNDropoutGradient>(r, device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// ---- the registry: every serializable class, by class tag -----------------------------------------

namespace serial {

namespace {

template <class F>
void addKernel(const char* tag, F initWithCoder) {
    Registry<Kernel>::instance().add(tag, [initWithCoder](Reader& r, const Device& device, uint32_t) {
        return std::shared_ptr<Kernel>(initWithCoder(r, device));
    });
}

template <class F>
void addState(const char* tag, F initWithCoder) {
    Registry<State>::instance().add(tag, [initWithCoder](Reader& r, const Device& device, uint32_t) {
        return std::shared_ptr<State>(initWithCoder(r, device));
    });
}

}  // namespace

void registerBuiltinClasses() {
    addKernel("CNNNeuron", &CNNNeuron::initWithCoder);
    addKernel("CNNNeuronGradient", &CNNNeuronGradient::initWithCoder);
    addKernel("CNNNeuronAbsolute", &CNNNeuronAbsolute::initWithCoder);
    addKernel("CNNNeuronELU", &CNNNeuronELU::initWithCoder);
    addKernel("CNNNeuronHardSigmoid", &CNNNeuronHardSigmoid::initWithCoder);
    addKernel("CNNNeuronLinear", &CNNNeuronLinear::initWithCoder);
    addKernel("CNNNeuronPReLU", &CNNNeuronPReLU::initWithCoder);
    addKernel("CNNNeuronReLUN", &CNNNeuronReLUN::initWithCoder);
    addKernel("CNNNeuronReLU", &CNNNeuronReLU::initWithCoder);
    addKernel("CNNNeuronSigmoid", &CNNNeuronSigmoid::initWithCoder);
    addKernel("CNNNeuronSoftPlus", &CNNNeuronSoftPlus::initWithCoder);
    addKernel("CNNNeuronSoftSign", &CNNNeuronSoftSign::initWithCoder);
    addKernel("CNNNeuronTanH", &CNNNeuronTanH::initWithCoder);
    addKernel("CNNNeuronPower", &CNNNeuronPower::initWithCoder);
    addKernel("CNNNeuronExponential", &CNNNeuronExponential::initWithCoder);
    addKernel("CNNNeuronLogarithm", &CNNNeuronLogarithm::initWithCoder);
    addKernel("CNNConvolution", &CNNConvolution::initWithCoder);
    addKernel("CNNConvolutionGradient", &CNNConvolutionGradient::initWithCoder);
    addKernel("CNNFullyConnected", &CNNFullyConnected::initWithCoder);
    addKernel("CNNFullyConnectedGradient", &CNNFullyConnectedGradient::initWithCoder);
    addKernel("CNNConvolutionTranspose", &CNNConvolutionTranspose::initWithCoder);
    addKernel("CNNConvolutionTransposeGradient", &CNNConvolutionTransposeGradient::initWithCoder);
    addKernel("CNNAdd", &CNNArithmetic::initWithCoder<CNNAdd>);
    addKernel("CNNSubtract", &CNNArithmetic::initWithCoder<CNNSubtract>);
    addKernel("CNNMultiply", &CNNArithmetic::initWithCoder<CNNMultiply>);
    addKernel("CNNDivide", &CNNArithmetic::initWithCoder<CNNDivide>);
    addKernel("NNCompare", &CNNArithmetic::initWithCoder<NNCompare>);
    addKernel("CNNAddGradient", &CNNArithmeticGradient::initWithCoder<CNNAddGradient>);
    addKernel("CNNSubtractGradient", &CNNArithmeticGradient::initWithCoder<CNNSubtractGradient>);
    addKernel("CNNMultiplyGradient", &CNNArithmeticGradient::initWithCoder<CNNMultiplyGradient>);
    addKernel("CNNDivideGradient", &CNNArithmeticGradient::initWithCoder<CNNDivideGradient>);
    addKernel("CNNSoftMax", &CNNSoftMaxBase::initWithCoder<CNNSoftMax>);
    addKernel("CNNLogSoftMax", &CNNSoftMaxBase::initWithCoder<CNNLogSoftMax>);
    addKernel("CNNSoftMaxGradient", &CNNSoftMaxGradientBase::initWithCoder<CNNSoftMaxGradient>);
    addKernel("CNNLogSoftMaxGradient",
                                     &CNNSoftMaxGradientBase::initWithCoder<CNNLogSoftMaxGradient>);
    addKernel("CNNPoolingMax", &CNNPooling::initWithCoder<CNNPoolingMax>);
    addKernel("CNNPoolingAverage", &CNNPooling::initWithCoder<CNNPoolingAverage>);
    addKernel("CNNPoolingL2Norm", &CNNPooling::initWithCoder<CNNPoolingL2Norm>);
    addKernel("CNNDilatedPoolingMax", &CNNPooling::initWithCoder<CNNDilatedPoolingMax>);
    addKernel("CNNPoolingMaxGradient", &CNNPoolingGradient::initWithCoder<CNNPoolingMaxGradient>);
    addKernel("CNNPoolingAverageGradient", &CNNPoolingGradient::initWithCoder<CNNPoolingAverageGradient>);
    addKernel("CNNPoolingL2NormGradient", &CNNPoolingGradient::initWithCoder<CNNPoolingL2NormGradient>);
    addKernel("CNNDilatedPoolingMaxGradient", &CNNPoolingGradient::initWithCoder<CNNDilatedPoolingMaxGradient>);
    addKernel("CNNCrossChannelNormalization",
              &CNNLocalNormalizationBase::initWithCoder<CNNCrossChannelNormalization>);
    addKernel("CNNSpatialNormalization", &CNNLocalNormalizationBase::initWithCoder<CNNSpatialNormalization>);
    addKernel("CNNLocalContrastNormalization",
              &CNNLocalNormalizationBase::initWithCoder<CNNLocalContrastNormalization>);
    addKernel("CNNCrossChannelNormalizationGradient",
              &CNNLocalNormalizationGradientBase::initWithCoder<CNNCrossChannelNormalizationGradient>);
    addKernel("CNNSpatialNormalizationGradient",
              &CNNLocalNormalizationGradientBase::initWithCoder<CNNSpatialNormalizationGradient>);
    addKernel("CNNLocalContrastNormalizationGradient",
              &CNNLocalNormalizationGradientBase::initWithCoder<CNNLocalContrastNormalizationGradient>);
    addKernel("CNNUpsamplingNearest", &CNNUpsampling::initWithCoder<CNNUpsamplingNearest>);
    addKernel("CNNUpsamplingBilinear", &CNNUpsampling::initWithCoder<CNNUpsamplingBilinear>);
    addKernel("CNNUpsamplingNearestGradient", &CNNUpsamplingGradient::initWithCoder<CNNUpsamplingNearestGradient>);
    addKernel("CNNUpsamplingBilinearGradient", &CNNUpsamplingGradient::initWithCoder<CNNUpsamplingBilinearGradient>);
    addKernel("CNNDropout", &CNNDropout::initWithCoder);
    addKernel("CNNDropoutGradient", &CNNDropoutGradient::initWithCoder);

    addKernel("CNNBatchNormalization", &CNNBatchNormalization::initWithCoder);
    addKernel("CNNBatchNormalizationStatistics", &CNNBatchNormalizationStatistics::initWithCoder);
    addKernel("CNNBatchNormalizationStatisticsGradient", &CNNBatchNormalizationStatisticsGradient::initWithCoder);
    addKernel("CNNBatchNormalizationGradient", &CNNBatchNormalizationGradient::initWithCoder);
    addKernel("CNNInstanceNormalization", &CNNInstanceNormalization::initWithCoder);
    addKernel("CNNInstanceNormalizationGradient", &CNNInstanceNormalizationGradient::initWithCoder);
    addKernel("CNNGroupNormalization", &CNNGroupNormalization::initWithCoder);
    addKernel("CNNGroupNormalizationGradient", &CNNGroupNormalizationGradient::initWithCoder);
    addKernel("NNOptimizerStochasticGradientDescent", &NNOptimizerStochasticGradientDescent::initWithCoder);
    addKernel("NNOptimizerRMSProp", &NNOptimizerRMSProp::initWithCoder);
    addKernel("NNOptimizerAdam", &NNOptimizerAdam::initWithCoder);
    addKernel("CNNLoss", &CNNLoss::initWithCoder);
    addKernel("CNNYOLOLoss", &CNNYOLOLoss::initWithCoder);
    addKernel("NNForwardLoss", &NNForwardLoss::initWithCoder);
    addKernel("NNLossGradient", &NNLossGradient::initWithCoder);
    addKernel("NNInitialGradient", &NNInitialGradient::initWithCoder);
    addKernel("NNReshape", &NNReshape::initWithCoder);
    addKernel("NNReshapeGradient", &NNReshapeGradient::initWithCoder);
    addKernel("NNPad", &NNPad::initWithCoder);
    addKernel("NNPadGradient", &NNPadGradient::initWithCoder);
    addKernel("CNNConcatenation", &CNNConcatenation::initWithCoder);
    addKernel("CNNConcatenationGradient", &CNNConcatenationGradient::initWithCoder);
    addKernel("NNGramMatrixCalculation", &NNGramMatrixCalculation::initWithCoder);
    addKernel("NNGramMatrixCalculationGradient", &NNGramMatrixCalculationGradient::initWithCoder);
    addKernel("NNReductionSpatialMean", &NNReductionSpatialMean::initWithCoder);
    addKernel("NNReductionSpatialMeanGradient", &NNReductionSpatialMeanGradient::initWithCoder);


    addState("CNNNormalizationGammaAndBetaState", &CNNNormalizationGammaAndBetaState::initWithCoder);
    addState("CNNNormalizationMeanAndVarianceState", &CNNNormalizationMeanAndVarianceState::initWithCoder);
    addState("CNNConvolutionWeightsAndBiasesState", &CNNConvolutionWeightsAndBiasesState::initWithCoder);
}

}  // namespace serial
}  // namespace mpsgrad