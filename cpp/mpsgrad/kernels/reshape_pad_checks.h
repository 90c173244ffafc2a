// The argument checks of NNReshape's explicit shapes and NNPad's sizes and edge mode, shared with
// NNReshapeNode and NNPadNode so that a node refuses what its kernel would (kernels/reshape_pad.cpp).
#pragma once

#include <cstdint>

#include "core/types.h"
#include "kernels/reshape_pad.h"

namespace mpsgrad::reshape_pad_checks {

// ValueError unless a reshape to width x height x channels is possible (each >= 1, the element
// count representable); `names` names the three parameters in the message.
void checkShape(int64_t width, int64_t height, int64_t channels,
                const char* names = "reshaped_width / reshaped_height / reshaped_feature_channels");
// ValueError unless every padding size fits the int32 range the kernels index with.
void checkPaddingSizes(const ImageCoordinate& before, const ImageCoordinate& after);
// ValueError unless `edgeMode` is an ImageEdgeMode.
void checkEdgeMode(ImageEdgeMode edgeMode);

}  // namespace mpsgrad::reshape_pad_checks
