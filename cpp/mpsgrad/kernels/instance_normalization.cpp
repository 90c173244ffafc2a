#include "kernels/instance_normalization.h"

#include "core/errors.h"

namespace mpsgrad {

namespace {

int64_t channelsOf(const std::shared_ptr<CNNInstanceNormalizationDataSource>& source) {
    if (!source) throwTypeError("data_source: expected a CNNInstanceNormalizationDataSource, got None");
    return source->numberOfFeatureChannels();
}

}  // namespace

CNNInstanceNormalizationGradientState::CNNInstanceNormalizationGradientState(
    std::shared_ptr<CNNInstanceNormalization> kernel, int64_t channels, int64_t images, bool temporary,
    const CommandBuffer* cb)
    : GroupNormalizationGradientStateBase(kernel->device(), channels, channels, images, temporary, cb),
      kernel_(std::move(kernel)) {}

CNNInstanceNormalizationWeightsDataSource::CNNInstanceNormalizationWeightsDataSource(std::vector<float> gamma,
                                                                                     std::vector<float> beta,
                                                                                     std::optional<float> epsilon,
                                                                                     std::string label)
    : gamma_(std::move(gamma)), beta_(std::move(beta)), epsilon_(epsilon), label_(std::move(label)) {
    if (gamma_.empty()) throwValueError("gamma: expected at least one value (one per feature channel)");
    if (!beta_.empty()) groupnorm::checkVectorSize(beta_, gamma_.size(), "beta");
    if (epsilon_) groupnorm::checkEpsilon(*epsilon_, "epsilon");
}

bool CNNInstanceNormalizationWeightsDataSource::updateGammaAndBetaWithInstanceNormalizationStateBatch(
    const CNNInstanceNormalizationGradientStateBatch& states) {
    groupnorm::sgdUpdate(gamma_, beta_, learningRate, states, "instance_normalization_state_batch");
    return true;
}

CNNInstanceNormalization::CNNInstanceNormalization(const Device& device,
                                                   std::shared_ptr<CNNInstanceNormalizationDataSource> dataSource)
    : GroupNormalizationKernelBase(device, channelsOf(dataSource), channelsOf(dataSource), "data_source"),
      dataSource_(std::move(dataSource)) {
    initFromDataSource(*dataSource_);
}

void CNNInstanceNormalization::reloadGammaAndBetaFromDataSource() { loadGammaAndBeta(*dataSource_); }

StatePtr CNNInstanceNormalization::newState(int64_t images, CommandBuffer* cb) {
    std::shared_ptr<CNNInstanceNormalization> self;
    try {
        self = std::static_pointer_cast<CNNInstanceNormalization>(shared_from_this());
    } catch (const std::bad_weak_ptr&) {
        throwValueError(className(), ": result_state needs a kernel owned by a shared_ptr");
    }
    return std::make_shared<CNNInstanceNormalizationGradientState>(self, numberOfFeatureChannels(), images,
                                                                   cb != nullptr, cb);
}

GroupNormalizationGradientStateBase& CNNInstanceNormalization::familyState(const StatePtr& state,
                                                                           const char* what) const {
    auto* s = dynamic_cast<CNNInstanceNormalizationGradientState*>(state.get());
    if (!s)
        throwTypeError(what, ": ", className(), " needs a CNNInstanceNormalizationGradientState (from its "
                       "result_state), got ", state ? state->className() : "None");
    return *s;
}

}  // namespace mpsgrad
