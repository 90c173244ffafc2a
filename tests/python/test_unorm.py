"""UNORM8 and UNORM16 image storage (docs/storage_formats.md).

Oracles:
* NumPy for the conversion rules: a stored code x reads as float32(x) / 255 (65535), correctly
  rounded; a float32 value v is stored as rint(clip(v, 0, 1) * 255) computed in float32 (ties to
  even), NaN as 0. Checked at the image boundary and on every device (the device conversion is
  reached through kernels whose result is their input).
* For every kernel family, the same kernel on FLOAT32 images holding the normalized values: the
  UNORM path converts its inputs exactly, runs the float32 kernel and stores each output once with
  the rule above, so its codes must equal the float32 result stored by NumPy's rule, exactly.
* PyTorch (float64) for a convolution, a neuron, max pooling, softmax, batch normalization and a
  convolution's data gradient on UNORM8 and UNORM16 images: within one code of the stored oracle.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import rng, run
from test_float16 import FAMILIES, persistent

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32
U8 = m.ImageFeatureChannelFormat.UNORM8
U16 = m.ImageFeatureChannelFormat.UNORM16
UNORMS = [U8, U16]
MAXIMUM = {U8: 255, U16: 65535}
DTYPE = {U8: np.uint8, U16: np.uint16}
IDS = {U8: "unorm8", U16: "unorm16"}


def to_codes(values, fmt):
    """NumPy's version of the storage rule: clamp to [0, 1], times 2^N - 1 in float32, round to
    nearest even; NaN -> 0."""
    v = np.asarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        scaled = np.clip(v, np.float32(0), np.float32(1)) * np.float32(MAXIMUM[fmt])
    scaled = np.where(np.isnan(v), np.float32(0), scaled)
    return np.rint(scaled).astype(DTYPE[fmt])


def from_codes(codes, fmt):
    return np.asarray(codes).astype(np.float32) / np.float32(MAXIMUM[fmt])


def halfway_values(fmt):
    """float32 values v whose float32 product v * (2^N - 1) is exactly k + 1/2."""
    maximum = MAXIMUM[fmt]
    k = np.arange(0, min(maximum, 4000), dtype=np.float64)
    v = ((k + 0.5) / maximum).astype(np.float32)
    exact = v * np.float32(maximum) == (k + 0.5).astype(np.float32)
    return v[exact]


def special_values(fmt):
    edges = np.array([-1.0, -0.0, 0.0, 1e-45, 1e-10, 0.25, 0.5, 0.75, 1.0, 1.0000001, 2.0, 1e30, -1e30,
                      np.inf, -np.inf, np.nan, -np.nan], np.float32)
    uniform = rng("unorm values " + IDS[fmt]).uniform(-0.2, 1.2, 2000).astype(np.float32)
    return np.concatenate([edges, halfway_values(fmt), uniform])


def test_halfway_cases_exist_and_round_to_even():
    for fmt in UNORMS:
        v = halfway_values(fmt)
        assert v.size > 20
        codes = to_codes(v, fmt)
        assert np.all(codes % 2 == 0)  # ties to even: k + 1/2 goes to the even one of k, k + 1


# ---- storage and the image boundary ------------------------------------------------------------


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
def test_descriptor_and_image_properties(device, fmt):
    image = m.Image(device, m.ImageDescriptor(5, 3, 6, 2, fmt))
    element = 1 if fmt == U8 else 2
    assert image.feature_channel_format == fmt
    assert image.precision == (8 if fmt == U8 else 16)
    assert image.pixel_size == element * 8
    assert image.resource_size == element * 8 * 5 * 3 * 2
    assert np.all(image.to_numpy() == 0) and image.to_numpy().dtype == DTYPE[fmt]
    back = m.ImageDescriptor.from_bytes(m.ImageDescriptor(7, 5, 12, 3, fmt, usage=1).to_bytes())
    assert back.channel_format == fmt and (back.width, back.height, back.feature_channels) == (7, 5, 12)


def test_none_format_is_named(device):
    with pytest.raises(ValueError, match="image_descriptor.*got NONE"):
        m.Image(device, m.ImageDescriptor(5, 3, 6, 1, m.ImageFeatureChannelFormat.NONE))
    with pytest.raises(ValueError, match="channel_format.*got NONE"):
        m.Image.from_numpy(np.zeros((2, 2, 4), np.float32), device, channel_format=m.ImageFeatureChannelFormat.NONE)


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
def test_codes_in_and_out_exactly(device, fmt):
    codes = rng("codes " + IDS[fmt]).integers(0, MAXIMUM[fmt] + 1, size=(2, 3, 5, 6)).astype(DTYPE[fmt])
    image = m.Image.from_numpy(codes, device)  # the dtype picks the format
    assert image.feature_channel_format == fmt and image.number_of_images == 2
    out = image.to_numpy()
    assert out.dtype == DTYPE[fmt] and np.array_equal(out, codes)
    assert np.array_equal(np.asarray(image), codes)
    hwc = image.read_bytes(image_index=1, feature_channel_offset=4, number_of_feature_channels=2)
    assert hwc.dtype == DTYPE[fmt] and np.array_equal(hwc, codes[1, :, :, 4:6])
    chw = image.read_bytes(m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH)
    assert np.array_equal(chw, codes[0].transpose(2, 0, 1))
    image.write_bytes(codes[1], image_index=0)
    assert np.array_equal(image.to_numpy()[0], codes[1])
    image.write_bytes(codes[0].transpose(2, 0, 1).copy(), m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH, image_index=1)
    assert np.array_equal(image.to_numpy()[1], codes[0])
    batch = m.batch_from_numpy(codes, device)
    assert all(i.feature_channel_format == fmt for i in batch)
    assert np.array_equal(m.batch_to_numpy(batch), codes)


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
def test_float_writes_follow_the_rule(device, fmt):
    values = special_values(fmt)
    n = values.size // 8 * 8
    data = values[:n].reshape(1, n // 8, 2, 4)
    data.setflags(write=False)  # kept exact in conftest's float16 pass (it rounds writable float32 arrays)
    image = m.Image.from_numpy(data, device, channel_format=fmt)
    assert np.array_equal(image.to_numpy(), to_codes(data, fmt))
    # float64 and float16 arrays are float values too; raw bytes are float32
    image.write_bytes(data[0].astype(np.float64))
    assert np.array_equal(image.to_numpy(), to_codes(data, fmt))
    image.write_bytes(np.zeros_like(data[0]).tobytes())
    assert np.all(image.to_numpy() == 0)
    image.write_bytes(data[0].tobytes())
    assert np.array_equal(image.to_numpy(), to_codes(data, fmt))


def test_dtype_mismatches_raise(device):
    f32 = m.Image(device, m.ImageDescriptor(3, 2, 4, 1, F32))
    u8 = m.Image(device, m.ImageDescriptor(3, 2, 4, 1, U8))
    u16 = m.Image(device, m.ImageDescriptor(3, 2, 4, 1, U16))
    codes = np.full((2, 3, 4), 200, np.uint8)
    with pytest.raises(TypeError, match=r"data: a uint8 array cannot be written into a FLOAT32 image"):
        f32.write_bytes(codes)
    assert np.all(f32.to_numpy() == 0)
    with pytest.raises(TypeError, match=r"data: a uint16 array cannot be written into a FLOAT16 image"):
        m.Image(device, m.ImageDescriptor(3, 2, 4, 1, F16)).write_bytes(codes.astype(np.uint16))
    with pytest.raises(TypeError, match=r"data: a uint16 array cannot be written into a UNORM8 image.*uint8"):
        u8.write_bytes(codes.astype(np.uint16))
    with pytest.raises(TypeError, match=r"data: a uint8 array cannot be written into a UNORM16 image.*uint16"):
        u16.write_bytes(codes)
    with pytest.raises(TypeError, match=r"data: a int64 array cannot be written into a UNORM8 image"):
        u8.write_bytes(codes.astype(np.int64))
    with pytest.raises(TypeError, match=r"array: a uint8 array cannot be written into a FLOAT32 image"):
        m.Image.from_numpy(codes, device, channel_format=F32)
    with pytest.raises(TypeError, match=r"array: a uint8 array cannot be written into a FLOAT16 image"):
        m.batch_from_numpy(codes[None], device, channel_format=F16)
    with pytest.raises(ValueError, match=r"data: expected shape"):
        u8.write_bytes(codes[:, :, :3])
    with pytest.raises(TypeError, match="formats FLOAT32, UNORM8"):
        m.batch_to_numpy([u8, f32])  # codes and values do not mix
    # Integer values that are not unorm codes stay numbers in float storage (documented).
    f32.write_bytes(np.arange(24, dtype=np.int64).reshape(2, 3, 4))
    assert np.array_equal(f32.to_numpy()[0], np.arange(24, dtype=np.float32).reshape(2, 3, 4))


def test_numpy_view_and_dlpack(device):
    codes = rng("unorm dlpack").integers(0, 256, size=(2, 3, 5, 6)).astype(np.uint8)
    image = m.Image.from_numpy(codes, device)
    view = image._numpy_view()
    assert view.dtype == np.uint8 and np.array_equal(view, codes)
    assert torch.from_dlpack(image).dtype == torch.uint8
    sub = image.sub_image_with_feature_channel_range(4, 2)
    assert np.array_equal(sub._numpy_view(), codes[..., 4:6])
    assert np.array_equal(sub.to_numpy(), codes[..., 4:6])
    wide = np.ascontiguousarray(rng("unorm dlpack 16").integers(0, 65536, size=(1, 2, 3, 8)).astype(np.uint16))
    wrapped = m.Image.from_dlpack(wide, device)
    assert wrapped.feature_channel_format == U16 and np.array_equal(wrapped.to_numpy(), wide)
    if device.name == "cpu":  # zero copy: the image aliases the array
        wide[0, 0, 0, 0] = 7
        assert wrapped.to_numpy()[0, 0, 0, 0] == 7


def test_graph_format_errors_name_the_format(device):
    x = m.NNImageNode()
    graph = m.NNGraph(device, m.CNNNeuronReLUNode(x).result_image)
    graph.format = U16
    image = m.Image.from_numpy(np.zeros((1, 2, 2, 4), np.float32), device)
    with pytest.raises(ValueError, match="got UNORM16") as error:
        run(m.CommandQueue(device), lambda cb: graph.encode(cb, [image]))
    assert "code" not in str(error.value)


def test_graph_reads_unorm_source_images(device, queue):
    """A graph's source image may be UNORM (its own intermediates are FLOAT16 / FLOAT32): a sigmoid
    -> max pooling chain with FLOAT32 intermediates equals the float32 chain on x / 255."""
    codes = rng("unorm graph").integers(0, 256, size=(1, 4, 6, 8)).astype(np.uint8)
    x = m.NNImageNode()
    pooled = m.CNNPoolingMaxNode(m.CNNNeuronSigmoidNode(x).result_image, 2)
    graph = m.NNGraph(device, pooled.result_image)
    graph.format = F32
    normalized = from_codes(codes, U8)
    normalized.setflags(write=False)  # kept exact in conftest's float16 pass
    out = run(queue, lambda cb: graph.encode(cb, [m.Image.from_numpy(codes, device)]))
    reference = run(queue, lambda cb: graph.encode(cb, [m.Image.from_numpy(normalized, device, channel_format=F32)]))
    assert out.feature_channel_format == F32
    assert np.array_equal(out.to_numpy(), reference.to_numpy())


# ---- the device conversion --------------------------------------------------------------------


def identity(device):
    # CNNNeuronLinear reads FLOAT16 natively on the CPU: UNORM images must still get their shadows.
    return m.CNNNeuronLinear(device, a=1.0, b=0.0)


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
def test_device_conversion_matches_numpy(device, queue, fmt):
    values = special_values(fmt)
    n = values.size // 16 * 16
    data = values[:n].reshape(1, 2, n // 16, 8)
    data.setflags(write=False)  # kept exact in conftest's float16 pass
    source32 = m.Image.from_numpy(data, device, channel_format=F32)
    stored = m.Image(device, m.ImageDescriptor(n // 16, 2, 8, 1, fmt))
    run(queue, lambda cb: identity(device).encode(cb, source32, destination_image=stored))  # float -> unorm
    assert np.array_equal(stored.to_numpy(), to_codes(data, fmt))
    # unorm -> float over every code (UNORM16: all 65536 codes)
    every = np.arange(MAXIMUM[fmt] + 1, dtype=DTYPE[fmt]).reshape(1, -1, 64, 4)
    source = m.Image.from_numpy(every, device)
    out32 = run(queue, lambda cb: persistent(identity(device)).encode(cb, source))
    assert out32.feature_channel_format == fmt  # the allocator rule: the source's format
    assert np.array_equal(out32.to_numpy(), every)
    floats = m.Image(device, m.ImageDescriptor(64, every.shape[1], 4, 1, F32))
    run(queue, lambda cb: identity(device).encode(cb, source, destination_image=floats))
    assert np.array_equal(floats.to_numpy().view(np.uint32), from_codes(every, fmt).view(np.uint32))


def test_mixed_formats_offsets_clip_and_in_place(device, queue):
    gen = rng("unorm mixed")
    x = gen.integers(0, 256, size=(1, 5, 6, 8)).astype(np.uint8)
    background = gen.uniform(0, 1, size=(1, 5, 6, 12)).astype(np.float32)
    for destination_format in (F32, F16, U8, U16):
        source = m.Image.from_numpy(x, device)
        destination = m.Image.from_numpy(background, device, channel_format=destination_format)
        before = destination.to_numpy().copy()
        kernel = m.CNNNeuronLinear(device, a=0.5, b=0.25)
        kernel.source_feature_channel_offset = 4
        kernel.destination_feature_channel_offset = 8
        kernel.clip_rect = m.Region((1, 2, 0), (3, 2, 1))
        run(queue, lambda cb: kernel.encode(cb, source, destination_image=destination))
        result = from_codes(x, U8)[0, 0:2, 0:3, 4:8] * np.float32(0.5) + np.float32(0.25)
        expected = before.copy()
        if destination_format in UNORMS:
            expected[0, 2:4, 1:4, 8:12] = to_codes(result, destination_format)
        else:
            expected[0, 2:4, 1:4, 8:12] = result.astype(destination.to_numpy().dtype)
        assert np.array_equal(destination.to_numpy(), expected), destination_format
    # CNNAdd (native half on the CPU) with a FLOAT16 secondary, in place over the UNORM8 primary
    a = m.Image.from_numpy(x, device)
    b = m.Image.from_numpy(background[..., :8], device, channel_format=F16)
    run(queue, lambda cb: m.CNNAdd(device).encode(cb, a, b, destination_image=a))
    expected = to_codes(from_codes(x, U8) + background[..., :8].astype(np.float16).astype(np.float32), U8)
    assert np.array_equal(a.to_numpy(), expected)


def test_temporary_unorm_batches_and_read_counts(device, queue):
    codes = rng("unorm temporary").integers(0, 65536, size=(3, 4, 4, 4)).astype(np.uint16)
    sources = m.batch_from_numpy(codes, device)
    cb = queue.command_buffer()
    temporaries = [m.TemporaryImage(cb, m.ImageDescriptor(4, 4, 4, 1, U16)) for _ in range(3)]
    identity(device).encode_batch(cb, sources, destination_images=temporaries)
    outputs = [m.Image(device, m.ImageDescriptor(4, 4, 4, 1, U16)) for _ in range(3)]
    identity(device).encode_batch(cb, temporaries, destination_images=outputs)
    assert all(t.read_count == 0 for t in temporaries)
    cb.commit()
    cb.wait_until_completed()
    assert np.array_equal(m.batch_to_numpy(outputs), codes)


# ---- every family: the UNORM result is the float32 result stored by the rule -------------------


def _batch_normalization(device, cb, make, x):
    c = x.shape[-1]
    gen = rng("unorm bn")
    ds = m.CNNBatchNormalizationWeightsDataSource(gen.uniform(0.1, 0.3, c).astype(np.float32), np.full(c, 0.5, np.float32),
                                                  np.zeros(c, np.float32), np.ones(c, np.float32), epsilon=1e-3)
    forward = persistent(m.CNNBatchNormalization(device, ds))
    source, g = make(x), make(x[..., ::-1].copy())
    state = forward.result_state(source)
    m.CNNBatchNormalizationStatistics(device).encode_batch(cb, [source], state)
    y = forward.encode(cb, source, state)
    m.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, [g], [source], state)
    dx = persistent(m.CNNBatchNormalizationGradient(device)).encode(cb, g, source, state)
    return [y, dx]


UNORM_FAMILIES = dict(FAMILIES, batch_normalization=_batch_normalization)


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
@pytest.mark.parametrize("family", sorted(UNORM_FAMILIES))
def test_family_unorm_is_float32_stored(device, queue, family, fmt):
    # Inputs in [-0.1, 1.1]: the UNORM images clamp them, the float32 run gets the clamped values.
    x = rng("unorm family " + family).uniform(-0.1, 1.1, size=(1, 6, 8, 8)).astype(np.float32)

    def outputs(image_format):
        def make(a):
            codes = to_codes(a, fmt)
            if image_format == F32:
                normalized = from_codes(codes, fmt)  # what the UNORM image holds
                normalized.setflags(write=False)  # (the float16 pass of conftest rounds writable arrays)
                return m.Image.from_numpy(normalized, device, channel_format=F32)
            return m.Image.from_numpy(codes, device)  # the dtype picks the format

        images = run(queue, lambda cb: UNORM_FAMILIES[family](device, cb, make, x))
        for image in images:
            assert image.feature_channel_format == image_format
        return [image.to_numpy() for image in images]

    for stored, out32 in zip(outputs(fmt), outputs(F32)):
        assert stored.dtype == DTYPE[fmt]
        expected = to_codes(out32, fmt)
        bad = np.flatnonzero(stored != expected)
        assert bad.size == 0, f"{bad.size} codes differ, first {stored.flat[bad[:5]]} vs {expected.flat[bad[:5]]}"


# ---- PyTorch oracles on UNORM images -------------------------------------------------------------


def torch_nchw(codes, fmt):
    return torch.from_numpy(from_codes(codes, fmt).astype(np.float64)).permute(0, 3, 1, 2)


def expect_within_one_code(stored, reference, fmt):
    """Stored codes against the float64 oracle: the float32 kernel and the float64 oracle may fall
    on either side of a rounding boundary, so one code apart is allowed (and nothing more)."""
    reference = reference.detach().permute(0, 2, 3, 1).numpy()
    scaled = np.clip(reference, 0, 1) * MAXIMUM[fmt]
    difference = np.abs(stored.astype(np.float64) - scaled)
    assert difference.max() <= 1.0, f"max difference {difference.max()} codes"
    # and the result is a real computation, not a constant
    assert len(np.unique(stored)) > 3


@pytest.mark.parametrize("fmt", UNORMS, ids=IDS.get)
def test_pytorch_oracles(device, queue, fmt):
    gen = rng("unorm torch " + IDS[fmt])
    codes = gen.integers(0, MAXIMUM[fmt] + 1, size=(1, 6, 8, 8)).astype(DTYPE[fmt])
    x = torch_nchw(codes, fmt)
    source = m.Image.from_numpy(codes, device)

    def returning(kernel, *images):
        return run(queue, lambda cb: persistent(kernel).encode(cb, *images)).to_numpy()

    # convolution (3x3, same size, zero edges) and its data gradient
    weights = (gen.standard_normal((4, 3, 3, 8)) * 0.1).astype(np.float32)
    bias = np.full(4, 0.4, np.float32)
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=8,
                                   output_feature_channels=4)
    ds = m.CNNConvolutionWeightsDataSource(d, weights, bias)
    w = torch.from_numpy(weights.astype(np.float64)).permute(0, 3, 1, 2)
    xg = x.clone().requires_grad_(True)
    y_ref = torch.nn.functional.conv2d(xg, w, torch.from_numpy(bias.astype(np.float64)), padding=1)
    conv = persistent(m.CNNConvolution(device, ds))
    cb = queue.command_buffer()
    y, state = conv.encode(cb, source, destination_state_is_temporary=False)
    g_codes = gen.integers(0, MAXIMUM[fmt] + 1, size=(1, 6, 8, 4)).astype(DTYPE[fmt])
    dx = persistent(m.CNNConvolutionGradient(device, ds)).encode(cb, m.Image.from_numpy(g_codes, device), source, state)
    cb.commit()
    cb.wait_until_completed()
    expect_within_one_code(y.to_numpy(), y_ref, fmt)
    y_ref.backward(torch_nchw(g_codes, fmt))
    expect_within_one_code(dx.to_numpy(), xg.grad, fmt)  # a UNORM gradient clamps its negatives to 0
    # a neuron, max pooling, softmax
    expect_within_one_code(returning(m.CNNNeuronSigmoid(device), source), torch.sigmoid(x), fmt)
    pooled = returning(m.CNNPoolingMax(device, 2, 2, 2, 2), source)
    expect_within_one_code(pooled, torch.nn.functional.max_pool2d(x, 2), fmt)
    expect_within_one_code(returning(m.CNNSoftMax(device), source), torch.softmax(x * 1.0, dim=1), fmt)
    # batch normalization (statistics of this batch, gamma 0.2, beta 0.5: results inside [0, 1])
    c = 8
    bn_ds = m.CNNBatchNormalizationWeightsDataSource(np.full(c, 0.2, np.float32), np.full(c, 0.5, np.float32),
                                                     np.zeros(c, np.float32), np.ones(c, np.float32), epsilon=0.001)
    bn = persistent(m.CNNBatchNormalization(device, bn_ds))
    cb = queue.command_buffer()
    state = bn.result_state(source)
    m.CNNBatchNormalizationStatistics(device).encode_batch(cb, [source], state)
    normalized = bn.encode(cb, source, state)
    cb.commit()
    cb.wait_until_completed()
    bn_ref = torch.nn.functional.batch_norm(x, None, None, torch.full((c,), 0.2, dtype=torch.float64),
                                            torch.full((c,), 0.5, dtype=torch.float64), training=True, eps=0.001)
    expect_within_one_code(normalized.to_numpy(), bn_ref, fmt)
