"""Convolutions that read and write FLOAT16 storage natively (docs/float16.md, "Convolution").

On the CPU backend the convolution forward, data gradient and weight gradient widen FLOAT16 pixels
as they pack them (im2col rows, gradient blocks, Winograd tiles) and round the epilogue's results
to half as they store them; the paths that address float32 storage in place (depthwise, fully
connected, strided and one-pixel data gradients) work on float32 copies made inside the op.

Oracle: the same convolution on FLOAT32 images holding the same (half-valued) inputs, its images
rounded to half by NumPy. Both compute the same float32 values and round once, to nearest even,
so results must be the same bits; the weight and bias gradients (float32 in either case) must be
equal. The float32 kernels are checked against PyTorch autograd by test_convolution*.py, and the
float16 pass of the suite (MPSGRAD_TEST_IMAGE_FORMAT=float16) runs those tests on FLOAT16 images
against PyTorch as well.

The cases reach every path of the CPU convolution: the im2col product (grouped, strided, dilated,
channel counts off the 8-lane conversion width, the 1-4 channel copies of an RGB stem), the 1x1
product that reads FLOAT32 pixels in place, Winograd F(2x2, 3x3), depthwise, fully connected, the
strided (per-phase and col2im) and one-pixel data gradients, with channel offsets, clip
rectangles, both edge modes, a fused neuron with its stored preactivation, batches, mixed formats,
and one and two threads.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import VALID, ConvCase, ConvSpec, make_conv, randn, rng

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32
SENTINEL = 7.25
EXTRA = 4  # channels after the source / destination slice when an offset is set

pytestmark = pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
Case = ConvCase

CASES = [
    Case("im2col-3x3-s2-groups2-relu", ConvSpec(3, 3, 8, 16, sx=2, sy=2, groups=2, neuron="relu"), 3, (9, 11)),
    Case("im2col-9->7-tails", ConvSpec(3, 3, 9, 7), 2, (7, 6)),
    Case("1x1-24->16", ConvSpec(1, 1, 24, 16), 3, (6, 7)),
    Case("1x1-16->40-offsets", ConvSpec(1, 1, 16, 40, neuron="sigmoid"), 2, (5, 9), src_off=4, dst_off=8),
    Case("winograd-16->24-relu", ConvSpec(3, 3, 16, 24, neuron="relu"), 2, (13, 11)),
    Case("winograd-24->16-offsets-tanh", ConvSpec(3, 3, 24, 16, neuron="tanh"), 2, (12, 15), src_off=4, dst_off=4),
    Case("winograd-16->16-clamp", ConvSpec(3, 3, 16, 16), 2, (11, 12), edge="clamp"),
    # tile rows wider than one widened strip (16 tiles), blocks starting inside a row
    Case("winograd-16->16-wide-rows", ConvSpec(3, 3, 16, 16), 2, (6, 41)),
    Case("stem-7x7-s2-3->16", ConvSpec(7, 7, 3, 16, sx=2, sy=2), 2, (20, 18)),
    Case("dilated-5->7-clamp", ConvSpec(3, 3, 5, 7, dx=2, dy=2), 2, (9, 10), edge="clamp"),
    Case("depthwise-16", ConvSpec(3, 3, 16, 16, depthwise=True, neuron="relu"), 2, (8, 9)),
    Case("fully-connected-4x4", ConvSpec(4, 4, 8, 10), 3, (4, 4), method=VALID),
    Case("one-gradient-pixel-3x3-s2", ConvSpec(3, 3, 6, 5, sx=2, sy=2), 2, (3, 3), method=VALID),
]


def _inputs(case):
    """Half-valued float32 arrays: the source (with the channels around its slice), the incoming
    gradient, weights and biases."""
    spec = case.spec
    gen = rng(case.id)
    H, W = case.hw
    (ow, oh), _ = case.geometry()
    x = randn(gen, case.n, H, W, case.src_off + spec.cin + (EXTRA if case.src_off else 0))
    e = randn(gen, case.n, oh, ow, spec.cout)
    w, b = spec.random_parameters(gen)
    return x.astype(np.float16).astype(np.float32), e.astype(np.float16).astype(np.float32), w, b


def _run(device, queue, case, formats, x_arr, e_arr, w, b):
    """Forward into sentinel-filled destinations, then both gradients. `formats` = (source,
    destination, incoming gradient, data-gradient destination) formats. Returns the forward
    result (all channels), the data gradient or None, the weight and bias gradients."""
    x_fmt, y_fmt, e_fmt, dx_fmt = formats
    spec = case.spec
    conv, grad = case.kernels(device, w, b)
    grad.primary_source_feature_channel_offset = case.dst_off
    grad.secondary_source_feature_channel_offset = case.src_off
    if case.src_off:
        grad.secondary_source_feature_channel_max_count = spec.cin
    if case.edge == "clamp":
        grad.secondary_edge_mode = m.ImageEdgeMode.CLAMP
        grad.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
    (ow, oh), _ = case.geometry()
    y_channels = case.dst_off + spec.cout + (EXTRA if case.dst_off else 0)
    xs = m.batch_from_numpy(x_arr, device, channel_format=x_fmt)
    ys = m.batch_from_numpy(np.full((case.n, oh, ow, y_channels), SENTINEL, np.float32), device, channel_format=y_fmt)
    e_full = np.zeros((case.n, oh, ow, y_channels), np.float32)
    e_full[..., case.dst_off:case.dst_off + spec.cout] = e_arr
    es = m.batch_from_numpy(e_full, device, channel_format=e_fmt)
    dxs = None
    if case.edge == "zero":
        dxs = m.batch_from_numpy(np.full(x_arr.shape, SENTINEL, np.float32), device, channel_format=dx_fmt)
    cb = queue.command_buffer()
    state = conv.result_state(xs[0])
    conv.encode_batch(cb, xs, [state] * case.n, ys)
    if dxs is None:
        grad.encode_batch(cb, es, xs, [state] * case.n)
    else:
        grad.encode_batch(cb, es, xs, [state] * case.n, dxs)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return (m.batch_to_numpy(ys).astype(np.float32), None if dxs is None else m.batch_to_numpy(dxs).astype(np.float32),
            np.array(state.gradient_for_weights), np.array(state.gradient_for_biases))


def _as_half(array):
    with np.errstate(over="ignore"):
        return np.asarray(array, np.float32).astype(np.float16).astype(np.float32)


def _same_bits(actual, expected, what):
    assert actual.shape == expected.shape, what
    assert np.array_equal(np.isnan(actual), np.isnan(expected)), what
    ok = np.isnan(expected) | ((actual == expected) & (np.signbit(actual) == np.signbit(expected)))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (f"{what}: {bad.size} of {actual.size} values differ, first "
                           f"{actual.ravel()[bad[:4]]} vs {expected.ravel()[bad[:4]]}")


# (source, destination, incoming gradient, data-gradient destination) formats.
FORMATS = {
    "all-half": (F16, F16, F16, F16),
    "half-source": (F16, F32, F32, F16),
    "half-results": (F32, F16, F16, F32),
}


@pytest.mark.parametrize("formats", list(FORMATS), ids=list(FORMATS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_half_images_give_the_float32_kernel_rounded_once(device, queue, num_threads, case, formats):
    x, e, w, b = _inputs(case)
    fmt = FORMATS[formats]
    y16, dx16, dw16, db16 = _run(device, queue, case, fmt, x, e, w, b)
    y32, dx32, dw32, db32 = _run(device, queue, case, (F32, F32, F32, F32), x, e, w, b)
    _same_bits(y16, _as_half(y32) if fmt[1] == F16 else y32, "forward")
    assert np.all(y16[..., :case.dst_off] == SENTINEL) and np.all(y16[..., case.dst_off + case.spec.cout:] == SENTINEL)
    if dx16 is not None:
        _same_bits(dx16, _as_half(dx32) if fmt[3] == F16 else dx32, "data gradient")
    _same_bits(dw16, dw32, "weight gradient")
    _same_bits(db16, db32, "bias gradient")


def test_explicit_offset_and_clip_rect(device, queue, num_threads):
    """The old-style encode: an explicit offset and a clip rectangle inside a larger FLOAT16
    destination; pixels outside the rectangle keep their values."""
    spec = ConvSpec(3, 3, 16, 24, neuron="relu")
    gen = rng("offset-clip")
    x = _as_half(randn(gen, 1, 15, 17, 16))
    w, b = spec.random_parameters(gen)
    results = {}
    for fmt in (F16, F32):
        _, conv, _ = make_conv(device, spec, w, b)
        conv.offset = (0, 2, 0)
        conv.clip_rect = ((1, 3, 0), (13, 9, 1))
        src = m.Image.from_numpy(x[0], device, channel_format=fmt)
        dst = m.Image.from_numpy(np.full((15, 17, 24), SENTINEL, np.float32), device, channel_format=fmt)
        cb = queue.command_buffer()
        conv.encode(cb, src, destination_image=dst)
        cb.commit()
        cb.wait_until_completed()
        results[fmt] = dst.to_numpy().astype(np.float32)
    _same_bits(results[F16], _as_half(results[F32]), "forward")
    outside = np.ones((15, 17), bool)
    outside[3:12, 1:14] = False
    assert np.all(results[F16][0][outside] == SENTINEL), "pixels outside the clip rectangle were written"


def test_half_results_overflow_to_infinity(device, queue):
    """Sums beyond the half range round to +-inf, as NumPy's cast does (no saturation)."""
    spec = ConvSpec(1, 1, 16, 8, bias=False)
    x = np.full((1, 4, 4, 16), 4096.0, np.float32)
    w = np.ones(spec.weight_shape, np.float32)
    w[1::2] *= -1.0
    out = {}
    for fmt in (F16, F32):
        _, conv, _ = make_conv(device, spec, w, None)
        src = m.Image.from_numpy(x[0], device, channel_format=fmt)
        dst = m.Image.from_numpy(np.zeros((4, 4, 8), np.float32), device, channel_format=fmt)
        cb = queue.command_buffer()
        conv.encode(cb, src, destination_image=dst)
        cb.commit()
        cb.wait_until_completed()
        out[fmt] = dst.to_numpy().astype(np.float32)
    assert np.all(np.isinf(out[F16][..., 0::2])) and np.all(out[F16][..., 0::2] > 0)
    assert np.all(np.isinf(out[F16][..., 1::2])) and np.all(out[F16][..., 1::2] < 0)
    _same_bits(out[F16], _as_half(out[F32]), "forward")
