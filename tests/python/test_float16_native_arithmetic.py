"""Arithmetic (CNNAdd / Subtract / Multiply / Divide, their gradient filters, NNCompare) and dropout
reading and writing FLOAT16 storage natively (docs/float16.md "Which kernels read half natively").

Oracle: the same kernel on FLOAT32 images holding the same half-valued inputs, rounded to half by
NumPy. The native path runs the float32 kernel's arithmetic (same operations, same summation order
for the broadcast reductions of the gradients) on rows converted from half and rounds each result
once to nearest even, so it must give the same bits. The float32 kernels are checked against
PyTorch autograd by test_arithmetic.py and test_dropout.py; one case here checks PyTorch directly.

Every broadcasting pattern of test_arithmetic.py on either operand, with clamps, for every op and
every FLOAT16 / FLOAT32 mix of the four images involved; rows of 1, 9 and 33 pixels with 3 channels
(padding lanes) and 8; channel slices, read offsets, clip rectangles; CNNDivide in place over a
FLOAT16 secondary (its state keeps a float32 copy of y). The last test checks the batch shadows of
the families that still compute in float32 (core/float16_shadow.h, Float32Shadows::cover) the same
way: one block, interleaved blocks and a repeated image.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import rng
from test_float16_native import same_bits

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32

pytestmark = pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")

OPS = {
    "add": (m.CNNAdd, m.CNNAddGradient),
    "subtract": (m.CNNSubtract, m.CNNSubtractGradient),
    "multiply": (m.CNNMultiply, m.CNNMultiplyGradient),
    "divide": (m.CNNDivide, m.CNNDivideGradient),
}

# (operand shape (h, w, c) as a function of the full (h, w, c), strides (x, y, channels))
PATTERNS = {
    "full": (lambda h, w, c: (h, w, c), (1, 1, 1)),
    "scalar": (lambda h, w, c: (1, 1, 1), (0, 0, 0)),
    "pixel": (lambda h, w, c: (1, 1, c), (0, 0, 1)),
    "row": (lambda h, w, c: (1, w, c), (1, 0, 1)),
    "column": (lambda h, w, c: (h, 1, c), (0, 1, 1)),
    "channel": (lambda h, w, c: (h, w, 1), (1, 1, 0)),
}


def half(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16)


def halved(values):
    """float32 values that FLOAT16 images store exactly."""
    return half(values).astype(np.float32)


def image(array, device, fmt):
    return m.Image.from_numpy(np.ascontiguousarray(array, dtype=np.float32), device, channel_format=fmt)


def expect(result32, fmt):
    """What a destination of format `fmt` holds for the float32 kernel's result."""
    return halved(result32) if fmt == F16 else np.asarray(result32, np.float32)


def committed(queue, encode):
    cb = queue.command_buffer()
    encode(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error


def arithmetic(device, queue, op, x, y, g, fmts, configure, fills=None):
    """Forward r and both gradients dx, dy; fmts = (x, y, g, r, dx, dy) storage formats."""
    forward_cls, gradient_cls = OPS[op]
    fx, fy, fg, fr, fdx, fdy = fmts
    kernel = forward_cls(device)
    configure(kernel)
    X, Y, G = image(x, device, fx), image(y, device, fy), image(g, device, fg)
    fills = fills or (np.zeros_like(g), np.zeros_like(x), np.zeros_like(y))
    R, DX, DY = image(fills[0], device, fr), image(fills[1], device, fdx), image(fills[2], device, fdy)
    state = kernel.result_state(X, Y)
    gx, gy = gradient_cls(device, False), gradient_cls(device, True)

    def encode(cb):
        kernel.encode(cb, X, Y, state, R)
        gx.destination_image_descriptor([G, Y], [state])  # copies the forward's broadcast parameters
        gy.destination_image_descriptor([G, X], [state])
        gx.encode(cb, G, Y, state, DX)
        gy.encode(cb, G, X, state, DY)

    committed(queue, encode)
    return [a.to_numpy().astype(np.float32) for a in (R, DX, DY)]


def broadcast_case(op, pattern, side, clamp, h, w, c, seed):
    gen = rng(seed)
    shape_of, strides = PATTERNS[pattern]
    small = shape_of(h, w, c)
    x_shape, y_shape = ((small, (h, w, c)) if side == "primary" else ((h, w, c), small))
    x = halved(gen.standard_normal((2, *x_shape)))
    y = gen.standard_normal((2, *y_shape))
    if op == "divide":  # divisors away from 0
        y = np.sign(y) * (0.5 + np.abs(y)) + (y == 0)
    y = halved(y)
    g = halved(gen.standard_normal((2, h, w, c)))

    def configure(k):
        k.primary_scale, k.secondary_scale, k.bias = 1.25, -0.75, 0.3
        if clamp:
            k.minimum_value, k.maximum_value = -0.4, 0.9
        sx, sy, sc = strides
        setattr(k, f"{side}_stride_in_pixels_x", sx)
        setattr(k, f"{side}_stride_in_pixels_y", sy)
        setattr(k, f"{side}_stride_in_feature_channels", sc)

    return x, y, g, configure


CASES = [(op, pattern, side, clamp) for op in OPS for pattern in PATTERNS
         for side in (("secondary",) if pattern == "full" else ("secondary", "primary")) for clamp in (False, True)]


@pytest.mark.parametrize("op,pattern,side,clamp", CASES,
                         ids=[f"{o}-{p}-{s}{'-clamp' if c else ''}" for o, p, s, c in CASES])
def test_arithmetic_every_format_mix_matches_float32_kernel(device, queue, op, pattern, side, clamp):
    x, y, g, configure = broadcast_case(op, pattern, side, clamp, 3, 9, 3, f"native arith {op} {pattern} {side}")
    expected = arithmetic(device, queue, op, x, y, g, (F32,) * 6, configure)
    # Inputs all FLOAT16 with every destination mix, and each input alone FLOAT16.
    mixes = [(F16, F16, F16, *out) for out in itertools.product((F16, F32), repeat=3)]
    mixes += [(F16, F32, F32, F16, F32, F16), (F32, F16, F32, F32, F16, F32), (F32, F32, F16, F16, F16, F16)]
    for fmts in mixes:
        got = arithmetic(device, queue, op, x, y, g, fmts, configure)
        for name, a, e, fmt in zip(("r", "dx", "dy"), got, expected, fmts[3:]):
            same_bits(a, expect(e, fmt), f"{op} {pattern} {side} {name} {fmts}")


@pytest.mark.parametrize("width,channels", [(1, 3), (33, 8), (17, 5)])
def test_arithmetic_row_lengths(device, queue, width, channels):
    """Rows of 1, 33 and 17 pixels (the tails of the 8-lane conversions), 3, 8 and 5 channels."""
    for op in OPS:
        x, y, g, configure = broadcast_case(op, "full", "secondary", True, 2, width, channels, f"rows {op} {width}")
        expected = arithmetic(device, queue, op, x, y, g, (F32,) * 6, configure)
        got = arithmetic(device, queue, op, x, y, g, (F16,) * 6, configure)
        for name, a, e in zip(("r", "dx", "dy"), got, expected):
            same_bits(a, halved(e), f"{op} {width}x{channels} {name}")


@pytest.mark.parametrize("edge", [m.ImageEdgeMode.ZERO, m.ImageEdgeMode.CLAMP], ids=["zero", "clamp"])
def test_arithmetic_channel_slices_offsets_and_clip(device, queue, edge):
    """Channel offsets on every image, read offsets past the edges, a clip rectangle: only the clip
    of the destination's channel slice changes, everything else keeps its (half) values."""
    gen = rng("native arith slices")
    x = halved(gen.standard_normal((1, 6, 7, 12)))
    y = halved(gen.standard_normal((1, 5, 5, 8)))
    g = halved(gen.standard_normal((1, 5, 8, 12)))
    fills = tuple(halved(gen.standard_normal(s)) for s in ((1, 5, 8, 12), (1, 6, 7, 12), (1, 5, 5, 8)))

    def configure(k):
        k.primary_scale, k.secondary_scale, k.bias = 0.5, 2.0, -0.1
        k.primary_source_feature_channel_offset = 4  # x channels 4..11
        k.secondary_source_feature_channel_max_count = 8
        k.destination_feature_channel_offset = 4
        k.primary_offset = (1, 2, 0)
        k.secondary_offset = (0, 1, 0)
        k.clip_rect = m.Region((2, 1, 0), (4, 3, 1))
        k.minimum_value, k.maximum_value = -0.6, 0.7
        k.primary_edge_mode = k.secondary_edge_mode = edge

    expected = arithmetic(device, queue, "multiply", x, y, g, (F32,) * 6, configure, fills)
    for fmts in ((F16,) * 6, (F16, F32, F16, F32, F16, F32), (F32, F16, F32, F16, F32, F16)):
        got = arithmetic(device, queue, "multiply", x, y, g, fmts, configure, fills)
        for name, a, e, fmt in zip(("r", "dx", "dy"), got, expected, fmts[3:]):
            same_bits(a, expect(e, fmt), f"{name} {fmts}")


def test_divide_in_place_over_a_half_secondary(device, queue):
    """CNNDivide writing over its FLOAT16 y still differentiates with the y it read: the state's
    copy of y is converted to float32 before the forward overwrites it."""
    gen = rng("native divide in place")
    x = halved(gen.standard_normal((1, 4, 5, 4)))
    y = halved(np.sign(gen.standard_normal((1, 4, 5, 4))) * (0.5 + np.abs(gen.standard_normal((1, 4, 5, 4)))))
    g = halved(gen.standard_normal((1, 4, 5, 4)))

    def run(fmt):
        X, Y, G, Ycopy = image(x, device, fmt), image(y, device, fmt), image(g, device, fmt), image(y, device, fmt)
        div = m.CNNDivide(device)
        out = {}

        def encode(cb):
            state = div.temporary_result_state(cb, X, Y)
            state.read_count = 2
            div.encode(cb, X, Y, state, Y)  # in place over y
            gradient = m.CNNDivideGradient(device, True), m.CNNDivideGradient(device, False)
            for kernel in gradient:  # persistent results: read after the command buffer completed
                kernel.destination_image_allocator = m.ImageAllocator.persistent()
            out["dy"] = gradient[0].encode(cb, G, X, state)
            out["dx"] = gradient[1].encode(cb, G, Ycopy, state)

        committed(queue, encode)
        return [a.to_numpy().astype(np.float32) for a in (Y, out["dx"], out["dy"])]

    expected = run(F32)
    for name, a, e in zip(("r", "dx", "dy"), run(F16), expected):
        same_bits(a, halved(e), name)


def test_half_arithmetic_against_pytorch(device, queue):
    """Multiply with a per-channel broadcast secondary on FLOAT16 images against PyTorch autograd in
    float64: each stored value is rounded once to half (2**-11 relative) after float32 arithmetic;
    dy sums 2*3*9 = 54 products (float32 rounding, well under 2**-11)."""
    x, y, g, configure = broadcast_case("multiply", "pixel", "secondary", False, 3, 9, 4, "native torch")
    r, dx, dy = arithmetic(device, queue, "multiply", x, y, g, (F16,) * 6, configure)
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    Y = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    out = (1.25 * X) * (-0.75 * Y) + 0.3
    (out * torch.tensor(g, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(r, out.detach().numpy(), rtol=2**-10, atol=2**-24)
    np.testing.assert_allclose(dx, X.grad.numpy(), rtol=2**-10, atol=2**-24)
    np.testing.assert_allclose(dy, Y.grad.numpy(), rtol=2**-10, atol=1e-5)


@pytest.mark.parametrize("comparison", list(m.NNComparisonType.__members__.values()), ids=lambda c: c.name)
def test_compare_every_format_mix(device, queue, comparison):
    gen = rng(f"native compare {comparison.name}")
    x = np.round(gen.standard_normal((2, 3, 9, 6)) * 2).astype(np.float32) / 2  # exact ties
    y = np.round(gen.standard_normal((2, 1, 1, 6)) * 2).astype(np.float32) / 2

    def run(fx, fy, fd):
        cmp = m.NNCompare(device)
        cmp.comparison_type = comparison
        cmp.threshold = 0.5
        cmp.bias = 0.25
        cmp.secondary_stride_in_pixels_x = cmp.secondary_stride_in_pixels_y = 0
        X, Y, D = image(x, device, fx), image(y, device, fy), image(np.zeros_like(x), device, fd)
        committed(queue, lambda cb: cmp.encode(cb, X, Y, None, D))
        return D.to_numpy().astype(np.float32)

    expected = run(F32, F32, F32)
    for fmts in itertools.product((F16, F32), repeat=3):
        same_bits(run(*fmts), expect(expected, fmts[2]), str(fmts))


# ---- dropout ------------------------------------------------------------------------------------------


def dropout(device, queue, x, g, fmts, stride=(1, 1, 1), configure=None, fills=None):
    """Forward y and gradient dx with a fresh kernel (so the first mask); fmts = (x, y, g, dx)."""
    fx, fy, fg, fdx = fmts
    keep, seed = 0.6, 77
    fwd = m.CNNDropout(device, keep, seed=seed, mask_stride_in_pixels=stride)
    bwd = m.CNNDropoutGradient(device, keep, seed=seed, mask_stride_in_pixels=stride)
    if configure:
        configure(fwd)
    fills = fills or (np.zeros_like(x), np.zeros_like(x))
    X, G = image(x, device, fx), image(g, device, fg)
    Y, DX = image(fills[0], device, fy), image(fills[1], device, fdx)
    state = fwd.result_state(X)

    def encode(cb):
        fwd.encode(cb, X, state, Y)
        bwd.encode(cb, G, X, state, DX)

    committed(queue, encode)
    return Y.to_numpy().astype(np.float32), DX.to_numpy().astype(np.float32)


@pytest.mark.parametrize("width,channels,stride", [(9, 3, (1, 1, 1)), (33, 8, (0, 1, 1)), (1, 5, (0, 1, 1)), (17, 5, (1, 0, 0))])
def test_dropout_every_format_mix(device, queue, width, channels, stride):
    gen = rng(f"native dropout {width} {channels}")
    x = halved(gen.standard_normal((2, 3, width, channels)) + 3.0)
    g = halved(gen.standard_normal((2, 3, width, channels)))
    expected = dropout(device, queue, x, g, (F32,) * 4, stride)
    assert np.any(expected[0] == 0) and np.any(expected[0] != 0)
    for fmts in itertools.product((F16, F32), repeat=4):
        got = dropout(device, queue, x, g, fmts, stride)
        same_bits(got[0], expect(expected[0], fmts[1]), f"y {fmts}")
        same_bits(got[1], expect(expected[1], fmts[3]), f"dx {fmts}")


def test_dropout_channel_slices_and_clip(device, queue):
    gen = rng("native dropout slices")
    x = halved(gen.standard_normal((1, 6, 7, 10)) + 3.0)
    g = halved(gen.standard_normal((1, 6, 7, 10)))
    fills = (halved(gen.standard_normal((1, 6, 7, 10))), halved(gen.standard_normal((1, 6, 7, 10))))

    def configure(k):
        k.source_feature_channel_offset = 4
        k.source_feature_channel_max_count = 5
        k.destination_feature_channel_offset = 4
        k.clip_rect = m.Region((1, 2, 0), (5, 3, 1))
        k.offset = (1, 2, 0)

    expected = dropout(device, queue, x, g, (F32,) * 4, configure=configure, fills=fills)
    assert not np.array_equal(expected[0], fills[0])
    got = dropout(device, queue, x, g, (F16,) * 4, configure=configure, fills=fills)
    same_bits(got[0], halved(expected[0]), "y")
    same_bits(got[1], halved(expected[1]), "dx")


# ---- batch shadows (the families that still compute on float32 shadows) ------------------------------


def test_batch_shadows_give_the_float32_kernel_result(device, queue):
    """Max pooling and a convolution (float32 shadows) on FLOAT16 batches: a batch from one block
    (one shadow for all its images), the images of two blocks interleaved, and one image twice;
    every result is the float32 kernel's on the same values, rounded to half once."""
    gen = rng("batch shadows")
    a = halved(gen.standard_normal((3, 6, 7, 8)))
    b = halved(gen.standard_normal((3, 6, 7, 8)))
    weights = gen.standard_normal((4, 3, 3, 8)).astype(np.float32) * 0.2
    desc = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=8,
                                      output_feature_channels=4)
    source = m.CNNConvolutionWeightsDataSource(desc, weights, np.linspace(-1, 1, 4).astype(np.float32))
    kernels = [m.CNNPoolingMax(device, 2, 2, 2, 2), m.CNNConvolution(device, source)]

    def results(batch):
        out = []
        for k in kernels:
            k.destination_image_allocator = m.ImageAllocator.persistent()
            cb = queue.command_buffer()
            ys = k.encode_batch(cb, batch)
            cb.commit()
            cb.wait_until_completed()
            assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
            out.append(m.batch_to_numpy(ys).astype(np.float32))
        return out

    a16, b16 = (m.batch_from_numpy(v, device, channel_format=F16) for v in (a, b))
    a32, b32 = (m.batch_from_numpy(v, device) for v in (a, b))
    orders = [lambda x, y: x, lambda x, y: [x[0], y[0], x[1], y[1], x[2], y[2]], lambda x, y: [x[1], x[1], y[2]]]
    for i, order in enumerate(orders):
        for got, want in zip(results(order(a16, b16)), results(order(a32, b32))):
            same_bits(got, halved(want), f"order {i}")


@pytest.mark.float32_only("builds its FLOAT16 and FLOAT32 images explicitly")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op", list(OPS))
def test_whole_dense_half_images(device, queue, op, threads):
    """Whole dense FLOAT16 images, no clamp, no offsets: on the CPU the forward and both gradients
    run as maps over flat arrays with the conversions fused into the loop (half_fused.h). They must
    give the float32 kernel's results rounded to half, bit for bit: 12 elements (a 4-element tail
    after one 8-lane group), 3 x 5 x 8 per image in a batch of 2, and 18,204 elements (two parallel
    chunks and a tail)."""
    before = m.get_num_threads()
    m.set_num_threads(threads)
    try:
        for shape in ((1, 3, 1, 4), (2, 3, 5, 8), (1, 37, 41, 12)):
            gen = rng(f"fused {op} {shape}")
            x = halved(gen.standard_normal(shape))
            y = gen.standard_normal(shape)
            if op == "divide":  # divisors away from 0
                y = np.sign(y) * (0.5 + np.abs(y)) + (y == 0)
            y = halved(y)
            g = halved(gen.standard_normal(shape))

            def configure(k):
                k.primary_scale, k.secondary_scale, k.bias = 1.25, -0.75, 0.3

            expected = arithmetic(device, queue, op, x, y, g, (F32,) * 6, configure)
            got = arithmetic(device, queue, op, x, y, g, (F16,) * 6, configure)
            for name, a, e in zip(("r", "dx", "dy"), got, expected):
                same_bits(a, halved(e), f"{op} {shape} {name} on {threads} threads")
    finally:
        m.set_num_threads(before)
