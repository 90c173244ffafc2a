"""Sub-pixel convolution (CNNSubPixelConvolutionDescriptor) and its gradient against PyTorch autograd.

The oracle is PyTorch's ``conv2d`` followed by ``pixel_shuffle`` in float64 under autograd. MPS's
shuffle puts channel ``C * (r * (y mod r) + (x mod r)) + c`` of low-resolution pixel (x / r, y / r)
at channel c of pixel (x, y), C = N / r^2 (spec §2.1.1); ``pixel_shuffle`` reads channel
``c * r^2 + (y mod r) * r + (x mod r)`` instead, so the test permutes the convolution's output
channels from MPS's order to PyTorch's (``mps_to_torch_channels``, written from the two formulas)
before shuffling. The convolution window is placed from ``offset`` by explicit padding and cropping,
as in test_convolution.py; clip rectangles crop the shuffled result (relative to the requested clip
origin, docs/convolution_sub_pixel.md).

The gradient of a sub-pixel convolution is an mpsgrad extension (MPS does not train them): the
data, weight and bias gradients are those autograd gives for the same composition.

Tolerance: conftest.TOLERANCE (1e-4 relative, float32 against float64; see test_convolution.py).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import NEURONS, dest_size, pad_offset, persistent, randn, rng, size_style

PM = m.PaddingMethod
SAME = int(PM.SIZE_SAME)
VALID = int(PM.SIZE_VALID_ONLY)
FULL = int(PM.SIZE_FULL)
DEFAULT_METHOD = int(PM.ALIGN_CENTERED | PM.ADD_REMAINDER_TO_TOP_LEFT | PM.SIZE_SAME)


def mps_to_torch_channels(n_out: int, r: int):
    """perm[t] = the MPS channel that pixel_shuffle's input channel t must hold."""
    C = n_out // (r * r)
    perm = [0] * n_out
    for c in range(C):
        for sy in range(r):
            for sx in range(r):
                perm[c * r * r + sy * r + sx] = C * (r * sy + sx) + c
    return perm


def reference(x_nhwc, w_ohwi, b, *, r, stride=(1, 1), dilation=(1, 1), groups=1, neuron="none",
              offset=(0, 0), low_size, crop, e_nhwc=None):
    """The sub-pixel convolution in float64 PyTorch.

    low_size: (width, height) of the low-resolution result computed from `offset`.
    crop: (x, y, width, height) of the shuffled result that the destination receives.
    e_nhwc: the incoming gradient over the crop; when given, also dx, dw (OHWI), db.
    """
    sx, sy = stride
    dx_, dy_ = dilation
    kh, kw = w_ohwi.shape[1], w_ohwi.shape[2]
    kw_dil, kh_dil = (kw - 1) * dx_ + 1, (kh - 1) * dy_ + 1
    X = torch.tensor(x_nhwc, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    W = torch.tensor(w_ohwi, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    B = torch.tensor(b if b is not None else np.zeros(w_ohwi.shape[0]), dtype=torch.float64).requires_grad_(True)
    lw, lh = low_size
    left, top = offset[0] - (kw_dil >> 1), offset[1] - (kh_dil >> 1)
    span_w, span_h = sx * (lw - 1) + kw_dil, sy * (lh - 1) + kh_dil
    H, Wd = X.shape[2], X.shape[3]
    pad = (max(0, -left), max(0, left + span_w - Wd), max(0, -top), max(0, top + span_h - H))
    Xp = F.pad(X, pad)
    window = Xp[:, :, top + pad[2]:top + pad[2] + span_h, left + pad[0]:left + pad[0] + span_w]
    low = F.conv2d(window, W, B, stride=(sy, sx), dilation=(dy_, dx_), groups=groups)
    assert low.shape[2:] == (lh, lw)
    _, a, bb, fn = NEURONS[neuron]
    low = fn(low, a, bb)
    high = F.pixel_shuffle(low[:, mps_to_torch_channels(low.shape[1], r)], r)
    cx, cy, cw, ch = crop
    Y = high[:, :, cy:cy + ch, cx:cx + cw]
    out = {"y": Y.detach().permute(0, 2, 3, 1).numpy()}
    if e_nhwc is not None:
        (Y * torch.tensor(e_nhwc, dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
        out["dx"] = X.grad.permute(0, 2, 3, 1).numpy()
        out["dw"] = W.grad.permute(0, 2, 3, 1).numpy()
        out["db"] = B.grad.numpy()
    return out


def descriptor(kw, kh, cin, cout, r, *, stride=(1, 1), dilation=(1, 1), groups=1, neuron="none"):
    d = m.CNNSubPixelConvolutionDescriptor(kernel_width=kw, kernel_height=kh, input_feature_channels=cin,
                                           output_feature_channels=cout, sub_pixel_scale_factor=r)
    d.stride_in_pixels_x, d.stride_in_pixels_y = stride
    d.dilation_rate_x, d.dilation_rate_y = dilation
    d.groups = groups
    kind, a, b, _ = NEURONS[neuron]
    if kind is not None:
        kwargs = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
        d.fused_neuron_descriptor = m.NNNeuronDescriptor(kind, **kwargs)
    return d


def parameters(gen, kw, kh, cin, cout, groups, bias=True):
    w = (randn(gen, cout, kh, kw, cin // groups) / np.sqrt(kw * kh * cin // groups)).astype(np.float32)
    return w, (randn(gen, cout) * 0.5 if bias else None)


# id, (kw, kh, cin, cout, r), stride, dilation, groups, neuron, (H, W), batch, padding method, bias
RETURNING = [
    ("r2-3x3-default", (3, 3, 4, 8, 2), (1, 1), (1, 1), 1, "none", (5, 6), 1, None, True),
    ("r2-relu-batch3", (3, 3, 3, 12, 2), (1, 1), (1, 1), 1, "relu", (4, 5), 3, DEFAULT_METHOD, True),
    ("r3-2x2-s2-valid", (2, 2, 4, 27, 3), (2, 2), (1, 1), 1, "tanh", (7, 8), 2, VALID, True),
    ("r2-groups2-same", (3, 3, 8, 16, 2), (1, 1), (1, 1), 2, "none", (6, 6), 1, SAME, False),
    ("r2-d2-full-leaky", (3, 2, 5, 4, 2), (1, 2), (2, 1), 1, "leaky_relu", (5, 7), 2, FULL, True),
    ("r1-is-regular", (3, 3, 4, 8, 1), (1, 1), (1, 1), 1, "sigmoid", (5, 5), 1, None, True),
    ("r4-1x1", (1, 1, 4, 32, 4), (1, 1), (1, 1), 1, "none", (3, 4), 1, SAME, True),
]


@pytest.mark.parametrize("row", RETURNING, ids=[r[0] for r in RETURNING])
def test_returning_forward_and_gradient(device, queue, check, row):
    name, (kw, kh, cin, cout, r), stride, dilation, groups, neuron, (H, W), n, method, bias = row
    gen = rng(name)
    d = descriptor(kw, kh, cin, cout, r, stride=stride, dilation=dilation, groups=groups, neuron=neuron)
    w, b = parameters(gen, kw, kh, cin, cout, groups, bias)
    ds = m.CNNConvolutionWeightsDataSource(d, w, b)
    conv, grad = persistent(m.CNNConvolution(device, ds)), persistent(m.CNNConvolutionGradient(device, ds))
    assert conv.sub_pixel_scale_factor == r
    assert grad.source_gradient_feature_channels == cout // (r * r)
    if method is not None:
        conv.padding = m.NNDefaultPadding(method)
    eff = DEFAULT_METHOD if method is None else method
    kw_dil, kh_dil = (kw - 1) * dilation[0] + 1, (kh - 1) * dilation[1] + 1
    # The padding policy sizes the low-resolution result; the destination is r times larger.
    lw = dest_size(W, stride[0], kw_dil, size_style(eff))
    lh = dest_size(H, stride[1], kh_dil, size_style(eff))
    offset = (pad_offset(W, stride[0], kw_dil, eff, "x"), pad_offset(H, stride[1], kh_dil, eff, "y"))
    x_arr = randn(gen, n, H, W, cin)
    e_arr = randn(gen, n, lh * r, lw * r, cout // (r * r))
    xs = m.batch_from_numpy(x_arr, device)
    es = m.batch_from_numpy(e_arr, device)
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert (ys[0].width, ys[0].height, ys[0].feature_channels) == (lw * r, lh * r, cout // (r * r))
    ref = reference(x_arr, w, b, r=r, stride=stride, dilation=dilation, groups=groups, neuron=neuron,
                    offset=offset, low_size=(lw, lh), crop=(0, 0, lw * r, lh * r), e_nhwc=e_arr)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
    check(states[0].gradient_for_biases, ref["db"], "bias gradient")


# id, (kw, kh, cin, cout, r), stride, source (H, W), offset, clip ((x, y), (w, h)) or None,
# destination (H, W, channels), destination_feature_channel_offset, neuron
CLIPPED = [
    # a clip rectangle inside the destination that starts and ends inside r x r blocks
    ("inner-odd-clip", (3, 3, 4, 8, 2), (1, 1), (6, 6), (0, 0), ((1, 3), (7, 5)), (12, 12, 2), 0, "relu"),
    # a clip rectangle left of / above the image: moved onto it, the first written pixel is
    # pixel 3 (x) and 1 (y) of the shuffled result (phases 0 and 1 of r = 3)
    ("negative-origin-r3", (3, 3, 4, 18, 3), (2, 2), (9, 8), (1, 0), ((-3, -1), (8, 7)), (7, 8, 2), 0, "none"),
    # a channel offset in a wider destination, and a clip exceeding the destination
    ("channel-offset", (2, 2, 4, 12, 2), (1, 1), (5, 5), (1, 1), ((2, 0), (100, 100)), (9, 8, 7), 4, "tanh"),
    # no clip rectangle, an explicit offset off the image
    ("offset-far", (3, 3, 4, 8, 2), (1, 1), (5, 6), (-2, 3), None, (7, 9, 2), 0, "none"),
]


@pytest.mark.parametrize("row", CLIPPED, ids=[r[0] for r in CLIPPED])
def test_offset_clip_rect_and_channel_offset(device, queue, check, row):
    name, (kw, kh, cin, cout, r), stride, (H, W), offset, clip, (DH, DW, DC), dco, neuron = row
    C = cout // (r * r)
    gen = rng(name)
    d = descriptor(kw, kh, cin, cout, r, stride=stride, neuron=neuron)
    w, b = parameters(gen, kw, kh, cin, cout, 1)
    ds = m.CNNConvolutionWeightsDataSource(d, w, b)
    conv, grad = m.CNNConvolution(device, ds), m.CNNConvolutionGradient(device, ds)
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    x_arr = randn(gen, 1, H, W, cin)
    x = m.Image.from_numpy(x_arr, device)
    sentinel = -3.5
    y = m.Image.from_numpy(np.full((DH, DW, DC), sentinel, np.float32), device)
    if clip is None:
        (qx, qy), (cw, ch) = (0, 0), (DW, DH)
    else:
        (qx, qy), (cw, ch) = clip
        conv.clip_rect = ((qx, qy, 0), (cw, ch, 1))
    # The clip rectangle on the destination, and its position in the shuffled result.
    x0, y0 = max(qx, 0), max(qy, 0)
    x1, y1 = min(qx + cw, DW), min(qy + ch, DH)
    px, py = x0 - qx, y0 - qy
    wx, wy = x1 - x0, y1 - y0
    conv.destination_feature_channel_offset = dco
    conv.destination_image_descriptor([x])
    conv.offset = offset
    state = conv.result_state(x)
    e_arr = randn(gen, 1, wy, wx, C)
    # The gradient kernel reads the incoming gradient at the forward destination's channel offset.
    e_full = np.zeros((wy, wx, dco + C), np.float32)
    e_full[:, :, dco:] = e_arr[0]
    e = m.Image.from_numpy(e_full, device)
    cb = queue.command_buffer()
    conv.encode(cb, x, state, y)
    dx = grad.encode(cb, e, x, state)
    cb.commit()
    cb.wait_until_completed()
    # The low-resolution pixels that the crop [p, p + w) of the shuffled result needs, from
    # pixel 0 of the requested origin: ceil((p + w) / r).
    low = (-(-(px + wx) // r), -(-(py + wy) // r))
    ref = reference(x_arr, w, b, r=r, stride=stride, neuron=neuron, offset=offset, low_size=low,
                    crop=(px, py, wx, wy), e_nhwc=e_arr)
    out = y.to_numpy()
    check(out[:, y0:y1, x0:x1, dco:dco + C], ref["y"], "forward inside the clip rectangle")
    mask = np.ones(out.shape, bool)
    mask[:, y0:y1, x0:x1, dco:dco + C] = False
    assert np.all(out[mask] == sentinel), "pixels or channels outside the written range were written"
    check(dx.to_numpy(), ref["dx"], "data gradient")
    check(state.gradient_for_weights, ref["dw"], "weight gradient")
    check(state.gradient_for_biases, ref["db"], "bias gradient")


def test_channel_order_is_mps_not_pytorch(device, queue):
    """A 1x1 identity convolution exposes the shuffle itself: destination (x, y, c) must hold input
    channel C * (r * (y mod r) + (x mod r)) + c of low-resolution pixel (x / r, y / r)."""
    r, N = 2, 8
    C = N // 4
    d = descriptor(1, 1, N, N, r)
    ds = m.CNNConvolutionWeightsDataSource(d, np.eye(N, dtype=np.float32).reshape(N, 1, 1, N), None)
    conv = m.CNNConvolution(device, ds)
    conv.destination_image_allocator = m.ImageAllocator.persistent()
    x_arr = np.arange(3 * 2 * N, dtype=np.float32).reshape(1, 2, 3, N)
    cb = queue.command_buffer()
    y = conv.encode(cb, m.Image.from_numpy(x_arr, device))
    cb.commit()
    cb.wait_until_completed()
    out = y.to_numpy()[0]
    assert out.shape == (4, 6, C)
    for yy in range(4):
        for xx in range(6):
            for c in range(C):
                assert out[yy, xx, c] == x_arr[0, yy // r, xx // r, C * (r * (yy % r) + xx % r) + c]


def test_validation(device):
    def make(**kw):
        base = dict(kernel_width=3, kernel_height=3, input_feature_channels=4, output_feature_channels=8,
                    sub_pixel_scale_factor=2)
        base.update(kw)
        d = m.CNNSubPixelConvolutionDescriptor(**base)
        return m.CNNConvolutionWeightsDataSource(d, np.zeros((d.output_feature_channels, 3, 3, 4), np.float32))

    with pytest.raises(ValueError, match="sub_pixel_scale_factor"):
        make(output_feature_channels=6)
    with pytest.raises(ValueError, match="sub_pixel_scale_factor"):
        make(sub_pixel_scale_factor=0)
    with pytest.raises(TypeError, match="sub_pixel_scale_factor"):
        m.CNNSubPixelConvolutionDescriptor(sub_pixel_scale_factor="2")
    d = m.CNNSubPixelConvolutionDescriptor(3, 3, 4, 8, 2)
    assert d.sub_pixel_scale_factor == 2 and isinstance(d, m.CNNConvolutionDescriptor)
    d.sub_pixel_scale_factor = 3
    with pytest.raises(ValueError, match="sub_pixel_scale_factor"):
        d.validate()
    # Fully connected and transposed convolutions have no sub-pixel form.
    fc = m.CNNSubPixelConvolutionDescriptor(3, 3, 4, 8, 2)
    src = m.CNNConvolutionWeightsDataSource(fc, np.zeros((8, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match="sub_pixel_scale_factor"):
        m.CNNFullyConnected(device, src)
    with pytest.raises(ValueError, match="sub_pixel_scale_factor"):
        m.CNNConvolutionTranspose(device, src)
    # A gradient kernel of another scale factor rejects the state.
    regular = m.CNNConvolutionWeightsDataSource(m.CNNConvolutionDescriptor(3, 3, 4, 8),
                                                np.zeros((8, 3, 3, 4), np.float32))
    conv = m.CNNConvolution(device, src)
    x = m.Image.from_numpy(np.zeros((4, 4, 4), np.float32), device)
    state = conv.result_state(x)
    cb = m.CommandQueue(device).command_buffer()
    conv.encode(cb, x, state, m.Image.from_numpy(np.zeros((8, 8, 2), np.float32), device))
    with pytest.raises(ValueError, match="sub-pixel scale"):
        m.CNNConvolutionGradient(device, regular).encode(cb, m.Image.from_numpy(np.zeros((8, 8, 2), np.float32),
                                                                                device), x, state)
    # The incoming gradient has N / r^2 channels at the forward's written size.
    with pytest.raises(ValueError, match="source_gradient"):
        m.CNNConvolutionGradient(device, src).encode(cb, m.Image.from_numpy(np.zeros((4, 4, 2), np.float32),
                                                                            device), x, state)
    cb.commit()
    cb.wait_until_completed()


def test_descriptor_and_kernel_serialization(device, queue, check):
    d = descriptor(3, 3, 4, 8, 2, neuron="relu")
    blob = d.to_bytes()
    back = m.CNNConvolutionDescriptor.from_bytes(blob)
    assert isinstance(back, m.CNNSubPixelConvolutionDescriptor) and back.sub_pixel_scale_factor == 2
    assert back.to_bytes() == blob
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        unpickled = pickle.loads(pickle.dumps(d, protocol))
        assert type(unpickled) is m.CNNSubPixelConvolutionDescriptor and unpickled.to_bytes() == blob
    regular = m.CNNConvolutionDescriptor(3, 3, 4, 8)
    assert type(m.CNNConvolutionDescriptor.from_bytes(regular.to_bytes())) is m.CNNConvolutionDescriptor
    gen = rng("serialize")
    w, b = parameters(gen, 3, 3, 4, 8, 1)
    conv = m.CNNConvolution(device, m.CNNConvolutionWeightsDataSource(d, w, b))
    again = m.Kernel.from_bytes(conv.to_bytes(), device)
    assert again.sub_pixel_scale_factor == 2
    for k in (conv, again):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    x = m.Image.from_numpy(randn(gen, 4, 5, 4), device)
    cb = queue.command_buffer()
    y1, y2 = conv.encode(cb, x), again.encode(cb, x)
    cb.commit()
    cb.wait_until_completed()
    check(y2.to_numpy(), y1.to_numpy(), "deserialized kernel")
