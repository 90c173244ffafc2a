"""NNReshape / NNReshapeGradient and NNPad / NNPadGradient (MPSNNReshape.h) on every device.

Oracles: NumPy's reshape (C order over H, W, C = MPS's HWC element order) and np.pad ("constant",
"edge", "reflect", "symmetric" for the edge modes ZERO/CONSTANT, CLAMP, MIRROR, MIRROR_WITH_EDGE),
PyTorch autograd for the gradients (reshape; a gather through np.pad's index pattern, whose
autograd sums the copies, checked against F.pad's own gradient where F.pad supports the mode), and
Apple's two worked examples of the pad gradient (MPSNNReshape.h). Copies are exact, so forward
results must match bit for bit; gradients are float32 sums of a few terms (bound 1e-6 relative).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import persistent, randn, rng

E = m.ImageEdgeMode
NP_MODE = {E.ZERO: "constant", E.CONSTANT: "constant", E.CLAMP: "edge", E.MIRROR: "reflect",
           E.MIRROR_WITH_EDGE: "symmetric"}


def run(device, fn):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return out


# ---------------------------------------------------------------------------------------------
# reshape

SHAPES = [((5, 3, 6), (9, 2, 5)), ((4, 4, 3), (1, 1, 48)), ((7, 1, 8), (2, 7, 4)), ((2, 3, 13), (13, 3, 2)),
          # dense layouts on both sides (channels a multiple of 4: the CPU copies whole ranges), over
          # several 256-pixel parallel chunks, with equal and with different channel counts
          ((32, 24, 8), (64, 12, 8)), ((16, 40, 12), (48, 20, 8))]


def hwc(shape):  # (width, height, channels) -> NumPy (height, width, channels)
    w, h, c = shape
    return (h, w, c)


@pytest.mark.parametrize("src,dst", SHAPES)
def test_reshape_forward_and_gradient(device, check, src, dst):
    gen = rng(f"reshape-{src}-{dst}")
    x_arr = randn(gen, *hwc(src))
    g_arr = randn(gen, *hwc(dst))
    x = m.Image.from_numpy(x_arr[None], device)
    g = m.Image.from_numpy(g_arr[None], device)
    fwd, grad = persistent(m.NNReshape(device)), persistent(m.NNReshapeGradient(device))

    def go(cb):
        y, state = fwd.encode(cb, x, destination_state_is_temporary=False, reshaped_width=dst[0],
                              reshaped_height=dst[1], reshaped_feature_channels=dst[2])
        assert isinstance(state, m.NNReshapeGradientState)
        return y, grad.encode(cb, g, x, state)

    y, dx = run(device, go)
    assert (y.width, y.height, y.feature_channels) == dst
    assert np.array_equal(y.to_numpy()[0], x_arr.reshape(hwc(dst)))
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    (xt.reshape(hwc(dst)) * torch.tensor(g_arr, dtype=torch.float64)).sum().backward()
    assert (dx.width, dx.height, dx.feature_channels) == src
    check(dx.to_numpy()[0], xt.grad.numpy(), "reshape gradient", tol=0)


def test_reshape_every_encode_form(device):
    """The four explicit-shape forms (macOS 11), MPSCNNKernel's destination forms and the
    returning form without a shape (keeps the source's shape)."""
    gen = rng("reshape-forms")
    xs_arr = randn(gen, 3, 2, 6, 4)  # 3 images, 6x2x4
    xs = m.batch_from_numpy(xs_arr, device)
    k = persistent(m.NNReshape(device))
    k.destination_image_allocator = m.ImageAllocator.persistent()
    want = xs_arr.reshape(3, 4, 3, 4)  # -> width 3, height 4, channels 4

    def go(cb):
        a = k.encode(cb, xs[0], reshaped_width=3, reshaped_height=4, reshaped_feature_channels=4)
        b, state = k.encode(cb, xs[1], destination_state_is_temporary=True, reshaped_width=3, reshaped_height=4,
                            reshaped_feature_channels=4)
        assert state.is_temporary
        c = k.encode_batch(cb, xs, reshaped_width=3, reshaped_height=4, reshaped_feature_channels=4)
        d, states = k.encode_batch(cb, xs, destination_state_is_temporary=False, reshaped_width=3,
                                   reshaped_height=4, reshaped_feature_channels=4)
        assert len(states) == 3 and all(isinstance(s, m.NNReshapeGradientState) for s in states)
        e = m.Image(device, m.ImageDescriptor(3, 4, 4))
        k.encode(cb, xs[2], k.result_state(xs[2]), e)
        f = k.encode(cb, xs[0])  # no shape: the source's shape
        return a, b, c, d, e, f

    a, b, c, d, e, f = run(device, go)
    assert np.array_equal(a.to_numpy()[0], want[0])
    assert np.array_equal(b.to_numpy()[0], want[1])
    for i in range(3):
        assert np.array_equal(c[i].to_numpy()[0], want[i])
        assert np.array_equal(d[i].to_numpy()[0], want[i])
    assert np.array_equal(e.to_numpy()[0], want[2])
    assert np.array_equal(f.to_numpy()[0], xs_arr[0])


def test_reshape_channel_slices(device, check):
    """source_feature_channel_offset / max count select the reshaped channels; the result lands at
    destination_feature_channel_offset, and the gradient maps back to the forward's channels."""
    gen = rng("reshape-slices")
    x_arr = randn(gen, 3, 4, 10)
    k = persistent(m.NNReshape(device))
    k.source_feature_channel_offset = 4
    k.source_feature_channel_max_count = 5  # channels 4..8: 3*4*5 = 60 elements
    k.destination_feature_channel_offset = 4
    x = m.Image.from_numpy(x_arr[None], device)
    y = m.Image.from_numpy(np.full((1, 2, 5, 10), 7.0, np.float32), device)  # writes channels 4..9: 5x2x6 = 60
    g_arr = randn(gen, 2, 5, 10)
    g = m.Image.from_numpy(g_arr[None], device)
    state = k.result_state(x)
    grad = persistent(m.NNReshapeGradient(device))

    def go(cb):
        k.encode(cb, x, state, y)
        return grad.encode(cb, g, x, state)

    dx = run(device, go)
    yo = y.to_numpy()[0]
    assert np.array_equal(yo[:, :, 4:], x_arr[:, :, 4:9].reshape(2, 5, 6))
    assert np.all(yo[:, :, :4] == 7.0)
    assert dx.feature_channels == 10
    check(dx.to_numpy()[0][:, :, 4:9], g_arr[:, :, 4:].reshape(3, 4, 5), "gradient channels", tol=0)


def test_reshape_errors(device):
    q = m.CommandQueue(device)
    x = m.Image.from_numpy(np.zeros((1, 2, 3, 4), np.float32), device)
    k = persistent(m.NNReshape(device))
    cb = q.command_buffer()
    with pytest.raises(ValueError, match="keeps the number of elements"):
        k.encode(cb, x, reshaped_width=5, reshaped_height=1, reshaped_feature_channels=4)
    with pytest.raises(ValueError, match="all three or none"):
        k.encode(cb, x, reshaped_width=3)
    with pytest.raises(ValueError, match="reshaped_height"):
        k.encode(cb, x, reshaped_width=3, reshaped_height=0, reshaped_feature_channels=8)
    with pytest.raises(ValueError, match="keeps the number of elements"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(5, 5, 1)))
    k.offset = (1, 0, 0)
    with pytest.raises(ValueError, match="offset"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(3, 2, 4)))
    k.offset = (0, 0, 0)
    k.clip_rect = m.Region((0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match="clip_rect"):
        k.encode(cb, x, destination_image=m.Image(device, m.ImageDescriptor(3, 2, 4)))
    with pytest.raises(TypeError, match="NNReshapeGradientState"):
        _, state = m.NNPad(device).encode(cb, x, destination_state_is_temporary=False)
        m.NNReshapeGradient(device).encode(cb, x, x, state)
    cb.commit()
    cb.wait_until_completed()


# ---------------------------------------------------------------------------------------------
# pad


def np_pad_index(n, before, after, mode):
    """Source index of every padded position under np.pad's mode (-1: the fill)."""
    if mode == "constant":
        return np.pad(np.arange(n), (before, after), mode="constant", constant_values=-1)
    return np.pad(np.arange(n), (before, after), mode=mode)


def pad_reference(x, before, after, mode, fill):
    """np.pad over (H, W, C) of one image; fill: a scalar or one value per output channel."""
    (bx, by, bc), (ax, ay, ac) = before, after
    np_mode = NP_MODE[mode]
    iy = np_pad_index(x.shape[0], by, ay, np_mode)
    ix = np_pad_index(x.shape[1], bx, ax, np_mode)
    ic = np_pad_index(x.shape[2], bc, ac, np_mode)
    if np_mode != "constant":  # np.pad itself, not only its index pattern
        ref = np.pad(x, ((by, ay), (bx, ax), (bc, ac)), mode=np_mode)
        assert np.array_equal(ref, x[np.ix_(iy, ix, ic)])
        return ref, (iy, ix, ic)
    out = np.empty((len(iy), len(ix), len(ic)), np.float32)
    fills = np.broadcast_to(np.asarray(fill if mode == E.CONSTANT else 0.0, np.float32), (len(ic),))
    inside = (iy[:, None, None] >= 0) & (ix[None, :, None] >= 0) & (ic[None, None, :] >= 0)
    out[...] = np.where(inside, x[np.ix_(np.maximum(iy, 0), np.maximum(ix, 0), np.maximum(ic, 0))], fills)
    return out, (iy, ix, ic)


def gather_gradient(x_shape, index, g):
    """dX of Y = X[iy, ix, ic] (entries -1 contribute nothing) by PyTorch autograd, float64."""
    iy, ix, ic = (torch.tensor(np.maximum(i, 0)) for i in index)
    keep = torch.tensor((index[0][:, None, None] >= 0) & (index[1][None, :, None] >= 0) &
                        (index[2][None, None, :] >= 0), dtype=torch.float64)
    xt = torch.zeros(x_shape, dtype=torch.float64, requires_grad=True)
    y = xt[iy][:, ix][:, :, ic] * keep
    (y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    return xt.grad.numpy()


PAD_CASES = [
    # (H, W, C), before (x, y, channel), after
    ((4, 5, 3), (2, 1, 0), (3, 2, 0)),
    ((3, 3, 6), (4, 2, 2), (1, 5, 3)),     # pads beyond the image size: repeated reflections
    ((1, 6, 5), (1, 3, 1), (2, 2, 2)),     # one row
    ((5, 2, 1), (0, 0, 3), (0, 0, 4)),     # channel padding only, one channel
]


@pytest.mark.parametrize("mode", list(NP_MODE), ids=lambda e: e.name)
@pytest.mark.parametrize("case", range(len(PAD_CASES)))
def test_pad_forward_and_gradient(device, check, mode, case):
    shape, before, after = PAD_CASES[case]
    gen = rng(f"pad-{case}-{int(mode)}")
    x_arr = randn(gen, *shape)
    pad = persistent(m.NNPad(device, before, after))
    pad.edge_mode = mode
    pad.fill_value = 1.25
    x = m.Image.from_numpy(x_arr[None], device)
    ref, index = pad_reference(x_arr, before, after, mode, 1.25)
    g_arr = randn(gen, *ref.shape)
    g = m.Image.from_numpy(g_arr[None], device)
    grad = persistent(m.NNPadGradient(device))

    def go(cb):
        y, state = pad.encode(cb, x, destination_state_is_temporary=False)
        assert isinstance(state, m.NNPadGradientState)
        return y, grad.encode(cb, g, x, state)

    y, dx = run(device, go)
    assert pad.offset == m.Offset(-before[0], -before[1], 0)
    assert np.array_equal(y.to_numpy()[0], ref), "forward differs from np.pad"
    assert (dx.width, dx.height, dx.feature_channels) == (shape[1], shape[0], shape[2])
    check(dx.to_numpy()[0], gather_gradient(shape, index, g_arr), "pad gradient", tol=1e-6)


@pytest.mark.parametrize("mode,torch_mode", [(E.ZERO, "constant"), (E.CLAMP, "replicate"), (E.MIRROR, "reflect")],
                         ids=["zero", "clamp", "mirror"])
def test_pad_gradient_matches_f_pad_autograd(device, check, mode, torch_mode):
    """F.pad's own autograd (spatial padding smaller than the image, as F.pad requires)."""
    gen = rng(f"pad-fpad-{torch_mode}")
    x_arr = randn(gen, 2, 6, 7, 5)
    before, after = (2, 1, 0), (3, 2, 0)
    pad = persistent(m.NNPad(device, before, after))
    pad.edge_mode = mode
    xs = m.batch_from_numpy(x_arr, device)
    xt = torch.tensor(x_arr, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    yt = F.pad(xt, (before[0], after[0], before[1], after[1]), mode=torch_mode)
    g_arr = randn(gen, *yt.permute(0, 2, 3, 1).shape)
    (yt * torch.tensor(g_arr, dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
    gs = m.batch_from_numpy(g_arr, device)
    grad = persistent(m.NNPadGradient(device))

    def go(cb):
        ys, states = pad.encode_batch(cb, xs, destination_state_is_temporary=True)
        return ys, grad.encode_batch(cb, gs, xs, states)

    ys, dxs = run(device, go)
    assert np.array_equal(m.batch_to_numpy(ys), yt.detach().permute(0, 2, 3, 1).numpy().astype(np.float32))
    check(m.batch_to_numpy(dxs), xt.grad.permute(0, 2, 3, 1).numpy(), "batch gradient", tol=1e-6)


def test_pad_gradient_apple_examples(device):
    """The two worked examples of MPSNNPadGradient's header (one row, one channel)."""
    for mode, before, after, want in (
            (E.CLAMP, 2, 3, lambda d: [d[0] + d[1] + d[2], d[3], d[4] + d[5] + d[6] + d[7]]),
            (E.MIRROR, 4, 1, lambda d: [d[0] + d[4], d[1] + d[3] + d[5] + d[7], d[2] + d[6]])):
        x = m.Image.from_numpy(np.arange(3, dtype=np.float32).reshape(1, 1, 3, 1), device)
        d = np.array([1, 2, 4, 8, 16, 32, 64, 128], np.float32)
        g = m.Image.from_numpy(d.reshape(1, 1, 8, 1), device)
        pad = persistent(m.NNPad(device, (before, 0, 0), (after, 0, 0)))
        pad.edge_mode = mode

        def go(cb):
            y, state = pad.encode(cb, x, destination_state_is_temporary=True)
            return y, persistent(m.NNPadGradient(device)).encode(cb, g, x, state)

        y, dx = run(device, go)
        forward = {E.CLAMP: [0, 0, 0, 1, 2, 2, 2, 2], E.MIRROR: [0, 1, 2, 1, 0, 1, 2, 1]}[mode]
        assert y.to_numpy().ravel().tolist() == forward
        assert dx.to_numpy().ravel().tolist() == want(d)


def test_pad_header_channel_example(device):
    """MPSNNPad's header example (before.channel 2, after.channel 3, three source channels,
    destination_feature_channel_offset 4; zero and mirror-with-edge), with the source slice starting
    at channel 4 instead of 1: mpsgrad keeps MPSCNNKernel's multiple-of-4 rule for
    source_feature_channel_offset."""
    x_arr = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 1, 8) * 10  # x0..x7 = 10..80
    x = m.Image.from_numpy(x_arr, device)
    for mode, want in ((E.ZERO, [0, 0, 50, 60, 70, 0, 0, 0]), (E.MIRROR_WITH_EDGE, [60, 50, 50, 60, 70, 70, 60, 50])):
        pad = persistent(m.NNPad(device, (0, 0, 2), (0, 0, 3)))
        pad.edge_mode = mode
        pad.source_feature_channel_offset = 4
        pad.source_feature_channel_max_count = 3
        pad.destination_feature_channel_offset = 4
        y = m.Image.from_numpy(np.full((1, 1, 1, 13), -1.0, np.float32), device)
        run(device, lambda cb: pad.encode(cb, x, destination_image=y))
        assert y.to_numpy().ravel().tolist() == [-1] * 4 + want + [-1]


def test_pad_into_destination_offset_clip_and_fill_array(device, check):
    """Explicit destination: the padding comes from offset and clip_rect; the per-channel fill
    array of the initializer overrides fill_value; pixels outside the clip are not written."""
    gen = rng("pad-explicit")
    x_arr = randn(gen, 4, 5, 3)
    fills = [0.5, -1.5, 2.5, 3.5, 4.5]
    pad = persistent(m.NNPad(device, (0, 0, 1), (0, 0, 1), fill_value_array=fills))
    pad.edge_mode = E.CONSTANT
    pad.fill_value = 99.0  # ignored: the array wins
    pad.offset = (-2, -1, 0)
    pad.clip_rect = m.Region((1, 2, 0), (6, 4, 1))
    x = m.Image.from_numpy(x_arr[None], device)
    y = m.Image.from_numpy(np.full((1, 7, 8, 5), 7.0, np.float32), device)
    state = pad.result_state(x)
    g_arr = randn(gen, 1, 7, 8, 5)
    g = m.Image.from_numpy(g_arr, device)
    grad = persistent(m.NNPadGradient(device))

    def go(cb):
        pad.encode(cb, x, state, y)
        return grad.encode(cb, g, x, state)

    dx = run(device, go)
    ref, index = pad_reference(x_arr, (2, 1, 1), (2, 2, 1), E.CONSTANT, fills)  # columns -2..3, rows -1..2
    yo = y.to_numpy()[0]
    assert np.array_equal(yo[2:6, 1:7], ref[:4, :6])
    mask = np.ones(yo.shape, bool)
    mask[2:6, 1:7] = False
    assert np.all(yo[mask] == 7.0)
    check(dx.to_numpy()[0], gather_gradient(x_arr.shape, (index[0][:4], index[1][:6], index[2]), g_arr[0, 2:6, 1:7]),
          "gradient (slice of G)", tol=0)


def test_pad_gradient_zero_fills_unread_channels(device):
    """Channels the forward pass did not read get 0 in dX (Apple's header)."""
    x = m.Image.from_numpy(np.ones((1, 2, 2, 8), np.float32), device)
    pad = persistent(m.NNPad(device, (1, 1, 0), (1, 1, 0)))
    pad.source_feature_channel_offset = 4
    g = m.Image.from_numpy(np.ones((1, 4, 4, 4), np.float32), device)
    dx = m.Image.from_numpy(np.full((1, 2, 2, 8), 5.0, np.float32), device)

    def go(cb):
        _, state = pad.encode(cb, x, destination_state_is_temporary=True)
        grad = persistent(m.NNPadGradient(device))
        grad.destination_image_descriptor([g, x], [state])  # copies the forward geometry (channel offset 4)
        grad.encode(cb, g, x, state, dx)

    run(device, go)
    out = dx.to_numpy()[0]
    assert np.all(out[:, :, :4] == 0) and np.all(out[:, :, 4:] == 1)


def test_pad_errors(device):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    x = m.Image.from_numpy(np.zeros((1, 2, 3, 4), np.float32), device)
    pad = m.NNPad(device, (1, 1, 0), (1, 1, 2), fill_value_array=[1.0, 2.0])
    pad.edge_mode = E.CONSTANT
    with pytest.raises(ValueError, match="fill_value_array"):
        pad.encode(cb, x)
    with pytest.raises(TypeError, match="padding_size_before"):
        m.NNPad(device, "1,1,0", (0, 0, 0))
    with pytest.raises((TypeError, ValueError), match="padding_size_after"):
        m.NNPad(device, (0, 0, 0), (0, -1, 0))
    with pytest.raises(TypeError, match="fill_value"):
        pad.fill_value = "x"
    small = m.Image(device, m.ImageDescriptor(3, 2, 4))
    p2 = m.NNPad(device, (0, 0, 2), (0, 0, 0))
    with pytest.raises(ValueError, match="feature channels"):
        p2.encode(cb, x, destination_image=small)
    with pytest.raises(TypeError, match="NNPadGradientState"):
        _, state = m.NNReshape(device).encode(cb, x, destination_state_is_temporary=False)
        m.NNPadGradient(device).encode(cb, x, x, state)
    cb.commit()
    cb.wait_until_completed()
    k = m.NNPad(device)
    assert (k.padding_size_before, k.padding_size_after, k.fill_value) == (m.ImageCoordinate(), m.ImageCoordinate(), 0.0)
    k.padding_size_before = m.ImageCoordinate(1, 2, 3)
    assert k.padding_size_before == m.ImageCoordinate(x=1, y=2, channel=3)
