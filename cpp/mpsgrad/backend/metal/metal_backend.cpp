// The Metal backend object: device, kernel library, pipeline cache and buffer pool, with each
// Backend op forwarded to its family's encoder (metal_<family>.cpp: convolution, neuron, arithmetic,
// softmax, utility).
#include "backend/metal/metal_backend.h"

#include <cstdlib>
#include <exception>
#include <mutex>

#include "backend/binding_checks.h"
#include "backend/metal/metal_command.h"
#include "backend/metal/metal_context.h"
#include "backend/metal/metal_device.h"
#include "backend/metal/metal_ops.h"
#include "core/errors.h"

namespace mpsgrad {

namespace metal_backend {

namespace {

// Freed buffers the pool keeps for reuse, unless $MPSGRAD_METAL_POOL_MB says otherwise.
constexpr size_t kDefaultPoolMegabytes = 512;

size_t poolLimitBytes() {
    size_t megabytes = kDefaultPoolMegabytes;
    if (const char* env = std::getenv("MPSGRAD_METAL_POOL_MB"); env && *env) megabytes = std::strtoull(env, nullptr, 10);
    return megabytes << 20;
}

// $MPSGRAD_METAL_EXACT_BUFFERS=1: MTLBuffers sized exactly to each request (for memory checkers).
bool exactBufferSizes() {
    const char* env = std::getenv("MPSGRAD_METAL_EXACT_BUFFERS");
    return env && *env && *env != '0';
}

class MetalBackend final : public Backend {
public:
    explicit MetalBackend(MetalContext context) : ctx_(std::move(context)) {}

    MetalContext& context() { return ctx_; }

    std::string name() const override { return "metal"; }

    std::shared_ptr<Buffer> newBuffer(size_t bytes, BufferFill fill) override {
        return ctx_.buffers->allocate(bytes, fill);
    }

    std::shared_ptr<BackendQueue> newQueue() override {
        auto queue = adopt(ctx_.device->newCommandQueue());
        if (!queue) throw MetalError("Metal returned no command queue");
        return std::make_shared<MetalQueue>(queue);
    }

    void copyBuffer(CommandBuffer& cb, const BufferSlice& source, const BufferSlice& destination,
                    size_t bytes) override {
        dispatchOp(bindings::checkCopyBuffer, encodeCopyBuffer, cb, source, destination, bytes);
    }

    void convertImageFormat(CommandBuffer& cb, const ConvertFormatParams& p, const BufferSlice& source,
                            const BufferSlice& destination) override {
        dispatchOp(bindings::checkConvertImageFormat, encodeConvertImageFormat, cb, p, source, destination);
    }

    void convolutionForward(CommandBuffer& cb, const ConvolutionParams& p, const BufferSlice& source,
                            const BufferSlice& weights, const BufferSlice& biases, const BufferSlice& neuronData,
                            const BufferSlice& destination, const BufferSlice& preactivation) override {
        dispatchOp(bindings::checkConvolutionForward, encodeConvolutionForward, cb,
                   p, source, weights, biases, neuronData, destination, preactivation);
    }

    void convolutionDataGradient(CommandBuffer& cb, const ConvolutionDataGradientParams& p,
                                 const BufferSlice& gradient, const BufferSlice& weights,
                                 const BufferSlice& biases, const BufferSlice& destination) override {
        dispatchOp(bindings::checkConvolutionDataGradient, encodeConvolutionDataGradient, cb,
                   p, gradient, weights, biases, destination);
    }

    void convolutionWeightGradient(CommandBuffer& cb, const ConvolutionWeightGradientParams& p,
                                   const BufferSlice& gradient, const BufferSlice& source,
                                   const BufferSlice& weightGradient, const BufferSlice& biasGradient) override {
        dispatchOp(bindings::checkConvolutionWeightGradient, encodeConvolutionWeightGradient, cb,
                   p, gradient, source, weightGradient, biasGradient);
    }

    void convolutionTransposeWeights(CommandBuffer& cb, const ConvolutionTransposeWeightsParams& p,
                                     const BufferSlice& source, const BufferSlice& destination) override {
        dispatchOp(bindings::checkConvolutionTransposeWeights, encodeConvolutionTransposeWeights, cb,
                   p, source, destination);
    }

    void neuronForward(CommandBuffer& cb, const NeuronForwardParams& p, const BufferSlice& source,
                       const BufferSlice& neuronData, const BufferSlice& destination) override {
        // (a lambda: the check's trailing HalfBindings parameter has a default, a function pointer would not)
        dispatchOp([](const auto&... a) { bindings::checkNeuronForward(a...); }, encodeNeuronForward, cb, p, source,
                   neuronData, destination);
    }

    void neuronGradient(CommandBuffer& cb, const NeuronGradientParams& p, const BufferSlice& gradient,
                        const BufferSlice& source, const BufferSlice& neuronData,
                        const BufferSlice& destination) override {
        dispatchOp([](const auto&... a) { bindings::checkNeuronGradient(a...); }, encodeNeuronGradient, cb, p,
                   gradient, source, neuronData, destination);
    }

    void neuronPReLUWeightGradient(CommandBuffer& cb, const NeuronGradientParams& p, const BufferSlice& gradient,
                                   const BufferSlice& source, const BufferSlice& aGradient) override {
        dispatchOp(bindings::checkNeuronPReLUWeightGradient, encodeNeuronPReLUWeightGradient, cb,
                   p, gradient, source, aGradient);
    }

    void arithmeticForward(CommandBuffer& cb, const ArithmeticParams& p, const BufferSlice& primary,
                           const BufferSlice& secondary, const BufferSlice& destination,
                           const BufferSlice& clampState) override {
        dispatchOp([](const auto&... a) { bindings::checkArithmeticForward(a...); }, encodeArithmeticForward, cb,
                   p, primary, secondary, destination, clampState);
    }
    void compareForward(CommandBuffer& cb, const CompareParams& p, const BufferSlice& primary,
                        const BufferSlice& secondary, const BufferSlice& destination) override {
        dispatchOp([](const auto&... a) { bindings::checkCompareForward(a...); }, encodeCompareForward, cb, p, primary,
                   secondary, destination);
    }
    void arithmeticGradient(CommandBuffer& cb, const ArithmeticGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& primary, const BufferSlice& secondary, const BufferSlice& clampState,
                            const BufferSlice& destination) override {
        dispatchOp([](const auto&... a) { bindings::checkArithmeticGradient(a...); }, encodeArithmeticGradient, cb,
                   p, gradient, primary, secondary, clampState, destination);
    }
    void softmaxForward(CommandBuffer& cb, const SoftmaxParams& p, const BufferSlice& source,
                        const BufferSlice& destination) override {
        dispatchOp(bindings::checkSoftmaxForward, encodeSoftmaxForward, cb, p, source, destination);
    }
    void softmaxGradient(CommandBuffer& cb, const SoftmaxGradientParams& p, const BufferSlice& gradient,
                         const BufferSlice& output, const BufferSlice& destination) override {
        dispatchOp(bindings::checkSoftmaxGradient, encodeSoftmaxGradient, cb, p, gradient, output, destination);
    }
    // ---- optimizers (issue 14)
    void optimizerUpdate(CommandBuffer& cb, const OptimizerParams& p, const BufferSlice& gradient,
                         const BufferSlice& values, const BufferSlice& state0, const BufferSlice& state1,
                         const BufferSlice& state2, const BufferSlice& result) override {
        dispatchOp(bindings::checkOptimizerUpdate, encodeOptimizerUpdate, cb,
                   p, gradient, values, state0, state1, state2, result);
    }
    // ---- losses (issue 14)
    void lossElements(CommandBuffer& cb, const LossElementsParams& p, const BufferSlice& source,
                      const BufferSlice& labels, const BufferSlice& weights, const BufferSlice& destination,
                      const BufferSlice& loss, const BufferSlice& partials) override {
        dispatchOp(bindings::checkLossElements, encodeLossElements, cb,
                   p, source, labels, weights, destination, loss, partials);
    }
    void lossReduce(CommandBuffer& cb, const LossReduceParams& p, const BufferSlice& partials,
                    const BufferSlice& results) override {
        dispatchOp(bindings::checkLossReduce, encodeLossReduce, cb, p, partials, results);
    }
    void lossScaleGradient(CommandBuffer& cb, const LossScaleParams& p, const BufferSlice& results,
                           const BufferSlice& destination) override {
        dispatchOp(bindings::checkLossScaleGradient, encodeLossScaleGradient, cb, p, results, destination);
    }
    void yoloPrepare(CommandBuffer& cb, const YoloPrepareParams& p, const BufferSlice& source,
                     const BufferSlice& labels, const BufferSlice& anchors, const YoloParts& predictions,
                     const YoloParts& partLabels, const YoloParts& weights) override {
        dispatchOp(bindings::checkYoloPrepare, encodeYoloPrepare, cb,
                   p, source, labels, anchors, predictions, partLabels, weights);
    }
    void yoloFinish(CommandBuffer& cb, const YoloFinishParams& p, const BufferSlice& source,
                    const YoloParts& gradients, const YoloParts& losses, const BufferSlice& destination,
                    const BufferSlice& loss) override {
        dispatchOp(bindings::checkYoloFinish, encodeYoloFinish, cb, p, source, gradients, losses, destination, loss);
    }

    // ---- batch normalization family
    void batchNormalizationStatistics(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& source,
                                      const BatchNormalizationVectors& v) override {
        dispatchOp(bindings::checkBatchNormalizationStatistics, encodeBatchNormalizationStatistics, cb, p, source, v);
    }
    void batchNormalizationForward(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& source,
                                   const BatchNormalizationVectors& v, const BufferSlice& destination) override {
        dispatchOp(bindings::checkBatchNormalizationForward, encodeBatchNormalizationForward, cb,
                   p, source, v, destination);
    }
    void batchNormalizationStatisticsGradient(CommandBuffer& cb, const BatchNormalizationParams& p,
                                              const BufferSlice& gradient, const BufferSlice& source,
                                              const BatchNormalizationVectors& v) override {
        dispatchOp(bindings::checkBatchNormalizationStatisticsGradient, encodeBatchNormalizationStatisticsGradient, cb,
                   p, gradient, source, v);
    }
    void batchNormalizationGradient(CommandBuffer& cb, const BatchNormalizationParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const BatchNormalizationVectors& v,
                                    const BufferSlice& destination) override {
        dispatchOp(bindings::checkBatchNormalizationGradient, encodeBatchNormalizationGradient, cb,
                   p, gradient, source, v, destination);
    }
    // ---- end batch normalization family
    // ---- instance and group normalization
    void groupNormalizationForward(CommandBuffer& cb, const GroupNormalizationParams& p, const BufferSlice& source,
                                   const GroupNormalizationVectors& v, const BufferSlice& destination) override {
        dispatchOp(bindings::checkGroupNormalizationForward, encodeGroupNormalizationForward, cb,
                   p, source, v, destination);
    }
    void groupNormalizationGradient(CommandBuffer& cb, const GroupNormalizationParams& p, const BufferSlice& gradient,
                                    const BufferSlice& source, const GroupNormalizationVectors& v,
                                    const BufferSlice& destination) override {
        dispatchOp(bindings::checkGroupNormalizationGradient, encodeGroupNormalizationGradient, cb,
                   p, gradient, source, v, destination);
    }
    // ---- pooling family
    void poolingForward(CommandBuffer& cb, const PoolingParams& p, const BufferSlice& source,
                        const BufferSlice& destination) override {
        bindings::checkPoolingForward(p);
        AutoreleaseScope pool;
        encodePoolingForward(ctx_, cb, p, source, destination);
    }
    void poolingGradient(CommandBuffer& cb, const PoolingGradientParams& p, const BufferSlice& gradient,
                         const BufferSlice& source, const BufferSlice& destination) override {
        bindings::checkPoolingGradient(p);
        AutoreleaseScope pool;
        encodePoolingGradient(ctx_, cb, p, gradient, source, destination);
    }

    // ---- cross-channel / spatial / local contrast normalization
    void normalizationForward(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& source,
                              const BufferSlice& destination) override {
        dispatchOp(bindings::checkNormalizationForward, encodeNormalizationForward, cb, p, source, destination);
    }
    void normalizationGradient(CommandBuffer& cb, const NormalizationParams& p, const BufferSlice& gradient,
                               const BufferSlice& source, const BufferSlice& destination) override {
        dispatchOp(bindings::checkNormalizationGradient, encodeNormalizationGradient, cb,
                   p, gradient, source, destination);
    }

    // ---- upsampling and dropout families
    void upsamplingForward(CommandBuffer& cb, const UpsamplingParams& p, const BufferSlice& source,
                           const BufferSlice& destination) override {
        AutoreleaseScope pool;
        encodeUpsamplingForward(ctx_, cb, p, source, destination);
    }
    void upsamplingGradient(CommandBuffer& cb, const UpsamplingGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& destination) override {
        AutoreleaseScope pool;
        encodeUpsamplingGradient(ctx_, cb, p, gradient, destination);
    }
    void dropout(CommandBuffer& cb, const DropoutParams& p, const BufferSlice& source,
                 const BufferSlice& destination) override {
        AutoreleaseScope pool;
        encodeDropout(ctx_, cb, p, source, destination);
    }

    // ---- sub-pixel convolution
    void subPixelShuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& low,
                         const BufferSlice& high) override {
        dispatchOp(bindings::checkSubPixelShuffle, encodeSubPixelShuffle, cb, p, low, high);
    }
    void subPixelUnshuffle(CommandBuffer& cb, const SubPixelShuffleParams& p, const BufferSlice& high,
                           const BufferSlice& low) override {
        bindings::checkSubPixelShuffle(p, low, high);
        AutoreleaseScope pool;
        encodeSubPixelUnshuffle(ctx_, cb, p, high, low);
    }

    // ---- reshape and pad family
    void reshapeCopy(CommandBuffer& cb, const ReshapeParams& p, const BufferSlice& source,
                     const BufferSlice& destination) override {
        dispatchOp(bindings::checkReshapeCopy, encodeReshapeCopy, cb, p, source, destination);
    }
    void padForward(CommandBuffer& cb, const PadParams& p, const BufferSlice& source, const BufferSlice& destination,
                    const BufferSlice& maps, const BufferSlice& fill) override {
        dispatchOp(bindings::checkPadForward, encodePadForward, cb, p, source, destination, maps, fill);
    }
    void padGradient(CommandBuffer& cb, const PadGradientParams& p, const BufferSlice& gradient,
                     const BufferSlice& destination, const BufferSlice& maps) override {
        dispatchOp(bindings::checkPadGradient, encodePadGradient, cb, p, gradient, destination, maps);
    }

    // ---- Gram matrix and spatial mean
    void gramMatrix(CommandBuffer& cb, const GramMatrixParams& p, const BufferSlice& source,
                    const BufferSlice& destination) override {
        dispatchOp(bindings::checkGramMatrix, encodeGramMatrix, cb, p, source, destination);
    }
    void gramMatrixGradient(CommandBuffer& cb, const GramMatrixGradientParams& p, const BufferSlice& gradient,
                            const BufferSlice& source, const BufferSlice& destination) override {
        dispatchOp(bindings::checkGramMatrixGradient, encodeGramMatrixGradient, cb, p, gradient, source, destination);
    }
    void spatialMean(CommandBuffer& cb, const SpatialMeanParams& p, const BufferSlice& source,
                     const BufferSlice& destination) override {
        dispatchOp(bindings::checkSpatialMean, encodeSpatialMean, cb, p, source, destination);
    }
    void spatialMeanGradient(CommandBuffer& cb, const SpatialMeanGradientParams& p, const BufferSlice& gradient,
                             const BufferSlice& destination) override {
        dispatchOp(bindings::checkSpatialMeanGradient, encodeSpatialMeanGradient, cb, p, gradient, destination);
    }

private:
    // Every op: its binding check, then the family's encoder inside an autorelease scope (the
    // metal-cpp objects the encoder creates are released when the op returns).
    template <class Check, class Encode, class... Args>
    void dispatchOp(Check check, Encode encode, CommandBuffer& cb, const Args&... args) {
        check(args...);
        AutoreleaseScope pool;
        encode(ctx_, cb, args...);
    }

    MetalContext ctx_;
};

std::mutex reasonMutex;
std::string unavailableReason;

void setUnavailableReason(std::string reason) {
    std::lock_guard<std::mutex> lock(reasonMutex);
    unavailableReason = std::move(reason);
}

std::shared_ptr<Backend> createBackend() {
    AutoreleaseScope pool;
    MetalContext ctx;
    ctx.device = selectDevice();
    if (!ctx.device) {
        setUnavailableReason("this machine has no Metal device");
        return nullptr;
    }
    NS::String* name = ctx.device->name();
    ctx.deviceName = name && name->utf8String() ? name->utf8String() : "Metal device";
    if (!supportsKernels(ctx.device.get())) {
        // Better no Metal device than kernels that fail to build or compute garbage.
        setUnavailableReason("the Metal device '" + ctx.deviceName +
                             "' lacks SIMD-group reductions (GPU family Apple7 or Mac2 needed)");
        return nullptr;
    }
    KernelLibrary library = loadKernelLibrary(ctx.device.get());
    if (std::string reason = unsuitableReason(ctx.device.get(), library.library.get()); !reason.empty()) {
        setUnavailableReason("the Metal device '" + ctx.deviceName + "' " + reason);
        return nullptr;
    }
    ctx.pipelines = std::make_unique<PipelineCache>(ctx.device, library.library, library.description);
    ctx.buffers = std::make_shared<BufferPool>(ctx.device, poolLimitBytes(), exactBufferSizes());
    ctx.placeholder = ctx.buffers->allocate(16);
    setUnavailableReason("");
    return std::make_shared<MetalBackend>(std::move(ctx));
}

}  // namespace

MetalContext& contextOf(Backend& backend) {
    auto* metal = dynamic_cast<MetalBackend*>(&backend);
    if (!metal) throwValueError("expected the Metal backend, got the '", backend.name(), "' backend");
    return metal->context();
}

}  // namespace metal_backend

std::shared_ptr<Backend> makeMetalBackend() {
    // A missing device or library makes Metal unavailable (the CPU remains), never an exception
    // out of device discovery.
    try {
        return metal_backend::createBackend();
    } catch (const std::exception& e) {
        metal_backend::setUnavailableReason(e.what());
    } catch (...) {
        metal_backend::setUnavailableReason("unknown error while setting up Metal");
    }
    return nullptr;
}

std::string metalUnavailableReason() {
    std::lock_guard<std::mutex> lock(metal_backend::reasonMutex);
    return metal_backend::unavailableReason;
}

MetalBackendStats metalBackendStats(Backend& backend) {
    metal_backend::MetalContext& ctx = metal_backend::contextOf(backend);
    const metal_backend::BufferPool::Stats pool = ctx.buffers->stats();
    MetalBackendStats stats;
    stats.deviceName = ctx.deviceName;
    stats.library = ctx.pipelines->libraryDescription();
    stats.buffersCreated = pool.created;
    stats.buffersReused = pool.reused;
    stats.pooledBuffers = pool.pooledBuffers;
    stats.pooledBytes = pool.pooledBytes;
    stats.pipelines = ctx.pipelines->size();
    return stats;
}

void metalPreparePipeline(Backend& backend, const std::string& kernelName) {
    metal_backend::AutoreleaseScope pool;
    metal_backend::contextOf(backend).pipelines->get(kernelName);
}

void metalTrimBufferPool(Backend& backend) { metal_backend::contextOf(backend).buffers->trim(); }

}  // namespace mpsgrad
