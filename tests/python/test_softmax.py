"""CNNSoftMax / CNNLogSoftMax and their gradients against PyTorch autograd (float64).

The reduction runs across the feature channels of each pixel: torch.softmax / log_softmax over the
channel axis of the NHWC tensor. The gradient kernels take the forward OUTPUT Y as their
secondary; the oracle is autograd through the forward function of X. Channel counts 1, 3, 4, 5
and 1000 cover a single channel (softmax 1, log-softmax 0, zero gradient), partial and whole
RGBA slices, and a long reduction. Inputs include large magnitudes (up to ±200, where a naive
exp overflows) to check the max subtraction.

Bound: max relative error <= 1e-4 (2e-4 for the 1000-channel log-softmax gradient). Each output
involves a sum of N exponentials or products (fixed-order, float32), error ~N^0.5 * 1e-7
relative; the exp of a float32 difference adds ~1e-7 * |X - M| relative, i.e. up to ~4e-5 for
the inputs of magnitude 200 — the bound leaves margin above that while any wrong reduction
or formula gives an O(1) error.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import randn, rng

# 13 and 21: the 8-float blocks of the CPU loops plus a tail; 64: blocks only
CHANNELS = [1, 3, 4, 5, 13, 21, 64, 1000]


def _inputs(gen, n, h, w, c, scale):
    x = randn(gen, n, h, w, c) * scale
    if c > 1:
        x[0, 0, 0, :] = 200.0 * np.sign(x[0, 0, 0, :] + 1e-3)  # huge logits
        x[0, 0, 1, :] = -150.0
    return x.astype(np.float32)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("channels", CHANNELS)
def test_softmax_forward_and_gradient(device, queue, check, channels, log):
    gen = rng(f"softmax-{channels}-{log}")
    n, h, w = (2, 3, 4) if channels < 1000 else (1, 2, 3)
    x = _inputs(gen, n, h, w, channels, 3.0)
    g = randn(gen, n, h, w, channels)
    fwd = (m.CNNLogSoftMax if log else m.CNNSoftMax)(device)
    bwd = (m.CNNLogSoftMaxGradient if log else m.CNNSoftMaxGradient)(device)
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    bwd.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    cb = queue.command_buffer()
    ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
    assert all(isinstance(s, m.CNNSoftMaxGradientState) and s.is_log_softmax == log for s in states)
    dxs = bwd.encode_batch(cb, m.batch_from_numpy(g, device), ys, states)  # secondary = Y
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED

    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    Y = torch.log_softmax(X, dim=-1) if log else torch.softmax(X, dim=-1)
    (Y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    y = m.batch_to_numpy(ys)
    dx = m.batch_to_numpy(dxs)
    check(y, Y.detach().numpy(), "forward")
    tol = 2e-4 if channels >= 1000 else 1e-4
    if channels == 1:
        assert np.all(dx == 0.0)
    else:
        check(dx, X.grad.numpy(), "gradient", tol=tol)


def test_destination_forms_offsets_and_temporary_state(device, queue, check):
    """Feature-channel offsets and a clip rectangle in the forward pass; the gradient configured by
    destination_image_descriptor reads G and Y where the forward wrote and writes dX where it read."""
    gen = rng("softmax-dest")
    x = randn(gen, 1, 5, 6, 12) * 2
    sentinel = -4.5
    fwd = m.CNNLogSoftMax(device)
    fwd.source_feature_channel_offset = 4
    fwd.source_feature_channel_max_count = 5      # channels 4..8
    fwd.destination_feature_channel_offset = 8
    fwd.offset = (1, 0, 0)
    fwd.clip_rect = m.Region((0, 2, 0), (4, 3, 1))
    X = m.Image.from_numpy(x, device)
    Y = m.Image.from_numpy(np.full((1, 6, 5, 16), sentinel, np.float32), device)
    cb = queue.command_buffer()
    state = fwd.temporary_result_state(cb, X)
    fwd.encode(cb, X, state, Y)
    g = randn(gen, 1, 6, 5, 16)
    G = m.Image.from_numpy(g, device)
    bwd = m.CNNLogSoftMaxGradient(device)
    desc = bwd.destination_image_descriptor([G, Y], [state])
    assert (desc.width, desc.height, desc.feature_channels) == (6, 5, 12)
    dX = m.Image.from_numpy(np.full((1, 5, 6, 12), sentinel, np.float32), device)
    bwd.encode(cb, G, Y, state, dX)
    assert state.read_count == 0
    cb.commit()
    cb.wait_until_completed()

    Xt = torch.tensor(x[0, 0:3, 1:5, 4:9], dtype=torch.float64, requires_grad=True)
    Yt = torch.log_softmax(Xt, dim=-1)
    (Yt * torch.tensor(g[0, 2:5, 0:4, 8:13], dtype=torch.float64)).sum().backward()
    yo = Y.to_numpy()[0]
    check(yo[2:5, 0:4, 8:13], Yt.detach().numpy(), "forward")
    mask = np.ones(yo.shape, bool)
    mask[2:5, 0:4, 8:13] = False
    assert np.all(yo[mask] == sentinel)
    dxo = dX.to_numpy()[0]
    check(dxo[0:3, 1:5, 4:9], Xt.grad.numpy(), "gradient")
    mask = np.ones(dxo.shape, bool)
    mask[0:3, 1:5, 4:9] = False
    assert np.all(dxo[mask] == sentinel)


def test_bad_softmax_inputs(device, queue):
    gen = rng("softmax-bad")
    x = randn(gen, 1, 3, 3, 5)
    X = m.Image.from_numpy(x, device)
    G = m.Image.from_numpy(randn(gen, 1, 3, 3, 5), device)
    cb = queue.command_buffer()
    y, state = m.CNNSoftMax(device).encode(cb, X, destination_state_is_temporary=False)
    _, log_state = m.CNNLogSoftMax(device).encode(cb, X, destination_state_is_temporary=False)
    grad = m.CNNSoftMaxGradient(device)
    with pytest.raises(ValueError, match="forward OUTPUT Y"):
        grad.encode(cb, G, X, state)  # X instead of Y
    with pytest.raises(ValueError, match="source_image"):
        grad.encode(cb, G, m.Image.from_numpy(randn(gen, 1, 3, 4, 5), device), state)
    with pytest.raises(TypeError, match="CNNSoftMax"):
        grad.encode(cb, G, y, log_state)
    with pytest.raises(TypeError, match="CNNSoftMaxGradientState"):
        _, neuron_state = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU)).encode(
            cb, X, destination_state_is_temporary=False)
        grad.encode(cb, G, y, neuron_state)
    sm = m.CNNSoftMax(device)
    sm.edge_mode = m.ImageEdgeMode.CONSTANT
    with pytest.raises(ValueError, match="edge_mode"):
        sm.encode(cb, X)
    dx = grad.encode(cb, G, y, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert dx.shape == (1, 3, 3, 5)
