"""CNNConvolutionTranspose / CNNConvolutionTransposeGradient against PyTorch autograd.

MPS's transposed convolution zero-inserts the source (stride - 1 zeros between pixels) and
correlates the result with the OHWI weights *as given*; PyTorch's ``conv_transpose2d`` scatters
with its (in, out/groups, kH, kW) weights. The two agree when the weights are rotated by 180
degrees and I/O-swapped (spec §2.1.8: "users must pre-rotate for parity"):
``Wt[i][o'][kH-1-q][kW-1-p] = W[o][q][p][i']``, and the window placement maps to PyTorch's
``padding = T + dilated_kernel - 1`` (T: the window's top-left tap in the zero-inserted image for
the first output pixel) and ``output_padding = D - ((S-1)*s - 2*padding + dilated_kernel)``.
When those are outside PyTorch's ranges the reference crops the padding-0 result instead
(``_reference`` says which); the grid below keeps most rows on the direct ``conv_transpose2d``
call. Bound: relative error <= 1e-4 (see test_convolution.py).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import ConvSpec, make_conv, pad_offset, persistent, randn, rng, size_style

PM = m.PaddingMethod
SAME, VALID, FULL = int(PM.SIZE_SAME), int(PM.SIZE_VALID_ONLY), int(PM.SIZE_FULL)
TF_SAME = int(PM.TENSORFLOW_SAME)
DEFAULT_METHOD = int(PM.ALIGN_CENTERED | PM.ADD_REMAINDER_TO_TOP_LEFT | PM.SIZE_SAME)


def descriptor(kw, kh, cin, cout, sx=1, sy=1, dx=1, dy=1, groups=1):
    d = m.CNNConvolutionDescriptor(kernel_width=kw, kernel_height=kh, input_feature_channels=cin,
                                   output_feature_channels=cout)
    d.stride_in_pixels_x, d.stride_in_pixels_y = sx, sy
    d.dilation_rate_x, d.dilation_rate_y = dx, dy
    d.groups = groups
    return d


def ohwi_to_torch(w, groups):
    """MPS transpose weights (O, kH, kW, I/g) -> conv_transpose2d weights (I, O/g, kH, kW), rotated."""
    O, kh, kw, ig = w.shape
    og = O // groups
    wt = np.zeros((ig * groups, og, kh, kw), w.dtype)
    for g in range(groups):
        block = w[g * og:(g + 1) * og]                       # (og, kh, kw, ig)
        wt[g * ig:(g + 1) * ig] = block[:, ::-1, ::-1, :].transpose(3, 0, 1, 2)
    return wt


def torch_to_ohwi(wt, groups):
    I, og, kh, kw = wt.shape
    ig = I // groups
    w = np.zeros((og * groups, kh, kw, ig), wt.dtype)
    for g in range(groups):
        w[g * og:(g + 1) * og] = wt[g * ig:(g + 1) * ig].transpose(1, 2, 3, 0)[:, ::-1, ::-1, :]
    return w


def _reference(x, w, b, stride, dilation, groups, start, out_size, e=None):
    """x (N,H,W,I); start = (Tx, Ty); out_size = (Dw, Dh). Returns dict(y, [dx, dw, db], direct)."""
    N, H, W, _ = x.shape
    O, kh, kw, _ = w.shape
    (sx, sy), (dx_, dy_), (Tx, Ty), (Dw, Dh) = stride, dilation, start, out_size
    kwd, khd = (kw - 1) * dx_ + 1, (kh - 1) * dy_ + 1
    X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    Wt = torch.tensor(ohwi_to_torch(w, groups).copy(), dtype=torch.float64).requires_grad_(True)
    Bt = torch.tensor(b if b is not None else np.zeros(O), dtype=torch.float64).requires_grad_(True)
    pad = (Ty + khd - 1, Tx + kwd - 1)
    natural = ((H - 1) * sy - 2 * pad[0] + khd, (W - 1) * sx - 2 * pad[1] + kwd)
    op = (Dh - natural[0], Dw - natural[1])
    direct = (min(pad) >= 0 and 0 <= op[0] < max(sy, dy_) and 0 <= op[1] < max(sx, dx_))
    if direct:
        Y = F.conv_transpose2d(X, Wt, Bt, stride=(sy, sx), padding=pad, output_padding=op, groups=groups,
                               dilation=(dy_, dx_))
    else:  # crop / zero-extend the full (padding 0) result, then add the bias
        full = F.conv_transpose2d(X, Wt, None, stride=(sy, sx), groups=groups, dilation=(dy_, dx_))
        fh, fw = full.shape[2:]
        lo_h, lo_w = pad
        padded = F.pad(full, (max(0, -lo_w), max(0, lo_w + Dw - fw), max(0, -lo_h), max(0, lo_h + Dh - fh)))
        r0, c0 = max(0, lo_h), max(0, lo_w)
        Y = padded[:, :, r0:r0 + Dh, c0:c0 + Dw] + Bt.view(1, -1, 1, 1)
    assert Y.shape[2:] == (Dh, Dw)
    out = {"y": Y.detach().permute(0, 2, 3, 1).numpy(), "direct": direct}
    if e is not None:
        (Y * torch.tensor(e, dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
        out["dx"] = X.grad.permute(0, 2, 3, 1).numpy()
        out["dw"] = torch_to_ohwi(Wt.grad.numpy(), groups)
        out["db"] = Bt.grad.numpy()
    return out


def expected_geometry(H, W, k, s, d, method):
    """(Dw, Dh), (Tx, Ty): the reverse size and the stride-1 window over Z (docs/convolution_transpose.md)."""
    style = size_style(method)
    out, start = [], []
    for S, kk, ss, dd, axis in ((W, k[0], s[0], d[0], "x"), (H, k[1], s[1], d[1], "y")):
        kd = (kk - 1) * dd + 1
        z = (S - 1) * ss + 1
        out.append(z + style * (kd - 1))
        start.append(pad_offset(z, 1, kd, method, axis) - (kd >> 1))
    return tuple(out), tuple(start)


# (id, (kw, kh), (cin, cout), (sx, sy), (dx, dy), groups, (H, W), images, bias, method)
CASES = [
    ("3x3-s2-same", (3, 3), (4, 8), (2, 2), (1, 1), 1, (5, 6), 1, True, SAME),
    ("3x3-s1-same", (3, 3), (8, 4), (1, 1), (1, 1), 1, (6, 5), 2, True, None),
    ("4x4-s2-valid", (4, 4), (4, 4), (2, 2), (1, 1), 1, (4, 5), 1, False, VALID),
    ("2x2-s2-full", (2, 2), (4, 8), (2, 2), (1, 1), 1, (5, 5), 3, True, FULL),
    ("5x5-s3-d2-full", (5, 5), (4, 4), (3, 3), (2, 2), 1, (4, 4), 1, True, FULL),
    ("3x2-s21-d12", (3, 2), (4, 4), (2, 1), (1, 2), 1, (5, 7), 2, True, SAME),
    ("g2-3x3-s2", (3, 3), (8, 16), (2, 2), (1, 1), 2, (5, 5), 2, True, SAME),
    ("g4-4x4-s2-tfsame", (4, 4), (16, 16), (2, 2), (1, 1), 4, (4, 6), 1, False, TF_SAME),
    ("1x1-s3", (1, 1), (4, 4), (3, 3), (1, 1), 1, (4, 5), 1, True, VALID),
    ("c1-3x3-s2-dw", (3, 3), (1, 1), (2, 2), (1, 1), 1, (6, 5), 2, True, SAME),      # one channel per group
    ("c3-c5-3x3-s2", (3, 3), (3, 5), (2, 2), (1, 1), 1, (5, 4), 1, True, FULL),
    ("big-3x3-s2-c40", (3, 3), (40, 36), (2, 2), (1, 1), 1, (9, 8), 2, True, SAME),  # several tiles
    ("even-2x4-s3-d2", (2, 4), (4, 8), (3, 2), (2, 1), 1, (3, 4), 1, True, VALID),
    # bottom-right aligned SAME: PyTorch needs output_padding = dilated kernel - 1
    ("2x2-s2-same-br", (2, 2), (4, 4), (2, 2), (1, 1), 1, (5, 4), 2, True, int(PM.SIZE_SAME | PM.ALIGN_BOTTOM_RIGHT)),
    ("3x3-s3-same-br-g2", (3, 3), (8, 8), (3, 3), (1, 1), 2, (3, 4), 1, True,
     int(PM.SIZE_SAME | PM.ALIGN_BOTTOM_RIGHT)),
]


def make_transpose(device, kw, kh, cin, cout, s, d, groups, bias, gen):
    w = (randn(gen, cout, kh, kw, cin // groups) / np.sqrt(kw * kh * cin / groups)).astype(np.float32)
    b = randn(gen, cout) * 0.5 if bias else None
    ds = m.CNNConvolutionWeightsDataSource(descriptor(kw, kh, cin, cout, *s, *d, groups), w, b)
    t, tg = m.CNNConvolutionTranspose(device, ds), m.CNNConvolutionTransposeGradient(device, ds)
    t.destination_image_allocator = m.ImageAllocator.persistent()
    tg.destination_image_allocator = m.ImageAllocator.persistent()
    return ds, t, tg, w, b


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_transpose_matches_conv_transpose2d(device, queue, check, case):
    _check_case(device, queue, check, case)


# Layers large enough for two threads (the forward pass is the data-gradient op: products then
# scatter-add by bands of rows when one image cannot feed the threads, whole images otherwise).
THREAD_CASES = [
    ("4x4-s2-128->64-one-image", (4, 4), (128, 64), (2, 2), (1, 1), 1, (13, 15), 1, True, FULL),
    ("2x2-s2-64->32", (2, 2), (64, 32), (2, 2), (1, 1), 1, (9, 7), 5, True, FULL),
    ("3x3-s2-48->48-same", (3, 3), (48, 48), (2, 2), (1, 1), 1, (11, 12), 3, False, SAME),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", THREAD_CASES, ids=[c[0] for c in THREAD_CASES])
def test_transpose_threads(device, queue, check, case, threads):
    before = m.get_num_threads()
    m.set_num_threads(threads)
    try:
        first = _check_case(device, queue, check, case)
        again = _check_case(device, queue, check, case)
    finally:
        m.set_num_threads(before)
    for a, b in zip(first, again):
        assert np.array_equal(a, b), f"results differ between two identical runs on {threads} thread(s)"


def _check_case(device, queue, check, case):
    """Forward and gradients of one CASES row against the reference; returns the results."""
    cid, (kw, kh), (cin, cout), s, d, groups, (H, W), n, bias, method = case
    gen = rng(cid)
    _, t, tg, w, b = make_transpose(device, kw, kh, cin, cout, s, d, groups, bias, gen)
    if method is not None:
        t.padding = m.NNDefaultPadding(method)
    (Dw, Dh), start = expected_geometry(H, W, (kw, kh), s, d, DEFAULT_METHOD if method is None else method)
    assert t.is_backwards
    x = randn(gen, n, H, W, cin)
    e = randn(gen, n, Dh, Dw, cout)
    xs, es = m.batch_from_numpy(x, device), m.batch_from_numpy(e, device)
    cb = queue.command_buffer()
    ys, states = t.encode_batch(cb, xs, destination_state_is_temporary=False)
    state = states[0]
    assert isinstance(state, m.CNNConvolutionTransposeGradientState) and isinstance(state, m.CNNConvolutionGradientState)
    assert state.convolution_transpose is t and state.convolution is None
    dxs = tg.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert ys[0].shape[1:3] == (Dh, Dw)
    ref = _reference(x, w, b, s, d, groups, start, (Dw, Dh), e)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(state.gradient_for_weights, ref["dw"], "weight gradient")
    check(state.gradient_for_biases, ref["db"], "bias gradient")
    return (m.batch_to_numpy(ys), m.batch_to_numpy(dxs), np.array(state.gradient_for_weights),
            np.array(state.gradient_for_biases))


def test_grid_mostly_uses_direct_conv_transpose2d():
    """The reference for most rows is one conv_transpose2d call with padding and output_padding."""
    direct, with_output_padding = 0, 0
    for cid, (kw, kh), (cin, cout), s, d, groups, (H, W), n, bias, method in CASES:
        (Dw, Dh), start = expected_geometry(H, W, (kw, kh), s, d, DEFAULT_METHOD if method is None else method)
        x = np.zeros((1, H, W, cin), np.float32)
        w = np.zeros((cout, kh, kw, cin // groups), np.float32)
        ref = _reference(x, w, None, s, d, groups, start, (Dw, Dh))
        direct += ref["direct"]
        kd = ((kh - 1) * d[1] + 1, (kw - 1) * d[0] + 1)
        pad = (start[1] + kd[0] - 1, start[0] + kd[1] - 1)
        with_output_padding += ref["direct"] and (Dh - ((H - 1) * s[1] - 2 * pad[0] + kd[0]) > 0)
    assert direct >= len(CASES) - 3 and with_output_padding >= 2


def test_explicit_offsets_clip_and_channel_offsets(device, queue, check):
    """The destination form uses offset and kernel_offset as set: T = offset*stride + kernel_offset - (k >> 1)."""
    gen = rng("transpose-explicit")
    _, t, _, w, b = make_transpose(device, 3, 3, 4, 4, (2, 2), (1, 1), 1, True, gen)
    x = randn(gen, 1, 4, 5, 8)
    t.source_feature_channel_offset = 4
    t.destination_feature_channel_offset = 4
    t.offset = (1, -1, 0)
    t.kernel_offset_x, t.kernel_offset_y = -2, 3
    t.clip_rect = ((1, 2, 0), (6, 5, 1))
    dst = m.Image.from_numpy(np.full((1, 9, 8, 12), 3.5, np.float32), device)
    cb = queue.command_buffer()
    t.encode(cb, m.Image.from_numpy(x, device), destination_image=dst)
    cb.commit()
    cb.wait_until_completed()
    out = dst.to_numpy()
    start = (1 * 2 - 2 - 1, -1 * 2 + 3 - 1)
    ref = _reference(x[..., 4:8], w, b, (2, 2), (1, 1), 1, start, (6, 5))
    check(out[:, 2:7, 1:7, 4:8], ref["y"], "forward with explicit offsets")
    mask = np.ones(out.shape, bool)
    mask[:, 2:7, 1:7, 4:8] = False
    assert np.all(out[mask] == 3.5), "pixels or channels outside the clip / channel range were written"


POLICIES = [(f"{sz}-{al}-{rm}", int(size | align | rem))
            for sz, size in (("valid", PM.SIZE_VALID_ONLY), ("same", PM.SIZE_SAME), ("full", PM.SIZE_FULL))
            for al, align in (("centered", PM.ALIGN_CENTERED), ("top_left", PM.ALIGN_TOP_LEFT),
                              ("bottom_right", PM.ALIGN_BOTTOM_RIGHT))
            for rm, rem in (("rem_tl", PM.ADD_REMAINDER_TO_TOP_LEFT), ("rem_br", PM.ADD_REMAINDER_TO_BOTTOM_RIGHT))]


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("method", [p[1] for p in POLICIES], ids=[p[0] for p in POLICIES])
def test_sized_by_convolution_gradient_state(device, queue, check, method, stride):
    """Sized by the paired convolution's gradient state, the transpose gives that convolution's
    source size and, with the convolution's weights rotated and I/O-swapped, its data gradient."""
    gen = rng(f"paired-{method}-{stride}")
    H, W, k = 9, 8, (4 if stride == 2 else 3)
    spec = ConvSpec(k, k, 4, 8, sx=stride, sy=stride, dx=1 if stride == 2 else 2, dy=1)
    wc, bc = spec.random_parameters(gen)
    _, conv, cgrad = make_conv(device, spec, wc, bc)
    conv.padding = m.NNDefaultPadding(method)
    wt = np.ascontiguousarray(wc[:, ::-1, ::-1, :].transpose(3, 1, 2, 0))  # (4, k, k, 8)
    td = descriptor(k, k, 8, 4, stride, stride, spec.dx, spec.dy)
    ds = m.CNNConvolutionWeightsDataSource(td, wt)
    t = persistent(m.CNNConvolutionTranspose(device, ds))
    x = m.Image.from_numpy(randn(gen, 1, H, W, 4), device)
    cb = queue.command_buffer()
    y, cstate = conv.encode(cb, x, destination_state_is_temporary=False)
    e = m.Image.from_numpy(randn(gen, 1, y.height, y.width, 8), device)
    z, tstate = t.encode(cb, e, convolution_gradient_state=cstate, destination_state_is_temporary=False)
    assert tstate.convolution is conv and tstate.convolution_transpose is t
    dx = cgrad.encode(cb, e, x, cstate)
    cb.commit()
    cb.wait_until_completed()
    assert (z.width, z.height, z.feature_channels) == (W, H, 4), "the forward convolution's source size"
    check(z.to_numpy(), dx.to_numpy(), "transpose = the convolution's data gradient")
    assert tuple(t.offset)[:2] == (0, 0)


def test_training_flow_reload_and_export(device, queue, check):
    """Forward, gradient, SGD on the gradient state, reload on both kernels: the next forward and
    gradient use the updated weights (they are re-rotated on the device)."""
    gen = rng("transpose-sgd")
    _, t, tg, w, b = make_transpose(device, 3, 3, 4, 8, (2, 2), (1, 1), 1, True, gen)
    t.padding = m.NNDefaultPadding(SAME)
    x = randn(gen, 2, 4, 4, 4)
    (Dw, Dh), start = expected_geometry(4, 4, (3, 3), (2, 2), (1, 1), SAME)
    e = randn(gen, 2, Dh, Dw, 8)
    xs, es = m.batch_from_numpy(x, device), m.batch_from_numpy(e, device)
    opt = m.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1)
    cb = queue.command_buffer()
    weights = t.export_weights_and_biases_with_command_buffer(cb)
    _, states = t.encode_batch(cb, xs, destination_state_is_temporary=False)
    tg.encode_batch(cb, es, xs, states)
    opt.encode(cb, states[0], weights)
    t.reload_weights_and_biases_with_command_buffer(cb, weights)
    tg.reload_weights_and_biases_with_command_buffer(cb, weights)
    ys2, states2 = t.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs2 = tg.encode_batch(cb, es, xs, states2)
    exported = t.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    ref = _reference(x, w, b, (2, 2), (1, 1), 1, start, (Dw, Dh), e)
    w1, b1 = (w - 0.1 * ref["dw"]).astype(np.float32), (b - 0.1 * ref["db"]).astype(np.float32)
    check(weights.weights, w1, "updated weights")
    check(exported.weights, w1, "exported weights after the reload")
    ref1 = _reference(x, w1, b1, (2, 2), (1, 1), 1, start, (Dw, Dh), e)
    check(m.batch_to_numpy(ys2), ref1["y"], "forward with the updated weights")
    check(m.batch_to_numpy(dxs2), ref1["dx"], "data gradient with the updated weights")


@pytest.mark.parametrize("option", ["GRADIENT_WITH_DATA", "GRADIENT_WITH_WEIGHTS_AND_BIAS"])
def test_transpose_gradient_option(device, queue, check, option):
    gen = rng("transpose-option-" + option)
    _, t, tg, w, b = make_transpose(device, 3, 3, 4, 4, (2, 2), (1, 1), 1, True, gen)
    tg.gradient_option = getattr(m.CNNConvolutionGradientOption, option)
    x = randn(gen, 1, 4, 4, 4)
    (Dw, Dh), start = expected_geometry(4, 4, (3, 3), (2, 2), (1, 1), DEFAULT_METHOD)
    e = randn(gen, 1, Dh, Dw, 4)
    cb = queue.command_buffer()
    xi = m.Image.from_numpy(x, device)
    y, state = t.encode(cb, xi, destination_state_is_temporary=False)
    dx = tg.encode(cb, m.Image.from_numpy(e, device), xi, state)
    cb.commit()
    cb.wait_until_completed()
    ref = _reference(x, w, b, (2, 2), (1, 1), 1, start, (Dw, Dh), e)
    if option == "GRADIENT_WITH_DATA":
        check(dx.to_numpy(), ref["dx"], "data gradient")
    else:
        check(state.gradient_for_weights, ref["dw"], "weight gradient")
        check(state.gradient_for_biases, ref["db"], "bias gradient")


def test_transpose_errors(device, queue):
    gen = rng("transpose-errors")
    d = descriptor(3, 3, 4, 4)
    d.fused_neuron_descriptor = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
    with pytest.raises(ValueError, match="fused_neuron_descriptor"):
        m.CNNConvolutionTranspose(device, m.CNNConvolutionWeightsDataSource(d, np.zeros((4, 3, 3, 4), np.float32)))
    dw = m.CNNDepthWiseConvolutionDescriptor(3, 3, 4, 4)
    with pytest.raises(ValueError, match="depthwise"):
        m.CNNConvolutionTransposeGradient(device, m.CNNConvolutionWeightsDataSource(dw, np.zeros((4, 3, 3, 1), np.float32)))
    with pytest.raises(TypeError, match="weights"):
        m.CNNConvolutionTranspose(device, None)

    _, t, tg, _, _ = make_transpose(device, 3, 3, 4, 8, (2, 2), (1, 1), 1, True, gen)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="source_image: CNNConvolutionTranspose reads 4"):
        t.encode(cb, m.Image.from_numpy(randn(gen, 1, 3, 3, 8), device))
    # a gradient state of another kind
    spec = ConvSpec(3, 3, 8, 4)
    wc, bc = spec.random_parameters(gen)
    _, conv, _ = make_conv(device, spec, wc, bc)
    x8 = m.Image.from_numpy(randn(gen, 1, 5, 5, 8), device)
    _, cstate = conv.encode(cb, x8, destination_state_is_temporary=False)
    x4 = m.Image.from_numpy(randn(gen, 1, 5, 5, 4), device)
    with pytest.raises(TypeError, match="CNNConvolutionTransposeGradientState"):
        tg.encode(cb, m.Image.from_numpy(randn(gen, 1, 5, 5, 8), device), x4, cstate)
    with pytest.raises(ValueError, match="stride"):  # the paired convolution has stride 1
        t.encode(cb, x4, convolution_gradient_state=cstate)
    with pytest.raises(ValueError, match="no destination"):
        t.encode(cb, x4, destination_image=x8, convolution_gradient_state=cstate)
    with pytest.raises(TypeError, match="convolution_gradient_state"):
        t.encode(cb, x4, convolution_gradient_state=object())
    y, tstate = t.encode(cb, x4, destination_state_is_temporary=False)
    with pytest.raises(ValueError, match="source_gradient"):
        tg.encode(cb, m.Image.from_numpy(randn(gen, 1, 2, 2, 8), device), x4, tstate)
    with pytest.raises(ValueError, match="source_image"):
        tg.encode(cb, m.Image.from_numpy(randn(gen, 1, y.height, y.width, 8), device),
                  m.Image.from_numpy(randn(gen, 1, 4, 5, 4), device), tstate)
