"""The trainable instance and group normalization nodes (issue 15): several SGD steps of a training
graph (conv-free: x -> normalization -> tanh -> MSE loss) in both training styles against PyTorch
(F.instance_norm / F.group_norm, autograd and a hand-written SGD step with the same learning rate).

CPU style: the ready-made data sources' update_gamma_and_beta_with_*_state_batch (SGD, summed over
the batch) from the completion handler. GPU style: a Python data source's
update_gamma_and_beta_with_command_buffer, called right after the gradient node is encoded; it
returns None and updates itself from its own completion handler (the graph then reloads the kernel
from it, docs/graph.md).

Tolerance: float32 against float64, relative 1e-4 of the largest magnitude (test_graph.close)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng
from test_graph import close, images, labels_for, mse_loss_node, to_numpy

N, H, W, C = 3, 4, 5, 6
LR, EPS = 0.05, 1e-5


class GpuStyleSource:
    """A duck-typed data source with the GPU-style update only."""

    def __init__(self, family, gamma, beta, groups):
        self.family, self.g, self.b, self.groups = family, gamma.copy(), beta.copy(), groups
        self.updates = 0

    def number_of_feature_channels(self):
        return len(self.g)

    def number_of_groups(self):
        return self.groups

    def gamma(self):
        return self.g

    def beta(self):
        return self.b

    def epsilon(self):
        return EPS

    def update_gamma_and_beta_with_command_buffer(self, command_buffer, states):
        self.updates += 1

        def step(cb):  # the states hold dγ, dβ once the command buffer has run
            self.g = (self.g - LR * sum(s.gradient_for_gamma for s in states)).astype(np.float32)
            self.b = (self.b - LR * sum(s.gradient_for_beta for s in states)).astype(np.float32)

        command_buffer.add_completed_handler(step)
        return None


def make_source(family, style, gamma, beta, groups):
    if style == "gpu":
        return GpuStyleSource(family, gamma, beta, groups)
    if family == "instance":
        source = m.CNNInstanceNormalizationWeightsDataSource(gamma, beta, epsilon=EPS)
    else:
        source = m.CNNGroupNormalizationWeightsDataSource(gamma, beta, number_of_groups=groups, epsilon=EPS)
    source.learning_rate = LR
    return source


@pytest.mark.parametrize("style", ["cpu", "gpu"])
@pytest.mark.parametrize("family", ["instance", "group"])
def test_normalization_node_trains_like_torch(device, family, style):
    groups = C if family == "instance" else 3
    gen = rng(f"graph-gn-{family}-{style}")
    gamma = (1.0 + 0.2 * randn(gen, C)).astype(np.float32)
    beta = (0.1 * randn(gen, C)).astype(np.float32)
    source = make_source(family, style, gamma, beta, groups)
    cls = m.CNNInstanceNormalizationNode if family == "instance" else m.CNNGroupNormalizationNode
    node = cls(m.NNImageNode(), source)
    assert node.training_style == m.NNTrainingStyle.UPDATE_DEVICE_GPU  # MPS's default
    node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU if style == "cpu" else m.NNTrainingStyle.UPDATE_DEVICE_GPU
    seen = []
    terminal = mse_loss_node(m.CNNNeuronTanHNode(node.result_image).result_image).training_graph(
        node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    expected = "CNNInstanceNormalizationGradientNode" if family == "instance" else "CNNGroupNormalizationGradientNode"
    assert seen == ["CNNNeuronGradientNode", expected]
    assert terminal[0].training_style == node.training_style  # propagated
    graph = m.NNGraph(device, terminal[0].result_image)
    queue = m.CommandQueue(device)

    W_ = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B_ = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    for step in range(3):
        x = (randn(gen, N, H, W, C) * 1.5 + 0.5).astype(np.float32)
        t = randn(gen, N, H, W, C)
        cb = queue.command_buffer()
        dx = graph.encode_batch(cb, [images(device, x)], [labels_for(device, t)])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

        X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_(True)
        Y = F.instance_norm(X, weight=W_, bias=B_, eps=EPS) if family == "instance" else \
            F.group_norm(X, groups, W_, B_, eps=EPS)
        ((torch.tanh(Y) - torch.tensor(t, dtype=torch.float64).permute(0, 3, 1, 2)) ** 2).sum().backward()
        close(to_numpy(dx), X.grad.permute(0, 2, 3, 1).numpy())
        with torch.no_grad():  # SGD, as the data sources do
            W_ -= LR * W_.grad
            B_ -= LR * B_.grad
        W_.grad = B_.grad = None
        close(np.asarray(source.gamma()), W_.detach().numpy())
        close(np.asarray(source.beta()), B_.detach().numpy())
    if style == "gpu":
        assert source.updates == 3


def test_normalization_node_without_update_method_is_refused(device):
    class Plain:
        def number_of_feature_channels(self):
            return C

        def gamma(self):
            return np.ones(C, np.float32)

        def beta(self):
            return np.zeros(C, np.float32)

    node = m.CNNInstanceNormalizationNode(m.NNImageNode(), Plain())
    terminal = mse_loss_node(node.result_image).training_graph()
    with pytest.raises(ValueError, match="training_style"):
        m.NNGraph(device, terminal[0].result_image)
    node2 = m.CNNInstanceNormalizationNode(m.NNImageNode(), Plain())
    node2.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    m.NNGraph(device, mse_loss_node(node2.result_image).training_graph()[0].result_image)  # fine
    with pytest.raises(TypeError, match="data_source"):
        m.CNNGroupNormalizationNode(m.NNImageNode(), None)
    with pytest.raises(TypeError, match="gradient_state"):
        relu = m.CNNNeuronReLUNode(m.NNImageNode())
        m.CNNGroupNormalizationGradientNode(m.NNImageNode(), m.NNImageNode(), relu.result_state)
