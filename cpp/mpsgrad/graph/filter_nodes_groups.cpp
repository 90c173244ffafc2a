// The instance and group normalization nodes and their updates (filter_nodes_groups.h).
#include "graph/filter_nodes_groups.h"

#include "core/errors.h"

namespace mpsgrad {

template <class Family>
std::vector<std::shared_ptr<NNGradientFilterNode>> GroupNormalizationNodeOf<Family>::makeGradientNodes(
    const ImageNodePtr& g) {
    return {std::make_shared<GroupNormalizationGradientNodeOf<Family>>(g, sources_[0], resultState())};
}

template <class Family>
GroupNormalizationGradientNodeOf<Family>::GroupNormalizationGradientNodeOf(const ImageNodePtr& sourceGradient,
                                                                           const ImageNodePtr& sourceImage,
                                                                           const StateNodePtr& gradientState)
    : GradientKernelNode(sourceGradient, sourceImage, gradientState) {
    if (!dynamic_cast<GroupNormalizationNodeOf<Family>*>(gradientState->producer().get()))
        throwTypeError("gradient_state: expected the result state of a ", Family::forwardName);
}

template <class Family>
std::shared_ptr<GroupNormalizationNodeOf<Family>> GroupNormalizationGradientNodeOf<Family>::forward() const {
    return std::static_pointer_cast<GroupNormalizationNodeOf<Family>>(sourceStates_[0]->producer());
}

template <class Family>
void GroupNormalizationGradientNodeOf<Family>::checkTrainable() const {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto* updatable = dynamic_cast<NormalizationStateBatchUpdatable*>(forward()->dataSource().get());
    bool gpu = trainingStyle == NNTrainingStyle::UpdateDeviceGPU;
    if (!updatable || !(gpu ? updatable->supportsGPUUpdate() : updatable->supportsCPUUpdate()))
        throwValueError("training_style: ", className(), " trains with ",
                        gpu ? "UPDATE_DEVICE_GPU" : "UPDATE_DEVICE_CPU", " but its data source has no ",
                        gpu ? "update_gamma_and_beta_with_command_buffer(command_buffer, states)" : Family::cpuMethod,
                        " method; implement it or set training_style = UPDATE_DEVICE_NONE");
}

template <class Family>
void GroupNormalizationGradientNodeOf<Family>::afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) {
    if (trainingStyle == NNTrainingStyle::UpdateDeviceNone) return;
    auto node = forward();
    auto source = node->dataSource();
    auto* updatable = dynamic_cast<NormalizationStateBatchUpdatable*>(source.get());
    if (!updatable) return;  // checkTrainable() refused this at graph construction
    StateBatch batch = states.at(0);
    if (trainingStyle == NNTrainingStyle::UpdateDeviceGPU) {
        auto updated = updatable->updateGammaAndBetaWithCommandBuffer(cb, batch);
        if (updated) {
            node->kernel()->reloadGammaAndBetaWithCommandBuffer(cb, updated);
            return;
        }
        // No state returned: the data source updates itself (e.g. from its own completion handler,
        // registered before this one), so the kernel reloads from it once the work has run.
        cb.addCompletedHandler([node](CommandBuffer& done) {
            if (done.status() != CommandBufferStatus::Error) node->reloadFromDataSource();
        });
        return;
    }
    // CPU style: dγ and dβ exist once the work has run. The handler keeps the nodes alive.
    cb.addCompletedHandler([node, batch, updatable, source](CommandBuffer& done) {
        if (done.status() == CommandBufferStatus::Error) return;
        if (updatable->updateGammaAndBetaWithStateBatch(batch)) node->reloadFromDataSource();
    });
}

template class GroupNormalizationNodeOf<InstanceNormalizationFamily>;
template class GroupNormalizationNodeOf<GroupNormalizationFamily>;
template class GroupNormalizationGradientNodeOf<InstanceNormalizationFamily>;
template class GroupNormalizationGradientNodeOf<GroupNormalizationFamily>;

}  // namespace mpsgrad
