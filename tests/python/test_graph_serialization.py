"""Graph serialization (issue 15 item 5): NNGraph.to_bytes / from_bytes / pickle.

Oracle: the original graph. A round-tripped graph must give the same outputs bit for bit, and a
round-tripped training graph must train like the original (same weights / gradients each step).
Malformed bytes must raise ValueError (SerializationError), never crash."""
from __future__ import annotations

import pickle
import struct
import zlib

import numpy as np
import pytest

import mpsgrad as m
from conftest import randn, rng
from test_graph import (CIN, COUT, H, N, W, ConvSource, GPUSource, Handle, conv_problem, exact_graph, images,
                        labels_for, mse_loss_node, to_numpy)


class Unpicklable(ConvSource):
    def __reduce__(self):
        raise TypeError("no pickling here")


def run(device, graph, sources, states=None):
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out = graph.encode_batch(cb, sources, states)
    cb.commit()
    cb.wait_until_completed()
    return out


def inference_graph(device):
    """conv -> relu -> residual add -> max pool -> concatenation with an upsampled branch -> softmax."""
    x, w, b = conv_problem("gserial-inference")
    w2 = randn(rng("gserial-w2"), COUT, 1, 1, COUT) * 0.5
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, ConvSource(w, b))
    conv.label = "conv1"
    relu = m.CNNNeuronReLUNode(conv.result_image)
    conv2 = m.CNNConvolutionNode(relu.result_image, ConvSource(w2, np.zeros(COUT, np.float32)))
    add = m.NNAdditionNode(conv2.result_image, relu.result_image)
    add.result_image.handle = Handle("sum")
    add.result_image.export_from_graph = True
    pool = m.CNNPoolingMaxNode(add.result_image, filter_size=2)
    up = m.CNNUpsamplingNearestNode(pool.result_image, 2, 2)
    cat = m.NNConcatenationNode([up.result_image, add.result_image])
    drop = m.CNNDropoutNode(cat.result_image, keep_probability=0.75, seed=7)
    soft = m.CNNSoftMaxNode(drop.result_image)
    graph = m.NNGraph(device, soft.result_image)
    graph.label = "inference"
    return graph, images(device, x)


def kind(node):
    """The node's class; per-type neuron nodes decode as CNNNeuronNode (docs/serialization.md)."""
    return "CNNNeuronNode" if isinstance(node, m.CNNNeuronNode) and not isinstance(node, m.CNNNeuronPReLUNode) \
        else type(node).__name__


def test_inference_graph_round_trips_bit_for_bit(device):
    graph, xs = inference_graph(device)
    blob = graph.to_bytes()
    expected = to_numpy(run(device, graph, [xs]))
    for copy in (m.NNGraph.from_bytes(blob, device), pickle.loads(pickle.dumps(graph))):
        assert [kind(n) for n in copy.nodes] == [kind(n) for n in graph.nodes]
        assert [n.label for n in copy.nodes] == [n.label for n in graph.nodes]
        assert copy.label == "inference" and copy.format == graph.format
        assert [str(getattr(h, "name", h)) for h in copy.intermediate_image_handles] == ["sum"]
        np.testing.assert_array_equal(to_numpy(run(device, copy, [xs])), expected)
    # Bytes are deterministic: a decoded graph writes the same bytes.
    assert m.NNGraph.from_bytes(blob, device).to_bytes() == blob


def test_handles_survive_to_bytes_as_labels_and_pickle_as_objects(device):
    graph, _ = inference_graph(device)
    assert m.NNGraph.from_bytes(graph.to_bytes(), device).source_image_handles == ["x"]
    copy = pickle.loads(pickle.dumps(graph))
    handle = copy.source_image_handles[0]
    assert isinstance(handle, Handle) and handle.label() == "x"


def training_graph(device, source_factory, style):
    x, w, b = conv_problem("gserial-train")
    target = randn(rng("gserial-train-t"), N, H, W, COUT)
    ds = source_factory(w, b)
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, ds)
    conv.training_style = style
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    loss = mse_loss_node(tanh.result_image)
    terminal = loss.training_graph()
    graph = exact_graph(device, terminal[0].result_image)
    return graph, ds, images(device, x), target


@pytest.mark.parametrize("style", ["cpu", "gpu"])
def test_pickled_training_graph_keeps_training_like_the_original(device, style):
    lr = 0.05
    if style == "cpu":
        factory, training = (lambda w, b: ConvSource(w, b, lr)), m.NNTrainingStyle.UPDATE_DEVICE_CPU
    else:
        factory, training = (lambda w, b: GPUSource(device, w, b, lr)), m.NNTrainingStyle.UPDATE_DEVICE_GPU
    graph, ds, xs, target = training_graph(device, factory, training)
    copy = pickle.loads(pickle.dumps(graph))
    (copy_ds,) = copy.data_sources
    assert copy_ds is not ds and isinstance(copy_ds, type(ds))
    for _ in range(3):
        a = to_numpy(run(device, graph, [xs], [labels_for(device, target)]))
        b = to_numpy(run(device, copy, [xs], [labels_for(device, target)]))
        np.testing.assert_array_equal(a, b)  # dL/dx of this step, with this step's weights
        np.testing.assert_array_equal(copy_ds.w, ds.w)
    assert copy_ds.updates == ds.updates == 3
    if style == "cpu":
        assert not np.array_equal(ds.w, conv_problem("gserial-train")[1].astype(np.float32))


class TrackingGPUSource(GPUSource):
    """GPU style, and the data source keeps its own copy of the weights current (from the step's
    completion handler), as MPS asks of a data source whose weights must outlive the graph."""

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        result = super().update_with_command_buffer(command_buffer, gradient_state, source_state)

        def keep(_):
            self.w = np.array(result.weights, np.float32).reshape(self.w.shape)
            self.b = np.array(result.biases, np.float32)

        command_buffer.add_completed_handler(keep)
        return result


@pytest.mark.parametrize("source_class", [GPUSource, TrackingGPUSource])
def test_gpu_style_trained_graph_copies_compute_with_what_was_captured(device, source_class):
    """docs/serialization.md "Data sources after GPU-style training" (decision): to_bytes captures the
    weights the kernels compute with (the trained ones); pickle carries the data source objects and the
    copy's kernels load from them, as MPSNNGraph's coder encodes its data sources. GPUSource updates the
    kernel's exported weights and keeps no copy, so its pickled copy computes with the initial weights;
    TrackingGPUSource keeps its copy current, so its pickled copy computes with the trained ones."""
    x, w, b = conv_problem("gserial-gpu-trained")
    target = randn(rng("gserial-gpu-trained-t"), N, H, W, COUT)
    ds = source_class(device, w, b, 0.05)
    conv = m.CNNConvolutionNode(m.NNImageNode(Handle("x")), ds)
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    training = exact_graph(device, mse_loss_node(tanh.result_image).training_graph()[0].result_image)
    xs = images(device, x)
    for _ in range(2):
        run(device, training, [xs], [labels_for(device, target)])
    inference = exact_graph(device, tanh.result_image)  # the same nodes: the trained kernels
    trained = to_numpy(run(device, inference, [xs]))
    untrained = to_numpy(run(device, exact_graph(device, m.CNNNeuronTanHNode(m.CNNConvolutionNode(
        m.NNImageNode(Handle("x")), ConvSource(w, b)).result_image).result_image), [xs]))
    assert not np.array_equal(trained, untrained)  # the test can fail
    decoded = m.NNGraph.from_bytes(inference.to_bytes(), device)
    np.testing.assert_array_equal(to_numpy(run(device, decoded, [xs])), trained)
    unpickled = to_numpy(run(device, pickle.loads(pickle.dumps(inference)), [xs]))
    np.testing.assert_array_equal(unpickled, trained if source_class is TrackingGPUSource else untrained)


def test_training_graph_from_bytes_needs_updatable_data_sources(device):
    graph, ds, xs, target = training_graph(device, lambda w, b: ConvSource(w, b, 0.05),
                                           m.NNTrainingStyle.UPDATE_DEVICE_CPU)
    blob = graph.to_bytes()
    with pytest.raises(ValueError, match="data_sources"):
        m.NNGraph.from_bytes(blob, device)
    fresh = ConvSource(*conv_problem("gserial-train")[1:], 0.05)
    copy = m.NNGraph.from_bytes(blob, device, data_sources=[fresh])
    np.testing.assert_array_equal(to_numpy(run(device, copy, [xs], [labels_for(device, target)])),
                                  to_numpy(run(device, graph, [xs], [labels_for(device, target)])))
    assert fresh.updates == 1
    with pytest.raises(ValueError, match="data_sources"):
        m.NNGraph.from_bytes(blob, device, data_sources=[fresh, fresh])


def test_unpicklable_updatable_data_source_names_the_node(device):
    graph, *_ = training_graph(device, lambda w, b: Unpicklable(w, b, 0.05), m.NNTrainingStyle.UPDATE_DEVICE_CPU)
    with pytest.raises(ValueError, match="CNNConvolutionNode"):
        pickle.dumps(graph)


def small_blob(device):
    source = m.NNImageNode(Handle("x"))
    relu = m.CNNNeuronReLUNode(source)
    pool = m.CNNPoolingAverageNode(relu.result_image, filter_size=2)
    return m.NNGraph(device, pool.result_image).to_bytes()


def test_every_truncation_and_bit_flip_raises_value_error(device):
    blob = small_blob(device)
    m.NNGraph.from_bytes(blob, device)
    for size in range(len(blob)):
        with pytest.raises(ValueError):
            m.NNGraph.from_bytes(blob[:size], device)
    gen = np.random.default_rng(15)
    for _ in range(300):
        data = bytearray(blob)
        i = int(gen.integers(len(data)))
        data[i] ^= 1 << int(gen.integers(8))
        with pytest.raises(ValueError):
            m.NNGraph.from_bytes(bytes(data), device)


def reseal(data):
    """Recomputes the CRC-32 so that decoding reaches the payload checks."""
    body = bytes(data[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


def assert_flipped_bytes_decode_or_raise(blob, start, device):
    """Every byte from `start` to the checksum flipped, the checksum recomputed: from_bytes either
    decodes or raises ValueError (anything else fails the test)."""
    for offset in range(start, len(blob) - 4):
        data = bytearray(blob)
        data[offset] ^= 0xFF
        try:
            m.NNGraph.from_bytes(reseal(data), device)
        except ValueError:
            pass


def test_payload_defects_with_valid_crc_raise_value_error(device):
    blob = bytearray(small_blob(device))
    wrong_version = bytearray(blob)
    wrong_version[12:16] = struct.pack("<I", 3)  # this build reads versions 1 and 2
    with pytest.raises(ValueError, match="version"):
        m.NNGraph.from_bytes(reseal(wrong_version), device)
    # Every 8-byte window set to a huge count (where it lands on a size field it must be refused
    # before any allocation); each flip must raise or decode to a working graph.
    tag_end = 20 + struct.unpack("<I", bytes(blob[16:20]))[0] + 8
    for offset in range(tag_end, len(blob) - 12):
        data = bytearray(blob)
        data[offset:offset + 8] = struct.pack("<Q", 2 ** 62)
        try:
            m.NNGraph.from_bytes(reseal(data), device)
        except ValueError:
            pass
    assert_flipped_bytes_decode_or_raise(blob, tag_end, device)


def version_1_blob(blob):
    """A version-2 blob of a graph without data sources, rewritten as the version-1 blob of the same
    graph: the empty instance and group normalization tables (two u64 counts) removed."""
    tag_end = 20 + struct.unpack_from("<I", blob, 16)[0]
    start = tag_end + 8
    at = start + 8 + struct.unpack_from("<Q", blob, start)[0] + 4 + 1 + 1  # label, format, flag, allocator
    handles = struct.unpack_from("<Q", blob, at)[0]
    at += 8
    for _ in range(handles):
        at += 8 + struct.unpack_from("<Q", blob, at)[0]
    assert struct.unpack_from("<4Q", blob, at) == (0, 0, 0, 0)  # the four data source tables: empty
    at += 16
    payload = blob[start:at] + blob[at + 16:-4]
    header = blob[:12] + struct.pack("<I", 1) + blob[16:tag_end] + struct.pack("<Q", len(payload))
    return reseal(header + payload + b"\0" * 4)


def test_version_1_blobs_still_decode(device):
    blob = small_blob(device)
    assert struct.unpack_from("<I", blob, 12)[0] == 2
    old = version_1_blob(blob)
    assert len(old) == len(blob) - 16
    assert m.NNGraph.from_bytes(old, device).to_bytes() == blob


def test_bad_arguments(device):
    graph, _ = inference_graph(device)
    with pytest.raises(TypeError, match="data"):
        m.NNGraph.from_bytes("not bytes", device)
    with pytest.raises(ValueError, match="expected a NNGraph"):
        m.NNGraph.from_bytes(m.CNNNeuronReLU(device).to_bytes(), device)


def bn_source(gamma, beta):
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=1e-5)
    source.learning_rate = 0.05
    source.momentum = 0.0
    return source


def test_batch_normalization_network_trains_after_from_bytes_with_data_sources(device):
    """conv -> BN (training) -> ReLU -> max/avg pool -> FC -> softmax cross-entropy, CPU style: the
    decoded graph, given fresh copies of the data sources, computes the same dL/dx each step."""
    gen = rng("gserial-bn")
    x = randn(gen, N, H, W, CIN)
    w1, b1 = randn(gen, 4, 3, 3, CIN) * 0.4, randn(gen, 4) * 0.1
    w2, b2 = randn(gen, 3, 1, 1, 4) * 0.5, randn(gen, 3) * 0.1
    gamma, beta = 1.0 + 0.1 * randn(gen, 4), 0.1 * randn(gen, 4)
    labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(N, 1, 1, 3)
    source = m.NNImageNode(Handle("x"))
    conv1 = m.CNNConvolutionNode(source, ConvSource(w1, b1, 0.05))
    bn = m.CNNBatchNormalizationNode(conv1.result_image, bn_source(gamma, beta))
    relu = m.CNNNeuronReLUNode(bn.result_image)
    pool = m.CNNPoolingMaxNode(relu.result_image, filter_size=2)
    avg = m.CNNPoolingAverageNode(pool.result_image, filter_size=3)
    fc = m.CNNFullyConnectedNode(avg.result_image, ConvSource(w2, b2, 0.05))
    for node in (conv1, fc, bn):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    loss = m.CNNLossNode(fc.result_image, m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY,
                                                              m.CNNReductionType.SUM))
    graph = exact_graph(device, loss.training_graph()[0].result_image)
    blob = graph.to_bytes()
    with pytest.raises(ValueError, match="data_sources"):
        m.NNGraph.from_bytes(blob, device)
    copy = m.NNGraph.from_bytes(blob, device, data_sources=[ConvSource(w1, b1, 0.05), ConvSource(w2, b2, 0.05),
                                                            bn_source(gamma, beta)])
    xs = images(device, x)
    for _ in range(3):
        outs = [to_numpy(run(device, g, [xs], [[m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels[i]))
                                                 for i in range(N)]])) for g in (graph, copy)]
        np.testing.assert_array_equal(outs[0], outs[1])
    assert [type(s).__name__ for s in copy.data_sources] == ["ConvSource", "ConvSource",
                                                             "CNNBatchNormalizationWeightsDataSource"]
