"""Graph nodes of the existing kernel families (issue 15): per-type pooling, upsampling, arithmetic and
log-softmax gradient nodes, PReLU, the local normalization nodes and the reduction nodes.

Each test builds an inference graph, calls training_graph() on an MSE loss node (reduction SUM) and
compares dL/dX (and the loss) with PyTorch autograd of the same network, or, for the spatial and
local contrast normalization (no PyTorch equivalent), with float64 central finite differences of
the spec's forward formula (test_local_normalization.window_forward). The gradient builders must
create the MPS classes (checked through the node handler).

Tolerance: float32 kernels against float64 references, relative 1e-4 of the largest magnitude."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng
from test_graph import close, exact_graph, images, labels_for, mse_loss_node, to_numpy
from test_local_normalization import finite_difference_gradient, window_forward

N = 2


def train(device, result_image, xs, target):
    """MSE(result, target) through training_graph(): (per-image losses, {input label: dL/dX}, gradient
    node class names). xs maps the labels of the graph's input handles to their NHWC arrays."""
    seen = []

    def handler(gradient, forward, source, gradient_source):
        seen.append(type(gradient).__name__)
        gradient.result_image.handle = source.handle

    terminal = mse_loss_node(result_image).training_graph(node_handler=handler)
    for t in terminal:  # results 1..n-1 come back on their node's allocator; read after the wait
        t.result_image.image_allocator = m.ImageAllocator.persistent()

    def run_graph(graph):
        labels = labels_for(device, target)
        sources = [images(device, xs[h.label()]) for h in graph.source_image_handles]
        queue = m.CommandQueue(device)
        cb = queue.command_buffer()
        first, others, _ = graph.encode_batch(cb, sources, [labels], return_intermediates=True)
        cb.commit()
        cb.wait_until_completed()
        grads = {t.result_image.handle.label(): to_numpy(out) for t, out in zip(terminal, [first] + list(others))}
        return np.array([float(la.loss_image.to_numpy().ravel()[0]) for la in labels]), grads

    results = [t.result_image for t in terminal]
    losses, grads = run_graph(exact_graph(device, results, [True] * len(terminal)))
    # The default FLOAT16 intermediates give the same up to half roundings: each is at most 2^-11 of
    # its value, and the MSE gradient 2(y - t) and the node's derivative amplify a handful of them;
    # HALF_GRAPH_TOLERANCE (16 half ulps, conftest's FLOAT16_TOLERANCE) of the largest value bounds
    # that for these small networks (the largest seen is 4.6e-4).
    half_losses, half_grads = run_graph(m.NNGraph(device, results, [True] * len(terminal)))
    half_close(half_losses, losses)
    for label, grad in grads.items():
        half_close(half_grads[label], grad)
    return losses, grads, seen


HALF_GRAPH_TOLERANCE = 8e-3


def half_close(actual, expected):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, atol=HALF_GRAPH_TOLERANCE * scale, rtol=0)


class Handle:
    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


X = Handle("x")  # the handle of the single-input networks' input

def torch_reference(fn, xs, target):
    """Per-image MSE losses and dL/dX of fn(*X) (NHWC float64 tensors in and out)."""
    X = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    per_image = ((fn(*X) - torch.tensor(target, dtype=torch.float64)) ** 2).flatten(1).sum(1)
    per_image.sum().backward()
    return per_image.detach().numpy(), [x.grad.numpy() for x in X]


def nchw_fn(fn):
    """fn on NCHW tensors as a function of NHWC tensors."""
    return lambda *X: fn(*[x.permute(0, 3, 1, 2) for x in X]).permute(0, 2, 3, 1)


def check_unary(device, node, fn, x, expected_gradient_class):
    out_shape = tuple(nchw_fn(fn)(torch.tensor(x, dtype=torch.float64)).shape)
    target = randn(rng(f"target-{expected_gradient_class}"), *out_shape)
    losses, grads, seen = train(device, node.result_image, {"x": x}, target)
    assert seen == [expected_gradient_class]
    ref_losses, ref_grads = torch_reference(nchw_fn(fn), [x], target)
    close(losses, ref_losses)
    close(grads["x"], ref_grads[0])


# ---- per-type gradient classes -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Max", "Average", "L2Norm"])
def test_pooling_gradient_node_classes_match_autograd(device, kind):
    x = randn(rng(f"graph-pool-{kind}"), N, 6, 8, 3)
    node = getattr(m, f"CNNPooling{kind}Node")(m.NNImageNode(X), filter_size=2)
    fn = {"Max": lambda X: F.max_pool2d(X, 2), "Average": lambda X: F.avg_pool2d(X, 2),
          "L2Norm": lambda X: F.lp_pool2d(X, 2, 2)}[kind]
    check_unary(device, node, fn, x, f"CNNPooling{kind}GradientNode")
    gradient = node.gradient_filter_with_source(m.NNImageNode(X))
    assert type(gradient) is getattr(m, f"CNNPooling{kind}GradientNode")
    assert isinstance(gradient, m.CNNPoolingGradientNode)
    assert (gradient.kernel_width, gradient.stride_in_pixels_y) == (2, 2)


def test_dilated_pooling_gradient_node_class(device):
    x = randn(rng("graph-dilated"), N, 6, 6, 3)
    # Dilation 1: the same numbers as max pooling, through the dilated kernels.
    node = m.CNNDilatedPoolingMaxNode(m.NNImageNode(X), filter_size=2, stride=2, dilation_rate=1)
    check_unary(device, node, lambda X: F.max_pool2d(X, 2), x, "CNNDilatedPoolingMaxGradientNode")
    direct = m.CNNDilatedPoolingMaxGradientNode(m.NNImageNode(X), m.NNImageNode(X), node.result_state, 3, 3, 1, 1, 2, 2)
    assert (direct.dilation_rate_x, direct.dilation_rate_y, direct.kind) == (2, 2, m.PoolingKind.DILATED_MAX)


@pytest.mark.parametrize("bilinear", [False, True])
def test_upsampling_gradient_node_classes_match_autograd(device, bilinear):
    x = randn(rng(f"graph-up-{bilinear}"), N, 3, 4, 3)
    name = "Bilinear" if bilinear else "Nearest"
    node = getattr(m, f"CNNUpsampling{name}Node")(m.NNImageNode(X), 2, 3)
    mode = dict(mode="bilinear", align_corners=False) if bilinear else dict(mode="nearest")
    check_unary(device, node, lambda X: F.interpolate(X, scale_factor=(3, 2), **mode), x,
                f"CNNUpsampling{name}GradientNode")
    direct = getattr(m, f"CNNUpsampling{name}GradientNode")(m.NNImageNode(X), m.NNImageNode(X), node.result_state, 2, 3)
    assert (direct.scale_factor_x, direct.scale_factor_y) == (2, 3)


@pytest.mark.parametrize("op", ["Addition", "Subtraction", "Multiplication"])
def test_arithmetic_gradient_node_classes_match_autograd(device, op):
    gen = rng(f"graph-arith-{op}")
    a, b = randn(gen, N, 4, 5, 3), randn(gen, N, 4, 5, 3)
    target = randn(gen, N, 4, 5, 3)
    node = getattr(m, f"NN{op}Node")(m.NNImageNode(Handle("a")), m.NNImageNode(Handle("b")))
    losses, grads, seen = train(device, node.result_image, {"a": a, "b": b}, target)
    assert seen == [f"NN{op}GradientNode"] * 2
    fn = {"Addition": torch.add, "Subtraction": torch.sub, "Multiplication": torch.mul}[op]
    ref_losses, ref_grads = torch_reference(fn, [a, b], target)
    close(losses, ref_losses)
    close(grads["a"], ref_grads[0])
    close(grads["b"], ref_grads[1])
    left, right = node.gradient_filters_with_source(m.NNImageNode(X))
    assert type(left) is getattr(m, f"NN{op}GradientNode") and not left.is_secondary_source_filter
    assert right.is_secondary_source_filter and isinstance(right, m.NNArithmeticGradientNode)


def test_log_softmax_builds_log_softmax_gradient_node(device):
    x = randn(rng("graph-logsoftmax"), N, 3, 4, 5)
    node = m.CNNLogSoftMaxNode(m.NNImageNode(X))
    assert isinstance(node, m.CNNSoftMaxNode) and type(node) is m.CNNLogSoftMaxNode
    check_unary(device, node, lambda X: F.log_softmax(X, dim=1), x, "CNNLogSoftMaxGradientNode")
    soft = m.CNNSoftMaxNode(m.NNImageNode(X))
    assert type(soft.gradient_filter_with_source(m.NNImageNode(X))) is m.CNNSoftMaxGradientNode


def test_prelu_node_matches_autograd(device):
    x = randn(rng("graph-prelu"), N, 4, 4, 3)
    slopes = np.array([0.1, -0.3, 0.7], np.float32)
    node = m.CNNNeuronPReLUNode(m.NNImageNode(X), slopes)
    assert isinstance(node, m.CNNNeuronNode) and np.allclose(node.a_data, slopes)
    check_unary(device, node, lambda X: F.prelu(X, torch.tensor(slopes, dtype=torch.float64)), x,
                "CNNNeuronGradientNode")
    with pytest.raises(ValueError, match="a_data"):
        m.CNNNeuronPReLUNode(m.NNImageNode(X), [])


# ---- local normalization -------------------------------------------------------------------------


def test_cross_channel_normalization_node_matches_autograd(device):
    x = randn(rng("graph-lrn"), N, 3, 4, 7)
    node = m.CNNCrossChannelNormalizationNode(m.NNImageNode(X), kernel_size=3)
    assert (node.alpha, node.beta, node.delta, node.kernel_size_in_feature_channels) == (1.0, 5.0, 1.0, 3)
    node.alpha, node.beta, node.delta = 0.8, 0.75, 2.0
    # MPS's alpha/N is PyTorch's alpha/size (test_local_normalization's mapping).
    check_unary(device, node, lambda X: F.local_response_norm(X, 3, alpha=0.8, beta=0.75, k=2.0), x,
                "CNNCrossChannelNormalizationGradientNode")
    gradient = node.gradient_filter_with_source(m.NNImageNode(X))
    assert (gradient.kernel_size, gradient.alpha, gradient.beta, gradient.delta) == (3, 0.800000011920929, 0.75, 2.0)


@pytest.mark.parametrize("kind", ["spatial", "contrast"])
def test_window_normalization_nodes_match_finite_differences(device, kind):
    gen = rng(f"graph-norm-{kind}")
    x = randn(gen, N, 5, 4, 3)
    target = randn(gen, N, 5, 4, 3)
    if kind == "spatial":
        node = m.CNNSpatialNormalizationNode(m.NNImageNode(X), kernel_size=3)
        assert (node.alpha, node.beta, node.delta) == (1.0, 5.0, 1.0)
        node.beta = 0.75
        params = dict(alpha=1.0, beta=0.75, delta=1.0)
        expected = "CNNSpatialNormalizationGradientNode"
    else:
        node = m.CNNLocalContrastNormalizationNode(m.NNImageNode(X), kernel_size=3)
        # The node's defaults (spec §3.1), not the kernel's alpha 0.
        assert (node.alpha, node.beta, node.delta, node.p0, node.pm, node.ps) == (1.0, 0.5, 2.0 ** -10, 1.0, 0.0, 1.0)
        node.p0, node.pm, node.ps = 0.9, 0.1, 1.5
        params = dict(alpha=1.0, beta=0.5, delta=2.0 ** -10, p0=0.8999999761581421, pm=0.10000000149011612, ps=1.5)
        expected = "CNNLocalContrastNormalizationGradientNode"
    losses, grads, seen = train(device, node.result_image, {"x": x}, target)
    assert seen == [expected]

    xd = x.astype(np.float64)
    f = lambda v: window_forward("spatial" if kind == "spatial" else "contrast", v, 3, params, (0, 0), (5, 4))
    y = f(xd)
    ref_losses = ((y - target) ** 2).reshape(N, -1).sum(1)
    ref_dx = finite_difference_gradient(f, xd.copy(), 2.0 * (y - target))
    close(losses, ref_losses)
    close(grads["x"], ref_dx)


def test_local_normalization_gradient_nodes_direct_and_errors(device):
    x = m.NNImageNode(X)
    lcn = m.CNNLocalContrastNormalizationNode(x, kernel_size=5)
    g = m.CNNLocalContrastNormalizationGradientNode(m.NNImageNode(X), x, lcn.result_state, 5, 5)
    assert (g.alpha, g.beta, g.kernel_width, g.kernel_height) == (1.0, 0.5, 5, 5)
    spatial = m.CNNSpatialNormalizationGradientNode(m.NNImageNode(X), x, lcn.result_state, 3)
    assert (spatial.alpha, spatial.beta, spatial.kernel_width) == (1.0, 5.0, 3)
    with pytest.raises(ValueError, match="kernel_size"):
        m.CNNSpatialNormalizationNode(x, kernel_size=0)
    with pytest.raises(ValueError, match="kernel_height"):
        m.CNNLocalContrastNormalizationGradientNode(m.NNImageNode(X), x, lcn.result_state, 3, 5)
    with pytest.raises(TypeError, match="gradient_state"):
        m.CNNCrossChannelNormalizationGradientNode(m.NNImageNode(X), x, m.NNLabelsNode(), 3)
    with pytest.raises(TypeError, match="alpha"):
        lcn.alpha = "big"
    # Bad values are refused when the graph encodes the node.
    node = m.CNNSpatialNormalizationNode(m.NNImageNode(X), kernel_size=3)
    node.delta = 0.0
    graph = m.NNGraph(device, node.result_image)
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="delta"):
        graph.encode_batch(cb, [images(device, randn(rng("graph-norm-bad"), 1, 4, 4, 3))])


# ---- reductions ---------------------------------------------------------------------------------


def test_spatial_mean_node_matches_autograd(device):
    x = randn(rng("graph-spatial-mean"), N, 5, 3, 6)
    node = m.NNReductionSpatialMeanNode(m.NNImageNode(X))
    assert isinstance(node, m.NNUnaryReductionNode)
    check_unary(device, node, lambda X: X.mean(dim=(2, 3), keepdim=True), x, "NNReductionSpatialMeanGradientNode")


def test_spatial_mean_node_clip_rect_source(device):
    x = randn(rng("graph-spatial-mean-clip"), N, 5, 6, 2)
    node = m.NNReductionSpatialMeanNode(m.NNImageNode(X))
    node.clip_rect_source = m.Region((1, 2, 0), (3, 2, 1))  # x 1..3, y 2..3
    check_unary(device, node, lambda X: X[:, :, 2:4, 1:4].mean(dim=(2, 3), keepdim=True), x,
                "NNReductionSpatialMeanGradientNode")


@pytest.mark.parametrize("alpha", [1.0, 0.25])
def test_gram_matrix_node_matches_autograd(device, alpha):
    x = randn(rng(f"graph-gram-{alpha}"), N, 3, 4, 5)
    node = m.NNGramMatrixCalculationNode(m.NNImageNode(X), alpha=alpha) if alpha != 1.0 else \
        m.NNGramMatrixCalculationNode(m.NNImageNode(X))
    assert node.alpha == alpha

    def gram(X):  # NHWC -> (N, 1, C, C): pixel f of the result holds row f
        flat = X.reshape(X.shape[0], -1, X.shape[3])
        return (alpha * flat.transpose(1, 2) @ flat).unsqueeze(1)

    target = randn(rng(f"graph-gram-t-{alpha}"), N, 1, 5, 5)
    losses, grads, seen = train(device, node.result_image, {"x": x}, target)
    assert seen == ["NNGramMatrixCalculationGradientNode"]
    ref_losses, ref_grads = torch_reference(gram, [x], target)
    close(losses, ref_losses)
    close(grads["x"], ref_grads[0])
    gradient = node.gradient_filter_with_source(m.NNImageNode(X))
    assert type(gradient) is m.NNGramMatrixCalculationGradientNode and gradient.alpha == alpha
    with pytest.raises(TypeError, match="alpha"):
        m.NNGramMatrixCalculationNode(m.NNImageNode(X), alpha="x")


# ---- split loss ---------------------------------------------------------------------------------


def _split_loss_problem(device, weighted):
    gen = rng(f"graph-split-loss-{weighted}")
    x, t = randn(gen, N, 3, 4, 5), randn(gen, N, 3, 4, 5)
    w = np.abs(randn(gen, N, 3, 4, 5)) if weighted else None
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    predictions = m.CNNNeuronTanHNode(m.NNImageNode(Handle("x"))).result_image
    labels, weights = m.NNImageNode(Handle("t")), m.NNImageNode(Handle("w")) if weighted else None
    loss = m.NNForwardLossNode(predictions, labels, desc, weights=weights)
    arrays = {"x": x, "t": t, "w": w}
    return loss, arrays


def _run(device, graph, arrays, extra=False):
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out = graph.encode_batch(cb, [images(device, arrays[h.label()]) for h in graph.source_image_handles],
                             return_intermediates=extra)
    cb.commit()
    cb.wait_until_completed()
    return out


def _torch_split_loss(arrays):
    X = torch.tensor(arrays["x"], dtype=torch.float64, requires_grad=True)
    T = torch.tensor(arrays["t"], dtype=torch.float64, requires_grad=True)
    sq = (torch.tanh(X) - T) ** 2
    if arrays["w"] is not None:
        sq = sq * torch.tensor(arrays["w"], dtype=torch.float64)
    per_image = sq.flatten(1).sum(1)
    per_image.sum().backward()
    return per_image.detach().numpy(), X.grad.numpy(), T.grad.numpy()


@pytest.mark.parametrize("weighted", [False, True])
def test_forward_loss_node_training_graph_matches_autograd(device, weighted):
    loss, arrays = _split_loss_problem(device, weighted)
    assert (loss.loss_type, loss.reduction_type) == (m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    ref_losses, ref_dx, ref_dt = _torch_split_loss(arrays)
    values = to_numpy(_run(device, exact_graph(device, loss.result_image), arrays))
    close(values.reshape(N), ref_losses)

    seen = []
    seed = m.NNInitialGradientNode(loss.result_image)
    terminal = seed.training_graph(node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    assert seen == ["NNLossGradientNode", "CNNNeuronGradientNode"]
    dx = to_numpy(_run(device, exact_graph(device, terminal[0].result_image), arrays))
    close(dx, ref_dx)

    # The labels' gradient node, built directly (isLabelsGradientFilter) on the same forward state.
    predictions = loss.gradient_filter_with_source(seed.result_image)
    assert type(predictions) is m.NNLossGradientNode and not predictions.is_labels_gradient_filter
    sources = loss.source_images
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    labels_node = m.NNLossGradientNode(seed.result_image, sources[0], sources[1], sources[2] if weighted else None,
                                       loss.result_state, desc, is_labels_gradient_filter=True)
    assert labels_node.is_labels_gradient_filter
    dt = to_numpy(_run(device, exact_graph(device, labels_node.result_image), arrays))
    close(dt, ref_dt)


def test_loss_nodes_errors():
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    x = m.NNImageNode()
    with pytest.raises(ValueError, match="sources"):
        m.NNForwardLossNode.node_with_sources([x], desc)
    with pytest.raises(ValueError, match="labels"):
        m.NNForwardLossNode(x, None, desc)
    with pytest.raises(TypeError, match="gradient_state"):
        m.NNLossGradientNode(x, x, x, None, m.NNLabelsNode(), desc)
    node = m.NNForwardLossNode.node_with_sources([x, m.NNImageNode()], desc)
    assert type(node.gradient_filter_with_source(x)) is m.NNLossGradientNode
