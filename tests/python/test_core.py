"""The core object model: padding arithmetic, images (read/write, NumPy, DLPack, sub-images),
temporary-image and state read counts, command buffers (status, handlers, ordering, misuse)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import ConvSpec, conv_reference, dest_size, make_conv, pad_offset, randn, rng, run, size_style

PM = m.PaddingMethod
HWC = m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
CHW = m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH

ALL_METHODS = [int(size | align | rem)
               for size in (PM.SIZE_VALID_ONLY, PM.SIZE_SAME, PM.SIZE_FULL)
               for align in (PM.ALIGN_CENTERED, PM.ALIGN_TOP_LEFT, PM.ALIGN_BOTTOM_RIGHT)
               for rem in (PM.ADD_REMAINDER_TO_TOP_LEFT, PM.ADD_REMAINDER_TO_TOP_RIGHT,
                           PM.ADD_REMAINDER_TO_BOTTOM_LEFT, PM.ADD_REMAINDER_TO_BOTTOM_RIGHT)]


# ---- padding arithmetic (spec §1.8.1) ------------------------------------------------------------


def test_padding_method_values():
    assert int(PM.TENSORFLOW_SAME) == 28
    assert (int(PM.SIZE_SAME), int(PM.SIZE_FULL), int(PM.CUSTOM), int(PM.EXCLUDE_EDGES)) == (16, 32, 16384, 32768)
    assert (int(PM.ADD_REMAINDER_TO_TOP_RIGHT), int(PM.ADD_REMAINDER_TO_BOTTOM_LEFT)) == (4, 8)


def test_padding_worked_checks():
    # S=5, k=3, s=2, Same: D=3, readSize=7, extra=2, left=1, offset=0 (first window [-1, 1], TF SAME).
    assert m.padding_destination_size(5, 2, 3, 0) == 3
    assert m.padding_offset(5, 2, 3, int(PM.SIZE_SAME)) == 0
    # S=4, k=2, s=2, Same: D=2, extra=0, offset=1 (first window [0, 1]).
    assert m.padding_destination_size(4, 2, 2, 0) == 2
    assert m.padding_offset(4, 2, 2, int(PM.SIZE_SAME)) == 1
    # Sizes: valid-only, same = ceil(S/s), full.
    assert [m.padding_destination_size(10, 1, 3, st) for st in (-1, 0, 1)] == [8, 10, 12]
    assert [m.padding_destination_size(10, 3, 4, st) for st in (-1, 0, 1)] == [3, 4, 5]


def test_padding_arithmetic_brute_force():
    """The library's offsets and sizes equal the spec formula (re-derived in conftest) for every
    method bit combination, both axes, and a range of sizes, strides and (dilated) extents."""
    for method in ALL_METHODS:
        style = size_style(method)
        for S in range(1, 14):
            for s in range(1, 5):
                for k in range(1, 8):
                    D = dest_size(S, s, k, style)
                    assert m.padding_destination_size(S, s, k, style) == D, (S, s, k, style)
                    if D < 1:
                        continue
                    for axis in ("x", "y"):
                        assert m.padding_offset(S, s, k, method, axis) == pad_offset(S, s, k, method, axis), \
                            (S, s, k, method, axis)


def test_padding_remainder_bits_are_per_axis():
    # Odd extra padding (S=8, k=4, s=1, same: extra=3): the remainder goes top/left (left=2) unless
    # the axis's remainder bit sends it right (x, bit 4) or down (y, bit 8).
    same = int(PM.SIZE_SAME)
    for rem, (lx, ly) in {0: (2, 2), 4: (1, 2), 8: (2, 1), 12: (1, 1)}.items():
        assert m.padding_offset(8, 1, 4, same | rem, "x") == 2 - lx
        assert m.padding_offset(8, 1, 4, same | rem, "y") == 2 - ly
    # Alignment: top-left puts all the extra padding before, bottom-right none.
    assert m.padding_offset(8, 1, 4, same | int(PM.ALIGN_TOP_LEFT)) == 2 - 3
    assert m.padding_offset(8, 1, 4, same | int(PM.ALIGN_BOTTOM_RIGHT)) == 2


def test_padding_reverse_filters():
    # Reverse (transpose-style) filters: DestSizeReverse = (S-1)*s + 1 + style*(k-1).
    for S, s, k in [(4, 2, 3), (5, 3, 2), (3, 1, 5)]:
        for size, style in ((PM.SIZE_VALID_ONLY, -1), (PM.SIZE_SAME, 0), (PM.SIZE_FULL, 1)):
            D = (S - 1) * s + 1 + style * (k - 1)
            if D < 1:
                continue
            extra = (D - 1) * s + k - S
            left = extra // 2 if extra >= 0 else -((-extra) // 2)  # centred, remainder bottom-right
            assert m.padding_offset(S, s, k, int(size | PM.ADD_REMAINDER_TO_BOTTOM_RIGHT), "x", True) == (k >> 1) - left


def _tf_same_window_left(S, s, k):
    """TensorFlow SAME: out = ceil(S/s), pad_total = max((out-1)*s + k - S, 0), before = total // 2."""
    out = -(-S // s)
    total = max((out - 1) * s + k - S, 0)
    return out, -(total // 2)


def test_tensorflow_same_brute_force():
    """TENSORFLOW_SAME (28) places every window exactly as TensorFlow's SAME padding, wherever the
    windows at least cover the strides (k >= s - 1; with smaller kernels MPS centres the windows
    in the image, TensorFlow starts them at 0)."""
    tf_same = int(PM.TENSORFLOW_SAME)
    for S in range(1, 20):
        for s in range(1, 5):
            for k in range(max(1, s - 1), 10):
                out, left = _tf_same_window_left(S, s, k)
                assert m.padding_destination_size(S, s, k, 0) == out
                for axis in ("x", "y"):
                    offset = m.padding_offset(S, s, k, tf_same, axis)
                    assert offset - (k >> 1) == left, (S, s, k, axis)


@pytest.mark.parametrize("S,k,s,d", [(7, 3, 2, 1), (8, 4, 2, 1), (9, 2, 2, 2), (6, 5, 1, 1), (10, 4, 3, 1),
                                     (5, 3, 1, 2), (11, 2, 1, 1)])
def test_tensorflow_same_numerically(device, queue, check, S, k, s, d):
    """A conv with TENSORFLOW_SAME equals a TF-SAME conv built directly in PyTorch (independent of
    the MPS offset formula): pad (total//2, total - total//2), then a valid convolution."""
    H, W = S, S + 1
    spec = ConvSpec(k, k, 4, 4, sx=s, sy=s, dx=d, dy=d)
    gen = rng(f"tf-{S}-{k}-{s}-{d}")
    x_arr = randn(gen, 1, H, W, 4)
    w, b = spec.random_parameters(gen)
    _, conv, _ = make_conv(device, spec, w, b)
    conv.padding = m.NNDefaultPadding(int(PM.TENSORFLOW_SAME))
    x = m.Image.from_numpy(x_arr, device)
    y = run(queue, lambda cb: conv.encode(cb, x))
    keff = (k - 1) * d + 1

    def pads(n):
        out = -(-n // s)
        total = max((out - 1) * s + keff - n, 0)
        return total // 2, total - total // 2

    (pl, pr), (pt, pb) = pads(W), pads(H)
    X = torch.tensor(x_arr, dtype=torch.float64).permute(0, 3, 1, 2)
    ref = F.conv2d(F.pad(X, (pl, pr, pt, pb)), torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),
                   torch.tensor(b, dtype=torch.float64), stride=s, dilation=d)
    check(y.to_numpy(), ref.permute(0, 2, 3, 1).numpy(), "TF SAME forward")


def test_default_padding_inverse():
    valid = m.NNDefaultPadding(int(PM.SIZE_VALID_ONLY | PM.ALIGN_TOP_LEFT))
    assert valid.padding_method() == int(PM.SIZE_VALID_ONLY | PM.ALIGN_TOP_LEFT)
    assert valid.inverse().padding_method() == int(PM.SIZE_FULL | PM.ALIGN_TOP_LEFT)
    same = m.NNDefaultPadding(int(PM.TENSORFLOW_SAME))
    assert same.inverse().padding_method() == int(PM.TENSORFLOW_SAME)


# ---- images ------------------------------------------------------------------------------------


@pytest.mark.parametrize("channels", [1, 3, 4, 5, 8, 12])
def test_from_numpy_to_numpy_round_trip(device, channels):
    gen = rng(channels)
    a = randn(gen, 5, 7, channels)
    img = m.Image.from_numpy(a, device)
    assert (img.width, img.height, img.feature_channels, img.number_of_images) == (7, 5, channels, 1)
    assert img.shape == (1, 5, 7, channels)
    np.testing.assert_array_equal(img.to_numpy(), a[None])
    np.testing.assert_array_equal(np.asarray(img), a[None])
    b = randn(gen, 3, 4, 6, channels)
    multi = m.Image.from_numpy(b, device)
    assert multi.number_of_images == 3
    np.testing.assert_array_equal(multi.to_numpy(), b)
    # non-contiguous and float64 input are converted
    c = np.asfortranarray(b.astype(np.float64))[:, ::-1]
    np.testing.assert_array_equal(m.Image.from_numpy(c, device).to_numpy(), c.astype(np.float32))
    batch = m.batch_from_numpy(b, device)
    assert len(batch) == 3 and all(i.number_of_images == 1 for i in batch)
    np.testing.assert_array_equal(m.batch_to_numpy(batch), b)


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_read_write_bytes_layouts_and_channel_offsets(device, layout):
    dl = HWC if layout == "HWC" else CHW
    gen = rng(layout)
    H, W, C = 3, 5, 10
    img = m.Image(device, m.ImageDescriptor(width=W, height=H, feature_channels=C, number_of_images=2))
    full = randn(gen, 2, H, W, C)

    def as_layout(a):  # (H, W, c) -> the layout's shape
        return a if layout == "HWC" else np.ascontiguousarray(a.transpose(2, 0, 1))

    for n in range(2):
        img.write_bytes(as_layout(full[n]), dl, image_index=n)
    np.testing.assert_array_equal(img.to_numpy(), full)
    for n in range(2):
        np.testing.assert_array_equal(img.read_bytes(dl, image_index=n), as_layout(full[n]))
    # channels [4, 8) and [8, 10) of image 1
    part = randn(gen, H, W, 4)
    img.write_bytes(as_layout(part), dl, image_index=1, feature_channel_offset=4, number_of_feature_channels=4)
    full[1, :, :, 4:8] = part
    tail = randn(gen, H, W, 2)
    img.write_bytes(as_layout(tail), dl, image_index=1, feature_channel_offset=8)
    full[1, :, :, 8:] = tail
    np.testing.assert_array_equal(img.to_numpy(), full)
    np.testing.assert_array_equal(img.read_bytes(dl, 1, 4, 4), as_layout(full[1, :, :, 4:8]))
    np.testing.assert_array_equal(img.read_bytes(dl, 1, 8), as_layout(full[1, :, :, 8:]))
    np.testing.assert_array_equal(img.read_bytes(dl, 0, 0, 3), as_layout(full[0, :, :, :3]))
    # raw bytes of the right size are accepted
    raw = randn(gen, H, W, 4)
    img.write_bytes(as_layout(raw).tobytes(), dl, image_index=0, feature_channel_offset=4,
                    number_of_feature_channels=4)
    np.testing.assert_array_equal(img.to_numpy()[0, :, :, 4:8], raw)


@pytest.mark.float32_only("checks the float32 dtype of the DLPack export (test_float16.py covers float16)")
def test_dlpack_export_to_torch_and_numpy_is_zero_copy(device):
    gen = rng("dlpack-export")
    for C in (4, 3):
        a = randn(gen, 4, 5, C)
        img = m.Image.from_numpy(a, device)
        t = torch.from_dlpack(img)
        n = np.from_dlpack(img)
        assert tuple(t.shape) == (1, 4, 5, C) and t.dtype == torch.float32
        np.testing.assert_array_equal(t.numpy(), a[None])
        np.testing.assert_array_equal(n, a[None])
        new = randn(gen, 4, 5, C)
        img.write_bytes(new)
        np.testing.assert_array_equal(t.numpy(), new[None])  # a view, not a copy
        np.testing.assert_array_equal(n, new[None])


def test_dlpack_import_from_torch_and_numpy(device):
    gen = rng("dlpack-import")
    zero_copy = device.name == "cpu"
    # channels % 4 == 0: wrapped without a copy on the CPU device
    t = torch.tensor(randn(gen, 2, 3, 4, 8))
    img = m.Image.from_dlpack(t, device)
    assert img.shape == (2, 3, 4, 8)
    np.testing.assert_array_equal(img.to_numpy(), t.numpy())
    t[1, 2, 3, 5] = 42.0
    assert (img.to_numpy()[1, 2, 3, 5] == 42.0) == zero_copy
    img.write_bytes(np.full((3, 4, 8), -1.0, np.float32), image_index=0)
    assert bool(torch.all(t[0] == -1.0)) == zero_copy
    a = randn(gen, 3, 4, 4)  # 3-D numpy: one image
    img2 = m.from_dlpack(a, device)
    assert img2.shape == (1, 3, 4, 4)
    a[0, 0, 0] = 17.0
    assert (img2.to_numpy()[0, 0, 0, 0] == 17.0) == zero_copy
    # channels % 4 != 0: always a copy
    b = randn(gen, 1, 3, 4, 3)
    img3 = m.Image.from_dlpack(torch.from_numpy(b), device)
    b[0, 0, 0, 0] = 99.0
    assert img3.to_numpy()[0, 0, 0, 0] != 99.0
    np.testing.assert_array_equal(img3.to_numpy()[0, 1:], b[0, 1:])
    with pytest.raises(ValueError, match="obj"):
        m.Image.from_dlpack(torch.zeros(2, 3), device)


def test_zero_copy_image_feeds_a_convolution(device, queue, check):
    gen = rng("zc-conv")
    spec = ConvSpec(3, 3, 8, 4)
    w, b = spec.random_parameters(gen)
    _, conv, _ = make_conv(device, spec, w, b)
    t = torch.tensor(randn(gen, 1, 6, 7, 8))
    x = m.Image.from_dlpack(t, device)
    y = torch.from_dlpack(run(queue, lambda cb: conv.encode(cb, x)))
    ref = conv_reference(spec, t.numpy(), w, b, offset=(0, 0), out_size=(7, 6))
    check(y.numpy(), ref["y"], "conv of an imported tensor")


def test_batch_representation_aliases_parent(device):
    a = randn(rng("batch-repr"), 3, 2, 5, 6)
    img = m.Image.from_numpy(a, device)
    views = img.batch_representation()
    assert len(views) == 3 and all(v.number_of_images == 1 for v in views)
    np.testing.assert_array_equal(views[2].to_numpy(), a[2:3])
    views[1].write_bytes(np.full((2, 5, 6), 5.0, np.float32))
    assert np.all(img.to_numpy()[1] == 5.0)
    np.testing.assert_array_equal(np.from_dlpack(views[0]), a[0:1])


def test_sub_image_aliases_parent(device, queue, check):
    gen = rng("sub-image")
    parent = m.Image.from_numpy(randn(gen, 5, 6, 12), device)
    sub = parent.sub_image_with_feature_channel_range(4, 8)
    assert sub.feature_channels == 8 and (sub.width, sub.height) == (6, 5)
    assert sub.parent is not None
    np.testing.assert_array_equal(sub.to_numpy(), parent.to_numpy()[..., 4:12])
    np.testing.assert_array_equal(torch.from_dlpack(sub).numpy(), parent.to_numpy()[..., 4:12])  # strided view
    new = randn(gen, 5, 6, 8)
    sub.write_bytes(new)
    np.testing.assert_array_equal(parent.to_numpy()[..., 4:12], new[None])
    parent.write_bytes(np.zeros((5, 6, 4), np.float32), feature_channel_offset=4, number_of_feature_channels=4)
    np.testing.assert_array_equal(sub.to_numpy()[..., :4], 0.0)
    # A sub-image as a kernel's source and destination reads/writes the parent's channels.
    spec = ConvSpec(3, 3, 8, 4)
    w, b = spec.random_parameters(gen)
    _, conv, _ = make_conv(device, spec, w, b)
    dst = m.Image.from_numpy(np.zeros((5, 6, 8), np.float32), device)
    dst_sub = dst.sub_image_with_feature_channel_range(4, 4)
    conv.clip_rect = m.RECT_NO_CLIP
    run(queue, lambda cb: conv.encode(cb, sub, destination_image=dst_sub))
    ref = conv_reference(spec, parent.to_numpy()[..., 4:12], w, b, offset=(0, 0), out_size=(6, 5))
    check(dst.to_numpy()[..., 4:8], ref["y"], "conv through sub-images")
    assert np.all(dst.to_numpy()[..., :4] == 0)
    # odd tail: length may end at the last channel
    odd = m.Image.from_numpy(randn(gen, 2, 2, 6), device)
    assert odd.sub_image_with_feature_channel_range(4, 2).feature_channels == 2
    with pytest.raises(ValueError, match="feature_channel_range"):
        parent.sub_image_with_feature_channel_range(2, 4)
    with pytest.raises(ValueError, match="feature_channel_range"):
        parent.sub_image_with_feature_channel_range(8, 8)


# ---- temporary images and their read counts -------------------------------------------------------


def _identity_conv(device, channels=4, persistent=True):
    spec = ConvSpec(1, 1, channels, channels, bias=False)
    w = np.zeros(spec.weight_shape, np.float32)
    for c in range(channels):
        w[c, 0, 0, c] = 1.0
    _, conv, grad = make_conv(device, spec, w, None, persistent=persistent)
    return conv


def test_temporary_image_read_count_lifecycle(device, queue):
    conv = _identity_conv(device, persistent=False)  # results are temporary images too
    cb = queue.command_buffer()
    desc = m.ImageDescriptor(width=3, height=2, feature_channels=4)
    t = m.TemporaryImage(cb, desc)
    assert t.is_temporary and t.read_count == 1
    src = m.Image.from_numpy(randn(rng(1), 2, 3, 4), device)
    conv.encode(cb, src, destination_image=t)  # writes do not count
    assert t.read_count == 1
    t.read_count = 2  # keep it alive for two reads
    y1 = conv.encode(cb, t)
    assert t.read_count == 1
    y2 = conv.encode(cb, t)
    assert t.read_count == 0
    with pytest.raises(ValueError, match="read_count"):
        conv.encode(cb, t)  # a third read
    with pytest.raises(ValueError, match="read_count"):
        t.read_count = 1  # changing the count once it reached 0
    with pytest.raises(ValueError, match="read_count"):
        t.to_numpy()
    assert y1.read_count == 1 and y2.read_count == 1
    # The results are temporary images too: the host reads them before their command buffer completes.
    seen = []
    cb.encode_host_callback(lambda: seen.extend([y1.to_numpy(), y2.to_numpy()]))
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(seen[0], src.to_numpy())
    np.testing.assert_array_equal(seen[1], src.to_numpy())


def test_temporary_image_manual_release_and_batch_increment(device, queue):
    cb = queue.command_buffer()
    desc = m.ImageDescriptor(width=2, height=2, feature_channels=4)
    a, b = m.TemporaryImage(cb, desc), m.TemporaryImage(cb, desc)
    persistent = m.Image(device, desc)
    assert m.image_batch_increment_read_count([a, a, b, persistent], 2) == 3  # unique images
    assert (a.read_count, b.read_count) == (3, 3)
    a.read_count = 0
    with pytest.raises(ValueError, match="read_count"):
        m.image_batch_increment_read_count([a], 1)
    with pytest.raises(ValueError, match="read_count"):
        b.read_count = -1
    assert b.read_count == 3


def test_temporary_image_is_bound_to_its_command_buffer(device, queue):
    conv = _identity_conv(device)
    cb1, cb2 = queue.command_buffer(), queue.command_buffer()
    t = m.TemporaryImage(cb1, m.ImageDescriptor(width=2, height=2, feature_channels=4))
    with pytest.raises(ValueError, match="command buffer"):
        conv.encode(cb2, t)
    assert t.read_count == 1
    cb1.commit()
    cb1.wait_until_completed()
    with pytest.raises(m.CommandBufferError):
        m.TemporaryImage(cb1, m.ImageDescriptor(width=2, height=2, feature_channels=4))


# ---- states and their read counts -------------------------------------------------------------------


def test_state_read_counts(device, queue):
    s = m.State(device, 64)
    assert not s.is_temporary and s.read_count == 0 and s.resource_count == 1
    assert s.buffer_size_at_index(0) == 64 and s.resource_type_at_index(0) == m.StateResourceType.BUFFER
    assert s.buffer_at_index(0).shape == (16,)
    cb = queue.command_buffer()
    t = m.State.temporary(cb, [16, 32])
    assert t.is_temporary and t.read_count == 1 and t.resource_count == 2
    assert m.state_batch_increment_read_count([t, t, s], 1) == 2
    assert t.read_count == 2 and s.read_count == 1
    t.read_count = 0
    with pytest.raises(ValueError, match="read_count"):
        t.read_count = 3
    with pytest.raises(ValueError):
        t.buffer_at_index(0)
    cb.commit()
    cb.wait_until_completed()


def test_temporary_gradient_state_consumed_by_gradient(device, queue, check):
    spec = ConvSpec(3, 3, 4, 4)
    gen = rng("temp-state")
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    x = m.Image.from_numpy(randn(gen, 5, 5, 4), device)
    e = m.Image.from_numpy(randn(gen, 5, 5, 4), device)
    cb = queue.command_buffer()
    _, temp = conv.encode(cb, x, destination_state_is_temporary=True)
    _, pers = conv.encode(cb, x, destination_state_is_temporary=False)
    assert temp.is_temporary and temp.read_count == 1
    assert not pers.is_temporary and pers.read_count == 0
    dx1 = grad.encode(cb, e, x, temp)
    assert temp.read_count == 0
    with pytest.raises(ValueError, match="read_count"):
        grad.encode(cb, e, x, temp)  # reused after its read count reached zero
    dx2 = grad.encode(cb, e, x, pers)
    dx3 = grad.encode(cb, e, x, pers)  # persistent states are not consumed
    assert pers.read_count == 0
    # raising the count lets a temporary state serve two reads
    _, temp2 = conv.encode(cb, x, destination_state_is_temporary=True)
    temp2.read_count = 2
    grad.encode(cb, e, x, temp2)
    assert temp2.read_count == 1
    dx4 = grad.encode(cb, e, x, temp2)
    assert temp2.read_count == 0
    cb.commit()
    cb.wait_until_completed()
    ref = conv_reference(spec, x.to_numpy(), w, b, offset=(0, 0), out_size=(5, 5), e_nhwc=e.to_numpy())
    for dx in (dx1, dx2, dx3, dx4):
        check(dx.to_numpy(), ref["dx"], "data gradient")
    check(pers.gradient_for_weights, ref["dw"], "weight gradient")


def test_temporary_state_is_bound_to_its_command_buffer(device, queue):
    spec = ConvSpec(1, 1, 4, 4)
    w, b = spec.random_parameters(rng(0))
    _, conv, grad = make_conv(device, spec, w, b)
    x = m.Image.from_numpy(np.ones((2, 2, 4), np.float32), device)
    cb1 = queue.command_buffer()
    _, temp = conv.encode(cb1, x, destination_state_is_temporary=True)
    cb2 = queue.command_buffer()
    with pytest.raises(ValueError, match="command buffer"):
        grad.encode(cb2, x, x, temp)
    assert temp.read_count == 1
    grad.encode(cb1, x, x, temp)
    for cb in (cb1, cb2):
        cb.commit()
        cb.wait_until_completed()


# ---- command buffers ---------------------------------------------------------------------------------


def test_command_buffer_status_and_completed_handler(device, queue):
    conv = _identity_conv(device)
    x = m.Image.from_numpy(randn(rng(2), 3, 3, 4), device)
    cb = queue.command_buffer()
    assert cb.status == m.CommandBufferStatus.NOT_ENQUEUED and cb.error is None
    assert cb.device == device
    calls = []
    done = threading.Event()

    def handler(buffer):
        calls.append((buffer, buffer.status))
        done.set()

    cb.add_completed_handler(handler)
    y = conv.encode(cb, x)
    cb.commit()
    assert cb.status in (m.CommandBufferStatus.COMMITTED, m.CommandBufferStatus.SCHEDULED,
                         m.CommandBufferStatus.COMPLETED)
    cb.wait_until_completed()
    assert done.wait(10)
    assert cb.status == m.CommandBufferStatus.COMPLETED and cb.error is None
    assert len(calls) == 1, "the completed handler runs exactly once"
    assert calls[0][0] is cb and calls[0][1] == m.CommandBufferStatus.COMPLETED
    np.testing.assert_array_equal(y.to_numpy(), x.to_numpy())
    cb.wait_until_completed()  # waiting again returns at once
    assert len(calls) == 1


def test_command_buffer_misuse_raises(device, queue):
    conv = _identity_conv(device)
    x = m.Image.from_numpy(np.ones((2, 2, 4), np.float32), device)
    cb = queue.command_buffer()
    with pytest.raises(m.CommandBufferError, match="never committed"):
        cb.wait_until_completed()
    conv.encode(cb, x)
    cb.commit()
    with pytest.raises(m.CommandBufferError, match="already committed"):
        cb.commit()
    with pytest.raises(m.CommandBufferError, match="committed"):
        conv.encode(cb, x)
    with pytest.raises(m.CommandBufferError, match="committed"):
        cb.add_completed_handler(lambda b: None)
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert issubclass(m.CommandBufferError, RuntimeError)


def test_host_callback_runs_between_the_work_before_and_after_it(device, queue):
    """encode_host_callback (docs/metal.md "Host points"): the callback sees the first convolution's
    result, what it writes there is what the second convolution reads, and its exception fails the
    buffer with the Python message."""
    conv = _identity_conv(device)
    x = m.Image.from_numpy(randn(rng(3), 3, 3, 4), device)
    cb = queue.command_buffer()
    y = conv.encode(cb, x)
    seen = []

    def midway():
        seen.append(y.to_numpy())
        y.write_bytes(np.full((3, 3, 4), 2.0, np.float32).tobytes())

    cb.encode_host_callback(midway)
    z = conv.encode(cb, y)
    assert not seen
    cb.commit()
    cb.wait_until_completed()
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], x.to_numpy())
    np.testing.assert_array_equal(z.to_numpy().reshape(3, 3, 4), np.full((3, 3, 4), 2.0, np.float32))

    cb = queue.command_buffer()
    cb.encode_host_callback(lambda: 1 / 0)
    later = []
    cb.encode_host_callback(lambda: later.append(1))
    cb.commit()
    with pytest.raises(m.CommandBufferError, match="host callback failed: ZeroDivisionError"):
        cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.ERROR and not later
    with pytest.raises(TypeError, match="callback"):
        queue.command_buffer().encode_host_callback(3)


def test_commit_is_asynchronous_and_ordered(device, queue, check):
    """Two buffers on one queue run in commit order: the second reads what the first wrote, and
    while the first buffer's completed handler blocks, the second has not completed."""
    conv = _identity_conv(device)
    spec = ConvSpec(3, 3, 4, 4)
    gen = rng("ordering")
    w, b = spec.random_parameters(gen)
    _, conv2, _ = make_conv(device, spec, w, b)
    x_arr = randn(gen, 6, 6, 4)
    x = m.Image.from_numpy(x_arr, device)
    mid = m.Image(device, m.ImageDescriptor(width=6, height=6, feature_channels=4))
    order = []
    release = threading.Event()
    returned = threading.Event()

    def first_done(buffer):
        order.append(1)
        release.wait(10)
        returned.set()

    cb1, cb2 = queue.command_buffer(), queue.command_buffer()
    cb1.add_completed_handler(first_done)
    cb2.add_completed_handler(lambda buffer: order.append(2))
    conv.encode(cb1, x, destination_image=mid)
    out = conv2.encode(cb2, mid)
    cb1.commit()
    cb2.commit()
    assert not returned.is_set(), "commit() returned before the first buffer's work was done"
    if device.name == "cpu":  # one worker thread runs committed work, handlers included, in order
        assert cb2.status != m.CommandBufferStatus.COMPLETED
    release.set()
    cb2.wait_until_completed()
    cb1.wait_until_completed()
    assert order == [1, 2]
    ref = conv_reference(spec, x_arr[None], w, b, offset=(0, 0), out_size=(6, 6))
    check(out.to_numpy(), ref["y"], "second buffer reads the first buffer's result")


def test_many_buffers_in_flight(device, queue):
    conv = _identity_conv(device)
    imgs = [m.Image.from_numpy(np.full((2, 2, 4), float(i), np.float32), device) for i in range(20)]
    outs, buffers = [], []
    for img in imgs:
        cb = queue.command_buffer()
        outs.append(conv.encode(cb, img))
        cb.commit()
        buffers.append(cb)
    for cb in reversed(buffers):
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED
    for i, out in enumerate(outs):
        assert np.all(out.to_numpy() == float(i))


def test_unavailable_device_says_why():
    """A device that cannot be made names the reason, not only the list of devices."""
    with pytest.raises(ValueError, match="devices are 'cpu' and 'metal'"):
        m.Device("gpu")
    if "metal" not in m.Device.available():
        with pytest.raises(ValueError, match="no Metal backend|Metal could not be set up"):
            m.Device("metal")
