// Serialization of the tensor-shaping families: reshape, pad, Gram matrix, spatial mean.
// docs/serialization.md documents every payload byte by byte; the registry of class tags is in
// kernels/serialization.cpp.

#include <cstring>

#include "kernels/concatenation.h"
#include "kernels/reduction.h"
#include "kernels/reshape_pad.h"
#include "kernels/serialization_support.h"

namespace mpsgrad {

using serial_support::asSerializationError;
using serial_support::readNeuronDescriptor;

// ---- reshape and pad -------------------------------------------------------------------------------

void NNReshape::encodeWithCoder(serial::Writer& w) const { encodeCNNKernelProperties(w); }

std::shared_ptr<NNReshape> NNReshape::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<NNReshape>(device);
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void NNReshapeGradient::encodeWithCoder(serial::Writer& w) const { encodeGradientKernelProperties(w); }

std::shared_ptr<NNReshapeGradient> NNReshapeGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<NNReshapeGradient>(device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

namespace {

void writeCoordinate(serial::Writer& w, const ImageCoordinate& c) {
    w.u64(c.x);
    w.u64(c.y);
    w.u64(c.channel);
}

ImageCoordinate readCoordinate(serial::Reader& r, const char* what) {
    ImageCoordinate c;
    c.x = r.u64(what);
    c.y = r.u64(what);
    c.channel = r.u64(what);
    if (c.x > uint64_t(INT32_MAX) || c.y > uint64_t(INT32_MAX) || c.channel > uint64_t(INT32_MAX))
        r.fail(what, "padding sizes must be at most 2**31 - 1");
    return c;
}

}  // namespace

void NNPad::encodeWithCoder(serial::Writer& w) const {
    writeCoordinate(w, paddingSizeBefore);
    writeCoordinate(w, paddingSizeAfter);
    w.f32(fillValue);
    w.floats(fillValueArray_);
    encodeCNNKernelProperties(w);
}

std::shared_ptr<NNPad> NNPad::initWithCoder(serial::Reader& r, const Device& device) {
    ImageCoordinate before = readCoordinate(r, "padding_size_before");
    ImageCoordinate after = readCoordinate(r, "padding_size_after");
    float fill = r.f32("fill_value");
    std::vector<float> fillArray = r.floats("fill_value_array");
    auto kernel = std::make_shared<NNPad>(device, before, after, std::move(fillArray));
    kernel->fillValue = fill;
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void NNPadGradient::encodeWithCoder(serial::Writer& w) const { encodeGradientKernelProperties(w); }

std::shared_ptr<NNPadGradient> NNPadGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<NNPadGradient>(device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// ---- Gram matrix and spatial mean ------------------------------------------------------------------

void NNGramMatrixCalculation::encodeWithCoder(serial::Writer& w) const {
    w.f32(alpha);
    encodeCNNKernelProperties(w);
}

std::shared_ptr<NNGramMatrixCalculation> NNGramMatrixCalculation::initWithCoder(serial::Reader& r,
                                                                                const Device& device) {
    auto kernel = std::make_shared<NNGramMatrixCalculation>(device, r.f32("alpha"));
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void NNGramMatrixCalculationGradient::encodeWithCoder(serial::Writer& w) const {
    w.f32(alpha);
    encodeGradientKernelProperties(w);
}

std::shared_ptr<NNGramMatrixCalculationGradient> NNGramMatrixCalculationGradient::initWithCoder(
    serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<NNGramMatrixCalculationGradient>(device, r.f32("alpha"));
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

void NNReductionSpatialMean::encodeWithCoder(serial::Writer& w) const {
    w.region(clipRectSource);
    encodeCNNKernelProperties(w);
}

std::shared_ptr<NNReductionSpatialMean> NNReductionSpatialMean::initWithCoder(serial::Reader& r,
                                                                              const Device& device) {
    auto kernel = std::make_shared<NNReductionSpatialMean>(device);
    kernel->clipRectSource = r.region("clip_rect_source");
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void NNReductionSpatialMeanGradient::encodeWithCoder(serial::Writer& w) const { encodeGradientKernelProperties(w); }

std::shared_ptr<NNReductionSpatialMeanGradient> NNReductionSpatialMeanGradient::initWithCoder(serial::Reader& r,
                                                                                              const Device& device) {
    auto kernel = std::make_shared<NNReductionSpatialMeanGradient>(device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// ---- concatenation (kernels/concatenation.h) --------------------------------------------------------

void CNNConcatenation::encodeWithCoder(serial::Writer& w) const { encodeMultiaryKernelProperties(w); }

std::shared_ptr<CNNConcatenation> CNNConcatenation::initWithCoder(serial::Reader& r, const Device& device) {
    // source_count leads the multiary payload (after the kernel properties): peek it to build the kernel.
    serial::Reader peek = r;
    auto probe = std::make_shared<CNNConcatenation>(device, 1);
    probe->decodeKernelProperties(peek);
    const uint64_t count = peek.u64("source_count");
    if (count < 1 || count > 4096) peek.fail("source_count", "must lie in [1, 4096]");
    auto kernel = std::make_shared<CNNConcatenation>(device, size_t(count));
    kernel->decodeMultiaryKernelProperties(r);
    return kernel;
}

void CNNConcatenationGradient::encodeWithCoder(serial::Writer& w) const {
    w.u64(sourceIndex_);
    encodeGradientKernelProperties(w);
}

std::shared_ptr<CNNConcatenationGradient> CNNConcatenationGradient::initWithCoder(serial::Reader& r,
                                                                                 const Device& device) {
    const uint64_t index = r.u64("source_index");
    if (index > 4095) r.fail("source_index", "must be below 4096");
    auto kernel = std::make_shared<CNNConcatenationGradient>(device, size_t(index));
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

}  // namespace mpsgrad
