// The pooling family (MPSCNNPooling.h): CNNPoolingMax, CNNPoolingAverage, CNNPoolingL2Norm,
// CNNDilatedPoolingMax, their gradient state and the gradient kernels CNNPoolingMaxGradient,
// CNNPoolingAverageGradient, CNNPoolingL2NormGradient, CNNDilatedPoolingMaxGradient (spec §2.3).
//
// Window of the destination pixel clipRect.origin + (x, y): center offset + stride * (x, y); taps
// at center - (E >> 1) + dilation * t, E = (kernel - 1) * dilation + 1 (even windows lean toward
// the top-left). Off-image taps, average normalization, tie-breaking: metal/pooling_params.h and
// docs/pooling.md.
#pragma once

#include <cstdint>
#include <memory>

#include "core/kernel.h"

namespace mpsgrad {

// Which forward kernel a pooling gradient state comes from.
enum class PoolingKind : int32_t { Max = 0, Average = 1, L2Norm = 2, DilatedMax = 3 };

// Name of the forward class of a kind ("CNNPoolingMax", ...).
const char* poolingForwardName(PoolingKind kind);

// The state the pooling kernels write for their gradient (mpsgrad's concrete MPSNNGradientState):
// the forward geometry (snapshot) plus the average normalization in force.
class CNNPoolingGradientState final : public NNGradientState {
public:
    CNNPoolingGradientState(const Device& device, PoolingKind kind, bool temporary, const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb), kind(kind) {}
    const char* className() const override { return "CNNPoolingGradientState"; }

    PoolingKind kind;
    int64_t zeroPadSizeX = 0, zeroPadSizeY = 0;  // average pooling
    bool countInBand = false;                    // average: N counts the taps inside the zero-pad band
};

// MPSCNNPooling: the shared forward implementation.
class CNNPooling : public CNNKernel {
public:
    int64_t kernelWidth() const override { return kernelWidth_; }
    int64_t kernelHeight() const override { return kernelHeight_; }
    int64_t strideInPixelsX() const override { return strideX_; }
    int64_t strideInPixelsY() const override { return strideY_; }
    int64_t dilationRateX() const override { return dilationX_; }
    int64_t dilationRateY() const override { return dilationY_; }
    PoolingKind kind() const { return kind_; }
    // Every output pixel of the clip is its window's max / mean / L2 norm, even a window that reads
    // only edge pixels.
    bool writesEveryDestinationPixel() const override { return true; }

    // -initWithCoder:device: for the four forward classes (kernels/serialization.cpp).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    // -initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY: (ValueError naming
    // the parameter unless every size is >= 1)
    CNNPooling(const Device& device, PoolingKind kind, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX,
               int64_t strideY, int64_t dilationX = 1, int64_t dilationY = 1);
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;
    // Average pooling's zero-pad band (0 for the others).
    virtual int64_t zeroPadX() const { return 0; }
    virtual int64_t zeroPadY() const { return 0; }

private:
    PoolingKind kind_;
    int64_t kernelWidth_, kernelHeight_, strideX_, strideY_, dilationX_, dilationY_;
};

// MPSCNNPoolingMax: the maximum over the window.
class CNNPoolingMax final : public CNNPooling {
public:
    CNNPoolingMax(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                  int64_t strideY = 1)
        : CNNPooling(device, PoolingKind::Max, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingMax"; }
};

// MPSCNNPoolingAverage: the window sum over N (edge mode and zero_pad_size_x/y decide N).
class CNNPoolingAverage final : public CNNPooling {
public:
    CNNPoolingAverage(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                      int64_t strideY = 1)
        : CNNPooling(device, PoolingKind::Average, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingAverage"; }

    int64_t zeroPadSizeX = 0, zeroPadSizeY = 0;

protected:
    int64_t zeroPadX() const override { return zeroPadSizeX; }
    int64_t zeroPadY() const override { return zeroPadSizeY; }
};

// MPSCNNPoolingL2Norm: sqrt of the sum of squares over the window.
class CNNPoolingL2Norm final : public CNNPooling {
public:
    CNNPoolingL2Norm(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                     int64_t strideY = 1)
        : CNNPooling(device, PoolingKind::L2Norm, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingL2Norm"; }
};

// MPSCNNDilatedPoolingMax: the maximum over dilated taps.
class CNNDilatedPoolingMax final : public CNNPooling {
public:
    // -initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:strideInPixelsX:strideInPixelsY:
    CNNDilatedPoolingMax(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t dilationX,
                         int64_t dilationY, int64_t strideX, int64_t strideY)
        : CNNPooling(device, PoolingKind::DilatedMax, kernelWidth, kernelHeight, strideX, strideY, dilationX,
                     dilationY) {}
    const char* className() const override { return "CNNDilatedPoolingMax"; }
};

// MPSCNNPoolingGradient: the shared gradient implementation. primary = G, secondary = the forward
// source X (average pooling reads only its size).
class CNNPoolingGradient : public CNNGradientKernel {
public:
    int64_t kernelWidth() const { return kernelWidth_; }
    int64_t kernelHeight() const { return kernelHeight_; }
    int64_t strideInPixelsX() const { return strideX_; }
    int64_t strideInPixelsY() const { return strideY_; }
    int64_t dilationRateX() const { return dilationX_; }
    int64_t dilationRateY() const { return dilationY_; }
    int64_t secondaryKernelWidth() const override { return kernelWidth_; }
    int64_t secondaryKernelHeight() const override { return kernelHeight_; }
    int64_t secondaryDilationRateX() const override { return dilationX_; }
    int64_t secondaryDilationRateY() const override { return dilationY_; }
    PoolingKind kind() const { return kind_; }

    // MPSCNNPoolingGradient.sourceSize: with primaryOffset, the G pixels that contribute.
    Size3 sourceSize{kNoClipSize, kNoClipSize, kNoClipSize};

    // Also copies average pooling's zero pads from the state.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

    // -initWithCoder:device: for the four gradient classes (kernels/serialization.cpp).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device);

protected:
    void encodeWithCoder(serial::Writer& writer) const override;
    CNNPoolingGradient(const Device& device, PoolingKind kind, int64_t kernelWidth, int64_t kernelHeight,
                       int64_t strideX, int64_t strideY, int64_t dilationX = 1, int64_t dilationY = 1);
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;
    virtual int64_t zeroPadX() const { return 0; }
    virtual int64_t zeroPadY() const { return 0; }
    virtual void setZeroPad(int64_t, int64_t) {}

private:
    PoolingKind kind_;
    int64_t kernelWidth_, kernelHeight_, strideX_, strideY_, dilationX_, dilationY_;
};

// MPSCNNPoolingMaxGradient
class CNNPoolingMaxGradient final : public CNNPoolingGradient {
public:
    CNNPoolingMaxGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                          int64_t strideY = 1)
        : CNNPoolingGradient(device, PoolingKind::Max, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingMaxGradient"; }
};

// MPSCNNPoolingAverageGradient (zero_pad_size_x/y are copied from the state by
// destination_image_descriptor, like the other forward properties).
class CNNPoolingAverageGradient final : public CNNPoolingGradient {
public:
    CNNPoolingAverageGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                              int64_t strideY = 1)
        : CNNPoolingGradient(device, PoolingKind::Average, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingAverageGradient"; }

    int64_t zeroPadSizeX = 0, zeroPadSizeY = 0;

protected:
    int64_t zeroPadX() const override { return zeroPadSizeX; }
    int64_t zeroPadY() const override { return zeroPadSizeY; }
    void setZeroPad(int64_t x, int64_t y) override { zeroPadSizeX = x, zeroPadSizeY = y; }
};

// MPSCNNPoolingL2NormGradient
class CNNPoolingL2NormGradient final : public CNNPoolingGradient {
public:
    CNNPoolingL2NormGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t strideX = 1,
                             int64_t strideY = 1)
        : CNNPoolingGradient(device, PoolingKind::L2Norm, kernelWidth, kernelHeight, strideX, strideY) {}
    const char* className() const override { return "CNNPoolingL2NormGradient"; }
};

// MPSCNNDilatedPoolingMaxGradient
class CNNDilatedPoolingMaxGradient final : public CNNPoolingGradient {
public:
    CNNDilatedPoolingMaxGradient(const Device& device, int64_t kernelWidth, int64_t kernelHeight, int64_t dilationX,
                                 int64_t dilationY, int64_t strideX, int64_t strideY)
        : CNNPoolingGradient(device, PoolingKind::DilatedMax, kernelWidth, kernelHeight, strideX, strideY, dilationX,
                             dilationY) {}
    const char* className() const override { return "CNNDilatedPoolingMaxGradient"; }
};

}  // namespace mpsgrad
