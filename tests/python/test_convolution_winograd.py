"""The CPU's Winograd F(2x2, 3x3) convolution path against PyTorch autograd.

backend/cpu/convolution_winograd.cpp takes the forward of 3x3, stride-1, undilated, single-group
convolutions with >= 16 input and output channels and >= max(32, Cin * Cout / 1024) output
tiles (2x2 output pixels, counted over the batch), and so the stride-1 data gradient, which runs as a forward convolution
of the incoming gradient (its channel counts swapped). The cases below take that path with
partial tiles (odd clip sizes), batches, source and destination channel offsets, explicit
offsets and clip rectangles, both edge modes, neurons (the fused epilogue and the stored
preactivation) and no bias, on one and two threads; others sit on either side of the
eligibility border. MPSGRAD_CONV_WINOGRAD=0 switches the path off: the same cases then run on the
im2col product, which shows which path ran (the two differ in rounding) and gives the error the
Winograd transforms are compared with.

Oracle: conftest.conv_reference (F.conv2d in float64 under autograd). Bound: the ``check``
fixture's relative error 1e-4 (float32 images; float16 images: its half-precision bound). The
transforms add a few roundings per value but the products have 16 terms per channel instead of
36: against the float64 oracle the Winograd path's error is 0.5-2x the im2col product's (max
relative error 2e-7 to 7e-7 here and on the benchmark shapes, docs/performance.md), two orders
of magnitude under the bound, which still catches any indexing or transform error (O(1)
relative error). Each case also asserts the Winograd error stays within 8x the im2col error.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import (FULL, IMAGE_FORMAT, VALID, ConvCase, ConvSpec, clipped_destination, conv_reference, make_conv,
                      max_rel_err, randn, rng)

SWITCH = "MPSGRAD_CONV_WINOGRAD"
SOURCE_CHANNELS_AFTER_SLICE = 3  # when src_off is set
DESTINATION_CHANNELS_AFTER_SLICE = 2  # when dst_off is set


CASES = [
    # odd output sizes: the last tile row and column are partial
    ConvCase("16->16-13x11-relu", ConvSpec(3, 3, 16, 16, neuron="relu"), 2, (13, 11)),
    ConvCase("32->16-valid", ConvSpec(3, 3, 32, 16), 3, (18, 17), method=VALID),
    ConvCase("16->32-full-sigmoid", ConvSpec(3, 3, 16, 32, neuron="sigmoid"), 2, (9, 12), method=FULL),
    ConvCase("24->40-src-off-tanh", ConvSpec(3, 3, 24, 40, neuron="tanh"), 2, (12, 15), src_off=4),
    ConvCase("20->16-dst-off-no-bias", ConvSpec(3, 3, 20, 16, bias=False), 2, (15, 14), dst_off=4),
    ConvCase("16->24-clamp", ConvSpec(3, 3, 16, 24, neuron="relu"), 2, (11, 16), edge="clamp"),
    ConvCase("64->64-n4", ConvSpec(3, 3, 64, 64), 4, (10, 10)),
]


def _run(device, queue, case, x_arr, e_arr, w, b):
    """Forward into destination images (sentinel-filled, `dst_off` channels in), then the data
    gradient (zero edges, no destination offset). Returns y (all channels), dx or None."""
    spec = case.spec
    conv, grad = case.kernels(device, w, b)
    xs = m.batch_from_numpy(x_arr, device)
    (ow, oh), _ = case.geometry()
    cout_total = case.dst_off + spec.cout + (DESTINATION_CHANNELS_AFTER_SLICE if case.dst_off else 0)
    ys = m.batch_from_numpy(np.full((case.n, oh, ow, cout_total), 7.25, np.float32), device)
    cb = queue.command_buffer()
    conv.destination_image_descriptor([xs[0]])
    state = conv.result_state(xs[0])
    conv.encode_batch(cb, xs, [state] * case.n, ys)
    dxs = None
    if case.edge == "zero" and case.dst_off == 0:
        dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, device), xs, [state] * case.n)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return m.batch_to_numpy(ys), (None if dxs is None else m.batch_to_numpy(dxs))


def _check_against(check, case, y, dx, ref):
    spec = case.spec
    check(y[..., case.dst_off:case.dst_off + spec.cout], ref["y"], "forward")
    if case.dst_off:
        assert np.all(y[..., :case.dst_off] == 7.25) and np.all(y[..., case.dst_off + spec.cout:] == 7.25), \
            "channels outside the destination slice were written"
    if dx is not None:
        check(dx[..., case.src_off:case.src_off + spec.cin], ref["dx"], "data gradient")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_winograd_path(device, queue, check, num_threads, monkeypatch, case):
    x_arr, e_arr, w, b, ref = case.inputs(SOURCE_CHANNELS_AFTER_SLICE)
    monkeypatch.delenv(SWITCH, raising=False)
    y, dx = _run(device, queue, case, x_arr, e_arr, w, b)
    _check_against(check, case, y, dx, ref)

    again = _run(device, queue, case, x_arr, e_arr, w, b)
    assert np.array_equal(y, again[0]), f"forward differs between two identical runs on {num_threads} thread(s)"
    if dx is not None:
        assert np.array_equal(dx, again[1]), f"data gradient differs between two runs on {num_threads} thread(s)"

    # The im2col product on the same inputs: the Winograd path did run (the roundings differ) and
    # its error stays within a small multiple of the product's.
    monkeypatch.setenv(SWITCH, "0")
    y0, dx0 = _run(device, queue, case, x_arr, e_arr, w, b)
    _check_against(check, case, y0, dx0, ref)
    pairs = [("forward", y, y0, ref["y"], slice(case.dst_off, case.dst_off + case.spec.cout))]
    if dx is not None:
        pairs.append(("data gradient", dx, dx0, ref["dx"], slice(case.src_off, case.src_off + case.spec.cin)))
    for what, a, a0, e, sl in pairs:
        if _cpu_float32(device):
            assert not np.array_equal(a, a0), f"{what}: the Winograd switch changed nothing (path not taken?)"
        err, err0 = max_rel_err(a[..., sl], e), max_rel_err(a0[..., sl], e)
        assert err <= max(8 * err0, 1e-6), f"{what}: Winograd error {err:.3g} vs im2col {err0:.3g}"


def _cpu_float32(device):
    """The switch acts on the CPU backend, and float16 images round both paths to the same halves."""
    return device.name == "cpu" and IMAGE_FORMAT == "float32"


# Shapes on either side of the eligibility border (>= 16 channels each way, >= max(32, Cin*Cout/1024)
# output tiles; the data gradient swaps the channel counts):
# (id, spec, n, (H, W), Winograd forward, Winograd data gradient).
BORDER = [
    ("16->16-32-tiles", ConvSpec(3, 3, 16, 16), 2, (8, 7), True, True),
    ("16->16-30-tiles", ConvSpec(3, 3, 16, 16), 1, (10, 12), False, False),
    ("256->256-64-tiles", ConvSpec(3, 3, 256, 256), 1, (16, 15), True, True),
    ("256->256-56-tiles", ConvSpec(3, 3, 256, 256), 1, (14, 15), False, False),
    ("15->16", ConvSpec(3, 3, 15, 16), 2, (16, 16), False, False),
    ("16->15", ConvSpec(3, 3, 16, 15), 2, (16, 16), False, False),
    ("16->16-5x5", ConvSpec(5, 5, 16, 16), 2, (16, 16), False, False),
    ("16->16-dilated", ConvSpec(3, 3, 16, 16, dx=2, dy=2), 2, (16, 16), False, False),
    ("16->16-groups2", ConvSpec(3, 3, 32, 32, groups=2), 2, (16, 16), False, False),
]


@pytest.mark.parametrize("row", BORDER, ids=[r[0] for r in BORDER])
def test_eligibility_border(device, queue, check, monkeypatch, row):
    name, spec, n, hw, fwd_winograd, grad_winograd = row
    case = ConvCase(name, spec, n, hw)
    x_arr, e_arr, w, b, ref = case.inputs(SOURCE_CHANNELS_AFTER_SLICE)
    monkeypatch.delenv(SWITCH, raising=False)
    y, dx = _run(device, queue, case, x_arr, e_arr, w, b)
    monkeypatch.setenv(SWITCH, "0")
    y0, dx0 = _run(device, queue, case, x_arr, e_arr, w, b)
    for a in (y, y0):
        check(a, ref["y"], "forward")
    for a in (dx, dx0):
        check(a, ref["dx"], "data gradient")
    if _cpu_float32(device):
        assert np.array_equal(y, y0) != fwd_winograd, "forward: unexpected path"
        assert np.array_equal(dx, dx0) != grad_winograd, "data gradient: unexpected path"


# An explicit offset and clip rectangle (the old-style encode), both edge modes: the tiles start
# at the clip's corner and read the source through the offset window.
@pytest.mark.parametrize("edge", ["zero", "clamp"])
@pytest.mark.parametrize("offset, clip", [((0, 2), ((1, 3), (19, 17))), ((-1, 0), ((2, 1), (100, 100)))],
                         ids=["inner-clip", "clip-exceeds"])
def test_offset_and_clip_rect(device, queue, check, monkeypatch, edge, offset, clip):
    monkeypatch.delenv(SWITCH, raising=False)
    spec = ConvSpec(3, 3, 16, 24, neuron="relu")
    gen = rng(f"clip-{edge}-{offset}")
    H, W = 24, 23
    x_arr = randn(gen, 1, H, W, spec.cin)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    x = m.Image.from_numpy(x_arr, device)
    y = clipped_destination(device, conv, (22, 24), spec.cout, clip)  # 22 rows, 24 columns
    conv.edge_mode = m.ImageEdgeMode.CLAMP if edge == "clamp" else m.ImageEdgeMode.ZERO
    e_arr = randn(gen, 1, y.height, y.width, spec.cout)
    cb = queue.command_buffer()
    conv.destination_image_descriptor([x])
    conv.offset = offset
    state = conv.result_state(x)
    conv.encode(cb, x, state, y.image)
    dx = grad.encode(cb, m.Image.from_numpy(e_arr, device), x, state) if edge == "zero" else None
    cb.commit()
    cb.wait_until_completed()
    ref = conv_reference(spec, x_arr, w, b, offset=offset, out_size=(y.width, y.height), edge=edge, e_nhwc=e_arr)
    y.check_written(check, ref["y"])
    if dx is not None:
        check(dx.to_numpy(), ref["dx"], "data gradient")
