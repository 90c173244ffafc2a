#include "kernels/neuron.h"

#include <cstring>
#include <set>

#include "core/checked.h"
#include "core/errors.h"

namespace mpsgrad {

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type) {
    NNNeuronDescriptor d;
    d.neuronType = type;
    switch (type) {
        case CNNNeuronType::ReLU: d.a = 0.0f; break;
        case CNNNeuronType::Linear: d.a = 1.0f; d.b = 0.0f; break;
        case CNNNeuronType::HardSigmoid: d.a = 0.2f; d.b = 0.5f; break;
        case CNNNeuronType::TanH:
        case CNNNeuronType::SoftPlus: d.a = 1.0f; d.b = 1.0f; break;
        case CNNNeuronType::ELU: d.a = 1.0f; break;
        case CNNNeuronType::ReLUN: d.a = 1.0f; d.b = 6.0f; break;
        case CNNNeuronType::Power: d.a = 1.0f; d.b = 0.0f; d.c = 1.0f; break;
        case CNNNeuronType::Exponential:
        case CNNNeuronType::Logarithm: d.a = 1.0f; d.b = 0.0f; d.c = -1.0f; break;
        default: break;
    }
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a) {
    NNNeuronDescriptor d = withType(type);
    d.a = a;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a, float b) {
    NNNeuronDescriptor d = withType(type, a);
    d.b = b;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::withType(CNNNeuronType type, float a, float b, float c) {
    NNNeuronDescriptor d = withType(type, a, b);
    d.c = c;
    return d;
}

NNNeuronDescriptor NNNeuronDescriptor::preluWithData(std::vector<float> data) {
    NNNeuronDescriptor d;
    d.neuronType = CNNNeuronType::PReLU;
    d.data = std::move(data);
    return d;
}

void NNNeuronDescriptor::validate(const char* what) const {
    int32_t t = static_cast<int32_t>(neuronType);
    if (t < 0 || t >= static_cast<int32_t>(CNNNeuronType::Count))
        throwValueError(what, ": neuron_type must be a CNNNeuronType in [0, 15], got ", t);
    if (neuronType == CNNNeuronType::PReLU && data.empty())
        throwValueError(what, ": a PReLU neuron needs per-channel data (NNNeuronDescriptor.prelu(data))");
}

NeuronParams NNNeuronDescriptor::params() const {
    NeuronParams p;
    p.type = static_cast<int32_t>(neuronType);
    p.a = a;
    p.b = b;
    p.c = c;
    p.hasChannelData = neuronType == CNNNeuronType::PReLU ? 1 : 0;
    return p;
}

const char* neuronTypeName(CNNNeuronType type) {
    static const char* names[] = {"None", "ReLU", "Linear", "Sigmoid", "HardSigmoid", "TanH", "Absolute", "SoftPlus",
                                  "SoftSign", "ELU", "PReLU", "ReLUN", "Power", "Exponential", "Logarithm", "GeLU"};
    int32_t t = static_cast<int32_t>(type);
    return t >= 0 && t < static_cast<int32_t>(CNNNeuronType::Count) ? names[t] : "?";
}

int32_t preluDataOffset(const NNNeuronDescriptor& d, int64_t channelOffset, int64_t channels, int64_t imageChannels,
                        const char* what, const char* kernelName) {
    if (d.neuronType != CNNNeuronType::PReLU) return 0;
    const int64_t n = int64_t(d.data.size());
    if (n == channels) return 0;
    if (n == imageChannels && channelOffset + channels <= imageChannels) return int32_t(channelOffset);
    throwValueError(what, ": PReLU data has ", n, " value(s) but ", kernelName, " processes ", channels,
                    " feature channel(s) (from channel ", channelOffset, " of a ", imageChannels,
                    "-channel image); give one value per processed channel or one per channel of the image");
}

namespace {

using elementwise::edgeModeCode;

BufferSlice uploadNeuronData(const Device& device, const NNNeuronDescriptor& d) {
    if (d.data.empty()) return {};
    BufferSlice slice{device.backend().newBuffer(d.data.size() * sizeof(float)), 0};
    std::memcpy(slice.floats(), d.data.data(), d.data.size() * sizeof(float));
    return slice;
}

}  // namespace

// ---- CNNNeuron ---------------------------------------------------------------------------------

CNNNeuron::CNNNeuron(const Device& device, const NNNeuronDescriptor& neuronDescriptor)
    : CNNKernel(device), descriptor_(neuronDescriptor) {
    descriptor_.validate("neuron_descriptor");
    data_ = uploadNeuronData(device_, descriptor_);
}

CNNNeuron::CNNNeuron(const Device& device, const NNNeuronDescriptor& neuronDescriptor, CNNNeuronType type)
    : CNNNeuron(device, neuronDescriptor) {
    if (neuronDescriptor.neuronType != type)
        throwValueError("neuron_descriptor: this class is the ", neuronTypeName(type), " neuron, got a descriptor of type ",
                        neuronTypeName(neuronDescriptor.neuronType));
}

StatePtr CNNNeuron::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNNeuronGradientState>(
        device_, descriptor_.neuronType,
        descriptor_.neuronType == CNNNeuronType::PReLU ? descriptor_.data.size() : 0, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

bool CNNNeuron::readsFloat16Natively() const { return device_.backend().readsHalfNatively(HalfOp::Neuron); }

void CNNNeuron::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches, const StateBatch& states) {
    const int32_t edge = edgeModeCode(edgeMode, "edge_mode");
    // Validate everything before encoding anything.
    std::vector<NeuronForwardParams> params;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNNeuronGradientState*>(states[i].get()))
            throwTypeError("destination_state: CNNNeuron writes the CNNNeuronGradientState made by its "
                           "result_state, got a ", states[i]->className());
        const int64_t C = d.sourceChannels;
        checkDestinationChannels(*d.destination, C);
        NeuronForwardParams p{};
        // storageLayout: FLOAT16 images arrive as they are when readsFloat16Natively().
        p.source = d.source->storageLayout(d.sourceChannelOffset, C);
        p.destination = d.destination->storageLayout(destinationFeatureChannelOffset, C);
        elementwise::setUnaryGeometry(p, *this, d, edge);
        p.neuronDataOffset = preluDataOffset(descriptor_, d.sourceChannelOffset, C, d.source->featureChannels(),
                                             "neuron_descriptor", "CNNNeuron");
        p.neuron = descriptor_.params();
        params.push_back(p);
    }

    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNNeuronGradientState&>(*states[i]);
        elementwise::recordUnaryState(state, *this, dispatches[i], params[i]);
        state.neuronType = descriptor_.neuronType;
    }

    Backend& backend = device_.backend();
    for (auto [begin, end] : elementwise::unaryBatchRuns(dispatches)) {
        NeuronForwardParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const UnaryDispatch& d = dispatches[begin];
        HalfBindings formats;
        formats.source = d.source->isFloat16();
        formats.destination = d.destination->isFloat16();
        if (formats.any())
            backend.neuronForwardHalf(cb, p, formats, d.source->storage(d.sourceImageIndex), data_,
                                      d.destination->storage(d.destinationImageIndex));
        else
            backend.neuronForward(cb, p, d.source->storage(d.sourceImageIndex), data_,
                                  d.destination->storage(d.destinationImageIndex));
    }
}

// ---- CNNNeuronGradient -----------------------------------------------------------------------------

CNNNeuronGradient::CNNNeuronGradient(const Device& device, const NNNeuronDescriptor& neuronDescriptor)
    : CNNGradientKernel(device), descriptor_(neuronDescriptor) {
    descriptor_.validate("neuron_descriptor");
    data_ = uploadNeuronData(device_, descriptor_);
}

bool CNNNeuronGradient::readsFloat16Natively() const {
    return descriptor_.neuronType != CNNNeuronType::PReLU && device_.backend().readsHalfNatively(HalfOp::Neuron);
}

void CNNNeuronGradient::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNNeuronGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: CNNNeuronGradient needs the CNNNeuronGradientState made by "
                       "CNNNeuron.result_state, got a ", state.className());
    if (s->neuronType != descriptor_.neuronType)
        throwValueError("gradient_state: comes from a CNNNeuron of type ", neuronTypeName(s->neuronType),
                        " but this CNNNeuronGradient has type ", neuronTypeName(descriptor_.neuronType));
    if (s->dataCount() != (descriptor_.neuronType == CNNNeuronType::PReLU ? descriptor_.data.size() : 0))
        throwValueError("gradient_state: comes from a PReLU with ", s->dataCount(),
                        " values but this CNNNeuronGradient has ", descriptor_.data.size());
}

void CNNNeuronGradient::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                           const ImageBatch& sourceImages, const StateBatch& states,
                                           const ImageBatch& destinations) {
    const int32_t gEdge = edgeModeCode(primaryEdgeMode, "primary_edge_mode");
    const int32_t xEdge = edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");
    if (descriptor_.neuronType == CNNNeuronType::PReLU) {
        std::set<const State*> seen;  // each state receives the a-gradient of its own images
        for (const auto& s : states)
            if (!seen.insert(s.get()).second)
                throwValueError("gradient_states: the same CNNNeuronGradientState appears twice in the batch; a "
                                "PReLU state receives dL/da of the one forward image it was written for");
    }
    std::vector<NeuronGradientParams> params;
    std::vector<Region> clips;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNNeuronGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& x = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (x.width() != s.sourceWidth || x.height() != s.sourceHeight || x.featureChannels() != s.sourceFeatureChannels)
            throwValueError("source_image: is ", x.width(), "x", x.height(), "x", x.featureChannels(),
                            " but the forward CNNNeuron read a ", s.sourceWidth, "x", s.sourceHeight, "x",
                            s.sourceFeatureChannels, " source; the secondary of CNNNeuronGradient is the forward "
                            "input X");
        if (state.forwardDestination.matches(x, secondaryOffset.z) && !state.forwardSource.matches(x, secondaryOffset.z))
            throwValueError("source_image: is the forward output Y of the CNNNeuron; CNNNeuronGradient needs the "
                            "forward input X as its secondary (source_image)");
        const int64_t C = s.sourceFeatureChannelCount;
        checkSourceImageChannels(x, C, "processed");
        checkSourceGradientChannels(g, C);
        checkDestinationChannels(dst, C, "destination_gradient");
        const elementwise::PointwiseGeometry geo =
            elementwise::resolvePointwiseGeometry(*this, g, x, dst, nullptr, "CNNNeuronGradient");
        NeuronGradientParams p{};
        p.gradient = g.storageLayout(primarySourceFeatureChannelOffset, C);
        p.source = x.storageLayout(secondarySourceFeatureChannelOffset, C);
        p.destination = dst.storageLayout(destinationFeatureChannelOffset, C);
        elementwise::setGradientGeometry(p, geo);
        p.sourceX = checked::toInt32(geo.sourceX, "secondary_offset.x");
        p.sourceY = checked::toInt32(geo.sourceY, "secondary_offset.y");
        p.gradientEdgeMode = gEdge;
        p.sourceEdgeMode = xEdge;
        p.neuronDataOffset = preluDataOffset(descriptor_, secondarySourceFeatureChannelOffset, C, x.featureChannels(),
                                             "neuron_descriptor", "CNNNeuronGradient");
        p.neuron = descriptor_.params();
        params.push_back(p);
        clips.push_back(geo.clip);
    }

    Backend& backend = device_.backend();
    auto runs = elementwise::batchRuns(params.size(), [&](size_t j) {
        return elementwise::gradientImagesBackToBack(sourceGradients, sourceImages, destinations, j) &&
               elementwise::sameRegion(clips[j - 1], clips[j]) && params[j - 1].gradientX == params[j].gradientX &&
               params[j - 1].gradientY == params[j].gradientY && params[j - 1].sourceX == params[j].sourceX &&
               params[j - 1].sourceY == params[j].sourceY && params[j - 1].destination.channels == params[j].destination.channels;
    });
    for (auto [begin, end] : runs) {
        NeuronGradientParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        HalfBindings formats;
        formats.gradient = sourceGradients[begin]->isFloat16();
        formats.source = sourceImages[begin]->isFloat16();
        formats.destination = destinations[begin]->isFloat16();
        if (formats.any())
            backend.neuronGradientHalf(cb, p, formats, sourceGradients[begin]->storage(primaryOffset.z),
                                       sourceImages[begin]->storage(secondaryOffset.z), data_,
                                       destinations[begin]->storage(clips[begin].origin.z));
        else
            backend.neuronGradient(cb, p, sourceGradients[begin]->storage(primaryOffset.z),
                                   sourceImages[begin]->storage(secondaryOffset.z), data_,
                                   destinations[begin]->storage(clips[begin].origin.z));
    }
    // PReLU's dL/da into each state (the extension), over the images of that state.
    if (descriptor_.neuronType == CNNNeuronType::PReLU) {
        for (size_t i = 0; i < states.size(); ++i) {
            auto& state = static_cast<CNNNeuronGradientState&>(*states[i]);
            backend.neuronPReLUWeightGradient(cb, params[i], sourceGradients[i]->storage(primaryOffset.z),
                                              sourceImages[i]->storage(secondaryOffset.z), state.gradientForData());
        }
    }
}

}  // namespace mpsgrad
