"""NNGraph storage: the `format` of intermediates (FLOAT16 by default, as MPS), the formats of results
and exported images, and liveness (intermediates recycled once their last reader was encoded)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng
from test_graph import (CIN, H, N, W, ConvSource, GPUSource, Handle, _torch_network_losses, exact_graph, images,
                        nchw, nhwc, run, to_numpy)

F16 = m.ImageFeatureChannelFormat.FLOAT16
F32 = m.ImageFeatureChannelFormat.FLOAT32

# A float16 intermediate carries 11 significant bits: each rounding is at most 2^-11 = 4.9e-4 of its
# value. The chains below round a handful of intermediates and their derivatives are O(1), so 8e-3
# of the largest value (16 half ulps, conftest's FLOAT16_TOLERANCE) bounds the difference to float32.
HALF_TOLERANCE = 8e-3


def half_close(actual, expected):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, atol=HALF_TOLERANCE * scale, rtol=0)


def conv_relu_chain(seed, depth=2):
    """x -> (conv 3x3 -> tanh) * depth: the nodes, the input and a torch function computing it."""
    gen = rng(seed)
    x = randn(gen, N, H, W, CIN)
    source = m.NNImageNode(Handle("x"))
    image, params, channels = source, [], CIN
    for _ in range(depth):
        w, b = randn(gen, 4, 3, 3, channels) * 0.4, randn(gen, 4) * 0.1
        image = m.CNNNeuronTanHNode(m.CNNConvolutionNode(image, ConvSource(w, b)).result_image).result_image
        params.append((w, b))
        channels = 4

    def oracle():
        y = nchw(x)
        for w, b in params:
            y = torch.tanh(F.conv2d(y, torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),
                                    torch.tensor(b, dtype=torch.float64), padding=1))
        return nhwc(y)

    return image, x, oracle


def test_default_format_is_float16_and_results_are_float32(device):
    result, x, oracle = conv_relu_chain("storage-default")
    graph = m.NNGraph(device, result)
    assert graph.format == F16
    out = run(device, graph, images(device, x))
    assert all(image.feature_channel_format == F32 for image in out)
    half_close(to_numpy(out), oracle())
    # FLOAT32 intermediates: float32 precision; the two differ by the half roundings only.
    exact = to_numpy(run(device, exact_graph(device, result), images(device, x)))
    np.testing.assert_allclose(exact, oracle(), atol=1e-5, rtol=0)
    assert np.max(np.abs(exact - to_numpy(out))) > 0  # the intermediates really were rounded


def test_node_format_overrides_for_results_and_exported_images(device):
    gen = rng("storage-node-format")
    x = randn(gen, N, H, W, 4)
    source = m.NNImageNode(Handle("x"))
    sig = m.CNNNeuronSigmoidNode(source)
    sig.result_image.export_from_graph = True
    relu = m.CNNNeuronReLUNode(sig.result_image)
    graph = m.NNGraph(device, relu.result_image)
    cb = m.CommandQueue(device).command_buffer()
    out, inter, _ = graph.encode(cb, [images(device, x)[0]], return_intermediates=True)
    cb.commit()
    cb.wait_until_completed()
    assert out.feature_channel_format == F32 and inter[0].feature_channel_format == F32
    # An image node's own format wins over the graph's choice.
    sig.result_image.format = F16
    relu.result_image.format = F16
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out, inter, _ = graph.encode(cb, [images(device, x)[0]], return_intermediates=True)
    seen = []  # the exported image is temporary: read before the command buffer completes
    cb.encode_host_callback(lambda: seen.append(inter[0].to_numpy()))
    cb.commit()
    cb.wait_until_completed()
    assert out.feature_channel_format == F16 and inter[0].feature_channel_format == F16
    s = 1.0 / (1.0 + np.exp(-x[0].astype(np.float64)))
    # Half storage: within one rounding (2^-11 relative; sigmoid is below 1) of the exact values.
    np.testing.assert_allclose(seen[0].reshape(s.shape), s, atol=1e-3, rtol=0)
    np.testing.assert_allclose(out.to_numpy().reshape(s.shape), s, atol=1e-3, rtol=0)


def test_unsupported_format_is_refused(device):
    result, x, _ = conv_relu_chain("storage-bad-format", depth=1)
    graph = m.NNGraph(device, result)
    graph.format = m.ImageFeatureChannelFormat.UNORM8
    with pytest.raises(ValueError, match="format"):
        run(device, graph, images(device, x))


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_training_with_float16_intermediates_trains(device, style):
    """The small conv -> BN -> ReLU -> pools -> conv network of test_graph, with the default FLOAT16
    intermediates: the losses follow torch's float64 SGD within half precision and go down."""
    gen = rng("graph-network")
    x = randn(gen, N, H, W, CIN)
    w1, b1 = randn(gen, 4, 3, 3, CIN) * 0.4, randn(gen, 4) * 0.1
    w2, b2 = randn(gen, 3, 1, 1, 4) * 0.5, randn(gen, 3) * 0.1
    gamma, beta = 1.0 + 0.1 * randn(gen, 4), 0.1 * randn(gen, 4)
    labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(N, 1, 1, 3)
    lr, steps = 0.05, 6
    if style == "gpu":
        ds1, ds2 = GPUSource(device, w1, b1, lr), GPUSource(device, w2, b2, lr)
        training = m.NNTrainingStyle.UPDATE_DEVICE_GPU
    else:
        ds1, ds2 = ConvSource(w1, b1, lr), ConvSource(w2, b2, lr)
        training = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    bn_source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=1e-5)
    bn_source.learning_rate = lr
    bn_source.momentum = 0.0
    conv1 = m.CNNConvolutionNode(m.NNImageNode(Handle("x")), ds1)
    bn = m.CNNBatchNormalizationNode(conv1.result_image, bn_source)
    pool = m.CNNPoolingMaxNode(m.CNNNeuronReLUNode(bn.result_image).result_image, filter_size=2)
    avg = m.CNNPoolingAverageNode(pool.result_image, filter_size=3)
    conv2 = m.CNNConvolutionNode(avg.result_image, ds2)
    for node in (conv1, conv2, bn):
        node.training_style = training
    loss = m.CNNLossNode(conv2.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM))
    graph = m.NNGraph(device, loss.training_graph()[0].result_image, False)
    assert graph.format == F16
    queue = m.CommandQueue(device)
    xs = images(device, x)
    losses = []
    for _ in range(steps):
        lab = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels[i])) for i in range(N)]
        cb = queue.command_buffer()
        graph.encode_batch(cb, [xs], [lab])
        cb.commit()
        cb.wait_until_completed()
        losses.append([float(la.loss_image.to_numpy().ravel()[0]) for la in lab])
    assert ds1.updates == steps and ds2.updates == steps
    expected = _torch_network_losses(x, labels, w1, b1, w2, b2, gamma, beta, lr, steps)
    np.testing.assert_allclose(np.array(losses), expected, rtol=0, atol=HALF_TOLERANCE * np.max(expected))
    assert np.sum(losses[-1]) < 0.9 * np.sum(losses[0])


# ---- liveness --------------------------------------------------------------------------------------------


def neuron_chain(depth, export_every=0):
    """x -> depth alternating sigmoid / tanh neurons (every export_every-th image exported)."""
    source = m.NNImageNode(Handle("x"))
    image, exported = source, []
    for i in range(depth):
        node = (m.CNNNeuronSigmoidNode if i % 2 == 0 else m.CNNNeuronTanHNode)(image)
        image = node.result_image
        if export_every and (i + 1) % export_every == 0 and i + 1 < depth:
            image.export_from_graph = True
            exported.append(i)
    return image, exported


def chain_oracle(x, depth):
    y, partial = x.astype(np.float64), []
    for i in range(depth):
        y = 1.0 / (1.0 + np.exp(-y)) if i % 2 == 0 else np.tanh(y)
        partial.append(y)
    return partial


@pytest.mark.parametrize("fmt", [F16, F32])
def test_deep_chain_reuses_a_bounded_number_of_buffers(device, fmt):
    depth = 10
    gen = rng("storage-liveness")
    x = randn(gen, N, H, W, 8) * 2
    result, _ = neuron_chain(depth)
    graph = m.NNGraph(device, result)
    graph.format = fmt
    out = to_numpy(run(device, graph, images(device, x)))
    stats = graph.last_encode_statistics
    # 9 intermediates; at most two are alive at once (the one being read and the one being written).
    assert stats["encoded_nodes"] == depth
    assert stats["intermediate_buffers"] <= 2
    assert stats["peak_live_buffers"] <= 2
    assert stats["intermediate_buffers"] + stats["reused_buffers"] == depth - 1
    expected = chain_oracle(x, depth)[-1]
    if fmt == F32:
        np.testing.assert_allclose(out, expected, atol=1e-6, rtol=0)
    else:
        half_close(out, expected)


def test_exported_intermediates_are_never_recycled(device):
    depth = 10
    gen = rng("storage-exported")
    x = randn(gen, N, H, W, 4) * 2
    result, exported = neuron_chain(depth, export_every=3)
    graph = m.NNGraph(device, result)
    graph.format = F32
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out, inter, _ = graph.encode_batch(cb, [images(device, x)], return_intermediates=True)
    # The exported images are temporary: read at the end of their command buffer, after all its work.
    seen = []
    cb.encode_host_callback(lambda: seen.extend(to_numpy(batch) for batch in inter))
    cb.commit()
    cb.wait_until_completed()
    partial = chain_oracle(x, depth)
    assert len(inter) == len(exported) == 3
    for values, i in zip(seen, exported):
        np.testing.assert_allclose(values, partial[i], atol=1e-6, rtol=0)
    np.testing.assert_allclose(to_numpy(out), partial[-1], atol=1e-6, rtol=0)
    # 6 pooled intermediates (the 3 exported ones are temporaries outside the pool).
    stats = graph.last_encode_statistics
    assert stats["intermediate_buffers"] + stats["reused_buffers"] == depth - 1 - len(exported)


def test_residual_image_stays_alive_until_its_last_reader(device):
    """x -> a = sigmoid(x) -> b = tanh(tanh(tanh(a))) -> a + b: a is read again after three nodes, so its
    buffer must not be handed to b's chain."""
    gen = rng("storage-residual")
    x = randn(gen, N, H, W, 4)
    source = m.NNImageNode(Handle("x"))
    a = m.CNNNeuronSigmoidNode(source).result_image
    b = a
    for _ in range(3):
        b = m.CNNNeuronTanHNode(b).result_image
    add = m.NNAdditionNode(a, b)
    graph = m.NNGraph(device, add.result_image)
    graph.format = F32
    out = to_numpy(run(device, graph, images(device, x)))
    s = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(out, s + np.tanh(np.tanh(np.tanh(s))), atol=1e-6, rtol=0)
    assert graph.last_encode_statistics["peak_live_buffers"] == 3


# ---- the pool across encodes (graph_storage.h): buffers come back once a command buffer completed ----

def conv_pool_chain(seed):
    """x -> conv 3x3 -> tanh -> max pool 2 -> conv 3x3 -> tanh, and a torch function of any input. The
    convolutions and the pooling do not overwrite every float of their destinations, so the pool must
    zero-fill the buffers it hands them again."""
    gen = rng(seed)
    w1, b1 = randn(gen, 4, 3, 3, CIN) * 0.4, randn(gen, 4) * 0.1
    w2, b2 = randn(gen, 5, 3, 3, 4) * 0.4, randn(gen, 5) * 0.1
    image = m.NNImageNode(Handle("x"))
    image = m.CNNNeuronTanHNode(m.CNNConvolutionNode(image, ConvSource(w1, b1)).result_image).result_image
    image = m.CNNPoolingMaxNode(image, filter_size=2).result_image
    image = m.CNNNeuronTanHNode(m.CNNConvolutionNode(image, ConvSource(w2, b2)).result_image).result_image

    def oracle(x):
        def conv(y, w, b):
            return F.conv2d(y, torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),
                            torch.tensor(b, dtype=torch.float64), padding=1)
        y = F.max_pool2d(torch.tanh(conv(nchw(x), w1, b1)), 2)
        return nhwc(torch.tanh(conv(y, w2, b2)))

    return image, oracle


def fresh_inputs(seed, n=N):
    return randn(rng(seed), n, H, W, CIN)


def test_later_encodes_reuse_the_pool_and_kept_results_stay(device):
    result, oracle = conv_pool_chain("storage-across")
    graph = exact_graph(device, result)
    x1, x2 = fresh_inputs("across-1"), fresh_inputs("across-2")
    out1 = run(device, graph, images(device, x1))
    first = graph.last_encode_statistics
    assert first["intermediate_buffers"] > 0
    out2 = run(device, graph, images(device, x2))
    second = graph.last_encode_statistics
    # The first command buffer completed: every pooled intermediate comes from the pool.
    assert second["intermediate_buffers"] == 0
    assert second["reused_buffers"] == first["intermediate_buffers"] + first["reused_buffers"]
    np.testing.assert_allclose(to_numpy(out2), oracle(x2), atol=1e-5, rtol=0)
    # The first result is the caller's (the destination allocator's), not the pool's.
    np.testing.assert_allclose(to_numpy(out1), oracle(x1), atol=1e-5, rtol=0)


def test_batch_size_changes_between_encodes(device):
    result, oracle = conv_pool_chain("storage-batch-size")
    graph = exact_graph(device, result)
    for n in (N, 1, N + 3, N):
        x = fresh_inputs(f"batch-size-{n}", n)
        np.testing.assert_allclose(to_numpy(run(device, graph, images(device, x))), oracle(x), atol=1e-5, rtol=0)


def test_encodes_in_flight_do_not_share_pooled_buffers(device):
    """Two encodes before either command buffer runs (two queues, no order between them): the second
    cannot take the first's buffers."""
    result, oracle = conv_pool_chain("storage-in-flight")
    graph = exact_graph(device, result)
    run(device, graph, images(device, fresh_inputs("in-flight-0")))  # fills the pool
    xs = [fresh_inputs(f"in-flight-{i}") for i in (1, 2)]
    buffers = [m.CommandQueue(device).command_buffer() for _ in xs]
    outs = [graph.encode_batch(cb, [images(device, x)]) for cb, x in zip(buffers, xs)]
    assert graph.last_encode_statistics["intermediate_buffers"] > 0  # the pool was lent to the first
    for cb in reversed(buffers):
        cb.commit()
    for cb in buffers:
        cb.wait_until_completed()
    for out, x in zip(outs, xs):
        np.testing.assert_allclose(to_numpy(out), oracle(x), atol=1e-5, rtol=0)


def test_training_steps_allocate_no_pooled_buffers_after_the_first(device):
    """A training graph encoded step after step (the digits example's pattern) takes all its pooled
    intermediates from the pool once the first step has completed."""
    gen = rng("storage-training-steady")
    x = randn(gen, N, H, W, CIN)
    w, b = randn(gen, 4, 3, 3, CIN) * 0.4, randn(gen, 4) * 0.1
    conv = m.CNNConvolutionNode(m.NNImageNode(Handle("x")), GPUSource(device, w, b, 0.01))
    relu = m.CNNNeuronReLUNode(conv.result_image)
    pool = m.CNNPoolingMaxNode(relu.result_image, filter_size=2)
    descriptor = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.MEAN)
    loss = m.CNNLossNode(pool.result_image, descriptor)
    terminal = loss.training_graph()
    graph = exact_graph(device, [t.result_image for t in terminal])
    target = randn(gen, N, H // 2, W // 2, 4)
    allocated = []
    for _ in range(3):
        labels = [m.CNNLossLabels(device, m.Image.from_numpy(target[i], device)) for i in range(N)]
        run(device, graph, images(device, x), [labels])
        allocated.append(graph.last_encode_statistics["intermediate_buffers"])
    assert allocated[0] > 0 and allocated[1:] == [0, 0]
