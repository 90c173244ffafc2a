// The reshape and pad family (MPSNNReshape.h): NNReshape, NNReshapeGradient, NNPad, NNPadGradient
// and the gradient states they pass (spec §3.1 "other pairs"; docs/reshape_pad.md).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"
#include "metal/reshape_pad_params.h"

namespace mpsgrad {

// MPSImageCoordinate
struct ImageCoordinate {
    uint64_t x = 0;
    uint64_t y = 0;
    uint64_t channel = 0;
};

// The state NNReshape writes for NNReshapeGradient (mpsgrad's MPSNNGradientState): the forward
// geometry (snapshot) holds both shapes.
class NNReshapeGradientState final : public NNGradientState {
public:
    using NNGradientState::NNGradientState;
    const char* className() const override { return "NNReshapeGradientState"; }
    int64_t reshapedChannels = 0;  // channels the forward pass wrote
};

// MPSNNReshape: copies the source into a destination of another shape with the same number of
// elements, element order HWC (row-major over height, width, feature channels) in both.
// The source is the whole image (its channels after source_feature_channel_offset /
// source_feature_channel_max_count); the destination is the whole destination image from
// destination_feature_channel_offset on. offset.x/y must be 0 and clip_rect must not cut the
// destination (ValueError otherwise) [mpsgrad: Apple's header does not define them for reshape].
class NNReshape final : public CNNKernel {
public:
    // -initWithDevice:
    explicit NNReshape(const Device& device);
    const char* className() const override { return "NNReshape"; }

    // macOS 11 explicit-shape forms:
    // -encodeToCommandBuffer:sourceImage:reshapedWidth:reshapedHeight:reshapedFeatureChannels:
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, int64_t reshapedWidth, int64_t reshapedHeight,
                    int64_t reshapedFeatureChannels);
    // -encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary:reshapedWidth:...
    ImagePtr encode(CommandBuffer& cb, const ImagePtr& source, StatePtr* destinationState,
                    bool destinationStateIsTemporary, int64_t reshapedWidth, int64_t reshapedHeight,
                    int64_t reshapedFeatureChannels);
    // -encodeBatchToCommandBuffer:sourceImages:[destinationStates:destinationStateIsTemporary:]reshapedWidth:...
    ImageBatch encodeBatch(CommandBuffer& cb, const ImageBatch& sources, StateBatch* destinationStates,
                           bool destinationStateIsTemporary, int64_t reshapedWidth, int64_t reshapedHeight,
                           int64_t reshapedFeatureChannels);
    using CNNKernel::encode;
    using CNNKernel::encodeBatch;

    // -initWithCoder:device:
    static std::shared_ptr<NNReshape> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    // The returning forms without a shape keep the source's shape [mpsgrad].
    int64_t destinationFeatureChannels(const Image& source) const override;
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    // The whole destination image, every channel after the destination channel offset.
    bool writesEveryDestinationPixel() const override { return true; }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    struct Shape {
        int64_t width = 0, height = 0, channels = 0;  // 0: not set
    };
    template <class F>
    auto withShape(int64_t width, int64_t height, int64_t channels, F&& run);
    Shape pendingShape_;
};

// MPSNNReshapeGradient: reshapes the incoming gradient back into the forward source's shape.
// primary = G (shaped like the forward destination), secondary = the forward source (only its
// size is checked), gradient_state = the NNReshape's result state.
class NNReshapeGradient final : public CNNGradientKernel {
public:
    // -initWithDevice:
    explicit NNReshapeGradient(const Device& device);
    const char* className() const override { return "NNReshapeGradient"; }
    // The gradient copies every element back (the two shapes hold the same elements), so a
    // returning encode skips the zero fill, but only when the forward read all of its source's
    // channels: otherwise dX has channels this kernel never writes. Set from the forward's
    // snapshot (configureFromSnapshot), which the returning encodes read before they allocate.
    bool writesEveryDestinationPixel() const override { return writesAllChannels_; }

    static std::shared_ptr<NNReshapeGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    bool writesAllChannels_ = false;
};

// The state NNPad writes for NNPadGradient: the forward pass's resolved index maps
// (metal/reshape_pad_params.h), so the gradient sums exactly the copies the forward made.
class NNPadGradientState final : public NNGradientState {
public:
    using NNGradientState::NNGradientState;
    const char* className() const override { return "NNPadGradientState"; }
    std::vector<int32_t> mapX, mapY, mapC;  // per written column / row / channel: source index or -1
};

// MPSNNPad: copies the source into a larger (or smaller) destination, filling the border by the
// edge mode: ZERO (0), CONSTANT (fill_value or the per-channel fill array), CLAMP (nearest edge
// pixel), MIRROR (reflection without repeating the edge: np.pad "reflect"), MIRROR_WITH_EDGE
// (reflection repeating it: np.pad "symmetric"). Destination pixel clip_rect.origin + p reads
// source pixel offset + p; channel k of the written range (from destination_feature_channel_offset)
// reads processed source channel k - padding_size_before.channel. The returning encode forms size
// the destination as source + padding_size_before + padding_size_after and set offset =
// -padding_size_before, clip_rect = the whole destination.
class NNPad final : public CNNKernel {
public:
    // -initWithDevice:
    explicit NNPad(const Device& device);
    // -initWithDevice:paddingSizeBefore:paddingSizeAfter:[fillValueArray:]
    NNPad(const Device& device, ImageCoordinate paddingSizeBefore, ImageCoordinate paddingSizeAfter,
          std::vector<float> fillValueArray = {});
    const char* className() const override { return "NNPad"; }

    ImageCoordinate paddingSizeBefore;
    ImageCoordinate paddingSizeAfter;
    float fillValue = 0.0f;  // EdgeMode CONSTANT; ignored when fillValueArray() is not empty
    // The per-channel fill values of the initializer (one per channel written, from the first).
    const std::vector<float>& fillValueArray() const { return fillValueArray_; }

    static std::shared_ptr<NNPad> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override;
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    // Every pixel of the clip rect (the whole padded image), every channel written: fill or source.
    bool writesEveryDestinationPixel() const override { return true; }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    std::vector<float> fillValueArray_;
};

// MPSNNPadGradient: dX[i] = the sum of G over every destination element the forward pass copied
// from source element i (ZERO / CONSTANT: a slice of G; CLAMP / MIRROR*: the copies summed).
// Every pixel and channel of dX is written; those the forward pass did not read get 0 (Apple's
// header). dX is sized like the forward source.
class NNPadGradient final : public CNNGradientKernel {
public:
    // -initWithDevice:
    explicit NNPadGradient(const Device& device);
    const char* className() const override { return "NNPadGradient"; }

    static std::shared_ptr<NNPadGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;
};

// The source index an edge mode reads for position `i` of an axis of `size` elements (-1: the
// fill value). Exposed for the tests.
int32_t padSourceIndex(int64_t i, int64_t size, ImageEdgeMode mode);

// ---- shared with the concatenation kernels (kernels/concatenation.cpp) --------------------------------

// Host-visible int32 / float data for a backend op, uploaded when encoded.
BufferSlice uploadHostData(const Device& device, const void* data, size_t bytes);

// The index tables of Backend::padGradient for a forward gather that read, for gradient column
// gx + j, source column mapX[j] (likewise rows from gy, and channel j from mapC[j]; -1: nothing):
// the CSR transposes (per destination column / row / channel, the gradient positions that read it,
// in increasing order). Sets p's start/list fields and listCount and returns the packed tables.
std::vector<int32_t> padGradientTables(const std::vector<int32_t>& mapX, const std::vector<int32_t>& mapY,
                                       const std::vector<int32_t>& mapC, int64_t width, int64_t height,
                                       int64_t channels, int64_t gx, int64_t gy, PadGradientParams& p);

}  // namespace mpsgrad
