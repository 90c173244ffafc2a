// The upsampling family (MPSCNNUpsampling.h): CNNUpsamplingNearest, CNNUpsamplingBilinear, their
// gradient state and the gradient kernels CNNUpsamplingNearestGradient, CNNUpsamplingBilinearGradient
// (spec §2.9). Sampling rules: metal/upsampling_params.h and docs/upsampling.md.
//
// The input is the source from `offset` to its right and bottom edges (offset = (0, 0) by default:
// the whole source); the output is the input scaled by the integer factors. Destination pixel
// clipRect.origin + p is output index p.
#pragma once

#include <cstdint>
#include <memory>

#include "core/kernel.h"

namespace mpsgrad {

// How CNNUpsamplingBilinear maps output to input coordinates when align_corners is false
// (mpsgrad option; Apple's header does not state the rule, spec §2.9 / §6.3).
enum class UpsamplingCoordinateMode : int32_t {
    HalfPixel = 0,   // src = (dst + 0.5) / scale - 0.5, clamped at 0 (PyTorch align_corners=False); the default
    Asymmetric = 1,  // src = dst / scale (TensorFlow 1 resize_bilinear)
};

// The state the upsampling kernels write for their gradient (mpsgrad's MPSNNGradientState).
class CNNUpsamplingGradientState final : public NNGradientState {
public:
    CNNUpsamplingGradientState(const Device& device, bool bilinear, bool temporary, const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb), bilinear(bilinear) {}
    const char* className() const override { return "CNNUpsamplingGradientState"; }

    bool bilinear;
    bool alignCorners = false;
    UpsamplingCoordinateMode coordinateMode = UpsamplingCoordinateMode::HalfPixel;
    int64_t scaleFactorX = 1, scaleFactorY = 1;
    int64_t inputWidth = 0, inputHeight = 0;  // the input extent the forward pass upsampled
    Offset gradientOrigin;                    // destination pixel of output index (0, 0)
};

// MPSCNNUpsampling: the shared forward implementation.
class CNNUpsampling : public CNNKernel {
public:
    double scaleFactorX() const { return double(scaleX_); }
    double scaleFactorY() const { return double(scaleY_); }
    bool alignCorners() const { return alignCorners_; }
    bool isBilinear() const { return bilinear_; }
    // Bilinear with align_corners false only.
    UpsamplingCoordinateMode coordinateMode = UpsamplingCoordinateMode::HalfPixel;

protected:
    CNNUpsampling(const Device& device, bool bilinear, int64_t scaleX, int64_t scaleY, bool alignCorners);
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    void adjustDestinationDescriptor(ImageDescriptor& descriptor, const ImageBatch& sourceImages) override;
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    bool bilinear_;
    int64_t scaleX_, scaleY_;
    bool alignCorners_;
};

// MPSCNNUpsamplingNearest: Y[y][x] = X[y / sy][x / sx].
class CNNUpsamplingNearest final : public CNNUpsampling {
public:
    // -initWithDevice:integerScaleFactorX:integerScaleFactorY:
    CNNUpsamplingNearest(const Device& device, int64_t scaleX, int64_t scaleY)
        : CNNUpsampling(device, false, scaleX, scaleY, false) {}
    const char* className() const override { return "CNNUpsamplingNearest"; }
};

// MPSCNNUpsamplingBilinear
class CNNUpsamplingBilinear final : public CNNUpsampling {
public:
    // -initWithDevice:integerScaleFactorX:integerScaleFactorY:[alignCorners:]
    CNNUpsamplingBilinear(const Device& device, int64_t scaleX, int64_t scaleY, bool alignCorners = false)
        : CNNUpsampling(device, true, scaleX, scaleY, alignCorners) {}
    const char* className() const override { return "CNNUpsamplingBilinear"; }
};

// MPSCNNUpsamplingGradient: the shared gradient implementation. primary = G; the secondary (the
// forward source) is not read, only its size checked. Corner alignment and the coordinate mode
// come from the state.
class CNNUpsamplingGradient : public CNNGradientKernel {
public:
    double scaleFactorX() const { return double(scaleX_); }
    double scaleFactorY() const { return double(scaleY_); }
    bool isBilinear() const { return bilinear_; }
    // Also sets primary_offset to where the forward pass wrote output index (0, 0).
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

protected:
    CNNUpsamplingGradient(const Device& device, bool bilinear, int64_t scaleX, int64_t scaleY);
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    bool bilinear_;
    int64_t scaleX_, scaleY_;
};

// MPSCNNUpsamplingNearestGradient: dX[y][x] = sum of the sy x sx block of G it was copied to.
class CNNUpsamplingNearestGradient final : public CNNUpsamplingGradient {
public:
    CNNUpsamplingNearestGradient(const Device& device, int64_t scaleX, int64_t scaleY)
        : CNNUpsamplingGradient(device, false, scaleX, scaleY) {}
    const char* className() const override { return "CNNUpsamplingNearestGradient"; }
};

// MPSCNNUpsamplingBilinearGradient: each G pixel back to its four taps with the forward weights.
class CNNUpsamplingBilinearGradient final : public CNNUpsamplingGradient {
public:
    CNNUpsamplingBilinearGradient(const Device& device, int64_t scaleX, int64_t scaleY)
        : CNNUpsamplingGradient(device, true, scaleX, scaleY) {}
    const char* className() const override { return "CNNUpsamplingBilinearGradient"; }
};

}  // namespace mpsgrad
