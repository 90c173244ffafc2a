"""Fuzz families: convolution, fully connected, transposed convolution, pooling, upsampling.
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import (Context, WrongResult, as_stored, check_close, family, format_tol,
                          forward_and_gradient_into, image_format, random_array, run, values_of)


# ---------------------------------------------------------------------------------------------
# convolution (forward, data and weight gradients), stride 1, same size, zero padding; FLOAT16 or
# FLOAT32 images (16-channel layers of 12x12 reach the CPU's Winograd path)


def conv_reference(x, wgt, bias, e):
    """x (H, W, I), wgt (O, k, k, I), e (H, W, O): y, dx, dw, db of a same-size correlation."""
    k = wgt.shape[1]
    p = k // 2
    H, W, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((p, k - 1 - p), (p, k - 1 - p), (0, 0)))
    y = np.zeros((H, W, wgt.shape[0]))
    dxp = np.zeros_like(xp)
    dw = np.zeros(wgt.shape)
    for ky in range(k):
        for kx in range(k):
            window = xp[ky:ky + H, kx:kx + W, :]
            y += window @ wgt[:, ky, kx, :].T.astype(np.float64)
            dxp[ky:ky + H, kx:kx + W, :] += e @ wgt[:, ky, kx, :].astype(np.float64)
            dw[:, ky, kx, :] = np.einsum("hwo,hwi->oi", e, window)
    y += bias
    return y, dxp[p:p + H, p:p + W, :], dw, e.sum(axis=(0, 1))


@family("convolution")
def convolution_ops(r: random.Random, ctx: Context):
    m = ctx.m
    k = r.choice([1, 3])
    cin, cout = r.choice([1, 3, 4, 16]), r.choice([1, 4, 5, 16])
    h, w = r.randint(2, 12), r.randint(2, 12)
    fx, fe = image_format(r, m), image_format(r, m)
    ctx.start_call()
    kw = ctx.bad(r, k, [0, -1, 2**31, 2**63, "3"], what="kernel_width")
    d = m.CNNConvolutionDescriptor(kw, k, cin, cout)
    d.stride_in_pixels_x = ctx.bad(r, 1, [0, -2, 2**31, 2**64], what="stride_in_pixels_x")
    wgt = random_array(r, cout, k, k, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, ctx.bad(r, wgt, [wgt[:-1], "w"], what="weights"), bias)
    conv = m.CNNConvolution(ctx.device, source)
    grad = m.CNNConvolutionGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNConvolution")
    x_arr = as_stored(random_array(r, h, w, cin), fx, m)
    e_arr = as_stored(random_array(r, h, w, cout), fe, m)
    x = m.Image.from_numpy(x_arr, ctx.device, channel_format=fx)
    ctx.start_call()
    grad.gradient_option = ctx.bad(r, m.CNNConvolutionGradientOption.ALL, [0, 3, "ALL"], what="gradient_option")
    cb = ctx.queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    e = m.Image.from_numpy(e_arr, ctx.device, channel_format=fe)
    dx = grad.encode(cb, e, x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("convolution encode")
    ref_y, ref_dx, ref_dw, ref_db = conv_reference(x_arr, wgt, bias, e_arr.astype(np.float64))
    # Results take the format of their primary source (docs/float16.md): y that of x, dx that of e.
    # UNORM results are clamped to [0, 1] and rounded to codes (docs/storage_formats.md).
    check_close(values_of(y.to_numpy()[0], fx, m), as_stored(ref_y, fx, m), "convolution forward", tol=format_tol(fx, m))
    check_close(values_of(dx.to_numpy()[0], fe, m), as_stored(ref_dx, fe, m), "convolution data gradient",
                tol=format_tol(fe, m))
    check_close(np.asarray(state.gradient_for_weights).reshape(ref_dw.shape), ref_dw, "weight gradient")
    check_close(np.asarray(state.gradient_for_biases), ref_db, "bias gradient")


def shuffle_reference(low, r):
    """MPS's sub-pixel rule on (H, W, N): out[y][x][c] = low[y // r][x // r][C * (r * (y % r) + x % r) + c]."""
    H, W, N = low.shape
    C = N // (r * r)
    out = np.zeros((H * r, W * r, C))
    for y in range(H * r):
        for x in range(W * r):
            g = r * (y % r) + x % r
            out[y, x] = low[y // r, x // r, C * g:C * (g + 1)]
    return out


@family("sub_pixel_convolution")
def sub_pixel_convolution_ops(r: random.Random, ctx: Context):
    m = ctx.m
    k = r.choice([1, 3])
    scale = r.choice([1, 2, 3])
    cin, C = r.choice([1, 3, 4]), r.choice([1, 2, 4])
    cout = C * scale * scale
    h, w = r.randint(2, 5), r.randint(2, 5)
    ctx.start_call()
    factor = ctx.bad(r, scale, [0, -1, 2**31, 40000, "2"], what="sub_pixel_scale_factor")
    if scale > 1:  # not a multiple of scale^2
        cout_arg = ctx.bad(r, cout, [cout + 1], what="output_feature_channels")
    else:
        cout_arg = cout
    d = m.CNNSubPixelConvolutionDescriptor(k, k, cin, cout_arg, factor)
    wgt = random_array(r, cout, k, k, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, bias)
    conv = m.CNNConvolution(ctx.device, source)
    grad = m.CNNConvolutionGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("sub-pixel CNNConvolution")
    x_arr = random_array(r, h, w, cin)
    e_arr = random_array(r, h * scale, w * scale, C)
    x = m.Image.from_numpy(x_arr, ctx.device)
    ctx.start_call()
    e_shape = ctx.bad(r, e_arr, [random_array(r, h * scale + 1, w * scale, C)], what="source_gradient")
    cb = ctx.queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    e = m.Image.from_numpy(e_shape, ctx.device)
    dx = grad.encode(cb, e, x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("sub-pixel convolution encode")
    # The gradient of the shuffle is the inverse permutation: unshuffle e onto the low grid.
    e_low = np.zeros((h, w, cout))
    for yy in range(h * scale):
        for xx in range(w * scale):
            g = scale * (yy % scale) + xx % scale
            e_low[yy // scale, xx // scale, C * g:C * (g + 1)] = e_arr[yy, xx]
    ref_y, ref_dx, ref_dw, ref_db = conv_reference(x_arr, wgt, bias, e_low)
    check_close(y.to_numpy()[0], shuffle_reference(ref_y, scale), "sub-pixel forward")
    check_close(dx.to_numpy()[0], ref_dx, "sub-pixel data gradient")
    check_close(np.asarray(state.gradient_for_weights).reshape(ref_dw.shape), ref_dw, "sub-pixel weight gradient")
    check_close(np.asarray(state.gradient_for_biases), ref_db, "sub-pixel bias gradient")


@family("fully_connected")
def fully_connected_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w = r.randint(1, 5), r.randint(1, 5)
    cin, cout = r.choice([1, 3, 4, 8]), r.choice([1, 2, 5])
    ctx.start_call()
    d = m.CNNConvolutionDescriptor(w, h, cin, cout)
    d.stride_in_pixels_y = ctx.bad(r, 1, [2, 3], what="stride_in_pixels_y")
    wgt = random_array(r, cout, h, w, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, bias)
    fc = m.CNNFullyConnected(ctx.device, source)
    grad = m.CNNFullyConnectedGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNFullyConnected")
    n = r.randint(1, 3)
    fx, fe = image_format(r, m), image_format(r, m)
    x_arr = as_stored(random_array(r, n, h, w, cin), fx, m)
    e_arr = as_stored(random_array(r, n, 1, 1, cout), fe, m)
    ctx.start_call()
    src_w = ctx.bad(r, w, [w + 1], what="source width")
    xs = m.batch_from_numpy(random_array(r, n, h, src_w, cin) if src_w != w else x_arr, ctx.device,
                            channel_format=fx)
    cb = ctx.queue.command_buffer()
    ys, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, ctx.device, channel_format=fe), xs, states)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("fully connected encode")
    x2, w2 = x_arr.reshape(n, -1).astype(np.float64), wgt.reshape(cout, -1).astype(np.float64)
    e2 = e_arr.reshape(n, cout).astype(np.float64)
    check_close(values_of(m.batch_to_numpy(ys), fx, m).reshape(n, cout), as_stored(x2 @ w2.T + bias, fx, m),
                "fully connected forward", tol=format_tol(fx, m))
    check_close(values_of(m.batch_to_numpy(dxs), fe, m).reshape(n, -1), as_stored(e2 @ w2, fe, m),
                "fully connected data gradient", tol=format_tol(fe, m))
    check_close(np.asarray(states[0].gradient_for_weights).reshape(cout, -1), e2.T @ x2, "fully connected dW")
    check_close(np.asarray(states[0].gradient_for_biases), e2.sum(0), "fully connected dB")


def transpose_reference(x, wgt, bias, e, s):
    """x (H, W, I), wgt (O, k, k, I) used as given, stride s, offset 0 and kernel offset (k>>1) - (k-1)
    (window top-left tap at -(k-1) in Z: the "full" placement), e (D, D', O): y, dx, dw, db."""
    H, W, _ = x.shape
    k = wgt.shape[1]
    z = np.zeros(((H - 1) * s + 1, (W - 1) * s + 1, x.shape[2]))
    z[::s, ::s] = x
    zp = np.pad(z, ((k - 1, k - 1), (k - 1, k - 1), (0, 0)))
    Dh, Dw = zp.shape[0] - k + 1, zp.shape[1] - k + 1
    y = np.tile(bias.astype(np.float64), (Dh, Dw, 1))
    dzp = np.zeros_like(zp)
    dw = np.zeros(wgt.shape)
    for ky in range(k):
        for kx in range(k):
            y += zp[ky:ky + Dh, kx:kx + Dw] @ wgt[:, ky, kx, :].T.astype(np.float64)
            dzp[ky:ky + Dh, kx:kx + Dw] += e @ wgt[:, ky, kx, :].astype(np.float64)
            dw[:, ky, kx, :] = np.einsum("hwo,hwi->oi", e, zp[ky:ky + Dh, kx:kx + Dw])
    dx = dzp[k - 1:k - 1 + z.shape[0]:s, k - 1:k - 1 + z.shape[1]:s]
    return y, dx, dw, e.sum((0, 1))


@family("convolution_transpose")
def convolution_transpose_ops(r: random.Random, ctx: Context):
    m = ctx.m
    k, s = r.choice([1, 2, 3]), r.choice([1, 2, 3])
    cin, cout = r.choice([1, 3, 4]), r.choice([1, 4, 5])
    h, w = r.randint(1, 4), r.randint(1, 4)
    ctx.start_call()
    d = m.CNNConvolutionDescriptor(k, k, cin, cout)
    d.stride_in_pixels_x = d.stride_in_pixels_y = s
    if r.random() < 0.1:
        d.fused_neuron_descriptor = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
        ctx.invalid.append("fused_neuron_descriptor")
    wgt = random_array(r, cout, k, k, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, bias)
    t = m.CNNConvolutionTranspose(ctx.device, source)
    grad = m.CNNConvolutionTransposeGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNConvolutionTranspose")
    t.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_FULL))
    x_arr = random_array(r, h, w, cin)
    x = m.Image.from_numpy(x_arr, ctx.device)
    Dh, Dw = (h - 1) * s + k, (w - 1) * s + k
    e_arr = random_array(r, Dh, Dw, cout)
    ctx.start_call()
    e_h = ctx.bad(r, Dh, [Dh + 1], what="gradient height")
    cb = ctx.queue.command_buffer()
    y, state = t.encode(cb, x, destination_state_is_temporary=False)
    dx = grad.encode(cb, m.Image.from_numpy(random_array(r, e_h, Dw, cout) if e_h != Dh else e_arr, ctx.device),
                     x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("transpose encode")
    ref_y, ref_dx, ref_dw, ref_db = transpose_reference(x_arr, wgt, bias, e_arr.astype(np.float64), s)
    check_close(y.to_numpy()[0], ref_y, "transpose forward")
    check_close(dx.to_numpy()[0], ref_dx, "transpose data gradient")
    check_close(np.asarray(state.gradient_for_weights), ref_dw, "transpose weight gradient")
    check_close(np.asarray(state.gradient_for_biases), ref_db, "transpose bias gradient")


# ---------------------------------------------------------------------------------------------
# pooling (2x2 stride 2, windows inside the image: edge mode ZERO never reads off-image)


@family("pooling")
def pooling_ops(r: random.Random, ctx: Context):
    m = ctx.m
    ops = {"CNNPoolingMax": lambda b: b.max(axis=(1, 3)), "CNNPoolingAverage": lambda b: b.mean(axis=(1, 3)),
           "CNNPoolingL2Norm": lambda b: np.sqrt((b.astype(np.float64) ** 2).sum(axis=(1, 3)))}
    name = r.choice(sorted(ops))
    ctx.start_call()
    kw = ctx.bad(r, 2, [0, -1, 2**63, 2**64, "2", None], what="kernel_width")
    sy = ctx.bad(r, 2, [0, -2, 2**64, 1.5], what="stride_in_pixels_y")
    kernel = getattr(m, name)(ctx.device, kw, 2, 2, sy)
    ctx.expect_rejected_if_invalid(name)
    if r.random() < 0.2:
        ctx.start_call()
        dilation = ctx.bad(r, r.randint(1, 3), [0, -1, 2**63, "1"], what="dilation_rate_x")
        m.CNNDilatedPoolingMax(ctx.device, 2, 2, dilation, 1, 2, 2)
        ctx.expect_rejected_if_invalid("CNNDilatedPoolingMax")
    h, w, c = r.randint(2, 7), r.randint(2, 7), r.randint(1, 9)
    x_arr = random_array(r, h, w, c)
    ho, wo = h // 2, w // 2
    ctx.start_call()
    # offset = center of the first window: taps (center - 1, center) of an even window
    kernel.offset = ctx.bad(r, (1, 1, 0), [(1, 1, 2**32), (2**40, 1, 0), ("1", 1, 0)], what="offset")
    kernel.edge_mode = m.ImageEdgeMode.ZERO
    y = m.Image(ctx.device, m.ImageDescriptor(wo, ho, c))
    cb = ctx.queue.command_buffer()
    kernel.encode(cb, m.Image.from_numpy(x_arr, ctx.device), destination_image=y)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{name} encode")
    blocks = x_arr[:2 * ho, :2 * wo].reshape(ho, 2, wo, 2, c)
    check_close(y.to_numpy()[0], ops[name](blocks), f"{name} 2x2 stride 2")


# ---------------------------------------------------------------------------------------------
# upsampling (nearest, forward and gradient)


@family("upsampling")
def upsampling_ops(r: random.Random, ctx: Context):
    m = ctx.m
    sx, sy = r.randint(1, 3), r.randint(1, 3)
    ctx.start_call()
    bad_sx = ctx.bad(r, sx, [0, -1, 2**63, 2**64, "2", None], what="integer_scale_factor_x")
    forward = m.CNNUpsamplingNearest(ctx.device, bad_sx, sy)
    ctx.expect_rejected_if_invalid("CNNUpsamplingNearest")
    if r.random() < 0.2:
        ctx.start_call()
        m.CNNUpsamplingBilinear(ctx.device, sx, ctx.bad(r, sy, [0, -3, 2**64], what="integer_scale_factor_y"),
                                # (pybind11's bool conversion takes None as False: not listed as invalid)
                                ctx.bad(r, r.random() < 0.5, ["yes", [True]], what="align_corners"))
        ctx.expect_rejected_if_invalid("CNNUpsamplingBilinear")
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 8)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
    g_arr = random_array(r, h * sy, w * sx, c)
    dx = m.CNNUpsamplingNearestGradient(ctx.device, sx, sy).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x,
                                                                   state)
    run(ctx, cb)
    check_close(y.to_numpy()[0], np.repeat(np.repeat(x_arr, sy, axis=0), sx, axis=1), "nearest upsampling")
    check_close(dx.to_numpy()[0], g_arr.reshape(h, sy, w, sx, c).sum(axis=(1, 3)), "nearest upsampling gradient")


# ---------------------------------------------------------------------------------------------
# convolution geometry at large: any window (1-5 by 1-5), stride, dilation, groups, offset and
# destination size, ZERO edges. The forward without bias is linear in X and in W, so its gradients
# are its adjoints: <conv(X), G> = <X, dX(G)> = <W, dW(G)>, and dB = sum(G): exact identities that
# need no formula for the window placement.


@family("convolution_geometry")
def convolution_geometry_ops(r: random.Random, ctx: Context):
    m = ctx.m
    kw, kh = r.randint(1, 5), r.randint(1, 5)
    groups = r.choice([1, 1, 2, 3])
    per = [1, 2, 3] if groups == 1 else [4, 8]  # grouped: a multiple of 4 channels per group (docs)
    cin, cout = groups * r.choice(per), groups * r.choice(per)
    d = m.CNNConvolutionDescriptor(kw, kh, cin, cout)
    d.stride_in_pixels_x, d.stride_in_pixels_y = r.randint(1, 3), r.randint(1, 3)
    d.dilation_rate_x, d.dilation_rate_y = r.randint(1, 3), r.randint(1, 3)
    d.groups = groups
    wgt = random_array(r, cout, kh, kw, cin // groups)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, np.zeros(cout, np.float32))
    conv, grad = m.CNNConvolution(ctx.device, source), m.CNNConvolutionGradient(ctx.device, source)
    h, w = r.randint(1, 7), r.randint(1, 7)
    ho, wo = r.randint(1, 5), r.randint(1, 5)
    x_arr, g_arr = random_array(r, h, w, cin), random_array(r, ho, wo, cout)
    y, dx, state = forward_and_gradient_into(ctx, conv, grad, x_arr, g_arr, (r.randint(-2, 3), r.randint(-2, 3)))
    g64 = g_arr.astype(np.float64)
    lhs = float((y.to_numpy()[0].astype(np.float64) * g64).sum())
    label = (f"convolution {kw}x{kh} stride {d.stride_in_pixels_x},{d.stride_in_pixels_y} dilation "
             f"{d.dilation_rate_x},{d.dilation_rate_y} groups {groups} offset {tuple(conv.offset)[:2]} "
             f"{w}x{h} -> {wo}x{ho}")
    scale = max(1.0, float(np.abs(x_arr).sum() * np.abs(g64).sum() * np.abs(wgt).max()) ** 0.5)
    via_dx = float((x_arr.astype(np.float64) * dx.to_numpy()[0][:h, :w]).sum())
    via_dw = float((wgt.astype(np.float64) * np.asarray(state.gradient_for_weights).reshape(wgt.shape)).sum())
    for name, value in (("<X, dX>", via_dx), ("<W, dW>", via_dw)):
        if abs(value - lhs) > 1e-4 * scale:
            raise WrongResult(f"{label}: <conv(X), G> = {lhs:.6g} but {name} = {value:.6g}")
    check_close(np.asarray(state.gradient_for_biases), g64.sum(axis=(0, 1)), f"{label}: bias gradient")
