"""Concatenation along feature channels (issue 13 item 4, issue 15): CNNMultiaryKernel,
NNMultiaryGradientState, the CNNConcatenation / CNNConcatenationGradient kernels and the graph's
NNConcatenationNode / NNConcatenationGradientNode, on every device.

Oracle: PyTorch autograd of torch.cat along channels, with the zero channels that round every range
but the last up to a multiple of 4 (spec §2.11) concatenated explicitly. The copies are exact; the
graph tests compare float32 against float64 PyTorch at 1e-4 of the largest magnitude.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import FLOAT16, FLOAT16_TOLERANCE, persistent, randn, rng
from test_graph import ConvSource, Handle, close, exact_graph, nchw, nhwc


def run(device, fn):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return out


def round4(c):
    return (c + 3) // 4 * 4


def torch_concat(xs):
    """torch.cat along channels (NHWC) with the gap channels of every range but the last."""
    parts = []
    for i, x in enumerate(xs):
        parts.append(x)
        if i + 1 < len(xs) and x.shape[-1] % 4:
            parts.append(torch.zeros(*x.shape[:-1], round4(x.shape[-1]) - x.shape[-1], dtype=x.dtype))
    return torch.cat(parts, dim=-1)


CHANNELS = [(3, 5), (4, 4, 1), (5, 23, 3), (2, 3, 5, 1, 7), (8,)]


@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("batch", [1, 3])
def test_forward_and_gradient_match_autograd(device, channels, batch):
    gen = rng(f"concat-{channels}-{batch}")
    h, w = 5, 7
    xs = [randn(gen, batch, h, w, c) for c in channels]
    total = m.CNNConcatenation.range_starts(list(channels))[-1] + channels[-1]
    g = randn(gen, batch, h, w, total)
    kernel = persistent(m.CNNConcatenation(device, len(channels)))
    assert kernel.source_count == len(channels)
    sources = [[m.Image.from_numpy(x[n:n + 1], device) for n in range(batch)] for x in xs]
    grads = [m.Image.from_numpy(g[n:n + 1], device) for n in range(batch)]

    def go(cb):
        ys, states = kernel.encode_batch(cb, sources, destination_state_is_temporary=False)
        assert all(isinstance(s, m.NNMultiaryGradientState) and s.source_count == len(channels) for s in states)
        dxs = [persistent(m.CNNConcatenationGradient(device, i)).encode_batch(cb, grads, sources[i], states)
               for i in range(len(channels))]
        return ys, dxs

    ys, dxs = run(device, go)
    X = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    Y = torch_concat(X)
    (Y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    y = m.batch_to_numpy(ys)
    assert y.shape == (batch, h, w, total)
    np.testing.assert_array_equal(y, Y.detach().numpy().astype(np.float32))
    for i, dx in enumerate(dxs):
        np.testing.assert_array_equal(m.batch_to_numpy(dx), X[i].grad.numpy().astype(np.float32))


def test_offsets_clip_rect_and_destination_channel_offset(device):
    """Per-index offsets, a clip rect and a destination channel offset; the rest keeps its values."""
    gen = rng("concat-geometry")
    a, b = randn(gen, 1, 6, 8, 3), randn(gen, 1, 6, 8, 6)
    kernel = m.CNNConcatenation(device, 2)
    kernel.set_offset((1, 2, 0), 0)
    kernel.set_offset((-1, 0, 0), 1)
    kernel.set_edge_mode(m.ImageEdgeMode.CLAMP, 1)
    kernel.clip_rect = m.Region((2, 1, 0), (4, 3, 1))
    kernel.destination_feature_channel_offset = 4
    init = randn(gen, 1, 5, 7, 16)
    dst = m.Image.from_numpy(init, device)
    ia, ib = m.Image.from_numpy(a, device), m.Image.from_numpy(b, device)
    grad = persistent(m.CNNConcatenationGradient(device, 0))

    def go(cb):
        state = kernel.result_state([ia, ib])
        kernel.encode(cb, [ia, ib], state, dst)
        g = m.Image.from_numpy(init, device)
        return grad.encode(cb, g, ia, state), persistent(m.CNNConcatenationGradient(device, 1)).encode(cb, g, ib, state)

    dxa, dxb = run(device, go)
    expected = init.copy()
    for yy in range(3):
        for xx in range(4):
            expected[0, 1 + yy, 2 + xx, 4:7] = a[0, 2 + yy, 1 + xx]
            expected[0, 1 + yy, 2 + xx, 7] = 0.0
            bx = min(max(-1 + xx, 0), 7)
            expected[0, 1 + yy, 2 + xx, 8:14] = b[0, yy, bx]
    np.testing.assert_array_equal(dst.to_numpy(), expected)
    # The gradient for source 0: G's channels [4, 7) at the clip, written where the forward read a.
    want = np.zeros_like(a)
    want[0, 2:5, 1:5] = init[0, 1:4, 2:6, 4:7]
    np.testing.assert_array_equal(dxa.to_numpy(), want)
    # Source 1 was read with CLAMP from column -1: its column 0 was read twice, and its gradient
    # is the sum of both reads' gradients (autograd of the clamped gather).
    B = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    columns = torch.tensor([min(max(-1 + xx, 0), 7) for xx in range(4)])
    (B[0, 0:3][:, columns] * torch.tensor(init[0, 1:4, 2:6, 8:14], dtype=torch.float64)).sum().backward()
    # FLOAT16 images: the sum of two half values is rounded to half once more.
    tol = FLOAT16_TOLERANCE if FLOAT16 else 1e-6
    np.testing.assert_allclose(dxb.to_numpy(), B.grad.numpy(), rtol=tol, atol=tol * np.abs(B.grad.numpy()).max())


def test_multi_image_sources(device):
    """Images holding several images (number_of_images 2) with explicit destinations: every image is
    concatenated, and the gradient slices every image of the incoming gradient."""
    gen = rng("concat-multi-image")
    a, b = randn(gen, 2, 3, 4, 5), randn(gen, 2, 3, 4, 2)
    g = randn(gen, 2, 3, 4, 10)
    ia, ib = m.Image.from_numpy(a, device), m.Image.from_numpy(b, device)
    dst = m.Image.from_numpy(np.full((2, 3, 4, 10), 7.0, np.float32), device)
    dxb = m.Image.from_numpy(np.full((2, 3, 4, 2), 7.0, np.float32), device)
    kernel = m.CNNConcatenation(device, 2)

    def go(cb):
        state = kernel.result_state([ia, ib])
        kernel.encode(cb, [ia, ib], state, dst)
        m.CNNConcatenationGradient(device, 1).encode(cb, m.Image.from_numpy(g, device), ib, state, dxb)

    run(device, go)
    X = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (a, b)]
    Y = torch_concat(X)
    (Y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(dst.to_numpy(), Y.detach().numpy().astype(np.float32))
    np.testing.assert_array_equal(dxb.to_numpy(), X[1].grad.numpy().astype(np.float32))


def test_per_index_properties_and_errors(device):
    kernel = m.CNNConcatenation(device, 3)
    kernel.set_kernel_width(3, 2)
    assert kernel.kernel_width_at_index(2) == 3 and kernel.kernel_width_at_index(0) == 1
    kernel.set_stride_in_pixels_y(2, 1)
    assert kernel.stride_in_pixels_y_at_index(1) == 2
    kernel.set_source_feature_channel_offset(4, 0)
    assert kernel.source_feature_channel_offset_at_index(0) == 4
    assert kernel.edge_mode_at_index(1) == m.ImageEdgeMode.ZERO
    with pytest.raises(ValueError, match="index: 3"):
        kernel.offset_at_index(3)
    with pytest.raises(ValueError, match="index"):
        kernel.set_edge_mode(m.ImageEdgeMode.CLAMP, 7)
    with pytest.raises(ValueError, match="source_feature_channel_offset"):
        kernel.set_source_feature_channel_offset(3, 0)
    with pytest.raises(ValueError, match="kernel_width"):
        kernel.set_kernel_width(0, 0)
    with pytest.raises(ValueError, match="source_count"):
        m.CNNConcatenation(device, 0)


def test_bad_inputs(device):
    gen = rng("concat-bad")
    a = m.Image.from_numpy(randn(gen, 1, 4, 4, 3), device)
    b = m.Image.from_numpy(randn(gen, 1, 4, 5, 3), device)
    kernel = m.CNNConcatenation(device, 2)
    q = m.CommandQueue(device)
    with pytest.raises(ValueError, match="source_count 2 but 1 source"):
        kernel.encode(q.command_buffer(), [a])
    with pytest.raises(ValueError, match="same width and height"):
        kernel.encode(q.command_buffer(), [a, b])
    with pytest.raises(ValueError, match="source 1's batch has 2"):
        kernel.encode_batch(q.command_buffer(), [[a], [a, a]])
    with pytest.raises(TypeError, match="source_images"):
        kernel.encode(q.command_buffer(), [a, None])
    small = m.Image.from_numpy(np.zeros((1, 4, 4, 4), np.float32), device)
    with pytest.raises(ValueError, match="destination_image: has 4 feature channels"):
        kernel.encode(q.command_buffer(), [a, a], None, small)
    cb = q.command_buffer()
    _, state = kernel.encode(cb, [a, a], destination_state_is_temporary=False)
    with pytest.raises(ValueError, match="source_index: 2"):
        m.CNNConcatenationGradient(device, 2).encode(cb, small, a, state)
    with pytest.raises(TypeError, match="NNMultiaryGradientState"):
        m.CNNConcatenationGradient(device, 0).encode(cb, small, a, m.State(device))


def test_serialization_round_trip(device):
    kernel = m.CNNConcatenation(device, 3)
    kernel.set_offset((1, 0, 0), 2)
    kernel.set_edge_mode(m.ImageEdgeMode.CLAMP, 1)
    kernel.destination_feature_channel_offset = 8
    back = m.CNNConcatenation.from_bytes(kernel.to_bytes(), device)
    assert back.source_count == 3
    assert back.offset_at_index(2).x == 1 and back.edge_mode_at_index(1) == m.ImageEdgeMode.CLAMP
    assert back.destination_feature_channel_offset == 8
    grad = m.CNNConcatenationGradient.from_bytes(m.CNNConcatenationGradient(device, 4).to_bytes(), device)
    assert grad.source_index == 4


# ---- graph --------------------------------------------------------------------------------------------


def test_graph_node_gradient_builders():
    a, b = m.NNImageNode(Handle("a")), m.NNImageNode(Handle("b"))
    cat = m.NNConcatenationNode.node_with_sources([a, b])
    g = m.NNImageNode(Handle("g"))
    nodes = cat.gradient_filters_with_sources([g])
    assert [type(n).__name__ for n in nodes] == ["NNConcatenationGradientNode"] * 2
    assert [n.source_index for n in nodes] == [0, 1]
    with pytest.raises(TypeError, match="gradient_filters_with_sources"):
        cat.gradient_filter_with_source(g)
    assert isinstance(cat.result_state, m.NNMultiaryGradientStateNode)
    assert m.NNConcatenationGradientNode(g, b, cat.result_state).source_index == 1
    with pytest.raises(ValueError, match="not a source"):
        m.NNConcatenationGradientNode(g, g, cat.result_state)
    with pytest.raises(ValueError, match="at least one source"):
        m.NNConcatenationNode([])


def _torch_two_branches(x, params, target, lr, steps, shared):
    """conv3x3 -> 3 channels and conv1x1 -> 5 channels of x, concatenated ([0,4) and [4,9)), tanh, MSE."""
    X = nchw(x).requires_grad_(True)
    P = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
    losses, dx = [], None
    for _ in range(steps):
        w1, b1, w2, b2 = P
        c1 = F.conv2d(X, w1.permute(0, 3, 1, 2), b1, padding=1)
        c2 = F.conv2d(X, w2.permute(0, 3, 1, 2), b2)
        y = torch.tanh(torch_concat([c1.permute(0, 2, 3, 1), c2.permute(0, 2, 3, 1)]))
        loss = ((y - torch.tensor(target, dtype=torch.float64)) ** 2).sum()
        losses.append(float(loss.detach()))
        for p in P + [X]:
            p.grad = None
        loss.backward()
        if dx is None:
            dx = nhwc(X.grad)
        with torch.no_grad():
            for p in P:
                p -= lr * p.grad
    return losses, dx, [p.detach().numpy() for p in P]


@pytest.mark.parametrize("shared", [False, True])
def test_training_graph_with_concatenation_matches_torch_sgd(device, shared):
    """Two convolution branches concatenated (3 + 5 channels), trained for a few SGD steps. shared: both
    branches read the same image (an inception-like block: the image's two gradients are summed)."""
    gen = rng(f"concat-graph-{shared}")
    n, h, w, cin = 2, 5, 6, 3
    x = randn(gen, n, h, w, cin)
    x2 = x if shared else randn(gen, n, h, w, cin)
    params = [randn(gen, 3, 3, 3, cin) * 0.3, randn(gen, 3) * 0.1, randn(gen, 5, 1, 1, cin) * 0.3, randn(gen, 5) * 0.1]
    target = randn(gen, n, h, w, 9) * 0.5
    lr, steps = 0.02, 3
    ds1, ds2 = ConvSource(params[0], params[1], lr), ConvSource(params[2], params[3], lr)
    src1 = m.NNImageNode(Handle("x"))
    src2 = src1 if shared else m.NNImageNode(Handle("x2"))
    conv1, conv2 = m.CNNConvolutionNode(src1, ds1), m.CNNConvolutionNode(src2, ds2)
    for node in (conv1, conv2):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    cat = m.NNConcatenationNode([conv1.result_image, conv2.result_image])
    tanh = m.CNNNeuronTanHNode(cat.result_image)
    loss = m.CNNLossNode(tanh.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM))
    seen = []
    terminal = loss.training_graph(node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    assert seen.count("NNConcatenationGradientNode") == 2
    assert seen.count("NNBinaryArithmeticNode") == (1 if shared else 0)  # the summed gradient of x
    # FLOAT32 intermediates (the graph's default is FLOAT16): the comparison is at float32 tolerances.
    if shared:
        assert len(terminal) == 1
        graph = exact_graph(device, terminal[0].result_image)
    else:
        graph = exact_graph(device, [t.result_image for t in terminal], [True] * len(terminal))
    queue = m.CommandQueue(device)
    xs = [m.Image.from_numpy(x[i:i + 1], device) for i in range(n)]
    xs2 = [m.Image.from_numpy(x2[i:i + 1], device) for i in range(n)]
    losses, first_dx = [], None
    for _ in range(steps):
        labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(target[i])) for i in range(n)]
        cb = queue.command_buffer()
        order = [h.label() for h in graph.source_image_handles]
        batches = {"x": xs, "x2": xs2}
        out = graph.encode_batch(cb, [batches[name] for name in order], [labels])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        losses.append(sum(float(la.loss_image.to_numpy().ravel()[0]) for la in labels))
        if first_dx is None and shared:
            first_dx = m.batch_to_numpy(out)
    assert ds1.updates == steps and ds2.updates == steps

    if shared:
        ref_losses, ref_dx, ref_params = _torch_two_branches(x, params, target, lr, steps, shared)
        close(first_dx, ref_dx)
    else:
        X1, X2 = nchw(x), nchw(x2)
        P = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
        ref_losses = []
        for _ in range(steps):
            c1 = F.conv2d(X1, P[0].permute(0, 3, 1, 2), P[1], padding=1)
            c2 = F.conv2d(X2, P[2].permute(0, 3, 1, 2), P[3])
            y = torch.tanh(torch_concat([c1.permute(0, 2, 3, 1), c2.permute(0, 2, 3, 1)]))
            l_ = ((y - torch.tensor(target, dtype=torch.float64)) ** 2).sum()
            ref_losses.append(float(l_.detach()))
            for p in P:
                p.grad = None
            l_.backward()
            with torch.no_grad():
                for p in P:
                    p -= lr * p.grad
        ref_params = [p.detach().numpy() for p in P]
    np.testing.assert_allclose(losses, ref_losses, rtol=FLOAT16_TOLERANCE if FLOAT16 else 1e-4)
    close(ds1.w, ref_params[0])
    close(ds1.b, ref_params[1])
    close(ds2.w, ref_params[2])
    close(ds2.b, ref_params[3])
    assert losses[-1] < losses[0]
