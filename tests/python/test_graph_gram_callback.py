"""propertyCallBack (MPSNNGramMatrixCallback) of NNGramMatrixCalculationNode, and the Python protocol
classes of the training API (mpsgrad.Handle, NNTrainableNode, NNLossCallback, NNGramMatrixCallback,
ImageSizeEncodingState).

The Gram node asks its callback for alpha once per encode; the training graph's gradient node uses
the alpha of the same encode. Oracle: PyTorch autograd of alpha * X^T X (test_graph_nodes.train)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import randn, rng
from test_graph_nodes import N, X, close, exact_graph, images, to_numpy, torch_reference, train


class Alpha:
    """An MPSNNGramMatrixCallback: alpha_for_source_image(source_image, destination_image) -> float."""

    def __init__(self, value):
        self.value, self.calls = value, []

    def alpha_for_source_image(self, source_image, destination_image):
        self.calls.append((source_image, destination_image))
        return self.value


def gram(alpha):
    def fn(X):  # NHWC -> (N, 1, C, C): pixel f of the result holds row f
        flat = X.reshape(X.shape[0], -1, X.shape[3])
        return (alpha * flat.transpose(1, 2) @ flat).unsqueeze(1)
    return fn


def run_inference(device, graph, x):
    cb = m.CommandQueue(device).command_buffer()
    out = graph.encode_batch(cb, [images(device, x)])
    cb.commit()
    cb.wait_until_completed()
    return to_numpy(out)


def test_gram_callback_sets_alpha_of_forward_and_gradient(device):
    x = randn(rng("gram-callback-x"), N, 3, 4, 5)
    target = randn(rng("gram-callback-t"), N, 1, 5, 5)
    node = m.NNGramMatrixCalculationNode(m.NNImageNode(X))
    assert node.property_call_back is None
    callback = Alpha(0.3)
    node.property_call_back = callback
    assert node.property_call_back is callback
    assert isinstance(callback, m.NNGramMatrixCallback)

    losses, grads, seen = train(device, node.result_image, {"x": x}, target)
    assert seen == ["NNGramMatrixCalculationGradientNode"]
    ref_losses, ref_grads = torch_reference(gram(0.3), [x], target)
    close(losses, ref_losses)
    close(grads["x"], ref_grads[0])
    # train() encodes two graphs (FLOAT32 and FLOAT16 intermediates): one call each, with the
    # first source image and the destination the forward writes.
    assert len(callback.calls) == 2
    source, destination = callback.calls[0]
    assert isinstance(source, m.Image) and isinstance(destination, m.Image)
    assert (source.width, source.height, source.feature_channels) == (4, 3, 5)
    assert (destination.width, destination.height, destination.feature_channels) == (5, 1, 5)
    assert node.alpha == 1.0  # the callback does not overwrite the node's own alpha


def test_gram_callback_is_asked_at_every_encode(device):
    x = randn(rng("gram-callback-dyn"), N, 2, 3, 4)
    node = m.NNGramMatrixCalculationNode(m.NNImageNode(X), alpha=0.5)
    graph = exact_graph(device, node.result_image)
    base = gram(1.0)(torch.tensor(x, dtype=torch.float64)).numpy()
    close(run_inference(device, graph, x), 0.5 * base)
    values = iter([2.0, -1.5])
    node.property_call_back = lambda source, destination: next(values)  # a plain callable works too
    close(run_inference(device, graph, x), 2.0 * base)
    close(run_inference(device, graph, x), -1.5 * base)
    node.property_call_back = None  # back to the node's alpha
    close(run_inference(device, graph, x), 0.5 * base)


@pytest.mark.parametrize("returned, error, match", [
    ("big", TypeError, "property_call_back: must return a float"),
    (float("nan"), ValueError, "property_call_back: the returned alpha"),
    (float("inf"), ValueError, "property_call_back: the returned alpha"),
])
def test_gram_callback_bad_values(device, returned, error, match):
    x = randn(rng("gram-callback-bad"), N, 2, 2, 4)
    node = m.NNGramMatrixCalculationNode(m.NNImageNode(X))
    node.property_call_back = lambda source, destination: returned
    graph = m.NNGraph(device, node.result_image)
    with pytest.raises(error, match=match):
        run_inference(device, graph, x)


def test_gram_callback_setter_rejects_non_callables():
    node = m.NNGramMatrixCalculationNode(m.NNImageNode(X))
    with pytest.raises(TypeError, match="property_call_back: expected None, an object with alpha_for_source_image"):
        node.property_call_back = 3.0
    assert node.property_call_back is None


# ---- protocol classes ---------------------------------------------------------------------------------


def test_protocols_recognize_conforming_objects(device):
    class Label:
        def label(self):
            return "x"

    class Weight:
        def scalar_weight_for_source_image(self, source_image, destination_image):
            return 1.0

    assert isinstance(Label(), m.Handle) and not isinstance(object(), m.Handle)
    assert isinstance(Weight(), m.NNLossCallback) and not isinstance(Weight(), m.NNGramMatrixCallback)
    assert isinstance(Alpha(1.0), m.NNGramMatrixCallback)
    conv = m.CNNConvolutionNode(m.NNImageNode(X), _conv_source(device))
    assert isinstance(conv, m.NNTrainableNode)
    assert not isinstance(m.CNNNeuronReLUNode(m.NNImageNode(X)), m.NNTrainableNode)
    # The convolution gradient state remembers the forward source size (MPSImageSizeEncodingState).
    kernel = m.CNNConvolution(device, _conv_source(device))
    source = m.Image.from_numpy(np.zeros((1, 5, 7, 4), np.float32), device=device)
    state = kernel.result_state(source)
    assert isinstance(state, m.ImageSizeEncodingState)
    assert (state.source_width, state.source_height) == (7, 5)


def _conv_source(device):
    descriptor = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=4,
                                            output_feature_channels=4)
    return m.CNNConvolutionWeightsDataSource(descriptor, np.zeros((4, 3, 3, 4), np.float32))
