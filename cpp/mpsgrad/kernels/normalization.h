// The local normalization kernels of MPSCNNNormalization.h (spec §2.7): CNNCrossChannelNormalization
// (LRN across feature channels), CNNSpatialNormalization, CNNLocalContrastNormalization, their
// gradient kernels and the gradient state they share.
//
// Formulas (forward and the exact derivatives, which differ from the ones printed in Apple's
// headers) are in metal/normalization_params.h and docs/normalization.md. Windows follow the
// pooling placement: the window of destination pixel clipRect.origin + (x, y) is centered at
// source pixel offset + (x, y), its taps start at center - (kernel >> 1). Off-image taps read 0
// (ImageEdgeMode.ZERO, the only edge mode these kernels accept) and still count in N.
#pragma once

#include <cstdint>
#include <memory>

#include "core/kernel.h"

namespace mpsgrad {

// Which forward kernel a CNNLocalNormalizationGradientState comes from.
enum class LocalNormalizationKind : int32_t { CrossChannel = 0, Spatial = 1, LocalContrast = 2 };

// Name of the forward class of a kind ("CNNCrossChannelNormalization", ...).
const char* localNormalizationForwardName(LocalNormalizationKind kind);

// The parameters of the family. Defaults per kind: MPS's (see defaultsFor).
struct LocalNormalizationParameters {
    float alpha = 1.0f;
    float beta = 5.0f;
    float delta = 1.0f;
    float p0 = 1.0f;  // local contrast only
    float pm = 0.0f;
    float ps = 1.0f;

    // MPS's defaults: cross-channel and spatial alpha 1, beta 5, delta 1; local contrast alpha 0,
    // beta 0.5, delta 1/1024, p0 1, pm 0, ps 1.
    static LocalNormalizationParameters defaultsFor(LocalNormalizationKind kind);
    // ValueError naming the property unless every value is finite, alpha >= 0 and delta > 0
    // (so T and L stay > 0 and every power is defined).
    void validate() const;
    bool operator==(const LocalNormalizationParameters& o) const {
        return alpha == o.alpha && beta == o.beta && delta == o.delta && p0 == o.p0 && pm == o.pm && ps == o.ps;
    }
};

// The state the three forward kernels write for their gradients (mpsgrad's concrete
// MPSNNGradientState): the forward geometry plus the kind, window and parameters in force, so a
// gradient kernel whose parameters differ from the forward pass's is refused.
class CNNLocalNormalizationGradientState final : public NNGradientState {
public:
    CNNLocalNormalizationGradientState(const Device& device, LocalNormalizationKind kind, bool temporary,
                                       const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb), kind(kind) {}
    const char* className() const override { return "CNNLocalNormalizationGradientState"; }

    LocalNormalizationKind kind;
    int64_t windowWidth = 1, windowHeight = 1, channelSize = 1;  // as the forward kernel had them
    LocalNormalizationParameters parameters;
};

// The window sizes of a kernel of the family: the spatial window (1 x 1 for cross-channel) and the
// cross-channel window (1 for the spatial kinds).
struct LocalNormalizationWindow {
    int64_t width = 1, height = 1, channels = 1;
};

// Shared forward implementation of the three kernels.
class CNNLocalNormalizationBase : public CNNKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    LocalNormalizationKind kind() const { return kind_; }
    int64_t kernelWidth() const override { return window_.width; }
    int64_t kernelHeight() const override { return window_.height; }
    const LocalNormalizationWindow& window() const { return window_; }

    LocalNormalizationParameters parameters;  // alpha, beta, delta (p0, pm, ps: local contrast)

    // -initWithCoder:device: for the three forward classes (kernels/serialization.cpp).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    CNNLocalNormalizationBase(const Device& device, LocalNormalizationKind kind, LocalNormalizationWindow window);
    void encodeWithCoder(serial::Writer& writer) const override;
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    LocalNormalizationKind kind_;
    LocalNormalizationWindow window_;
};

// MPSCNNCrossChannelNormalization (-initWithDevice:kernelSize:): LRN across the feature channels.
class CNNCrossChannelNormalization final : public CNNLocalNormalizationBase {
public:
    CNNCrossChannelNormalization(const Device& device, int64_t kernelSize);
    const char* className() const override { return "CNNCrossChannelNormalization"; }
    int64_t kernelSize() const { return window().channels; }
};

// MPSCNNSpatialNormalization (-initWithDevice:kernelWidth:kernelHeight:, width == height).
class CNNSpatialNormalization final : public CNNLocalNormalizationBase {
public:
    CNNSpatialNormalization(const Device& device, int64_t kernelWidth, int64_t kernelHeight);
    const char* className() const override { return "CNNSpatialNormalization"; }
};

// MPSCNNLocalContrastNormalization (-initWithDevice:kernelWidth:kernelHeight:, width == height).
class CNNLocalContrastNormalization final : public CNNLocalNormalizationBase {
public:
    CNNLocalContrastNormalization(const Device& device, int64_t kernelWidth, int64_t kernelHeight);
    const char* className() const override { return "CNNLocalContrastNormalization"; }
};

// Shared gradient implementation: primary = dL/dY, secondary = the forward INPUT X. Geometry from
// the state as pooling's gradients: G is read from the forward clip origin over the forward clip
// size, the windows are centered where the forward pass centered them (secondary_offset), and dX
// (clip_rect, default the whole image) is in the coordinates of X. Pixels no window reaches get 0.
class CNNLocalNormalizationGradientBase : public CNNGradientKernel {
public:
    LocalNormalizationKind kind() const { return kind_; }
    int64_t kernelWidth() const { return window_.width; }
    int64_t kernelHeight() const { return window_.height; }
    int64_t secondaryKernelWidth() const override { return window_.width; }
    int64_t secondaryKernelHeight() const override { return window_.height; }
    const LocalNormalizationWindow& window() const { return window_; }

    LocalNormalizationParameters parameters;

    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    CNNLocalNormalizationGradientBase(const Device& device, LocalNormalizationKind kind,
                                      LocalNormalizationWindow window);
    void encodeWithCoder(serial::Writer& writer) const override;
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    LocalNormalizationKind kind_;
    LocalNormalizationWindow window_;
};

// MPSCNNCrossChannelNormalizationGradient (-initWithDevice:kernelSize:)
class CNNCrossChannelNormalizationGradient final : public CNNLocalNormalizationGradientBase {
public:
    CNNCrossChannelNormalizationGradient(const Device& device, int64_t kernelSize);
    const char* className() const override { return "CNNCrossChannelNormalizationGradient"; }
    int64_t kernelSize() const { return window().channels; }
};

// MPSCNNSpatialNormalizationGradient (-initWithDevice:kernelWidth:kernelHeight:)
class CNNSpatialNormalizationGradient final : public CNNLocalNormalizationGradientBase {
public:
    CNNSpatialNormalizationGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight);
    const char* className() const override { return "CNNSpatialNormalizationGradient"; }
};

// MPSCNNLocalContrastNormalizationGradient (-initWithDevice:kernelWidth:kernelHeight:)
class CNNLocalContrastNormalizationGradient final : public CNNLocalNormalizationGradientBase {
public:
    CNNLocalContrastNormalizationGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight);
    const char* className() const override { return "CNNLocalContrastNormalizationGradient"; }
};

}  // namespace mpsgrad
