// Bindings of the concatenation kernels (kernels/concatenation.h) and the concatenation nodes of the
// graph API (graph/filter_nodes_concatenation.h). docs/concatenation.md.
#include "bindings.h"
#include "graph/filter_nodes_concatenation.h"
#include "kernels/concatenation.h"

namespace mpsgrad::python {

void bindConcatenation(py::module_& m) {
    py::class_<CNNConcatenation, CNNMultiaryKernel, std::shared_ptr<CNNConcatenation>>(
        m, "CNNConcatenation",
        "mpsgrad extension (MPS has no concatenation kernel; its graph node writes at channel offsets): "
        "concatenates source_count images along feature channels. Source i's channels land at "
        "destination_feature_channel_offset + start_i with start_0 = 0, start_{i+1} = start_i + "
        "round_up_4(channels_i) (each range starts at a multiple of 4; gap channels are 0). Destination pixel "
        "clip_rect.origin + p of source i reads its pixel offset_at_index(i) + p (edge_mode ZERO or CLAMP). "
        "Every source has the same width and height. result_state gives an NNMultiaryGradientState for "
        "CNNConcatenationGradient.")
        .def(py::init([](const DeviceArg& device, py::handle count) {
                 return std::make_shared<CNNConcatenation>(toDevice(device, "device"),
                                                           size_t(toUInt64(count, "source_count")));
             }),
             py::arg("device"), py::arg("source_count"), "(device, source_count), like -initWithDevice:sourceCount:")
        .def_static("range_starts", &CNNConcatenation::rangeStarts, py::arg("channels"),
                    "The first destination channel of each source that delivers channels[i] channels.");
    py::class_<CNNConcatenationGradient, CNNGradientKernel, std::shared_ptr<CNNConcatenationGradient>>(
        m, "CNNConcatenationGradient",
        "mpsgrad extension: the gradient of CNNConcatenation with respect to source source_index: the slice of "
        "source_gradient holding that source's channel range, written where the forward pass read the source "
        "(pixels it did not read are 0). gradient_state: the forward NNMultiaryGradientState; source_image: the "
        "forward source (only its size is read).")
        .def(py::init([](const DeviceArg& device, py::handle index) {
                 return std::make_shared<CNNConcatenationGradient>(toDevice(device, "device"),
                                                                   size_t(toUInt64(index, "source_index")));
             }),
             py::arg("device"), py::arg("source_index"))
        .def_property_readonly("source_index", &CNNConcatenationGradient::sourceIndex);

    py::class_<NNMultiaryGradientStateNode, NNStateNode, std::shared_ptr<NNMultiaryGradientStateNode>>(
        m, "NNMultiaryGradientStateNode", "MPSNNMultiaryGradientStateNode");
    py::class_<NNConcatenationNode, NNFilterNode, std::shared_ptr<NNConcatenationNode>>(
        m, "NNConcatenationNode",
        "MPSNNConcatenationNode: concatenates its sources along feature channels, each source's range rounded "
        "up to a multiple of 4 (spec §2.11). gradient_filters_with_sources gives one NNConcatenationGradientNode "
        "per source; gradient_filter_with_source(s) is unavailable (TypeError) for several sources.")
        .def(py::init([](std::vector<ImageNodePtr> sources) {
                 return std::make_shared<NNConcatenationNode>(std::move(sources));
             }),
             py::arg("sources"), "-initWithSources:")
        .def_static(
            "node_with_sources",
            [](std::vector<ImageNodePtr> sources) { return std::make_shared<NNConcatenationNode>(std::move(sources)); },
            py::arg("sources"), "+nodeWithSources:");
    py::class_<NNConcatenationGradientNode, NNGradientFilterNode, std::shared_ptr<NNConcatenationGradientNode>>(
        m, "NNConcatenationGradientNode",
        "MPSNNConcatenationGradientNode: the slice of source_gradient for source_image's channel range")
        .def(py::init<const ImageNodePtr&, const ImageNodePtr&, const StateNodePtr&>(), py::arg("source_gradient"),
             py::arg("source_image"), py::arg("gradient_state"),
             "-initWithSourceGradient:sourceImage:gradientState: (gradient_state: the NNConcatenationNode's result "
             "state; source_image: one of its sources)")
        .def_property_readonly("source_index", &NNConcatenationGradientNode::sourceIndex);
}

}  // namespace mpsgrad::python
