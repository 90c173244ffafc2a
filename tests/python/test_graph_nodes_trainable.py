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



def exact_graph(device, *args, **kwargs):
    """An NNGraph with FLOAT32 intermediates, for the tests that compare with torch at float32
    tolerances (the default FLOAT16 intermediates round every intermediate to 11 bits)."""
    graph = m.NNGraph(device, *args, **kwargs)
    graph.format = m.ImageFeatureChannelFormat.FLOAT32
    return graph

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
    graph = exact_graph(device, terminal[0].result_image)
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


# ---- transposed convolution ----------------------------------------------------------------------


class StridedSource:
    """A convolution data source (OHWI) with strides 2 and the update of the requested style: CPU
    (SGD on the host arrays) or GPU (SGD encoded on the graph's command buffer, in place on the
    exported weights)."""

    def __init__(self, device, w, b, style, lr=LR):
        self.w, self.b, self.lr = w.astype(np.float32), b.astype(np.float32), lr
        self.optimizer = m.NNOptimizerStochasticGradientDescent(device, learning_rate=lr)
        self.updates = 0
        if style == "gpu":
            self.update_with_command_buffer = self._gpu
        else:
            self.update_with_gradient_state = self._cpu

    def descriptor(self):
        o, kh, kw, i = self.w.shape
        d = m.CNNConvolutionDescriptor(kw, kh, i, o)
        d.stride_in_pixels_x = d.stride_in_pixels_y = 2
        return d

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def load(self):
        return True

    def purge(self):
        pass

    def _cpu(self, gradient_state, source_state):
        self.updates += 1
        self.w -= self.lr * np.asarray(gradient_state.gradient_for_weights).reshape(self.w.shape)
        self.b -= self.lr * np.asarray(gradient_state.gradient_for_biases).reshape(self.b.shape)
        return True

    def _gpu(self, command_buffer, gradient_state, source_state):
        self.updates += 1
        self.optimizer.encode(command_buffer, gradient_state, source_state)
        return source_state


def transpose_torch_weight(wt):
    """Transposed-convolution OHWI weights (used as given, spec §2.1.8) -> conv_transpose2d weights
    (in, out, kH, kW): rotated 180 degrees, input and output swapped."""
    return np.ascontiguousarray(wt[:, ::-1, ::-1, :].transpose(3, 0, 1, 2))


@pytest.mark.parametrize("style", ["cpu", "gpu"])
def test_convolution_transpose_node_trains_like_torch(device, style):
    """x -> conv (3x3, stride 2) -> tanh -> transposed conv sized by the conv's gradient state (the
    conv's source size) -> MSE: three SGD steps of both layers against conv2d / conv_transpose2d."""
    gen = rng(f"graph-transpose-{style}")
    h, w, cin, mid = 9, 8, 4, 6
    wc, bc = randn(gen, mid, 3, 3, cin) * 0.3, randn(gen, mid) * 0.1
    wt, bt = randn(gen, cin, 3, 3, mid) * 0.3, randn(gen, cin) * 0.1
    # A step size that keeps the weights O(1): with LR the summed-MSE gradients grew the weights to
    # ~200 in three steps, where float32's and the backends' summation orders differ by 3e-4.
    lr = 0.002
    conv_source, transpose_source = StridedSource(device, wc, bc, style, lr), StridedSource(device, wt, bt, style, lr)
    source = m.NNImageNode()
    conv = m.CNNConvolutionNode(source, conv_source)
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    transpose = m.CNNConvolutionTransposeNode(tanh.result_image, conv.result_state, transpose_source)
    assert isinstance(transpose.result_state, m.CNNConvolutionTransposeGradientStateNode)
    for node in (conv, transpose):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU if style == "cpu" else \
            m.NNTrainingStyle.UPDATE_DEVICE_GPU
    seen = []
    terminal = mse_loss_node(transpose.result_image).training_graph(
        node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    assert seen == ["CNNConvolutionTransposeGradientNode", "CNNNeuronGradientNode", "CNNConvolutionGradientNode"]
    graph = exact_graph(device, terminal[0].result_image)
    queue = m.CommandQueue(device)

    Wc = torch.tensor(wc, dtype=torch.float64).permute(0, 3, 1, 2).clone().requires_grad_(True)
    Bc = torch.tensor(bc, dtype=torch.float64, requires_grad=True)
    Wt = torch.tensor(transpose_torch_weight(wt), dtype=torch.float64, requires_grad=True)
    Bt = torch.tensor(bt, dtype=torch.float64, requires_grad=True)
    for step in range(3):
        x, t = randn(gen, N, h, w, cin), randn(gen, N, h, w, cin)
        cb = queue.command_buffer()
        dx = graph.encode_batch(cb, [images(device, x)], [labels_for(device, t)])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

        X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_(True)
        hidden = torch.tanh(F.conv2d(X, Wc, Bc, stride=2, padding=1))  # 5 x 4
        Y = F.conv_transpose2d(hidden, Wt, Bt, stride=2, padding=1, output_padding=(0, 1))  # back to 9 x 8
        assert Y.shape[2:] == (h, w)
        ((Y - torch.tensor(t, dtype=torch.float64).permute(0, 3, 1, 2)) ** 2).sum().backward()
        close(to_numpy(dx), X.grad.permute(0, 2, 3, 1).numpy())
        with torch.no_grad():
            for p in (Wc, Bc, Wt, Bt):
                p -= lr * p.grad
                p.grad = None
    assert conv_source.updates == transpose_source.updates == 3
    if style == "cpu":  # the host copies hold the trained weights
        close(transpose_source.w, np.ascontiguousarray(Wt.detach().numpy().transpose(1, 2, 3, 0)[:, ::-1, ::-1, :]))
        close(transpose_source.b, Bt.detach().numpy())
        close(conv_source.w, Wc.detach().permute(0, 2, 3, 1).numpy())


def test_convolution_transpose_node_errors():
    gen = rng("graph-transpose-errors")
    ds = StridedSource(m.Device("cpu"), randn(gen, 4, 3, 3, 6), randn(gen, 4), "cpu")
    x = m.NNImageNode()
    with pytest.raises(TypeError, match="convolution_gradient_state"):
        m.CNNConvolutionTransposeNode(x, m.CNNNeuronReLUNode(x).result_image, ds)
    with pytest.raises(TypeError, match="convolution_gradient_state"):
        m.CNNConvolutionTransposeNode(x, m.NNLabelsNode(), ds)
    node = m.CNNConvolutionTransposeNode(x, None, ds)
    gradient = node.gradient_filter_with_source(m.NNImageNode())
    assert type(gradient) is m.CNNConvolutionTransposeGradientNode
    assert isinstance(gradient, m.CNNConvolutionGradientNode)
    conv = m.CNNConvolutionNode(x, ds)
    with pytest.raises(TypeError, match="convolution_transpose_gradient_state"):
        m.CNNConvolutionTransposeGradientNode(m.NNImageNode(), x, conv.result_state)
