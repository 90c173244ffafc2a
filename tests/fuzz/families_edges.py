"""Fuzz families at the documented limits of window geometry: offsets, clip rectangles and kernel
offsets at the int32 edges (docs/verification.md: narrowed to int32, outside is a ValueError, inside
must work or be refused, never wrap), the largest windows (pooling and local normalization sizes are
in [1, 2^20]), CNNConcatenation.range_starts with huge counts, and spatial-mean regions whose origin
is near -2**63.

Outcome oracles: a window placed entirely off the image reads only zeros (ZERO edge mode), so the
result is a constant; a window larger than the image covers all of it, so every output is the
whole image's max / mean / norm.
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import (INT32_EDGES, INT32_OUTSIDE, INT64_EDGES, INT64_OUTSIDE, Context, WrongResult,
                          check_close, family, random_array, run)


# ---------------------------------------------------------------------------------------------
# offsets and clip rectangles at the int32 edges


def _edge_kernel(r: random.Random, ctx: Context):
    """(kernel, constant the output must be when every read is off the image, channels in, out)."""
    m = ctx.m
    kind = r.choice(["neuron", "convolution", "pooling", "depthwise"])
    c = r.randint(1, 6)
    if kind == "neuron":
        return m.CNNNeuronReLU(ctx.device), 0.0, c, c
    if kind == "pooling":
        name = r.choice(["CNNPoolingMax", "CNNPoolingAverage", "CNNPoolingL2Norm"])
        k = r.randint(1, 3)
        return getattr(m, name)(ctx.device, k, k, r.randint(1, 2), r.randint(1, 2)), 0.0, c, c
    k = r.choice([1, 3])
    cout = c if kind == "depthwise" else r.randint(1, 6)
    d = m.CNNDepthWiseConvolutionDescriptor(k, k, c, c) if kind == "depthwise" else \
        m.CNNConvolutionDescriptor(k, k, c, cout)
    bias = random_array(r, cout)
    wgt = random_array(r, cout, k, k, 1 if kind == "depthwise" else c)
    conv = m.CNNConvolution(ctx.device, m.CNNConvolutionWeightsDataSource(d, wgt, bias))
    return conv, bias, c, cout


@family("edges_int32_window")
def int32_window_ops(r: random.Random, ctx: Context):
    """A unary windowed kernel into a destination with an offset or clip rectangle at (or beyond) the
    int32 edges; a binary kernel with a primary / secondary offset there; a gradient kernel with a
    kernel offset there."""
    what = r.choice(["offset", "clip_origin", "clip_size", "binary", "kernel_offset"])
    inside = r.random() < 0.6
    value = r.choice(INT32_EDGES) if inside else r.choice(INT32_OUTSIDE + INT64_OUTSIDE)
    if not ctx.reach(r, "edges.int32_window", 1.0):
        return
    axis = r.randrange(2)
    if what == "binary":
        return _binary_offset(r, ctx, value, axis, inside)
    if what == "kernel_offset":
        return _gradient_kernel_offset(r, ctx, value, axis, inside)
    m = ctx.m
    kernel, constant, cin, cout = _edge_kernel(r, ctx)
    h, w = r.randint(1, 4), r.randint(1, 4)
    x = m.Image.from_numpy(random_array(r, h, w, cin), ctx.device)
    y = m.Image.from_numpy(np.full((h, w, cout), 7.0, np.float32), ctx.device)
    kernel.edge_mode = m.ImageEdgeMode.ZERO
    ctx.start_call()
    if not inside and what != "clip_size":
        ctx.invalid.append(f"{what} component {value} outside int32")
    vec = [0, 0, 0]
    vec[axis] = value
    if what == "offset":
        kernel.offset = tuple(vec)
    elif what == "clip_origin":
        kernel.clip_rect = m.Region(tuple(vec), (1, 1, 1))
        if inside:  # a clip rectangle beside the destination is refused (docs/verification.md)
            ctx.invalid.append("clip_rect beside the destination")
    else:
        size = [w, h, 1]
        size[axis] = value if value > 0 else -value
        if size[axis] >= 2**64:  # sizes are u64 (RECT_NO_CLIP is the largest): only beyond is invalid
            ctx.invalid.append(f"clip size {size[axis]} beyond u64")
        kernel.clip_rect = m.Region((0, 0, 0), tuple(size))
    cb = ctx.queue.command_buffer()
    kernel.encode(cb, x, destination_image=y)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{type(kernel).__name__} with {what} {value}")
    out = y.to_numpy()[0]
    if what == "offset":  # every window is off the image: a constant
        check_close(out, np.broadcast_to(constant, out.shape), f"{type(kernel).__name__} offset {vec}")
    elif not np.all(np.isfinite(out)):
        raise WrongResult(f"{type(kernel).__name__} clip size {value}: non-finite output")


def _binary_offset(r: random.Random, ctx: Context, value: int, axis: int, inside: bool):
    m = ctx.m
    name = r.choice(["CNNAdd", "CNNSubtract", "CNNMultiply"])
    kernel = getattr(m, name)(ctx.device)
    h, w, c = r.randint(1, 4), r.randint(1, 4), r.randint(1, 6)
    a, b = random_array(r, h, w, c), random_array(r, h, w, c)
    y = m.Image(ctx.device, m.ImageDescriptor(w, h, c))
    which = r.choice(["primary_offset", "secondary_offset"])
    vec = [0, 0, 0]
    vec[axis] = value
    ctx.start_call()
    if not inside:
        ctx.invalid.append(f"{which} {value} outside int32")
    setattr(kernel, which, tuple(vec))
    cb = ctx.queue.command_buffer()
    kernel.encode(cb, m.Image.from_numpy(a, ctx.device), m.Image.from_numpy(b, ctx.device), destination_image=y)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{name} {which} {vec}")
    if not np.all(np.isfinite(y.to_numpy())):
        raise WrongResult(f"{name} {which} {vec}: non-finite output for finite inputs")


def _gradient_kernel_offset(r: random.Random, ctx: Context, value: int, axis: int, inside: bool):
    """Gradient kernels' kernel_offset_x/y. The encode with a gradient state takes the window from
    the forward pass (docs/api.md, "Data gradient"), replacing whatever was set, so any value is
    valid there and the gradient must be the one of the default offset."""
    m = ctx.m
    c, k = r.randint(1, 4), r.choice([1, 3])
    d = m.CNNConvolutionDescriptor(k, k, c, c)
    source = m.CNNConvolutionWeightsDataSource(d, random_array(r, c, k, k, c), random_array(r, c))
    conv, grad = m.CNNConvolution(ctx.device, source), m.CNNConvolutionGradient(ctx.device, source)
    h, w = r.randint(1, 4), r.randint(1, 4)
    x = m.Image.from_numpy(random_array(r, h, w, c), ctx.device)
    g = random_array(r, h, w, c)
    reference = m.CNNConvolutionGradient(ctx.device, source)
    ctx.start_call()
    setattr(grad, "kernel_offset_x" if axis == 0 else "kernel_offset_y", value)
    results = []
    for kernel in (grad, reference):
        cb = ctx.queue.command_buffer()
        _, state = conv.encode(cb, x, destination_state_is_temporary=False)
        dx = kernel.encode(cb, m.Image.from_numpy(g, ctx.device), x, state)
        run(ctx, cb)
        results.append((dx.to_numpy(), np.asarray(state.gradient_for_weights).copy()))
    ctx.expect_rejected_if_invalid(f"CNNConvolutionGradient kernel_offset {value}")
    if not all(np.array_equal(a, b) for a, b in zip(*results)):
        raise WrongResult(f"CNNConvolutionGradient kernel_offset {value} (inside int32: {inside}): the gradient "
                          f"differs from the default offset's, but the gradient state sets the window")


# ---------------------------------------------------------------------------------------------
# the largest windows: sizes up to 2^20 (docs/pooling.md, docs/normalization.md)

WINDOW_LIMIT = 2**20


@family("edges_huge_window")
def huge_window_ops(r: random.Random, ctx: Context):
    m = ctx.m
    huge = ctx.reach(r, "edges.huge_window", 0.7)
    k = r.choice([WINDOW_LIMIT, WINDOW_LIMIT - 1, 2**16 + 1, 4099]) if huge else r.randint(1, 8)
    bad = r.random() < 0.25
    h, w, c = r.randint(1, 3), r.randint(1, 3), r.randint(1, 4)
    x_arr = random_array(r, h, w, c).astype(np.float64)
    kind = r.choice(["CNNPoolingMax", "CNNPoolingAverage", "CNNPoolingL2Norm", "CNNSpatialNormalization",
                     "CNNLocalContrastNormalization"])
    ctx.start_call()
    size = k
    if bad:
        size = r.choice([WINDOW_LIMIT + 1, 0, -1, 2**31, 2**63])
        ctx.invalid.append(f"window size {size} outside [1, 2^20]")
    kernel = getattr(m, kind)(ctx.device, size, size)
    ctx.expect_rejected_if_invalid(f"{kind}({size})")
    cb = ctx.queue.command_buffer()
    if kind.startswith("CNNPooling"):
        kernel.edge_mode = m.ImageEdgeMode.ZERO
        y = kernel.encode(cb, m.Image.from_numpy(x_arr.astype(np.float32), ctx.device))
        run(ctx, cb)
        expected = _whole_image_pool(kind, x_arr, k, h, w)
        if expected is not None:
            out = y.to_numpy()[0]
            check_close(out, np.broadcast_to(expected, out.shape), f"{kind} window {k} on {h}x{w}")
        return
    y = kernel.encode(cb, m.Image.from_numpy(x_arr.astype(np.float32), ctx.device))
    run(ctx, cb)
    if k >= 2 * max(h, w):
        check_close(y.to_numpy()[0], _whole_image_normalization(kind, kernel, x_arr, k),
                    f"{kind} window {k} on {h}x{w}", tol=1e-3)


def _whole_image_pool(kind, x, k, h, w):
    """The value of every output when each window covers the whole image (ZERO edges), else None."""
    if k < 2 * max(h, w) + 2:
        return None
    if kind == "CNNPoolingMax":  # the window's taps off the image are zeros
        return np.maximum(x.max(axis=(0, 1)), 0.0)
    if kind == "CNNPoolingAverage":  # ZERO edges: off-image taps add 0 and count, N = k * k
        return x.sum(axis=(0, 1)) / (float(k) * float(k))
    return np.sqrt((x * x).sum(axis=(0, 1)))


def _whole_image_normalization(kind, kernel, x, k):
    alpha, beta, delta = float(kernel.alpha), float(kernel.beta), float(kernel.delta)
    n = float(k) * float(k)
    if kind == "CNNSpatialNormalization":
        return x * (delta + alpha / n * (x * x).sum(axis=(0, 1))) ** -beta
    p0, pm, ps = float(kernel.p0), float(kernel.pm), float(kernel.ps)
    mean = x.sum(axis=(0, 1)) / n
    var = (x * x).sum(axis=(0, 1)) / n - mean * mean
    return pm + ps * (x - p0 * mean) * (delta + alpha * var) ** -beta


# ---------------------------------------------------------------------------------------------
# CNNConcatenation.range_starts: start_{i+1} = start_i + round_up_4(c_i) (docs/concatenation.md)


@family("edges_range_starts")
def range_starts_ops(r: random.Random, ctx: Context):
    m = ctx.m
    huge = ctx.reach(r, "edges.range_starts", 0.5)
    pool = [2**31 - 1, 2**31, 2**32 - 3, 2**62, 2**63 - 1, 2**63 - 4] if huge else [1, 3, 4, 5, 23]
    channels = [r.choice(pool) for _ in range(r.randint(1, 4))]
    if r.random() < 0.2:
        channels[r.randrange(len(channels))] = r.choice([-1, 0, 2**64, -(2**63)])
    ctx.start_call()
    expected, start = [], 0
    for c in channels:
        expected.append(start)
        start += (c + 3) // 4 * 4
    last = expected[-1] + channels[-1]
    # Sizes whose sums overflow int64 are a ValueError (docs/verification.md, "Sizes"); the docs set no
    # rule for counts <= 0, so those may be refused or give any starts.
    if max(expected + [last]) >= 2**63 or max(channels) >= 2**63:
        ctx.invalid.append(f"channel counts {channels} (starts past int64)")
    got = m.CNNConcatenation.range_starts(channels)
    ctx.expect_rejected_if_invalid("CNNConcatenation.range_starts")
    if min(channels) > 0 and list(got) != expected:
        raise WrongResult(f"range_starts({channels}) = {list(got)}, expected {expected}")


# ---------------------------------------------------------------------------------------------
# NNReductionSpatialMean.clip_rect_source with origins near the int64 edges (sizes are u64)


@family("edges_spatial_mean_origin")
def spatial_mean_origin_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w, c = r.randint(1, 4), r.randint(1, 4), r.randint(1, 5)
    x_arr = random_array(r, h, w, c)
    far = ctx.reach(r, "edges.spatial_mean_origin", 0.7)
    origin, size = [0, 0], [w, h]
    for axis in range(2):
        if far and r.random() < 0.6:
            o = r.choice(INT64_EDGES + [-(2**31), 2**31])
            origin[axis] = o
            extent = (w, h)[axis]
            reach = r.randint(0, extent + 1)  # the region ends at `reach` (may select nothing)
            size[axis] = max(0, reach - o) if r.random() < 0.8 else r.choice([2**64 - 1, 2**63, 1])
    ctx.start_call()
    lo = [max(origin[a], 0) for a in range(2)]
    hi = [min(origin[a] + size[a], (w, h)[a]) for a in range(2)]
    if hi[0] <= lo[0] or hi[1] <= lo[1]:
        ctx.invalid.append(f"clip_rect_source {origin} {size} selects no pixel")
    if any(s >= 2**64 for s in size):
        ctx.invalid.append("size beyond u64")
    kernel = m.NNReductionSpatialMean(ctx.device)
    kernel.clip_rect_source = m.Region((origin[0], origin[1], 0), (size[0], size[1], 1))
    cb = ctx.queue.command_buffer()
    y, state = kernel.encode(cb, m.Image.from_numpy(x_arr, ctx.device), destination_state_is_temporary=False)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"NNReductionSpatialMean clip_rect_source {origin} {size}")
    region = x_arr[lo[1]:hi[1], lo[0]:hi[0]].astype(np.float64)
    check_close(y.to_numpy()[0, 0, 0], region.mean(axis=(0, 1)), f"spatial mean over {origin} {size}")
