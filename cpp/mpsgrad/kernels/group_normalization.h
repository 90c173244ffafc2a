// The group normalization family (MPSCNNGroupNormalization.h): the data source protocol,
// CNNGroupNormalizationGradientState, CNNGroupNormalization and CNNGroupNormalizationGradient
// (spec §2.6). The C channels are split into number_of_groups groups of C/groups consecutive
// channels; μ, σ² per (image, group) over the group's channels and pixels; γ, β per channel. The
// implementation is shared with instance normalization (kernels/normalization_groups.h); formulas
// and decisions are in docs/normalization.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/normalization_groups.h"

namespace mpsgrad {

class CNNGroupNormalization;

// @protocol MPSCNNGroupNormalizationDataSource: the required methods (numberOfGroups included),
// -epsilon, and -load / -purge (not in this protocol in MPS; the defaults succeed and do nothing).
// The optional update methods are called by the application, never by the kernels.
class CNNGroupNormalizationDataSource {
public:
    virtual ~CNNGroupNormalizationDataSource() = default;
    virtual int64_t numberOfFeatureChannels() = 0;
    virtual int64_t numberOfGroups() = 0;
    // numberOfFeatureChannels floats each (per channel, not per group); beta may be null (no bias).
    virtual const float* gamma() = 0;
    virtual const float* beta() = 0;
    virtual std::string label() { return {}; }
    // std::nullopt when not implemented (the kernel then uses FLT_MIN, as MPS).
    virtual std::optional<float> epsilon() { return std::nullopt; }
    virtual bool load() { return true; }
    virtual void purge() {}
};

// MPSCNNGroupNormalizationGradientState: made by CNNGroupNormalization's result_state /
// temporary_result_state, one per image.
class CNNGroupNormalizationGradientState final : public GroupNormalizationGradientStateBase {
public:
    CNNGroupNormalizationGradientState(std::shared_ptr<CNNGroupNormalization> kernel, int64_t channels,
                                       int64_t groups, int64_t images, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "CNNGroupNormalizationGradientState"; }
    // -groupNormalization
    std::shared_ptr<CNNGroupNormalization> groupNormalization() const { return kernel_; }

private:
    std::shared_ptr<CNNGroupNormalization> kernel_;
};

using CNNGroupNormalizationGradientStateBatch = std::vector<std::shared_ptr<CNNGroupNormalizationGradientState>>;

// A ready-made data source holding gamma, beta and the number of groups in memory; its CPU-style
// update method applies SGD with the gradients summed over the batch (as the instance one).
class CNNGroupNormalizationWeightsDataSource final : public CNNGroupNormalizationDataSource {
public:
    CNNGroupNormalizationWeightsDataSource(std::vector<float> gamma, std::vector<float> beta, int64_t groups,
                                           std::optional<float> epsilon = std::nullopt, std::string label = {});
    int64_t numberOfFeatureChannels() override { return int64_t(gamma_.size()); }
    int64_t numberOfGroups() override { return groups_; }
    // MPS's numberOfGroups is read-write; kernels read it when they are made.
    void setNumberOfGroups(int64_t groups);
    const float* gamma() override { return gamma_.data(); }
    const float* beta() override { return beta_.empty() ? nullptr : beta_.data(); }
    std::string label() override { return label_; }
    std::optional<float> epsilon() override { return epsilon_; }

    // -updateGammaAndBetaWithGroupNormalizationStateBatch: (CPU style; decrements each temporary
    // state's read count).
    bool updateGammaAndBetaWithGroupNormalizationStateBatch(const CNNGroupNormalizationGradientStateBatch& states);

    float learningRate = 0.01f;
    std::vector<float> gamma_, beta_;

private:
    int64_t groups_;
    std::optional<float> epsilon_;
    std::string label_;
};

// MPSCNNGroupNormalization
class CNNGroupNormalization final : public GroupNormalizationKernelBase {
public:
    // -initWithDevice:dataSource: (ValueError unless the data source's number of groups divides its
    // number of feature channels)
    CNNGroupNormalization(const Device& device, std::shared_ptr<CNNGroupNormalizationDataSource> dataSource);
    const char* className() const override { return "CNNGroupNormalization"; }
    std::shared_ptr<CNNGroupNormalizationDataSource> dataSource() const { return dataSource_; }
    // -reloadGammaAndBetaFromDataSource
    void reloadGammaAndBetaFromDataSource();

    static std::shared_ptr<CNNGroupNormalization> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    StatePtr newState(int64_t images, CommandBuffer* cb) override;
    GroupNormalizationGradientStateBase& familyState(const StatePtr& state, const char* what) const override;

private:
    std::shared_ptr<CNNGroupNormalizationDataSource> dataSource_;
};

// MPSCNNGroupNormalizationGradient (declares nothing beyond MPSCNNGradientKernel).
class CNNGroupNormalizationGradient final : public GroupNormalizationGradientBase {
public:
    explicit CNNGroupNormalizationGradient(const Device& device) : GroupNormalizationGradientBase(device) {}
    const char* className() const override { return "CNNGroupNormalizationGradient"; }
    static std::shared_ptr<CNNGroupNormalizationGradient> initWithCoder(serial::Reader& r, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& w) const override;
    GroupNormalizationGradientStateBase* familyState(State& state) const override {
        return dynamic_cast<CNNGroupNormalizationGradientState*>(&state);
    }
    const char* stateClassName() const override { return "CNNGroupNormalizationGradientState"; }
    const char* forwardClassName() const override { return "CNNGroupNormalization"; }
};

}  // namespace mpsgrad
