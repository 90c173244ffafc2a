"""The CPU fast paths of the streaming shaping ops (reshape, pad, pad gradient, spatial mean and its
gradient) on shapes large enough that the work is split into several chunks across threads:
channel runs that cross pixel boundaries (channel counts that are not multiples of 4, channel
offsets), channel padding, clip rects and batches. Results must match the NumPy / PyTorch oracles
and be bitwise equal on 1 and 2 threads.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import persistent, randn, rng
from test_reshape_pad import gather_gradient, pad_reference

E = m.ImageEdgeMode


def run(device, fn):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return out


def on_threads(fn):
    """fn() on 1 and on 2 threads; asserts the arrays it returns are bitwise equal; returns them."""
    before = m.get_num_threads()
    try:
        runs = []
        for t in (1, 2):
            m.set_num_threads(t)
            runs.append(fn())
    finally:
        m.set_num_threads(before)
    for a, b in zip(*runs):
        assert np.array_equal(a, b, equal_nan=True), "1 and 2 threads differ"
    return runs[0]


def test_reshape_runs_across_pixels_and_threads(device, check):
    n, (h, w, c) = 3, (20, 30, 6)         # 3600 elements per image -> 45 x 16 x 5
    dw, dh, dc = 45, 16, 5
    gen = rng("stream-reshape")
    x_arr = randn(gen, n, h, w, 11)       # the reshape reads channels 4..9
    g_arr = randn(gen, n, dh, dw, dc)
    xs, gs = m.batch_from_numpy(x_arr, device), m.batch_from_numpy(g_arr, device)

    def once():
        fwd, grad = persistent(m.NNReshape(device)), persistent(m.NNReshapeGradient(device))
        fwd.source_feature_channel_offset = 4
        fwd.source_feature_channel_max_count = c

        def go(cb):
            ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False, reshaped_width=dw,
                                          reshaped_height=dh, reshaped_feature_channels=dc)
            return ys, grad.encode_batch(cb, gs, xs, states)

        ys, dxs = run(device, go)
        return m.batch_to_numpy(ys), m.batch_to_numpy(dxs)

    y, dx = on_threads(once)
    assert np.array_equal(y, x_arr[..., 4:10].reshape(n, dh, dw, dc))
    assert dx.shape == (n, h, w, 11)      # the gradient lands in the channels the forward read
    check(dx[..., 4:10], g_arr.reshape(n, h, w, c), "reshape gradient", tol=0)


@pytest.mark.parametrize("mode", [E.ZERO, E.MIRROR, E.CONSTANT], ids=lambda e: e.name)
def test_pad_channel_runs_across_threads(device, check, mode):
    n, shape, before, after = 2, (33, 40, 7), (2, 1, 1), (1, 3, 2)
    gen = rng(f"stream-pad-{int(mode)}")
    x_arr = randn(gen, n, *shape)
    refs = [pad_reference(x_arr[i], before, after, mode, -0.5) for i in range(n)]
    g_arr = randn(gen, n, *refs[0][0].shape)
    xs, gs = m.batch_from_numpy(x_arr, device), m.batch_from_numpy(g_arr, device)

    def once():
        pad, grad = persistent(m.NNPad(device, before, after)), persistent(m.NNPadGradient(device))
        pad.edge_mode = mode
        pad.fill_value = -0.5

        def go(cb):
            ys, states = pad.encode_batch(cb, xs, destination_state_is_temporary=False)
            return ys, grad.encode_batch(cb, gs, xs, states)

        ys, dxs = run(device, go)
        return m.batch_to_numpy(ys), m.batch_to_numpy(dxs)

    y, dx = on_threads(once)
    for i, (ref, index) in enumerate(refs):
        assert np.array_equal(y[i], ref), f"image {i}: forward differs from np.pad"
        check(dx[i], gather_gradient(shape, index, g_arr[i]), "pad gradient", tol=1e-6)


def test_spatial_mean_channel_blocks_across_threads(device, check):
    n, h, w, c = 3, 9, 10, 300            # more channels than one block of the CPU path, not a multiple of 4
    rect = ((1, 2, 0), (7, 5, 1))
    gen = rng("stream-mean")
    x_arr = randn(gen, n, h, w, c)
    g_arr = randn(gen, n, 1, 1, c)
    xs, gs = m.batch_from_numpy(x_arr, device), m.batch_from_numpy(g_arr, device)

    def once():
        fwd, grad = persistent(m.NNReductionSpatialMean(device)), persistent(m.NNReductionSpatialMeanGradient(device))
        fwd.clip_rect_source = m.Region(*rect)

        def go(cb):
            ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
            return ys, grad.encode_batch(cb, gs, xs, states)

        ys, dxs = run(device, go)
        return m.batch_to_numpy(ys), m.batch_to_numpy(dxs)

    y, dx = on_threads(once)
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    mean = xt[:, 2:7, 1:8, :].mean((1, 2))
    (mean * torch.tensor(g_arr[:, 0, 0], dtype=torch.float64)).sum().backward()
    check(y.reshape(n, c), mean.detach().numpy(), "spatial mean")
    check(dx, xt.grad.numpy(), "spatial mean gradient", tol=1e-6)


@pytest.mark.parametrize("amsgrad", [False, True], ids=["adam", "amsgrad"])
def test_adam_vector_and_scalar_elements_agree(device, amsgrad):
    """The CPU updates Adam four elements at a time and the remainder one at a time: a vector whose
    last 3 elements repeat elements of the vectorized part (including NaN, signed zeros and a
    velocity maximum above and below the new velocity) must give those copies bitwise equal
    values, on 1 and 2 threads (chunk boundaries move with the thread count)."""
    gen = rng(f"stream-adam-{amsgrad}")
    n = 40000 + 3                          # several parallel chunks, then a 3-element tail
    w0, g0 = randn(gen, n), randn(gen, n)
    m0, v0, vmax0 = randn(gen, n) * 0.1, np.abs(randn(gen, n)) * 0.01, np.abs(randn(gen, n)) * 0.01
    g0[5], w0[6], v0[7], vmax0[7] = np.nan, -0.0, 0.0, -0.0
    for tail, source in zip(range(n - 3, n), (5, 6, 7)):
        for a in (w0, g0, m0, v0, vmax0):
            a[tail] = a[source]

    def once():
        opt = m.NNOptimizerAdam(device, 1e-3)
        vecs = [m.Vector.from_numpy(a.copy(), device) for a in (g0, w0, m0, v0, vmax0)]
        run(device, lambda cb: opt.encode(cb, *vecs[:4], vecs[4] if amsgrad else None))
        return [v.to_numpy() for v in vecs[1:]]

    results = on_threads(once)
    for a in results:
        assert np.array_equal(a[n - 3:], a[[5, 6, 7]], equal_nan=True)
        assert np.signbit(a[n - 2]) == np.signbit(a[6])
    assert not np.array_equal(results[0], w0)
