#include "kernels/group_normalization.h"

#include "core/errors.h"

namespace mpsgrad {

namespace {

int64_t channelsOf(const std::shared_ptr<CNNGroupNormalizationDataSource>& source) {
    if (!source) throwTypeError("data_source: expected a CNNGroupNormalizationDataSource, got None");
    return source->numberOfFeatureChannels();
}

int64_t groupsOf(const std::shared_ptr<CNNGroupNormalizationDataSource>& source) {
    if (!source) throwTypeError("data_source: expected a CNNGroupNormalizationDataSource, got None");
    return source->numberOfGroups();
}

}  // namespace

CNNGroupNormalizationGradientState::CNNGroupNormalizationGradientState(std::shared_ptr<CNNGroupNormalization> kernel,
                                                                       int64_t channels, int64_t groups,
                                                                       int64_t images, bool temporary,
                                                                       const CommandBuffer* cb)
    : GroupNormalizationGradientStateBase(kernel->device(), channels, groups, images, temporary, cb),
      kernel_(std::move(kernel)) {}

CNNGroupNormalizationWeightsDataSource::CNNGroupNormalizationWeightsDataSource(std::vector<float> gamma,
                                                                               std::vector<float> beta, int64_t groups,
                                                                               std::optional<float> epsilon,
                                                                               std::string label)
    : gamma_(std::move(gamma)), beta_(std::move(beta)), groups_(groups), epsilon_(epsilon), label_(std::move(label)) {
    if (gamma_.empty()) throwValueError("gamma: expected at least one value (one per feature channel)");
    if (!beta_.empty()) groupnorm::checkVectorSize(beta_, gamma_.size(), "beta");
    setNumberOfGroups(groups);
    if (epsilon_) groupnorm::checkEpsilon(*epsilon_, "epsilon");
}

void CNNGroupNormalizationWeightsDataSource::setNumberOfGroups(int64_t groups) {
    if (groups < 1 || int64_t(gamma_.size()) % groups != 0)
        throwValueError("number_of_groups: ", groups, " groups do not divide the ", gamma_.size(),
                        " feature channels (it must be >= 1 and divide number_of_feature_channels)");
    groups_ = groups;
}

bool CNNGroupNormalizationWeightsDataSource::updateGammaAndBetaWithGroupNormalizationStateBatch(
    const CNNGroupNormalizationGradientStateBatch& states) {
    groupnorm::sgdUpdate(gamma_, beta_, learningRate, states, "group_normalization_state_batch");
    return true;
}

CNNGroupNormalization::CNNGroupNormalization(const Device& device,
                                             std::shared_ptr<CNNGroupNormalizationDataSource> dataSource)
    : GroupNormalizationKernelBase(device, channelsOf(dataSource), groupsOf(dataSource), "data_source"),
      dataSource_(std::move(dataSource)) {
    initFromDataSource(*dataSource_);
}

void CNNGroupNormalization::reloadGammaAndBetaFromDataSource() { loadGammaAndBeta(*dataSource_); }

StatePtr CNNGroupNormalization::newState(int64_t images, CommandBuffer* cb) {
    std::shared_ptr<CNNGroupNormalization> self;
    try {
        self = std::static_pointer_cast<CNNGroupNormalization>(shared_from_this());
    } catch (const std::bad_weak_ptr&) {
        throwValueError(className(), ": result_state needs a kernel owned by a shared_ptr");
    }
    return std::make_shared<CNNGroupNormalizationGradientState>(self, numberOfFeatureChannels(), numberOfGroups(),
                                                                images, cb != nullptr, cb);
}

GroupNormalizationGradientStateBase& CNNGroupNormalization::familyState(const StatePtr& state, const char* what) const {
    auto* s = dynamic_cast<CNNGroupNormalizationGradientState*>(state.get());
    if (!s)
        throwTypeError(what, ": ", className(), " needs a CNNGroupNormalizationGradientState (from its result_state), "
                       "got ", state ? state->className() : "None");
    return *s;
}

}  // namespace mpsgrad
