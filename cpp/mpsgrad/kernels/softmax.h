// The softmax family (MPSCNNSoftMax.h): CNNSoftMax, CNNLogSoftMax, their gradient state and the
// gradient kernels CNNSoftMaxGradient, CNNLogSoftMaxGradient (spec §2.4).
//
// Both forward kernels work across the feature channels of every pixel, subtracting the maximum
// first (numerically stable for any input magnitude):
//     softmax:      Y_k = exp(X_k - M) / sum_j exp(X_j - M)
//     log-softmax:  Y_k = (X_k - M) - log(sum_j exp(X_j - M)),   M = max_j X_j
// The gradients take the forward OUTPUT Y as their secondary (source_image), not X:
//     softmax:      dX_k = Y_k * (G_k - sum_j G_j * Y_j)
//     log-softmax:  dX_k = G_k - exp(Y_k) * sum_j G_j
#pragma once

#include <memory>

#include "core/kernel.h"
#include "kernels/elementwise_support.h"

namespace mpsgrad {

// The state CNNSoftMax / CNNLogSoftMax write for their gradient (mpsgrad's concrete
// MPSNNGradientState): the forward geometry and which images were the forward input and output.
class CNNSoftMaxGradientState final : public NNGradientState {
public:
    CNNSoftMaxGradientState(const Device& device, bool logSoftmax, bool temporary, const CommandBuffer* cb)
        : NNGradientState(device, temporary, cb), logSoftmax(logSoftmax) {}
    const char* className() const override { return "CNNSoftMaxGradientState"; }

    bool logSoftmax;
    elementwise::StorageIdentity forwardSource, forwardDestination;
};

// Shared implementation of MPSCNNSoftMax and MPSCNNLogSoftMax.
class CNNSoftMaxBase : public CNNKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    bool isLogSoftmax() const { return log_; }

    // -initWithCoder:device: for CNNSoftMax / CNNLogSoftMax (the CNNKernel properties).
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device) {
        auto kernel = std::make_shared<T>(device);
        static_cast<CNNSoftMaxBase&>(*kernel).decodeCNNKernelProperties(reader);
        return kernel;
    }

protected:
    void encodeWithCoder(serial::Writer& writer) const override { encodeCNNKernelProperties(writer); }
    CNNSoftMaxBase(const Device& device, bool logSoftmax) : CNNKernel(device), log_(logSoftmax) {}
    int64_t destinationFeatureChannels(const Image& source) const override { return availableSourceChannels(source); }
    StatePtr makeResultState(const Image& source, CommandBuffer* cb) override;
    void encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) override;

private:
    bool log_;
};

// MPSCNNSoftMax (-initWithDevice:)
class CNNSoftMax final : public CNNSoftMaxBase {
public:
    explicit CNNSoftMax(const Device& device) : CNNSoftMaxBase(device, false) {}
    const char* className() const override { return "CNNSoftMax"; }
};

// MPSCNNLogSoftMax (-initWithDevice:)
class CNNLogSoftMax final : public CNNSoftMaxBase {
public:
    explicit CNNLogSoftMax(const Device& device) : CNNSoftMaxBase(device, true) {}
    const char* className() const override { return "CNNLogSoftMax"; }
};

// Shared implementation of MPSCNNSoftMaxGradient and MPSCNNLogSoftMaxGradient. The returning
// encode forms read G and Y where the forward wrote Y and write dX where the forward read X.
class CNNSoftMaxGradientBase : public CNNGradientKernel {
public:
    bool writesEveryDestinationPixel() const override { return true; }
    bool isLogSoftmax() const { return log_; }
    // The base's, then source_image (the forward output Y) from the images the forward wrote.
    ImageDescriptor destinationImageDescriptor(const ImageBatch& sourceImages, const StateBatch& sourceStates) override;

    // -initWithCoder:device: for CNNSoftMaxGradient / CNNLogSoftMaxGradient.
    template <class T>
    static std::shared_ptr<T> initWithCoder(serial::Reader& reader, const Device& device) {
        auto kernel = std::make_shared<T>(device);
        static_cast<CNNSoftMaxGradientBase&>(*kernel).decodeGradientKernelProperties(reader);
        return kernel;
    }

protected:
    void encodeWithCoder(serial::Writer& writer) const override { encodeGradientKernelProperties(writer); }
    CNNSoftMaxGradientBase(const Device& device, bool logSoftmax) : CNNGradientKernel(device), log_(logSoftmax) {}
    void checkGradientStateType(const State& state) const override;
    void configureFromSnapshot(const ForwardSnapshot& snapshot) override;
    void encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients, const ImageBatch& sourceImages,
                            const StateBatch& states, const ImageBatch& destinations) override;

private:
    bool log_;
};

// MPSCNNSoftMaxGradient (-initWithDevice:); source_image = the forward output Y.
class CNNSoftMaxGradient final : public CNNSoftMaxGradientBase {
public:
    explicit CNNSoftMaxGradient(const Device& device) : CNNSoftMaxGradientBase(device, false) {}
    const char* className() const override { return "CNNSoftMaxGradient"; }
};

// MPSCNNLogSoftMaxGradient (-initWithDevice:); source_image = the forward output Y (log-probabilities).
class CNNLogSoftMaxGradient final : public CNNSoftMaxGradientBase {
public:
    explicit CNNLogSoftMaxGradient(const Device& device) : CNNSoftMaxGradientBase(device, true) {}
    const char* className() const override { return "CNNLogSoftMaxGradient"; }
};

}  // namespace mpsgrad
