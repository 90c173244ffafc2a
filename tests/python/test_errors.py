"""Bad inputs raise ValueError / TypeError whose message names the parameter, and nothing is lost:
after each error the read counts of the images and states involved are unchanged, and the same
command buffer still encodes valid work that gives the right result.

Each test builds a Scene: a convolution and its gradient, a temporary source image (read by the
forward pass and by the gradient), a temporary incoming gradient, and a temporary gradient state
from the forward pass, all on one open command buffer. It then makes one mistake, checks the
exception, checks the read counts, and finishes the valid training step on the same buffer.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import ConvSpec, conv_reference, make_conv, persistent, randn, rng


class Scene:
    def __init__(self, device, queue, spec: ConvSpec = None, hw=(6, 7)):
        self.device = device
        self.spec = spec or ConvSpec(3, 3, 4, 8)
        H, W = hw
        gen = rng("error-scene")
        self.w, self.b = self.spec.random_parameters(gen)
        self.ds, self.conv, self.grad = make_conv(device, self.spec, self.w, self.b)
        self.x_arr = randn(gen, 1, H, W, self.spec.cin)
        self.e_arr = randn(gen, 1, H, W, self.spec.cout)
        self.cb = queue.command_buffer()
        self.x = m.TemporaryImage(self.cb, m.ImageDescriptor(width=W, height=H, feature_channels=self.spec.cin))
        self.x.write_bytes(self.x_arr[0])
        self.x.read_count = 2  # the forward pass and the gradient
        self.e = m.TemporaryImage(self.cb, m.ImageDescriptor(width=W, height=H, feature_channels=self.spec.cout))
        self.e.write_bytes(self.e_arr[0])
        self.y, self.state = self.conv.encode(self.cb, self.x, destination_state_is_temporary=True)
        self.state.read_count = 2  # the gradient, and reading the weight gradient afterwards
        self.H, self.W = H, W

    def counts(self):
        return (self.x.read_count, self.e.read_count, self.state.read_count)

    def finish(self, check):
        """Encode the valid gradient on the same buffer, run it, and check every result."""
        assert self.counts() == (1, 1, 2)
        dx = self.grad.encode(self.cb, self.e, self.x, self.state)
        assert self.counts() == (0, 0, 1)
        self.cb.commit()
        self.cb.wait_until_completed()
        assert self.cb.status == m.CommandBufferStatus.COMPLETED
        ref = conv_reference(self.spec, self.x_arr, self.w, self.b, offset=(0, 0), out_size=(self.W, self.H),
                             e_nhwc=self.e_arr)
        check(self.y.to_numpy(), ref["y"], "forward")
        check(dx.to_numpy(), ref["dx"], "data gradient")
        check(self.state.gradient_for_weights, ref["dw"], "weight gradient")
        check(self.state.gradient_for_biases, ref["db"], "bias gradient")


@pytest.fixture
def scene(device, queue):
    return Scene(device, queue)


def expect(scene, exc, *patterns):
    """pytest.raises(exc) whose message contains every pattern; read counts must not change."""

    class _Ctx:
        def __enter__(self):
            self.before = scene.counts()
            self.raises = pytest.raises(exc)
            self.info = self.raises.__enter__()
            return self.info

        def __exit__(self, *exc_info):
            suppressed = self.raises.__exit__(*exc_info)
            message = str(self.info.value)
            for p in patterns:
                assert p in message, f"message {message!r} does not name {p!r}"
            assert scene.counts() == self.before, "an error changed read counts"
            return suppressed

    return _Ctx()


# ---- wrong channel counts -------------------------------------------------------------------------


def test_source_with_wrong_channel_count(scene, check):
    for channels in (8, 3):
        bad = m.Image.from_numpy(np.ones((scene.H, scene.W, channels), np.float32), scene.device)
        with expect(scene, ValueError, "source_image", "4"):
            scene.conv.encode(scene.cb, bad)
    scene.finish(check)


def test_batch_with_one_bad_image_encodes_nothing(scene, check):
    good = m.TemporaryImage(scene.cb, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=4))
    bad = m.Image.from_numpy(np.ones((scene.H, scene.W, 8), np.float32), scene.device)
    with expect(scene, ValueError, "source_image"):
        scene.conv.encode_batch(scene.cb, [scene.x, good, bad])
    assert good.read_count == 1, "images before the bad one were not consumed"
    scene.finish(check)


def test_destination_with_too_few_channels(scene, check):
    small = m.Image(scene.device, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=4))
    with expect(scene, ValueError, "destination_image", "8"):
        scene.conv.encode(scene.cb, scene.x, destination_image=small)
    scene.finish(check)


def test_gradient_inputs_with_wrong_channel_counts(scene, check):
    g4 = m.Image.from_numpy(np.ones((scene.H, scene.W, 4), np.float32), scene.device)
    with expect(scene, ValueError, "source_gradient", "8"):
        scene.grad.encode(scene.cb, g4, scene.x, scene.state)
    # (A wider source image is read through the forward pass's channel slice, as recorded in the
    # state: secondary_source_feature_channel_max_count = input_feature_channels.)
    x3 = m.Image.from_numpy(np.ones((scene.H, scene.W, 3), np.float32), scene.device)
    with expect(scene, ValueError, "source_image", "4"):
        scene.grad.encode(scene.cb, scene.e, x3, scene.state)
    scene.finish(check)


# ---- gradient states from another kernel -----------------------------------------------------------


def test_gradient_state_of_a_differently_shaped_convolution(scene, check):
    other_spec = ConvSpec(5, 5, 4, 8)
    w, b = other_spec.random_parameters(rng(1))
    _, other, _ = make_conv(scene.device, other_spec, w, b)
    x = m.Image.from_numpy(np.ones((scene.H, scene.W, 4), np.float32), scene.device)
    _, foreign = other.encode(scene.cb, x, destination_state_is_temporary=False)
    with expect(scene, ValueError, "gradient_state"):
        scene.grad.encode(scene.cb, scene.e, scene.x, foreign)
    with expect(scene, ValueError, "gradient_state"):
        scene.grad.destination_image_descriptor([scene.e, scene.x], [foreign])
    scene.finish(check)


def test_state_that_is_not_a_convolution_gradient_state(scene, check):
    plain = m.State(scene.device, 64)
    temp = m.State.temporary(scene.cb, [64])
    for bad in (plain, temp):
        with expect(scene, TypeError, "gradient_state"):
            scene.grad.encode(scene.cb, scene.e, scene.x, bad)
    assert temp.read_count == 1
    with expect(scene, TypeError, "gradient_state"):
        scene.grad.encode(scene.cb, scene.e, scene.x, "a state")
    with expect(scene, TypeError, "gradient_state"):
        scene.grad.encode(scene.cb, scene.e, scene.x, None)
    with expect(scene, TypeError, "destination_state"):
        scene.conv.encode(scene.cb, scene.x, plain, scene.y)
    scene.finish(check)


def test_state_never_encoded_by_the_forward_pass(scene, check):
    fresh = scene.conv.result_state(scene.x)
    with expect(scene, ValueError, "gradient_state"):
        scene.grad.encode(scene.cb, scene.e, scene.x, fresh)
    scene.finish(check)


# ---- sizes that do not match the state ---------------------------------------------------------------


def test_source_image_size_does_not_match_state(scene, check):
    for h, w in ((scene.H + 1, scene.W), (scene.H, scene.W - 1)):
        x = m.Image.from_numpy(np.ones((h, w, 4), np.float32), scene.device)
        with expect(scene, ValueError, "source_image", f"{scene.W}x{scene.H}"):
            scene.grad.encode(scene.cb, scene.e, x, scene.state)
    scene.finish(check)


def test_source_gradient_size_does_not_match_state(scene, check):
    for h, w in ((scene.H - 1, scene.W), (scene.H, scene.W + 2)):
        g = m.Image.from_numpy(np.ones((h, w, 8), np.float32), scene.device)
        with expect(scene, ValueError, "source_gradient", f"{scene.W}x{scene.H}"):
            scene.grad.encode(scene.cb, g, scene.x, scene.state)
    # in a batch, too
    g = m.Image.from_numpy(np.ones((scene.H + 1, scene.W, 8), np.float32), scene.device)
    with expect(scene, ValueError, "source_gradient"):
        scene.grad.encode_batch(scene.cb, [scene.e, g], [scene.x, scene.x], [scene.state, scene.state])
    scene.finish(check)


# ---- feature-channel offsets that are not multiples of 4 ------------------------------------------------


@pytest.mark.parametrize("prop", ["source_feature_channel_offset", "destination_feature_channel_offset"])
def test_forward_feature_channel_offset_not_multiple_of_4(scene, check, prop):
    wide = m.Image.from_numpy(np.ones((scene.H, scene.W, 16), np.float32), scene.device)
    dst = m.Image(scene.device, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=16))
    scene.conv.source_feature_channel_max_count = 4
    setattr(scene.conv, prop, 2)
    with expect(scene, ValueError, prop, "multiple of 4"):
        scene.conv.encode(scene.cb, wide, destination_image=dst)
    with expect(scene, ValueError, prop, "multiple of 4"):
        scene.conv.encode(scene.cb, scene.x, destination_image=dst)  # the temporary source is not consumed
    setattr(scene.conv, prop, 0)
    scene.finish(check)


@pytest.mark.parametrize("prop", ["primary_source_feature_channel_offset", "secondary_source_feature_channel_offset",
                                  "destination_feature_channel_offset"])
def test_gradient_feature_channel_offset_not_multiple_of_4(scene, check, prop):
    desc = scene.grad.destination_image_descriptor([scene.e, scene.x], [scene.state])
    dst = m.Image(scene.device, desc)
    setattr(scene.grad, prop, 1)
    with expect(scene, ValueError, prop, "multiple of 4"):
        scene.grad.encode(scene.cb, scene.e, scene.x, scene.state, dst)
    scene.finish(check)  # the returning form re-derives the offsets from the state


def test_read_write_feature_channel_offset_not_multiple_of_4(device):
    img = m.Image.from_numpy(np.ones((2, 2, 12), np.float32), device)
    with pytest.raises(ValueError, match="feature_channel_offset"):
        img.read_bytes(feature_channel_offset=2)
    with pytest.raises(ValueError, match="feature_channel_offset"):
        img.write_bytes(np.zeros((2, 2, 4), np.float32), feature_channel_offset=6, number_of_feature_channels=4)
    with pytest.raises(ValueError, match="number_of_feature_channels"):
        img.read_bytes(feature_channel_offset=8, number_of_feature_channels=8)
    np.testing.assert_array_equal(img.to_numpy(), 1.0)


# ---- groups ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cin,cout,groups", [(8, 8, 3), (12, 8, 3), (8, 12, 2), (8, 4, 2)])
def test_groups_that_do_not_divide_channels(device, cin, cout, groups):
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=cin,
                                   output_feature_channels=cout)
    d.groups = groups
    w = np.zeros((cout, 3, 3, max(1, cin // groups)), np.float32)
    with pytest.raises(ValueError, match="groups"):
        d.validate()
    with pytest.raises(ValueError, match="groups"):
        m.CNNConvolutionWeightsDataSource(d, w)


def test_depthwise_descriptor_constraints(device):
    d = m.CNNDepthWiseConvolutionDescriptor(3, 3, 8, 16)  # channel multiplier 2
    with pytest.raises(ValueError, match="output_feature_channels"):
        d.validate()
    d = m.CNNDepthWiseConvolutionDescriptor(3, 3, 8, 8)
    d.groups = 2
    with pytest.raises(ValueError, match="groups"):
        d.validate()


@pytest.mark.parametrize("prop", ["kernel_width", "input_feature_channels", "stride_in_pixels_y", "dilation_rate_x"])
def test_descriptor_non_positive_values(prop):
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=4,
                                   output_feature_channels=4)
    setattr(d, prop, 0)
    with pytest.raises(ValueError, match=prop):
        d.validate()


# ---- read counts already at zero ------------------------------------------------------------------------


def test_gradient_state_whose_read_count_is_zero(scene, check):
    x = m.Image.from_numpy(scene.x_arr, scene.device)
    _, consumed = scene.conv.encode(scene.cb, x, destination_state_is_temporary=True)
    scene.grad.encode(scene.cb, m.Image.from_numpy(scene.e_arr, scene.device), x, consumed)
    assert consumed.read_count == 0
    with expect(scene, ValueError, "gradient_state", "read_count"):
        scene.grad.encode(scene.cb, scene.e, scene.x, consumed)
    with expect(scene, ValueError, "gradient_state", "read_count"):
        scene.grad.encode_batch(scene.cb, [scene.e], [scene.x], [consumed])
    with expect(scene, ValueError, "read_count"):
        consumed.read_count = 1
    scene.finish(check)


def test_image_whose_read_count_is_zero(scene, check):
    t = m.TemporaryImage(scene.cb, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=4))
    t.read_count = 0
    with expect(scene, ValueError, "source_image", "read_count"):
        scene.conv.encode(scene.cb, t)
    with expect(scene, ValueError, "source_image", "read_count"):
        scene.grad.encode(scene.cb, scene.e, t, scene.state)
    scene.finish(check)


# ---- write_bytes of the wrong shape ------------------------------------------------------------------------


def test_write_bytes_wrong_shape(device):
    img = m.Image.from_numpy(np.zeros((3, 4, 8), np.float32), device)
    for bad in (np.ones((4, 3, 8), np.float32), np.ones((3, 4, 4), np.float32), np.ones((3, 4, 8, 1), np.float32),
                np.ones(96, np.float32)):
        with pytest.raises(ValueError, match="data"):
            img.write_bytes(bad)
    with pytest.raises(ValueError, match="data"):  # CHW layout expects (8, 3, 4)
        img.write_bytes(np.ones((3, 4, 8), np.float32), m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH)
    with pytest.raises(ValueError, match="data"):  # channel range of 4 expects (3, 4, 4)
        img.write_bytes(np.ones((3, 4, 8), np.float32), feature_channel_offset=4)
    for raw in (b"\x00" * 10, bytes(3 * 4 * 8 * 4 - 4), bytearray(3 * 4 * 8 * 4 + 4)):
        with pytest.raises(ValueError, match="data"):
            img.write_bytes(raw)
    with pytest.raises(TypeError, match="data"):
        img.write_bytes("not an array")
    np.testing.assert_array_equal(img.to_numpy(), 0.0)  # nothing was written
    with pytest.raises(ValueError, match="image_index"):
        img.write_bytes(np.ones((3, 4, 8), np.float32), image_index=1)


# ---- data sources ----------------------------------------------------------------------------------------------


class GoodSource:
    def __init__(self, spec, w, b):
        self.d, self.w, self.b = spec.descriptor(), w, b

    def descriptor(self):
        return self.d

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def load(self):
        return True

    def purge(self):
        pass


@pytest.mark.parametrize("missing", ["descriptor", "weights", "bias_terms", "load", "purge"])
def test_data_source_missing_method(device, missing):
    spec = ConvSpec(3, 3, 4, 4)
    w, b = spec.random_parameters(rng(2))
    attrs = {k: getattr(GoodSource, k) for k in ("__init__", "descriptor", "weights", "bias_terms", "load", "purge")
             if k != missing}
    Broken = type("Broken", (), attrs)
    src = Broken(spec, w, b)
    with pytest.raises(TypeError, match=missing):
        m.CNNConvolution(device, src)
    with pytest.raises(TypeError, match="weights"):
        m.CNNConvolutionGradient(device, src)


def test_data_source_wrong_weight_or_bias_count(device):
    spec = ConvSpec(3, 3, 4, 4)
    w, b = spec.random_parameters(rng(3))
    with pytest.raises(ValueError, match="weights"):
        m.CNNConvolution(device, GoodSource(spec, w[:, :, :, :2], b))
    with pytest.raises(ValueError, match="bias_terms"):
        m.CNNConvolution(device, GoodSource(spec, w, b[:3]))
    with pytest.raises(TypeError, match="weights"):
        m.CNNConvolution(device, GoodSource(spec, "nope", b))

    class NotLoading(GoodSource):
        def load(self):
            return False

    with pytest.raises(ValueError, match="load"):
        m.CNNConvolution(device, NotLoading(spec, w, b))

    class BadDescriptor(GoodSource):
        def descriptor(self):
            return "descriptor"

    with pytest.raises(TypeError, match="descriptor"):
        m.CNNConvolution(device, BadDescriptor(spec, w, b))
    with pytest.raises(TypeError, match="weights"):
        m.CNNConvolution(device, None)
    # the ready-made data source checks shapes up front
    with pytest.raises(ValueError, match="weights"):
        m.CNNConvolutionWeightsDataSource(spec.descriptor(), w.reshape(4, 9, 4))
    with pytest.raises(ValueError, match="biases"):
        m.CNNConvolutionWeightsDataSource(spec.descriptor(), w, np.zeros(5, np.float32))


def test_python_data_source_works(device, queue, check):
    spec = ConvSpec(3, 3, 4, 4)
    gen = rng(4)
    w, b = spec.random_parameters(gen)
    src = GoodSource(spec, w, b)
    conv = persistent(m.CNNConvolution(device, src))
    assert conv.data_source is src
    x_arr = randn(gen, 1, 5, 5, 4)
    cb = queue.command_buffer()
    y = conv.encode(cb, m.Image.from_numpy(x_arr, device))
    cb.commit()
    cb.wait_until_completed()
    check(y.to_numpy(), conv_reference(spec, x_arr, w, b, out_size=(5, 5))["y"], "forward")


# ---- other devices, None, wrong types ---------------------------------------------------------------------------


def test_images_of_another_device(scene, check):
    others = [name for name in m.Device.available() if name != scene.device.name]
    if not others:
        pytest.skip("this build has one device")
    other = m.Device(others[0])
    x = m.Image.from_numpy(scene.x_arr, other)
    with expect(scene, ValueError, "source_image", "device"):
        scene.conv.encode(scene.cb, x)
    e = m.Image.from_numpy(scene.e_arr, other)
    with expect(scene, ValueError, "source_gradient", "device"):
        scene.grad.encode(scene.cb, e, scene.x, scene.state)
    other_cb = m.CommandQueue(other).command_buffer()
    with expect(scene, ValueError, "command_buffer"):
        scene.conv.encode(other_cb, scene.x)
    scene.finish(check)


def test_none_where_an_image_is_expected(scene, check):
    with expect(scene, TypeError, "source_image"):
        scene.conv.encode(scene.cb, None)
    with expect(scene, TypeError, "source_images"):
        scene.conv.encode_batch(scene.cb, [scene.x, None])
    with expect(scene, TypeError, "destination_image"):
        scene.conv.encode(scene.cb, scene.x, None, 42)
    with expect(scene, TypeError, "source_gradient"):
        scene.grad.encode(scene.cb, None, scene.x, scene.state)
    with expect(scene, TypeError, "source_image"):
        scene.grad.encode(scene.cb, scene.e, None, scene.state)
    with expect(scene, TypeError, "source_gradients"):
        scene.grad.encode_batch(scene.cb, scene.e, [scene.x], [scene.state])
    scene.finish(check)


def test_batch_length_mismatch(scene, check):
    with expect(scene, ValueError, "source_images"):
        scene.grad.encode_batch(scene.cb, [scene.e, scene.e], [scene.x], [scene.state, scene.state])
    with expect(scene, ValueError, "gradient_states"):
        scene.grad.encode_batch(scene.cb, [scene.e], [scene.x], [scene.state, scene.state])
    scene.finish(check)


def test_clamp_edge_mode_with_data_gradient(scene, check):
    x = m.Image.from_numpy(scene.x_arr, scene.device)
    scene.conv.edge_mode = m.ImageEdgeMode.CLAMP
    _, clamped = scene.conv.encode(scene.cb, x, destination_state_is_temporary=False)
    scene.conv.edge_mode = m.ImageEdgeMode.ZERO
    with expect(scene, ValueError, "edge_mode"):
        scene.grad.encode(scene.cb, scene.e, scene.x, clamped)
    scene.finish(check)


def test_unsupported_edge_mode(scene, check):
    scene.conv.edge_mode = m.ImageEdgeMode.MIRROR
    x = m.Image.from_numpy(scene.x_arr, scene.device)
    with expect(scene, ValueError, "edge_mode"):
        scene.conv.encode(scene.cb, x)
    scene.conv.edge_mode = m.ImageEdgeMode.ZERO
    scene.finish(check)


def test_padding_reserved_size_bits(scene, check):
    with pytest.raises(ValueError, match="padding"):
        m.NNDefaultPadding(48)
    scene.finish(check)


def test_reload_with_a_state_of_another_shape(scene, check):
    other = ConvSpec(5, 5, 4, 8)
    ws = m.CNNConvolutionWeightsAndBiasesState(scene.device, other.descriptor())
    with expect(scene, ValueError, "state"):
        scene.conv.reload_weights_and_biases_with_command_buffer(scene.cb, ws)
    with expect(scene, ValueError, "state"):
        scene.grad.reload_weights_and_biases_with_command_buffer(scene.cb, ws)
    scene.finish(check)


# ---- batches the gradient cannot honour (would otherwise give silently partial gradients) ----------


def test_gradient_of_multi_image_images_raises(scene, check):
    """Legacy batching (one Image with number_of_images > 1, clip_rect depth 3) runs the forward pass
    over every image, but the gradient kernel handles one image per Image: it must refuse such
    images (as the returning forward encode does) instead of silently using image 0 only."""
    n = 3
    gen = rng("multi-image")
    x = m.Image.from_numpy(randn(gen, n, scene.H, scene.W, 4), scene.device)
    e = m.Image.from_numpy(randn(gen, n, scene.H, scene.W, 8), scene.device)
    y = m.Image(scene.device, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=8,
                                                number_of_images=n))
    scene.conv.destination_image_descriptor([x])
    scene.conv.clip_rect = ((0, 0, 0), (scene.W, scene.H, n))
    state = scene.conv.result_state(x)
    scene.conv.encode(scene.cb, x, state, y)
    scene.conv.clip_rect = m.RECT_NO_CLIP
    with expect(scene, ValueError, "number_of_images"):
        scene.grad.encode(scene.cb, e, x, state)
    dx = m.Image(scene.device, m.ImageDescriptor(width=scene.W, height=scene.H, feature_channels=4,
                                                 number_of_images=n))
    scene.grad.destination_image_descriptor([e, x], [state])
    with expect(scene, ValueError, "number_of_images"):
        scene.grad.encode(scene.cb, e, x, state, dx)
    # the supported way: the images as a batch of single images
    dxs = scene.grad.encode_batch(scene.cb, e.batch_representation(), x.batch_representation(), [state] * n)
    assert len(dxs) == n
    scene.finish(check)


def test_weight_gradient_of_part_of_a_batch_raises(scene, check):
    """A batch forward shares one state; a gradient encode covering only some of its images cannot
    give the batch's summed weight gradient (each encode restarts the sum), so it must raise rather
    than silently return one image's gradient. The data gradient alone is per image and allowed."""
    n = 3
    gen = rng("part-of-batch")
    xs = m.batch_from_numpy(randn(gen, n, scene.H, scene.W, 4), scene.device)
    es = m.batch_from_numpy(randn(gen, n, scene.H, scene.W, 8), scene.device)
    _, states = scene.conv.encode_batch(scene.cb, xs, destination_state_is_temporary=False)
    with expect(scene, ValueError, "gradient_state"):
        scene.grad.encode(scene.cb, es[0], xs[0], states[0])
    with expect(scene, ValueError, "gradient_state"):
        scene.grad.encode_batch(scene.cb, es[:2], xs[:2], states[:2])
    scene.grad.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_DATA
    scene.grad.encode(scene.cb, es[0], xs[0], states[0])
    scene.grad.gradient_option = m.CNNConvolutionGradientOption.ALL
    scene.grad.encode_batch(scene.cb, es, xs, states)
    scene.finish(check)
