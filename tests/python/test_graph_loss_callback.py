"""propertyCallBack (MPSNNLossCallback) of NNForwardLossNode and NNLossGradientNode: a Python object
(or callable) asked at encode time for the loss's scalar weight."""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from test_graph_nodes import N, _run, _split_loss_problem, _torch_split_loss, close, exact_graph, to_numpy


class Weight:
    """An MPSNNLossCallback: scalar_weight_for_source_image(source_image, destination_image) -> float."""

    def __init__(self, value):
        self.value, self.calls = value, []

    def scalar_weight_for_source_image(self, source_image, destination_image):
        self.calls.append((source_image, destination_image))
        return self.value


@pytest.mark.parametrize("weighted", [False, True])
def test_forward_loss_callback_weight_scales_loss_and_gradient(device, weighted):
    loss, arrays = _split_loss_problem(device, weighted)
    ref_losses, ref_dx, _ = _torch_split_loss(arrays)
    assert loss.property_call_back is None
    callback = Weight(2.5)
    loss.property_call_back = callback
    assert loss.property_call_back is callback

    # The weight replaces the descriptor's `weight`, which a weights image overrides per element
    # (docs/losses_and_optimizers.md): with weights the callback is asked but does not scale.
    def scale(weight):
        return 1.0 if weighted else weight

    values = to_numpy(_run(device, exact_graph(device, loss.result_image), arrays))
    close(values.reshape(N), scale(2.5) * ref_losses)
    # Called once per encode, with the first source (the predictions) and destination (the loss image).
    assert len(callback.calls) == 1
    source, destination = callback.calls[0]
    assert isinstance(source, m.Image) and isinstance(destination, m.Image)
    assert (source.width, source.height, source.feature_channels) == (4, 3, 5)
    assert (destination.width, destination.height) == (1, 1)

    # The training graph: the gradient node reads the forward's weight through the forward state.
    seed = m.NNInitialGradientNode(loss.result_image)
    terminal = seed.training_graph()
    callback.value = -0.5  # dynamic: the value at this encode counts
    dx = to_numpy(_run(device, exact_graph(device, terminal[0].result_image), arrays))
    close(dx, scale(-0.5) * ref_dx)
    assert len(callback.calls) == 2

    # Removing the callback restores the descriptor's weight.
    loss.property_call_back = None
    values = to_numpy(_run(device, exact_graph(device, loss.result_image), arrays))
    close(values.reshape(N), ref_losses)


def test_loss_gradient_node_callback_without_forward_state(device):
    """A loss gradient node built directly without a gradient state uses its own callback's weight."""
    loss, arrays = _split_loss_problem(device, False)
    _, ref_dx, ref_dt = _torch_split_loss(arrays)
    seed = m.NNInitialGradientNode(loss.result_image)
    sources = loss.source_images
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    node = m.NNLossGradientNode(seed.result_image, sources[0], sources[1], None, None, desc,
                                is_labels_gradient_filter=True)
    node.property_call_back = lambda source, destination: 3.0  # a plain callable works too
    dt = to_numpy(_run(device, exact_graph(device, node.result_image), arrays))
    close(dt, 3.0 * ref_dt)


def test_callback_errors(device):
    loss, arrays = _split_loss_problem(device, False)
    with pytest.raises(TypeError, match="property_call_back"):
        loss.property_call_back = 3.0
    loss.property_call_back = lambda source, destination: "heavy"
    with pytest.raises(TypeError, match="property_call_back"):
        _run(device, m.NNGraph(device, loss.result_image), arrays)

    def fails(source, destination):
        raise RuntimeError("callback failed")

    loss.property_call_back = fails
    with pytest.raises(RuntimeError, match="callback failed"):
        _run(device, m.NNGraph(device, loss.result_image), arrays)
    loss.property_call_back = lambda source, destination: float("nan")
    with pytest.raises(ValueError, match="weight"):
        _run(device, m.NNGraph(device, loss.result_image), arrays)
