"""NNGramMatrixCalculation / NNGramMatrixCalculationGradient and the spatial mean
(NNReductionSpatialMean / NNReductionSpatialMeanGradient) on every device.

Oracles: PyTorch autograd in float64 — the Gram matrix as alpha * X^T X over the pixels of each
image (X: pixels x channels), its gradient through autograd of sum(G * Gr); the spatial mean as
torch.mean over the region, its gradient through autograd of sum(mean * G). Results are float32 sums
of up to a few thousand products, checked at the suite's relative bound (1e-4 of the largest
oracle value); the spatial-mean gradient is a single division, so it must match to 1e-6.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import persistent, randn, rng


def run(device, fn):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return out


def gram_oracle(x_arr, alpha, g_arr):
    """x_arr (n, h, w, c), g_arr (n, 1, c, c) -> (G (n, 1, c, c), dX (n, h, w, c)) in float64."""
    n, h, w, c = x_arr.shape
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    flat = xt.reshape(n, h * w, c)
    gram = alpha * flat.transpose(1, 2) @ flat  # (n, c, c): [b, f, c]
    (gram * torch.tensor(g_arr[:, 0], dtype=torch.float64)).sum().backward()
    return gram.detach().numpy()[:, None], xt.grad.numpy()


# (height, width, channels, images, alpha): one channel, channel counts that are not multiples of 4,
# more than 32 channels (several simdgroups along the grid), images with one row / one column.
GRAM_CASES = [(5, 4, 1, 1, 1.0), (3, 7, 3, 2, 0.5), (6, 5, 8, 1, -2.0), (1, 9, 5, 3, 0.125), (4, 1, 6, 1, 3.0),
              (9, 11, 37, 2, 1.0 / 99)]


@pytest.mark.parametrize("h,w,c,n,alpha", GRAM_CASES)
def test_gram_matrix_forward_and_gradient(device, check, h, w, c, n, alpha):
    gen = rng(f"gram-{h}-{w}-{c}-{n}")
    x_arr = randn(gen, n, h, w, c)
    g_arr = randn(gen, n, 1, c, c)
    xs = [m.Image.from_numpy(x_arr[i:i + 1], device) for i in range(n)]
    gs = [m.Image.from_numpy(g_arr[i:i + 1], device) for i in range(n)]
    fwd = persistent(m.NNGramMatrixCalculation(device, alpha))
    grad = persistent(m.NNGramMatrixCalculationGradient(device, alpha=alpha))
    assert fwd.alpha == np.float32(alpha) and grad.alpha == np.float32(alpha)

    def go(cb):
        ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
        assert all(isinstance(s, m.NNGramMatrixCalculationGradientState) for s in states)
        return ys, grad.encode_batch(cb, gs, xs, states)

    ys, dxs = run(device, go)
    want_y, want_dx = gram_oracle(x_arr, alpha, g_arr)
    assert all((y.width, y.height, y.feature_channels) == (c, 1, c) for y in ys)
    assert all((d.width, d.height, d.feature_channels) == (w, h, c) for d in dxs)
    check(m.batch_to_numpy(ys), want_y, "Gram matrix")
    check(m.batch_to_numpy(dxs), want_dx, "Gram matrix gradient")


def test_gram_matrix_multi_image_and_symmetry(device, check):
    """One Image holding several images (number_of_images), default alpha 1; G is symmetric."""
    gen = rng("gram-multi")
    x_arr = randn(gen, 3, 4, 6, 5)
    g_arr = randn(gen, 3, 1, 5, 5)
    x = m.Image.from_numpy(x_arr, device)
    g = m.Image.from_numpy(g_arr, device)
    fwd, grad = persistent(m.NNGramMatrixCalculation(device)), persistent(m.NNGramMatrixCalculationGradient(device))
    assert fwd.alpha == 1.0

    y = m.Image(device, m.ImageDescriptor(5, 1, 5, number_of_images=3))
    dx = m.Image(device, m.ImageDescriptor(6, 4, 5, number_of_images=3))
    state = fwd.result_state(x)

    def go(cb):
        fwd.encode(cb, x, state, y)
        grad.encode(cb, g, x, state, dx)

    run(device, go)
    want_y, want_dx = gram_oracle(x_arr, 1.0, g_arr)
    out = y.to_numpy()
    assert out.shape == (3, 1, 5, 5)
    check(out, want_y, "Gram matrix")
    check(out, np.swapaxes(out, 2, 3), "symmetry", tol=1e-6)
    check(dx.to_numpy(), want_dx, "Gram matrix gradient")


def test_gram_matrix_channel_slices(device, check):
    """source_feature_channel_offset / max count pick the channels; the result lands at
    destination_feature_channel_offset; the gradient reads and writes the forward's channels."""
    gen = rng("gram-slices")
    x_arr = randn(gen, 1, 5, 4, 10)
    fwd = persistent(m.NNGramMatrixCalculation(device, 0.5))
    fwd.source_feature_channel_offset = 4
    fwd.source_feature_channel_max_count = 3
    fwd.destination_feature_channel_offset = 4
    x = m.Image.from_numpy(x_arr, device)
    y = m.Image.from_numpy(np.full((1, 2, 6, 8), 7.0, np.float32), device)  # wider and taller than 3 x 1
    g_arr = randn(gen, 1, 1, 3, 8)
    g = m.Image.from_numpy(g_arr, device)
    grad = persistent(m.NNGramMatrixCalculationGradient(device, 0.5))
    state = fwd.result_state(x)

    def go(cb):
        fwd.encode(cb, x, state, y)
        return grad.encode(cb, g, x, state)

    dx = run(device, go)
    g_sub = np.zeros((1, 1, 3, 3), np.float32)
    g_sub[0, 0] = g_arr[0, 0, :, 4:7]
    want_y, want_dx = gram_oracle(x_arr[..., 4:7], 0.5, g_sub)
    out = y.to_numpy()
    check(out[:, :1, :3, 4:7], want_y, "Gram matrix")
    assert np.all(out[:, :, :, :4] == 7.0) and np.all(out[:, 1:] == 7.0) and np.all(out[:, :, 3:] == 7.0)
    assert dx.feature_channels == 10
    check(dx.to_numpy()[..., 4:7], want_dx, "Gram matrix gradient")


def test_gram_matrix_errors(device):
    q = m.CommandQueue(device)
    x = m.Image.from_numpy(np.zeros((1, 3, 4, 5), np.float32), device)
    cb = q.command_buffer()
    with pytest.raises(TypeError, match="alpha"):
        m.NNGramMatrixCalculation(device, "big")
    k = persistent(m.NNGramMatrixCalculation(device))
    with pytest.raises(TypeError, match="alpha"):
        k.alpha = None
    k.offset = (1, 0, 0)
    with pytest.raises(ValueError, match="offset"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(5, 1, 5)))
    k.offset = (0, 0, 0)
    with pytest.raises(ValueError, match="destination_image"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(4, 1, 5)))
    k.clip_rect = m.Region((1, 0, 0), (4, 1, 1))
    with pytest.raises(ValueError, match="clip_rect"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(5, 1, 5)))
    k.clip_rect = m.Region((0, 0, 0), (2**64 - 1, 2**64 - 1, 2**64 - 1))
    _, state = k.encode(cb, x, destination_state_is_temporary=False)
    grad = persistent(m.NNGramMatrixCalculationGradient(device))
    with pytest.raises(ValueError, match="source_gradient"):
        grad.encode(cb, m.Image.from_numpy(np.zeros((1, 1, 4, 5), np.float32), device), x, state)
    with pytest.raises(ValueError, match="source_image"):
        grad.encode(cb, m.Image.from_numpy(np.zeros((1, 1, 5, 5), np.float32), device),
                    m.Image.from_numpy(np.zeros((1, 3, 3, 5), np.float32), device), state)
    _, wrong = persistent(m.NNReductionSpatialMean(device)).encode(cb, x, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="NNGramMatrixCalculationGradientState"):
        grad.encode(cb, m.Image.from_numpy(np.zeros((1, 1, 5, 5), np.float32), device), x, wrong)
    cb.commit()
    cb.wait_until_completed()


# ---------------------------------------------------------------------------------------------
# spatial mean

def mean_oracle(x_arr, region, g_arr):
    """x_arr (n, h, w, c); region (x0, y0, w, h); g_arr (n, c) -> (mean (n, c), dX) in float64."""
    x0, y0, rw, rh = region
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    mean = xt[:, y0:y0 + rh, x0:x0 + rw].mean(dim=(1, 2))
    (mean * torch.tensor(g_arr, dtype=torch.float64)).sum().backward()
    return mean.detach().numpy(), xt.grad.numpy()


# (height, width, channels, images, clip_rect_source or None). 107 channels = 3 groups of 32, one
# of 8 and 3 single channels; 300 = a block of 256 and one of 44: every path of the CPU mean's
# channel grouping.
MEAN_CASES = [(5, 4, 3, 1, None), (7, 9, 8, 2, None), (1, 1, 5, 1, None), (6, 8, 37, 3, None),
              (6, 7, 4, 2, ((1, 2, 0), (3, 4, 1))), (5, 5, 6, 1, ((-2, 3, 0), (4, 10, 1))),
              (5, 6, 107, 2, None), (6, 7, 107, 2, ((1, 2, 0), (3, 4, 1))), (3, 4, 300, 2, None)]


@pytest.mark.parametrize("h,w,c,n,rect", MEAN_CASES)
def test_spatial_mean_forward_and_gradient(device, check, h, w, c, n, rect):
    gen = rng(f"mean-{h}-{w}-{c}-{n}-{rect}")
    x_arr = randn(gen, n, h, w, c)
    g_arr = randn(gen, n, c)
    xs = [m.Image.from_numpy(x_arr[i:i + 1], device) for i in range(n)]
    gs = [m.Image.from_numpy(g_arr[i].reshape(1, 1, 1, c), device) for i in range(n)]
    fwd, grad = persistent(m.NNReductionSpatialMean(device)), persistent(m.NNReductionSpatialMeanGradient(device))
    region = (0, 0, w, h)
    if rect is not None:
        fwd.clip_rect_source = m.Region(*rect)
        (ox, oy, _), (sw, sh, _) = rect
        x0, y0 = max(ox, 0), max(oy, 0)
        region = (x0, y0, min(ox + sw, w) - x0, min(oy + sh, h) - y0)

    def go(cb):
        ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
        assert all(isinstance(s, m.NNReductionSpatialMeanGradientState) for s in states)
        return ys, grad.encode_batch(cb, gs, xs, states)

    ys, dxs = run(device, go)
    want_y, want_dx = mean_oracle(x_arr, region, g_arr)
    assert all((y.width, y.height, y.feature_channels) == (1, 1, c) for y in ys)
    check(m.batch_to_numpy(ys).reshape(n, c), want_y, "spatial mean")
    check(m.batch_to_numpy(dxs), want_dx, "spatial mean gradient", tol=1e-6)


def test_spatial_mean_destination_pixel_and_channels(device, check):
    """The mean lands at clip_rect.origin and destination_feature_channel_offset; the gradient
    reads G there and writes dX at the forward's source channels."""
    gen = rng("mean-place")
    x_arr = randn(gen, 1, 4, 6, 9)
    x = m.Image.from_numpy(x_arr, device)
    fwd = persistent(m.NNReductionSpatialMean(device))
    fwd.source_feature_channel_offset = 4
    fwd.destination_feature_channel_offset = 4
    fwd.clip_rect = m.Region((2, 1, 0), (1, 1, 1))
    y = m.Image.from_numpy(np.full((1, 3, 3, 9), 5.0, np.float32), device)
    g_arr = randn(gen, 1, 3, 3, 9)
    g = m.Image.from_numpy(g_arr, device)
    state = fwd.result_state(x)
    grad = persistent(m.NNReductionSpatialMeanGradient(device))

    def go(cb):
        fwd.encode(cb, x, state, y)
        return grad.encode(cb, g, x, state)

    dx = run(device, go)
    want_y, want_dx = mean_oracle(x_arr[..., 4:], (0, 0, 6, 4), g_arr[:, 1, 2, 4:])
    out = y.to_numpy()
    check(out[0, 1, 2, 4:], want_y[0], "spatial mean")
    mask = np.ones(out.shape, bool)
    mask[0, 1, 2, 4:] = False
    assert np.all(out[mask] == 5.0)
    check(dx.to_numpy()[..., 4:], want_dx, "spatial mean gradient", tol=1e-6)


def test_spatial_mean_gradient_of_a_channel_subset_zeroes_the_other_channels(device, check):
    """A forward that read channels [0, 5) of an 8-channel image: the returned dX (8 channels) holds
    the gradient in those channels and zeros in the others (the gradient skips the zero fill of its
    destination only when it writes every channel; the poison of MPSGRAD_POISON_UNSPECIFIED_BUFFERS
    would show here)."""
    gen = rng("mean-channel-subset")
    x_arr = randn(gen, 2, 3, 4, 8)
    g_arr = randn(gen, 2, 5)
    xs = [m.Image.from_numpy(x_arr[i:i + 1], device) for i in range(2)]
    gs = [m.Image.from_numpy(g_arr[i].reshape(1, 1, 1, 5), device) for i in range(2)]
    fwd, grad = persistent(m.NNReductionSpatialMean(device)), persistent(m.NNReductionSpatialMeanGradient(device))
    fwd.source_feature_channel_max_count = 5

    def go(cb):
        ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
        return grad.encode_batch(cb, gs, xs, states)

    dx = m.batch_to_numpy(run(device, go))
    _, want_dx = mean_oracle(x_arr[..., :5], (0, 0, 4, 3), g_arr)
    assert dx.shape == (2, 3, 4, 8)
    check(dx[..., :5], want_dx, "spatial mean gradient", tol=1e-6)
    assert np.all(dx[..., 5:] == 0.0)


def test_spatial_mean_errors(device):
    q = m.CommandQueue(device)
    x = m.Image.from_numpy(np.zeros((1, 3, 4, 5), np.float32), device)
    cb = q.command_buffer()
    k = m.NNReductionSpatialMean(device)
    k.clip_rect_source = m.Region((10, 0, 0), (2, 2, 1))
    with pytest.raises(ValueError, match="clip_rect_source"):
        k.encode(cb, x)
    with pytest.raises(TypeError, match="clip_rect_source"):
        k.clip_rect_source = 3
    k.clip_rect_source = m.Region((0, 0, 0), (2, 2, 1))
    k.offset = (0, 1, 0)
    with pytest.raises(ValueError, match="offset"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(1, 1, 5)))
    k.offset = (0, 0, 0)
    with pytest.raises(ValueError, match="destination"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(1, 1, 3)))
    _, state = k.encode(cb, x, destination_state_is_temporary=False)
    grad = m.NNReductionSpatialMeanGradient(device)
    g = m.Image.from_numpy(np.zeros((1, 1, 1, 5), np.float32), device)
    with pytest.raises(ValueError, match="source_image"):
        grad.encode(cb, g, m.Image.from_numpy(np.zeros((1, 2, 4, 5), np.float32), device), state)
    grad.primary_offset = (1, 0, 0)
    with pytest.raises(ValueError, match="source_gradient"):
        grad.encode(cb, g, x, state, m.Image(device, m.ImageDescriptor(4, 3, 5)))
    _, wrong = m.NNGramMatrixCalculation(device).encode(cb, x, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="NNReductionSpatialMeanGradientState"):
        m.NNReductionSpatialMeanGradient(device).encode(cb, g, x, wrong)
    cb.commit()
    cb.wait_until_completed()
