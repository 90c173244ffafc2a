// MPSNNPadding / MPSNNDefaultPadding and the exact padding arithmetic of the reference
// spec §1.8.1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/image.h"
#include "core/state.h"

namespace mpsgrad {

class Kernel;

// @protocol MPSNNPadding
class NNPadding {
public:
    virtual ~NNPadding() = default;
    // -paddingMethod (PaddingMethod bits)
    virtual uint32_t paddingMethod() const = 0;
    // -label
    virtual std::string label() const { return {}; }
    // -destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:
    // Called last when the Custom bit is set; may change the descriptor and the kernel's offset.
    virtual ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates,
                                                       Kernel& kernel, const ImageDescriptor& suggested) {
        (void)sourceImages, (void)sourceStates, (void)kernel;
        return suggested;
    }
    // -inverse: the policy for the reverse (gradient) pass; null when not provided.
    virtual std::shared_ptr<NNPadding> inverse() const { return nullptr; }
};

// MPSNNDefaultPadding
class NNDefaultPadding final : public NNPadding {
public:
    explicit NNDefaultPadding(uint32_t method) : method_(method) {}
    // +paddingWithMethod:
    static std::shared_ptr<NNDefaultPadding> paddingWithMethod(uint32_t method);
    // +paddingForTensorflowAveragePooling: SizeSame, centred, remainder bottom-right, and edge mode
    // Clamp, so that border windows average their in-image pixels only (spec §1.8). The Clamp is set
    // by the policy's custom step, so its method also carries Custom | CustomWhitelistForNodeFusion
    // (kTensorflowAveragePoolingMethod): the step runs wherever the destination descriptor is made
    // (returning encodes, the graph), node fusion stays allowed, and the method alone (what
    // serialization stores) rebuilds the policy.
    static std::shared_ptr<NNDefaultPadding> paddingForTensorflowAveragePooling();
    static constexpr uint32_t kTensorflowAveragePoolingMethod =
        PaddingMethod::SizeSame | PaddingMethod::AlignCentered | PaddingMethod::AddRemainderToBottomRight |
        PaddingMethod::Custom | PaddingMethod::CustomWhitelistForNodeFusion;
    // +paddingForTensorflowAveragePoolingValidOnly
    static std::shared_ptr<NNDefaultPadding> paddingForTensorflowAveragePoolingValidOnly();

    uint32_t paddingMethod() const override { return method_; }
    std::string label() const override;
    // The custom step: kTensorflowAveragePoolingMethod sets a unary kernel's edge mode to Clamp
    // (idempotent, as graph runs need); any other method keeps the suggested descriptor.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates,
                                               Kernel& kernel, const ImageDescriptor& suggested) override;
    std::shared_ptr<NNPadding> inverse() const override;

private:
    uint32_t method_;
};

namespace padding {

enum class Axis { X, Y };

// -1 for SizeValidOnly, 0 for SizeSame, +1 for SizeFull (ValueError for the reserved value).
int sizeStyle(uint32_t method);
// DestSize: ceil((S + style*(k-1)) / s)
int64_t destinationSize(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style);
// DestSizeReverse: (S-1)*s + 1 + style*(k-1)
int64_t destinationSizeReverse(int64_t sourceSize, int64_t stride, int64_t kernelSize, int style);
// The window-centre offset the policy gives along `axis` (spec §1.8.1, with the alignment
// and remainder bits of `method`). `kernelSize` is the dilated extent.
int64_t offset(int64_t sourceSize, int64_t stride, int64_t kernelSize, uint32_t method, Axis axis,
               bool reverse = false);

}  // namespace padding

}  // namespace mpsgrad
