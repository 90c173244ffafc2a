"""FLOAT16 image storage (docs/float16.md).

Oracles:
* NumPy's float32 -> float16 cast (round to nearest even, overflow to inf, NaN kept) for the
  conversions at the image boundary and on every device (the device conversion is reached through
  a kernel whose result is its input, Linear with a = 1, b = 0).
* For every kernel family, the same kernel on FLOAT32 images holding the same (half-valued) inputs:
  the float16 path converts its inputs exactly, runs the float32 kernel and rounds each output
  once, so its result must equal the float32 result rounded to half, bit for bit (apart from the
  outputs that are float32 by design: losses). The float32 kernels themselves are checked against
  PyTorch by the family tests, which also run on FLOAT16 images with MPSGRAD_TEST_IMAGE_FORMAT=float16.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import randn, rng, run

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32


def half(values):
    with np.errstate(over="ignore"):  # overflow to inf is the rule being checked
        return np.asarray(values, dtype=np.float32).astype(np.float16)


def special_values():
    """float32 values around every edge of the half range, plus random bit patterns."""
    edges = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.99, 65520.0, 1e6, -1e6, np.inf, -np.inf,
             6.103515625e-05, 6.0e-05, 5.960464477539063e-08, 2.98023223876953125e-08, 2.99e-08, 2.9e-08, 1e-10,
             -1e-10, 1e-45, 0.1, 1.0009765625, 1.00048828125, 1.00146484375, 2049.0, 2051.0, -3.0e-05]
    bits = rng("float16 bits").integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
    random = bits.view(np.float32)
    values = np.concatenate([np.array(edges, dtype=np.float32), random, np.array([np.nan, -np.nan], np.float32)])
    return values


def expect_same_halves(actual, expected):
    actual = np.asarray(actual, dtype=np.float16)
    expected = np.asarray(expected, dtype=np.float16)
    assert actual.shape == expected.shape
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan)
    # Equal half values (+0 and -0 compare equal: a kernel may compute x + 0 = +0 for x = -0).
    a, e = actual[~nan], expected[~nan]
    bad = np.flatnonzero(a != e)
    assert bad.size == 0, f"{bad.size} values differ, first: {actual[~nan][bad[:5]]} vs {expected[~nan][bad[:5]]}"


# ---- storage and the image boundary ------------------------------------------------------------


def test_descriptor_and_image_properties(device):
    d = m.ImageDescriptor(5, 3, 6, 2, F16)
    image = m.Image(device, d)
    assert image.feature_channel_format == F16
    assert image.precision == 11
    assert image.pixel_size == 2 * 8
    assert image.resource_size == 2 * 8 * 5 * 3 * 2
    f32 = m.Image(device, m.ImageDescriptor(5, 3, 6, 2, F32))
    assert f32.precision == 24 and f32.resource_size == 2 * image.resource_size
    with pytest.raises(ValueError, match="FLOAT32, FLOAT16, UNORM8 or UNORM16, got NONE"):
        m.Image(device, m.ImageDescriptor(5, 3, 6, 1, m.ImageFeatureChannelFormat.NONE))


def test_descriptor_serialization_keeps_float16():
    d = m.ImageDescriptor(7, 5, 12, 3, F16, usage=1)
    back = m.ImageDescriptor.from_bytes(d.to_bytes())
    assert back.channel_format == F16 and (back.width, back.height, back.feature_channels) == (7, 5, 12)


def test_write_read_round_trip_rounds_to_nearest_even(device):
    values = special_values()
    n = values.size // 4 * 4
    data = values[:n].reshape(1, n // 4, 1, 4)
    image = m.Image.from_numpy(data, device, channel_format=F16)
    out = image.to_numpy()
    assert out.dtype == np.float16
    expect_same_halves(out, half(data))
    # read_bytes in both layouts and a channel slice
    hwc = image.read_bytes(feature_channel_offset=0, number_of_feature_channels=3)
    assert hwc.dtype == np.float16
    expect_same_halves(hwc, half(data[0, :, :, :3]))
    chw = image.read_bytes(m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH)
    expect_same_halves(chw, half(data[0]).transpose(2, 0, 1))


def test_float16_arrays_in_and_out(device):
    x = randn(rng("f16 arrays"), 2, 3, 4, 5).astype(np.float16)
    image = m.Image.from_numpy(x, device)  # the dtype picks FLOAT16
    assert image.feature_channel_format == F16 and image.number_of_images == 2
    expect_same_halves(image.to_numpy(), x)
    image.write_bytes(x[1], image_index=0)  # float16 data
    expect_same_halves(image.to_numpy()[0], x[1])
    image.write_bytes(x[0].astype(np.float32) * 3, image_index=1)  # float32 data, rounded
    expect_same_halves(image.to_numpy()[1], half(x[0].astype(np.float32) * 3))
    batch = m.batch_from_numpy(x, device)
    assert all(i.feature_channel_format == F16 for i in batch)
    expect_same_halves(m.batch_to_numpy(batch), x)
    f32 = m.Image.from_numpy(x, device, channel_format=F32)
    assert f32.to_numpy().dtype == np.float32
    with pytest.raises(ValueError, match="channel_format"):
        m.Image.from_numpy(x, device, channel_format=m.ImageFeatureChannelFormat.NONE)


def test_numpy_view_and_dlpack(device):
    x = randn(rng("f16 dlpack"), 2, 3, 5, 6).astype(np.float16)
    image = m.Image.from_numpy(x, device)
    view = image._numpy_view()
    assert view.dtype == np.float16
    expect_same_halves(view, x)
    t = torch.from_dlpack(image)
    assert t.dtype == torch.float16
    expect_same_halves(t.numpy(), x)
    sub = image.sub_image_with_feature_channel_range(4, 2)
    expect_same_halves(sub._numpy_view(), x[..., 4:6])
    y = np.ascontiguousarray(randn(rng("f16 dlpack 2"), 1, 2, 3, 8).astype(np.float16))
    wrapped = m.Image.from_dlpack(y, device)
    assert wrapped.feature_channel_format == F16
    expect_same_halves(wrapped.to_numpy(), y)


# ---- the device conversion --------------------------------------------------------------------


def identity(device):
    kernel = m.CNNNeuronLinear(device, a=1.0, b=0.0)
    kernel.destination_image_allocator = m.ImageAllocator.persistent()  # results read after the wait
    return kernel


def test_device_conversion_matches_numpy(device, queue):
    values = special_values()
    values = values[np.isfinite(values) | np.isinf(values)]  # NaN: checked below
    n = values.size // 16 * 16
    data = values[:n].reshape(1, 2, n // 16, 8)
    source32 = m.Image.from_numpy(data, device, channel_format=F32)
    # float32 -> half on the device (the destination shadow's conversion back)
    out16 = m.Image(device, m.ImageDescriptor(n // 16, 2, 8, 1, F16))
    run(queue, lambda cb: identity(device).encode(cb, source32, destination_image=out16))
    expect_same_halves(out16.to_numpy(), half(data))
    # half -> float32 on the device (a source shadow), exact
    out32 = m.Image(device, m.ImageDescriptor(n // 16, 2, 8, 1, F32))
    run(queue, lambda cb: identity(device).encode(cb, out16, destination_image=out32))
    assert out32.to_numpy().dtype == np.float32
    expect_same_halves(out32.to_numpy(), half(data))
    nan = m.Image.from_numpy(np.full((1, 1, 1, 4), np.nan, np.float32), device, channel_format=F16)
    assert np.all(np.isnan(run(queue, lambda cb: identity(device).encode(cb, nan)).to_numpy()))


# ---- the allocator rule, mixed formats, offsets, read counts -----------------------------------


def test_returning_encodes_take_the_source_format(device, queue):
    x = randn(rng("alloc"), 1, 3, 4, 8)
    for fmt in (F16, F32):
        image = m.Image.from_numpy(x, device, channel_format=fmt)
        relu = m.CNNNeuronReLU(device)
        relu.destination_image_allocator = m.ImageAllocator.persistent()
        cb = queue.command_buffer()
        y, state = relu.encode(cb, image, destination_state_is_temporary=False)
        g = m.CNNNeuronGradient(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
        dx = g.encode(cb, y, image, state)
        cb.commit()
        cb.wait_until_completed()
        assert y.feature_channel_format == fmt and dx.feature_channel_format == fmt
        expect_same_halves(y.to_numpy(), half(np.maximum(half(x).astype(np.float32), 0)))


def test_mixed_formats_offsets_and_clip(device, queue):
    gen = rng("mixed")
    x = randn(gen, 1, 5, 6, 8)
    background = randn(gen, 1, 5, 6, 12)
    for source_format, destination_format in ((F16, F32), (F32, F16), (F16, F16)):
        source = m.Image.from_numpy(x, device, channel_format=source_format)
        destination = m.Image.from_numpy(background, device, channel_format=destination_format)
        kernel = m.CNNNeuronLinear(device, a=2.0, b=0.5)
        kernel.source_feature_channel_offset = 4
        kernel.destination_feature_channel_offset = 8
        kernel.clip_rect = m.Region((1, 2, 0), (3, 2, 1))
        run(queue, lambda cb: kernel.encode(cb, source, destination_image=destination))
        xs = half(x).astype(np.float32) if source_format == F16 else x
        expected = background.copy() if destination_format == F32 else half(background).astype(np.float32)
        expected[0, 2:4, 1:4, 8:12] = 2.0 * xs[0, 0:2, 0:3, 4:8] + 0.5
        if destination_format == F16:
            expect_same_halves(destination.to_numpy(), half(expected))
        else:
            np.testing.assert_array_equal(destination.to_numpy(), expected)


def test_in_place_float16(device, queue):
    x = randn(rng("in place"), 1, 3, 3, 4)
    image = m.Image.from_numpy(x, device, channel_format=F16)
    run(queue, lambda cb: m.CNNAdd(device).encode(cb, image, image, destination_image=image))
    expect_same_halves(image.to_numpy(), half(2 * half(x).astype(np.float32)))


def test_temporary_float16_read_counts(device, queue):
    x = randn(rng("temporary"), 1, 4, 4, 4)
    cb = queue.command_buffer()
    t = m.TemporaryImage(cb, m.ImageDescriptor(4, 4, 4, 1, F16))
    assert t.feature_channel_format == F16
    source = m.Image.from_numpy(x, device, channel_format=F16)
    identity(device).encode(cb, source, destination_image=t)
    t.read_count = 2
    returning = identity(device)
    returning.destination_image_allocator = m.ImageAllocator.persistent()
    first = returning.encode(cb, t)
    assert t.read_count == 1
    second = m.Image(device, m.ImageDescriptor(4, 4, 4, 1, F32))
    identity(device).encode(cb, t, destination_image=second)
    assert t.read_count == 0
    with pytest.raises(ValueError, match="read_count"):
        identity(device).encode(cb, t)
    cb.commit()
    cb.wait_until_completed()
    assert first.feature_channel_format == F16
    expect_same_halves(second.to_numpy(), half(x))


# ---- every family: the float16 result is the float32 result rounded to half ----------------------


def persistent(kernel):
    """The kernel with persistent results (readable after the gradient encodes)."""
    kernel.destination_image_allocator = m.ImageAllocator.persistent()
    return kernel


def _neuron(device, cb, make, x):
    y, state = persistent(m.CNNNeuronTanH(device, a=1.5, b=0.7)).encode(cb, make(x),
                                                                       destination_state_is_temporary=False)
    dx = persistent(m.CNNNeuronGradient(device, m.NNNeuronDescriptor(m.CNNNeuronType.TANH, a=1.5, b=0.7))).encode(
        cb, make(x[..., ::-1].copy()), make(x), state)
    return [y, dx]


def _arithmetic(device, cb, make, x):
    a, b = make(x), make(x[..., ::-1].copy() + 2.0)
    y, state = persistent(m.CNNMultiply(device)).encode(cb, a, b, destination_state_is_temporary=False)
    g = make(x * 0.5)
    da = persistent(m.CNNMultiplyGradient(device, False)).encode(cb, g, b, state)
    db = persistent(m.CNNMultiplyGradient(device, True)).encode(cb, g, a, state)
    return [y, da, db]


def _softmax(device, cb, make, x):
    y, state = persistent(m.CNNSoftMax(device)).encode(cb, make(x), destination_state_is_temporary=False)
    # The gradient's formula holds for any Y: a half-valued one keeps the two runs' inputs equal.
    return [y, persistent(m.CNNSoftMaxGradient(device)).encode(cb, make(x * 0.3), make(np.abs(x) * 0.1), state)]


def _pooling(device, cb, make, x):
    y, state = persistent(m.CNNPoolingMax(device, 2, 2, 2, 2)).encode(cb, make(x),
                                                                     destination_state_is_temporary=False)
    g = make(np.ascontiguousarray(x[:, ::2, ::2, :]))
    return [y, persistent(m.CNNPoolingMaxGradient(device, 2, 2, 2, 2)).encode(cb, g, make(x), state)]


def _convolution(device, cb, make, x):
    gen = rng("f16 conv weights")
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=8,
                                   output_feature_channels=4)
    ds = m.CNNConvolutionWeightsDataSource(d, randn(gen, 4, 3, 3, 8) * 0.3, randn(gen, 4))
    y, state = persistent(m.CNNConvolution(device, ds)).encode(cb, make(x), destination_state_is_temporary=False)
    g = make(randn(gen, *y.shape))
    return [y, persistent(m.CNNConvolutionGradient(device, ds)).encode(cb, g, make(x), state)]


def _upsampling(device, cb, make, x):
    y, state = persistent(m.CNNUpsamplingNearest(device, 2, 2)).encode(cb, make(x),
                                                                      destination_state_is_temporary=False)
    g = make(np.repeat(np.repeat(x, 2, axis=1), 2, axis=2) * 0.7)
    return [y, persistent(m.CNNUpsamplingNearestGradient(device, 2, 2)).encode(cb, g, make(x), state)]


def _normalization(device, cb, make, x):
    forward, gradient = m.CNNCrossChannelNormalization(device, 3), m.CNNCrossChannelNormalizationGradient(device, 3)
    y, state = persistent(forward).encode(cb, make(x), destination_state_is_temporary=False)
    return [y, persistent(gradient).encode(cb, make(x * 0.5), make(x), state)]


FAMILIES = {"neuron": _neuron, "arithmetic": _arithmetic, "softmax": _softmax, "pooling": _pooling,
            "convolution": _convolution, "upsampling": _upsampling, "normalization": _normalization}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_float16_is_float32_rounded(device, queue, family):
    x = randn(rng("family " + family), 1, 6, 8, 8)

    def outputs(fmt):
        def make(a):
            # Half-valued inputs in both runs, so that both kernels see the same numbers.
            return m.Image.from_numpy(np.ascontiguousarray(half(a).astype(np.float32)), device, channel_format=fmt)

        images = run(queue, lambda cb: FAMILIES[family](device, cb, make, x))
        for image in images:
            assert image.feature_channel_format == fmt
        return [image.to_numpy() for image in images]

    for out16, out32 in zip(outputs(F16), outputs(F32)):
        expect_same_halves(out16, half(out32))
