"""Fuzz families with gradient kernels: the returning and into-destination encode forms of gradients, pooling of every kind with random windows, strides, dilation and
offsets (forward and gradient vs a NumPy tap enumeration of docs/pooling.md), the arithmetic gradients
and NaN propagation, softmax gradients, bilinear upsampling (adjoint identity), dropout's gradient,
and the parameterized neuron types (gradient vs float64 finite differences of the formula).
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import (Context, WrongResult, check_close, check_nan_where, family, forward_and_gradient_into,
                          poison, random_array, run)


# ---------------------------------------------------------------------------------------------
# pooling: Y and dX of max / average / L2 / dilated max, ZERO edges, into a destination


def pool_reference(kind, x, g, k, s, d, off, out_hw):
    """x (H, W, C), g (Ho, Wo, C): Y and dX of docs/pooling.md with ZERO edges (off-image taps read 0;
    average: N = kw * kh)."""
    H, W, C = x.shape
    (kw, kh), (sx, sy), (dx_, dy_), (ox, oy) = k, s, d, off
    ex, ey = (kw - 1) * dx_ + 1, (kh - 1) * dy_ + 1
    ho, wo = out_hw
    y = np.zeros((ho, wo, C))
    grad = np.zeros((H, W, C))
    xd = x.astype(np.float64)
    for i in range(ho):
        for j in range(wo):
            rows = [oy + sy * i - (ey >> 1) + dy_ * t for t in range(kh)]
            cols = [ox + sx * j - (ex >> 1) + dx_ * t for t in range(kw)]
            taps = [(a, b) for a in rows for b in cols]
            vals = np.array([xd[a, b] if 0 <= a < H and 0 <= b < W else np.zeros(C) for a, b in taps])
            inside = [0 <= a < H and 0 <= b < W for a, b in taps]
            if kind == "max":
                y[i, j] = vals.max(axis=0)
                best = vals.argmax(axis=0)
                for c in range(C):
                    if inside[best[c]]:
                        a, b = taps[best[c]]
                        grad[a, b, c] += g[i, j, c]
            elif kind == "average":
                y[i, j] = vals.sum(axis=0) / (kw * kh)
                for t, (a, b) in enumerate(taps):
                    if inside[t]:
                        grad[a, b] += g[i, j] / (kw * kh)
            else:
                norm = np.sqrt((vals * vals).sum(axis=0))
                y[i, j] = norm
                for t, (a, b) in enumerate(taps):
                    if inside[t]:
                        grad[a, b] += np.where(norm > 0, g[i, j] * vals[t] / np.where(norm > 0, norm, 1), 0)
    return y, grad


POOLING_CLASSES = {"max": ("CNNPoolingMax", "CNNPoolingMaxGradient"),
                   "average": ("CNNPoolingAverage", "CNNPoolingAverageGradient"),
                   "l2": ("CNNPoolingL2Norm", "CNNPoolingL2NormGradient"),
                   "dilated": ("CNNDilatedPoolingMax", "CNNDilatedPoolingMaxGradient")}


@family("pooling_gradient")
def pooling_gradient_ops(r: random.Random, ctx: Context):
    m = ctx.m
    kind = r.choice(sorted(POOLING_CLASSES))
    kw, kh, sx, sy = r.randint(1, 4), r.randint(1, 4), r.randint(1, 3), r.randint(1, 3)
    dil = (r.randint(1, 3), r.randint(1, 3)) if kind == "dilated" else (1, 1)
    fwd_name, grad_name = POOLING_CLASSES[kind]
    args = (kw, kh, *dil, sx, sy) if kind == "dilated" else (kw, kh, sx, sy)
    forward, gradient = getattr(m, fwd_name)(ctx.device, *args), getattr(m, grad_name)(ctx.device, *args)
    h, w, c = r.randint(1, 7), r.randint(1, 7), r.randint(1, 6)
    ho, wo = r.randint(1, 4), r.randint(1, 4)
    off = (r.randint(-2, 3), r.randint(-2, 3))
    # ties between equal taps would make max's gradient depend on the order: distinct values
    x_arr = (random_array(r, h, w, c) + np.arange(h * w * c).reshape(h, w, c) * 1e-3).astype(np.float32)
    g_arr = random_array(r, ho, wo, c)
    y, dx, _ = forward_and_gradient_into(ctx, forward, gradient, x_arr, g_arr, off)
    base = "max" if kind == "dilated" else kind
    ref_y, ref_dx = pool_reference(base, x_arr, g_arr, (kw, kh), (sx, sy), dil, off, (ho, wo))
    label = f"{fwd_name} k {kw}x{kh} s {sx},{sy} d {dil} offset {off} on {h}x{w}"
    check_close(y.to_numpy()[0], ref_y, label)
    got = dx.to_numpy()[0]
    check_close(got[:h, :w], ref_dx, f"{grad_name} of {label}")


# ---------------------------------------------------------------------------------------------
# arithmetic: forward and both gradients (broadcast-free), NaN/inf propagate as IEEE arithmetic


ARITHMETIC = {"CNNAdd": (np.add, lambda g, a, b: (g, g)),
              "CNNSubtract": (np.subtract, lambda g, a, b: (g, -g)),
              "CNNMultiply": (np.multiply, lambda g, a, b: (g * b, g * a)),
              "CNNDivide": (np.divide, lambda g, a, b: (g / b, -g * a / (b * b)))}


@family("arithmetic_gradient")
def arithmetic_gradient_ops(r: random.Random, ctx: Context):
    m = ctx.m
    name = r.choice(sorted(ARITHMETIC))
    f, df = ARITHMETIC[name]
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 8)
    a_arr = poison(r, random_array(r, h, w, c))
    b_arr = random_array(r, h, w, c)
    if name == "CNNDivide":
        b_arr = np.where(np.abs(b_arr) < 0.3, 0.3, b_arr).astype(np.float32)
    b_arr = poison(r, b_arr)
    g_arr = random_array(r, h, w, c)
    kernel = getattr(m, name)(ctx.device)
    a, b = m.Image.from_numpy(a_arr, ctx.device), m.Image.from_numpy(b_arr, ctx.device)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    y, state = kernel.encode(cb, a, b, destination_state_is_temporary=False)
    g = m.Image.from_numpy(g_arr, ctx.device)
    da = getattr(m, name + "Gradient")(ctx.device, False).encode(cb, g, b, state)
    db = getattr(m, name + "Gradient")(ctx.device, True).encode(cb, g, a, state)
    run(ctx, cb)
    A, B, G = (v.astype(np.float64) for v in (a_arr, b_arr, g_arr))
    flt_max = float(np.finfo(np.float32).max)
    with np.errstate(all="ignore"):
        ref_da, ref_db = df(G, A, B)
        # docs/neurons.md: the result is clamped to [-FLT_MAX, FLT_MAX] (so inf becomes +-FLT_MAX); NaN propagates
        check_nan_where(y.to_numpy()[0], np.clip(f(A, B), -flt_max, flt_max), f"{name} forward (NaN/inf propagate)")
    finite = np.isfinite(A) & np.isfinite(B)  # the gradients are checked where both inputs are finite
    check_close(da.to_numpy()[0][finite], np.broadcast_to(ref_da, A.shape)[finite], f"{name} primary gradient")
    check_close(db.to_numpy()[0][finite], np.broadcast_to(ref_db, A.shape)[finite], f"{name} secondary gradient")


# ---------------------------------------------------------------------------------------------
# softmax and log-softmax gradients


@family("softmax_gradient")
def softmax_gradient_ops(r: random.Random, ctx: Context):
    m = ctx.m
    log = r.random() < 0.5
    h, w, c = r.randint(1, 4), r.randint(1, 4), r.randint(1, 40)
    x_arr = random_array(r, h, w, c) * r.choice([1, 10, 100])
    g_arr = random_array(r, h, w, c)
    forward = (m.CNNLogSoftMax if log else m.CNNSoftMax)(ctx.device)
    gradient = (m.CNNLogSoftMaxGradient if log else m.CNNSoftMaxGradient)(ctx.device)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, m.Image.from_numpy(x_arr, ctx.device), destination_state_is_temporary=False)
    dx = gradient.encode(cb, m.Image.from_numpy(g_arr, ctx.device), y, state)
    run(ctx, cb)
    x64, g64 = x_arr.astype(np.float64), g_arr.astype(np.float64)
    shifted = x64 - x64.max(axis=2, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=2, keepdims=True)
    if log:
        ref = g64 - p * g64.sum(axis=2, keepdims=True)
    else:
        ref = p * (g64 - (g64 * p).sum(axis=2, keepdims=True))
    check_close(dx.to_numpy()[0], ref, "log-softmax gradient" if log else "softmax gradient", tol=2e-4)


# ---------------------------------------------------------------------------------------------
# bilinear upsampling: a linear map, so <U x, g> = <x, U^T g>; a constant image stays constant


@family("upsampling_bilinear")
def upsampling_bilinear_ops(r: random.Random, ctx: Context):
    m = ctx.m
    sx, sy = r.randint(1, 4), r.randint(1, 4)
    align = r.random() < 0.5
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 6)
    constant = r.random() < 0.3
    x_arr = np.full((h, w, c), 1.5, np.float32) if constant else random_array(r, h, w, c)
    g_arr = random_array(r, h * sy, w * sx, c)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    y, state = m.CNNUpsamplingBilinear(ctx.device, sx, sy, align).encode(
        cb, m.Image.from_numpy(x_arr, ctx.device), destination_state_is_temporary=False)
    x = m.Image.from_numpy(x_arr, ctx.device)
    dx = m.CNNUpsamplingBilinearGradient(ctx.device, sx, sy).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x,
                                                                   state)
    run(ctx, cb)
    yo, dxo = y.to_numpy()[0].astype(np.float64), dx.to_numpy()[0].astype(np.float64)
    if constant:
        check_close(yo, np.full(yo.shape, 1.5), "bilinear upsampling of a constant image")
    lhs, rhs = float((yo * g_arr).sum()), float((x_arr.astype(np.float64) * dxo).sum())
    scale = max(1.0, float(np.abs(yo * g_arr).sum()))
    if abs(lhs - rhs) > 1e-4 * scale:
        raise WrongResult(f"bilinear upsampling {sx}x{sy} align {align}: <Ux, g> = {lhs} but <x, U^T g> = {rhs}")


# ---------------------------------------------------------------------------------------------
# dropout gradient: the forward's mask (dX = g / keep where the forward kept x, else 0)


@family("dropout_gradient")
def dropout_gradient_ops(r: random.Random, ctx: Context):
    m = ctx.m
    keep = r.choice([0.1, 0.5, 0.9])
    seed = r.getrandbits(32)
    h, w, c = r.randint(1, 6), r.randint(1, 6), r.randint(1, 8)
    x_arr = np.abs(random_array(r, h, w, c)) + 0.5  # never 0: a dropped element is one that reads 0
    g_arr = random_array(r, h, w, c)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    y, state = m.CNNDropout(ctx.device, keep, seed, (1, 1, 1)).encode(
        cb, m.Image.from_numpy(x_arr, ctx.device), destination_state_is_temporary=False)
    x = m.Image.from_numpy(x_arr, ctx.device)
    dx = m.CNNDropoutGradient(ctx.device, keep, seed, (1, 1, 1)).encode(cb, m.Image.from_numpy(g_arr, ctx.device),
                                                                        x, state)
    run(ctx, cb)
    kept = y.to_numpy()[0] != 0
    check_close(dx.to_numpy()[0], np.where(kept, g_arr / np.float32(keep), 0), "dropout gradient (forward mask)")


# ---------------------------------------------------------------------------------------------
# parameterized neuron types: forward vs the formula, gradient vs float64 finite differences


def _neuron_formula(name, a, b, c):
    return {
        "ELU": lambda x: np.where(x > 0, x, a * (np.exp(x) - 1)),
        "ReLUN": lambda x: np.minimum(np.where(x >= 0, x, a * x), b),
        "HardSigmoid": lambda x: np.clip(a * x + b, 0, 1),
        "SoftPlus": lambda x: a * np.log1p(np.exp(b * x)),
        "SoftSign": lambda x: x / (1 + np.abs(x)),
        "Exponential": lambda x: np.exp(a * x + b),           # c = -1: base e
        "Logarithm": lambda x: np.log(a * x + b),             # c = -1: base e
        "Power": lambda x: (a * x + b) ** c,
    }[name]


NEURON_PARAMS = {
    "ELU": lambda r: (r.uniform(0.1, 2), None, None),
    "ReLUN": lambda r: (r.uniform(0, 0.5), r.uniform(0.5, 3), None),
    "HardSigmoid": lambda r: (r.uniform(0.1, 1), r.uniform(-0.5, 0.5), None),
    "SoftPlus": lambda r: (r.uniform(0.5, 2), r.uniform(0.5, 2), None),
    "SoftSign": lambda r: (None, None, None),
    "Exponential": lambda r: (r.uniform(-1, 1), r.uniform(-1, 1), -1.0),
    "Logarithm": lambda r: (1.0, 6.0, -1.0),
    "Power": lambda r: (1.0, r.uniform(4, 6), float(r.choice([1, 2, 3]))),
}


@family("neuron_types")
def neuron_types_ops(r: random.Random, ctx: Context):
    m = ctx.m
    name = r.choice(sorted(NEURON_PARAMS))
    a, b, c = NEURON_PARAMS[name](r)
    args = [v for v in (a, b, c) if v is not None]
    forward = getattr(m, "CNNNeuron" + name)(ctx.device, *args)
    h, w, ch = r.randint(1, 4), r.randint(1, 4), r.randint(1, 6)
    x_arr = random_array(r, h, w, ch)
    g_arr = random_array(r, h, w, ch)
    f = _neuron_formula(name, a, b, c)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    x = m.Image.from_numpy(x_arr, ctx.device)
    y, state = forward.encode(cb, x, destination_state_is_temporary=False)
    dx = m.CNNNeuronGradient(ctx.device, _descriptor_of(m, name, a, b, c)).encode(
        cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
    run(ctx, cb)
    x64 = x_arr.astype(np.float64)
    check_close(y.to_numpy()[0], f(x64), f"CNNNeuron{name}({args}) forward", tol=2e-4)
    step = 1e-6
    fd = (f(x64 + step) - f(x64 - step)) / (2 * step)
    kinks = [0.0, b] if name == "ReLUN" else [-b / a, (1 - b) / a] if name == "HardSigmoid" else []
    near = np.zeros(x64.shape, bool)
    for k in kinks:  # at a kink the one-sided derivatives differ: leave those elements out
        near |= np.abs(x64 - k) < 1e-4
    if name == "ReLUN":
        near |= np.abs(np.where(x64 >= 0, x64, a * x64) - b) < 1e-4
    check_close(np.where(near, 0, dx.to_numpy()[0]), np.where(near, 0, g_arr * fd), f"CNNNeuron{name} gradient",
                tol=1e-3)


def _descriptor_of(m, name, a, b, c):
    kind = {"ELU": "ELU", "ReLUN": "RELUN", "HardSigmoid": "HARD_SIGMOID", "SoftPlus": "SOFT_PLUS",
            "SoftSign": "SOFT_SIGN", "Exponential": "EXPONENTIAL", "Logarithm": "LOGARITHM", "Power": "POWER"}[name]
    return m.NNNeuronDescriptor(getattr(m.CNNNeuronType, kind), *(v for v in (a, b, c) if v is not None))


# ---------------------------------------------------------------------------------------------
# the encode forms of gradient kernels: the returning form and the into-destination form (destination
# from destination_image_descriptor) give the same image, bit for bit, of the described size and format


def _gradient_pair(r: random.Random, ctx: Context, c: int):
    """(forward, gradient) of a random family whose gradient takes (G, X, state)."""
    m = ctx.m
    kind = r.choice(["neuron", "pooling", "upsampling", "local", "convolution", "softmax"])
    if kind == "neuron":
        d = m.NNNeuronDescriptor(m.CNNNeuronType.TANH, 1.0, 1.0)
        return m.CNNNeuron(ctx.device, d), m.CNNNeuronGradient(ctx.device, d), kind
    if kind == "pooling":
        k, s = r.randint(1, 3), r.randint(1, 2)
        return m.CNNPoolingAverage(ctx.device, k, k, s, s), m.CNNPoolingAverageGradient(ctx.device, k, k, s, s), kind
    if kind == "upsampling":
        return m.CNNUpsamplingNearest(ctx.device, 2, 1), m.CNNUpsamplingNearestGradient(ctx.device, 2, 1), kind
    if kind == "local":
        return m.CNNSpatialNormalization(ctx.device, 3, 3), m.CNNSpatialNormalizationGradient(ctx.device, 3, 3), kind
    if kind == "softmax":
        return m.CNNSoftMax(ctx.device), m.CNNSoftMaxGradient(ctx.device), kind
    k = r.choice([1, 3])
    d = m.CNNConvolutionDescriptor(k, k, c, c)
    source = m.CNNConvolutionWeightsDataSource(d, random_array(r, c, k, k, c), random_array(r, c))
    return m.CNNConvolution(ctx.device, source), m.CNNConvolutionGradient(ctx.device, source), kind


@family("gradient_forms")
def gradient_forms_ops(r: random.Random, ctx: Context):
    m = ctx.m
    if not ctx.reach(r, "runtime.gradient_returning", 1.0):
        return
    h, w, c = r.randint(2, 5), r.randint(2, 5), r.randint(1, 6)
    forward, gradient, kind = _gradient_pair(r, ctx, c)
    if r.random() < 0.4:
        return _gradient_batch_forms(r, ctx, forward, gradient, kind, r.randint(1, 3), h, w, c)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    fmt = r.choice([m.ImageFeatureChannelFormat.FLOAT32, m.ImageFeatureChannelFormat.FLOAT16,
                    m.ImageFeatureChannelFormat.UNORM8, m.ImageFeatureChannelFormat.UNORM16])
    forward.destination_image_allocator = m.ImageAllocator.persistent()  # y is read by both forms
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state_is_temporary=False)
    g = m.Image.from_numpy(random_array(r, y.height, y.width, y.feature_channels), ctx.device, channel_format=fmt)
    source = y if kind == "softmax" else x  # the softmax gradient reads the forward's result
    returned = gradient.encode(cb, g, source, state)
    desc = gradient.destination_image_descriptor([g, source], [state])
    into = m.Image(ctx.device, desc)
    gradient.encode(cb, g, source, state, into)
    run(ctx, cb)
    shape = (returned.width, returned.height, returned.feature_channels, returned.feature_channel_format)
    if shape != (desc.width, desc.height, desc.feature_channels, desc.channel_format):
        raise WrongResult(f"{type(gradient).__name__}: the returning form made {shape}, the descriptor says "
                          f"{(desc.width, desc.height, desc.feature_channels, desc.channel_format)}")
    if returned.feature_channel_format != fmt:  # the allocator rule: the source gradient's format
        raise WrongResult(f"{type(gradient).__name__}: returned {returned.feature_channel_format}, source gradient {fmt}")
    check_close(returned.to_numpy(), into.to_numpy(), f"{type(gradient).__name__}: returning vs into-destination",
                tol=0.0)


def _gradient_batch_forms(r, ctx, forward, gradient, kind, n, h, w, c):
    """encode_batch's returning form against its into-destination form, image by image."""
    m = ctx.m
    forward.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(random_array(r, n, h, w, c), ctx.device)
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    ys, states = forward.encode_batch(cb, xs, destination_state_is_temporary=False)
    y0 = ys[0]
    gs = m.batch_from_numpy(random_array(r, n, y0.height, y0.width, y0.feature_channels), ctx.device)
    sources = ys if kind == "softmax" else xs
    returned = gradient.encode_batch(cb, gs, sources, states)
    into = [m.Image(ctx.device, gradient.destination_image_descriptor([gs[i], sources[i]], [states[i]]))
            for i in range(n)]
    gradient.encode_batch(cb, gs, sources, states, into)
    run(ctx, cb)
    if len(returned) != n:
        raise WrongResult(f"{type(gradient).__name__}.encode_batch returned {len(returned)} images for {n}")
    for i in range(n):
        check_close(returned[i].to_numpy(), into[i].to_numpy(),
                    f"{type(gradient).__name__}: encode_batch image {i} of {n} vs into-destination", tol=0.0)
