"""Neuron fusion in NNGraph (docs/graph.md "Fusion"): a convolution, fully connected or batch
normalization node whose result only one neuron node reads runs as one kernel with the neuron fused.

Proven here: for every producer and every neuron type the kernels fuse, the fused graph equals the
same graph with neuron_fusion = "none" and a float64 PyTorch / NumPy formula; the pairs that must not
fuse (a second reader, an exported or result pre-neuron image, a gradient reader, a producer that
cannot fuse) stay unfused; and an inference graph sharing its nodes with a training graph computes
with the parameters of every training step (GPU-style updates reloaded on the command buffer,
CPU-style updates from the completion handler, reload_from_data_sources), batch normalization's
GPU-style gamma/beta updates included (the fused BN + ReLU kernel, "all" and "auto", against the unfused
graph and PyTorch SGD in float64, step by step).

Tolerance: FLOAT32 intermediates; fused and unfused run the same float32 arithmetic in another order
of stores (1e-5 relative), PyTorch float64 within 1e-4 relative of the largest magnitude."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng
from test_graph import (GPUBatchNormSource, GPUSource, ConvSource, Handle, close, exact_graph, images, nchw, nhwc,
                        to_numpy, torch_weight)

T = m.CNNNeuronType
N, H, W, CIN, C = 2, 5, 6, 3, 4
SLOPES = [0.1, -0.3, 0.25, 1.5]  # PReLU, one per channel

# name -> (descriptor, float64 formula on a torch tensor in NCHW)
NEURONS = {
    "relu": (m.NNNeuronDescriptor(T.RELU, 0.125), lambda x: torch.where(x >= 0, x, 0.125 * x)),
    "linear": (m.NNNeuronDescriptor(T.LINEAR, -1.5, 0.25), lambda x: -1.5 * x + 0.25),
    "sigmoid": (m.NNNeuronDescriptor(T.SIGMOID), torch.sigmoid),
    "hard_sigmoid": (m.NNNeuronDescriptor(T.HARD_SIGMOID, 0.25, 0.5), lambda x: torch.clamp(0.25 * x + 0.5, 0, 1)),
    "tanh": (m.NNNeuronDescriptor(T.TANH, 1.5, 0.75), lambda x: 1.5 * torch.tanh(0.75 * x)),
    "absolute": (m.NNNeuronDescriptor(T.ABSOLUTE), torch.abs),
    "soft_plus": (m.NNNeuronDescriptor(T.SOFT_PLUS, 1.5, 0.75), lambda x: 1.5 * torch.log1p(torch.exp(0.75 * x))),
    "soft_sign": (m.NNNeuronDescriptor(T.SOFT_SIGN), lambda x: x / (1 + torch.abs(x))),
    "elu": (m.NNNeuronDescriptor(T.ELU, 0.75), lambda x: torch.where(x >= 0, x, 0.75 * torch.expm1(x))),
    "prelu": (m.NNNeuronDescriptor.prelu(SLOPES),
              lambda x: torch.where(x >= 0, x, torch.tensor(SLOPES, dtype=torch.float64).view(1, -1, 1, 1) * x)),
    "relun": (m.NNNeuronDescriptor(T.RELUN, 0.1, 1.5), lambda x: torch.clamp(torch.where(x >= 0, x, 0.1 * x), max=1.5)),
    "power": (m.NNNeuronDescriptor(T.POWER, 0.5, 3.0, 2.0), lambda x: (0.5 * x + 3.0) ** 2),
    "exponential": (m.NNNeuronDescriptor(T.EXPONENTIAL, 0.5, 0.25, 2.0), lambda x: 2.0 ** (0.5 * x + 0.25)),
    "logarithm": (m.NNNeuronDescriptor(T.LOGARITHM, 0.5, 3.0, -1.0), lambda x: torch.log(0.5 * x + 3.0)),
    "gelu": (m.NNNeuronDescriptor(T.GELU), lambda x: F.gelu(x, approximate="none")),
}


def encode(device, graph, xs, fuse):
    return encode_mode(device, graph, xs, "all" if fuse else "none")


def encode_mode(device, graph, xs, mode):
    graph.neuron_fusion = mode
    cb = m.CommandQueue(device).command_buffer()
    out = graph.encode_batch(cb, [xs])
    cb.commit()
    cb.wait_until_completed()
    return to_numpy(out)


def fused_and_unfused(device, graph, xs):
    """The graph's result with every fusable pair fused and with none, checking the statistics."""
    fused = encode(device, graph, xs, True)
    stats = graph.last_encode_statistics
    pairs = len(graph.fused_node_pairs)
    assert stats["fused_pairs"] == pairs
    unfused = encode(device, graph, xs, False)
    assert graph.last_encode_statistics["fused_pairs"] == 0
    assert graph.last_encode_statistics["encoded_nodes"] == stats["encoded_nodes"] + pairs
    return fused, unfused


def producer(kind, gen, source):
    """(node, float64 reference of its result on an NCHW tensor) for a producer of C channels."""
    if kind == "conv":
        w, b = randn(gen, C, 3, 3, CIN) * 0.4, randn(gen, C) * 0.1
        return (m.CNNConvolutionNode(source, ConvSource(w, b)),
                lambda X: F.conv2d(X, torch_weight(w).detach(), torch.tensor(b, dtype=torch.float64), padding=1))
    if kind == "fc":
        w, b = randn(gen, C, H, W, CIN) * 0.2, randn(gen, C) * 0.1  # the kernel covers the whole image
        return (m.CNNFullyConnectedNode(source, ConvSource(w, b)),
                lambda X: F.conv2d(X, torch_weight(w).detach(), torch.tensor(b, dtype=torch.float64)))
    gamma, beta = 1.0 + 0.2 * randn(gen, CIN), 0.1 * randn(gen, CIN)
    mean, variance = 0.1 * randn(gen, CIN), 0.5 + np.abs(randn(gen, CIN))
    ds = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance, epsilon=1e-3)

    def reference(X):
        v = lambda a: torch.tensor(a, dtype=torch.float64).view(1, -1, 1, 1)
        return (X - v(mean)) / torch.sqrt(v(variance) + 1e-3) * v(gamma) + v(beta)
    return m.CNNBatchNormalizationNode(source, ds), reference


@pytest.mark.parametrize("neuron", sorted(NEURONS))
@pytest.mark.parametrize("kind", ["conv", "fc", "bn"])
def test_fused_pair_equals_unfused_and_torch(device, kind, neuron):
    gen = rng(f"fusion-{kind}-{neuron}")
    x = randn(gen, N, H, W, CIN)
    source = m.NNImageNode(Handle("x"))
    node, reference = producer(kind, gen, source)
    descriptor, formula = NEURONS[neuron]
    if kind == "bn" and neuron == "prelu":  # the BN has CIN channels
        descriptor = m.NNNeuronDescriptor.prelu(SLOPES[:CIN])
        formula = lambda X: torch.where(X >= 0, X, torch.tensor(SLOPES[:CIN], dtype=torch.float64).view(1, -1, 1, 1) * X)
    act = m.CNNNeuronNode(node.result_image, descriptor)
    graph = exact_graph(device, act.result_image)
    graph.neuron_fusion = "all"
    pairs = graph.fused_node_pairs
    assert len(pairs) == 1 and pairs[0][0] is node and pairs[0][1] is act
    fused, unfused = fused_and_unfused(device, graph, images(device, x))
    assert graph.last_encode_statistics["encoded_nodes"] == 2  # the unfused encode; fused: 1
    close(fused, unfused, rel=1e-5)
    close(fused, nhwc(formula(reference(nchw(x)))))


def test_default_float16_graph_fuses_within_float16_tolerance(device):
    """The default FLOAT16 intermediates: fused, the pre-neuron values are never rounded to half."""
    gen = rng("fusion-half")
    x = randn(gen, N, H, W, CIN)
    conv, reference = producer("conv", gen, m.NNImageNode())
    relu = m.CNNNeuronReLUNode(conv.result_image)
    graph = m.NNGraph(device, relu.result_image)
    fused, unfused = fused_and_unfused(device, graph, images(device, x))
    expected = nhwc(F.relu(reference(nchw(x))))
    close(fused, expected, rel=1e-5)  # no half rounding before the result
    close(unfused, expected, rel=2e-3)


def test_chains_fuse_each_pair_once(device):
    """conv -> ReLU -> tanh -> conv -> sigmoid: the first neuron fuses with its convolution, the tanh
    (its source is a neuron's result) runs alone, the sigmoid fuses with the second convolution."""
    gen = rng("fusion-chain")
    x = randn(gen, N, H, W, CIN)
    w2, b2 = randn(gen, C, 3, 3, C) * 0.4, randn(gen, C) * 0.1
    conv1, reference = producer("conv", gen, m.NNImageNode())
    relu = m.CNNNeuronReLUNode(conv1.result_image)
    tanh = m.CNNNeuronTanHNode(relu.result_image)
    conv2 = m.CNNConvolutionNode(tanh.result_image, ConvSource(w2, b2))
    sigmoid = m.CNNNeuronSigmoidNode(conv2.result_image)
    graph = exact_graph(device, sigmoid.result_image)
    graph.neuron_fusion = "all"
    assert [(a, b) for a, b in graph.fused_node_pairs] == [(conv1, relu), (conv2, sigmoid)]
    fused, unfused = fused_and_unfused(device, graph, images(device, x))
    assert graph.last_encode_statistics["encoded_nodes"] == 5  # the unfused encode; fused: 3
    y = torch.tanh(F.relu(reference(nchw(x))))
    y = torch.sigmoid(F.conv2d(y, torch_weight(w2).detach(), torch.tensor(b2, dtype=torch.float64), padding=1))
    close(fused, unfused, rel=1e-5)
    close(fused, nhwc(y))


def test_auto_fuses_the_pairs_that_pay_on_the_device(device):
    """'auto' (the default): batch normalization, convolution and fully connected pairs on every
    device (the CPU convolution's epilogue has one loop per neuron type: fusing saves a pass)."""
    gen = rng("fusion-auto")
    x = randn(gen, N, H, W, CIN)
    bn, _ = producer("bn", gen, m.NNImageNode())
    relu_bn = m.CNNNeuronReLUNode(bn.result_image)
    conv, _ = producer("conv", gen, relu_bn.result_image)
    relu_conv = m.CNNNeuronReLUNode(conv.result_image)
    fc = m.CNNFullyConnectedNode(relu_conv.result_image, ConvSource(randn(gen, 3, H, W, C) * 0.2, randn(gen, 3)))
    tanh_fc = m.CNNNeuronTanHNode(fc.result_image)
    graph = exact_graph(device, tanh_fc.result_image)
    assert graph.neuron_fusion == "auto"
    expected = [(bn, relu_bn), (conv, relu_conv), (fc, tanh_fc)]
    assert [(a, b) for a, b in graph.fused_node_pairs] == expected
    auto = encode_mode(device, graph, images(device, x), "auto")
    assert graph.last_encode_statistics["fused_pairs"] == len(expected)
    close(auto, encode_mode(device, graph, images(device, x), "none"), rel=1e-5)
    with pytest.raises(ValueError, match="neuron_fusion"):
        graph.neuron_fusion = "some"


def _two_readers(conv, relu):
    add = m.NNAdditionNode(relu.result_image, m.CNNNeuronSigmoidNode(conv.result_image).result_image)
    return [add.result_image], [True]


def _exported(conv, relu):
    conv.result_image.export_from_graph = True
    return [relu.result_image], [True]


def _result(conv, relu):
    return [relu.result_image, conv.result_image], [True, True]


def _padding_policy(conv, relu):
    relu.padding_policy = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_SAME))
    return [relu.result_image], [True]


@pytest.mark.parametrize("case", [_two_readers, _exported, _result, _padding_policy])
def test_pairs_whose_pre_neuron_image_lives_stay_unfused(device, case):
    gen = rng("fusion-not")
    x = randn(gen, N, H, W, CIN)
    conv, _ = producer("conv", gen, m.NNImageNode())
    relu = m.CNNNeuronReLUNode(conv.result_image)
    results, needed = case(conv, relu)
    graph = exact_graph(device, results, needed)
    graph.neuron_fusion = "all"
    assert graph.fused_node_pairs == []
    fused, unfused = fused_and_unfused(device, graph, images(device, x))
    np.testing.assert_array_equal(fused, unfused)


def test_producers_that_cannot_fuse_stay_unfused(device):
    """A convolution whose descriptor already has a neuron, a PReLU whose slopes are not one per
    channel, and a transposed convolution (its kernel fuses no neuron)."""
    gen = rng("fusion-cannot")
    w, b = randn(gen, C, 3, 3, CIN) * 0.4, randn(gen, C) * 0.1

    class NeuronSource(ConvSource):
        def descriptor(self):
            d = super().descriptor()
            d.fused_neuron_descriptor = m.NNNeuronDescriptor(T.TANH)
            return d

    source = m.NNImageNode()
    with_neuron = m.CNNConvolutionNode(source, NeuronSource(w, b))
    one_slope = m.CNNNeuronPReLUNode(m.CNNConvolutionNode(source, ConvSource(w, b)).result_image, [0.25])
    add = m.NNAdditionNode(m.CNNNeuronReLUNode(with_neuron.result_image).result_image, one_slope.result_image)
    transpose = m.CNNConvolutionTransposeNode(add.result_image, None, ConvSource(randn(gen, CIN, 3, 3, C), randn(gen, CIN)))
    graph = exact_graph(device, m.CNNNeuronReLUNode(transpose.result_image).result_image)
    graph.neuron_fusion = "all"
    assert graph.fused_node_pairs == []


def test_training_graph_does_not_fuse_and_its_inference_graph_does(device):
    """In a training graph every neuron gradient reads the pre-neuron image: nothing fuses there."""
    gen = rng("fusion-training-plain")
    conv, _ = producer("conv", gen, m.NNImageNode())
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    relu = m.CNNNeuronReLUNode(conv.result_image)
    loss = m.CNNLossNode(relu.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM))
    training = exact_graph(device, loss.training_graph()[0].result_image)
    training.neuron_fusion = "all"
    assert training.fused_node_pairs == []
    inference = exact_graph(device, relu.result_image)
    inference.neuron_fusion = "all"
    assert len(inference.fused_node_pairs) == 1


# ---- an inference graph and a training graph sharing nodes and data sources -----------------------------


class GPUStateSource(GPUSource):
    """GPU style; keeps the state its update wrote (the weights the kernels reload) for the oracle."""

    state = None

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.state = super().update_with_command_buffer(command_buffer, gradient_state, source_state)
        return self.state

    def current(self):
        if self.state is None:
            return self.w, self.b
        return (np.array(self.state.weights).reshape(self.w.shape).copy(),
                np.array(self.state.biases).reshape(self.b.shape).copy())


class CPUStateSource(ConvSource):
    def current(self):
        return self.w.copy(), self.b.copy()


def _bn_parameters(bn_ds):
    return [np.array(f(), dtype=np.float64).copy() for f in (bn_ds.mean, bn_ds.variance, bn_ds.gamma, bn_ds.beta)]


def _torch_logits(x, conv_ds, bn_parameters, fc_ds):
    (w1, b1), (w2, b2) = conv_ds.current(), fc_ds.current()
    mean, variance, gamma, beta = (torch.tensor(a).view(1, -1, 1, 1) for a in bn_parameters)
    y = F.relu(F.conv2d(nchw(x), torch_weight(w1).detach(), torch.tensor(b1, dtype=torch.float64), padding=1))
    y = (y - mean) / torch.sqrt(variance + 1e-5) * gamma + beta
    y = F.conv2d(torch.tanh(y), torch_weight(w2).detach(), torch.tensor(b2, dtype=torch.float64))
    return nhwc(y)


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_fused_inference_graph_follows_every_training_update(device, style):
    gen = rng(f"fusion-training-{style}")
    x = randn(gen, N, H, W, CIN)
    w1, b1 = randn(gen, C, 3, 3, CIN) * 0.4, randn(gen, C) * 0.1
    w2, b2 = randn(gen, 3, H, W, C) * 0.2, randn(gen, 3) * 0.1
    lr = 0.1
    if style == "gpu":
        conv_ds, fc_ds = GPUStateSource(device, w1, b1, lr), GPUStateSource(device, w2, b2, lr)
        training_style = m.NNTrainingStyle.UPDATE_DEVICE_GPU
    else:
        conv_ds, fc_ds = CPUStateSource(w1, b1, lr), CPUStateSource(w2, b2, lr)
        training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    bn_ds = m.CNNBatchNormalizationWeightsDataSource(1.0 + 0.1 * randn(gen, C), 0.1 * randn(gen, C),
                                                     epsilon=1e-5)
    bn_ds.learning_rate = lr

    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, conv_ds)
    relu = m.CNNNeuronReLUNode(conv.result_image)
    bn = m.CNNBatchNormalizationNode(relu.result_image, bn_ds)
    tanh = m.CNNNeuronTanHNode(bn.result_image)
    fc = m.CNNFullyConnectedNode(tanh.result_image, fc_ds)
    for node in (conv, bn, fc):
        node.training_style = training_style
    loss = m.CNNLossNode(fc.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM))
    training = exact_graph(device, loss.training_graph()[0].result_image, False)
    inference = exact_graph(device, fc.result_image)
    training.neuron_fusion = inference.neuron_fusion = "all"
    assert training.fused_node_pairs == []
    assert [(a, b) for a, b in inference.fused_node_pairs] == [(conv, relu), (bn, tanh)]
    labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(N, 1, 1, 3)
    queue = m.CommandQueue(device)
    xs = images(device, x)

    def check():
        fused, unfused = fused_and_unfused(device, inference, xs)
        close(fused, unfused, rel=1e-5)
        close(fused, _torch_logits(x, conv_ds, _bn_parameters(bn_ds), fc_ds))
        return fused

    before = check()
    for step in range(3):
        bn_before = _bn_parameters(bn_ds)
        cb = queue.command_buffer()
        lab = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels[i])) for i in range(N)]
        training.encode_batch(cb, [xs], [lab])
        same_buffer = None
        if style == "gpu" and step == 1:
            # Encoded after the GPU-style update on the same command buffer: the fused kernels
            # copy the reloaded weights on it (that reload has not run when they are encoded).
            inference.neuron_fusion = "all"
            same_buffer = inference.encode_batch(cb, [xs])
            assert inference.last_encode_statistics["fused_pairs"] == 2
        cb.commit()
        cb.wait_until_completed()
        if same_buffer is not None:
            # The batch normalization trains from the completion handler, after this buffer ran.
            close(to_numpy(same_buffer), _torch_logits(x, conv_ds, bn_before, fc_ds))
        after = check()
        assert not np.allclose(after, before)  # the parameters changed
        before = after
    assert conv_ds.updates == fc_ds.updates == 3

    # New data source values, then reload_from_data_sources: the fused kernels follow.
    fc_ds.w, fc_ds.b = fc_ds.current()
    conv_ds.w, conv_ds.b = (conv_ds.w * 0.5).astype(np.float32), (conv_ds.b + 0.25).astype(np.float32)
    conv_ds.state = fc_ds.state = None
    inference.reload_from_data_sources()
    check()


# ---- GPU-style batch-normalization updates under fusion ----------------------------------------------------


def _torch_sgd_training(x, labels, params, lr, steps):
    """float64 PyTorch: conv -> BN (batch statistics) -> ReLU -> FC -> softmax cross-entropy (sum), SGD on
    every parameter; the parameters [w1, b1, gamma, beta, w2, b2] after each step (OHWI weights)."""
    p = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in params]
    T = torch.tensor(labels.reshape(labels.shape[0], -1).argmax(-1))
    history = []
    for _ in range(steps):
        w1, b1, gamma, beta, w2, b2 = p
        y = F.conv2d(nchw(x), w1.permute(0, 3, 1, 2), b1, padding=1)
        y = F.relu(F.batch_norm(y, None, None, gamma, beta, training=True, eps=1e-5))
        y = F.conv2d(y, w2.permute(0, 3, 1, 2), b2)
        F.cross_entropy(y.reshape(y.shape[0], -1), T, reduction="sum").backward()
        with torch.no_grad():
            for q in p:
                q -= lr * q.grad
                q.grad = None
        history.append([q.detach().numpy().copy() for q in p])
    return history


def _torch_bn_relu_logits(x, params):
    """The inference graph's formula: BN with the data source's mean 0 / variance 1 (GPUBatchNormSource)."""
    w1, b1, gamma, beta, w2, b2 = (torch.tensor(np.asarray(a, np.float64)) for a in params)
    y = F.conv2d(nchw(x), w1.permute(0, 3, 1, 2), b1, padding=1)
    y = F.relu(y / np.sqrt(1 + 1e-5) * gamma.view(1, -1, 1, 1) + beta.view(1, -1, 1, 1))
    return nhwc(F.conv2d(y, w2.permute(0, 3, 1, 2), b2))


@pytest.mark.parametrize("mode", ["all", "auto"])
def test_fused_batch_normalization_follows_gpu_style_updates(device, mode):
    """conv -> BN -> ReLU -> FC, every trainable node GPU style, BN through
    update_gamma_and_beta_with_command_buffer (SGD encoded on the step's command buffer). The inference
    graph sharing the nodes fuses BN + ReLU; after every training step, and encoded on the training
    step's own command buffer after the update, it computes with the new gamma and beta (the fused
    kernel copies the reloaded state there), equal to the unfused graph and to PyTorch SGD in float64."""
    gen = rng(f"fusion-gpu-bn-{mode}")
    x = randn(gen, N, H, W, CIN)
    w1, b1 = randn(gen, C, 3, 3, CIN) * 0.4, randn(gen, C) * 0.1
    w2, b2 = randn(gen, 3, H, W, C) * 0.2, randn(gen, 3) * 0.1
    gamma, beta = 1.0 + 0.1 * randn(gen, C), 0.1 * randn(gen, C)
    labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(N, 1, 1, 3)
    lr, steps = 0.1, 3
    conv_ds, fc_ds = GPUStateSource(device, w1, b1, lr), GPUStateSource(device, w2, b2, lr)
    bn_ds = GPUBatchNormSource(device, gamma, beta, lr)

    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, conv_ds)
    bn = m.CNNBatchNormalizationNode(conv.result_image, bn_ds)
    relu = m.CNNNeuronReLUNode(bn.result_image)
    fc = m.CNNFullyConnectedNode(relu.result_image, fc_ds)
    for node in (conv, bn, fc):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_GPU
    loss = m.CNNLossNode(fc.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM))
    training = exact_graph(device, loss.training_graph()[0].result_image, False)
    inference = exact_graph(device, fc.result_image)
    training.neuron_fusion = inference.neuron_fusion = mode
    assert training.fused_node_pairs == []
    inference.neuron_fusion = "all"
    assert [(a, b) for a, b in inference.fused_node_pairs] == [(bn, relu)]
    inference.neuron_fusion = mode
    fused_pairs = len(inference.fused_node_pairs)  # "auto": the device's choice (BN + ReLU on the CPU)
    if device.name == "cpu":
        assert fused_pairs == 1

    def current():
        return [*conv_ds.current(), bn_ds.g, bn_ds.b, *fc_ds.current()]

    expected = _torch_sgd_training(x, labels, [w1, b1, gamma, beta, w2, b2], lr, steps)
    queue = m.CommandQueue(device)
    xs = images(device, x)
    before = encode_mode(device, inference, xs, mode)
    for step in range(steps):
        cb = queue.command_buffer()
        lab = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels[i])) for i in range(N)]
        training.encode_batch(cb, [xs], [lab])
        inference.neuron_fusion = mode  # encode_mode below leaves it at "none"
        same_buffer = inference.encode_batch(cb, [xs])  # after the step's GPU-style updates
        assert inference.last_encode_statistics["fused_pairs"] == fused_pairs
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        assert bn_ds.updates == conv_ds.updates == fc_ds.updates == step + 1
        for ours, theirs in zip(current(), expected[step]):  # w1, b1, gamma, beta, w2, b2
            close(np.asarray(ours).reshape(theirs.shape), theirs, rel=2e-4)
        reference = _torch_bn_relu_logits(x, expected[step])
        close(to_numpy(same_buffer), reference, rel=2e-4)
        fused = encode_mode(device, inference, xs, mode)
        unfused = encode_mode(device, inference, xs, "none")
        close(fused, unfused, rel=1e-5)
        close(fused, to_numpy(same_buffer), rel=1e-6)
        assert np.abs(fused - before).max() > 1e-2  # the step changed the logits (so stale values would fail)
        before = fused
