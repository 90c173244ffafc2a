"""CNNDropout / CNNDropoutGradient: the mask's statistics, its reproducibility across devices, the
gradient's use of exactly the forward mask, broadcasting, and bad inputs.

The Philox4x32-10 generator itself is checked against the published known-answer vectors in
tests/cpp/test_cpu_dropout.cpp. Statistical bound: over n = 2^20 elements the kept count of an
exact Bernoulli(p) mask has standard deviation sqrt(n p (1 - p)); the test allows 4 of them (a
false failure once in ~16000 runs for a correct generator, and the seed is fixed).
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import FLOAT16, randn, rng

# Dropout scales by 1/keep in float32: exact to float32 rounding, and to half rounding (2**-11
# relative) when the images are FLOAT16 (MPSGRAD_TEST_IMAGE_FORMAT=float16).
RTOL = 2.0**-11 if FLOAT16 else 1e-6


def _forward(device, queue, dropout, x, temporary=False):
    dropout.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    cb = queue.command_buffer()
    ys, states = dropout.encode_batch(cb, xs, destination_state_is_temporary=temporary)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return xs, m.batch_to_numpy(ys), states


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.8])
def test_keep_rate_within_four_sigma(device, queue, keep):
    x = np.ones((4, 64, 64, 64), np.float32)  # 2^20 elements
    _, y, states = _forward(device, queue, m.CNNDropout(device, keep, seed=1234), x)
    kept = np.count_nonzero(y)
    n = x.size
    assert abs(kept - n * keep) <= 4 * np.sqrt(n * keep * (1 - keep)), (kept, n * keep)
    # Kept values are X / p exactly (float32 division), dropped ones 0.
    assert np.all((y == 0) | (y == np.float32(1) / np.float32(keep)))
    masks = np.concatenate([s.mask_data() for s in states])
    np.testing.assert_array_equal(masks.astype(bool), y != 0)


def test_masks_are_identical_on_every_device_and_reproducible(queue):
    x = randn(rng("dropout-devices"), 2, 7, 9, 13)
    results = []
    for name in m.Device.available():
        device = m.Device(name)
        _, y, states = _forward(device, m.CommandQueue(device), m.CNNDropout(device, 0.6, seed=99), x)
        results.append((name, y, np.stack([s.mask_data() for s in states])))
    for name, y, mask in results[1:]:
        np.testing.assert_array_equal(mask, results[0][2], err_msg=f"{name} vs {results[0][0]}")
        assert y.tobytes() == results[0][1].tobytes(), f"{name} vs {results[0][0]}"


def test_each_encode_draws_a_fresh_mask_and_seeds_differ(device, queue):
    x = np.ones((1, 16, 16, 8), np.float32)
    d = m.CNNDropout(device, 0.5, seed=7)
    _, y1, _ = _forward(device, queue, d, x)
    _, y2, _ = _forward(device, queue, d, x)
    assert d.encode_count == 2
    assert not np.array_equal(y1, y2)
    _, y3, _ = _forward(device, queue, m.CNNDropout(device, 0.5, seed=7), x)
    np.testing.assert_array_equal(y1, y3)  # a new kernel with the same seed starts over
    _, y4, _ = _forward(device, queue, m.CNNDropout(device, 0.5, seed=8), x)
    assert not np.array_equal(y1, y4)


@pytest.mark.parametrize("stride", [(1, 1, 1), (0, 1, 1), (1, 0, 0), (0, 0, 1), (0, 0, 0)])
def test_gradient_uses_the_forward_mask_and_broadcasting(device, queue, check, stride):
    gen = rng(f"dropout-grad-{stride}")
    keep = 0.7
    x = randn(gen, 2, 5, 6, 10) + 5.0  # no zeros: the mask is visible in Y
    d = m.CNNDropout(device, keep, seed=31, mask_stride_in_pixels=stride)
    xs, y, states = _forward(device, queue, d, x)
    mask = y != 0
    np.testing.assert_allclose(y[mask], (x / np.float32(keep))[mask], rtol=RTOL)
    # Broadcast axes: the mask is constant along them.
    for axis, s in zip((2, 1, 3), stride):
        if s == 0:
            assert np.all(mask == mask.take([0], axis=axis))
    grid = np.stack([s.mask_data()[0] for s in states])
    assert grid.shape[1:] == (5 if stride[1] else 1, 6 if stride[0] else 1, 10 if stride[2] else 1)
    np.testing.assert_array_equal(np.broadcast_to(grid.astype(bool), mask.shape), mask)

    g = randn(gen, 2, 5, 6, 10)
    bwd = m.CNNDropoutGradient(device, keep, seed=31, mask_stride_in_pixels=stride)
    bwd.destination_image_allocator = m.ImageAllocator.persistent()
    cb = queue.command_buffer()
    dxs = bwd.encode_batch(cb, m.batch_from_numpy(g, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    dx = m.batch_to_numpy(dxs)
    check(dx, np.where(mask, g.astype(np.float64) / keep, 0.0), "gradient")
    assert np.all(dx[~mask] == 0)


def test_offsets_and_channel_slices(device, queue, check):
    """A read offset and clip in the forward pass; the gradient configured from the state reads G
    where Y was written and places the mask by secondary_offset."""
    gen = rng("dropout-offsets")
    x = randn(gen, 1, 6, 7, 12) + 3.0
    d = m.CNNDropout(device, 0.5, seed=5)
    d.offset = (2, 1, 0)
    d.clip_rect = m.Region((1, 0, 0), (4, 3, 1))
    d.source_feature_channel_offset = 4
    d.destination_feature_channel_offset = 4
    X = m.Image.from_numpy(x, device)
    Y = m.Image.from_numpy(np.zeros((1, 5, 6, 12), np.float32), device)
    cb = queue.command_buffer()
    state = d.temporary_result_state(cb, X)
    d.encode(cb, X, state, Y)
    g = randn(gen, 1, 5, 6, 12)
    G = m.Image.from_numpy(g, device)
    bwd = m.CNNDropoutGradient(device, 0.5, seed=5)
    bwd.destination_image_descriptor([G, X], [state])
    dX = m.Image.from_numpy(np.full((1, 6, 7, 12), -1.0, np.float32), device)
    bwd.encode(cb, G, X, state, dX)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    yo = Y.to_numpy()[0, 0:3, 1:5, 4:12]
    mask = yo != 0
    check(yo, np.where(mask, x[0, 1:4, 2:6, 4:12] / 0.5, 0), "forward")
    dxo = dX.to_numpy()[0]
    check(dxo[1:4, 2:6, 4:12], np.where(mask, g[0, 0:3, 1:5, 4:12] / 0.5, 0), "gradient")
    assert np.all(dxo[..., :4] == -1.0) and np.all(dxo[0] == -1.0)


def test_bad_dropout_inputs(device, queue):
    for p in (0.0, 1.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="keep_probability"):
            m.CNNDropout(device, p)
        with pytest.raises(ValueError, match="keep_probability"):
            m.CNNDropoutGradient(device, p)
    with pytest.raises(ValueError, match="mask_stride_in_pixels"):
        m.CNNDropout(device, 0.5, 0, (2, 1, 1))
    with pytest.raises(TypeError, match="mask_stride_in_pixels"):
        m.CNNDropout(device, 0.5, 0, (1, 1))
    with pytest.raises(TypeError):
        m.CNNDropout(device, 0.5, -1)
    gen = rng("dropout-bad")
    X = m.Image.from_numpy(randn(gen, 1, 4, 4, 4), device)
    cb = queue.command_buffer()
    y, state = m.CNNDropout(device, 0.5, 3).encode(cb, X, destination_state_is_temporary=False)
    G = m.Image.from_numpy(randn(gen, 1, 4, 4, 4), device)
    with pytest.raises(ValueError, match="seed"):
        m.CNNDropoutGradient(device, 0.5, 4).encode(cb, G, X, state)
    with pytest.raises(ValueError, match="keep_probability"):
        m.CNNDropoutGradient(device, 0.25, 3).encode(cb, G, X, state)
    _, pool_state = m.CNNPoolingMax(device, 2, 2).encode(cb, X, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="CNNDropoutGradientState"):
        m.CNNDropoutGradient(device, 0.5, 3).encode(cb, G, X, pool_state)
    off = m.CNNDropout(device, 0.5, 3)
    off.offset = (1, 0, 0)
    with pytest.raises(ValueError, match="offset"):
        off.encode(cb, X, destination_image=m.Image.from_numpy(np.zeros((1, 4, 4, 4), np.float32), device))
    dx = m.CNNDropoutGradient(device, 0.5, 3).encode(cb, G, X, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert dx.shape == (1, 4, 4, 4)
