#include "kernels/softmax.h"

#include "core/checked.h"
#include "core/errors.h"

namespace mpsgrad {
namespace {

using elementwise::edgeModeCode;

const char* forwardName(bool logSoftmax) { return logSoftmax ? "CNNLogSoftMax" : "CNNSoftMax"; }

}  // namespace

// ---- forward ---------------------------------------------------------------------------------------

StatePtr CNNSoftMaxBase::makeResultState(const Image&, CommandBuffer* cb) {
    auto state = std::make_shared<CNNSoftMaxGradientState>(device_, log_, cb != nullptr, cb);
    state->producer = weak_from_this();  // empty when no shared_ptr owns the kernel
    return state;
}

void CNNSoftMaxBase::encodeImpl(CommandBuffer& cb, const std::vector<UnaryDispatch>& dispatches,
                                const StateBatch& states) {
    const int32_t edge = edgeModeCode(edgeMode, "edge_mode");
    std::vector<SoftmaxParams> params;
    for (size_t i = 0; i < dispatches.size(); ++i) {
        const UnaryDispatch& d = dispatches[i];
        if (!states.empty() && !dynamic_cast<CNNSoftMaxGradientState*>(states[i].get()))
            throwTypeError("destination_state: ", className(), " writes the CNNSoftMaxGradientState made by its "
                           "result_state, got a ", states[i]->className());
        const int64_t N = d.sourceChannels;
        checkDestinationChannels(*d.destination, N);
        SoftmaxParams p{};
        p.source = d.source->layout(d.sourceChannelOffset, N);
        p.destination = d.destination->layout(destinationFeatureChannelOffset, N);
        elementwise::setUnaryGeometry(p, *this, d, edge);
        p.logSoftmax = log_ ? 1 : 0;
        params.push_back(p);
    }
    for (size_t i = 0; i < states.size(); ++i) {
        auto& state = static_cast<CNNSoftMaxGradientState&>(*states[i]);
        elementwise::recordUnaryState(state, *this, dispatches[i], params[i]);
        state.logSoftmax = log_;
    }
    Backend& backend = device_.backend();
    for (auto [begin, end] : elementwise::unaryBatchRuns(dispatches)) {
        SoftmaxParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        const UnaryDispatch& d = dispatches[begin];
        backend.softmaxForward(cb, p, d.source->storage(d.sourceImageIndex),
                               d.destination->storage(d.destinationImageIndex));
    }
}

// ---- gradient --------------------------------------------------------------------------------------

void CNNSoftMaxGradientBase::checkGradientStateType(const State& state) const {
    auto* s = dynamic_cast<const CNNSoftMaxGradientState*>(&state);
    if (!s)
        throwTypeError("gradient_state: ", className(), " needs the CNNSoftMaxGradientState made by ",
                       forwardName(log_), ".result_state, got a ", state.className());
    if (s->logSoftmax != log_)
        throwTypeError("gradient_state: ", className(), " needs the state of a ", forwardName(log_),
                       ", got the state of a ", forwardName(s->logSoftmax));
}

ImageDescriptor CNNSoftMaxGradientBase::destinationImageDescriptor(const ImageBatch& sourceImages,
                                                                  const StateBatch& sourceStates) {
    ImageDescriptor descriptor = CNNGradientKernel::destinationImageDescriptor(sourceImages, sourceStates);
    secondaryOffset.z = primaryOffset.z;  // Y, like G, lives in the images the forward wrote
    return descriptor;
}

void CNNSoftMaxGradientBase::configureFromSnapshot(const ForwardSnapshot& s) {
    // G and Y are read where the forward wrote Y; dX is written where the forward read X.
    primaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    secondaryOffset = Offset{s.clipRect.origin.x, s.clipRect.origin.y, 0};
    clipRect = Region{{s.offset.x, s.offset.y, 0}, {s.clipRect.size.width, s.clipRect.size.height, kNoClipSize}};
    primaryEdgeMode = secondaryEdgeMode = ImageEdgeMode::Zero;
    primarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    primarySourceFeatureChannelMaxCount = UINT64_MAX;
    secondarySourceFeatureChannelOffset = s.destinationFeatureChannelOffset;
    secondarySourceFeatureChannelMaxCount = uint64_t(s.sourceFeatureChannelCount);
    destinationFeatureChannelOffset = s.sourceFeatureChannelOffset;
}

void CNNSoftMaxGradientBase::encodeGradientImpl(CommandBuffer& cb, const ImageBatch& sourceGradients,
                                                const ImageBatch& sourceImages, const StateBatch& states,
                                                const ImageBatch& destinations) {
    const int32_t gEdge = edgeModeCode(primaryEdgeMode, "primary_edge_mode");
    const int32_t yEdge = edgeModeCode(secondaryEdgeMode, "secondary_edge_mode");
    std::vector<SoftmaxGradientParams> params;
    std::vector<Region> clips;
    for (size_t i = 0; i < states.size(); ++i) {
        const auto& state = static_cast<const CNNSoftMaxGradientState&>(*states[i]);
        const ForwardSnapshot& s = state.snapshot;
        const Image& g = *sourceGradients[i];
        const Image& y = *sourceImages[i];
        const Image& dst = *destinations[i];
        if (state.forwardSource.matches(y, secondaryOffset.z) && !state.forwardDestination.matches(y, secondaryOffset.z))
            throwValueError("source_image: is the forward input X of the ", forwardName(log_), "; ", className(),
                            " needs the forward OUTPUT Y as its secondary (source_image)");
        if (y.width() != s.destinationWidth || y.height() != s.destinationHeight ||
            y.featureChannels() != s.destinationFeatureChannels)
            throwValueError("source_image: is ", y.width(), "x", y.height(), "x", y.featureChannels(), " but the forward ",
                            forwardName(log_), " wrote a ", s.destinationWidth, "x", s.destinationHeight, "x",
                            s.destinationFeatureChannels, " result; ", className(),
                            " needs the forward OUTPUT Y as its secondary (source_image)");
        const int64_t N = s.sourceFeatureChannelCount;
        checkSourceImageChannels(y, N, "wrote");
        checkSourceGradientChannels(g, N);
        checkDestinationChannels(dst, N, "destination_gradient");
        const elementwise::PointwiseGeometry geo =
            elementwise::resolvePointwiseGeometry(*this, g, y, dst, "source_image", className());
        SoftmaxGradientParams p{};
        p.gradient = g.layout(primarySourceFeatureChannelOffset, N);
        p.output = y.layout(secondarySourceFeatureChannelOffset, N);
        p.destination = dst.layout(destinationFeatureChannelOffset, N);
        elementwise::setGradientGeometry(p, geo);
        p.outputX = checked::toInt32(geo.sourceX, "secondary_offset.x");
        p.outputY = checked::toInt32(geo.sourceY, "secondary_offset.y");
        p.gradientEdgeMode = gEdge;
        p.outputEdgeMode = yEdge;
        p.logSoftmax = log_ ? 1 : 0;
        params.push_back(p);
        clips.push_back(geo.clip);
    }
    Backend& backend = device_.backend();
    auto runs = elementwise::batchRuns(params.size(), [&](size_t j) {
        const auto& a = params[j - 1];
        const auto& b = params[j];
        return elementwise::gradientImagesBackToBack(sourceGradients, sourceImages, destinations, j) &&
               elementwise::sameRegion(clips[j - 1], clips[j]) && a.gradientX == b.gradientX &&
               a.gradientY == b.gradientY && a.outputX == b.outputX && a.outputY == b.outputY &&
               a.destination.channels == b.destination.channels;
    });
    for (auto [begin, end] : runs) {
        SoftmaxGradientParams p = params[begin];
        p.batch = int32_t(end - begin) * params[begin].batch;
        backend.softmaxGradient(cb, p, sourceGradients[begin]->storage(primaryOffset.z),
                                sourceImages[begin]->storage(secondaryOffset.z),
                                destinations[begin]->storage(clips[begin].origin.z));
    }
}

}  // namespace mpsgrad
