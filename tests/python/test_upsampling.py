"""CNNUpsamplingNearest / CNNUpsamplingBilinear and their gradients against PyTorch autograd (float64).

Oracle: ``F.interpolate`` with ``scale_factor`` (nearest; bilinear with align_corners True and
False, the latter being mpsgrad's default HALF_PIXEL rule) and autograd through it. The
ASYMMETRIC rule (src = dst / scale, no PyTorch mode) is checked against float64 central finite
differences of an independent NumPy forward. Shapes: non-square, scale factors 1..4 and unequal,
channel counts 3, 5 (partial quads) and 36 (more than a simdgroup of quads per pixel row), batches.

Bound: relative error <= 1e-4 (a blend of four float32 values, against float64).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import forward_and_gradient, randn, random_like_result, rng

SCALES = [(1, 1), (2, 2), (3, 2), (1, 4)]


def _torch_reference(x, g, sx, sy, mode, align):
    X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    kwargs = {} if mode == "nearest" else {"align_corners": align}
    Y = F.interpolate(X, scale_factor=(sy, sx), mode=mode, **kwargs)
    (Y * torch.tensor(g, dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
    return Y.detach().permute(0, 2, 3, 1).numpy(), X.grad.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("channels", [3, 36])
@pytest.mark.parametrize("scale", SCALES, ids=[f"{a}x{b}" for a, b in SCALES])
@pytest.mark.parametrize("mode,align", [("nearest", False), ("bilinear", False), ("bilinear", True)],
                         ids=["nearest", "bilinear", "bilinear_align_corners"])
def test_upsampling_matches_torch(device, queue, check, mode, align, scale, channels):
    sx, sy = scale
    gen = rng(f"up-{mode}-{align}-{scale}-{channels}")
    x = randn(gen, 2, 4, 5, channels)
    if mode == "nearest":
        fwd, bwd = m.CNNUpsamplingNearest(device, sx, sy), m.CNNUpsamplingNearestGradient(device, sx, sy)
    else:
        fwd, bwd = m.CNNUpsamplingBilinear(device, sx, sy, align), m.CNNUpsamplingBilinearGradient(device, sx, sy)
        assert fwd.align_corners == align
    y, dx, g, states = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, x.shape[0]))
    assert y.shape == (2, 4 * sy, 5 * sx, channels)
    assert all(isinstance(s, m.CNNUpsamplingGradientState) for s in states)
    y_ref, dx_ref = _torch_reference(x, g, sx, sy, mode, align)
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


def _asymmetric_forward(x, sx, sy):
    """float64 NumPy bilinear with src = dst / scale (independent of the library)."""
    n, h, w, c = x.shape
    out = np.zeros((n, h * sy, w * sx, c))
    for oy in range(h * sy):
        fy = oy / sy
        y0 = min(int(fy), h - 1)
        y1, ly = min(y0 + 1, h - 1), fy - y0
        for ox in range(w * sx):
            fx = ox / sx
            x0 = min(int(fx), w - 1)
            x1, lx = min(x0 + 1, w - 1), fx - x0
            out[:, oy, ox] = (1 - ly) * ((1 - lx) * x[:, y0, x0] + lx * x[:, y0, x1]) + \
                ly * ((1 - lx) * x[:, y1, x0] + lx * x[:, y1, x1])
    return out


def test_bilinear_asymmetric_against_finite_differences(device, queue, check):
    sx, sy = 3, 2
    gen = rng("up-asym")
    x = randn(gen, 1, 3, 4, 5)
    fwd, bwd = m.CNNUpsamplingBilinear(device, sx, sy), m.CNNUpsamplingBilinearGradient(device, sx, sy)
    fwd.coordinate_mode = m.UpsamplingCoordinateMode.ASYMMETRIC
    y, dx, g, states = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, x.shape[0]))
    assert states[0].coordinate_mode == m.UpsamplingCoordinateMode.ASYMMETRIC
    check(y, _asymmetric_forward(x.astype(np.float64), sx, sy), "forward")
    # The forward is linear, so central differences with any step are exact up to rounding.
    x64 = x.astype(np.float64)
    numeric = np.zeros_like(x64)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x64)
        e[idx] = 0.5
        numeric[idx] = np.sum((_asymmetric_forward(x64 + e, sx, sy) - _asymmetric_forward(x64 - e, sx, sy)) * g)
    check(dx, numeric, "gradient")


def test_offsets_clip_and_channel_slices(device, queue, check):
    """A source offset (the input is the source from the offset on), a clip rectangle, channel
    offsets; the gradient configured from the state writes dX over the whole source, zeros outside
    the input, and reads G where the forward pass wrote."""
    gen = rng("up-clip")
    x = randn(gen, 1, 6, 7, 10)
    sentinel = 3.5
    fwd = m.CNNUpsamplingBilinear(device, 2, 2, True)
    fwd.offset = (2, 1, 0)                       # input = rows 1..5, columns 2..6 (5 x 5)
    fwd.source_feature_channel_offset = 4
    fwd.destination_feature_channel_offset = 4   # channels 4..9 -> 4..9
    fwd.clip_rect = m.Region((1, 0, 0), (10, 10, 1))
    X = m.Image.from_numpy(x, device)
    Y = m.Image.from_numpy(np.full((1, 11, 12, 12), sentinel, np.float32), device)
    cb = queue.command_buffer()
    state = fwd.temporary_result_state(cb, X)
    fwd.encode(cb, X, state, Y)
    g = randn(gen, 1, 11, 12, 12)
    G = m.Image.from_numpy(g, device)
    bwd = m.CNNUpsamplingBilinearGradient(device, 2, 2)
    desc = bwd.destination_image_descriptor([G, X], [state])
    assert (desc.width, desc.height, desc.feature_channels) == (7, 6, 10)
    dX = m.Image.from_numpy(np.full((1, 6, 7, 10), sentinel, np.float32), device)
    bwd.encode(cb, G, X, state, dX)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED

    y_ref, dx_ref = _torch_reference(x[:, 1:6, 2:7, 4:10], g[:, 0:10, 1:11, 4:10], 2, 2, "bilinear", True)
    yo = Y.to_numpy()[0]
    check(yo[0:10, 1:11, 4:10], y_ref[0], "forward")
    outside = np.ones(yo.shape, bool)
    outside[0:10, 1:11, 4:10] = False
    assert np.all(yo[outside] == sentinel)
    dxo = dX.to_numpy()[0]
    check(dxo[1:6, 2:7, 4:10], dx_ref[0], "gradient")
    assert np.all(dxo[0, :, 4:10] == 0) and np.all(dxo[:, 0:2, 4:10] == 0)  # outside the input
    assert np.all(dxo[..., :4] == sentinel)


def test_bad_upsampling_inputs(device, queue):
    gen = rng("up-bad")
    for cls in (m.CNNUpsamplingNearest, m.CNNUpsamplingNearestGradient, m.CNNUpsamplingBilinearGradient):
        with pytest.raises(ValueError, match="integer_scale_factor_x"):
            cls(device, 0, 2)
        with pytest.raises(ValueError, match="integer_scale_factor_y"):
            cls(device, 2, -3)
    with pytest.raises(ValueError, match="integer_scale_factor_x"):
        m.CNNUpsamplingBilinear(device, 0, 1, True)
    X = m.Image.from_numpy(randn(gen, 1, 3, 3, 4), device)
    cb = queue.command_buffer()
    y, nearest_state = m.CNNUpsamplingNearest(device, 2, 2).encode(cb, X, destination_state_is_temporary=False)
    G = m.Image.from_numpy(randn(gen, *y.shape), device)
    with pytest.raises(TypeError, match="CNNUpsamplingBilinear"):
        m.CNNUpsamplingBilinearGradient(device, 2, 2).encode(cb, G, X, nearest_state)
    with pytest.raises(ValueError, match="scaled by"):
        m.CNNUpsamplingNearestGradient(device, 3, 2).encode(cb, G, X, nearest_state)
    _, pool_state = m.CNNPoolingMax(device, 2, 2).encode(cb, X, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="CNNUpsamplingGradientState"):
        m.CNNUpsamplingNearestGradient(device, 2, 2).encode(cb, G, X, pool_state)
    with pytest.raises(ValueError, match="source_image"):
        m.CNNUpsamplingNearestGradient(device, 2, 2).encode(
            cb, G, m.Image.from_numpy(randn(gen, 1, 4, 3, 4), device), nearest_state)
    up = m.CNNUpsamplingNearest(device, 2, 2)
    up.offset = (3, 0, 0)
    with pytest.raises(ValueError, match="offset"):
        up.encode(cb, X, destination_image=m.Image.from_numpy(np.zeros((1, 6, 6, 4), np.float32), device))
    dx = m.CNNUpsamplingNearestGradient(device, 2, 2).encode(cb, G, X, nearest_state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert dx.shape == (1, 3, 3, 4)
