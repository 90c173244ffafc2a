// The instance and group normalization nodes (MPSNNTrainableNode), forward and gradient. Both
// families share their kernels' bases (kernels/normalization_groups.h), so one template serves both:
// the forward node runs CNNInstanceNormalization / CNNGroupNormalization and writes one gradient
// state per image; the gradient node runs the gradient kernel (dX and the states' dγ, dβ) and then
// calls the data source's update with the batch of states, as the batch-normalization nodes do:
//   GPU style: right after encoding, -updateGammaAndBetaWithCommandBuffer:...StateBatch: (its
//              CNNNormalizationGammaAndBetaState, when returned, is reloaded into the forward kernel
//              on the command buffer; otherwise the kernel reloads from the data source when the
//              command buffer completes) [I];
//   CPU style: from the completion handler, -updateGammaAndBetaWith...StateBatch:, then a reload;
//   None: no update.
#pragma once

#include "graph/filter_nodes.h"
#include "kernels/group_normalization.h"
#include "kernels/instance_normalization.h"

namespace mpsgrad {

// The optional update methods of MPSCNNInstanceNormalizationDataSource /
// MPSCNNGroupNormalizationDataSource (the batch-of-states forms), for the graph to call.
class NormalizationStateBatchUpdatable {
public:
    virtual ~NormalizationStateBatchUpdatable() = default;
    virtual bool supportsGPUUpdate() const = 0;
    virtual bool supportsCPUUpdate() const = 0;
    // GPU style: the new gamma and beta (reloaded on the command buffer), or null (reload from the source).
    virtual std::shared_ptr<CNNNormalizationGammaAndBetaState> updateGammaAndBetaWithCommandBuffer(
        CommandBuffer& cb, const StateBatch& states) = 0;
    // CPU style (the states' command buffer has completed): true = reload from the data source.
    virtual bool updateGammaAndBetaWithStateBatch(const StateBatch& states) = 0;
};

// What distinguishes the two families.
struct InstanceNormalizationFamily {
    using DataSource = CNNInstanceNormalizationDataSource;
    using Kernel = CNNInstanceNormalization;
    using Gradient = CNNInstanceNormalizationGradient;
    static constexpr const char* forwardName = "CNNInstanceNormalizationNode";
    static constexpr const char* gradientName = "CNNInstanceNormalizationGradientNode";
    static constexpr const char* cpuMethod = "update_gamma_and_beta_with_instance_normalization_state_batch(states)";
};
struct GroupNormalizationFamily {
    using DataSource = CNNGroupNormalizationDataSource;
    using Kernel = CNNGroupNormalization;
    using Gradient = CNNGroupNormalizationGradient;
    static constexpr const char* forwardName = "CNNGroupNormalizationNode";
    static constexpr const char* gradientName = "CNNGroupNormalizationGradientNode";
    static constexpr const char* cpuMethod = "update_gamma_and_beta_with_group_normalization_state_batch(states)";
};

// MPSCNNInstanceNormalizationNode / MPSCNNGroupNormalizationNode (+nodeWithSource:dataSource:)
template <class Family>
class GroupNormalizationNodeOf final : public UnaryKernelNode {
public:
    GroupNormalizationNodeOf(const ImageNodePtr& source, std::shared_ptr<typename Family::DataSource> dataSource)
        : UnaryKernelNode(source), dataSource_(std::move(dataSource)) {
        checkNodeNotNull(dataSource_.get(), "data_source");
    }
    const char* className() const override { return Family::forwardName; }
    const std::shared_ptr<typename Family::DataSource>& dataSource() const { return dataSource_; }
    typename Family::Kernel* kernel() const { return static_cast<typename Family::Kernel*>(kernel_.get()); }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void reloadFromDataSource() override {
        if (kernel_) kernel()->reloadGammaAndBetaFromDataSource();
    }

protected:
    std::shared_ptr<CNNKernel> makeKernel(const Device& device) override {
        return std::make_shared<typename Family::Kernel>(device, dataSource_);
    }
    std::vector<std::shared_ptr<NNGradientFilterNode>> makeGradientNodes(const ImageNodePtr& sourceGradient) override;

private:
    std::shared_ptr<typename Family::DataSource> dataSource_;
};

// MPSCNNInstanceNormalizationGradientNode / MPSCNNGroupNormalizationGradientNode
// (+nodeWithSourceGradient:sourceImage:gradientState:)
template <class Family>
class GroupNormalizationGradientNodeOf final : public GradientKernelNode {
public:
    GroupNormalizationGradientNodeOf(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                     const StateNodePtr& gradientState);
    const char* className() const override { return Family::gradientName; }

    NNTrainingStyle trainingStyle = NNTrainingStyle::UpdateDeviceGPU;
    NNTrainingStyle* trainingStylePointer() override { return &trainingStyle; }
    void checkTrainable() const override;
    void afterEncode(CommandBuffer& cb, const std::vector<StateBatch>& states) override;

protected:
    std::shared_ptr<CNNGradientKernel> makeKernel(const Device& device) override {
        return std::make_shared<typename Family::Gradient>(device);
    }

private:
    std::shared_ptr<GroupNormalizationNodeOf<Family>> forward() const;
};

using CNNInstanceNormalizationNode = GroupNormalizationNodeOf<InstanceNormalizationFamily>;
using CNNInstanceNormalizationGradientNode = GroupNormalizationGradientNodeOf<InstanceNormalizationFamily>;
using CNNGroupNormalizationNode = GroupNormalizationNodeOf<GroupNormalizationFamily>;
using CNNGroupNormalizationGradientNode = GroupNormalizationGradientNodeOf<GroupNormalizationFamily>;

extern template class GroupNormalizationNodeOf<InstanceNormalizationFamily>;
extern template class GroupNormalizationNodeOf<GroupNormalizationFamily>;
extern template class GroupNormalizationGradientNodeOf<InstanceNormalizationFamily>;
extern template class GroupNormalizationGradientNodeOf<GroupNormalizationFamily>;

}  // namespace mpsgrad
