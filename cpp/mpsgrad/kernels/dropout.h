// The dropout family (MPSCNNDropout.h): CNNDropout, CNNDropoutGradientState, CNNDropoutGradient
// (spec §2.8). Y = X * m / keep_probability with m in {0, 1}, P(m = 1) = keep_probability; the mask
// is Philox4x32-10 keyed by the seed (metal/dropout_params.h, docs/dropout.md), so the CPU and
// Metal backends draw the same mask bit for bit and the gradient regenerates its forward mask.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.h"

namespace mpsgrad {

// The state CNNDropout writes for its gradient: the forward geometry and the mask's parameters.
class CNNDropoutGradientState final : public NNGradientState {
public:
    CNNDropoutGradientState(const Device& device, bool temporary, const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb) {}
    const char* className() const override { return "CNNDropoutGradientState"; }

    // -maskData: one byte (0 or 1) per mask element, images x height x width x channels of the
    // mask grid (extent 1 along broadcast axes). Empty before the forward pass has encoded.
    std::vector<uint8_t> maskData() const;

    DropoutMask mask{};       // maskX / maskY unused: the gradient places the mask itself
    int64_t maskImages = 0;   // images the forward pass drew masks for
    float keepProbability = 0.0f;
    uint64_t seed = 0;
    Size3 maskStrideInPixels{1, 1, 1};
};

// MPSCNNDropout
class CNNDropout final : public CNNKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can (the CPU backend, docs/float16.md).
    bool readsFloat16Natively() const override;
    // -initWithDevice:keepProbability:seed:maskStrideInPixels: (ValueError unless keepProbability is
    // in (0, 1) and every stride component is 0 or 1)
    CNNDropout(const Device& device, float keepProbability, uint64_t seed, Size3 maskStrideInPixels);
    const char* className() const override { return "CNNDropout"; }

    float keepProbability() const { return keepProbability_; }
    uint64_t seed() const { return seed_; }
    Size3 maskStrideInPixels() const { return maskStride_; }
    // Forward encodes so far: each draws a fresh mask (the Philox stream number).
    uint64_t encodeCount() const { return encodes_; }

    // -initWithCoder:device: (kernels/serialization.cpp). The encode count is restored: the copy
    // continues the original's mask sequence (docs/serialization.md).
    static std::shared_ptr<CNNDropout> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    float keepProbability_;
    uint64_t seed_;
    Size3 maskStride_;
    uint64_t encodes_ = 0;
};

// MPSCNNDropoutGradient: dX = G * m / keep_probability with the forward pass's mask. The secondary
// (the forward source) is not read; secondary_offset places the mask.
class CNNDropoutGradient final : public CNNGradientKernel {
public:
    CNNDropoutGradient(const Device& device, float keepProbability, uint64_t seed, Size3 maskStrideInPixels);
    const char* className() const override { return "CNNDropoutGradient"; }
    bool writesEveryDestinationPixel() const override { return true; }
    // FLOAT16 images natively where the backend can (the CPU backend, docs/float16.md).
    bool readsFloat16Natively() const override;

    float keepProbability() const { return keepProbability_; }
    uint64_t seed() const { return seed_; }
    Size3 maskStrideInPixels() const { return maskStride_; }

    // -initWithCoder:device: (kernels/serialization.cpp).
    static std::shared_ptr<CNNDropoutGradient> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    float keepProbability_;
    uint64_t seed_;
    Size3 maskStride_;
};

}  // namespace mpsgrad
