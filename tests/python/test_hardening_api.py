"""Regression tests of issue 28 (Hardening II), root causes 3, 4, 6, 7 and 8, on every device:

* 3: a host callback (encode_host_callback) or a completed handler that waits for its own command
  buffer, or for a later buffer of its queue, directly or through mpsgrad.synchronize(), raises
  CommandBufferError instead of hanging (waits that can return still do). Each case runs in a
  subprocess with a timeout, so a regression fails the test instead of hanging the session.
* 4: returning encode forms refuse multi-image inputs instead of silently returning image 0: every
  gradient kernel's encode / encode_batch (one shared check in CNNGradientKernel),
  CNNBatchNormalization's encode / encode_batch, and NNGraph's encode.
* 6: mpsgrad.distributed functions raise TypeError / ValueError naming the wrong argument before
  they look at torch.distributed; hostile cross-channel / spatial / local contrast normalization
  blobs raise SerializationError naming the field.
* 7: graph node constructors validate every parameter with the kernel's own limits.
* 8: the pad gradient op on several images per dispatch (the concatenation gradient of a CLAMP read
  past the edge on multi-image images), against PyTorch autograd.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import FLOAT16, FLOAT16_TOLERANCE, randn, rng
from test_hardening import run_isolated


def image(device, n=1, h=4, w=4, c=4, seed=0):
    return m.Image.from_numpy(randn(rng(f"api-{seed}"), n, h, w, c), device)


# ---- 3: waits that could never return raise ------------------------------------------------------------

# Every snippet records what the wait did ("error: <message>" or "returned") and then checks that the
# buffers still complete; run_isolated fails on a hang (timeout) or a non-zero exit.
HOST_CALLBACK_WAITS = {
    "own buffer": """
        q = m.CommandQueue(dev)
        cb = q.command_buffer()
        cb.encode_host_callback(lambda: attempt(cb.wait_until_completed))
        cb.commit()
        cb.wait_until_completed()
        assert seen[0].startswith("error: wait_until_completed: called from this command buffer's own host callback"), seen
    """,
    "synchronize": """
        q = m.CommandQueue(dev)
        cb = q.command_buffer()
        cb.encode_host_callback(lambda: attempt(m.synchronize))
        cb.commit()
        cb.wait_until_completed()
        assert seen[0].startswith("error: synchronize: wait_until_completed: called from this command buffer's "
                                  "own host callback"), seen
    """,
    "later buffer of the queue": """
        q = m.CommandQueue(dev)
        cb, later = q.command_buffer(), q.command_buffer()
        def callback():
            later.commit()
            attempt(later.wait_until_completed)
        cb.encode_host_callback(callback)
        cb.commit()
        cb.wait_until_completed()
        later.wait_until_completed()
        assert later.status == m.CommandBufferStatus.COMPLETED
        assert seen[0].startswith("error: wait_until_completed: called from a host callback of the same command "
                                  "queue on a buffer that runs after"), seen
    """,
}


@pytest.mark.parametrize("case", sorted(HOST_CALLBACK_WAITS))
def test_3_host_callback_waiting_for_its_own_queue_raises(device, case):
    run_isolated("""
        seen = []
        def attempt(wait):
            try:
                wait()
                seen.append("returned")
            except m.CommandBufferError as e:
                seen.append("error: " + str(e))
    """ + HOST_CALLBACK_WAITS[case] + """
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    """, device.name, timeout=60)


def test_3_uncaught_wait_error_fails_the_buffer_with_its_message(device):
    run_isolated("""
        import pytest
        cb = m.CommandQueue(dev).command_buffer()
        cb.encode_host_callback(lambda: cb.wait_until_completed())
        cb.commit()
        with pytest.raises(m.CommandBufferError, match="host callback failed: .*could never return"):
            cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.ERROR
    """, device.name, timeout=60)


def test_3_synchronize_from_a_completed_handler_raises(device):
    run_isolated("""
        seen = []
        cb = m.CommandQueue(dev).command_buffer()
        def handler(done):
            try:
                m.synchronize()
                seen.append("returned")
            except m.CommandBufferError as e:
                seen.append(str(e))
        cb.add_completed_handler(handler)
        cb.commit()
        cb.wait_until_completed()
        assert len(seen) == 1 and seen[0].startswith("synchronize: wait_until_completed: called from this "
                                                     "command buffer's own completed handler"), seen
        m.synchronize()  # outside any callback: returns
    """, device.name, timeout=60)


def test_3_waits_that_can_return_still_do(device):
    """An earlier buffer of the same queue and a buffer of another queue complete while a host
    callback runs: waiting on them returns."""
    run_isolated("""
        q, other = m.CommandQueue(dev), m.CommandQueue(dev)
        earlier, cb, elsewhere = q.command_buffer(), q.command_buffer(), other.command_buffer()
        earlier.commit()
        seen = []
        def callback():
            earlier.wait_until_completed()
            elsewhere.commit()
            elsewhere.wait_until_completed()
            seen.append("returned")
        cb.encode_host_callback(callback)
        cb.commit()
        cb.wait_until_completed()
        assert seen == ["returned"] and elsewhere.status == m.CommandBufferStatus.COMPLETED
    """, device.name, timeout=60)


# ---- 4: returning forms refuse multi-image inputs ----------------------------------------------------------


def neuron_pair(device):
    d = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
    return m.CNNNeuron(device, d), m.CNNNeuronGradient(device, d)


GRADIENT_PAIRS = {
    "neuron": neuron_pair,
    "pooling max": lambda d: (m.CNNPoolingMax(d, 2, 2, 2, 2), m.CNNPoolingMaxGradient(d, 2, 2, 2, 2)),
    "pooling average": lambda d: (m.CNNPoolingAverage(d, 2, 2, 2, 2), m.CNNPoolingAverageGradient(d, 2, 2, 2, 2)),
    "softmax": lambda d: (m.CNNSoftMax(d), m.CNNSoftMaxGradient(d)),
    "upsampling": lambda d: (m.CNNUpsamplingNearest(d, 2, 2), m.CNNUpsamplingNearestGradient(d, 2, 2)),
    "dropout": lambda d: (m.CNNDropout(d, 0.5, 1, (1, 1, 1)), m.CNNDropoutGradient(d, 0.5, 1, (1, 1, 1))),
    "reshape": lambda d: (m.NNReshape(d), m.NNReshapeGradient(d)),
    "pad": lambda d: (m.NNPad(d, (1, 1, 0), (1, 1, 0)), m.NNPadGradient(d)),
    "spatial normalization": lambda d: (m.CNNSpatialNormalization(d, 3, 3), m.CNNSpatialNormalizationGradient(d, 3, 3)),
    "cross channel normalization": lambda d: (m.CNNCrossChannelNormalization(d, 3),
                                              m.CNNCrossChannelNormalizationGradient(d, 3)),
}


@pytest.mark.parametrize("family", sorted(GRADIENT_PAIRS))
@pytest.mark.parametrize("batch_form", [False, True])
def test_4_gradient_returning_forms_refuse_multi_image_inputs(device, queue, family, batch_form):
    """The forward runs on a 2-image image (destination form); the gradient's returning form used to
    return a 1-image dX for it."""
    forward, gradient = GRADIENT_PAIRS[family](device)
    x = image(device, n=2)
    cb = queue.command_buffer()
    state = forward.result_state(x)
    y = m.Image(device, forward.destination_image_descriptor([x]))
    y = m.Image(device, m.ImageDescriptor(y.width, y.height, y.feature_channels, 2))
    forward.encode(cb, x, state, y)
    g = m.Image.from_numpy(np.ones(y.shape, np.float32), device)
    read = y if family == "softmax" else x  # the softmax gradient reads the forward result
    with pytest.raises(ValueError, match="number_of_images == 1, got 2"):
        if batch_form:
            gradient.encode_batch(cb, [g], [read], [state])
        else:
            gradient.encode(cb, g, read, state)
    # The destination forms take multi-image images.
    dx = m.Image(device, m.ImageDescriptor(x.width, x.height, x.feature_channels, 2))
    gradient.encode(cb, g, read, state, dx)
    cb.commit()
    cb.wait_until_completed()


def test_4_binary_gradient_returning_form_refuses_multi_image_inputs(device, queue):
    a, b = image(device, n=2, seed=1), image(device, n=2, seed=2)
    add = m.CNNAdd(device)
    cb = queue.command_buffer()
    state = add.result_state(a, b)
    y = m.Image(device, m.ImageDescriptor(4, 4, 4, 2))
    add.encode(cb, a, b, state, y)
    with pytest.raises(ValueError, match="number_of_images == 1, got 2"):
        m.CNNAddGradient(device, False).encode(cb, y, a, state)


def bn_kernel(device, channels=4):
    source = m.CNNBatchNormalizationWeightsDataSource(
        np.ones(channels, np.float32), np.zeros(channels, np.float32), np.zeros(channels, np.float32),
        np.ones(channels, np.float32), 1e-3)
    return m.CNNBatchNormalization(device, source)


def test_4_batch_normalization_returning_forms_refuse_multi_image_inputs(device, queue):
    bn = bn_kernel(device)
    x = image(device, n=3)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="number_of_images == 1, got 3"):
        bn.encode(cb, x)
    with pytest.raises(ValueError, match="number_of_images == 1, got 3"):
        bn.encode_batch(cb, [image(device), x])
    # With destinations every image is normalized.
    y = m.Image(device, m.ImageDescriptor(4, 4, 4, 3))
    bn.encode(cb, x, destination_image=y)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() / np.sqrt(1.0 + 1e-3), rtol=1e-5, atol=1e-6)


def test_4_graph_encode_refuses_multi_image_sources(device, queue):
    graph = m.NNGraph(device, m.CNNNeuronReLUNode(m.NNImageNode()).result_image)
    with pytest.raises(ValueError, match="number_of_images == 2"):
        graph.encode(queue.command_buffer(), [image(device, n=2)])


# ---- 6: wrong exception types ---------------------------------------------------------------------------


def distributed_misuse(device):
    """(call, exception, parameter) for plainly wrong arguments of every public function of
    mpsgrad.distributed; torch.distributed is not initialized, so the old RuntimeError
    ("not initialized") came before any argument was looked at."""
    import mpsgrad.distributed as d

    x = image(device)
    bn_state = bn_kernel(device).result_state(x)
    graph = m.NNGraph(device, m.CNNNeuronReLUNode(m.NNImageNode()).result_image)
    f32 = np.zeros(3, np.float32)
    return [
        (lambda: d.init_process_group(backend=None), TypeError, "backend"),
        (lambda: d.init_process_group(timeout_seconds=None), TypeError, "timeout_seconds"),
        (lambda: d.init_process_group(timeout_seconds=float("nan")), ValueError, "timeout_seconds"),
        (lambda: d.rank(group=x), TypeError, "group"),
        (lambda: d.world_size(group="world"), TypeError, "group"),
        (lambda: d.all_reduce_gradients(None), TypeError, "states"),
        (lambda: d.all_reduce_gradients(x), TypeError, "states"),
        (lambda: d.all_reduce_gradients([x]), TypeError, "states"),
        (lambda: d.all_reduce_gradients([], weight="1"), TypeError, "weight"),
        (lambda: d.all_reduce_gradients([], weight=-1.0), ValueError, "weight"),
        (lambda: d.all_reduce_gradients([], bucket_bytes=0), ValueError, "bucket_bytes"),
        (lambda: d.all_reduce_gradients([], group=x), TypeError, "group"),
        (lambda: d.all_reduce_arrays(None), TypeError, "arrays"),
        (lambda: d.all_reduce_arrays(x), TypeError, "arrays"),
        (lambda: d.all_reduce_arrays(f32), TypeError, "arrays"),
        (lambda: d.all_reduce_arrays([np.zeros(3)]), TypeError, r"arrays\[0\]"),
        (lambda: d.all_reduce_arrays([f32], bucket_bytes=2.5), TypeError, "bucket_bytes"),
        (lambda: d.broadcast_arrays(None), TypeError, "arrays"),
        (lambda: d.broadcast_arrays([f32], src=None), TypeError, "src"),
        (lambda: d.broadcast_arrays([f32], src=-1), ValueError, "src"),
        (lambda: d.shard(None), TypeError, "indices"),
        (lambda: d.shard(np.arange(4), 1.5, 2), TypeError, "rank_"),
        (lambda: d.shard(np.arange(4), 0, x), TypeError, "world_size_"),
        (lambda: d.checksum(None), TypeError, "arrays"),
        (lambda: d.checksum([x]), TypeError, r"arrays\[0\]"),
        (lambda: d.DataParallel(graph, bucket_bytes=-1), ValueError, "bucket_bytes"),
        (lambda: d.DataParallel(graph, group=x), TypeError, "group"),
        (lambda: d.sync_batch_norm_statistics(None, 4), TypeError, "state"),
        (lambda: d.sync_batch_norm_statistics(x, 4), TypeError, "state"),
        (lambda: d.sync_batch_norm_statistics(bn_state, 2.5), TypeError, "count"),
        (lambda: d.sync_batch_norm_statistics(bn_state, 0), ValueError, "count"),
        (lambda: d.sync_batch_norm_gradients(None, 4), TypeError, "state"),
        (lambda: d.sync_batch_norm_gradients(bn_state, None), TypeError, "count"),
    ]


def test_6_distributed_arguments_are_checked_before_torch_distributed(device):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("needs torch.distributed uninitialized in this process")
    failures = []
    for i, (call, error, name) in enumerate(distributed_misuse(device)):
        try:
            call()
            failures.append(f"case {i} ({name}): no exception")
        except error as e:
            if not __import__("re").search(name, str(e)):
                failures.append(f"case {i}: {type(e).__name__} does not name {name!r}: {e}")
        except Exception as e:  # noqa: BLE001 - the wrong type is what this test catches
            failures.append(f"case {i} ({name}): {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def patched(blob: bytes, old: bytes, new: bytes) -> bytes:
    """`blob` with the one occurrence of `old` in its body replaced, and its CRC-32 recomputed."""
    body = blob[:-4]
    assert body.count(old) == 1, "the field to patch must be unambiguous"
    body = body.replace(old, new)
    return body + struct.pack("<I", zlib.crc32(body))


def window(w, h, c):
    return struct.pack("<qqq", w, h, c)


BIG = 2**20 + 1
# (kernel factory, its window (width, height, channels), hostile window, the field named)
NORMALIZATION_BLOBS = [
    (lambda d: m.CNNCrossChannelNormalization(d, 5), (1, 1, 5), (1, 1, BIG), "kernel_size"),
    (lambda d: m.CNNCrossChannelNormalization(d, 5), (1, 1, 5), (1, 1, 0), "kernel_size"),
    (lambda d: m.CNNCrossChannelNormalization(d, 5), (1, 1, 5), (3, 1, 5), "kernel_width"),
    (lambda d: m.CNNCrossChannelNormalizationGradient(d, 5), (1, 1, 5), (1, 1, BIG), "kernel_size"),
    (lambda d: m.CNNSpatialNormalization(d, 3, 3), (3, 3, 1), (BIG, BIG, 1), "kernel_width"),
    (lambda d: m.CNNSpatialNormalization(d, 3, 3), (3, 3, 1), (3, 3, 2), "kernel_size"),
    (lambda d: m.CNNSpatialNormalizationGradient(d, 3, 3), (3, 3, 1), (-1, -1, 1), "kernel_width"),
    (lambda d: m.CNNLocalContrastNormalization(d, 3, 3), (3, 3, 1), (3, 5, 1), "kernel_width"),
    (lambda d: m.CNNLocalContrastNormalization(d, 3, 3), (3, 3, 1), (BIG, BIG, 1), "kernel_width"),
    (lambda d: m.CNNLocalContrastNormalizationGradient(d, 3, 3), (3, 3, 1), (0, 0, 1), "kernel_width"),
]


@pytest.mark.parametrize("case", range(len(NORMALIZATION_BLOBS)))
def test_6_hostile_local_normalization_windows_are_serialization_errors(device, case):
    make, good, bad, field = NORMALIZATION_BLOBS[case]
    kernel = make(device)
    blob = patched(kernel.to_bytes(), window(*good), window(*bad))
    with pytest.raises(m.SerializationError, match=f"{type(kernel).__name__}.{field}: "):
        type(kernel).from_bytes(blob, device)


@pytest.mark.parametrize("value, field", [(-1.0, "alpha"), (float("nan"), "alpha"), (0.0, "delta")])
def test_6_hostile_local_normalization_parameters_are_serialization_errors(device, value, field):
    kernel = m.CNNSpatialNormalization(device, 3, 3)
    kernel.alpha, kernel.beta, kernel.delta = 0.375, 0.625, 1.5
    old = struct.pack("<fff", 0.375, 0.625, 1.5)
    new = struct.pack("<fff", value, 0.625, 1.5) if field == "alpha" else struct.pack("<fff", 0.375, 0.625, value)
    with pytest.raises(m.SerializationError, match=f"parameters: {field}: "):
        m.CNNSpatialNormalization.from_bytes(patched(kernel.to_bytes(), old, new), device)


# ---- 7: graph nodes check their parameters at construction ---------------------------------------------


def node_misuse():
    """(node constructor, parameter named): every value is one the node's kernel refuses."""
    src = m.NNImageNode()
    g = m.NNImageNode()
    state = m.CNNNeuronReLUNode(src).result_state  # any NNGradientStateNode
    return [
        (lambda: m.CNNPoolingMaxNode(src, BIG), "kernel_width"),
        (lambda: m.CNNPoolingAverageNode(src, 2, BIG), "stride_in_pixels_x"),
        (lambda: m.CNNPoolingL2NormNode(src, 0), "kernel_width"),
        (lambda: m.CNNDilatedPoolingMaxNode(src, 3, 1, BIG), "dilation_rate_x"),
        (lambda: m.CNNPoolingMaxGradientNode(g, src, state, BIG, 2, 2, 2), "kernel_width"),
        (lambda: m.CNNDilatedPoolingMaxGradientNode(g, src, state, 3, 3, 1, 1, BIG, 1), "dilation_rate_x"),
        (lambda: m.CNNUpsamplingNearestNode(src, 2**16 + 1, 1), "integer_scale_factor_x"),
        (lambda: m.CNNUpsamplingBilinearNode(src, 1, 2**16 + 1), "integer_scale_factor_y"),
        (lambda: m.CNNUpsamplingNearestGradientNode(g, src, state, 2**16 + 1, 1), "integer_scale_factor_x"),
        (lambda: m.CNNUpsamplingBilinearGradientNode(g, src, state, 1, 2**16 + 1), "integer_scale_factor_y"),
        (lambda: m.CNNDropoutNode(src, 1.5), "keep_probability"),
        (lambda: m.CNNDropoutNode(src, 0.5, 0, (2, 1, 1)), "mask_stride_in_pixels"),
        (lambda: m.CNNSpatialNormalizationNode(src, BIG), "kernel_width"),
        (lambda: m.CNNLocalContrastNormalizationNode(src, BIG), "kernel_width"),
        (lambda: m.CNNCrossChannelNormalizationNode(src, BIG), "kernel_size"),
        (lambda: m.CNNSpatialNormalizationGradientNode(g, src, state, BIG), "kernel_width"),
        (lambda: m.CNNLocalContrastNormalizationGradientNode(g, src, state, BIG, BIG), "kernel_width"),
        (lambda: m.CNNCrossChannelNormalizationGradientNode(g, src, state, BIG), "kernel_size"),
        (lambda: m.NNReshapeNode(src, 2**31 - 1, 2**31 - 1, 2**31 - 1), "shape"),
    ]


@pytest.mark.parametrize("case", range(len(node_misuse())))
def test_7_graph_node_parameters_are_checked_at_the_node(device, case):
    """Each used to construct, and fail only in NNGraph(...) (or at encode). (NNPadNode's sizes are
    range-checked by the ImageCoordinate conversion already; the C++ node checks them too.)"""
    make, name = node_misuse()[case]
    with pytest.raises(ValueError, match=name):
        make()
    # A graph of the node with valid arguments builds on the device (the check is not a device's).
    m.NNGraph(device, m.CNNPoolingMaxNode(m.NNImageNode(), 2).result_image)


# ---- 8: the pad gradient op on several images per dispatch -------------------------------------------------


def test_8_concatenation_gradient_of_clamped_reads_on_multi_image_images(device, queue):
    """Source 1 is read with CLAMP from (-1, -1), past the image's edge, so its gradient sums the
    gradients of the edge pixels read several times: the pad gradient op, dispatched once for all 3
    images of the image. Every image has different data, so a wrong per-image index shows."""
    gen = rng("api-concat-clamp-multi")
    n, h, w = 3, 5, 6
    a, b = randn(gen, n, h, w, 3), randn(gen, n, h, w, 5)
    total = m.CNNConcatenation.range_starts([3, 5])[-1] + 5
    g = randn(gen, n, h, w, total)
    kernel = m.CNNConcatenation(device, 2)
    kernel.set_offset((-1, -1, 0), 1)
    kernel.set_edge_mode(m.ImageEdgeMode.CLAMP, 1)
    ia, ib = m.Image.from_numpy(a, device), m.Image.from_numpy(b, device)
    dst = m.Image(device, m.ImageDescriptor(w, h, total, n))
    dxb = m.Image.from_numpy(np.full(b.shape, 7.0, np.float32), device)
    cb = queue.command_buffer()
    state = kernel.result_state([ia, ib])
    kernel.encode(cb, [ia, ib], state, dst)
    m.CNNConcatenationGradient(device, 1).encode(cb, m.Image.from_numpy(g, device), ib, state, dxb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

    # Oracle: PyTorch autograd of the clamped gather, per image.
    B = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([min(max(y - 1, 0), h - 1) for y in range(h)])
    cols = torch.tensor([min(max(x - 1, 0), w - 1) for x in range(w)])
    start = m.CNNConcatenation.range_starts([3, 5])[1]
    read = B[:, rows][:, :, cols]
    np.testing.assert_array_equal(dst.to_numpy()[..., start:start + 5], read.detach().numpy().astype(np.float32))
    (read * torch.tensor(g[..., start:start + 5], dtype=torch.float64)).sum().backward()
    want = B.grad.numpy()
    tol = FLOAT16_TOLERANCE if FLOAT16 else 1e-6
    got = dxb.to_numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


# ---- a constructor that raises leaves no dangling object behind ---------------------------------


def test_object_of_a_failed_constructor_is_not_kept(device):
    """The traceback of a failed construction used to keep the half-built object (the __new__
    guard's local), whose methods read the freed C++ object: pytest's failure report crashed on its
    repr. No frame of the traceback holds such an object now, not even inside its call arguments
    (the keyword-checking wrapper's `args`)."""
    run_isolated("""
        import pytest
        failing = [
            lambda: m.CNNLossLabels(dev, m.CNNLossDataDescriptor(np.zeros((2, 2, 12), np.float32)), (2, 2, 16)),
            lambda: m.CNNPoolingMax(dev, 0, 2),
            lambda: m.Image(dev, m.ImageDescriptor(2, 2, 4, -1)),
        ]
        for make in failing:
            with pytest.raises((ValueError, TypeError)) as info:
                make()
            tb = info.value.__traceback__
            while tb is not None:
                values = list(tb.tb_frame.f_locals.values())
                values += [v for c in values if isinstance(c, (tuple, list)) for v in c]  # e.g. call arguments
                for value in values:
                    if type(value).__module__.startswith("mpsgrad"):
                        assert m._mpsgrad._is_initialized(value), f"a half-built {type(value).__name__} is kept"
                        repr(value)
                tb = tb.tb_next
    """, device.name)
