"""Kernels that read and write FLOAT16 storage natively (docs/float16.md "Which kernels read half
natively"): on the CPU backend the neuron forward and gradient load half rows into float32, compute
in float32 and round the results to half, with no float32 shadow of the images.

Oracles:
* NumPy's float16 <-> float32 casts for the conversions (every one of the 65536 half bit patterns,
  the edges of the half range, random float32 bit patterns);
* the same kernel on FLOAT32 images holding the same (half-valued) inputs, rounded to half by NumPy:
  the native path computes the same float32 values and rounds once (to nearest even), so it must
  give the same bits. The float32 kernels are checked against PyTorch by test_neuron*.py; one case
  here checks against PyTorch directly as well.

Shapes reach the tails of the 8-lane conversion loops (rows of 1, 7, 9 and 33 elements), pixels
with padding lanes (3 channels), channel slices, clip rectangles, read offsets and both edge modes,
and every combination of FLOAT16 / FLOAT32 sources and destinations.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import rng, run

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32
T = m.CNNNeuronType

# Every neuron type with parameters that keep the results finite on N(0, 1) inputs.
NEURONS = [
    (T.NONE, 1.0, 1.0, 1.0), (T.RELU, 0.1, 0.0, 0.0), (T.LINEAR, 1.5, -0.25, 0.0), (T.SIGMOID, 0.0, 0.0, 0.0),
    (T.HARD_SIGMOID, 0.2, 0.5, 0.0), (T.TANH, 1.5, 0.7, 0.0), (T.ABSOLUTE, 0.0, 0.0, 0.0),
    (T.SOFT_PLUS, 2.0, 0.5, 0.0), (T.SOFT_SIGN, 0.0, 0.0, 0.0), (T.ELU, 0.7, 0.0, 0.0), (T.RELUN, 0.1, 1.2, 0.0),
    (T.POWER, 1.0, 0.5, 2.0), (T.EXPONENTIAL, 2.0, 0.5, 0.25), (T.LOGARITHM, 10.0, 4.0, 1.0),
    (T.GELU, 0.0, 0.0, 0.0),
]


def half(values):
    with np.errstate(over="ignore"):  # overflow to inf is one of the rules being checked
        return np.asarray(values, dtype=np.float32).astype(np.float16)


def image(array, device, fmt):
    return m.Image.from_numpy(np.ascontiguousarray(array), device, channel_format=fmt)


def same_bits(actual, expected, what=""):
    """Equal values and equal NaN positions; +0 and -0 must match too (sign bits)."""
    a = np.asarray(actual, np.float32)
    e = np.asarray(expected, np.float32)
    assert a.shape == e.shape, what
    nan = np.isnan(e)
    assert np.array_equal(np.isnan(a), nan), what
    bad = np.flatnonzero((a[~nan] != e[~nan]) | (np.signbit(a[~nan]) != np.signbit(e[~nan])))
    assert bad.size == 0, f"{what}: {bad.size} values differ, first {a[~nan][bad[:4]]} vs {e[~nan][bad[:4]]}"


def descriptor(spec):
    kind, a, b, c = spec
    return m.NNNeuronDescriptor(kind, a=a, b=b, c=c)


def inputs(seed, shape, positive=False):
    values = rng(seed).standard_normal(shape).astype(np.float32)
    if positive:
        values = np.abs(values) + 0.1
    return half(values).astype(np.float32)  # half-valued, so FLOAT16 images store them exactly


def forward(device, queue, desc, x_arr, x_fmt, y_fmt, configure=None, fill=None):
    kernel = m.CNNNeuron(device, desc)
    if configure:
        configure(kernel)
    x = image(x_arr, device, x_fmt)
    y = image(np.zeros_like(x_arr) if fill is None else fill, device, y_fmt)
    run(queue, lambda cb: kernel.encode(cb, x, destination_image=y))
    return y


def gradient(device, queue, desc, g_arr, x_arr, fmts):
    g_fmt, x_fmt, d_fmt = fmts
    fwd, bwd = m.CNNNeuron(device, desc), m.CNNNeuronGradient(device, desc)
    x = image(x_arr, device, x_fmt)
    g = image(g_arr, device, g_fmt)
    dx = m.Image(device, m.ImageDescriptor(x_arr.shape[2], x_arr.shape[1], x_arr.shape[3], 1, d_fmt))

    def encode(cb):
        fwd.destination_image_allocator = m.ImageAllocator.persistent()
        _, state = fwd.encode(cb, x, destination_state_is_temporary=False)
        bwd.encode(cb, g, x, state, dx)

    run(queue, encode)
    return dx


# ---- conversions: every half bit pattern, the float32 edges -------------------------------------


def all_halves():
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, 64, 256, 4)


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
def test_every_half_bit_pattern_loads_exactly(device, queue):
    """FLOAT16 -> FLOAT32 through the identity neuron (NONE: f(x) = x, -0 stays -0): every half (normals, subnormals, +-0, +-inf,
    NaNs) becomes NumPy's float32 of it."""
    h = all_halves()
    y = forward(device, queue, descriptor((T.NONE, 0.0, 0.0, 0.0)), h, F16, F32)
    same_bits(y.to_numpy(), h.astype(np.float32), "half -> float32")
    # FLOAT16 -> FLOAT16 keeps every non-NaN bit pattern (NaNs stay NaN).
    y16 = forward(device, queue, descriptor((T.NONE, 0.0, 0.0, 0.0)), h, F16, F16)
    out = y16.to_numpy()
    assert out.dtype == np.float16
    nan = np.isnan(h)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out[~nan].view(np.uint16), h[~nan].view(np.uint16))


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
def test_float32_to_half_rounding_matches_numpy(device, queue):
    """FLOAT32 -> FLOAT16 stores: round to nearest even, overflow to inf, underflow to signed zero,
    subnormals, NaN kept; on the half range's edges and on random float32 bit patterns."""
    edges = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.99, 65520.0, -65520.0, 1e6, np.inf, -np.inf,
             6.103515625e-05, 6.0e-05, 5.960464477539063e-08, 2.98023223876953125e-08, 2.99e-08, 2.9e-08,
             -2.9e-08, 1e-10, 1e-45, 1.0009765625, 1.00048828125, 1.00146484375, 2049.0, 2051.0, np.nan]
    bits = rng("native f32 bits").integers(0, 2**32, size=4096 - len(edges), dtype=np.uint64).astype(np.uint32)
    values = np.concatenate([np.array(edges, np.float32), bits.view(np.float32)]).reshape(1, 32, 32, 4)
    y = forward(device, queue, descriptor((T.NONE, 0.0, 0.0, 0.0)), values, F32, F16)
    same_bits(y.to_numpy().astype(np.float32), half(values).astype(np.float32), "float32 -> half")
    # A result that overflows half becomes inf (a = 300 times 300).
    big = np.full((1, 1, 9, 4), 300.0, np.float32)
    y = forward(device, queue, descriptor((T.LINEAR, 300.0, 0.0, 0.0)), big, F16, F16)
    assert np.all(np.isposinf(y.to_numpy()))


# ---- the neuron forward and gradient against the float32 kernel -------------------------------------


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
@pytest.mark.parametrize("spec", NEURONS, ids=lambda s: str(s[0]).split(".")[-1])
def test_forward_every_type_and_format_matches_float32_kernel(device, queue, spec):
    desc = descriptor(spec)
    positive = spec[0] in (T.LOGARITHM, T.POWER)
    for width, channels in ((1, 3), (7, 8), (9, 3), (33, 4)):
        x = inputs(f"fwd {spec[0]} {width}", (2, 3, width, channels), positive)
        expected = forward(device, queue, desc, x, F32, F32).to_numpy()
        for x_fmt, y_fmt in ((F16, F16), (F16, F32), (F32, F16)):
            y = forward(device, queue, desc, x, x_fmt, y_fmt).to_numpy()
            want = half(expected) if y_fmt == F16 else expected
            same_bits(y.astype(np.float32), np.asarray(want, np.float32), f"{spec[0]} {width}x{channels} {x_fmt}->{y_fmt}")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
@pytest.mark.parametrize("spec", [NEURONS[1], NEURONS[5], NEURONS[9], NEURONS[14]],
                         ids=lambda s: str(s[0]).split(".")[-1])
def test_gradient_every_format_combination_matches_float32_kernel(device, queue, spec):
    desc = descriptor(spec)
    for width, channels in ((1, 4), (9, 3), (33, 8)):
        x = inputs(f"grad x {spec[0]} {width}", (1, 2, width, channels))
        g = inputs(f"grad g {spec[0]} {width}", (1, 2, width, channels))
        expected = gradient(device, queue, desc, g, x, (F32, F32, F32)).to_numpy()
        for fmts in itertools.product((F16, F32), repeat=3):
            if fmts == (F32, F32, F32):
                continue
            dx = gradient(device, queue, desc, g, x, fmts).to_numpy()
            want = half(expected) if fmts[2] == F16 else expected
            same_bits(dx.astype(np.float32), np.asarray(want, np.float32), f"{spec[0]} {width}x{channels} {fmts}")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
@pytest.mark.parametrize("edge", [m.ImageEdgeMode.ZERO, m.ImageEdgeMode.CLAMP], ids=["zero", "clamp"])
def test_forward_channel_slices_clip_and_offsets(device, queue, edge):
    """Channel offsets on both sides, a clip rectangle and a read offset that reaches off the image:
    only the clipped pixels of the destination's channel slice change, the rest keep their halves."""
    x = inputs("slices x", (1, 6, 11, 10))
    fill = half(inputs("slices fill", (1, 7, 13, 12))).astype(np.float32)

    def configure(kernel):
        kernel.source_feature_channel_offset = 4
        kernel.source_feature_channel_max_count = 5  # channels 4..8
        kernel.destination_feature_channel_offset = 4  # written channels 4..8
        kernel.offset = (-2, 3, 0)  # columns and rows past the source's edges
        kernel.clip_rect = m.Region((1, 2, 0), (9, 5, 1))
        kernel.edge_mode = edge

    desc = descriptor((T.TANH, 1.5, 0.7, 0.0))
    expected = forward(device, queue, desc, x, F32, F32, configure, fill).to_numpy()
    assert not np.array_equal(expected, fill)
    for x_fmt, y_fmt in ((F16, F16), (F16, F32), (F32, F16)):
        y = forward(device, queue, desc, x, x_fmt, y_fmt, configure, fill).to_numpy()
        want = half(expected) if y_fmt == F16 else expected
        same_bits(y.astype(np.float32), np.asarray(want, np.float32), f"{x_fmt}->{y_fmt}")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
def test_in_place_half_forward(device, queue):
    """Source and destination the same FLOAT16 image."""
    x_arr = inputs("in place", (1, 5, 9, 8))
    x = image(x_arr, device, F16)
    kernel = m.CNNNeuron(device, descriptor((T.SIGMOID, 0.0, 0.0, 0.0)))
    run(queue, lambda cb: kernel.encode(cb, x, destination_image=x))
    expected = forward(device, queue, descriptor((T.SIGMOID, 0.0, 0.0, 0.0)), x_arr, F32, F32).to_numpy()
    same_bits(x.to_numpy().astype(np.float32), half(expected).astype(np.float32), "in place")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
def test_half_forward_and_gradient_against_pytorch(device, queue):
    """ELU on FLOAT16 images against PyTorch autograd in float64 (half-valued inputs; one rounding
    of each output: 2**-11 relative, plus float32 rounding of the kernel)."""
    x_arr = inputs("torch x", (1, 4, 7, 4))
    g_arr = inputs("torch g", (1, 4, 7, 4))
    desc = descriptor((T.ELU, 0.7, 0.0, 0.0))
    y = forward(device, queue, desc, x_arr, F16, F16).to_numpy().astype(np.float64)
    dx = gradient(device, queue, desc, g_arr, x_arr, (F16, F16, F16)).to_numpy().astype(np.float64)
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    yt = torch.nn.functional.elu(xt, alpha=0.7)
    (yt * torch.tensor(g_arr, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=2**-10, atol=2**-24)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=2**-10, atol=2**-24)


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
def test_prelu_gradient_on_half_images(device, queue):
    """PReLU's gradient keeps float32 shadows (its dL/da op reads float32): FLOAT16 operands still
    give the float32 kernel's result rounded once."""
    data = [0.1, 0.2, 0.3, 0.4, 0.5]
    desc = m.NNNeuronDescriptor.prelu(data)
    x = inputs("prelu x", (1, 3, 9, 5))
    g = inputs("prelu g", (1, 3, 9, 5))
    expected = gradient(device, queue, desc, g, x, (F32, F32, F32)).to_numpy()
    dx = gradient(device, queue, desc, g, x, (F16, F16, F16)).to_numpy()
    same_bits(dx.astype(np.float32), half(expected).astype(np.float32), "prelu gradient")
    y = forward(device, queue, desc, x, F16, F16).to_numpy()
    same_bits(y.astype(np.float32), half(forward(device, queue, desc, x, F32, F32).to_numpy()).astype(np.float32),
              "prelu forward")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", NEURONS, ids=lambda s: str(s[0]).split(".")[-1])
def test_whole_dense_half_images(device, queue, spec, threads):
    """Whole dense FLOAT16 images (channels a multiple of 4, no slice, clip or offset): on the CPU
    the forward and the gradient run as maps over flat arrays with the conversions fused into the
    loop (half_fused.h). Bit for bit the float32 kernel's results rounded to half, for 12 elements
    (a 4-element tail after one 8-lane group), 120, and 18,204 elements (two parallel
    chunks and a tail)."""
    desc = descriptor(spec)
    positive = spec[0] in (T.LOGARITHM, T.POWER)
    before = m.get_num_threads()
    m.set_num_threads(threads)
    try:
        for shape in ((1, 3, 1, 4), (1, 3, 5, 8), (1, 37, 41, 12)):
            x = inputs(f"fused x {spec[0]} {shape}", shape, positive)
            g = inputs(f"fused g {spec[0]} {shape}", shape)
            expected = forward(device, queue, desc, x, F32, F32).to_numpy()
            y = forward(device, queue, desc, x, F16, F16).to_numpy()
            same_bits(y.astype(np.float32), half(expected).astype(np.float32), f"{spec[0]} {shape} forward")
            expected = gradient(device, queue, desc, g, x, (F32, F32, F32)).to_numpy()
            dx = gradient(device, queue, desc, g, x, (F16, F16, F16)).to_numpy()
            same_bits(dx.astype(np.float32), half(expected).astype(np.float32), f"{spec[0]} {shape} gradient")
    finally:
        m.set_num_threads(before)
