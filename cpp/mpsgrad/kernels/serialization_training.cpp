// Serialization of the training families: batch, instance and group normalization, optimizers, losses.
// docs/serialization.md documents every payload byte by byte; the registry of class tags is in
// kernels/serialization.cpp.

#include <cstring>
#include <type_traits>

#include "kernels/batch_normalization.h"
#include "kernels/group_normalization.h"
#include "kernels/instance_normalization.h"
#include "kernels/loss.h"
#include "kernels/optimizers.h"
#include "kernels/normalization_groups.h"
#include "kernels/serialization_support.h"
#include "kernels/yolo_loss.h"

namespace mpsgrad {

using serial_support::asSerializationError;
using serial_support::readNeuronDescriptor;

// ---- batch normalization -------------------------------------------------------------------------

namespace {

// Reads a fused neuron descriptor that must fit `channels` channels (PReLU data).
NNNeuronDescriptor readFusedNeuron(serial::Reader& r) { return readNeuronDescriptor(r, "fused_neuron_descriptor"); }

}  // namespace

// The values the kernel computes with (after any reload), as the convolution writes its weights:
// gamma, beta, mean, variance (C each), the data source's label, the fused neuron, epsilon; then
// the CNNKernel properties. The decoded data source carries epsilon (its variance is checked with it).
void CNNBatchNormalization::encodeWithCoder(serial::Writer& w) const {
    const size_t C = size_t(weights_.channels);
    for (const BufferSlice* v : {&weights_.gamma, &weights_.beta, &weights_.mean, &weights_.variance})
        w.floats(v->floats(), C);
    w.string(dataSource_ ? dataSource_->label() : std::string());
    w.object(neuron_.serialize());
    w.f32(epsilon_);
    encodeCNNKernelProperties(w);
}

std::shared_ptr<CNNBatchNormalization> CNNBatchNormalization::initWithCoder(serial::Reader& r,
                                                                            const Device& device) {
    std::vector<float> gamma = r.floats("gamma");
    std::vector<float> beta = r.floats("beta");
    std::vector<float> mean = r.floats("mean");
    std::vector<float> variance = r.floats("variance");
    std::string label = r.string("label");
    NNNeuronDescriptor neuron = readFusedNeuron(r);
    const float epsilon = r.f32("epsilon");
    auto source = asSerializationError(r, "data_source", [&] {
        return std::make_shared<CNNBatchNormalizationWeightsDataSource>(
            std::move(gamma), std::move(beta), std::move(mean), std::move(variance), epsilon, std::move(label));
    });
    auto kernel = asSerializationError(r, "data_source", [&] {
        return std::make_shared<CNNBatchNormalization>(device, source, neuron);
    });
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void CNNBatchNormalizationStatistics::encodeWithCoder(serial::Writer& w) const { encodeCNNKernelProperties(w); }

std::shared_ptr<CNNBatchNormalizationStatistics> CNNBatchNormalizationStatistics::initWithCoder(
    serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<CNNBatchNormalizationStatistics>(device);
    kernel->decodeCNNKernelProperties(r);
    return kernel;
}

void CNNBatchNormalizationStatisticsGradient::encodeWithCoder(serial::Writer& w) const {
    w.object(neuron_.serialize());
    encodeGradientKernelProperties(w);
}

std::shared_ptr<CNNBatchNormalizationStatisticsGradient> CNNBatchNormalizationStatisticsGradient::initWithCoder(
    serial::Reader& r, const Device& device) {
    NNNeuronDescriptor neuron = readFusedNeuron(r);
    auto kernel = asSerializationError(r, "fused_neuron_descriptor", [&] {
        return std::make_shared<CNNBatchNormalizationStatisticsGradient>(device, neuron);
    });
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

void CNNBatchNormalizationGradient::encodeWithCoder(serial::Writer& w) const {
    w.object(neuron_.serialize());
    encodeGradientKernelProperties(w);
    w.boolean(trainingStatistics);
}

std::shared_ptr<CNNBatchNormalizationGradient> CNNBatchNormalizationGradient::initWithCoder(serial::Reader& r,
                                                                                          const Device& device) {
    NNNeuronDescriptor neuron = readFusedNeuron(r);
    auto kernel = asSerializationError(r, "fused_neuron_descriptor", [&] {
        return std::make_shared<CNNBatchNormalizationGradient>(device, neuron);
    });
    kernel->decodeGradientKernelProperties(r);
    kernel->trainingStatistics = r.boolean("training_statistics");
    return kernel;
}

// The two per-channel vector states of the normalization families: label and both vectors.
namespace {

void writeVectorPair(serial::Writer& w, const std::string& label, int64_t channels, const BufferSlice& first,
                     const BufferSlice& second) {
    w.string(label);
    w.floats(first.floats(), size_t(channels));
    w.floats(second.floats(), size_t(channels));
}

// Reads the label and the two vectors (named `first`, `second`) and builds T(device, first, second).
template <class T>
std::shared_ptr<T> readVectorPair(serial::Reader& r, const Device& device, const char* first, const char* second) {
    std::string label = r.string("label");
    std::vector<float> a = r.floats(first);
    std::vector<float> b = r.floats(second);
    if (a.size() != b.size())
        r.fail(second, detail::concat("has ", b.size(), " values but ", first, " has ", a.size()));
    auto state = asSerializationError(r, first, [&] { return std::make_shared<T>(device, a, b); });
    state->label = std::move(label);
    return state;
}

}  // namespace

void CNNNormalizationGammaAndBetaState::encodeWithCoder(serial::Writer& w) const {
    writeVectorPair(w, label, channels_, gamma(), beta());
}

std::shared_ptr<CNNNormalizationGammaAndBetaState> CNNNormalizationGammaAndBetaState::initWithCoder(
    serial::Reader& r, const Device& device) {
    return readVectorPair<CNNNormalizationGammaAndBetaState>(r, device, "gamma", "beta");
}

void CNNNormalizationMeanAndVarianceState::encodeWithCoder(serial::Writer& w) const {
    writeVectorPair(w, label, channels_, mean(), variance());
}

std::shared_ptr<CNNNormalizationMeanAndVarianceState> CNNNormalizationMeanAndVarianceState::initWithCoder(
    serial::Reader& r, const Device& device) {
    return readVectorPair<CNNNormalizationMeanAndVarianceState>(r, device, "mean", "variance");
}

// ---- instance and group normalization --------------------------------------------------------------

// epsilon, then the CNNKernel properties.
void GroupNormalizationKernelBase::encodeGroupNormalizationProperties(serial::Writer& w) const {
    w.f32(epsilon_);
    encodeCNNKernelProperties(w);
}

void GroupNormalizationKernelBase::decodeGroupNormalizationProperties(serial::Reader& r) {
    const float e = r.f32("epsilon");
    asSerializationError(r, "epsilon", [&] { setEpsilon(e); });
    decodeCNNKernelProperties(r);
}

// The values the kernel computes with (after any reload): gamma, beta (C each), the data source's
// label, then epsilon and the CNNKernel properties.
void CNNInstanceNormalization::encodeWithCoder(serial::Writer& w) const {
    const size_t C = size_t(numberOfFeatureChannels());
    w.floats(currentGamma().floats(), C);
    w.floats(currentBeta().floats(), C);
    w.string(dataSource() ? dataSource()->label() : std::string());
    encodeGroupNormalizationProperties(w);
}

std::shared_ptr<CNNInstanceNormalization> CNNInstanceNormalization::initWithCoder(serial::Reader& r,
                                                                                  const Device& device) {
    std::vector<float> gamma = r.floats("gamma");
    std::vector<float> beta = r.floats("beta");
    std::string label = r.string("label");
    auto kernel = asSerializationError(r, "data_source", [&] {
        auto source = std::make_shared<CNNInstanceNormalizationWeightsDataSource>(std::move(gamma), std::move(beta),
                                                                                  std::nullopt, std::move(label));
        return std::make_shared<CNNInstanceNormalization>(device, source);
    });
    kernel->decodeGroupNormalizationProperties(r);
    return kernel;
}

void CNNInstanceNormalizationGradient::encodeWithCoder(serial::Writer& w) const { encodeGradientKernelProperties(w); }

std::shared_ptr<CNNInstanceNormalizationGradient> CNNInstanceNormalizationGradient::initWithCoder(
    serial::Reader& r, const Device& device) {
    auto kernel = std::make_shared<CNNInstanceNormalizationGradient>(device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// gamma, beta (C each), number of groups (i64), the data source's label, then epsilon and the
// CNNKernel properties.
void CNNGroupNormalization::encodeWithCoder(serial::Writer& w) const {
    const size_t C = size_t(numberOfFeatureChannels());
    w.floats(currentGamma().floats(), C);
    w.floats(currentBeta().floats(), C);
    w.i64(numberOfGroups());
    w.string(dataSource() ? dataSource()->label() : std::string());
    encodeGroupNormalizationProperties(w);
}

std::shared_ptr<CNNGroupNormalization> CNNGroupNormalization::initWithCoder(serial::Reader& r, const Device& device) {
    std::vector<float> gamma = r.floats("gamma");
    std::vector<float> beta = r.floats("beta");
    const int64_t groups = r.i64InRange("number_of_groups", 1, INT32_MAX);
    std::string label = r.string("label");
    auto kernel = asSerializationError(r, "data_source", [&] {
        auto source = std::make_shared<CNNGroupNormalizationWeightsDataSource>(
            std::move(gamma), std::move(beta), groups, std::nullopt, std::move(label));
        return std::make_shared<CNNGroupNormalization>(device, source);
    });
    kernel->decodeGroupNormalizationProperties(r);
    return kernel;
}

void CNNGroupNormalizationGradient::encodeWithCoder(serial::Writer& w) const { encodeGradientKernelProperties(w); }

std::shared_ptr<CNNGroupNormalizationGradient> CNNGroupNormalizationGradient::initWithCoder(serial::Reader& r,
                                                                                          const Device& device) {
    auto kernel = std::make_shared<CNNGroupNormalizationGradient>(device);
    kernel->decodeGradientKernelProperties(r);
    return kernel;
}

// ---- optimizers -----------------------------------------------------------------------------------

namespace {

// A double as its IEEE-754 bits (the format has no f64 primitive).
void writeF64(serial::Writer& w, double value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    w.u64(bits);
}

double readF64(serial::Reader& r, const char* what) {
    uint64_t bits = r.u64(what);
    double value = 0;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// The optimizer descriptor section (MPSNNOptimizerDescriptor): every field, in declaration order.
void writeOptimizerDescriptor(serial::Writer& w, const NNOptimizer& k) {
    w.f32(k.learningRate());
    w.f32(k.gradientRescale());
    w.boolean(k.applyGradientClipping());
    w.f32(k.gradientClipMax());
    w.f32(k.gradientClipMin());
    w.f32(k.regularizationScale());
    w.u32(static_cast<uint32_t>(k.regularizationType()));
}

NNOptimizerDescriptor readOptimizerDescriptor(serial::Reader& r) {
    NNOptimizerDescriptor d;
    d.learningRate = r.f32("learning_rate");
    d.gradientRescale = r.f32("gradient_rescale");
    d.applyGradientClipping = r.boolean("apply_gradient_clipping");
    d.gradientClipMax = r.f32("gradient_clip_max");
    d.gradientClipMin = r.f32("gradient_clip_min");
    d.regularizationScale = r.f32("regularization_scale");
    d.regularizationType = static_cast<NNRegularizationType>(r.oneOf("regularization_type", {0, 1, 2}));
    asSerializationError(r, "optimizer_descriptor", [&] { d.validate(); });
    return d;
}

}  // namespace

void NNOptimizerStochasticGradientDescent::encodeWithCoder(serial::Writer& w) const {
    writeOptimizerDescriptor(w, *this);
    w.f32(momentumScale_);
    w.boolean(nesterov_);
    encodeKernelProperties(w);
}

std::shared_ptr<NNOptimizerStochasticGradientDescent> NNOptimizerStochasticGradientDescent::initWithCoder(
    serial::Reader& r, const Device& device) {
    NNOptimizerDescriptor d = readOptimizerDescriptor(r);
    float momentum = r.f32("momentum_scale");
    bool nesterov = r.boolean("use_nesterov_momentum");
    auto k = asSerializationError(r, "NNOptimizerStochasticGradientDescent", [&] {
        return std::make_shared<NNOptimizerStochasticGradientDescent>(device, momentum, nesterov, d);
    });
    k->decodeKernelProperties(r);
    return k;
}

void NNOptimizerRMSProp::encodeWithCoder(serial::Writer& w) const {
    writeOptimizerDescriptor(w, *this);
    writeF64(w, decay_);
    w.f32(epsilon_);
    encodeKernelProperties(w);
}

std::shared_ptr<NNOptimizerRMSProp> NNOptimizerRMSProp::initWithCoder(serial::Reader& r, const Device& device) {
    NNOptimizerDescriptor d = readOptimizerDescriptor(r);
    double decay = readF64(r, "decay");
    float epsilon = r.f32("epsilon");
    auto k = asSerializationError(r, "NNOptimizerRMSProp",
                                  [&] { return std::make_shared<NNOptimizerRMSProp>(device, decay, epsilon, d); });
    k->decodeKernelProperties(r);
    return k;
}

void NNOptimizerAdam::encodeWithCoder(serial::Writer& w) const {
    writeOptimizerDescriptor(w, *this);
    writeF64(w, beta1_);
    writeF64(w, beta2_);
    w.f32(epsilon_);
    w.u64(timeStep_);
    encodeKernelProperties(w);
}

std::shared_ptr<NNOptimizerAdam> NNOptimizerAdam::initWithCoder(serial::Reader& r, const Device& device) {
    NNOptimizerDescriptor d = readOptimizerDescriptor(r);
    double beta1 = readF64(r, "beta1");
    double beta2 = readF64(r, "beta2");
    float epsilon = r.f32("epsilon");
    uint64_t timeStep = r.u64("time_step");
    auto k = asSerializationError(r, "NNOptimizerAdam", [&] {
        return std::make_shared<NNOptimizerAdam>(device, beta1, beta2, epsilon, timeStep, d);
    });
    k->decodeKernelProperties(r);
    return k;
}

// ---- loss -----------------------------------------------------------------------------------------

namespace {

// The descriptor of every loss kernel (CNNLoss, NNForwardLoss, NNLossGradient, the YOLO loss's four
// parts), in CNNLoss's payload order.
void writeLossDescriptor(serial::Writer& w, const CNNLossDescriptor& d) {
    w.u32(static_cast<uint32_t>(d.lossType));
    w.i32(static_cast<int32_t>(d.reductionType));
    w.f32(d.weight);
    w.f32(d.labelSmoothing);
    w.i64(d.numberOfClasses);
    w.f32(d.epsilon);
    w.f32(d.delta);
    w.boolean(d.reduceAcrossBatch);
    w.boolean(d.scaleGradientByReduction);
}

// The constructors validate what this reads (loss and reduction types included).
CNNLossDescriptor readLossDescriptor(serial::Reader& r) {
    CNNLossDescriptor d;
    d.lossType = static_cast<CNNLossType>(r.u32("loss_type"));
    d.reductionType = static_cast<CNNReductionType>(r.i32("reduction_type"));
    d.weight = r.f32("weight");
    d.labelSmoothing = r.f32("label_smoothing");
    d.numberOfClasses = r.i64("number_of_classes");
    d.epsilon = r.f32("epsilon");
    d.delta = r.f32("delta");
    d.reduceAcrossBatch = r.boolean("reduce_across_batch");
    d.scaleGradientByReduction = r.boolean("scale_gradient_by_reduction");
    return d;
}

}  // namespace

void CNNLoss::encodeWithCoder(serial::Writer& w) const {
    writeLossDescriptor(w, descriptor_);
    encodeKernelProperties(w);
}

std::shared_ptr<CNNLoss> CNNLoss::initWithCoder(serial::Reader& r, const Device& device) {
    const CNNLossDescriptor d = readLossDescriptor(r);
    auto k = asSerializationError(r, "loss_descriptor", [&] { return std::make_shared<CNNLoss>(device, d); });
    k->decodeKernelProperties(r);
    return k;
}

// ---- YOLO loss --------------------------------------------------------------------------------------

void CNNYOLOLoss::encodeWithCoder(serial::Writer& w) const {
    const CNNYOLOLossDescriptor& d = descriptor_;
    for (const CNNLossDescriptor* part : {&d.xyLossDescriptor, &d.whLossDescriptor, &d.confidenceLossDescriptor,
                                          &d.classesLossDescriptor})
        writeLossDescriptor(w, *part);
    w.i32(static_cast<int32_t>(d.reductionType));
    w.boolean(d.reduceAcrossBatch);
    w.boolean(d.rescore);
    for (float v : {d.scaleXY, d.scaleWH, d.scaleNoObject, d.scaleObject, d.scaleClass, d.minIOUForObjectPresence,
                    d.maxIOUForObjectAbsence})
        w.f32(v);
    w.i64(d.numberOfAnchorBoxes);
    w.floats(d.anchorBoxes);
    encodeKernelProperties(w);
}

std::shared_ptr<CNNYOLOLoss> CNNYOLOLoss::initWithCoder(serial::Reader& r, const Device& device) {
    CNNYOLOLossDescriptor d;
    for (CNNLossDescriptor* part : {&d.xyLossDescriptor, &d.whLossDescriptor, &d.confidenceLossDescriptor,
                                    &d.classesLossDescriptor})
        *part = readLossDescriptor(r);
    d.reductionType = static_cast<CNNReductionType>(r.i32("reduction_type"));
    d.reduceAcrossBatch = r.boolean("reduce_across_batch");
    d.rescore = r.boolean("rescore");
    for (float* v : {&d.scaleXY, &d.scaleWH, &d.scaleNoObject, &d.scaleObject, &d.scaleClass,
                     &d.minIOUForObjectPresence, &d.maxIOUForObjectAbsence})
        *v = r.f32("scale or IOU threshold");
    d.numberOfAnchorBoxes = r.i64("number_of_anchor_boxes");
    d.anchorBoxes = r.floats("anchor_boxes");
    // The constructor validates the descriptor (part descriptors, scales, thresholds, anchors).
    auto k = asSerializationError(r, "loss_descriptor", [&] { return std::make_shared<CNNYOLOLoss>(device, d); });
    k->decodeKernelProperties(r);
    return k;
}

void NNForwardLoss::encodeWithCoder(serial::Writer& w) const {
    writeLossDescriptor(w, descriptor_);
    encodeKernelProperties(w);
}

std::shared_ptr<NNForwardLoss> NNForwardLoss::initWithCoder(serial::Reader& r, const Device& device) {
    const CNNLossDescriptor d = readLossDescriptor(r);
    auto k = asSerializationError(r, "loss_descriptor", [&] { return std::make_shared<NNForwardLoss>(device, d); });
    k->decodeKernelProperties(r);
    return k;
}

void NNLossGradient::encodeWithCoder(serial::Writer& w) const {
    writeLossDescriptor(w, descriptor_);
    w.boolean(computeLabelGradients_);
    encodeKernelProperties(w);
}

std::shared_ptr<NNLossGradient> NNLossGradient::initWithCoder(serial::Reader& r, const Device& device) {
    const CNNLossDescriptor d = readLossDescriptor(r);
    const bool labelGradients = r.boolean("compute_label_gradients");
    auto k = asSerializationError(r, "loss_descriptor", [&] { return std::make_shared<NNLossGradient>(device, d); });
    k->setComputeLabelGradients(labelGradients);
    k->decodeKernelProperties(r);
    return k;
}

void NNInitialGradient::encodeWithCoder(serial::Writer& w) const { encodeKernelProperties(w); }

std::shared_ptr<NNInitialGradient> NNInitialGradient::initWithCoder(serial::Reader& r, const Device& device) {
    auto k = std::make_shared<NNInitialGradient>(device);
    k->decodeKernelProperties(r);
    return k;
}

}  // namespace mpsgrad
