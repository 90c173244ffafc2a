// MPSState, MPSNNGradientState, MPSNNBinaryGradientState.
//
// A state is a container of buffers with a read count: temporary states start at 1 and
// every kernel that reads one decrements it; at 0 its storage is released and any further
// use is an error. Persistent states start at 0 and are never decremented.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/device.h"
#include "core/types.h"

namespace mpsgrad {

class CommandBuffer;
class Kernel;
namespace serial {
class Writer;
class Reader;
}  // namespace serial

class State : public std::enable_shared_from_this<State> {
public:
    // -initWithDevice:bufferSize: (persistent); bufferSize 0 means no resource.
    State(const Device& device, size_t bufferSize = 0);
    // -initWithDevice:resourceList: with buffer sizes (persistent).
    State(const Device& device, const std::vector<size_t>& bufferSizes);
    // +temporaryStateWithCommandBuffer:bufferSize: / ...resourceList:
    static std::shared_ptr<State> temporary(CommandBuffer& cb, const std::vector<size_t>& bufferSizes);
    virtual ~State() = default;

    const Device& device() const { return device_; }
    bool isTemporary() const { return temporary_; }
    int64_t readCount() const { return readCount_; }
    // Changing the count of a temporary state once it reached 0 is an error.
    void setReadCount(int64_t count);
    size_t resourceCount() const { return buffers_.size(); }
    size_t bufferSizeAtIndex(size_t index) const;
    StateResourceType resourceTypeAtIndex(size_t index) const;
    // -resourceAtIndex:allocateMemory: (buffers are allocated at construction)
    BufferSlice resourceAtIndex(size_t index) const;
    size_t resourceSize() const;
    // -synchronizeOnCommandBuffer: (storage is host-coherent; validates the state)
    void synchronizeOnCommandBuffer(CommandBuffer& cb);

    std::string label;

    // ---- serialization (docs/serialization.md) ----------------------------------------------
    // Persistent State and CNNConvolutionWeightsAndBiasesState are serializable (label and
    // buffer contents); a temporary state is a ValueError, gradient states a TypeError.
    std::vector<uint8_t> serialize() const;
    // Any serializable state class, rebuilt (persistent) on `device`.
    static std::shared_ptr<State> deserialize(const uint8_t* data, size_t size, const Device& device);
    static std::shared_ptr<State> initWithCoder(serial::Reader& reader, const Device& device);

    // ---- for kernels ---------------------------------------------------------------------
    // Throws ValueError naming `what` when the state cannot be read (read count 0, device).
    virtual void checkUsable(const CommandBuffer& cb, const char* what) const;
    // A kernel read the state: temporary states decrement their read count.
    void noteRead();
    // Name of the concrete state class, for error messages.
    virtual const char* className() const { return "State"; }

protected:
    // Writes the payload of the concrete class (State: label, buffers; others: TypeError).
    virtual void encodeWithCoder(serial::Writer& writer) const;

    State(const Device& device, const std::vector<size_t>& bufferSizes, bool temporary, const CommandBuffer* cb);
    void checkAccessible(const char* what) const;
    // Adds a zero-filled buffer resource and returns it.
    BufferSlice addBuffer(size_t bytes);

    Device device_;
    bool temporary_ = false;
    int64_t readCount_ = 0;
    uint64_t commandBufferId_ = 0;  // CommandBuffer::id() of a temporary state's buffer (never reused)
    std::vector<BufferSlice> buffers_;
};

using StatePtr = std::shared_ptr<State>;
using StateBatch = std::vector<StatePtr>;

// The properties of a forward kernel at the moment it encoded (mpsgrad's content of the
// opaque MPSNNGradientState). Gradient kernels derive their geometry from it.
struct ForwardSnapshot {
    Offset offset;                     // unary kernels; for binary ones the primary offset
    Offset secondaryOffset;            // binary kernels
    Region clipRect;                   // the destination region actually written (clipped)
    ImageEdgeMode edgeMode = ImageEdgeMode::Zero;
    ImageEdgeMode secondaryEdgeMode = ImageEdgeMode::Zero;
    int64_t kernelWidth = 1, kernelHeight = 1;
    int64_t strideX = 1, strideY = 1;
    int64_t secondaryStrideX = 1, secondaryStrideY = 1;
    int64_t dilationX = 1, dilationY = 1;
    int64_t sourceWidth = 0, sourceHeight = 0, sourceFeatureChannels = 0;
    int64_t secondaryWidth = 0, secondaryHeight = 0, secondaryFeatureChannels = 0;
    int64_t destinationWidth = 0, destinationHeight = 0, destinationFeatureChannels = 0;
    int64_t sourceFeatureChannelOffset = 0, sourceFeatureChannelCount = 0;
    int64_t secondaryFeatureChannelOffset = 0, secondaryFeatureChannelCount = 0;
    int64_t destinationFeatureChannelOffset = 0;
    int64_t batchSize = 0;             // images encoded with this state
    uint32_t paddingMethod = 0;
    bool encoded = false;              // the forward pass has written the state
};

// MPSNNGradientState: produced by a unary forward kernel's resultState.
class NNGradientState : public State {
public:
    NNGradientState(const Device& device, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "NNGradientState"; }

    ForwardSnapshot snapshot;
    // The kernel that produced the state (weak: states do not keep kernels alive).
    std::weak_ptr<const Kernel> producer;
};

// MPSNNBinaryGradientState: produced by a binary forward kernel's resultState.
class NNBinaryGradientState : public State {
public:
    NNBinaryGradientState(const Device& device, bool temporary, const CommandBuffer* cb);
    const char* className() const override { return "NNBinaryGradientState"; }

    ForwardSnapshot snapshot;
    std::weak_ptr<const Kernel> producer;
};

// MPSStateBatchIncrementReadCount: each unique state once; returns the unique count.
size_t stateBatchIncrementReadCount(const StateBatch& batch, int64_t amount);

}  // namespace mpsgrad
