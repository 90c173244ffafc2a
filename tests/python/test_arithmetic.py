"""CNNAdd / CNNSubtract / CNNMultiply / CNNDivide, their gradient filters, and NNCompare.

Oracle: PyTorch autograd in float64 of r = clamp((pS*x) OP (sS*y) + bias, lo, hi) with NumPy-style
broadcasting of NHWC tensors, which sums the gradient over every broadcast axis exactly as the
MPS gradient filters must. Each broadcasting pattern (scalar, per-channel pixel, row, column,
single channel, none) is applied to the secondary and to the primary, with non-default scales and
bias, with and without a clamp, for both gradient filters (is_secondary_source_filter False/True).
torch.clamp's derivative is 1 on the boundary and so is the mask mpsgrad stores; clamp bounds are
picked away from every value so the boundary never decides a case.

Bound: max relative error <= 1e-4. Forward values are one or two float32 roundings; a
gradient element sums at most 2*5*6*7 = 420 float32 terms of O(1) in the grid (30720 in the
large-reduction test), which the backends add in blocked / tree order with an error of ~1e-6
relative to the result's scale; any indexing or reduction mistake gives an O(1) error. The large
reductions are also required to be bitwise identical run to run.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import persistent, randn, rng

N, H, W, C = 2, 5, 6, 7

OPS = {
    "add": (m.CNNAdd, m.CNNAddGradient, lambda a, b: a + b),
    "subtract": (m.CNNSubtract, m.CNNSubtractGradient, lambda a, b: a - b),
    "multiply": (m.CNNMultiply, m.CNNMultiplyGradient, lambda a, b: a * b),
    "divide": (m.CNNDivide, m.CNNDivideGradient, lambda a, b: a / b),
}

# pattern: (operand shape (h, w, c), strides (x, y, channels))
PATTERNS = {
    "full": ((H, W, C), (1, 1, 1)),
    "scalar": ((1, 1, 1), (0, 0, 0)),
    "pixel": ((1, 1, C), (0, 0, 1)),
    "row": ((1, W, C), (1, 0, 1)),
    "column": ((H, 1, C), (0, 1, 1)),
    "channel": ((H, W, 1), (1, 1, 0)),
}

CASES = []
for op in OPS:
    for pattern in PATTERNS:
        for side in (("secondary",) if pattern == "full" else ("secondary", "primary")):
            for clamp in (False, True):
                CASES.append((op, pattern, side, clamp))


def _set_strides(kernel, side, strides):
    sx, sy, sc = strides
    setattr(kernel, f"{side}_stride_in_pixels_x", sx)
    setattr(kernel, f"{side}_stride_in_pixels_y", sy)
    setattr(kernel, f"{side}_stride_in_feature_channels", sc)


def _operand(gen, shape, nonzero):
    v = randn(gen, N, *shape)
    if nonzero:  # divisors away from 0
        v = (np.sign(v) + (v == 0)) * (0.5 + 0.5 * np.abs(v))
    return v.astype(np.float32)


def _bounds(u):
    """Clamp bounds that clip some values and lie at least 1e-3 away from every value."""
    flat = np.sort(u.reshape(-1))
    lo_i, hi_i = len(flat) // 5, (4 * len(flat)) // 5
    def gap_mid(i):
        for j in range(i, len(flat) - 1):
            if flat[j + 1] - flat[j] > 2e-3:
                return float(np.float32((flat[j] + flat[j + 1]) / 2))
        return float(flat[-1] + 1.0)
    return gap_mid(lo_i), gap_mid(hi_i)


def _torch_ref(fn, x, y, g, pS, sS, bias, bounds):
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    Y = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    r = fn(pS * X, sS * Y) + bias
    if bounds is not None:
        r = torch.clamp(r, bounds[0], bounds[1])
    (r * torch.tensor(g, dtype=torch.float64)).sum().backward()
    return r.detach().numpy(), X.grad.numpy(), Y.grad.numpy()


@pytest.mark.parametrize("op,pattern,side,clamp", CASES,
                         ids=[f"{o}-{p}-{s}{'-clamp' if c else ''}" for o, p, s, c in CASES])
def test_arithmetic_forward_and_gradients(device, queue, check, op, pattern, side, clamp):
    forward_cls, gradient_cls, fn = OPS[op]
    gen = rng(f"arith-{op}-{pattern}-{side}-{clamp}")
    shape, strides = PATTERNS[pattern]
    full = (H, W, C)
    x_shape, y_shape = (shape, full) if side == "primary" else (full, shape)
    x = _operand(gen, x_shape, False)
    y = _operand(gen, y_shape, op == "divide")
    g = randn(gen, N, H, W, C)
    pS, sS, bias = 1.25, -0.75, 0.3
    bounds = None
    if clamp:
        u = fn(pS * x.astype(np.float64), sS * y.astype(np.float64)) + bias
        bounds = _bounds(u)

    kernel = forward_cls(device)
    kernel.primary_scale, kernel.secondary_scale, kernel.bias = pS, sS, bias
    if bounds is not None:
        kernel.minimum_value, kernel.maximum_value = bounds
    _set_strides(kernel, side, strides)
    kernel.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    ys = m.batch_from_numpy(y, device)
    gs = m.batch_from_numpy(g, device)
    cb = queue.command_buffer()
    rs, states = kernel.encode_batch(cb, xs, ys, destination_state_is_temporary=False)
    assert all(isinstance(s, m.CNNArithmeticGradientState) for s in states)
    assert states[0].has_clamp_mask == clamp
    grad_x = gradient_cls(device, False)
    grad_y = gradient_cls(device, True)
    assert not grad_x.is_secondary_source_filter and grad_y.is_secondary_source_filter
    for gk in (grad_x, grad_y):
        gk.destination_image_allocator = m.ImageAllocator.persistent()
    dxs = grad_x.encode_batch(cb, gs, ys, states)  # source_image = the other operand (y)
    dys = grad_y.encode_batch(cb, gs, xs, states)  # source_image = the other operand (x)
    assert (grad_x.primary_scale, grad_x.secondary_scale) == (pS, sS), "copied from the state"
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED

    r_ref, dx_ref, dy_ref = _torch_ref(fn, x, y, g, pS, sS, bias, bounds)
    r = m.batch_to_numpy(rs)
    assert r.shape == (N, H, W, C)
    check(r, r_ref, "forward")
    dx = m.batch_to_numpy(dxs)
    dy = m.batch_to_numpy(dys)
    assert dx.shape == x.shape and dy.shape == y.shape, "each gradient has its input's shape"
    check(dx, dx_ref, "gradient of the primary")
    check(dy, dy_ref, "gradient of the secondary")


def test_default_scales_give_the_mps_results(device, queue, check):
    """With the default scales: add G / G, subtract G / -G, multiply G*y / G*x (MPS's documented results)."""
    gen = rng("arith-defaults")
    x, y, g = (randn(gen, 1, 3, 4, 4) for _ in range(3))
    expected = {
        "add": (g, g), "subtract": (g, -g), "multiply": (g * y, g * x), "divide": (g / y, -g * x / (y * y)),
    }
    for op, (forward_cls, gradient_cls, _) in OPS.items():
        X, Y, G = (m.Image.from_numpy(a, device) for a in (x, y, g))
        cb = queue.command_buffer()
        _, state = forward_cls(device).encode(cb, X, Y, destination_state_is_temporary=False)
        dx = persistent(gradient_cls(device, False)).encode(cb, G, Y, state)
        dy = persistent(gradient_cls(device, True)).encode(cb, G, X, state)
        cb.commit()
        cb.wait_until_completed()
        check(dx.to_numpy(), expected[op][0], f"{op} primary")
        check(dy.to_numpy(), expected[op][1], f"{op} secondary")


def test_subtract_secondary_filter_mps_convention(device, queue, check):
    """MPS asks for primary_scale = -1 on MPSCNNSubtractGradient's secondary filter; the derivative with
    respect to y does not involve pS, so that code still gets -G."""
    gen = rng("sub-mps")
    x, y, g = (randn(gen, 1, 3, 4, 4) for _ in range(3))
    X, Y, G = (m.Image.from_numpy(a, device) for a in (x, y, g))
    cb = queue.command_buffer()
    sub = m.CNNSubtract(device)
    r = m.Image(device, m.ImageDescriptor(width=4, height=3, feature_channels=4))
    state = sub.result_state(X, Y)
    sub.encode(cb, X, Y, state, r)
    gy = m.CNNSubtractGradient(device, True)
    gy.primary_scale = -1.0
    dy = m.Image(device, m.ImageDescriptor(width=4, height=3, feature_channels=4))
    gy.encode(cb, G, X, state, dy)
    cb.commit()
    cb.wait_until_completed()
    check(r.to_numpy(), x - y, "forward")
    check(dy.to_numpy(), -g, "secondary gradient")


def test_destination_forms_with_offsets_and_channel_slices(device, queue, check):
    """Explicit destination forms: channel offsets on all three images, a secondary offset and a clip
    rectangle; the gradient filters configured by destination_image_descriptor."""
    gen = rng("arith-dest")
    x = randn(gen, 1, 6, 7, 12)
    y = randn(gen, 1, 5, 5, 8)
    sentinel = 9.5
    mul = m.CNNMultiply(device)
    mul.primary_scale, mul.secondary_scale, mul.bias = 0.5, 2.0, -0.1
    mul.primary_source_feature_channel_offset = 4       # x channels 4..11 (8)
    mul.secondary_source_feature_channel_offset = 0
    mul.secondary_source_feature_channel_max_count = 8  # y channels 0..7
    mul.destination_feature_channel_offset = 4
    mul.primary_offset = (1, 2, 0)
    mul.secondary_offset = (0, 1, 0)
    mul.clip_rect = m.Region((2, 1, 0), (4, 3, 1))
    mul.minimum_value, mul.maximum_value = -0.6, 0.7
    X, Y = m.Image.from_numpy(x, device), m.Image.from_numpy(y, device)
    R = m.Image.from_numpy(np.full((1, 5, 8, 12), sentinel, np.float32), device)
    state = mul.result_state(X, Y)
    cb = queue.command_buffer()
    assert mul.encode(cb, X, Y, state, R) is R
    g = randn(gen, 1, 5, 8, 12)
    G = m.Image.from_numpy(g, device)
    gx, gy = m.CNNMultiplyGradient(device, False), m.CNNMultiplyGradient(device, True)
    dx_desc = gx.destination_image_descriptor([G, Y], [state])
    dy_desc = gy.destination_image_descriptor([G, X], [state])
    assert (dx_desc.width, dx_desc.height, dx_desc.feature_channels) == (7, 6, 12)
    assert (dy_desc.width, dy_desc.height, dy_desc.feature_channels) == (5, 5, 8)
    DX = m.Image.from_numpy(np.full((1, 6, 7, 12), sentinel, np.float32), device)
    DY = m.Image.from_numpy(np.full((1, 5, 5, 8), sentinel, np.float32), device)
    gx.encode(cb, G, Y, state, DX)
    gy.encode(cb, G, X, state, DY)
    cb.commit()
    cb.wait_until_completed()

    xs = torch.tensor(x[0, 2:5, 1:5, 4:12], dtype=torch.float64, requires_grad=True)
    ys = torch.tensor(y[0, 1:4, 0:4, 0:8], dtype=torch.float64, requires_grad=True)
    r = torch.clamp((0.5 * xs) * (2.0 * ys) - 0.1, -0.6, 0.7)
    (r * torch.tensor(g[0, 1:4, 2:6, 4:12], dtype=torch.float64)).sum().backward()
    ro = R.to_numpy()[0]
    check(ro[1:4, 2:6, 4:12], r.detach().numpy(), "forward in the clip")
    mask = np.ones(ro.shape, bool)
    mask[1:4, 2:6, 4:12] = False
    assert np.all(ro[mask] == sentinel)
    dxo, dyo = DX.to_numpy()[0], DY.to_numpy()[0]
    check(dxo[2:5, 1:5, 4:12], xs.grad.numpy(), "primary gradient where the forward read x")
    check(dyo[1:4, 0:4, 0:8], ys.grad.numpy(), "secondary gradient where the forward read y")
    mask = np.ones(dxo.shape, bool)
    mask[2:5, 1:5, 4:12] = False
    assert np.all(dxo[mask] == sentinel)
    mask = np.ones(dyo.shape, bool)
    mask[1:4, 0:4, 0:8] = False
    assert np.all(dyo[mask] == sentinel)


def test_temporary_state_and_in_place_divide(device, queue, check):
    """A temporary state is consumed by its last gradient filter; CNNDivide writing its result over y
    still differentiates with the y it read (the state keeps a copy)."""
    gen = rng("div-inplace")
    x = randn(gen, 1, 4, 4, 4)
    y = _operand(gen, (4, 4, 4), True)[:1]
    g = randn(gen, 1, 4, 4, 4)
    X, Y, G = (m.Image.from_numpy(a, device) for a in (x, y, g))
    div = m.CNNDivide(device)
    cb = queue.command_buffer()
    state = div.temporary_result_state(cb, X, Y)
    state.read_count = 2
    y_copy = m.Image.from_numpy(y, device)
    div.encode(cb, X, Y, state, Y)  # in place over y
    dy = persistent(m.CNNDivideGradient(device, True)).encode(cb, G, X, state)
    dx = persistent(m.CNNDivideGradient(device, False)).encode(cb, G, y_copy, state)
    assert state.read_count == 0
    cb.commit()
    cb.wait_until_completed()
    check(Y.to_numpy(), x / y, "forward")
    check(dx.to_numpy(), g / y, "primary gradient")
    check(dy.to_numpy(), -g * x / (y * y), "secondary gradient")


# ---- NNCompare ------------------------------------------------------------------------------------------

COMPARISONS = {
    m.NNComparisonType.EQUAL: lambda a, b, t: np.abs(a - b) <= t,
    m.NNComparisonType.NOT_EQUAL: lambda a, b, t: ~(np.abs(a - b) <= t),
    m.NNComparisonType.LESS: lambda a, b, t: a < b,
    m.NNComparisonType.LESS_OR_EQUAL: lambda a, b, t: a <= b,
    m.NNComparisonType.GREATER: lambda a, b, t: a > b,
    m.NNComparisonType.GREATER_OR_EQUAL: lambda a, b, t: a >= b,
}


@pytest.mark.parametrize("comparison", list(COMPARISONS), ids=lambda c: c.name)
def test_compare(device, queue, comparison):
    gen = rng(f"compare-{comparison.name}")
    x = np.round(randn(gen, 2, 4, 5, 6) * 2) / 2  # many exact ties
    y = np.round(randn(gen, 2, 1, 1, 6) * 2) / 2  # per-channel values (pixel strides 0)
    cmp = m.NNCompare(device)
    assert cmp.comparison_type == m.NNComparisonType.EQUAL and cmp.threshold == 0.0
    cmp.comparison_type = comparison
    cmp.threshold = 0.5
    cmp.secondary_stride_in_pixels_x = cmp.secondary_stride_in_pixels_y = 0
    cmp.destination_image_allocator = m.ImageAllocator.persistent()
    cb = queue.command_buffer()
    rs = cmp.encode_batch(cb, m.batch_from_numpy(x, device), m.batch_from_numpy(y, device))
    assert cmp.result_state(m.Image.from_numpy(x[:1], device), m.Image.from_numpy(y[:1], device)) is None
    cb.commit()
    cb.wait_until_completed()
    expected = COMPARISONS[comparison](x, y, np.float32(0.5)).astype(np.float32)
    np.testing.assert_array_equal(m.batch_to_numpy(rs), expected)


def test_compare_scale_bias_clamp(device, queue):
    """NNCompare inherits the arithmetic scales, bias and clamp (applied as in the arithmetic ops)."""
    x = np.array([[[[1.0, 2.0, 3.0, 4.0]]]], np.float32)
    y = np.array([[[[2.0, 2.0, 2.0, 2.0]]]], np.float32)
    cmp = persistent(m.NNCompare(device))
    cmp.comparison_type = m.NNComparisonType.GREATER
    cmp.primary_scale = 2.0         # 2x > y: [F, T, T, T]
    cmp.bias = 0.5
    cmp.maximum_value = 1.25
    cb = queue.command_buffer()
    r = cmp.encode(cb, m.Image.from_numpy(x, device), m.Image.from_numpy(y, device))
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(r.to_numpy().reshape(-1), [0.5, 1.25, 1.25, 1.25])


# ---- bad inputs ---------------------------------------------------------------------------------------------


def test_bad_arithmetic_inputs(device, queue):
    cb = queue.command_buffer()
    x = m.TemporaryImage(cb, m.ImageDescriptor(width=4, height=4, feature_channels=4))
    y = m.Image.from_numpy(np.ones((1, 3, 4, 4), np.float32), device)
    add = m.CNNAdd(device)
    with pytest.raises(ValueError, match="secondary_stride_in_feature_channels"):
        add.secondary_stride_in_feature_channels = 2
    add.secondary_stride_in_pixels_x = 2
    with pytest.raises(ValueError, match="secondary_stride_in_pixels_x"):
        add.encode(cb, x, m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device))
    add.secondary_stride_in_pixels_x = -1
    with pytest.raises(ValueError, match="secondary_stride_in_pixels_x"):
        add.encode(cb, x, m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device))
    add.secondary_stride_in_pixels_x = 1
    # mismatched sizes without broadcasting
    with pytest.raises(ValueError, match="secondary_image.*rows"):
        add.encode(cb, x, y)
    # mismatched channels
    with pytest.raises(ValueError, match="feature channel"):
        add.encode(cb, x, m.Image.from_numpy(np.ones((1, 4, 4, 8), np.float32), device))
    add.minimum_value, add.maximum_value = 1.0, -1.0
    with pytest.raises(ValueError, match="minimum_value"):
        add.encode(cb, x, m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device))
    add.minimum_value, add.maximum_value = -3.0e38, 3.0e38
    assert x.read_count == 1, "nothing was encoded and the temporary source's read count is unchanged"
    # broadcasting fixes the size mismatch
    add.secondary_stride_in_pixels_y = 0
    r = add.encode(cb, x, y)
    assert x.read_count == 0
    cmp = m.NNCompare(device)
    X = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device)
    with pytest.raises(TypeError, match="NNCompare"):
        cmp.encode(cb, X, X, m.State(device, 16), m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device))
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert r.shape == (1, 4, 4, 4)


def test_bad_arithmetic_gradient_inputs(device, queue):
    gen = rng("arith-bad-grad")
    x, y, g = (randn(gen, 1, 3, 4, 4) for _ in range(3))
    X, Y, G = (m.Image.from_numpy(a, device) for a in (x, y, g))
    cb = queue.command_buffer()
    mul = m.CNNMultiply(device)
    _, state = mul.encode(cb, X, Y, destination_state_is_temporary=False)
    gx = m.CNNMultiplyGradient(device, False)
    # the wrong operand: the primary filter needs y, not x itself
    with pytest.raises(ValueError, match="other operand"):
        gx.encode(cb, G, X, state)
    with pytest.raises(ValueError, match="source_image"):
        gx.encode(cb, G, m.Image.from_numpy(np.ones((1, 3, 5, 4), np.float32), device), state)
    # a state of another operation
    with pytest.raises(TypeError, match="CNNAdd"):
        m.CNNAddGradient(device, False).encode(cb, G, Y, state)
    _, neuron_state = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU)).encode(
        cb, X, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="CNNArithmeticGradientState"):
        gx.encode(cb, G, Y, neuron_state)
    # broadcast parameters differing from the forward kernel's (destination form, properties as set)
    bmul = m.CNNMultiply(device)
    bmul.secondary_stride_in_pixels_x = bmul.secondary_stride_in_pixels_y = 0
    Ys = m.Image.from_numpy(np.ones((1, 1, 1, 4), np.float32), device)
    _, bstate = bmul.encode(cb, X, Ys, destination_state_is_temporary=False)
    dx = m.Image(device, m.ImageDescriptor(width=4, height=3, feature_channels=4))
    with pytest.raises(ValueError, match="secondary_stride_in_pixels_x"):
        gx.encode(cb, G, Ys, bstate, dx)
    gx.secondary_stride_in_pixels_x = gx.secondary_stride_in_pixels_y = 0
    gx.encode(cb, G, Ys, bstate, dx)
    with pytest.raises(ValueError, match="source_gradient"):
        gx.encode(cb, m.Image.from_numpy(np.ones((1, 2, 2, 4), np.float32), device), Ys, bstate, dx)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    np.testing.assert_allclose(dx.to_numpy(), g, rtol=1e-6)


def test_large_reductions_are_accurate_and_reproducible(device, queue, check):
    """Gradients of broadcast inputs over a large image (the threadgroup reductions on Metal) match
    autograd and are bitwise identical run to run."""
    gen = rng("arith-large")
    x = randn(gen, 2, 48, 40, 16)
    patterns = {"scalar": ((1, 1, 1), (0, 0, 0)), "pixel": ((1, 1, 16), (0, 0, 1)), "row": ((1, 40, 16), (1, 0, 1))}
    g = randn(gen, 2, 48, 40, 16)
    for name, (shape, strides) in patterns.items():
        y = randn(gen, 2, *shape)
        results = []
        for _ in range(2):
            mul = m.CNNMultiply(device)
            _set_strides(mul, "secondary", strides)
            cb = queue.command_buffer()
            X, Y = m.batch_from_numpy(x, device), m.batch_from_numpy(y, device)
            _, states = mul.encode_batch(cb, X, Y, destination_state_is_temporary=False)
            gy = m.CNNMultiplyGradient(device, True)
            gy.destination_image_allocator = m.ImageAllocator.persistent()
            dys = gy.encode_batch(cb, m.batch_from_numpy(g, device), X, states)
            cb.commit()
            cb.wait_until_completed()
            results.append(m.batch_to_numpy(dys))
        np.testing.assert_array_equal(results[0], results[1], err_msg=f"{name}: not reproducible")
        _, _, dy_ref = _torch_ref(lambda a, b: a * b, x, y, g, 1.0, 1.0, 0.0, None)
        check(results[0], dy_ref, f"{name} reduction")
