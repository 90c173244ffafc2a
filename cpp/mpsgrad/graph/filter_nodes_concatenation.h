// The concatenation nodes (spec §2.11, §3.1): MPSNNConcatenationNode, which concatenates its
// sources along feature channels with each source's range starting at a multiple of 4 (a
// CNNConcatenation kernel), and MPSNNConcatenationGradientNode, the slice of the gradient for one
// source's channel range (a CNNConcatenationGradient kernel). docs/concatenation.md.
#pragma once

#include "graph/filter_nodes.h"
#include "kernels/concatenation.h"

namespace mpsgrad {

// MPSNNMultiaryGradientStateNode: the state a multiary node (concatenation) gives its gradient nodes.
class NNMultiaryGradientStateNode final : public NNStateNode {
public:
    const char* className() const override { return "NNMultiaryGradientStateNode"; }
};

// MPSNNConcatenationNode (+nodeWithSources: / -initWithSources:; at least one source).
class NNConcatenationNode final : public NNFilterNode {
public:
    explicit NNConcatenationNode(std::vector<ImageNodePtr> sources);
    const char* className() const override { return "NNConcatenationNode"; }

    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;
    // -gradientFiltersWithSources: one NNConcatenationGradientNode per source, in source order.
    std::vector<std::shared_ptr<NNGradientFilterNode>> gradientFiltersWithSources(
        const std::vector<ImageNodePtr>& sourceGradients) override;

protected:
    void createKernels(const Device& device) override;

private:
    std::shared_ptr<CNNConcatenation> kernel_;
};

// MPSNNConcatenationGradientNode (-initWithSourceGradient:sourceImage:gradientState:). The source
// index is where sourceImage appears among the sources of the concatenation node that produces
// gradientState (the first place, when it appears twice; the training-graph builder passes the index).
class NNConcatenationGradientNode final : public NNGradientFilterNode {
public:
    NNConcatenationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                const StateNodePtr& gradientState);
    NNConcatenationGradientNode(const ImageNodePtr& sourceGradient, const ImageNodePtr& sourceImage,
                                const StateNodePtr& gradientState, size_t sourceIndex);
    const char* className() const override { return "NNConcatenationGradientNode"; }

    size_t sourceIndex() const { return sourceIndex_; }
    NodeEncodeResult encode(NodeEncodeContext& ctx, const std::vector<ImageBatch>& images,
                            const std::vector<StateBatch>& states) override;

protected:
    void createKernels(const Device& device) override;

private:
    size_t sourceIndex_ = 0;
    std::shared_ptr<CNNConcatenationGradient> kernel_;
};

}  // namespace mpsgrad
