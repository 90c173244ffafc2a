#include "backend/binding_checks.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/checked.h"
#include "core/errors.h"

namespace mpsgrad::bindings {
namespace {

constexpr int64_t kMaxFloats = INT32_MAX;  // the shaders index bindings with 32-bit ints

// Floats available in `slice` after its offset (0 for a missing binding).
uint64_t floatsAvailable(const BufferSlice& slice) {
    if (!slice) return 0;
    size_t length = slice.buffer->length();
    return slice.offset > length ? 0 : (length - slice.offset) / sizeof(float);
}

void requireFloats(const char* op, const char* name, const BufferSlice& slice, int64_t floats) {
    if (floats <= 0) return;
    if (!slice) throwValueError(op, ": the ", name, " binding is missing but ", floats, " floats are accessed");
    if (slice.offset % sizeof(float))
        throwValueError(op, ": the ", name, " binding's offset ", slice.offset, " is not a multiple of 4 bytes");
    if (floats > kMaxFloats)
        throwValueError(op, ": the ", name, " binding spans ", floats,
                        " floats; the kernels address at most 2**31 - 1 floats per binding");
    uint64_t available = floatsAvailable(slice);
    if (uint64_t(floats) > available)
        throwValueError(op, ": the ", name, " binding needs ", floats, " floats but its buffer holds ", available,
                        " after offset ", slice.offset, " bytes");
}

// The floats spanned by `images` images of layout `l` (after checking the layout).
int64_t layoutExtent(const char* op, const char* name, const ImageLayout& l, int64_t images) {
    if (l.width < 0 || l.height < 0 || l.pixelStride < 0 || l.imageStride < 0 || l.channelOffset < 0 ||
        l.channels < 0 || images < 0)
        throwValueError(op, ": the ", name, " layout has a negative size, stride, offset or image count");
    if (int64_t(l.channelOffset) + l.channels > l.pixelStride)
        throwValueError(op, ": the ", name, " layout's channels [", l.channelOffset, ", ",
                        int64_t(l.channelOffset) + l.channels, ") exceed its pixel stride ", l.pixelStride);
    const uint64_t pixels = checked::product({l.width, l.height}, op);
    if (images == 0 || pixels == 0 || l.channels == 0) return 0;
    const uint64_t imageFloats = checked::mul(pixels, uint64_t(l.pixelStride), op);
    if (images > 1 && uint64_t(l.imageStride) < imageFloats)
        throwValueError(op, ": the ", name, " layout's image stride ", l.imageStride, " is below the ", imageFloats,
                        " floats of one image");
    uint64_t extent = checked::mul(uint64_t(images - 1), uint64_t(l.imageStride), op);
    extent = checked::add(extent, checked::mul(pixels - 1, uint64_t(l.pixelStride), op), op);
    extent = checked::add(extent, uint64_t(l.channelOffset) + uint64_t(l.channels), op);
    if (extent > uint64_t(INT64_MAX)) throwValueError(op, ": the ", name, " binding's extent overflows");
    return int64_t(extent);
}

void requireImage(const char* op, const char* name, const ImageLayout& l, int64_t images, const BufferSlice& slice) {
    requireFloats(op, name, slice, layoutExtent(op, name, l, images));
}

// requireImage for a binding that holds IEEE halves when `half` (native float16 storage).
void requireImage(const char* op, const char* name, const ImageLayout& l, int64_t images, const BufferSlice& slice,
                  bool half) {
    if (!half) return requireImage(op, name, l, images, slice);
    const int64_t halves = layoutExtent(op, name, l, images);
    if (halves <= 0) return;
    if (!slice) throwValueError(op, ": the ", name, " binding is missing but ", halves, " halves are accessed");
    if (slice.offset % 2) throwValueError(op, ": the ", name, " binding's offset ", slice.offset, " is odd");
    if (halves > kMaxFloats)
        throwValueError(op, ": the ", name, " binding spans ", halves,
                        " halves; the kernels address at most 2**31 - 1 elements per binding");
    const size_t length = slice.buffer->length();
    const uint64_t available = slice.offset > length ? 0 : (length - slice.offset) / 2;
    if (uint64_t(halves) > available)
        throwValueError(op, ": the ", name, " binding holds ", available, " halves but ", halves, " are accessed");
}

void requireBatch(const char* op, int32_t batch) {
    if (batch < 0) throwValueError(op, ": batch ", batch, " is negative");
}

// The written rectangle lies inside the destination.
void requireClip(const char* op, const ImageLayout& d, int32_t x, int32_t y, int32_t w, int32_t h) {
    if (w < 0 || h < 0) throwValueError(op, ": negative clip size ", w, " x ", h);
    if (w == 0 || h == 0) return;
    if (x < 0 || y < 0 || int64_t(x) + w > d.width || int64_t(y) + h > d.height)
        throwValueError(op, ": the clip rectangle (", x, ", ", y, ", ", w, " x ", h,
                        ") is not inside the destination (", d.width, " x ", d.height, ")");
}

void requirePositive(const char* op, const char* name, int64_t v) {
    if (v < 1) throwValueError(op, ": ", name, " must be >= 1, got ", v);
}

// OHWI weights of a convolution with `out` output and `in` input channels in `groups` groups.
int64_t weightCount(const char* op, int64_t out, int64_t in, int32_t groups, int32_t kw, int32_t kh) {
    requirePositive(op, "groups", groups);
    requirePositive(op, "kernelWidth", kw);
    requirePositive(op, "kernelHeight", kh);
    if (in % groups || out % groups)
        throwValueError(op, ": groups ", groups, " does not divide ", in, " input and ", out, " output channels");
    return int64_t(checked::product({out, kh, kw, in / groups}, op));
}

void requireStrides(const char* op, int32_t sx, int32_t sy, int32_t dx, int32_t dy) {
    requirePositive(op, "strideX", sx);
    requirePositive(op, "strideY", sy);
    requirePositive(op, "dilationX", dx);
    requirePositive(op, "dilationY", dy);
}

// The kernels compute tap and pixel coordinates in 32-bit ints: sums such as
// windowLeftX + strideX * x + dilationX * kx, or a gradient position minus an origin plus a tap.
// Checking the first tap alone let a window's later taps wrap around (issue 28). So every axis of
// every window op is checked whole, in int64: the first tap, the last tap of the last window and
// the two spans stride * (count - 1) and dilation * (taps - 1) all lie within +-kMaxCoordinate,
// which leaves room for any sum of three such terms in int32.
constexpr int64_t kMaxCoordinate = int64_t(1) << 29;

// Taps start + stride * j + dilation * t of one axis, 0 <= j < count, 0 <= t < taps.
void requireWindowAxis(const char* op, const char* axis, int64_t start, int64_t stride, int64_t count,
                       int64_t dilation, int64_t taps) {
    if (count <= 0 || taps <= 0) return;  // no tap is computed
    // |int32 * int32| < 2**62: none of these overflows int64.
    const int64_t steps = stride * (count - 1), reach = dilation * (taps - 1), end = start + steps + reach;
    auto inRange = [](int64_t v) { return v >= -kMaxCoordinate && v <= kMaxCoordinate; };
    if (!inRange(start) || !inRange(end) || !inRange(steps) || !inRange(reach))
        throwValueError(op, ": the windows' ", axis, " coordinates run from ", start, " to ", end, " (", count,
                        " windows, stride ", stride, ", ", taps, " taps, dilation ", dilation,
                        "); the kernels support coordinates and spans within +-2**29 (an offset, clip origin or "
                        "kernel offset too far from the image)");
}

// PReLU's per-channel data: neuronDataOffset + channels floats.
void requireNeuronData(const char* op, const NeuronParams& n, int32_t dataOffset, int32_t channels,
                       const BufferSlice& data) {
    if (!n.hasChannelData) return;
    if (dataOffset < 0) throwValueError(op, ": neuronDataOffset ", dataOffset, " is negative");
    requireFloats(op, "neuron data", data, int64_t(dataOffset) + channels);
}

// An operand of the arithmetic family, read over `batch` images and `channels` channels.
void requireOperand(const char* op, const char* name, const ArithmeticOperand& o, int32_t batch, int32_t channels,
                    const BufferSlice& slice, bool half = false) {
    for (int32_t s : {o.strideX, o.strideY, o.strideChannels, o.strideImages})
        if (s != 0 && s != 1) throwValueError(op, ": the ", name, " operand's strides must be 0 or 1, got ", s);
    const int32_t needed = o.strideChannels ? channels : (channels > 0 ? 1 : 0);
    if (o.image.channels < needed)
        throwValueError(op, ": the ", name, " operand has ", o.image.channels, " channels but ", needed,
                        " are read");
    requireImage(op, name, o.image, o.strideImages ? batch : (batch > 0 ? 1 : 0), slice, half);
}

// A batch normalization image: the source's size and channel count, over the whole batch.
void requireBatchNormalizationImage(const char* op, const char* name, const BatchNormalizationParams& p,
                                    const ImageLayout& l, const BufferSlice& slice) {
    if (l.width != p.source.width || l.height != p.source.height || l.channels != p.source.channels)
        throwValueError(op, ": the ", name, " layout differs from the source in size or channel count");
    requireImage(op, name, l, p.batch, slice);
}

// The per-channel vectors of a batch normalization op: the affine ones (gamma, beta, PReLU data),
// the statistics (mean, variance) and the parameter gradients, as the op reads or writes them.
void requireBatchNormalizationVectors(const char* op, const BatchNormalizationParams& p,
                                      const Backend::BatchNormalizationVectors& v, bool affine, bool gradients) {
    const int32_t C = p.source.channels;
    requireFloats(op, "mean", v.mean, C);
    requireFloats(op, "variance", v.variance, C);
    if (affine) {
        requireFloats(op, "gamma", v.gamma, C);
        if (v.beta) requireFloats(op, "beta", v.beta, C);
        requireNeuronData(op, p.neuron, 0, C, v.neuronData);
    }
    if (gradients) {
        requireFloats(op, "gamma gradient", v.gammaGradient, C);
        requireFloats(op, "beta gradient", v.betaGradient, C);
    }
}

}  // namespace

void checkCopyBuffer(const BufferSlice& source, const BufferSlice& destination, size_t bytes) {
    if (bytes == 0) return;
    for (const auto* slice : {&source, &destination}) {
        if (!*slice) throwValueError("copyBuffer: a binding is missing");
        size_t length = slice->buffer->length();
        if (slice->offset > length || length - slice->offset < bytes)
            throwValueError("copyBuffer: a binding holds fewer than the ", bytes, " bytes copied");
    }
}

void checkConvertImageFormat(const ConvertFormatParams& p, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "convertImageFormat";
    if (p.count < 0) throwValueError(op, ": count must be >= 0, got ", p.count);
    if (p.toStorage != 0 && p.toStorage != 1) throwValueError(op, ": toStorage must be 0 or 1, got ", p.toStorage);
    if (p.storage != kStorageUnorm8 && p.storage != kStorageUnorm16 && p.storage != kStorageFloat16)
        throwValueError(op, ": storage must be 1 (UNORM8), 2 (UNORM16) or 3 (FLOAT16), got ", p.storage);
    if (p.count == 0) return;
    const size_t storageElement = p.storage == kStorageUnorm8 ? 1 : 2;
    const size_t sourceElement = p.toStorage ? 4 : storageElement, destinationElement = p.toStorage ? storageElement : 4;
    struct Binding {
        const char* name;
        const BufferSlice* slice;
        size_t element;
    };
    for (const Binding& b : {Binding{"source", &source, sourceElement}, Binding{"destination", &destination, destinationElement}}) {
        if (!*b.slice) throwValueError(op, ": the ", b.name, " binding is missing");
        const size_t length = b.slice->buffer->length(), bytes = size_t(p.count) * b.element;
        if (b.slice->offset % b.element != 0)
            throwValueError(op, ": the ", b.name, " offset ", b.slice->offset, " is not a multiple of ", b.element);
        if (b.slice->offset > length || length - b.slice->offset < bytes)
            throwValueError(op, ": the ", b.name, " binding holds fewer than the ", bytes, " bytes of ", p.count,
                            " elements");
    }
    if (source.buffer == destination.buffer && source.offset < destination.offset + size_t(p.count) * destinationElement &&
        destination.offset < source.offset + size_t(p.count) * sourceElement)
        throwValueError(op, ": source and destination overlap");
}

void checkConvolutionForward(const ConvolutionParams& p, const BufferSlice& source, const BufferSlice& weights,
                             const BufferSlice& biases, const BufferSlice& neuronData,
                             const BufferSlice& destination, const BufferSlice& preactivation) {
    checkConvolutionForwardHalf(p, HalfBindings{}, source, weights, biases, neuronData, destination, preactivation);
}

void checkConvolutionForwardHalf(const ConvolutionParams& p, const HalfBindings& formats, const BufferSlice& source,
                                 const BufferSlice& weights, const BufferSlice& biases,
                                 const BufferSlice& neuronData, const BufferSlice& destination,
                                 const BufferSlice& preactivation) {
    const char* op = "convolutionForward";
    requireBatch(op, p.batch);
    requireStrides(op, p.strideX, p.strideY, p.dilationX, p.dilationY);
    requireImage(op, "source", p.source, p.batch, source, formats.source);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    requireWindowAxis(op, "x", p.windowLeftX, p.strideX, p.clipWidth, p.dilationX, p.kernelWidth);
    requireWindowAxis(op, "y", p.windowTopY, p.strideY, p.clipHeight, p.dilationY, p.kernelHeight);
    requireFloats(op, "weights", weights,
                  weightCount(op, p.destination.channels, p.source.channels, p.groups, p.kernelWidth, p.kernelHeight));
    if (p.hasBias) requireFloats(op, "biases", biases, p.destination.channels);
    requireNeuronData(op, p.neuron, 0, p.destination.channels, neuronData);
    if (p.writePreactivation) {
        if (p.preactivation.width < p.clipWidth || p.preactivation.height < p.clipHeight ||
            p.preactivation.channels < p.destination.channels)
            throwValueError(op, ": the preactivation layout is smaller than the clip rectangle");
        requireImage(op, "preactivation", p.preactivation, p.batch, preactivation);
    }
}

void checkConvolutionDataGradient(const ConvolutionDataGradientParams& p, const BufferSlice& gradient,
                                  const BufferSlice& weights, const BufferSlice& biases,
                                  const BufferSlice& destination) {
    checkConvolutionDataGradientHalf(p, HalfBindings{}, gradient, weights, biases, destination);
}

void checkConvolutionDataGradientHalf(const ConvolutionDataGradientParams& p, const HalfBindings& formats,
                                      const BufferSlice& gradient, const BufferSlice& weights,
                                      const BufferSlice& biases, const BufferSlice& destination) {
    const char* op = "convolutionDataGradient";
    requireBatch(op, p.batch);
    requireStrides(op, p.strideX, p.strideY, p.dilationX, p.dilationY);
    requireImage(op, "gradient", p.gradient, p.batch, gradient, formats.gradient);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    // Z (E with stride - 1 zeros between samples) is read at windowLeftX + x + dilationX * tx; E's
    // samples sit at Z positions 0 .. stride * (E's size - 1).
    requireWindowAxis(op, "x", p.windowLeftX, 1, p.clipWidth, p.dilationX, p.kernelWidth);
    requireWindowAxis(op, "y", p.windowTopY, 1, p.clipHeight, p.dilationY, p.kernelHeight);
    requireWindowAxis(op, "gradient x", 0, p.strideX, p.gradient.width, 1, 1);
    requireWindowAxis(op, "gradient y", 0, p.strideY, p.gradient.height, 1, 1);
    requireFloats(op, "weights", weights,
                  weightCount(op, p.gradient.channels, p.destination.channels, p.groups, p.kernelWidth,
                              p.kernelHeight));
    if (p.hasBias) requireFloats(op, "biases", biases, p.destination.channels);
}

void checkConvolutionTransposeWeights(const ConvolutionTransposeWeightsParams& p, const BufferSlice& source,
                                      const BufferSlice& destination) {
    const char* op = "convolutionTransposeWeights";
    const int64_t count = weightCount(op, p.outChannels, p.inChannels, p.groups, p.kernelWidth, p.kernelHeight);
    requireFloats(op, "source", source, count);
    requireFloats(op, "destination", destination, count);
    if (source.buffer == destination.buffer &&
        source.offset < destination.offset + size_t(count) * 4 && destination.offset < source.offset + size_t(count) * 4)
        throwValueError(op, ": source and destination overlap");
}

void checkConvolutionWeightGradient(const ConvolutionWeightGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BufferSlice& weightGradient,
                                    const BufferSlice& biasGradient) {
    checkConvolutionWeightGradientHalf(p, HalfBindings{}, gradient, source, weightGradient, biasGradient);
}

void checkConvolutionWeightGradientHalf(const ConvolutionWeightGradientParams& p, const HalfBindings& formats,
                                        const BufferSlice& gradient, const BufferSlice& source,
                                        const BufferSlice& weightGradient, const BufferSlice& biasGradient) {
    const char* op = "convolutionWeightGradient";
    requireBatch(op, p.batch);
    requireStrides(op, p.strideX, p.strideY, p.dilationX, p.dilationY);
    requireImage(op, "gradient", p.gradient, p.batch, gradient, formats.gradient);
    requireImage(op, "source", p.source, p.batch, source, formats.source);
    requireWindowAxis(op, "x", p.windowLeftX, p.strideX, p.gradient.width, p.dilationX, p.kernelWidth);
    requireWindowAxis(op, "y", p.windowTopY, p.strideY, p.gradient.height, p.dilationY, p.kernelHeight);
    const int64_t count =
        weightCount(op, p.gradient.channels, p.source.channels, p.groups, p.kernelWidth, p.kernelHeight);
    if (p.computeWeights) requireFloats(op, "weight gradient", weightGradient, count);
    if (p.computeBiases) requireFloats(op, "bias gradient", biasGradient, p.gradient.channels);
}

void checkNeuronForward(const NeuronForwardParams& p, const BufferSlice& source, const BufferSlice& neuronData,
                        const BufferSlice& destination, const HalfBindings& formats) {
    const char* op = "neuronForward";
    requireBatch(op, p.batch);
    if (p.source.channels < p.destination.channels)
        throwValueError(op, ": the source provides fewer channels than the destination writes");
    requireImage(op, "source", p.source, p.batch, source, formats.source);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    requireNeuronData(op, p.neuron, p.neuronDataOffset, p.destination.channels, neuronData);
}

void checkNeuronGradient(const NeuronGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                         const BufferSlice& neuronData, const BufferSlice& destination, const HalfBindings& formats) {
    const char* op = "neuronGradient";
    requireBatch(op, p.batch);
    if (p.gradient.channels < p.destination.channels || p.source.channels < p.destination.channels)
        throwValueError(op, ": an input provides fewer channels than the destination writes");
    requireImage(op, "gradient", p.gradient, p.batch, gradient, formats.gradient);
    requireImage(op, "source", p.source, p.batch, source, formats.source);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    requireNeuronData(op, p.neuron, p.neuronDataOffset, p.destination.channels, neuronData);
}

void checkNeuronPReLUWeightGradient(const NeuronGradientParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BufferSlice& aGradient) {
    const char* op = "neuronPReLUWeightGradient";
    requireBatch(op, p.batch);
    if (p.gradient.channels < p.destination.channels || p.source.channels < p.destination.channels)
        throwValueError(op, ": an input provides fewer channels than the a-gradient covers");
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireImage(op, "source", p.source, p.batch, source);
    if (p.neuronDataOffset < 0) throwValueError(op, ": neuronDataOffset ", p.neuronDataOffset, " is negative");
    requireFloats(op, "a gradient", aGradient, int64_t(p.neuronDataOffset) + p.destination.channels);
}

void checkArithmeticForward(const ArithmeticParams& p, const BufferSlice& primary, const BufferSlice& secondary,
                            const BufferSlice& destination, const BufferSlice& clampState, const HalfBindings& formats) {
    const char* op = "arithmeticForward";
    requireBatch(op, p.batch);
    requireOperand(op, "primary", p.primary, p.batch, p.destination.channels, primary, formats.source);
    requireOperand(op, "secondary", p.secondary, p.batch, p.destination.channels, secondary, formats.secondary);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    if (p.stateMode != kArithmeticClampNone) {
        if (p.clampState.width < p.clipWidth || p.clampState.height < p.clipHeight ||
            p.clampState.channels < p.destination.channels)
            throwValueError(op, ": the clamp state layout is smaller than the clip rectangle");
        requireImage(op, "clamp state", p.clampState, p.batch, clampState);
    }
}

void checkCompareForward(const CompareParams& p, const BufferSlice& primary, const BufferSlice& secondary,
                         const BufferSlice& destination, const HalfBindings& formats) {
    const char* op = "compareForward";
    requireBatch(op, p.batch);
    requireOperand(op, "primary", p.primary, p.batch, p.destination.channels, primary, formats.source);
    requireOperand(op, "secondary", p.secondary, p.batch, p.destination.channels, secondary, formats.secondary);
    requireImage(op, "destination", p.destination, p.batch, destination, formats.destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
}

void checkArithmeticGradient(const ArithmeticGradientParams& p, const BufferSlice& gradient,
                             const BufferSlice& primary, const BufferSlice& secondary,
                             const BufferSlice& clampState, const BufferSlice& destination,
                             const HalfBindings& formats) {
    const char* op = "arithmeticGradient";
    requireBatch(op, p.batch);
    if (p.width < 0 || p.height < 0) throwValueError(op, ": negative width or height");
    const int32_t C = p.gradient.channels;
    requireImage(op, "gradient", p.gradient, p.batch, gradient, formats.gradient);
    if (primary) requireOperand(op, "primary", p.primary, p.batch, C, primary, formats.source);
    if (secondary) requireOperand(op, "secondary", p.secondary, p.batch, C, secondary, formats.secondary);
    const ArithmeticOperand& s = p.forSecondary ? p.secondary : p.primary;
    for (int32_t v : {s.strideX, s.strideY, s.strideChannels, s.strideImages})
        if (v != 0 && v != 1) throwValueError(op, ": operand strides must be 0 or 1, got ", v);
    const int32_t written = s.strideChannels ? C : (C > 0 ? 1 : 0);
    if (p.destination.channels < written)
        throwValueError(op, ": the destination has ", p.destination.channels, " channels but ", written,
                        " are written");
    requireImage(op, "destination", p.destination, s.strideImages ? p.batch : (p.batch > 0 ? 1 : 0), destination,
                 formats.destination);
    if (p.clampMode != kArithmeticClampNone) {
        if (p.clampState.width < p.width || p.clampState.height < p.height || p.clampState.channels < C)
            throwValueError(op, ": the clamp state layout is smaller than the gradient's extent");
        requireImage(op, "clamp state", p.clampState, p.batch, clampState);
    }
}

void checkSoftmaxForward(const SoftmaxParams& p, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "softmaxForward";
    requireBatch(op, p.batch);
    if (p.source.channels < p.destination.channels)
        throwValueError(op, ": the source provides fewer channels than the destination writes");
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
}

void checkSoftmaxGradient(const SoftmaxGradientParams& p, const BufferSlice& gradient, const BufferSlice& output,
                          const BufferSlice& destination) {
    const char* op = "softmaxGradient";
    requireBatch(op, p.batch);
    if (p.gradient.channels < p.destination.channels || p.output.channels < p.destination.channels)
        throwValueError(op, ": an input provides fewer channels than the destination writes");
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireImage(op, "output", p.output, p.batch, output);
    requireImage(op, "destination", p.destination, p.batch, destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
}

namespace {

// What both normalization ops bind: the source X and the destination (Y or dX).
void requireNormalization(const char* op, const NormalizationParams& p, const BufferSlice& source,
                          const BufferSlice& destination) {
    requireBatch(op, p.batch);
    if (p.kind < kNormalizationCrossChannel || p.kind > kNormalizationLocalContrast)
        throwValueError(op, ": unknown normalization kind ", p.kind);
    requirePositive(op, "kernelWidth", p.kernelWidth);
    requirePositive(op, "kernelHeight", p.kernelHeight);
    requirePositive(op, "channelSize", p.channelSize);
    if (p.source.channels != p.destination.channels)
        throwValueError(op, ": the source and destination channel counts differ");
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    // Window taps are computed in 32-bit ints by the kernels.
    const int64_t limit = int64_t(1) << 30;
    if (std::abs(int64_t(p.centerX)) > limit || std::abs(int64_t(p.centerY)) > limit || p.kernelWidth > limit ||
        p.kernelHeight > limit || p.channelSize > limit)
        throwValueError(op, ": window geometry out of range");
}

// The windows of the normalization ops, `count` per axis, centered from (centerX, centerY).
void requireNormalizationWindows(const char* op, const NormalizationParams& p, int32_t countX, int32_t countY) {
    requireWindowAxis(op, "x", int64_t(p.centerX) - (p.kernelWidth >> 1), 1, countX, 1, p.kernelWidth);
    requireWindowAxis(op, "y", int64_t(p.centerY) - (p.kernelHeight >> 1), 1, countY, 1, p.kernelHeight);
}

}  // namespace

void checkNormalizationForward(const NormalizationParams& p, const BufferSlice& source,
                               const BufferSlice& destination) {
    requireNormalization("normalizationForward", p, source, destination);
    requireNormalizationWindows("normalizationForward", p, p.clipWidth, p.clipHeight);
}

void checkNormalizationGradient(const NormalizationParams& p, const BufferSlice& gradient, const BufferSlice& source,
                                const BufferSlice& destination) {
    const char* op = "normalizationGradient";
    requireNormalization(op, p, source, destination);
    requireNormalizationWindows(op, p, p.gradientWidth, p.gradientHeight);
    if (p.gradient.channels != p.destination.channels)
        throwValueError(op, ": the gradient and destination channel counts differ");
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    if (p.gradientWidth < 0 || p.gradientHeight < 0 || p.gradientX < 0 || p.gradientY < 0 ||
        int64_t(p.gradientX) + p.gradientWidth > p.gradient.width ||
        int64_t(p.gradientY) + p.gradientHeight > p.gradient.height)
        throwValueError(op, ": the ", p.gradientWidth, " x ", p.gradientHeight, " gradient windows from (",
                        p.gradientX, ", ", p.gradientY, ") lie outside the ", p.gradient.width, " x ",
                        p.gradient.height, " gradient image");
}

// ---- pooling ------------------------------------------------------------------------------------

namespace {

void requirePoolingWindow(const char* op, const PoolingWindow& w, int32_t countX, int32_t countY) {
    requirePositive(op, "kernelWidth", w.kernelWidth);
    requirePositive(op, "kernelHeight", w.kernelHeight);
    requireStrides(op, w.strideX, w.strideY, w.dilationX, w.dilationY);
    // Tap indices ty * kernelWidth + tx (the argmax) are 32-bit.
    if (int64_t(w.kernelWidth) * w.kernelHeight > INT32_MAX)
        throwValueError(op, ": a ", w.kernelWidth, " x ", w.kernelHeight, " window has more than 2**31 - 1 taps");
    if (w.zeroPadX < 0 || w.zeroPadY < 0 || w.zeroPadX > kMaxCoordinate || w.zeroPadY > kMaxCoordinate)
        throwValueError(op, ": zero pad sizes (", w.zeroPadX, ", ", w.zeroPadY, ") are outside [0, 2**29]");
    requireWindowAxis(op, "x", w.windowLeftX, w.strideX, countX, w.dilationX, w.kernelWidth);
    requireWindowAxis(op, "y", w.windowTopY, w.strideY, countY, w.dilationY, w.kernelHeight);
}

}  // namespace

void checkPoolingForward(const PoolingParams& p) {
    requirePoolingWindow("poolingForward", p.window, p.clipWidth, p.clipHeight);
}

void checkPoolingGradient(const PoolingGradientParams& p) {
    requirePoolingWindow("poolingGradient", p.window, p.gradientWidth, p.gradientHeight);
}

void checkBatchNormalizationStatistics(const BatchNormalizationParams& p, const BufferSlice& source,
                                       const Backend::BatchNormalizationVectors& v) {
    const char* op = "batchNormalizationStatistics";
    requireBatch(op, p.batch);
    if (p.previousCount < 0) throwValueError(op, ": previousCount ", p.previousCount, " is negative");
    requireImage(op, "source", p.source, p.batch, source);
    requireBatchNormalizationVectors(op, p, v, false, false);
}

void checkBatchNormalizationForward(const BatchNormalizationParams& p, const BufferSlice& source,
                                    const Backend::BatchNormalizationVectors& v, const BufferSlice& destination) {
    const char* op = "batchNormalizationForward";
    requireBatch(op, p.batch);
    requireImage(op, "source", p.source, p.batch, source);
    requireBatchNormalizationImage(op, "destination", p, p.destination, destination);
    requireBatchNormalizationVectors(op, p, v, true, false);
}

void checkBatchNormalizationStatisticsGradient(const BatchNormalizationParams& p, const BufferSlice& gradient,
                                               const BufferSlice& source,
                                               const Backend::BatchNormalizationVectors& v) {
    const char* op = "batchNormalizationStatisticsGradient";
    requireBatch(op, p.batch);
    requireImage(op, "source", p.source, p.batch, source);
    requireBatchNormalizationImage(op, "gradient", p, p.gradient, gradient);
    requireBatchNormalizationVectors(op, p, v, true, true);
}

void checkBatchNormalizationGradient(const BatchNormalizationParams& p, const BufferSlice& gradient,
                                     const BufferSlice& source, const Backend::BatchNormalizationVectors& v,
                                     const BufferSlice& destination) {
    const char* op = "batchNormalizationGradient";
    requireBatch(op, p.batch);
    requireImage(op, "source", p.source, p.batch, source);
    requireBatchNormalizationImage(op, "gradient", p, p.gradient, gradient);
    requireBatchNormalizationImage(op, "destination", p, p.destination, destination);
    requireBatchNormalizationVectors(op, p, v, true, p.trainingStatistics != 0);
}

// ---- instance and group normalization -------------------------------------------------------------

namespace {

void requireGroupNormalization(const char* op, const GroupNormalizationParams& p, const BufferSlice& source,
                               const Backend::GroupNormalizationVectors& v, const BufferSlice& destination) {
    requireBatch(op, p.batch);
    requirePositive(op, "groups", p.groups);
    if (p.source.channels % p.groups)
        throwValueError(op, ": groups ", p.groups, " does not divide the ", p.source.channels, " channels");
    requireImage(op, "source", p.source, p.batch, source);
    if (p.destination.width != p.source.width || p.destination.height != p.source.height ||
        p.destination.channels != p.source.channels)
        throwValueError(op, ": the destination layout differs from the source in size or channel count");
    requireImage(op, "destination", p.destination, p.batch, destination);
    requireFloats(op, "gamma", v.gamma, p.source.channels);
    requireFloats(op, "statistics", v.statistics,
                  int64_t(checked::product({2, int64_t(p.batch), int64_t(p.groups)}, op)));
}

}  // namespace

void checkGroupNormalizationForward(const GroupNormalizationParams& p, const BufferSlice& source,
                                    const Backend::GroupNormalizationVectors& v, const BufferSlice& destination) {
    const char* op = "groupNormalizationForward";
    requireGroupNormalization(op, p, source, v, destination);
    requireFloats(op, "beta", v.beta, p.source.channels);
}

void checkGroupNormalizationGradient(const GroupNormalizationParams& p, const BufferSlice& gradient,
                                     const BufferSlice& source, const Backend::GroupNormalizationVectors& v,
                                     const BufferSlice& destination) {
    const char* op = "groupNormalizationGradient";
    requireGroupNormalization(op, p, source, v, destination);
    if (p.gradient.width != p.source.width || p.gradient.height != p.source.height ||
        p.gradient.channels != p.source.channels)
        throwValueError(op, ": the gradient layout differs from the source in size or channel count");
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireFloats(op, "gamma gradient", v.gammaGradient, p.source.channels);
    requireFloats(op, "beta gradient", v.betaGradient, p.source.channels);
}

// ---- optimizers ---------------------------------------------------------------------------------

void checkOptimizerUpdate(const OptimizerParams& p, const BufferSlice& gradient, const BufferSlice& values,
                          const BufferSlice& state0, const BufferSlice& state1, const BufferSlice& state2,
                          const BufferSlice& result) {
    const char* op = "optimizer_update";
    if (p.count < 0) throwValueError(op, ": count must be >= 0, got ", p.count);
    if (p.kind < kOptimizerSGD || p.kind > kOptimizerAdam) throwValueError(op, ": unknown kind ", p.kind);
    requireFloats(op, "gradient", gradient, p.count);
    requireFloats(op, "values", values, p.count);
    requireFloats(op, "result", result, p.count);
    if (p.kind != kOptimizerSGD || p.hasState0 != 0) requireFloats(op, "state0", state0, p.count);
    if (p.kind == kOptimizerAdam) requireFloats(op, "state1", state1, p.count);
    if (p.kind == kOptimizerAdam && p.amsgrad != 0) requireFloats(op, "state2", state2, p.count);
}

// ---- losses -------------------------------------------------------------------------------------

namespace {

void requireSameSize(const char* op, const char* name, const ImageLayout& l, const ImageLayout& source) {
    if (l.width != source.width || l.height != source.height || l.channels != source.channels)
        throwValueError(op, ": the ", name, " image (", l.width, " x ", l.height, " x ", l.channels,
                        ") differs in size from the source (", source.width, " x ", source.height, " x ",
                        source.channels, ")");
}

// Partial slots (2 floats each) the pixels of `batch` images of layout l fill, from `offset` on.
int64_t partialFloats(const char* op, const ImageLayout& l, int32_t batch, int32_t offset) {
    if (offset < 0) throwValueError(op, ": partialsOffset must be >= 0, got ", offset);
    const uint64_t pixels = checked::product({int64_t(batch), int64_t(l.width), int64_t(l.height)}, op);
    const uint64_t floats = checked::mul(checked::add(pixels, uint64_t(offset), op), uint64_t(2), op);
    if (floats > uint64_t(INT64_MAX)) throwValueError(op, ": the partials binding's extent overflows");
    return int64_t(floats);
}

}  // namespace

void checkLossElements(const LossElementsParams& p, const BufferSlice& source, const BufferSlice& labels,
                       const BufferSlice& weights, const BufferSlice& destination, const BufferSlice& loss,
                       const BufferSlice& partials) {
    const char* op = "loss_elements";
    if (p.lossType < 0 || p.lossType >= kLossTypeCount) throwValueError(op, ": unknown loss type ", p.lossType);
    requireBatch(op, p.batch);
    requireImage(op, "source", p.source, p.batch, source);
    requireSameSize(op, "labels", p.labels, p.source);
    requireImage(op, "labels", p.labels, p.batch, labels);
    requireSameSize(op, "destination", p.destination, p.source);
    requireImage(op, "destination", p.destination, p.batch, destination);
    if (p.hasWeights) {
        requireSameSize(op, "weights", p.weights, p.source);
        requireImage(op, "weights", p.weights, p.batch, weights);
    }
    if (p.reductionType == kReductionNone) {
        requireSameSize(op, "loss", p.loss, p.source);
        requireImage(op, "loss", p.loss, p.batch, loss);
    } else {
        requireFloats(op, "partials", partials, partialFloats(op, p.source, p.batch, p.partialsOffset));
    }
}

void checkLossReduce(const LossReduceParams& p, const BufferSlice& partials, const BufferSlice& results) {
    const char* op = "loss_reduce";
    if (p.images < 0 || p.pixelsPerImage < 0)
        throwValueError(op, ": images ", p.images, " and pixelsPerImage ", p.pixelsPerImage, " must be >= 0");
    const uint64_t slots = checked::product({int64_t(p.images), int64_t(p.pixelsPerImage)}, op);
    const uint64_t floats = checked::mul(slots, uint64_t(2), op);
    if (floats > uint64_t(INT64_MAX)) throwValueError(op, ": the partials binding's extent overflows");
    requireFloats(op, "partials", partials, int64_t(floats));
    requireFloats(op, "results", results, 2 * int64_t(p.images));
}

void checkLossScaleGradient(const LossScaleParams& p, const BufferSlice& results, const BufferSlice& destination) {
    const char* op = "loss_scale_gradient";
    if (p.resultIndex < 0) throwValueError(op, ": resultIndex must be >= 0, got ", p.resultIndex);
    requireBatch(op, p.batch);
    requireImage(op, "destination", p.destination, p.batch, destination);
    requireFloats(op, "results", results, 2 * (int64_t(p.resultIndex) + p.batch));
}

// ---- YOLO loss ----------------------------------------------------------------------------------

namespace {

// The YOLO geometry: anchors and classes >= 1, the source W x H x A * (5 + K), the part layouts
// (W * A) x H with 2, 2, 1 and K channels, every other image layout of the source's size.
void requireYoloGeometry(const char* op, const ImageLayout& source, int32_t anchors, int32_t classes,
                         const ImageLayout* parts[4], const ImageLayout* sameAsSource[], int sameCount) {
    if (anchors < 1 || classes < 1)
        throwValueError(op, ": anchors ", anchors, " and classCount ", classes, " must be >= 1");
    const uint64_t channels = checked::product({int64_t(anchors), int64_t(classes) + 5}, op);
    if (uint64_t(source.channels) != channels)
        throwValueError(op, ": the source has ", source.channels, " channels but anchors * (5 + classCount) = ",
                        channels);
    const uint64_t partWidth = checked::product({int64_t(source.width), int64_t(anchors)}, op);
    const int32_t partChannels[4] = {2, 2, 1, classes};
    static const char* names[4] = {"xy", "wh", "confidence", "classes"};
    for (int i = 0; i < 4; ++i)
        if (uint64_t(parts[i]->width) != partWidth || parts[i]->height != source.height ||
            parts[i]->channels != partChannels[i])
            throwValueError(op, ": the ", names[i], " part layout (", parts[i]->width, " x ", parts[i]->height,
                            " x ", parts[i]->channels, ") is not (source width * anchors) x height x ",
                            partChannels[i]);
    for (int i = 0; i < sameCount; ++i) requireSameSize(op, "image", *sameAsSource[i], source);
}

void requireYoloParts(const char* op, const char* what, const ImageLayout* parts[4], const Backend::YoloParts& b) {
    const BufferSlice* slices[4] = {&b.xy, &b.wh, &b.confidence, &b.classes};
    for (int i = 0; i < 4; ++i) requireImage(op, what, *parts[i], 1, *slices[i]);
}

}  // namespace

void checkYoloPrepare(const YoloPrepareParams& p, const BufferSlice& source, const BufferSlice& labels,
                      const BufferSlice& anchors, const Backend::YoloParts& predictions,
                      const Backend::YoloParts& partLabels, const Backend::YoloParts& weights) {
    const char* op = "yolo_prepare";
    const ImageLayout* parts[4] = {&p.xy, &p.wh, &p.confidence, &p.classes};
    const ImageLayout* same[1] = {&p.labels};
    requireYoloGeometry(op, p.source, p.anchors, p.classCount, parts, same, 1);
    requireImage(op, "source", p.source, 1, source);
    requireImage(op, "labels", p.labels, 1, labels);
    requireFloats(op, "anchors", anchors, 2 * int64_t(p.anchors));
    requireYoloParts(op, "part predictions", parts, predictions);
    requireYoloParts(op, "part labels", parts, partLabels);
    requireYoloParts(op, "part weights", parts, weights);
}

void checkYoloFinish(const YoloFinishParams& p, const BufferSlice& source, const Backend::YoloParts& gradients,
                     const Backend::YoloParts& losses, const BufferSlice& destination, const BufferSlice& loss) {
    const char* op = "yolo_finish";
    const ImageLayout* parts[4] = {&p.xy, &p.wh, &p.confidence, &p.classes};
    const ImageLayout* same[2] = {&p.destination, &p.loss};
    requireYoloGeometry(op, p.source, p.anchors, p.classCount, parts, same, p.perElement ? 2 : 1);
    requireImage(op, "source", p.source, 1, source);
    requireImage(op, "destination", p.destination, 1, destination);
    requireYoloParts(op, "part gradients", parts, gradients);
    if (p.perElement) {
        requireYoloParts(op, "part losses", parts, losses);
        requireImage(op, "loss", p.loss, 1, loss);
    } else {
        for (const BufferSlice* s : {&losses.xy, &losses.wh, &losses.confidence, &losses.classes})
            requireFloats(op, "part losses", *s, 1);
        requireFloats(op, "loss", loss, 1);
    }
}

// ---- reshape and pad family: the kernels trust their index tables, so every entry is checked.

namespace {

const int32_t* ints(const BufferSlice& slice) {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(slice.buffer->contents()) + slice.offset);
}

// count entries of `table`, each -1 or in [0, limit).
void requireIndices(const char* op, const char* name, const int32_t* table, int64_t count, int64_t limit) {
    for (int64_t i = 0; i < count; ++i)
        if (table[i] < -1 || table[i] >= limit)
            throwValueError(op, ": ", name, "[", i, "] = ", table[i], " is outside [-1, ", limit, ")");
}

// A CSR axis: starts[size + 1] non-decreasing from 0 within listSize; list entries in [0, limit).
void requireTranspose(const char* op, const char* name, const int32_t* maps, int64_t total, int32_t start,
                      int64_t size, int32_t list, int64_t limit) {
    if (start < 0 || int64_t(start) + size + 1 > total || list < 0 || list > total)
        throwValueError(op, ": the ", name, " table lies outside the maps binding");
    const int32_t* s = maps + start;
    if (s[0] != 0) throwValueError(op, ": the ", name, " table must start at 0");
    for (int64_t i = 0; i < size; ++i)
        if (s[i + 1] < s[i]) throwValueError(op, ": the ", name, " table decreases at ", i);
    if (int64_t(list) + s[size] > total) throwValueError(op, ": the ", name, " list lies outside the maps binding");
    for (int32_t j = 0; j < s[size]; ++j)
        if (maps[list + j] < 0 || maps[list + j] >= limit)
            throwValueError(op, ": the ", name, " list holds ", maps[list + j], ", outside [0, ", limit, ")");
}

}  // namespace

void checkReshapeCopy(const ReshapeParams& p, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "reshape_copy";
    requireBatch(op, p.batch);
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
    const uint64_t from = checked::product({p.source.width, p.source.height, p.source.channels}, op);
    const uint64_t to = checked::product({p.destination.width, p.destination.height, p.destination.channels}, op);
    if (from != to)
        throwValueError(op, ": the source holds ", from, " elements per image but the destination ", to);
}

void checkPadForward(const PadParams& p, const BufferSlice& source, const BufferSlice& destination,
                     const BufferSlice& maps, const BufferSlice& fill) {
    const char* op = "pad_forward";
    requireBatch(op, p.batch);
    requireClip(op, p.destination, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
    const int64_t count = int64_t(p.clipWidth) + p.clipHeight + p.destination.channels;
    requireFloats(op, "maps", maps, count);
    requireFloats(op, "fill", fill, p.destination.channels);
    if (count == 0) return;
    const int32_t* m = ints(maps);
    requireIndices(op, "mapX", m, p.clipWidth, p.source.width);
    requireIndices(op, "mapY", m + p.clipWidth, p.clipHeight, p.source.height);
    requireIndices(op, "mapC", m + p.clipWidth + p.clipHeight, p.destination.channels, p.source.channels);
}

void checkPadGradient(const PadGradientParams& p, const BufferSlice& gradient, const BufferSlice& destination,
                      const BufferSlice& maps) {
    const char* op = "pad_gradient";
    requireBatch(op, p.batch);
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireImage(op, "destination", p.destination, p.batch, destination);
    if (p.listCount < 0) throwValueError(op, ": listCount ", p.listCount, " is negative");
    requireFloats(op, "maps", maps, p.listCount);
    if (p.listCount == 0) throwValueError(op, ": the maps binding is empty");
    const int32_t* m = ints(maps);
    requireTranspose(op, "x", m, p.listCount, p.startX, p.destination.width, p.listX, p.gradient.width);
    requireTranspose(op, "y", m, p.listCount, p.startY, p.destination.height, p.listY, p.gradient.height);
    requireTranspose(op, "channel", m, p.listCount, p.startC, p.destination.channels, p.listC, p.gradient.channels);
}

// ---- Gram matrix and spatial mean ----------------------------------------------------------------

namespace {

void requireSameChannels(const char* op, const char* name, const ImageLayout& l, int32_t channels) {
    if (l.channels != channels)
        throwValueError(op, ": the ", name, " layout has ", l.channels, " channels but the op uses ", channels);
}

// The Gram matrix image of `channels` channels: at least channels x 1 pixels.
void requireGramImage(const char* op, const char* name, const ImageLayout& l, int32_t channels) {
    requireSameChannels(op, name, l, channels);
    if (l.width < channels || l.height < 1)
        throwValueError(op, ": the ", name, " image is ", l.width, " x ", l.height, " but the Gram matrix of ",
                        channels, " channels needs ", channels, " x 1 pixels");
}

void requireRegion(const char* op, const ImageLayout& l, int32_t x, int32_t y, int32_t w, int32_t h) {
    if (w < 1 || h < 1) throwValueError(op, ": the region (", w, " x ", h, ") is empty");
    if (x < 0 || y < 0 || int64_t(x) + w > l.width || int64_t(y) + h > l.height)
        throwValueError(op, ": the region (", x, ", ", y, ", ", w, " x ", h, ") is not inside the ", l.width, " x ",
                        l.height, " image");
}

void requirePixel(const char* op, const char* name, const ImageLayout& l, int32_t x, int32_t y) {
    if (x < 0 || y < 0 || x >= l.width || y >= l.height)
        throwValueError(op, ": the ", name, " pixel (", x, ", ", y, ") is not inside the ", l.width, " x ", l.height,
                        " image");
}

}  // namespace

void checkGramMatrix(const GramMatrixParams& p, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "gram_matrix";
    requireBatch(op, p.batch);
    requireGramImage(op, "destination", p.destination, p.source.channels);
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
}

void checkGramMatrixGradient(const GramMatrixGradientParams& p, const BufferSlice& gradient, const BufferSlice& source,
                             const BufferSlice& destination) {
    const char* op = "gram_matrix_gradient";
    requireBatch(op, p.batch);
    const int32_t n = p.destination.channels;
    requireGramImage(op, "gradient", p.gradient, n);
    requireSameChannels(op, "source", p.source, n);
    if (p.source.width != p.destination.width || p.source.height != p.destination.height)
        throwValueError(op, ": the source (", p.source.width, " x ", p.source.height, ") and destination (",
                        p.destination.width, " x ", p.destination.height, ") differ in size");
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
}

void checkSpatialMean(const SpatialMeanParams& p, const BufferSlice& source, const BufferSlice& destination) {
    const char* op = "spatial_mean";
    requireBatch(op, p.batch);
    requireSameChannels(op, "destination", p.destination, p.source.channels);
    requireRegion(op, p.source, p.regionX, p.regionY, p.regionWidth, p.regionHeight);
    requirePixel(op, "destination", p.destination, p.destinationX, p.destinationY);
    requireImage(op, "source", p.source, p.batch, source);
    requireImage(op, "destination", p.destination, p.batch, destination);
}

void checkSpatialMeanGradient(const SpatialMeanGradientParams& p, const BufferSlice& gradient,
                              const BufferSlice& destination) {
    const char* op = "spatial_mean_gradient";
    requireBatch(op, p.batch);
    requireSameChannels(op, "gradient", p.gradient, p.destination.channels);
    requireRegion(op, p.destination, p.regionX, p.regionY, p.regionWidth, p.regionHeight);
    requirePixel(op, "gradient", p.gradient, p.gradientX, p.gradientY);
    requireImage(op, "gradient", p.gradient, p.batch, gradient);
    requireImage(op, "destination", p.destination, p.batch, destination);
}

// ---- sub-pixel convolution ----------------------------------------------------------------------

void checkSubPixelShuffle(const SubPixelShuffleParams& p, const BufferSlice& low, const BufferSlice& high) {
    const char* op = "sub_pixel_shuffle";
    requireBatch(op, p.batch);
    requirePositive(op, "scale", p.scale);
    if (p.phaseX < 0 || p.phaseX >= p.scale || p.phaseY < 0 || p.phaseY >= p.scale)
        throwValueError(op, ": phase (", p.phaseX, ", ", p.phaseY, ") is outside [0, ", p.scale, ")");
    const int64_t groups = int64_t(p.scale) * p.scale;
    if (int64_t(p.low.channels) != checked::mulSigned(groups, p.high.channels, op))
        throwValueError(op, ": the low-resolution layout has ", p.low.channels, " channels but ", groups,
                        " sub-pixel groups of ", p.high.channels, " need ", groups * p.high.channels);
    requireClip(op, p.high, p.clipX, p.clipY, p.clipWidth, p.clipHeight);
    // Every clip pixel has its low-resolution pixel (the shuffle reads, the unshuffle fills it).
    if (p.clipWidth > 0 && p.clipHeight > 0 &&
        (int64_t(p.phaseX) + p.clipWidth > int64_t(p.low.width) * p.scale ||
         int64_t(p.phaseY) + p.clipHeight > int64_t(p.low.height) * p.scale))
        throwValueError(op, ": the ", p.clipWidth, " x ", p.clipHeight, " clip rectangle at phase (", p.phaseX, ", ",
                        p.phaseY, ") does not fit the ", p.low.width, " x ", p.low.height, " low-resolution image");
    requireImage(op, "low", p.low, p.batch, low);
    requireImage(op, "high", p.high, p.batch, high);
}

}  // namespace mpsgrad::bindings
