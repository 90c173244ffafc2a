// What instance normalization (MPSCNNInstanceNormalization.h) and group normalization
// (MPSCNNGroupNormalization.h) share: instance normalization is group normalization with one
// channel per group, so both families run the same backend ops (metal/group_normalization_params.h)
// through the bases below. The public classes, with MPS's names and signatures, are in
// kernels/instance_normalization.h and kernels/group_normalization.h; the formulas as implemented
// are in docs/normalization.md.
//
// Every kernel works on whole images (offset (0, 0), the default clip rectangle) on the C channels
// that start at the source feature-channel offset.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/kernel.h"
#include "kernels/batch_normalization.h"  // CNNNormalizationGammaAndBetaState
#include "kernels/data_source_loading.h"

namespace mpsgrad {

// The gradient state of both families: buffers gamma, beta (the values the forward used; C floats),
// gradient_for_gamma, gradient_for_beta (C floats: Σ G·x̂ and Σ G over the pixels of the state's
// image(s)), and the forward's statistics (mean and biased variance per (image, group)).
class GroupNormalizationGradientStateBase : public NNGradientState {
public:
    int64_t numberOfFeatureChannels() const { return channels_; }
    int64_t numberOfGroups() const { return groups_; }
    // Images the state has room for (the source image's number_of_images at result_state time).
    int64_t imageCapacity() const { return imageCapacity_; }
    BufferSlice gamma() const { return resourceAtIndex(0); }
    BufferSlice beta() const { return resourceAtIndex(1); }
    // Null slices until a gradient kernel has encoded with the state.
    BufferSlice gradientForGamma() const { return gradientsEncoded ? resourceAtIndex(2) : BufferSlice{}; }
    BufferSlice gradientForBeta() const { return gradientsEncoded ? resourceAtIndex(3) : BufferSlice{}; }
    // 2 floats (mean, variance) per (image, group).
    BufferSlice statistics() const { return resourceAtIndex(4); }

    // ---- for the kernels of the families
    bool gradientsEncoded = false;  // a gradient kernel has encoded with the state since its forward
    int64_t images = 0;             // images the forward encoded
    float epsilon = 0.0f;           // the forward's epsilon

protected:
    GroupNormalizationGradientStateBase(const Device& device, int64_t channels, int64_t groups, int64_t images,
                                        bool temporary, const CommandBuffer* cb);

private:
    int64_t channels_, groups_, imageCapacity_;
};

// The forward kernel of both families: epsilon, gamma / beta on the device, the reloads, the encode.
class GroupNormalizationKernelBase : public CNNKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    int64_t numberOfFeatureChannels() const { return channels_; }
    int64_t numberOfGroups() const { return groups_; }
    float epsilon() const { return epsilon_; }
    // ValueError unless epsilon is finite and > 0.
    void setEpsilon(float value);
    // -reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState: (an encoded copy; a temporary state's
    // read count is decremented).
    void reloadGammaAndBetaWithCommandBuffer(CommandBuffer& cb,
                                             const std::shared_ptr<CNNNormalizationGammaAndBetaState>& state);
    // The gamma and beta the kernel computes with (C floats each).
    BufferSlice currentGamma() const { return gamma_; }
    BufferSlice currentBeta() const { return beta_; }

protected:
    // ValueError unless channels >= 1 and groups >= 1 divides it; `what` names the data source.
    GroupNormalizationKernelBase(const Device& device, int64_t channels, int64_t groups, const char* what);
    // Copies C floats of gamma and beta (null beta: zeros) into new device buffers.
    void setGammaAndBeta(const float* gamma, const float* beta, const char* what);
    // Either family's data source: its epsilon(), when it has one, replaces the default (ValueError
    // unless finite and > 0); then its gamma and beta are loaded.
    template <class DataSource>
    void initFromDataSource(DataSource& dataSource);
    // -reloadGammaAndBetaFromDataSource: gamma and beta read between the data source's load and
    // purge; ValueError if its channel count changed.
    template <class DataSource>
    void loadGammaAndBeta(DataSource& dataSource);
    // The family's state (its class and the kernel it records).
    virtual StatePtr newState(int64_t images, CommandBuffer* cb) = 0;
    // dynamic_cast of `state` to the family's state class; TypeError naming `what` otherwise.
    virtual GroupNormalizationGradientStateBase& familyState(const StatePtr& state, const char* what) const = 0;

    int64_t destinationFeatureChannels(const Image&) const override { return channels_; }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
    // epsilon, then the CNNKernel properties (the family writes its gamma / beta / label first).
    void encodeGroupNormalizationProperties(serial::Writer& w) const;
    void decodeGroupNormalizationProperties(serial::Reader& r);

    float epsilon_;

private:
    int64_t channels_, groups_;
    BufferSlice gamma_, beta_;
};

// The gradient kernel of both families: dX for every image, and the state's dγ / dβ.
class GroupNormalizationGradientBase : public CNNGradientKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }

protected:
    explicit GroupNormalizationGradientBase(const Device& device) : CNNGradientKernel(device) {}
    virtual GroupNormalizationGradientStateBase* familyState(State& state) const = 0;
    // The family's state class and forward kernel, for messages.
    virtual const char* stateClassName() const = 0;
    virtual const char* forwardClassName() const = 0;

    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;
};

namespace groupnorm {

// ValueError unless `value` is a usable epsilon (finite, > 0).
void checkEpsilon(float value, const char* what);
// The ready-made data sources' CPU-style update: gamma -= learningRate·Σ dγ, beta -= learningRate·Σ dβ
// over every state of the batch (each must belong to `channels` channels and hold gradients);
// decrements each unique temporary state's read count. `what` names the argument.
template <class StateT>
void sgdUpdate(std::vector<float>& gamma, std::vector<float>& beta, float learningRate,
               const std::vector<std::shared_ptr<StateT>>& states, const char* what);
void sgdUpdateStates(std::vector<float>& gamma, std::vector<float>& beta, float learningRate,
                     const std::vector<GroupNormalizationGradientStateBase*>& states, const char* what);

template <class StateT>
void sgdUpdate(std::vector<float>& gamma, std::vector<float>& beta, float learningRate,
               const std::vector<std::shared_ptr<StateT>>& states, const char* what) {
    std::vector<GroupNormalizationGradientStateBase*> raw;
    for (const auto& s : states) raw.push_back(s.get());
    sgdUpdateStates(gamma, beta, learningRate, raw, what);
}

// Values of a data source checked to hold `count` floats (ValueError naming `what` otherwise).
void checkVectorSize(const std::vector<float>& v, size_t count, const char* what);

}  // namespace groupnorm

template <class DataSource>
void GroupNormalizationKernelBase::initFromDataSource(DataSource& dataSource) {
    if (const std::optional<float> e = dataSource.epsilon()) {
        groupnorm::checkEpsilon(*e, "data_source.epsilon()");
        epsilon_ = *e;
    }
    loadGammaAndBeta(dataSource);
}

template <class DataSource>
void GroupNormalizationKernelBase::loadGammaAndBeta(DataSource& dataSource) {
    withLoaded(dataSource, [&] {
        if (dataSource.numberOfFeatureChannels() != numberOfFeatureChannels())
            throwValueError("data_source: number_of_feature_channels() changed from ", numberOfFeatureChannels(),
                            " to ", dataSource.numberOfFeatureChannels());
        setGammaAndBeta(dataSource.gamma(), dataSource.beta(), "data_source");
    });
}

}  // namespace mpsgrad
