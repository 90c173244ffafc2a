// Concatenation along feature channels as kernels (mpsgrad extension: MPS has no concatenation
// kernel, its graph node writes producers at channel offsets; spec §2.11). docs/concatenation.md.
//
// CNNConcatenation (a CNNMultiaryKernel): source i's channels (after its channel offset / max
// count) land at destination channels destination_feature_channel_offset + start_i, where
// start_0 = 0 and start_{i+1} = start_i + round_up_4(channels_i): every range starts at a multiple
// of 4 and the channels of a rounded-up gap are written as 0. The destination has
// start_{n-1} + channels_{n-1} channels. Destination pixel clip_rect.origin + p of source i reads
// its pixel offset_at_index(i) + p (ZERO or CLAMP edge mode beyond the image). Every source has
// the same width and height.
//
// CNNConcatenationGradient (a CNNGradientKernel for one source index): the slice of the incoming
// gradient for that source's channel range, written back where the forward read the source
// (pixels and channels the forward did not read are 0).
#pragma once

#include <memory>
#include <vector>

#include "core/kernel.h"
#include "core/multiary.h"

namespace mpsgrad {

class CNNConcatenation final : public CNNMultiaryKernel {
public:
    // (device, source_count), shaped like -[MPSCNNMultiaryKernel initWithDevice:sourceCount:]
    CNNConcatenation(const Device& device, size_t sourceCount);
    const char* className() const override { return "CNNConcatenation"; }

    // The first destination channel (relative to destination_feature_channel_offset) of each
    // source that delivers `channels[i]` channels.
    static std::vector<int64_t> rangeStarts(const std::vector<int64_t>& channels);

    static std::shared_ptr<CNNConcatenation> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const ImageBatch& sources) const override;
    StatePtr makeResultState(const ImageBatch& sources, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<MultiaryDispatch>& dispatches,
                    const StateBatch& states) override;
    bool writesEveryDestinationPixel() const override { return true; }

private:
    // ValueError unless every source has source 0's width and height.
    void checkSameSize(const ImageBatch& sources) const;
};

class CNNConcatenationGradient final : public CNNGradientKernel {
public:
    // The gradient with respect to source `sourceIndex` of the forward CNNConcatenation.
    CNNConcatenationGradient(const Device& device, size_t sourceIndex);
    const char* className() const override { return "CNNConcatenationGradient"; }

    size_t sourceIndex() const { return sourceIndex_; }

    static std::shared_ptr<CNNConcatenationGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    const ForwardSnapshot& snapshotOf(const State& state) const override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    size_t sourceIndex_;
};

}  // namespace mpsgrad
