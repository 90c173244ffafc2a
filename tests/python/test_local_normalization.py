"""Cross-channel (LRN), spatial and local contrast normalization and their gradients.

Oracles:
* cross-channel: PyTorch's ``local_response_norm`` (float64) and its autograd. MPS's
  ``Y(k) = X(k) / (delta + alpha/N * sum_{q in Q(k)} X(q)^2)^beta`` with
  ``Q(k) = [k - (N >> 1), k + ((N - 1) >> 1)]`` is exactly ``local_response_norm(X, size=N,
  alpha=alpha, beta=beta, k=delta)``: PyTorch averages the squares over ``size`` channels
  (zero-padded by ``size // 2`` before and ``(size - 1) // 2`` after, always dividing by
  ``size``), so MPS's alpha and PyTorch's alpha are the same number.
* spatial and local contrast: a float64 NumPy implementation of the spec's forward formula
  written here (zero-padded windows, N = kernel_width * kernel_height), and float64 central
  finite differences of it for the gradient (L = sum(Y * G)).

Bound: relative error <= 1e-4 (float32 sums of at most 25 taps and float32 powers, against
float64; the finite differences themselves are accurate to ~1e-9).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import sliding_window_view

import mpsgrad as m
from conftest import (channel_slices_run, check_channel_slices, forward_and_gradient, randn, random_like_result,
                      rng)

KINDS = {
    "cross": (m.CNNCrossChannelNormalization, m.CNNCrossChannelNormalizationGradient),
    "spatial": (m.CNNSpatialNormalization, m.CNNSpatialNormalizationGradient),
    "contrast": (m.CNNLocalContrastNormalization, m.CNNLocalContrastNormalizationGradient),
}
# Non-default parameters (the defaults are tested separately): every term of every formula counts.
PARAMS = {
    "cross": dict(alpha=0.7, beta=0.75, delta=1.5),
    "spatial": dict(alpha=1.3, beta=0.6, delta=0.8),
    "contrast": dict(alpha=1.0, beta=0.5, delta=2.0 ** -10, p0=0.8, pm=0.1, ps=1.5),
}


def _make(kind, device, size, params):
    fwd_cls, bwd_cls = KINDS[kind]
    args = (size,) if kind == "cross" else (size, size)
    fwd, bwd = fwd_cls(device, *args), bwd_cls(device, *args)
    for k in (fwd, bwd):
        for name, value in params.items():
            setattr(k, name, value)
    return fwd, bwd


# ---- references -------------------------------------------------------------------------------


def windows(x, k, offset, out_hw):
    """(N, oh, ow, C, k, k) windows of x (NHWC float64): window (y, x) is centered at
    offset + (x, y), taps from center - (k >> 1); off-image taps are 0."""
    oh, ow = out_hw
    left, top = offset[0] - (k >> 1), offset[1] - (k >> 1)
    H, W = x.shape[1], x.shape[2]
    pl, pt = max(0, -left), max(0, -top)
    pr, pb = max(0, left + ow + k - 1 - W), max(0, top + oh + k - 1 - H)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    xp = xp[:, top + pt:top + pt + oh + k - 1, left + pl:left + pl + ow + k - 1, :]
    return sliding_window_view(xp, (k, k), axis=(1, 2))


def window_forward(kind, x, k, params, offset, out_hw):
    """The spec's forward formula of spatial / local contrast normalization, float64."""
    w = windows(x, k, offset, out_hw)
    center = w[..., k >> 1, k >> 1]
    n = k * k
    alpha, beta, delta = params["alpha"], params["beta"], params["delta"]
    if kind == "spatial":
        t = delta + alpha / n * np.sum(w * w, axis=(-2, -1))
        return center * t ** -beta
    mean = np.mean(w, axis=(-2, -1))
    var = np.mean((w - mean[..., None, None]) ** 2, axis=(-2, -1))
    t = delta + alpha * var
    return params["pm"] + params["ps"] * (center - params["p0"] * mean) * t ** -beta


def finite_difference_gradient(f, x, g, h=1e-6):
    """d sum(f(x) * g) / dx by central differences, float64."""
    grad = np.zeros_like(x)
    flat, out = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + h
        up = np.sum(f(x) * g)
        flat[i] = keep - h
        down = np.sum(f(x) * g)
        flat[i] = keep
        out[i] = (up - down) / (2 * h)
    return grad


def cross_reference(x, g, size, params, offset=(0, 0), out_hw=None):
    """Y and dX (NHWC float64) from torch.nn.functional.local_response_norm and autograd; output
    pixel (y, x) reads X at offset + (x, y), 0 off the image."""
    oh, ow = out_hw if out_hw is not None else x.shape[1:3]
    left, top = offset
    H, W = x.shape[1], x.shape[2]
    X = torch.tensor(np.asarray(x, np.float64)).requires_grad_(True)
    pads = (0, 0, max(0, -left), max(0, left + ow - W), max(0, -top), max(0, top + oh - H))
    sub = F.pad(X, pads)[:, max(0, top):max(0, top) + oh, max(0, left):max(0, left) + ow, :]
    Y = F.local_response_norm(sub.permute(0, 3, 1, 2), size, alpha=params["alpha"], beta=params["beta"],
                              k=params["delta"])
    G = torch.tensor(np.asarray(g, np.float64)).permute(0, 3, 1, 2)
    (Y * G).sum().backward()
    return Y.detach().permute(0, 2, 3, 1).numpy(), X.grad.numpy()


def reference(kind, x, g, size, params, offset, out_hw):
    """Y (over the out_hw windows from `offset`) and dX (over x) of L = sum(Y * G), float64."""
    x = np.asarray(x, np.float64)
    g = np.asarray(g, np.float64)
    if kind == "cross":
        return cross_reference(x, g, size, params, offset, out_hw)
    f = lambda v: window_forward(kind, v, size, params, offset, out_hw)
    return f(x), finite_difference_gradient(f, x.copy(), g)


# ---- runs -------------------------------------------------------------------------------------


def _run_returning(device, queue, fwd, bwd, x, gen):
    """Forward and gradient through the returning batch encode forms (state copy of the geometry)."""
    y, dx, g, states = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, x.shape[0]))
    assert all(isinstance(s, m.CNNLocalNormalizationGradientState) for s in states)
    return y, dx, g


CASES = [("cross", s) for s in (1, 2, 3, 4, 5, 7)] + [(k, s) for k in ("spatial", "contrast") for s in (1, 2, 3, 4, 5)]


@pytest.mark.parametrize("kind,size", CASES)
def test_matches_reference(device, queue, check, kind, size):
    """A batch of 2 non-square images, 5 channels (not a multiple of 4), odd and even windows; the
    windows at the borders read zeros."""
    gen = rng(f"lnorm-{kind}-{size}")
    x = randn(gen, 2, 6, 5, 5)
    fwd, bwd = _make(kind, device, size, PARAMS[kind])
    y, dx, g = _run_returning(device, queue, fwd, bwd, x, gen)
    assert y.shape == x.shape and dx.shape == x.shape
    y_ref, dx_ref = reference(kind, x, g, size, PARAMS[kind], (fwd.offset.x, fwd.offset.y), y.shape[1:3])
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


@pytest.mark.parametrize("kind", ["cross", "spatial", "contrast"])
def test_defaults(device, queue, check, kind):
    """MPS's default parameters (LCN's alpha = 0 makes the variance term vanish)."""
    fwd, bwd = _make(kind, device, 3, {})
    expected = dict(alpha=0.0, beta=0.5, delta=2.0 ** -10, p0=1.0, pm=0.0, ps=1.0) if kind == "contrast" \
        else dict(alpha=1.0, beta=5.0, delta=1.0)
    for k in (fwd, bwd):
        for name, value in expected.items():
            assert getattr(k, name) == pytest.approx(value, rel=1e-7), name
    if kind == "cross":
        assert m.CNNCrossChannelNormalization(device).kernel_size == 5
        assert fwd.kernel_size == bwd.kernel_size == 3
    else:
        assert (fwd.kernel_width, fwd.kernel_height) == (3, 3) == (bwd.kernel_width, bwd.kernel_height)
    gen = rng(f"lnorm-defaults-{kind}")
    x = randn(gen, 1, 5, 4, 6)
    y, dx, g = _run_returning(device, queue, fwd, bwd, x, gen)
    y_ref, dx_ref = reference(kind, x, g, 3, expected, (fwd.offset.x, fwd.offset.y), y.shape[1:3])
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


@pytest.mark.parametrize("kind,size", [("cross", 3), ("cross", 4), ("spatial", 3), ("spatial", 4), ("contrast", 3),
                                       ("contrast", 2)])
def test_offsets_clip_and_channel_slices(device, queue, check, kind, size):
    """An explicit offset (windows partly off the image), a clip rectangle, source / destination
    feature-channel offsets and more than one channel quad; the gradient configured from the state
    writes dX over the whole source (zeros where no window reaches) and leaves the channels
    outside its slice alone."""
    gen = rng(f"lnorm-clip-{kind}-{size}")
    x = randn(gen, 1, 7, 6, 12)
    fwd, bwd = _make(kind, device, size, PARAMS[kind])
    y, dx, g = channel_slices_run(device, queue, gen, fwd, bwd, x, 7, (-1, 2, 0), (1, 7, 6, 16))
    y_ref, dx_ref = reference(kind, x[..., 4:11], g[:, 2:6, 1:4, 8:15], size, PARAMS[kind], (-1, 2), (4, 3))
    check_channel_slices(check, y, dx, y_ref, dx_ref, 7)


def test_cross_channel_alpha_over_n(device, queue, check):
    """The header's printed gradient carries alpha where the exact derivative carries alpha / N;
    with N = 5 the two differ by far more than the tolerance, and mpsgrad follows autograd."""
    gen = rng("lnorm-alpha-n")
    x = randn(gen, 1, 3, 3, 8)
    params = dict(alpha=2.0, beta=0.75, delta=1.0)
    fwd, bwd = _make("cross", device, 5, params)
    y, dx, g = _run_returning(device, queue, fwd, bwd, x, gen)
    y_ref, dx_ref = cross_reference(x, g, 5, params)
    check(dx, dx_ref, "gradient")
    # The header's form: dX = G L^-b - 2 a b X sum(G X L^(-b-1)) (alpha, not alpha / N).
    X = x.astype(np.float64)
    sq = np.pad(X * X, ((0, 0), (0, 0), (0, 0), (2, 2)))
    L = params["delta"] + params["alpha"] / 5 * sum(sq[..., i:i + 8] for i in range(5))
    t = np.pad(g * X * L ** (-params["beta"] - 1), ((0, 0), (0, 0), (0, 0), (2, 2)))
    header = g * L ** -params["beta"] - 2 * params["alpha"] * params["beta"] * X * sum(t[..., i:i + 8] for i in range(5))
    assert np.max(np.abs(header - dx_ref)) > 100 * 1e-4 * np.max(np.abs(dx_ref))


def test_deterministic(device, queue):
    """The same inputs give bitwise-identical results run to run."""
    gen = rng("lnorm-det")
    x = randn(gen, 2, 9, 8, 6)
    outs = []
    for _ in range(2):
        fwd, bwd = _make("contrast", device, 5, PARAMS["contrast"])
        y, dx, _ = _run_returning(device, queue, fwd, bwd, x, rng("lnorm-det-g"))
        outs.append((y, dx))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


# ---- errors -----------------------------------------------------------------------------------


def test_constructor_errors(device):
    for cls in (m.CNNLocalContrastNormalization, m.CNNLocalContrastNormalizationGradient,
                m.CNNSpatialNormalization, m.CNNSpatialNormalizationGradient):
        with pytest.raises(ValueError, match="kernel_width == kernel_height"):
            cls(device, 3, 5)
        with pytest.raises(ValueError, match="kernel_width"):
            cls(device, 0, 0)
        with pytest.raises(ValueError, match="kernel_height"):
            cls(device, 3, -1)
        with pytest.raises(TypeError, match="kernel_width"):
            cls(device, "3", 3)
    for cls in (m.CNNCrossChannelNormalization, m.CNNCrossChannelNormalizationGradient):
        with pytest.raises(ValueError, match="kernel_size"):
            cls(device, 0)
        with pytest.raises(TypeError, match="kernel_size"):
            cls(device, 2.5)
    k = m.CNNLocalContrastNormalization(device, 3, 3)
    with pytest.raises(TypeError, match="alpha"):
        k.alpha = "big"
    with pytest.raises(TypeError, match="p0"):
        k.p0 = None


@pytest.mark.parametrize("name,value,match", [("alpha", -1.0, "alpha: must be >= 0"), ("delta", 0.0, "delta"),
                                              ("beta", float("nan"), "beta: must be finite"),
                                              ("ps", float("inf"), "ps: must be finite")])
def test_bad_parameters_at_encode(device, queue, name, value, match):
    fwd = m.CNNLocalContrastNormalization(device, 3, 3)
    setattr(fwd, name, value)
    x = m.Image.from_numpy(np.zeros((1, 4, 4, 4), np.float32), device)
    with pytest.raises(ValueError, match=match):
        fwd.encode(queue.command_buffer(), x)


def test_clamp_edge_mode_is_refused(device, queue):
    fwd = m.CNNSpatialNormalization(device, 3, 3)
    fwd.edge_mode = m.ImageEdgeMode.CLAMP
    x = m.Image.from_numpy(np.zeros((1, 4, 4, 4), np.float32), device)
    with pytest.raises(ValueError, match="edge_mode: .*ZERO only"):
        fwd.encode(queue.command_buffer(), x)


def test_gradient_must_match_the_forward(device, queue):
    gen = rng("lnorm-mismatch")
    x = m.Image.from_numpy(randn(gen, 1, 4, 4, 4), device)
    g = m.Image.from_numpy(randn(gen, 1, 4, 4, 4), device)
    cb = queue.command_buffer()
    fwd = m.CNNSpatialNormalization(device, 3, 3)
    y, state = fwd.encode(cb, x, destination_state_is_temporary=False)
    other = m.CNNSpatialNormalizationGradient(device, 3, 3)
    other.beta = 2.0
    with pytest.raises(ValueError, match="every parameter must match"):
        other.encode(cb, g, x, state)
    with pytest.raises(ValueError, match="3x3 window .* has 5x5"):
        m.CNNSpatialNormalizationGradient(device, 5, 5).encode(cb, g, x, state)
    with pytest.raises(TypeError, match="state of a CNNLocalContrastNormalization"):
        m.CNNLocalContrastNormalizationGradient(device, 3, 3).encode(cb, g, x, state)
    pool_state = m.CNNPoolingMax(device, 2, 2).result_state(x)
    with pytest.raises(TypeError, match="CNNLocalNormalizationGradientState"):
        m.CNNSpatialNormalizationGradient(device, 3, 3).encode(cb, g, x, pool_state)
    small = m.Image.from_numpy(randn(gen, 1, 3, 4, 4), device)
    with pytest.raises(ValueError, match="source_image"):
        m.CNNSpatialNormalizationGradient(device, 3, 3).encode(cb, g, small, state)
    cb.commit()
    cb.wait_until_completed()
