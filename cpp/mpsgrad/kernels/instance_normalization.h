// The instance normalization family (MPSCNNInstanceNormalization.h): the data source protocol,
// CNNInstanceNormalizationGradientState, CNNInstanceNormalization and CNNInstanceNormalizationGradient
// (spec §2.6). Y = (X - μ)·γ/√(σ² + ε) + β with μ, σ² per (image, channel) over the pixels. It runs
// as group normalization with one channel per group (kernels/normalization_groups.h); formulas and
// decisions are in docs/normalization.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/normalization_groups.h"

namespace mpsgrad {

class CNNInstanceNormalization;

// @protocol MPSCNNInstanceNormalizationDataSource: the required methods, -epsilon and -load/-purge
// (optional in the protocol: the defaults succeed and do nothing). The optional update methods are
// called by the application, never by the kernels, so they are not part of this interface;
// CNNInstanceNormalizationWeightsDataSource implements the CPU-style one.
class CNNInstanceNormalizationDataSource {
public:
    virtual ~CNNInstanceNormalizationDataSource() = default;
    virtual int64_t numberOfFeatureChannels() = 0;
    // numberOfFeatureChannels floats each, valid between load and purge; beta may be null (no bias).
    virtual const float* gamma() = 0;
    virtual const float* beta() = 0;
    virtual std::string label() { return {}; }
    // std::nullopt when not implemented (the kernel then uses FLT_MIN, as MPS).
    virtual std::optional<float> epsilon() { return std::nullopt; }
    virtual bool load() { return true; }
    virtual void purge() {}
};

// MPSCNNInstanceNormalizationGradientState: made by CNNInstanceNormalization's result_state /
// temporary_result_state, one per image.
class CNNInstanceNormalizationGradientState final : public GroupNormalizationGradientStateBase {
public:
    CNNInstanceNormalizationGradientState(std::shared_ptr<CNNInstanceNormalization> kernel, int64_t channels,
                                          int64_t images, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "CNNInstanceNormalizationGradientState"; }
    // -instanceNormalization
    std::shared_ptr<CNNInstanceNormalization> instanceNormalization() const { return kernel_; }

private:
    std::shared_ptr<CNNInstanceNormalization> kernel_;
};

using CNNInstanceNormalizationGradientStateBatch = std::vector<std::shared_ptr<CNNInstanceNormalizationGradientState>>;

// A ready-made data source holding gamma and beta in memory; its CPU-style update method applies
// SGD with the gradients summed over the batch: γ -= learningRate·Σ dγ, β -= learningRate·Σ dβ.
class CNNInstanceNormalizationWeightsDataSource final : public CNNInstanceNormalizationDataSource {
public:
    CNNInstanceNormalizationWeightsDataSource(std::vector<float> gamma, std::vector<float> beta,
                                              std::optional<float> epsilon = std::nullopt, std::string label = {});
    int64_t numberOfFeatureChannels() override { return int64_t(gamma_.size()); }
    const float* gamma() override { return gamma_.data(); }
    const float* beta() override { return beta_.empty() ? nullptr : beta_.data(); }
    std::string label() override { return label_; }
    std::optional<float> epsilon() override { return epsilon_; }

    // -updateGammaAndBetaWithInstanceNormalizationStateBatch: (CPU style: reads the states, so
    // their command buffer must have completed; decrements each temporary state's read count).
    bool updateGammaAndBetaWithInstanceNormalizationStateBatch(const CNNInstanceNormalizationGradientStateBatch& states);

    float learningRate = 0.01f;
    std::vector<float> gamma_, beta_;

private:
    std::optional<float> epsilon_;
    std::string label_;
};

// MPSCNNInstanceNormalization
class CNNInstanceNormalization final : public GroupNormalizationKernelBase {
public:
    // -initWithDevice:dataSource:
    CNNInstanceNormalization(const Device& device, std::shared_ptr<CNNInstanceNormalizationDataSource> dataSource);
    const char* className() const override { return "CNNInstanceNormalization"; }
    std::shared_ptr<CNNInstanceNormalizationDataSource> dataSource() const { return dataSource_; }
    // -reloadGammaAndBetaFromDataSource
    void reloadGammaAndBetaFromDataSource();

    // -initWithCoder:device: (docs/serialization.md); the decoded kernel's data source is a
    // CNNInstanceNormalizationWeightsDataSource holding the values the kernel computed with.
    static std::shared_ptr<CNNInstanceNormalization> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    StatePtr newState(int64_t images, CommandBuffer* cb) override;
    GroupNormalizationGradientStateBase& familyState(const StatePtr& state, const char* what) const override;

private:
    std::shared_ptr<CNNInstanceNormalizationDataSource> dataSource_;
};

// MPSCNNInstanceNormalizationGradient (declares nothing beyond MPSCNNGradientKernel): dX per image
// and the state's gradient_for_gamma / gradient_for_beta.
class CNNInstanceNormalizationGradient final : public GroupNormalizationGradientBase {
public:
    explicit CNNInstanceNormalizationGradient(const Device& device) : GroupNormalizationGradientBase(device) {}
    const char* className() const override { return "CNNInstanceNormalizationGradient"; }
    static std::shared_ptr<CNNInstanceNormalizationGradient> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    GroupNormalizationGradientStateBase* familyState(State& state) const override {
        return dynamic_cast<CNNInstanceNormalizationGradientState*>(&state);
    }
    const char* stateClassName() const override { return "CNNInstanceNormalizationGradientState"; }
    const char* forwardClassName() const override { return "CNNInstanceNormalization"; }
};

}  // namespace mpsgrad
