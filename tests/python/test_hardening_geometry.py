"""Regression tests of issue 28 (Hardening II), root causes 1, 2 and 5: window geometry.

1. Convolution windows whose later taps leave int32 (the kernel classes checked only the first
   tap): an offset, clip origin, kernel offset or primary / secondary offset near 2**31 used to
   read far out of bounds at the wait (SIGSEGV). backend/binding_checks.cpp now checks every axis
   of every window op whole; these must raise ValueError.
2. Windows at the documented size limit: pooling and spatial / local contrast normalization
   visited every tap, off-image ones included (a 2**20 x 2**20 window over a 1 x 1 image is 10**12
   taps, hours). The kernels now visit only in-image taps (and one tap per off-image run where
   off-image reads matter), so such an op finishes at once with the values of the formula; windows
   much larger than the image still match the PyTorch / NumPy oracles of the family tests in both
   edge modes. Pooling windows of more than 2**31 - 1 taps are refused (docs/pooling.md).
5. Integer overflow before the checked arithmetic: CNNConcatenation.range_starts with negative
   counts or counts near 2**63, NNReductionSpatialMean.clip_rect_source with an origin near -2**63
   and a size that (nearly) makes up for it.

Where the old behaviour was a crash or a hang the reproduction runs in a subprocess with a
timeout (run_isolated), on every device of the build.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import persistent, forward_and_gradient, randn, random_like_result, rng
from test_hardening import run_isolated

# ---- 1: convolution windows overflowing int32 ----------------------------------------------------

# The snippet's prelude: a 4x4x4 image, a kw x kh convolution, and `expect_value_error(encode)`,
# which requires a ValueError from the encode or at the wait (never a completed run, never a crash).
_CONV_PRELUDE = """
    import pytest
    q = m.CommandQueue(dev)
    x = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), dev)
    def source(kw, kh):
        d = m.CNNConvolutionDescriptor(kernel_width=kw, kernel_height=kh, input_feature_channels=4,
                                       output_feature_channels=4)
        w = np.random.default_rng(0).standard_normal((4, kh, kw, 4)).astype(np.float32)
        return m.CNNConvolutionWeightsDataSource(d, w, np.zeros(4, np.float32))
    def expect_value_error(encode):
        cb = q.command_buffer()
        with pytest.raises(ValueError):
            encode(cb)
            cb.commit()
            cb.wait_until_completed()
"""


def test_1_convolution_offset_whose_second_tap_overflows(device):
    run_isolated(_CONV_PRELUDE + """
    conv = m.CNNConvolution(dev, source(2, 1))
    conv.offset = (2**31, 0, 0)   # first tap 2**31 - 1 fits int32, the second does not
    expect_value_error(lambda cb: conv.encode(cb, x, destination_image=m.Image(dev, m.ImageDescriptor(4, 4, 4))))
    """, device.name)


def test_1_convolution_clip_origin_far_left(device):
    run_isolated(_CONV_PRELUDE + """
    conv = m.CNNConvolution(dev, source(3, 1))
    conv.clip_rect = ((-2**31, 0, 0), (2**32, 4, 1))   # the clipped windows start at 2**31 - 1
    expect_value_error(lambda cb: conv.encode(cb, x, destination_image=m.Image(dev, m.ImageDescriptor(4, 4, 4))))
    """, device.name)


@pytest.mark.parametrize("field", ["offset", "kernel_offset_x"])
def test_1_convolution_transpose_near_int32_max(device, field):
    run_isolated(_CONV_PRELUDE + f"""
    conv = m.CNNConvolutionTranspose(dev, source(3, 3))
    if {field!r} == "offset":
        conv.offset = (2**31 - 1, 0, 0)
    else:
        conv.kernel_offset_x = 2**31 - 1
    expect_value_error(lambda cb: conv.encode(cb, x, destination_image=m.Image(dev, m.ImageDescriptor(4, 4, 4))))
    """, device.name)


@pytest.mark.parametrize("field", ["kernel_offset_x", "primary_offset", "secondary_offset"])
def test_1_convolution_gradient_near_int32_max(device, field):
    run_isolated(_CONV_PRELUDE + f"""
    ds = source(3, 3)
    conv, grad = m.CNNConvolution(dev, ds), m.CNNConvolutionGradient(dev, ds)
    cb = q.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    e = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), dev)
    grad.destination_image_descriptor([e, x], [state])
    if {field!r} == "kernel_offset_x":
        grad.kernel_offset_x = 2**31 - 1
    else:
        setattr(grad, {field!r}, (2**31 - 1, 0, 0))
    with pytest.raises(ValueError):
        grad.encode(cb, e, x, state, m.Image(dev, m.ImageDescriptor(4, 4, 4)))
        cb.commit()
        cb.wait_until_completed()
    """, device.name)


def test_1_in_range_offsets_still_run(device, queue):
    """The check is on coordinates, not on offsets being unusual: a window far off the image (but
    within +-2**29) reads zeros and runs."""
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=4,
                                   output_feature_channels=4)
    w = randn(rng("geom-in-range"), 4, 3, 3, 4)
    conv = m.CNNConvolution(device, m.CNNConvolutionWeightsDataSource(d, w, np.zeros(4, np.float32)))
    conv.offset = (2**28, -2**28, 0)
    x = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device)
    y = m.Image(device, m.ImageDescriptor(4, 4, 4))
    cb = queue.command_buffer()
    conv.encode(cb, x, destination_image=y)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy(), 0.0)


# ---- 2: windows at the documented limit over a small image -----------------------------------------

# A 2**20 x 2047 pooling window (2**31 - 2**20 taps, just under the per-window limit) over a 1 x 1
# image, 4 x 4 outputs: 2**35 taps before the fix. Values: the formula of pooling_params.h.
_HUGE_POOL = """
    q = m.CommandQueue(dev)
    KW, KH = 2**20, 2047
    xv = np.array([[[[1.5, -2.0, 0.25, -0.5]]]], np.float32)
    x = m.Image.from_numpy(xv, dev)
    def run(fwd, bwd, edge):
        fwd.edge_mode = edge
        fwd.offset = (0, 0, 0)
        fwd.destination_image_allocator = m.ImageAllocator.persistent()
        bwd.destination_image_allocator = m.ImageAllocator.persistent()
        y = m.Image(dev, m.ImageDescriptor(4, 4, 4))
        cb = q.command_buffer()
        state = fwd.result_state(x)
        fwd.encode(cb, x, destination_image=y, destination_state=state)
        g = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), dev)
        dx = bwd.encode(cb, g, x, state)
        cb.commit()
        cb.wait_until_completed()
        return y.to_numpy()[0], dx.to_numpy()[0, 0, 0]
"""


@pytest.mark.parametrize("kind", ["max", "average", "l2"])
@pytest.mark.parametrize("edge", ["zero", "clamp"])
def test_2_pooling_window_at_the_limit_over_one_pixel(device, kind, edge):
    run_isolated(_HUGE_POOL + f"""
    kind, edge = {kind!r}, {edge!r}
    classes = dict(max=(m.CNNPoolingMax, m.CNNPoolingMaxGradient), average=(m.CNNPoolingAverage,
                   m.CNNPoolingAverageGradient), l2=(m.CNNPoolingL2Norm, m.CNNPoolingL2NormGradient))[kind]
    fwd, bwd = (cls(dev, KW, KH, 1, 1) for cls in classes)
    e = m.ImageEdgeMode.CLAMP if edge == "clamp" else m.ImageEdgeMode.ZERO
    y, dx = run(fwd, bwd, e)
    x0 = xv[0, 0, 0].astype(np.float64)
    taps = float(KW) * KH
    if kind == "max":
        # Zero edges: off-image taps read 0 (they come first in scan order); clamp: all read x.
        want = np.maximum(x0, 0.0) if edge == "zero" else x0
        # The 16 windows' argmax lands on the pixel where x wins (ties: the earlier, off-image, tap).
        want_dx = np.where(x0 > 0, 16.0, 0.0) if edge == "zero" else np.full(4, 16.0)
    elif kind == "average":
        n = taps if edge == "zero" else 1.0   # clamp counts only the in-band (here: in-image) taps
        want, want_dx = x0 / n, np.full(4, 16.0 / n)
    else:
        norm = np.abs(x0) * (1.0 if edge == "zero" else np.sqrt(taps))
        want = norm
        want_dx = 16.0 * x0 / norm * (1.0 if edge == "zero" else taps)
    np.testing.assert_allclose(y, np.broadcast_to(want, y.shape), rtol=1e-5)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4)
    """, device.name, timeout=60)


def test_2_pooling_windows_beyond_the_tap_limit_are_refused(device):
    with pytest.raises(ValueError, match="kernel_width \\* kernel_height"):
        m.CNNPoolingMax(device, 2**20, 2**20, 1, 1)
    with pytest.raises(ValueError, match="kernel_width \\* kernel_height"):
        m.CNNPoolingAverageGradient(device, 2**20, 2**11, 1, 1)


@pytest.mark.parametrize("kind", ["spatial", "contrast"])
def test_2_normalization_window_at_the_limit_over_one_pixel(device, kind):
    run_isolated(f"""
    kind = {kind!r}
    q = m.CommandQueue(dev)
    K = 2**20
    xv = np.array([[[[1.5, -2.0, 0.25, -0.5]]]], np.float32)
    x = m.Image.from_numpy(xv, dev)
    cls = dict(spatial=(m.CNNSpatialNormalization, m.CNNSpatialNormalizationGradient),
               contrast=(m.CNNLocalContrastNormalization, m.CNNLocalContrastNormalizationGradient))[kind]
    fwd, bwd = cls[0](dev, K, K), cls[1](dev, K, K)
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    bwd.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    y, state = fwd.encode(cb, x, destination_state_is_temporary=False)
    dx = bwd.encode(cb, m.Image.from_numpy(np.ones((1, 1, 1, 4), np.float32), dev), x, state)
    cb.commit()
    cb.wait_until_completed()
    x0 = xv[0, 0, 0].astype(np.float64)
    n = float(K) * K
    if kind == "spatial":
        t = fwd.delta + fwd.alpha / n * x0 * x0
        want = x0 * t ** -fwd.beta
    else:
        mean = x0 / n
        v = ((x0 - mean) ** 2 + (n - 1) * mean * mean) / n
        want = fwd.pm + fwd.ps * (x0 - fwd.p0 * mean) * (fwd.delta + fwd.alpha * v) ** -fwd.beta
    np.testing.assert_allclose(y.to_numpy()[0, 0, 0], want, rtol=1e-5)
    assert np.all(np.isfinite(dx.to_numpy()))
    """, device.name, timeout=60)


# Windows much larger than the image, with strides and dilation, in both edge modes: the visited
# taps stand for the whole window (the oracles of the family tests see every tap).
OVERSIZED_POOLING = {"k9x7s2x3": (9, 7, 2, 3, 1, 1), "k6x5s1": (6, 5, 1, 1, 1, 1)}
OVERSIZED_DILATED = {"k4x3d3x2": (4, 3, 1, 1, 3, 2)}


@pytest.mark.parametrize("edge", ["zero", "clamp"])
@pytest.mark.parametrize("kind,config", [(k, c) for k in ("max", "average", "l2") for c in OVERSIZED_POOLING] +
                         [("dilated", c) for c in OVERSIZED_DILATED])
def test_2_oversized_pooling_windows_match_torch(device, queue, check, kind, config, edge):
    from test_pooling import _make, pool_reference
    cfg = {**OVERSIZED_POOLING, **OVERSIZED_DILATED}[config]
    gen = rng(f"geom-pool-{kind}-{config}-{edge}")
    x = randn(gen, 2, 3, 4, 5)
    fwd, bwd = _make(kind, device, cfg)
    fwd.edge_mode = m.ImageEdgeMode.CLAMP if edge == "clamp" else m.ImageEdgeMode.ZERO
    y, dx, g, _ = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, 2))
    y_ref, dx_ref = pool_reference(kind, x, g, cfg, (fwd.offset.x, fwd.offset.y), y.shape[1:3], edge,
                                   band=(edge == "clamp"))
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


@pytest.mark.parametrize("kind", ["spatial", "contrast"])
def test_2_oversized_normalization_windows_match_reference(device, queue, check, kind):
    from test_local_normalization import PARAMS, _make, _run_returning, reference
    gen = rng(f"geom-lnorm-{kind}")
    x = randn(gen, 1, 3, 2, 5)
    fwd, bwd = _make(kind, device, 7, PARAMS[kind])
    y, dx, g = _run_returning(device, queue, fwd, bwd, x, gen)
    y_ref, dx_ref = reference(kind, x, g, 7, PARAMS[kind], (fwd.offset.x, fwd.offset.y), y.shape[1:3])
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


# ---- 5: integer overflow before the checked arithmetic -------------------------------------------


@pytest.mark.parametrize("channels", [[-5, 4], [4, -1, 4], [2**63 - 2, 4], [2**62, 2**62, 4]])
def test_5_concatenation_range_starts_reject_bad_counts(channels):
    with pytest.raises(ValueError, match="channels"):
        m.CNNConcatenation.range_starts(channels)


def test_5_concatenation_range_starts_still_round_up():
    assert m.CNNConcatenation.range_starts([3, 4, 1, 8]) == [0, 4, 8, 12]


def _spatial_mean(device, queue, rect):
    x = m.Image.from_numpy(np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4), device)
    k = persistent(m.NNReductionSpatialMean(device))
    k.clip_rect_source = m.Region(*rect)
    cb = queue.command_buffer()
    y = k.encode(cb, x)
    cb.commit()
    cb.wait_until_completed()
    return y.to_numpy().ravel()


def test_5_spatial_mean_far_negative_origin_selecting_nothing_raises(device, queue):
    # origin + size = 0: no column is selected (it used to average the whole row).
    with pytest.raises(ValueError, match="clip_rect_source"):
        _spatial_mean(device, queue, ((-2**63, 0, 0), (2**63, 1, 1)))


def test_5_spatial_mean_far_negative_origin_reaching_column_0(device, queue):
    # origin + size = 1: column 0 only, channels 0..3 of pixel (0, 0).
    np.testing.assert_array_equal(_spatial_mean(device, queue, ((-2**63, 0, 0), (2**63 + 1, 1, 1))),
                                  [0.0, 1.0, 2.0, 3.0])


def test_5_spatial_mean_no_clip_still_covers_the_image(device, queue):
    # RECT_NO_CLIP's huge size from origin 0 still reaches the image's end.
    got = _spatial_mean(device, queue, ((0, 0, 0), (2**64 - 1, 2**64 - 1, 2**64 - 1)))
    np.testing.assert_allclose(got, np.arange(12, dtype=np.float64).reshape(3, 4).mean(axis=0))
