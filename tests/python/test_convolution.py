"""CNNConvolution / CNNConvolutionGradient against PyTorch autograd (float64 oracle).

Every test runs the MPS convolution in float32 and compares the forward output, the data
gradient, the weight gradient and the bias gradient with ``torch.nn.functional.conv2d`` in
float64 under autograd, after mapping the MPS conventions explicitly (conftest.conv_reference):
OHWI -> OIHW weights, NHWC -> NCHW images, the window placed from ``offset`` (its centre) by
explicit padding and cropping, the clip rectangle, feature-channel offsets, edge modes and the
fused neuron.

Bound: max relative error (max|a-e| / max|e|) <= 1e-4. The sums are at most
5*5*16 (forward, data gradient) or 3*12*12 (weight gradient) float32 products of O(1) values,
whose rounding error is ~1e-6 relative; 1e-4 leaves two orders of magnitude of headroom while
still catching any indexing error (which gives O(1) relative error).

The grid is a covering design, not the Cartesian product: each row exercises several features
(kernel size, stride, dilation, groups, padding policy, neuron, bias, channel offsets, batch and
encode forms) so that every value of every feature appears in some row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpsgrad as m
from conftest import (FULL, NEURONS, SAME, VALID, ConvSpec, clipped_destination, conv_reference, dest_size,
                      make_conv, pad_offset, randn, rng, size_style)

PM = m.PaddingMethod
TF_SAME = int(PM.TENSORFLOW_SAME)


@dataclass
class Case:
    id: str
    spec: ConvSpec
    hw: tuple = (8, 8)            # (height, width) of the source
    n: int = 1                    # images
    method: Optional[int] = None  # padding method; None: the kernel's default policy
    src_off: int = 0              # source_feature_channel_offset (source has src_off + cin + src_extra channels)
    src_extra: int = 0
    dst_off: int = 0              # destination_feature_channel_offset (destination forms only)
    forward: str = "returning"    # "returning" | "destination"
    gradient: str = "returning"   # "returning" | "destination" | "loop" (one single encode per image)
    contiguous: bool = True       # batch from one allocation (batch_from_numpy) or separate images
    temporary_state: bool = False


def S(kw, kh, cin, cout, **kw_):
    return ConvSpec(kw=kw, kh=kh, cin=cin, cout=cout, **kw_)


CASES = [
    # kernel sizes
    Case("1x1", S(1, 1, 4, 8), hw=(6, 7), method=SAME),
    Case("1x1-s2-valid", S(1, 1, 4, 4, sx=2, sy=2, bias=False), hw=(7, 8), method=VALID),
    Case("2x2-s2-same", S(2, 2, 4, 8, sx=2, sy=2), hw=(8, 8), method=SAME),
    Case("2x2-tfsame", S(2, 2, 4, 4), hw=(7, 9), method=TF_SAME),
    Case("3x3-default", S(3, 3, 4, 8), hw=(8, 8)),
    Case("3x3-relu-s2-same", S(3, 3, 8, 8, sx=2, sy=2, neuron="relu"), hw=(9, 10), method=SAME),
    Case("4x4-d2-full", S(4, 4, 4, 4, dx=2, dy=2), hw=(6, 7), method=FULL),
    Case("4x4-s2-tfsame", S(4, 4, 4, 8, sx=2, sy=2, neuron="leaky_relu"), hw=(11, 9), method=TF_SAME),
    Case("5x5-valid", S(5, 5, 4, 4), hw=(12, 11), method=VALID),
    Case("5x5-s2-d2-full", S(5, 5, 4, 4, sx=2, sy=2, dx=2, dy=2, bias=False), hw=(9, 8), method=FULL),
    Case("3x1-same", S(3, 1, 4, 8, sx=2, sy=1), hw=(5, 9), method=SAME),
    Case("1x3-valid", S(1, 3, 4, 4, sx=1, sy=2, dx=1, dy=2), hw=(10, 5), method=VALID),
    # stride larger than the kernel (skipped pixels get a zero data gradient), kernel larger than the image
    Case("2x2-s3-same", S(2, 2, 4, 4, sx=3, sy=3), hw=(10, 11), method=SAME),
    Case("5x5-on-3x2-same", S(5, 5, 4, 4), hw=(3, 2), method=SAME),
    Case("3x3-d3-on-4x4-full", S(3, 3, 4, 4, dx=3, dy=3), hw=(4, 4), method=FULL),
    # odd channel counts (pixel stride padded to 4)
    Case("1x1-c1", S(1, 1, 1, 1, sx=2, sy=2), hw=(5, 5), method=SAME),
    Case("dw-c6-s2", S(3, 3, 6, 6, depthwise=True, sx=2, sy=2), hw=(7, 6), method=SAME),
    Case("3x3-c3-c5", S(3, 3, 3, 5, neuron="tanh"), hw=(7, 6), method=SAME),
    # anisotropic stride / dilation, non-square images
    Case("3x2-s21-d12", S(3, 2, 4, 4, sx=2, sy=1, dx=1, dy=2), hw=(7, 12), method=SAME),
    Case("2x3-s12-d21-full", S(2, 3, 4, 4, sx=1, sy=2, dx=2, dy=1, neuron="sigmoid"), hw=(9, 6), method=FULL),
    # groups
    Case("g2-3x3", S(3, 3, 8, 8, groups=2), hw=(7, 7), method=SAME),
    Case("g2-3x3-s2-relu", S(3, 3, 8, 16, groups=2, sx=2, sy=2, neuron="relu"), hw=(10, 10), method=SAME),
    Case("g4-2x2-d2-valid", S(2, 2, 16, 8, groups=2, dx=2, dy=2), hw=(8, 7), method=VALID),
    Case("g2-4x4-s2-d2-tfsame", S(4, 4, 8, 8, groups=2, sx=2, sy=2, dx=2, dy=2), hw=(12, 12), method=TF_SAME),
    Case("g2-1x1-bias-off", S(1, 1, 8, 8, groups=2, bias=False), hw=(5, 6), method=SAME),
    # depthwise
    Case("dw-3x3", S(3, 3, 8, 8, depthwise=True), hw=(8, 8), method=SAME),
    Case("dw-5x5-s2", S(5, 5, 4, 4, depthwise=True, sx=2, sy=2, neuron="linear"), hw=(11, 10), method=SAME),
    Case("dw-3x3-d2-full", S(3, 3, 8, 8, depthwise=True, dx=2, dy=2), hw=(6, 9), method=FULL),
    Case("dw-2x2-valid-bias-off", S(2, 2, 4, 4, depthwise=True, bias=False), hw=(7, 7), method=VALID),
    # alignment and remainder bits (even kernels give odd extra padding)
    Case("4x2-align-tl", S(4, 2, 4, 4), hw=(8, 9), method=int(PM.SIZE_SAME | PM.ALIGN_TOP_LEFT)),
    Case("4x2-align-br", S(4, 2, 4, 4), hw=(8, 9), method=int(PM.SIZE_SAME | PM.ALIGN_BOTTOM_RIGHT)),
    Case("4x4-rem-tr", S(4, 4, 4, 4), hw=(8, 9), method=int(PM.SIZE_SAME | PM.ADD_REMAINDER_TO_TOP_RIGHT)),
    Case("4x4-rem-bl", S(4, 4, 4, 4), hw=(8, 9), method=int(PM.SIZE_SAME | PM.ADD_REMAINDER_TO_BOTTOM_LEFT)),
    Case("2x2-full-tl", S(2, 2, 4, 4, sx=2, sy=2), hw=(7, 8), method=int(PM.SIZE_FULL | PM.ALIGN_TOP_LEFT)),
    Case("3x3-valid-br", S(3, 3, 4, 4, sx=2, sy=2), hw=(8, 9), method=int(PM.SIZE_VALID_ONLY | PM.ALIGN_BOTTOM_RIGHT)),
    # feature-channel offsets (forward source/destination; gradient primary/secondary/destination)
    Case("src-off4", S(3, 3, 4, 8), hw=(6, 6), method=SAME, src_off=4, src_extra=4),
    Case("src-off8-dw", S(3, 3, 4, 4, depthwise=True, sx=2, sy=2), hw=(7, 8), method=SAME, src_off=8),
    Case("dst-off4", S(3, 3, 4, 4), hw=(6, 7), method=SAME, dst_off=4, forward="destination"),
    Case("src4-dst8-g2", S(2, 2, 8, 8, groups=2, neuron="relu"), hw=(7, 6), method=TF_SAME, src_off=4, src_extra=4,
         dst_off=8, forward="destination", gradient="destination"),
    # into-destination forms, temporary states
    Case("dest-fwd-dest-grad", S(3, 3, 4, 8, sx=2, sy=2), hw=(9, 9), method=SAME, forward="destination",
         gradient="destination"),
    Case("ret-fwd-dest-grad-sigmoid", S(3, 3, 4, 4, neuron="sigmoid"), hw=(6, 6), method=SAME, gradient="destination"),
    Case("temporary-state", S(3, 3, 4, 4, neuron="tanh"), hw=(6, 6), method=SAME, temporary_state=True),
    # batches (one shared state, weight gradients summed over the batch)
    Case("batch3", S(3, 3, 4, 8), hw=(7, 6), n=3, method=SAME),
    Case("batch3-separate-relu", S(3, 3, 4, 8, sx=2, sy=2, neuron="relu"), hw=(8, 8), n=3, method=SAME,
         contiguous=False),
    Case("batch4-dest-g2-tanh", S(2, 2, 8, 8, groups=2, neuron="tanh"), hw=(6, 5), n=4, method=TF_SAME,
         forward="destination", gradient="destination"),
    Case("batch3-dw-full-dest", S(3, 3, 8, 8, depthwise=True, dx=2, dy=2, neuron="leaky_relu"), hw=(6, 7), n=3,
         method=FULL, forward="destination", contiguous=False),
    Case("batch3-offsets", S(3, 3, 4, 4, sx=2, sy=1), hw=(7, 8), n=3, method=VALID, src_off=4, dst_off=4,
         forward="destination", gradient="destination"),
    Case("batch3-temporary-linear", S(5, 5, 4, 4, neuron="linear", bias=False), hw=(8, 8), n=3, method=SAME,
         temporary_state=True),
]


def _images(device, arr, contiguous):
    if contiguous:
        return m.batch_from_numpy(arr, device)
    return [m.Image.from_numpy(a, device) for a in arr]


def _expected_geometry(case: Case, H, W):
    spec = case.spec
    method = SAME if case.method is None else case.method
    style = size_style(method)
    ow = dest_size(W, spec.sx, spec.kw_dil, style)
    oh = dest_size(H, spec.sy, spec.kh_dil, style)
    ox = pad_offset(W, spec.sx, spec.kw_dil, method, "x")
    oy = pad_offset(H, spec.sy, spec.kh_dil, method, "y")
    return (ow, oh), (ox, oy)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_convolution_grid(device, queue, check, case: Case):
    spec = case.spec
    gen = rng(case.id)
    H, W = case.hw
    cin_total = case.src_off + spec.cin + case.src_extra
    x_arr = randn(gen, case.n, H, W, cin_total)
    w, b = spec.random_parameters(gen)
    ds, conv, grad = make_conv(device, spec, w, b)
    if case.method is not None:
        conv.padding = m.NNDefaultPadding(case.method)
    conv.source_feature_channel_offset = case.src_off
    if case.src_extra:  # slice the channels the convolution reads out of a wider source
        conv.source_feature_channel_max_count = spec.cin
    conv.destination_feature_channel_offset = case.dst_off
    (ow, oh), (ox, oy) = _expected_geometry(case, H, W)
    cout_total = case.dst_off + spec.cout + (4 if case.dst_off else 0)
    sentinel = 7.25

    xs = _images(device, x_arr, case.contiguous)
    e_arr = randn(gen, case.n, oh, ow, cout_total)
    es = _images(device, e_arr, case.contiguous)
    cb = queue.command_buffer()

    # ---- forward --------------------------------------------------------------------------
    batch = case.n > 1
    if case.forward == "returning":
        assert case.dst_off == 0
        if batch:
            ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=case.temporary_state)
            assert len(ys) == len(states) == case.n
            assert all(s is states[0] for s in states), "one state is shared by the whole batch"
        else:
            y, state = conv.encode(cb, xs[0], destination_state_is_temporary=case.temporary_state)
            ys, states = [y], [state]
    else:
        desc = conv.destination_image_descriptor([xs[0]])
        assert (desc.width, desc.height, desc.feature_channels) == (ow, oh, spec.cout)
        state = (conv.temporary_result_state(cb, xs[0]) if case.temporary_state else conv.result_state(xs[0]))
        ys = _images(device, np.full((case.n, oh, ow, cout_total), sentinel, np.float32), case.contiguous)
        states = [state] * case.n
        if batch:
            assert conv.encode_batch(cb, xs, states, ys) is not None
        else:
            assert conv.encode(cb, xs[0], state, ys[0]) is ys[0]
    state = states[0]
    assert isinstance(state, m.CNNConvolutionGradientState)
    assert state.is_temporary == case.temporary_state
    assert tuple(conv.offset)[:2] == (ox, oy), "the padding policy's offset"
    for y in ys:
        assert y.shape[1:3] == (oh, ow)

    # ---- gradient -------------------------------------------------------------------------
    if case.temporary_state:
        assert state.read_count == 1
    if case.gradient == "returning":
        dxs = grad.encode_batch(cb, es, xs, states) if batch else [grad.encode(cb, es[0], xs[0], state)]
    elif case.gradient == "destination":
        gdesc = grad.destination_image_descriptor([es[0], xs[0]], [state])
        assert (gdesc.width, gdesc.height, gdesc.feature_channels) == (W, H, cin_total)
        dxs = _images(device, np.full((case.n, H, W, cin_total), sentinel, np.float32), case.contiguous)
        if batch:
            grad.encode_batch(cb, es, xs, states, dxs)
        else:
            assert grad.encode(cb, es[0], xs[0], state, dxs[0]) is dxs[0]
    else:  # one single gradient encode per image of the batch, sharing the forward state
        assert not case.temporary_state
        dxs = [grad.encode(cb, es[i], xs[i], state) for i in range(case.n)]
    if case.temporary_state:
        assert state.read_count == 0, "the gradient consumed the temporary state"
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED

    # ---- compare ----------------------------------------------------------------------------
    ref = conv_reference(spec, x_arr[..., case.src_off:case.src_off + spec.cin], w, b, offset=(ox, oy),
                         out_size=(ow, oh), e_nhwc=e_arr[..., case.dst_off:case.dst_off + spec.cout])
    y_all = m.batch_to_numpy(ys)
    check(y_all[..., case.dst_off:case.dst_off + spec.cout], ref["y"], "forward")
    if case.forward == "destination":
        outside = np.concatenate([y_all[..., :case.dst_off], y_all[..., case.dst_off + spec.cout:]], axis=-1)
        assert np.all(outside == sentinel), "channels outside the destination feature-channel range were written"
    dx_all = m.batch_to_numpy(dxs)
    assert dx_all.shape == (case.n, H, W, cin_total)
    check(dx_all[..., case.src_off:case.src_off + spec.cin], ref["dx"], "data gradient")
    if case.gradient == "destination" and cin_total > spec.cin:
        outside = np.concatenate([dx_all[..., :case.src_off], dx_all[..., case.src_off + spec.cin:]], axis=-1)
        assert np.all(outside == sentinel), "channels outside the gradient's destination range were written"
    if not case.temporary_state:
        check(state.gradient_for_weights, ref["dw"], "weight gradient")
        check(state.gradient_for_biases, ref["db"], "bias gradient")
        assert state.gradient_for_weights.shape == spec.weight_shape
        assert state.source_width == W and state.source_height == H


# ---- every padding policy -------------------------------------------------------------------

ALIGNS = {"centered": PM.ALIGN_CENTERED, "top_left": PM.ALIGN_TOP_LEFT, "bottom_right": PM.ALIGN_BOTTOM_RIGHT}
REMAINDERS = {"rem_tl": PM.ADD_REMAINDER_TO_TOP_LEFT, "rem_tr": PM.ADD_REMAINDER_TO_TOP_RIGHT,
              "rem_bl": PM.ADD_REMAINDER_TO_BOTTOM_LEFT, "rem_br": PM.ADD_REMAINDER_TO_BOTTOM_RIGHT}
SIZES = {"valid": PM.SIZE_VALID_ONLY, "same": PM.SIZE_SAME, "full": PM.SIZE_FULL}
POLICIES = [(f"{s}-{a}-{r}", int(SIZES[s] | ALIGNS[a] | REMAINDERS[r]))
            for s in SIZES for a in ALIGNS for r in REMAINDERS]


@pytest.mark.parametrize("method", [p[1] for p in POLICIES], ids=[p[0] for p in POLICIES])
def test_every_padding_policy(device, queue, check, method):
    # Even kernel extents in both axes and odd sizes give odd extra padding, so the alignment and
    # the per-axis remainder bits all change the window placement.
    spec = ConvSpec(kw=4, kh=2, cin=4, cout=4, sx=1, sy=2)
    H, W = 7, 9
    gen = rng(method + 11)
    x_arr = randn(gen, 1, H, W, 4)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    conv.padding = m.NNDefaultPadding(method)
    ow, oh = dest_size(W, 1, 4, size_style(method)), dest_size(H, 2, 2, size_style(method))
    ox, oy = pad_offset(W, 1, 4, method, "x"), pad_offset(H, 2, 2, method, "y")
    e_arr = randn(gen, 1, oh, ow, 4)
    x, e = m.Image.from_numpy(x_arr, device), m.Image.from_numpy(e_arr, device)
    cb = queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    dx = grad.encode(cb, e, x, state)
    cb.commit()
    cb.wait_until_completed()
    assert tuple(conv.offset)[:2] == (ox, oy)
    assert y.shape == (1, oh, ow, 4)
    ref = conv_reference(spec, x_arr, w, b, offset=(ox, oy), out_size=(ow, oh), e_nhwc=e_arr)
    check(y.to_numpy(), ref["y"], "forward")
    check(dx.to_numpy(), ref["dx"], "data gradient")
    check(state.gradient_for_weights, ref["dw"], "weight gradient")
    check(state.gradient_for_biases, ref["db"], "bias gradient")


class ShiftedValidPadding(m.NNPadding):
    """A custom policy: valid-only size minus one column, windows shifted one pixel right."""

    def __init__(self):
        m.NNPadding.__init__(self)
        self.calls = 0

    def padding_method(self):
        return int(PM.CUSTOM | PM.SIZE_VALID_ONLY)

    def destination_image_descriptor(self, source_images, source_states, kernel, suggested):
        self.calls += 1
        off = kernel.offset
        kernel.offset = (off.x + 1, off.y)
        suggested.width = suggested.width - 1
        return suggested


def test_custom_padding_subclass(device, queue, check):
    spec = ConvSpec(kw=3, kh=3, cin=4, cout=8, sx=1, sy=1, neuron="relu")
    H, W = 8, 9
    gen = rng(5)
    x_arr = randn(gen, 1, H, W, 4)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    policy = ShiftedValidPadding()
    conv.padding = policy
    ow, oh = W - 2 - 1, H - 2
    ox, oy = 1 + 1, 1
    e_arr = randn(gen, 1, oh, ow, 8)
    x, e = m.Image.from_numpy(x_arr, device), m.Image.from_numpy(e_arr, device)
    cb = queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    dx = grad.encode(cb, e, x, state)
    cb.commit()
    cb.wait_until_completed()
    assert policy.calls == 1
    assert tuple(conv.offset)[:2] == (ox, oy)
    assert y.shape == (1, oh, ow, 8)
    ref = conv_reference(spec, x_arr, w, b, offset=(ox, oy), out_size=(ow, oh), e_nhwc=e_arr)
    check(y.to_numpy(), ref["y"], "forward")
    check(dx.to_numpy(), ref["dx"], "data gradient")
    check(state.gradient_for_weights, ref["dw"], "weight gradient")
    check(state.gradient_for_biases, ref["db"], "bias gradient")


# ---- explicit offsets and clip rectangles (the "old style" encode) ----------------------------

OLD_STYLE = [
    # id, spec, (H, W), offset, clip ((x, y), (w, h)), destination (H, W), edge
    ("offset-neg-clip-inner", ConvSpec(3, 3, 4, 4), (8, 8), (-1, 0), ((1, 2), (4, 3)), (6, 7), "zero"),
    ("offset-pos-clip-origin", ConvSpec(4, 4, 4, 8, sx=2, sy=2), (10, 9), (3, 2), ((0, 0), (3, 3)), (5, 5), "zero"),
    ("clip-exceeds-destination", ConvSpec(3, 2, 4, 4, dx=2), (9, 7), (2, 1), ((2, 1), (100, 100)), (5, 6), "zero"),
    ("no-clip-offset-far", ConvSpec(5, 5, 8, 8, groups=2), (7, 8), (4, 5), None, (4, 4), "zero"),
    ("dw-offset-s2", ConvSpec(3, 3, 8, 8, depthwise=True, sx=2, sy=2, neuron="relu"), (9, 9), (0, 1),
     ((1, 1), (3, 4)), (6, 5), "zero"),
    ("clamp-edge", ConvSpec(3, 3, 4, 4, neuron="tanh"), (6, 7), (-1, 1), ((0, 1), (6, 4)), (6, 7), "clamp"),
    ("clamp-edge-s2-d2", ConvSpec(2, 3, 4, 8, sx=2, sy=2, dx=2, dy=2), (8, 8), (0, 7), None, (5, 5), "clamp"),
]


@pytest.mark.parametrize("row", OLD_STYLE, ids=[r[0] for r in OLD_STYLE])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "no-state"])
def test_explicit_offset_and_clip_rect(device, queue, check, row, with_state):
    _, spec, (H, W), offset, clip, (DH, DW), edge = row
    gen = rng(f"{row[0]}-{with_state}")
    x_arr = randn(gen, 1, H, W, spec.cin)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    x = m.Image.from_numpy(x_arr, device)
    y = clipped_destination(device, conv, (DH, DW), spec.cout, clip)
    # A padding policy that would place the windows elsewhere: the old-style encode ignores it.
    conv.padding = m.NNDefaultPadding(FULL)
    conv.edge_mode = m.ImageEdgeMode.CLAMP if edge == "clamp" else m.ImageEdgeMode.ZERO
    e_arr = randn(gen, 1, y.height, y.width, spec.cout)
    e = m.Image.from_numpy(e_arr, device)
    cb = queue.command_buffer()
    if with_state:
        conv.destination_image_descriptor([x])  # MPS call order: descriptor, then the state
        conv.offset = offset
        state = conv.result_state(x)
        conv.encode(cb, x, state, y.image)
        if edge == "clamp":  # the data gradient is exact for edge ZERO only
            grad.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
        dx = grad.encode(cb, e, x, state)
    else:
        conv.offset = offset
        assert conv.encode(cb, x, destination_image=y.image) is y.image
    cb.commit()
    cb.wait_until_completed()
    assert tuple(conv.offset)[:2] == offset, "the old-style encode leaves offset as set"
    ref = conv_reference(spec, x_arr, w, b, offset=offset, out_size=(y.width, y.height), edge=edge, e_nhwc=e_arr)
    y.check_written(check, ref["y"])
    if with_state:
        if edge == "zero":
            check(dx.to_numpy(), ref["dx"], "data gradient")
        check(state.gradient_for_weights, ref["dw"], "weight gradient")
        check(state.gradient_for_biases, ref["db"], "bias gradient")


# ---- gradient options ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["returning", "destination", "batch"])
@pytest.mark.parametrize("option", ["GRADIENT_WITH_DATA", "GRADIENT_WITH_WEIGHTS_AND_BIAS", "ALL"])
def test_gradient_option(device, queue, check, option, form):
    spec = ConvSpec(3, 3, 4, 8, sx=2, sy=2, neuron="relu")
    n = 3 if form == "batch" else 1
    H, W = 7, 8
    gen = rng(len(option) * 7 + len(form))
    x_arr = randn(gen, n, H, W, 4)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    grad.gradient_option = getattr(m.CNNConvolutionGradientOption, option)
    conv.padding = m.NNDefaultPadding(SAME)
    ow, oh = 4, 4
    e_arr = randn(gen, n, oh, ow, 8)
    xs, es = m.batch_from_numpy(x_arr, device), m.batch_from_numpy(e_arr, device)
    sentinel = 1.5
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    state = states[0]
    # Pre-set the gradient buffers: whatever the option does not compute stays as it was.
    state.gradient_for_weights[...] = sentinel
    state.gradient_for_biases[...] = sentinel
    if form == "returning":
        dxs = [grad.encode(cb, es[0], xs[0], state)]
    elif form == "destination":
        grad.destination_image_descriptor([es[0], xs[0]], [state])
        dxs = [m.Image.from_numpy(np.full((H, W, 4), sentinel, np.float32), device)]
        grad.encode(cb, es[0], xs[0], state, dxs[0])
    else:
        dxs = grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    ox, oy = pad_offset(W, 2, 3, SAME, "x"), pad_offset(H, 2, 3, SAME, "y")
    ref = conv_reference(spec, x_arr, w, b, offset=(ox, oy), out_size=(ow, oh), e_nhwc=e_arr)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    if option in ("GRADIENT_WITH_DATA", "ALL"):
        check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    elif form == "destination":
        assert np.all(dxs[0].to_numpy() == sentinel), "weights-only option wrote the data gradient"
    if option in ("GRADIENT_WITH_WEIGHTS_AND_BIAS", "ALL"):
        check(state.gradient_for_weights, ref["dw"], "weight gradient")
        check(state.gradient_for_biases, ref["db"], "bias gradient")
    else:
        assert np.all(state.gradient_for_weights == sentinel), "data-only option wrote the weight gradient"
        assert np.all(state.gradient_for_biases == sentinel), "data-only option wrote the bias gradient"


# ---- random geometries (property-based, deterministic examples) -------------------------------------------


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=st.integers(1, 5), kh=st.integers(1, 5), sx=st.integers(1, 3), sy=st.integers(1, 3),
       dx=st.integers(1, 3), dy=st.integers(1, 3), H=st.integers(1, 9), W=st.integers(1, 9),
       method=st.sampled_from([p[1] for p in POLICIES]), kind=st.sampled_from(["g1", "g2", "dw"]),
       cin=st.sampled_from([1, 3, 4, 8]), cout=st.sampled_from([1, 4, 5, 8]), n=st.integers(1, 3),
       neuron=st.sampled_from(["none", "relu", "tanh"]), seed=st.integers(0, 2**16))
def test_random_geometries(device, queue, check, kw, kh, sx, sy, dx, dy, H, W, method, kind, cin, cout, n, neuron,
                           seed):
    if kind == "g2":
        cin, cout = 8, 8
    if kind == "dw":
        cout = cin
    spec = ConvSpec(kw, kh, cin, cout, sx=sx, sy=sy, dx=dx, dy=dy, groups=2 if kind == "g2" else 1,
                    depthwise=kind == "dw", neuron=neuron)
    style = size_style(method)
    ow, oh = dest_size(W, sx, spec.kw_dil, style), dest_size(H, sy, spec.kh_dil, style)
    gen = rng(seed)
    x_arr = randn(gen, n, H, W, cin)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    conv.padding = m.NNDefaultPadding(method)
    xs = m.batch_from_numpy(x_arr, device)
    cb = queue.command_buffer()
    if ow < 1 or oh < 1:  # no output pixel: a ValueError naming the source, nothing encoded
        with pytest.raises(ValueError, match="source_image"):
            conv.encode_batch(cb, xs, destination_state_is_temporary=False)
        return
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    e_arr = randn(gen, n, oh, ow, cout)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    ox, oy = pad_offset(W, sx, spec.kw_dil, method, "x"), pad_offset(H, sy, spec.kh_dil, method, "y")
    assert tuple(conv.offset)[:2] == (ox, oy)
    ref = conv_reference(spec, x_arr, w, b, offset=(ox, oy), out_size=(ow, oh), e_nhwc=e_arr)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
    check(states[0].gradient_for_biases, ref["db"], "bias gradient")


# ---- more fused neuron types -----------------------------------------------------------------------

EXTRA_NEURONS = {
    # MPS formulas (MPSCNNNeuronType docs): hard sigmoid clamp(a*x + b, 0, 1); soft plus a*log(1 + e^(b*x));
    # ELU x >= 0 ? x : a*(e^x - 1); absolute |x|; soft sign x / (1 + |x|); ReLUN min(x >= 0 ? x : a*x, b)
    "hard_sigmoid": (m.CNNNeuronType.HARD_SIGMOID, 0.2, 0.5, lambda x, a, b: torch.clamp(a * x + b, 0, 1)),
    "soft_plus": (m.CNNNeuronType.SOFT_PLUS, 1.5, 0.7, lambda x, a, b: a * torch.log1p(torch.exp(b * x))),
    "elu": (m.CNNNeuronType.ELU, 0.8, None, lambda x, a, b: torch.where(x >= 0, x, a * (torch.exp(x) - 1))),
    "absolute": (m.CNNNeuronType.ABSOLUTE, None, None, lambda x, a, b: x.abs()),
    "soft_sign": (m.CNNNeuronType.SOFT_SIGN, None, None, lambda x, a, b: x / (1 + x.abs())),
    "relun": (m.CNNNeuronType.RELUN, 0.1, 0.5, lambda x, a, b: torch.clamp(torch.where(x >= 0, x, a * x), max=b)),
}


@pytest.mark.parametrize("neuron", list(EXTRA_NEURONS))
def test_fused_neuron_types(device, queue, check, monkeypatch, neuron):
    monkeypatch.setitem(NEURONS, neuron, EXTRA_NEURONS[neuron])
    spec = ConvSpec(3, 3, 4, 4, sx=2, sy=1, neuron=neuron)
    gen = rng(neuron)
    x_arr = randn(gen, 2, 7, 8, 4)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    xs = m.batch_from_numpy(x_arr, device)
    e_arr = randn(gen, 2, 7, 4, 4)
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    ref = conv_reference(spec, x_arr, w, b, offset=tuple(conv.offset)[:2], out_size=(4, 7), e_nhwc=e_arr)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
    check(states[0].gradient_for_biases, ref["db"], "bias gradient")


# ---- misc -----------------------------------------------------------------------------------------


def test_default_allocator_makes_temporary_images(device, queue, check):
    spec = ConvSpec(3, 3, 4, 4)
    gen = rng(99)
    x_arr = randn(gen, 1, 6, 6, 4)
    w, b = spec.random_parameters(gen)
    ds = m.CNNConvolutionWeightsDataSource(spec.descriptor(), w, b)
    conv = m.CNNConvolution(device, ds)
    grad = m.CNNConvolutionGradient(device, ds)
    x = m.Image.from_numpy(x_arr, device)
    e = m.Image.from_numpy(randn(gen, 1, 6, 6, 4), device)
    cb = queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=True)
    assert isinstance(y, m.TemporaryImage) and y.read_count == 1
    dx = grad.encode(cb, e, x, state)
    assert isinstance(dx, m.TemporaryImage) and dx.read_count == 1
    assert state.read_count == 0
    seen = []  # temporary images: read before their command buffer completes
    cb.encode_host_callback(lambda: seen.extend([y.to_numpy(), dx.to_numpy()]))
    cb.commit()
    cb.wait_until_completed()
    ref = conv_reference(spec, x_arr, w, b, offset=(0, 0), out_size=(6, 6), e_nhwc=e.to_numpy())
    check(seen[0], ref["y"], "forward")
    check(seen[1], ref["dx"], "data gradient")


def test_chained_layers_gradient_through_temporary_image(device, queue, check):
    """Two convolutions: the first output is a temporary image read by the second forward and by
    the second gradient (read_count raised to 2), the chain rule runs through both gradients."""
    s1 = ConvSpec(3, 3, 4, 8, neuron="relu")
    s2 = ConvSpec(2, 2, 8, 4, sx=2, sy=2)
    gen = rng(123)
    x_arr = randn(gen, 1, 8, 8, 4)
    w1, b1 = s1.random_parameters(gen)
    w2, b2 = s2.random_parameters(gen)
    _, c1, g1 = make_conv(device, s1, w1, b1, persistent=False)
    _, c2, g2 = make_conv(device, s2, w2, b2, persistent=False)
    c2.destination_image_allocator = m.ImageAllocator.persistent()
    g1.destination_image_allocator = m.ImageAllocator.persistent()
    x = m.Image.from_numpy(x_arr, device)
    e_arr = randn(gen, 1, 4, 4, 4)
    e = m.Image.from_numpy(e_arr, device)
    cb = queue.command_buffer()
    h, st1 = c1.encode(cb, x, destination_state_is_temporary=True)
    h.read_count = 2  # read by c2's forward and by g2
    y, st2 = c2.encode(cb, h, destination_state_is_temporary=True)
    assert h.read_count == 1
    dh = g2.encode(cb, e, h, st2)
    assert h.read_count == 0 and dh.read_count == 1
    dx = g1.encode(cb, dh, x, st1)
    assert dh.read_count == 0
    cb.commit()
    cb.wait_until_completed()

    import torch.nn.functional as F
    X = torch.tensor(x_arr, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_(True)
    W1 = torch.tensor(w1, dtype=torch.float64).permute(0, 3, 1, 2)
    W2 = torch.tensor(w2, dtype=torch.float64).permute(0, 3, 1, 2)
    hh = F.relu(F.conv2d(X, W1, torch.tensor(b1, dtype=torch.float64), padding=1))
    yy = F.conv2d(hh, W2, torch.tensor(b2, dtype=torch.float64), stride=2)  # 2x2/2 SAME on 8x8: no padding
    (yy * torch.tensor(e_arr, dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
    check(y.to_numpy(), yy.detach().permute(0, 2, 3, 1).numpy(), "forward")
    check(dx.to_numpy(), X.grad.permute(0, 2, 3, 1).numpy(), "data gradient through two layers")


def test_kernel_offset_rule_even_dilated_extent(device, queue):
    """Spec §2.1.6: after destination_image_descriptor the gradient kernel's kernel_offset is
    -offset + (even dilated extent ? 1 : 0) and its secondary_offset the forward window's left edge."""
    spec = ConvSpec(4, 3, 4, 4, sx=2, sy=1, dx=1, dy=2)  # extents 4 (even) and 5 (odd)
    gen = rng(3)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    x = m.Image.from_numpy(randn(gen, 1, 9, 10, 4), device)
    conv.padding = m.NNDefaultPadding(SAME)
    cb = queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    ox, oy = tuple(conv.offset)[:2]
    e = m.Image.from_numpy(np.zeros(y.shape, np.float32), device)
    desc = grad.destination_image_descriptor([e, x], [state])
    assert (desc.width, desc.height, desc.feature_channels) == (10, 9, 4)
    assert (grad.kernel_offset_x, grad.kernel_offset_y) == (-ox + 1, -oy)
    assert tuple(grad.secondary_offset)[:2] == (ox - 2, oy - 2)
    assert tuple(grad.primary_offset)[:2] == (0, 0)
    assert (grad.secondary_stride_in_pixels_x, grad.secondary_stride_in_pixels_y) == (2, 1)
    cb.commit()
    cb.wait_until_completed()
