"""CNNFullyConnected / CNNFullyConnectedGradient against PyTorch autograd (float64 oracle).

The oracle is ``torch.nn.functional.linear`` on the flattened source: a fully connected layer
with OHWI weights (O, srcH, srcW, I) computes Y[o] = b[o] + sum W[o][y][x][i] * X[y][x][i], i.e.
``F.linear(x_nhwc.reshape(N, -1), w.reshape(O, -1), b)`` (docs/fully_connected.md, spec §6.4).
Data, weight and bias gradients come from autograd on that expression; a fused neuron is applied
after it. Bound: relative error <= 1e-4 (see test_convolution.py).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import apply_neuron, neuron_descriptor, randn, rng

PM = m.PaddingMethod


def fc_descriptor(h, w, cin, cout, neuron="none"):
    d = m.CNNConvolutionDescriptor(kernel_width=w, kernel_height=h, input_feature_channels=cin,
                                   output_feature_channels=cout)
    nd = neuron_descriptor(neuron)
    if nd is not None:
        d.fused_neuron_descriptor = nd
    return d


def make_fc(device, h, w, cin, cout, gen, bias=True, neuron="none"):
    weights = (randn(gen, cout, h, w, cin) / np.sqrt(h * w * cin)).astype(np.float32)
    biases = randn(gen, cout) * 0.5 if bias else None
    ds = m.CNNConvolutionWeightsDataSource(fc_descriptor(h, w, cin, cout, neuron), weights, biases)
    fc, grad = m.CNNFullyConnected(device, ds), m.CNNFullyConnectedGradient(device, ds)
    fc.destination_image_allocator = m.ImageAllocator.persistent()
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    return ds, fc, grad, weights, biases


def linear_reference(x_nhwc, w_ohwi, b, e=None, neuron="none"):
    n, cout = x_nhwc.shape[0], w_ohwi.shape[0]
    X = torch.tensor(x_nhwc, dtype=torch.float64).reshape(n, -1).requires_grad_(True)
    Wt = torch.tensor(w_ohwi, dtype=torch.float64).reshape(cout, -1).requires_grad_(True)
    Bt = torch.tensor(b if b is not None else np.zeros(cout), dtype=torch.float64).requires_grad_(True)
    Y = apply_neuron(neuron, F.linear(X, Wt, Bt))
    out = {"y": Y.detach().numpy().reshape(n, 1, 1, cout)}
    if e is not None:
        (Y * torch.tensor(e, dtype=torch.float64).reshape(n, cout)).sum().backward()
        out["dx"] = X.grad.numpy().reshape(x_nhwc.shape)
        out["dw"] = Wt.grad.numpy().reshape(w_ohwi.shape)
        out["db"] = Bt.grad.numpy()
    return out


# (id, (H, W, Cin, Cout), images, bias, neuron, padding method, forward form, contiguous batch)
CASES = [
    ("1x1-c4", (1, 1, 4, 8), 1, True, "none", None, "returning", True),
    ("3x3-c3-o5", (3, 3, 3, 5), 1, True, "none", int(PM.SIZE_SAME), "returning", True),
    ("5x4-relu", (5, 4, 8, 16), 2, True, "relu", int(PM.SIZE_VALID_ONLY), "returning", True),
    ("4x6-nobias-full", (4, 6, 4, 7), 3, False, "none", int(PM.SIZE_FULL), "destination", True),
    ("7x7-c64-o33", (7, 7, 64, 33), 2, True, "tanh", None, "returning", False),  # K = 3136: two column chunks
    ("2x9-c1-o1", (2, 9, 1, 1), 4, True, "sigmoid", int(PM.TENSORFLOW_SAME), "destination", False),
    ("6x5-c12-o40-batch5", (6, 5, 12, 40), 5, True, "leaky_relu", None, "returning", True),
    # Batches through the one-product-per-batch path (CPU backend, fully_connected.cpp): channel
    # counts that are not multiples of 4 (padded pixels: the source rows are gathered), several
    # column tiles of the output channels, a batch of one.
    ("3x3-c6-o10-batch17", (3, 3, 6, 10), 17, True, "none", None, "returning", True),
    ("2x2-c5-o7-batch3", (2, 2, 5, 7), 3, True, "relu", None, "destination", True),
    ("1x1-c2048-o9-batch1", (1, 1, 2048, 9), 1, False, "none", None, "returning", True),
    ("4x4-c8-o300-batch17", (4, 4, 8, 300), 17, True, "none", None, "returning", True),
]


def _images(device, arr, contiguous):
    return m.batch_from_numpy(arr, device) if contiguous else [m.Image.from_numpy(a, device) for a in arr]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fully_connected_matches_linear(device, queue, check, case):
    cid, (H, W, cin, cout), n, bias, neuron, method, form, contiguous = case
    gen = rng(cid)
    ds, fc, grad, w, b = make_fc(device, H, W, cin, cout, gen, bias, neuron)
    assert isinstance(fc, m.CNNConvolution) and isinstance(grad, m.CNNConvolutionGradient)
    if method is not None:
        fc.padding = m.NNDefaultPadding(method)
    x = randn(gen, n, H, W, cin)
    e = randn(gen, n, 1, 1, cout)
    xs, es = _images(device, x, contiguous), _images(device, e, contiguous)
    fc.offset = (5, -3, 0)  # ignored: the window always covers the source
    cb = queue.command_buffer()
    if form == "returning":
        ys, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    else:
        desc = fc.destination_image_descriptor([xs[0]])
        assert (desc.width, desc.height, desc.feature_channels) == (1, 1, cout)
        state = fc.result_state(xs[0])
        states = [state] * n
        ys = _images(device, np.zeros((n, 1, 1, cout), np.float32), contiguous)
        fc.encode_batch(cb, xs, states, ys)
    state = states[0]
    assert isinstance(state, m.CNNConvolutionGradientState) and state.convolution is fc
    dxs = grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    ref = linear_reference(x, w, b, e, neuron)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(state.gradient_for_weights, ref["dw"], "weight gradient")
    check(state.gradient_for_biases, ref["db"], "bias gradient")
    assert state.gradient_for_weights.shape == (cout, H, W, cin)


def test_fully_connected_clip_rect_into_wider_destination(device, queue, check):
    """A 1x1 clip rectangle places the result in one pixel of a bigger destination; the rest is kept."""
    gen = rng("fc-clip")
    _, fc, _, w, b = make_fc(device, 3, 4, 4, 8, gen)
    x = randn(gen, 1, 3, 4, 4)
    dst = m.Image.from_numpy(np.full((1, 2, 3, 8), 7.5, np.float32), device)
    fc.clip_rect = ((2, 1, 0), (1, 1, 1))
    cb = queue.command_buffer()
    fc.encode(cb, m.Image.from_numpy(x, device), destination_image=dst)
    cb.commit()
    cb.wait_until_completed()
    out = dst.to_numpy()
    check(out[:, 1:2, 2:3], linear_reference(x, w, b)["y"], "forward into pixel (2, 1)")
    mask = np.ones(out.shape[:3], bool)
    mask[:, 1, 2] = False
    assert np.all(out[mask] == 7.5)


@pytest.mark.parametrize("option", ["GRADIENT_WITH_DATA", "GRADIENT_WITH_WEIGHTS_AND_BIAS"])
def test_fully_connected_gradient_option(device, queue, check, option):
    gen = rng("fc-option-" + option)
    _, fc, grad, w, b = make_fc(device, 4, 4, 8, 12, gen)
    grad.gradient_option = getattr(m.CNNConvolutionGradientOption, option)
    x, e = randn(gen, 2, 4, 4, 8), randn(gen, 2, 1, 1, 12)
    xs, es = m.batch_from_numpy(x, device), m.batch_from_numpy(e, device)
    cb = queue.command_buffer()
    _, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    ref = linear_reference(x, w, b, e)
    if option == "GRADIENT_WITH_DATA":
        check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
        assert not np.any(states[0].gradient_for_weights)
    else:
        check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
        check(states[0].gradient_for_biases, ref["db"], "bias gradient")


def test_fully_connected_training_step_through_states(device, queue, check):
    """The convolution's GPU update flow: forward, gradient, SGD on the gradient state into a
    weights state, reload on both kernels; the next forward uses the updated weights."""
    gen = rng("fc-sgd")
    _, fc, grad, w, b = make_fc(device, 3, 3, 4, 6, gen)
    x, e = randn(gen, 2, 3, 3, 4), randn(gen, 2, 1, 1, 6)
    xs, es = m.batch_from_numpy(x, device), m.batch_from_numpy(e, device)
    opt = m.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1)
    cb = queue.command_buffer()
    weights = fc.export_weights_and_biases_with_command_buffer(cb)
    _, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    grad.encode_batch(cb, es, xs, states)
    opt.encode(cb, states[0], weights)
    fc.reload_weights_and_biases_with_command_buffer(cb, weights)
    grad.reload_weights_and_biases_with_command_buffer(cb, weights)
    ys2, states2 = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs2 = grad.encode_batch(cb, es, xs, states2)
    cb.commit()
    cb.wait_until_completed()
    ref = linear_reference(x, w, b, e)
    w1, b1 = w - 0.1 * ref["dw"], b - 0.1 * ref["db"]
    check(weights.weights, w1, "updated weights")
    ref1 = linear_reference(x, w1.astype(np.float32), b1.astype(np.float32), e)
    check(m.batch_to_numpy(ys2), ref1["y"], "forward with the updated weights")
    check(m.batch_to_numpy(dxs2), ref1["dx"], "data gradient with the updated weights")


def test_fully_connected_batch_is_thread_count_independent(device, queue):
    """Forward, data and weight gradients of a batch are bitwise equal on 1 and 2 threads."""
    gen = rng("fc-threads")
    # 64 x 400 x 300: enough multiply-adds for two threads, and three column tiles
    _, fc, grad, _, _ = make_fc(device, 5, 5, 16, 300, gen)
    x, e = randn(gen, 64, 5, 5, 16), randn(gen, 64, 1, 1, 300)
    xs, es = m.batch_from_numpy(x, device), m.batch_from_numpy(e, device)
    before = m.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            m.set_num_threads(threads)
            cb = queue.command_buffer()
            ys, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
            dxs = grad.encode_batch(cb, es, xs, states)
            cb.commit()
            cb.wait_until_completed()
            results.append((m.batch_to_numpy(ys), m.batch_to_numpy(dxs), np.array(states[0].gradient_for_weights),
                            np.array(states[0].gradient_for_biases)))
    finally:
        m.set_num_threads(before)
    for one, two in zip(*results):
        assert np.array_equal(one, two)


def test_fully_connected_errors(device, queue):
    gen = rng("fc-errors")
    for prop, value in [("stride_in_pixels_x", 2), ("dilation_rate_y", 2), ("groups", 2)]:
        d = fc_descriptor(2, 2, 8, 8)
        setattr(d, prop, value)
        ds = m.CNNConvolutionWeightsDataSource(d, np.zeros((8, 2, 2, 8 // d.groups), np.float32))
        for cls in (m.CNNFullyConnected, m.CNNFullyConnectedGradient):
            with pytest.raises(ValueError, match=prop):
                cls(device, ds)
    dw = m.CNNDepthWiseConvolutionDescriptor(2, 2, 4, 4)
    with pytest.raises(ValueError, match="depthwise"):
        m.CNNFullyConnected(device, m.CNNConvolutionWeightsDataSource(dw, np.zeros((4, 2, 2, 1), np.float32)))
    with pytest.raises(TypeError, match="weights"):
        m.CNNFullyConnected(device, None)

    _, fc, _, _, _ = make_fc(device, 3, 3, 4, 4, gen)
    cb = queue.command_buffer()
    wrong = m.Image.from_numpy(randn(gen, 1, 4, 3, 4), device)
    with pytest.raises(ValueError, match=r"source_image: .*3x3 source.*got 3x4"):
        fc.encode(cb, wrong)
    x = m.Image.from_numpy(randn(gen, 1, 3, 3, 4), device)
    with pytest.raises(ValueError, match="one pixel"):
        fc.encode(cb, x, destination_image=m.Image.from_numpy(np.zeros((1, 2, 2, 4), np.float32), device))
    fc.clip_rect = ((-1, 0, 0), (2, 1, 1))
    with pytest.raises(ValueError, match="clip_rect"):
        fc.encode(cb, x, destination_image=m.Image.from_numpy(np.zeros((1, 1, 1, 4), np.float32), device))
