"""The pooling family (max, average, L2-norm, dilated max) and its gradients against PyTorch autograd
(float64).

The MPS window placement is mapped explicitly: the window of destination pixel j is centered at
offset + stride * j, its taps start at center - (E >> 1) with E = (k - 1) * dilation + 1. The
reference reads the source over exactly the span the windows cover, with off-image reads made
explicit (zeros for ImageEdgeMode.ZERO, replicated edge pixels for CLAMP), then runs
``max_pool2d`` (with dilation) / ``lp_pool2d`` (p = 2) / a window sum over a window count
(``avg_pool2d`` with ``divisor_override=1`` applied to the data and to a mask of the counting
band, which is how ``count_include_pad`` and Caffe's exclude-edges rule are both expressed).
Gradients come from autograd through the same graph, so the routing of clamped reads and the
count of every window are PyTorch's, not ours.

Bound: relative error <= 1e-4 (float32 sums of at most 9 taps, against float64).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import channel_slices_run, check_channel_slices, forward_and_gradient, randn, random_like_result, rng

# (kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y)
CONFIGS = {
    "k2s2": (2, 2, 2, 2, 1, 1),      # even window, stride = window
    "k3s2": (3, 3, 2, 2, 1, 1),      # odd window, stride < window
    "k3x2s1x2": (3, 2, 1, 2, 1, 1),  # non-square window, mixed strides
    "k2x3s3": (2, 3, 3, 3, 1, 1),    # stride > window: some pixels get no gradient
}
DILATED = {
    "k2d3": (2, 2, 1, 1, 3, 3),      # the header's example: taps -2 and +1 around the center
    "k3x2d2x3s2": (3, 2, 2, 1, 2, 3),
}
KINDS = {
    "max": (m.CNNPoolingMax, m.CNNPoolingMaxGradient),
    "average": (m.CNNPoolingAverage, m.CNNPoolingAverageGradient),
    "l2": (m.CNNPoolingL2Norm, m.CNNPoolingL2NormGradient),
    "dilated": (m.CNNDilatedPoolingMax, m.CNNDilatedPoolingMaxGradient),
}


def _make(kind, device, cfg):
    kw, kh, sx, sy, dx, dy = cfg
    fwd_cls, bwd_cls = KINDS[kind]
    if kind == "dilated":
        return (fwd_cls(device, kw, kh, dx, dy, sx, sy), bwd_cls(device, kw, kh, dx, dy, sx, sy))
    return fwd_cls(device, kw, kh, sx, sy), bwd_cls(device, kw, kh, sx, sy)


def _reads(X, left, top, span_w, span_h, edge):
    """X (N, C, H, W) over columns [left, left + span_w) and rows [top, top + span_h); off-image reads
    are zeros ('zero') or the nearest pixel ('clamp')."""
    H, W = X.shape[2], X.shape[3]
    pl, pt = max(0, -left), max(0, -top)
    pr, pb = max(0, left + span_w - W), max(0, top + span_h - H)
    X = F.pad(X, (pl, pr, pt, pb), mode="replicate" if edge == "clamp" else "constant")
    return X[:, :, top + pt:top + pt + span_h, left + pl:left + pl + span_w]


def pool_reference(kind, x_nhwc, g_nhwc, cfg, offset, out_hw, edge="zero", band=False, zero_pad=(0, 0)):
    """Y and dL/dX (NHWC float64) of MPS pooling, L = sum(Y * G)."""
    kw, kh, sx, sy, dx, dy = cfg
    ew, eh = (kw - 1) * dx + 1, (kh - 1) * dy + 1
    oh, ow = out_hw
    left, top = offset[0] - (ew >> 1), offset[1] - (eh >> 1)
    span_w, span_h = (ow - 1) * sx + ew, (oh - 1) * sy + eh
    X = torch.tensor(x_nhwc, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    if kind in ("max", "dilated"):
        Y = F.max_pool2d(_reads(X, left, top, span_w, span_h, edge), (kh, kw), (sy, sx), dilation=(dy, dx))
    elif kind == "l2":
        Y = F.lp_pool2d(_reads(X, left, top, span_w, span_h, edge), 2, (kh, kw), (sy, sx))
    else:
        # Off-image taps add nothing in either edge mode; they count unless outside the band.
        S = F.avg_pool2d(_reads(X, left, top, span_w, span_h, "zero"), (kh, kw), (sy, sx), divisor_override=1)
        if band:
            H, W = x_nhwc.shape[1], x_nhwc.shape[2]
            cols = torch.arange(left, left + span_w)
            rows = torch.arange(top, top + span_h)
            inside = ((rows >= -zero_pad[1]) & (rows <= H - 1 + zero_pad[1]))[:, None] & \
                     ((cols >= -zero_pad[0]) & (cols <= W - 1 + zero_pad[0]))[None, :]
            count = F.avg_pool2d(inside.double()[None, None], (kh, kw), (sy, sx), divisor_override=1)
            Y = torch.where(count > 0, S / count.clamp(min=1), torch.zeros_like(S))
        else:
            Y = S / (kw * kh)
    G = torch.tensor(g_nhwc, dtype=torch.float64).permute(0, 3, 1, 2)
    (Y * G).sum().backward()
    return Y.detach().permute(0, 2, 3, 1).numpy(), X.grad.permute(0, 2, 3, 1).numpy()


CASES = [(k, c) for k in ("max", "average", "l2") for c in CONFIGS] + [("dilated", c) for c in DILATED]


@pytest.mark.parametrize("edge", ["zero", "clamp"])
@pytest.mark.parametrize("kind,config", CASES)
def test_pooling_matches_torch(device, queue, check, kind, config, edge):
    cfg = {**CONFIGS, **DILATED}[config]
    gen = rng(f"pool-{kind}-{config}-{edge}")
    x = randn(gen, 2, 7, 10, 5)  # non-square, channels not a multiple of 4, a batch of 2
    fwd, bwd = _make(kind, device, cfg)
    fwd.edge_mode = m.ImageEdgeMode.CLAMP if edge == "clamp" else m.ImageEdgeMode.ZERO
    y, dx, g, states = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, 2))
    assert all(isinstance(s, m.CNNPoolingGradientState) for s in states)
    offset = (fwd.offset.x, fwd.offset.y)
    y_ref, dx_ref = pool_reference(kind, x, g, cfg, offset, y.shape[1:3], edge, band=(edge == "clamp"))
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


@pytest.mark.parametrize("kind", ["max", "average", "l2", "dilated"])
def test_offsets_clip_and_channel_slices(device, queue, check, kind):
    """An explicit offset (window partly off the image), a clip rectangle, source/destination
    feature-channel offsets and more channels than one quad; the gradient configured from the
    state writes dX over the whole source, zeros where no window reaches, and leaves the channels
    outside its slice alone."""
    cfg = (3, 2, 2, 2, 2, 1) if kind == "dilated" else (3, 2, 2, 2, 1, 1)
    gen = rng(f"pool-clip-{kind}")
    x = randn(gen, 1, 9, 8, 44)
    fwd, bwd = _make(kind, device, cfg)
    y, dx, g = channel_slices_run(device, queue, gen, fwd, bwd, x, 37, (-1, 1, 0), (1, 7, 6, 48))
    assert bwd.source_size[:2] == (3, 4)
    y_ref, dx_ref = pool_reference(kind, x[..., 4:41], g[:, 2:6, 1:4, 8:45], cfg, (-1, 1), (4, 3))
    check_channel_slices(check, y, dx, y_ref, dx_ref, 37)


@pytest.mark.parametrize("zero_pad", [(0, 0), (1, 0), (2, 1)])
@pytest.mark.parametrize("exclude_edges", [False, True])
def test_average_counting_band(device, queue, check, zero_pad, exclude_edges):
    """Average pooling's N: CLAMP counts the taps inside the image widened by zero_pad_size (taps
    in the band add 0 but count, windows outside it give 0); ZERO with the EXCLUDE_EDGES padding bit
    does the same (Caffe); plain ZERO counts every tap (PyTorch's count_include_pad)."""
    cfg = (4, 3, 1, 2, 1, 1)
    gen = rng(f"pool-band-{zero_pad}-{exclude_edges}")
    x = randn(gen, 1, 6, 5, 3)
    fwd, bwd = _make("average", device, cfg)
    fwd.zero_pad_size_x, fwd.zero_pad_size_y = zero_pad
    if exclude_edges:
        fwd.padding = m.NNDefaultPadding(m.PaddingMethod.SIZE_FULL | m.PaddingMethod.EXCLUDE_EDGES)
    else:
        fwd.padding = m.NNDefaultPadding(m.PaddingMethod.SIZE_FULL)
        fwd.edge_mode = m.ImageEdgeMode.CLAMP
    y, dx, g, states = forward_and_gradient(device, queue, fwd, bwd, x, random_like_result(gen, 1))
    assert (states[0].zero_pad_size_x, states[0].zero_pad_size_y) == zero_pad
    assert (bwd.zero_pad_size_x, bwd.zero_pad_size_y) == zero_pad
    y_ref, dx_ref = pool_reference("average", x, g, cfg, (fwd.offset.x, fwd.offset.y), y.shape[1:3],
                                   band=True, zero_pad=zero_pad)
    check(y, y_ref, "forward")
    check(dx, dx_ref, "gradient")


def test_max_ties_go_to_the_first_tap_in_scan_order(device, queue):
    """A constant image: every window ties; the gradient of each window goes to its top-left tap."""
    x = np.full((1, 4, 4, 4), 2.0, np.float32)
    fwd, bwd = _make("max", device, (2, 2, 2, 2, 1, 1))
    fwd.offset = (1, 1, 0)  # windows [0,1] x [0,1], [2,3] x ...
    y, dx, g, _ = forward_and_gradient(device, queue, fwd, bwd, x, lambda shape: np.ones(shape, np.float32))
    expected = np.zeros((4, 4), np.float32)
    expected[0::2, 0::2] = 1.0
    assert np.all(y == 2.0)
    for c in range(4):
        np.testing.assert_array_equal(dx[0, :, :, c], expected)


def test_gradient_is_bitwise_reproducible(device, queue):
    gen = rng("pool-repro")
    x = randn(gen, 2, 9, 9, 7)
    results = []
    for _ in range(2):
        fwd, bwd = _make("average", device, (3, 3, 1, 1, 1, 1))
        _, dx, _, _ = forward_and_gradient(device, queue, fwd, bwd, x, lambda shape: np.linspace(
            -1, 1, 2 * int(np.prod(shape)), dtype=np.float32).reshape((2,) + tuple(shape[1:])))
        results.append(dx)
    assert results[0].tobytes() == results[1].tobytes()


def test_bad_pooling_inputs(device, queue):
    gen = rng("pool-bad")
    X = m.Image.from_numpy(randn(gen, 1, 6, 6, 4), device)
    for kwargs, name in [(dict(kernel_width=0, kernel_height=2), "kernel_width"),
                         (dict(kernel_width=2, kernel_height=-1), "kernel_height"),
                         (dict(kernel_width=2, kernel_height=2, stride_in_pixels_x=0), "stride_in_pixels_x"),
                         (dict(kernel_width=2, kernel_height=2, stride_in_pixels_y=0), "stride_in_pixels_y")]:
        with pytest.raises(ValueError, match=name):
            m.CNNPoolingMax(device, **kwargs)
        with pytest.raises(ValueError, match=name):
            m.CNNPoolingAverageGradient(device, **kwargs)
    with pytest.raises(ValueError, match="dilation_rate_x"):
        m.CNNDilatedPoolingMax(device, 2, 2, 0, 1, 1, 1)
    with pytest.raises(TypeError):
        m.CNNPoolingMax(device, "2", 2)

    cb = queue.command_buffer()
    y_max, max_state = m.CNNPoolingMax(device, 2, 2, 2, 2).encode(cb, X, destination_state_is_temporary=False)
    _, avg_state = m.CNNPoolingAverage(device, 2, 2, 2, 2).encode(cb, X, destination_state_is_temporary=False)
    G = m.Image.from_numpy(randn(gen, *y_max.shape), device)
    with pytest.raises(TypeError, match="CNNPoolingMax"):
        m.CNNPoolingMaxGradient(device, 2, 2, 2, 2).encode(cb, G, X, avg_state)
    with pytest.raises(ValueError, match="window"):
        m.CNNPoolingMaxGradient(device, 3, 3, 2, 2).encode(cb, G, X, max_state)
    _, neuron_state = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU)).encode(
        cb, X, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="CNNPoolingGradientState"):
        m.CNNPoolingMaxGradient(device, 2, 2, 2, 2).encode(cb, G, X, neuron_state)
    with pytest.raises(ValueError, match="source_image"):
        m.CNNPoolingMaxGradient(device, 2, 2, 2, 2).encode(
            cb, G, m.Image.from_numpy(randn(gen, 1, 5, 6, 4), device), max_state)
    avg = m.CNNPoolingAverage(device, 2, 2)
    avg.zero_pad_size_x = -1
    with pytest.raises(ValueError, match="zero_pad_size_x"):
        avg.encode(cb, X)
    bad_edge = m.CNNPoolingMax(device, 2, 2)
    bad_edge.edge_mode = m.ImageEdgeMode.MIRROR
    with pytest.raises(ValueError, match="edge_mode"):
        bad_edge.encode(cb, X)
    with pytest.raises(ValueError, match="source_size"):
        grad = m.CNNPoolingMaxGradient(device, 2, 2, 2, 2)
        grad.source_size = (-1, 2)
    dx = m.CNNPoolingMaxGradient(device, 2, 2, 2, 2).encode(cb, G, X, max_state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert dx.shape == (1, 6, 6, 4)
