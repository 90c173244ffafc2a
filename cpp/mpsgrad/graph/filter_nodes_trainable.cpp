// The trainable nodes (MPSNNTrainableNode): convolution, fully connected and batch normalization,
// forward and gradient, and the parameter updates their gradient nodes run (spec §3.2):
//   GPU style: right after the gradient node is encoded, with the command buffer;
//   CPU style: from the command buffer's completion handler;
//   None: no update.
// After an update the forward and gradient kernels are reloaded, so the next encode uses the new
// parameters.
#include "core/errors.h"
#include "graph/filter_nodes.h"

namespace mpsgrad {

// ---- convolution ---------------------------------------------------------------------------------------

CNNConvolutionNode::CNNConvolutionNode(const ImageNodePtr& source, std::shared_ptr<CNNConvolutionDataSource> weights)
    : NNFilterNode({source}, {}), dataSource_(std::move(weights)) {
    checkNodeNotNull(dataSource_.get(), "weights");
    addResultState<CNNConvolutionGradientStateNode>();
}

void CNNConvolutionNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNConvolution>(device, dataSource_);
}

NodeEncodeResult CNNConvolutionNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                            const std::vector<StateBatch>&) {
    prepareKernel(*kernel_, ctx);
    kernel_->accumulatorPrecisionOption = accumulatorPrecision;
    return encodeUnaryKernel(*kernel_, ctx, images[0]);
}

void CNNConvolutionNode::reloadFromDataSource() {
    if (kernel_) kernel_->reloadWeightsAndBiasesFromDataSource();
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNConvolutionNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<CNNConvolutionGradientNode>(g, sources_[0], resultState(), nullptr)};
}

CNNConvolutionGradientNode::CNNConvolutionGradientNode(const ImageNodePtr& sourceGradient,
                                                       const ImageNodePtr& sourceImage,
                                                       const StateNodePtr& convolutionGradientState,
                                                       std::shared_ptr<CNNConvolutionDataSource> weights)
    : NNGradientFilterNode(sourceGradient, sourceImage, convolutionGradientState), weights_(std::move(weights)) {
    checkStateNode<CNNConvolutionGradientStateNode>(convolutionGradientState, "convolution_gradient_state",
                                                    "CNNConvolutionGradientStateNode");
}

CNNConvolutionNode* CNNConvolutionGradientNode::forwardConvolution() const {
    if (auto* node = dynamic_cast<CNNConvolutionNode*>(forward_.get())) return node;
    // Built directly: the forward node is the producer of the gradient state.
    return dynamic_cast<CNNConvolutionNode*>(sourceStates_[0]->producer().get());
}

std::shared_ptr<CNNConvolutionDataSource> CNNConvolutionGradientNode::dataSource() const {
    if (weights_) return weights_;
    if (auto* forward = forwardConvolution()) return forward->dataSource();
    throwValueError("weights: ", className(), " was given no weights and its gradient state does not come from a "
                    "CNNConvolutionNode");
}

void CNNConvolutionGradientNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNConvolutionGradient>(device, dataSource());
}

NodeEncodeResult CNNConvolutionGradientNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                    const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    // dL/dX that nothing reads (typically the gradient of a training graph's input image, whose
    // result is not needed) is not computed: only the weight and bias gradients are.
    kernel_->gradientOption = ctx.resultIsRead ? CNNConvolutionGradientOption::All
                                               : CNNConvolutionGradientOption::GradientWithWeightsAndBias;
    return encodeGradientKernel(*kernel_, ctx, images, states);
}

void CNNConvolutionGradientNode::checkTrainable() const {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto source = dataSource();
    auto* updatable = dynamic_cast<CNNConvolutionUpdatableDataSource*>(source.get());
    bool gpu = trainingStyle == NNTrainingStyle::UpdateDeviceGPU;
    if (!updatable || !(gpu ? updatable->supportsGPUUpdate() : updatable->supportsCPUUpdate()))
        throwValueError("training_style: ", className(), " trains with ",
                        gpu ? "UPDATE_DEVICE_GPU" : "UPDATE_DEVICE_CPU", " but its data source has no ",
                        gpu ? "update_with_command_buffer(command_buffer, gradient_state, source_state)"
                            : "update_with_gradient_state(gradient_state, source_state)",
                        " method; implement it or set training_style = UPDATE_DEVICE_NONE");
}

std::shared_ptr<CNNConvolutionWeightsAndBiasesState> CNNConvolutionGradientNode::exportForwardWeights(
    CommandBuffer& cb) {
    auto* forward = forwardConvolution();
    if (forward && forward->kernel()) return forward->kernel()->exportWeightsAndBiasesWithCommandBuffer(cb, false);
    return nullptr;
}

void CNNConvolutionGradientNode::reloadKernels(CommandBuffer* cb,
                                               const std::shared_ptr<CNNConvolutionWeightsAndBiasesState>& state) {
    auto* forward = forwardConvolution();
    if (state && cb) {
        if (forward && forward->kernel()) forward->kernel()->reloadWeightsAndBiasesWithCommandBuffer(*cb, state);
        kernel_->reloadWeightsAndBiasesWithCommandBuffer(*cb, state);
    } else {
        if (forward) forward->reloadFromDataSource();
        kernel_->reloadWeightsAndBiasesFromDataSource();
    }
}

void CNNConvolutionGradientNode::reloadFromDataSource() {
    if (kernel_) kernel_->reloadWeightsAndBiasesFromDataSource();
}

void CNNConvolutionGradientNode::afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto source = dataSource();
    auto* updatable = dynamic_cast<CNNConvolutionUpdatableDataSource*>(source.get());
    if (!updatable) return;  // checkTrainable() refused this at graph construction
    // The batch shares one gradient state (the weight gradient summed over the batch).
    auto gradientState = std::dynamic_pointer_cast<CNNConvolutionGradientState>(states.at(0).at(0));
    if (trainingStyle == NNTrainingStyle::UpdateDeviceGPU) {
        auto current = exportForwardWeights(cb);
        auto updated = updatable->updateWithCommandBuffer(cb, gradientState, current);
        reloadKernels(&cb, updated);
        return;
    }
    // CPU style: once the gradient exists. The node is kept alive by the handler.
    auto self = std::static_pointer_cast<CNNConvolutionGradientNode>(shared_from_this());
    cb.addCompletedHandler([self, gradientState, updatable, source](CommandBuffer& done) {
        if (done.status() == CommandBufferStatus::Error) return;
        if (updatable->updateWithGradientState(gradientState, nullptr)) self->reloadKernels(nullptr, nullptr);
    });
}

// ---- fully connected ---------------------------------------------------------------------------------------

CNNFullyConnectedNode::CNNFullyConnectedNode(const ImageNodePtr& source,
                                             std::shared_ptr<CNNConvolutionDataSource> weights)
    : CNNConvolutionNode(source, std::move(weights)) {}

void CNNFullyConnectedNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNFullyConnected>(device, dataSource_);
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNFullyConnectedNode::makeGradientNodes(const ImageNodePtr& g) {
    return {std::make_shared<CNNFullyConnectedGradientNode>(g, sources_[0], resultState(), nullptr)};
}

CNNFullyConnectedGradientNode::CNNFullyConnectedGradientNode(const ImageNodePtr& sourceGradient,
                                                             const ImageNodePtr& sourceImage,
                                                             const StateNodePtr& convolutionGradientState,
                                                             std::shared_ptr<CNNConvolutionDataSource> weights)
    : CNNConvolutionGradientNode(sourceGradient, sourceImage, convolutionGradientState, std::move(weights)) {}

void CNNFullyConnectedGradientNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNFullyConnectedGradient>(device, dataSource());
}

// ---- batch normalization ---------------------------------------------------------------------------------

namespace {
// With the graph's batchNormalizationSync set, a host point that hands it `state` once the sums the
// stage names have been computed, before anything encoded later reads them.
void encodeBatchNormalizationSync(NodeEncodeContext& ctx, const std::shared_ptr<CNNBatchNormalizationState>& state,
                                  BatchNormalizationSyncStage stage, int64_t count) {
    if (!ctx.batchNormalizationSync) return;
    ctx.cb.encodeHostCallback([handler = *ctx.batchNormalizationSync, state, stage, count] {
        handler(state, stage, count);
    });
}
}  // namespace

CNNBatchNormalizationNode::CNNBatchNormalizationNode(const ImageNodePtr& source,
                                                     std::shared_ptr<CNNBatchNormalizationDataSource> dataSource)
    : NNFilterNode({source}, {}), dataSource_(std::move(dataSource)) {
    checkNodeNotNull(dataSource_.get(), "data_source");
    addResultState<NNGradientStateNode>();
}

void CNNBatchNormalizationNode::createKernels(const Device& device) {
    kernel_ = std::make_shared<CNNBatchNormalization>(device, dataSource_);
    statistics_ = std::make_shared<CNNBatchNormalizationStatistics>(device);
}

void CNNBatchNormalizationNode::reloadFromDataSource() {
    if (!kernel_) return;
    kernel_->reloadGammaAndBetaFromDataSource();
    kernel_->reloadMeanAndVarianceFromDataSource();
}

NodeEncodeResult CNNBatchNormalizationNode::encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                                                   const std::vector<StateBatch>&) {
    return encodeWith(*kernel_, ctx, images[0]);
}

NodeEncodeResult CNNBatchNormalizationNode::encodeWith(CNNBatchNormalization& kernel, NodeEncodeContext& ctx,
                                                       const ImageBatch& sources) {
    prepareKernel(kernel, ctx);
    // Training (a gradient reads the state): batch statistics unless the flags say Never;
    // inference: the data source's mean and variance unless the flags say Always.
    bool batchStatistics = ctx.wantStates ? flags != CNNBatchNormalizationFlags::CalculateStatisticsNever
                                          : flags == CNNBatchNormalizationFlags::CalculateStatisticsAlways;
    NodeEncodeResult result;
    if (!ctx.wantStates && !batchStatistics) {
        result.images = kernel.encodeBatch(ctx.cb, sources);
        return result;
    }
    auto state = std::static_pointer_cast<CNNBatchNormalizationState>(
        kernel.resultState(sources.at(0), {}, nullptr));
    if (batchStatistics) {
        statistics_->encodeBatch(ctx.cb, sources, state);  // a batch barrier
        encodeBatchNormalizationSync(ctx, state, BatchNormalizationSyncStage::Statistics, state->statisticsCount);
    }
    ImageDescriptor descriptor = kernel.destinationImageDescriptor(sources, {});
    ImageBatch destinations =
        ctx.allocator->imageBatchForCommandBuffer(ctx.cb, descriptor, &kernel, sources.size());
    StateBatch states(sources.size(), state);
    kernel.encodeBatch(ctx.cb, sources, states, destinations);
    result.images = std::move(destinations);
    if (ctx.wantStates) result.states.push_back(std::move(states));
    return result;
}

std::vector<std::shared_ptr<NNGradientFilterNode>> CNNBatchNormalizationNode::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<CNNBatchNormalizationGradientNode>(g, sources_[0], resultState())};
}

CNNBatchNormalizationGradientNode::CNNBatchNormalizationGradientNode(const ImageNodePtr& sourceGradient,
                                                                     const ImageNodePtr& sourceImage,
                                                                     const StateNodePtr& gradientState)
    : NNGradientFilterNode(sourceGradient, sourceImage, gradientState) {
    checkStateNode<NNGradientStateNode>(gradientState, "gradient_state", "NNGradientStateNode");
    if (!dynamic_cast<CNNBatchNormalizationNode*>(gradientState->producer().get()))
        throwTypeError("gradient_state: expected the result state of a CNNBatchNormalizationNode");
}

CNNBatchNormalizationNode* CNNBatchNormalizationGradientNode::forwardBatchNormalization() const {
    return static_cast<CNNBatchNormalizationNode*>(sourceStates_[0]->producer().get());
}

void CNNBatchNormalizationGradientNode::createKernels(const Device& device) {
    statisticsGradient_ = std::make_shared<CNNBatchNormalizationStatisticsGradient>(device);
    kernel_ = std::make_shared<CNNBatchNormalizationGradient>(device);
}

NodeEncodeResult CNNBatchNormalizationGradientNode::encode(NodeEncodeContext& ctx,
                                                           const std::vector<ImageBatch>& images,
                                                           const std::vector<StateBatch>& states) {
    prepareKernel(*kernel_, ctx);
    auto state = std::dynamic_pointer_cast<CNNBatchNormalizationState>(states.at(0).at(0));
    if (!state) throwTypeError("gradient_state: expected a CNNBatchNormalizationState");
    // dγ and dβ over the whole batch first (they enter every image's dX), then dX.
    statisticsGradient_->encodeBatch(ctx.cb, images.at(0), images.at(1), state);
    // Only batch statistics were synchronized in the forward pass; running ones are the same everywhere.
    if (state->statisticsCount > 0)
        encodeBatchNormalizationSync(ctx, state, BatchNormalizationSyncStage::Gradients,
                                     state->statisticsGradientCount);
    return encodeGradientKernel(*kernel_, ctx, images, states);
}

void CNNBatchNormalizationGradientNode::checkTrainable() const {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto source = forwardBatchNormalization()->dataSource();
    auto* updatable = dynamic_cast<CNNBatchNormalizationUpdatableDataSource*>(source.get());
    // GPU style uses the command-buffer methods when the data source has them, else (as before
    // they existed in mpsgrad) the CPU methods from the completion handler.
    if (!updatable || (!updatable->updatesOnCommandBuffer() && !updatable->updatesAfterCompletion()))
        throwValueError("training_style: ", className(), " trains but its data source has neither "
                        "update_gamma_and_beta_with_command_buffer(command_buffer, state) (GPU style) nor "
                        "update_gamma_and_beta_with_batch_normalization_state(state) (CPU style); implement one or "
                        "set training_style = UPDATE_DEVICE_NONE");
    if (trainingStyle == NNTrainingStyle::UpdateDeviceCPU && !updatable->updatesAfterCompletion())
        throwValueError("training_style: UPDATE_DEVICE_CPU needs the data source's "
                        "update_gamma_and_beta_with_batch_normalization_state(state) method");
}

void CNNBatchNormalizationGradientNode::afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto forward = std::static_pointer_cast<CNNBatchNormalizationNode>(sourceStates_[0]->producer());
    auto source = forward->dataSource();
    auto* updatable = dynamic_cast<CNNBatchNormalizationUpdatableDataSource*>(source.get());
    if (!updatable) return;  // checkTrainable() refused this at graph construction
    auto state = std::dynamic_pointer_cast<CNNBatchNormalizationState>(states.at(0).at(0));
    if (trainingStyle == NNTrainingStyle::UpdateDeviceGPU && updatable->updatesOnCommandBuffer()) {
        // Right after the gradient, on the same command buffer (MPS's GPU style): returned states are
        // reloaded there; without one the data source updates itself, and the kernel reloads from it
        // once the work has run.
        auto gammaAndBeta = updatable->updateGammaAndBetaWithCommandBuffer(cb, state);
        auto meanAndVariance = updatable->updateMeanAndVarianceWithCommandBuffer(cb, state);
        if (gammaAndBeta) forward->kernel()->reloadGammaAndBetaWithCommandBuffer(cb, gammaAndBeta);
        if (meanAndVariance) forward->kernel()->reloadMeanAndVarianceWithCommandBuffer(cb, meanAndVariance);
        if (gammaAndBeta && meanAndVariance) return;
        // Without a mean-and-variance method for the command buffer, the CPU one (if any) updates
        // the running statistics at completion.
        const bool meanOnCommandBuffer = updatable->updatesMeanAndVarianceOnCommandBuffer();
        cb.addCompletedHandler([forward, source, updatable, state, gammaAndBeta, meanAndVariance,
                                meanOnCommandBuffer](CommandBuffer& done) {
            if (done.status() == CommandBufferStatus::Error) return;
            if (!gammaAndBeta) forward->kernel()->reloadGammaAndBetaFromDataSource();
            if (!meanAndVariance && (meanOnCommandBuffer || updatable->updateMeanAndVariance(state)))
                forward->kernel()->reloadMeanAndVarianceFromDataSource();
        });
        return;
    }
    // CPU style (and GPU style on a data source with only the CPU methods): dγ, dβ and the batch
    // statistics exist once the work has run.
    cb.addCompletedHandler([forward, state, updatable, source](CommandBuffer& done) {
        if (done.status() == CommandBufferStatus::Error) return;
        bool reloadGamma = updatable->updateGammaAndBeta(state);
        bool reloadMean = updatable->updateMeanAndVariance(state);
        if (reloadGamma) forward->kernel()->reloadGammaAndBetaFromDataSource();
        if (reloadMean) forward->kernel()->reloadMeanAndVarianceFromDataSource();
    });
}

}  // namespace mpsgrad
