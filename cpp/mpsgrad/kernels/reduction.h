// The Gram matrix and spatial-mean family: NNGramMatrixCalculation / NNGramMatrixCalculationGradient
// (MPSCNNConvolution.h, 10.15) and the spatial-mean reduction with its gradient, the kernels behind
// MPSNNReductionSpatialMeanNode / MPSNNReductionSpatialMeanGradientNode (Apple publishes no kernel
// class for them; the names NNReductionSpatialMean / NNReductionSpatialMeanGradient are mpsgrad's).
// Semantics: metal/reduction_params.h; docs/gram_matrix_spatial_mean.md.
#pragma once

#include <cstdint>
#include <memory>

#include "core/kernel.h"

namespace mpsgrad {

// The state NNGramMatrixCalculation writes for its gradient (the forward geometry, in the snapshot).
class NNGramMatrixCalculationGradientState final : public NNGradientState {
public:
    using NNGradientState::NNGradientState;
    const char* className() const override { return "NNGramMatrixCalculationGradientState"; }
};

// MPSNNGramMatrixCalculation: for each image, the uncentered cross-correlation of its feature
// channel planes, G[f][c] = alpha * sum over pixels of X[f] * X[c], written as an N-wide, 1-high
// image of N feature channels (pixel x = f holds row f; N = the source channels read, after
// source_feature_channel_offset / max count), from destination_feature_channel_offset on.
// Apple's header: "does not support non-default offset or clipRect properties" — offset.x/y must
// be 0 and clip_rect must start at (0, 0) and cover the N x 1 result (ValueError otherwise).
class NNGramMatrixCalculation final : public CNNKernel {
public:
    // -initWithDevice: (alpha 1) / -initWithDevice:alpha:
    explicit NNGramMatrixCalculation(const Device& device, float alpha = 1.0f);
    const char* className() const override { return "NNGramMatrixCalculation"; }

    float alpha = 1.0f;  // MPSNNGramMatrixCalculation.alpha (read/write)

    static std::shared_ptr<NNGramMatrixCalculation> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override;
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
};

// MPSNNGramMatrixCalculationGradient: dX[p][f] = alpha * sum over c of X[p][c] * (Gr[f][c] + Gr[c][f]).
// primary = Gr (the N x 1 x N gradient of the Gram matrix), secondary = the forward source X,
// gradient_state = the forward's NNGramMatrixCalculationGradientState. alpha is this kernel's own
// (the graph's gradient node copies the forward's).
class NNGramMatrixCalculationGradient final : public CNNGradientKernel {
public:
    // -initWithDevice: (alpha 1) / -initWithDevice:alpha:
    explicit NNGramMatrixCalculationGradient(const Device& device, float alpha = 1.0f);
    const char* className() const override { return "NNGramMatrixCalculationGradient"; }

    float alpha = 1.0f;  // MPSNNGramMatrixCalculationGradient.alpha (read/write)

    static std::shared_ptr<NNGramMatrixCalculationGradient> initWithCoder(serial::Reader& reader,
                                                                          const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;
};

// The state NNReductionSpatialMean writes for its gradient: the source region it averaged.
class NNReductionSpatialMeanGradientState final : public NNGradientState {
public:
    using NNGradientState::NNGradientState;
    const char* className() const override { return "NNReductionSpatialMeanGradientState"; }
    Region sourceRegion;  // clip_rect_source intersected with the source
};

// The spatial mean (global average pooling) of MPSNNReductionSpatialMeanNode: one destination pixel
// per image holding, per feature channel, the mean over clip_rect_source (MPSNNUnaryReductionNode.
// clipRectSource; default: the whole source). The pixel written is clip_rect.origin; the returning
// encode forms make a 1 x 1 destination. offset.x/y must be 0 (the region is clip_rect_source).
class NNReductionSpatialMean final : public CNNKernel {
public:
    explicit NNReductionSpatialMean(const Device& device);
    const char* className() const override { return "NNReductionSpatialMean"; }

    Region clipRectSource = rectNoClip();

    static std::shared_ptr<NNReductionSpatialMean> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override;
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
};

// The gradient of the spatial mean (MPSNNReductionSpatialMeanGradientNode's kernel): dX = G / (w * h)
// over the forward's source region, 0 elsewhere; G is read at the pixel the forward wrote (moved
// by primary_offset). dX is sized like the forward source.
class NNReductionSpatialMeanGradient final : public CNNGradientKernel {
public:
    explicit NNReductionSpatialMeanGradient(const Device& device);
    const char* className() const override { return "NNReductionSpatialMeanGradient"; }
    // Both backends write every pixel of dX (zeros outside the region), so a returning encode skips
    // the zero fill, but only when the forward read all of its source's channels: otherwise dX has
    // channels this kernel never writes. Set from the forward's snapshot (configureFromSnapshot),
    // which the returning encodes read before they allocate.
    bool writesEveryDestinationPixel() const override { return writesAllChannels_; }

    static std::shared_ptr<NNReductionSpatialMeanGradient> initWithCoder(serial::Reader& reader,
                                                                         const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    bool writesAllChannels_ = false;
};

}  // namespace mpsgrad
