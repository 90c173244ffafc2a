"""Graph serialization of the node families added for issue 15 item 5: local, instance and group
normalization, spatial mean, Gram matrix, the split loss nodes and transposed convolution, forward and
gradient.

Oracle: the original graph. Each graph is built as an MPS user builds it (forward nodes, then
training_graph()), round-tripped through to_bytes/from_bytes and pickle, and the copies must give the
original's results bit for bit (and, for training graphs, the same results at every step)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import mpsgrad as m
from conftest import randn, rng
from test_graph import ConvSource, GPUSource, Handle, exact_graph, images, labels_for, mse_loss_node, to_numpy
from test_graph_serialization import kind

N = 2


def run(device, graph, arrays, states=None):
    """All results of the graph (its result and exported intermediates) as arrays."""
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    # A decoded (to_bytes) graph's handles are their labels.
    sources = [images(device, arrays[h if isinstance(h, str) else h.label()]) for h in graph.source_image_handles]
    first, others, _ = graph.encode_batch(cb, sources, states, return_intermediates=True)
    seen = []  # exported images and results 1..n-1 may be temporary: read before the buffer completes
    cb.encode_host_callback(lambda: seen.extend(to_numpy(o) for o in others))
    cb.commit()
    cb.wait_until_completed()
    return [to_numpy(first)] + seen


def copies(device, graph):
    blob = graph.to_bytes()
    decoded = m.NNGraph.from_bytes(blob, device)
    assert decoded.to_bytes() == blob  # a decoded graph writes the same bytes
    assert [kind(n) for n in decoded.nodes] == [kind(n) for n in graph.nodes]
    assert [n.label for n in decoded.nodes] == [n.label for n in graph.nodes]
    return [decoded, pickle.loads(pickle.dumps(graph))]


def assert_same_results(device, graph, arrays):
    expected = run(device, graph, arrays)
    for copy in copies(device, graph):
        for a, b in zip(run(device, copy, arrays), expected):
            np.testing.assert_array_equal(a, b)


def seeded_training_graph(device, result_image):
    """dL/dx of L = sum(result) (NNInitialGradientNode), with every gradient exported."""
    terminal = m.NNInitialGradientNode(result_image).training_graph()
    return exact_graph(device, [t.result_image for t in terminal], [True] * len(terminal))


def test_local_normalization_nodes_round_trip_forward_and_gradient(device):
    gen = rng("gserial-localnorm")
    arrays = {"x": randn(gen, N, 7, 6, 5)}
    x = m.NNImageNode(Handle("x"))
    lrn = m.CNNCrossChannelNormalizationNode(x, kernel_size=3)
    lrn.alpha, lrn.beta, lrn.delta = 0.5, 0.75, 2.0
    spatial = m.CNNSpatialNormalizationNode(lrn.result_image, kernel_size=3)
    spatial.alpha, spatial.beta = 0.25, 0.5
    lcn = m.CNNLocalContrastNormalizationNode(spatial.result_image, kernel_size=5)
    lcn.p0, lcn.pm, lcn.ps = 0.9, 0.2, 1.1
    lcn.label = "lcn"
    forward = exact_graph(device, lcn.result_image)
    assert_same_results(device, forward, arrays)
    training = seeded_training_graph(device, lcn.result_image)
    assert {"CNNCrossChannelNormalizationGradientNode", "CNNSpatialNormalizationGradientNode",
            "CNNLocalContrastNormalizationGradientNode"} <= {kind(n) for n in training.nodes}
    assert_same_results(device, training, arrays)
    decoded = m.NNGraph.from_bytes(training.to_bytes(), device)
    node = next(n for n in decoded.nodes if n.label == "lcn")
    assert (node.p0, node.pm, node.ps) == (np.float32(0.9), np.float32(0.2), np.float32(1.1))


def test_hand_made_local_contrast_gradient_node_keeps_its_kernel_size(device):
    gen = rng("gserial-lcn-grad")
    arrays = {"x": randn(gen, N, 6, 6, 3), "g": randn(gen, N, 6, 6, 3)}
    x = m.NNImageNode(Handle("x"))
    lcn = m.CNNLocalContrastNormalizationNode(x, kernel_size=3)
    grad = m.CNNLocalContrastNormalizationGradientNode(m.NNImageNode(Handle("g")), x, lcn.result_state, 3, 3)
    grad.alpha = lcn.alpha
    graph = exact_graph(device, [lcn.result_image, grad.result_image], [True, True])
    assert_same_results(device, graph, arrays)


def test_reduction_nodes_round_trip_with_their_gradients(device):
    gen = rng("gserial-reduction")
    arrays = {"x": randn(gen, N, 5, 4, 6)}
    x = m.NNImageNode(Handle("x"))
    tanh = m.CNNNeuronTanHNode(x)
    mean = m.NNReductionSpatialMeanNode(tanh.result_image)
    gram = m.NNGramMatrixCalculationNode(tanh.result_image, alpha=0.25)
    # Both reductions feed one result: their 1 x 1 x C and C x C results, each reshaped to a row, concatenated.
    mean_row = m.NNReshapeNode(mean.result_image, 1, 1, 6)
    gram_row = m.NNReshapeNode(gram.result_image, 1, 1, 36)
    cat = m.NNConcatenationNode([mean_row.result_image, gram_row.result_image])
    assert_same_results(device, exact_graph(device, cat.result_image), arrays)
    training = seeded_training_graph(device, cat.result_image)
    assert {"NNReductionSpatialMeanGradientNode", "NNGramMatrixCalculationGradientNode"} <= \
        {kind(n) for n in training.nodes}
    assert_same_results(device, training, arrays)


def test_gram_callback_is_not_carried_and_the_gradient_follows_the_decoded_forward_alpha(device):
    """docs/serialization.md: a property_call_back is an application object; the blob holds alpha, the
    decoded node has no callback and the caller re-attaches one. The builder's gradient node follows
    its (decoded) forward node's alpha of each encode, callback included."""
    gen = rng("gserial-gram-callback")
    arrays = {"x": randn(gen, N, 4, 3, 5)}
    gram = m.NNGramMatrixCalculationNode(m.NNImageNode(Handle("x")), alpha=0.5)
    gram.label = "gram"
    gram.property_call_back = lambda source, destination: 0.125
    training = seeded_training_graph(device, gram.result_image)
    expected = run(device, training, arrays)
    decoded = m.NNGraph.from_bytes(training.to_bytes(), device)
    node = next(n for n in decoded.nodes if n.label == "gram")
    assert node.property_call_back is None and node.alpha == 0.5
    # Without the callback the decoded graph uses alpha = 0.5 (the gradient of sum(alpha * G) scales with alpha).
    without = run(device, decoded, arrays)
    np.testing.assert_allclose(without[0], expected[0] * 4, rtol=1e-6)
    node.property_call_back = lambda source, destination: 0.125
    for a, b in zip(run(device, decoded, arrays), expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("weighted", [False, True])
def test_split_loss_nodes_round_trip(device, weighted):
    gen = rng(f"gserial-split-loss-{weighted}")
    arrays = {"x": randn(gen, N, 3, 4, 5), "t": randn(gen, N, 3, 4, 5)}
    if weighted:
        arrays["w"] = np.abs(randn(gen, N, 3, 4, 5))
    desc = m.CNNLossDescriptor(m.CNNLossType.HUBER, m.CNNReductionType.MEAN)
    desc.delta = 0.5
    desc.weight = 0.75
    predictions = m.CNNNeuronTanHNode(m.NNImageNode(Handle("x"))).result_image
    labels, weights = m.NNImageNode(Handle("t")), m.NNImageNode(Handle("w")) if weighted else None
    loss = m.NNForwardLossNode(predictions, labels, desc, weights=weights)
    assert_same_results(device, exact_graph(device, loss.result_image), arrays)
    seed = m.NNInitialGradientNode(loss.result_image)
    terminal = seed.training_graph()
    sources = loss.source_images
    labels_node = m.NNLossGradientNode(seed.result_image, sources[0], sources[1], sources[2] if weighted else None,
                                       loss.result_state, desc, is_labels_gradient_filter=True)
    # One graph per gradient: each consumes the forward loss node's (temporary) state.
    assert_same_results(device, exact_graph(device, terminal[0].result_image), arrays)
    graph = exact_graph(device, labels_node.result_image)
    assert_same_results(device, graph, arrays)
    decoded = m.NNGraph.from_bytes(graph.to_bytes(), device)
    node = next(n for n in decoded.nodes if type(n) is m.NNLossGradientNode and n.is_labels_gradient_filter)
    assert (node.loss_type, node.reduction_type) == (m.CNNLossType.HUBER, m.CNNReductionType.MEAN)
    # A gradient node without a forward state (its descriptor's weight) round-trips too.
    alone = m.NNLossGradientNode(m.NNImageNode(Handle("g")), m.NNImageNode(Handle("x")), labels, None, None, desc)
    arrays["g"] = randn(gen, N, 1, 1, 1)
    assert_same_results(device, exact_graph(device, alone.result_image), arrays)


@pytest.mark.parametrize("style", ["cpu", "gpu"])
def test_transposed_convolution_training_graph_keeps_training_after_pickle(device, style):
    """x -> conv -> tanh -> transposed conv sized by the conv's gradient state -> MSE; the pickled copy
    (with its pickled data sources) computes the same dL/dx and the same weights at every step."""
    gen = rng(f"gserial-transpose-{style}")
    h, w, cin, mid, lr = 7, 6, 3, 4, 0.01
    wc, bc = randn(gen, mid, 3, 3, cin) * 0.3, randn(gen, mid) * 0.1
    wt, bt = randn(gen, cin, 3, 3, mid) * 0.3, randn(gen, cin) * 0.1
    make = (lambda a, b: ConvSource(a, b, lr)) if style == "cpu" else (lambda a, b: GPUSource(device, a, b, lr))
    sources = [make(wc, bc), make(wt, bt)]
    x = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(x, sources[0])
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    transpose = m.CNNConvolutionTransposeNode(tanh.result_image, conv.result_state, sources[1])
    transpose.label = "transpose"
    for node in (conv, transpose):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU if style == "cpu" else \
            m.NNTrainingStyle.UPDATE_DEVICE_GPU
    graph = exact_graph(device, mse_loss_node(transpose.result_image).training_graph()[0].result_image)
    assert "CNNConvolutionTransposeGradientNode" in [kind(n) for n in graph.nodes]
    copy = pickle.loads(pickle.dumps(graph))
    copy_sources = copy.data_sources
    assert len(copy_sources) == 2 and all(c is not s for c, s in zip(copy_sources, sources))
    for _ in range(3):
        arrays = {"x": randn(gen, N, h, w, cin)}
        target = randn(gen, N, h, w, cin)
        a = run(device, graph, arrays, [labels_for(device, target)])
        b = run(device, copy, arrays, [labels_for(device, target)])
        np.testing.assert_array_equal(a[0], b[0])
        for s, c in zip(sources, copy_sources):
            np.testing.assert_array_equal(c.w, s.w)
            np.testing.assert_array_equal(c.b, s.b)
    assert [s.updates for s in copy_sources] == [s.updates for s in sources] == [3, 3]
    # to_bytes alone captures the weights the kernels compute with (GPU style: updated on the kernels,
    # not in the data source's arrays, which is why pickle, carrying the data source, is not used here).
    inference = exact_graph(device, transpose.result_image)
    arrays = {"x": randn(gen, N, h, w, cin)}
    expected = run(device, inference, arrays)
    blob = inference.to_bytes()
    decoded = m.NNGraph.from_bytes(blob, device)
    assert decoded.to_bytes() == blob
    np.testing.assert_array_equal(run(device, decoded, arrays)[0], expected[0])


@pytest.mark.float32_only("bit equality of the graph's FLOAT32 result with a kernel destination that "
                         "takes its source's format")
def test_transposed_convolution_without_state_round_trips_and_runs(device):
    """A transposed convolution node without a convolution gradient state encodes the kernel's
    stateless form (sized by its padding policy): the graph, its two copies and the kernel itself
    (tested against torch in test_convolution_transpose.py) give the same bits."""
    gen = rng("gserial-transpose-nostate")
    wt, bt = randn(gen, 3, 3, 3, 4) * 0.3, randn(gen, 3) * 0.1
    node = m.CNNConvolutionTransposeNode(m.NNImageNode(Handle("x")), None, ConvSource(wt, bt))
    node.accumulator_precision = m.NNConvolutionAccumulatorPrecisionOption.HALF
    graph = exact_graph(device, node.result_image)
    both = copies(device, graph)  # before any encode: the padding policy then sets the kernel's offsets
    (decoded,) = [n for n in both[0].nodes if isinstance(n, m.CNNConvolutionTransposeNode)]
    assert decoded.source_states == [] and \
        decoded.accumulator_precision == m.NNConvolutionAccumulatorPrecisionOption.HALF
    np.testing.assert_array_equal(np.asarray(both[0].data_sources[0].weights).reshape(wt.shape), wt)

    x = randn(gen, 2, 5, 6, 4)
    for copy in both:
        np.testing.assert_array_equal(run(device, copy, {"x": x})[0], run(device, graph, {"x": x})[0])
    kernel = m.CNNConvolutionTranspose(device, ConvSource(wt, bt))
    kernel.accumulator_precision_option = m.NNConvolutionAccumulatorPrecisionOption.HALF
    kernel.destination_image_allocator = m.ImageAllocator.persistent()  # read after the wait
    cb = m.CommandQueue(device).command_buffer()
    direct = kernel.encode_batch(cb, images(device, x))
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(run(device, graph, {"x": x})[0], to_numpy(direct))


def test_truncated_and_mislabelled_family_blobs_raise_value_error(device):
    x = m.NNImageNode(Handle("x"))
    lrn = m.CNNCrossChannelNormalizationNode(x, kernel_size=3)
    gram = m.NNGramMatrixCalculationNode(lrn.result_image, alpha=0.5)
    blob = m.NNGraph(device, gram.result_image).to_bytes()
    for size in range(len(blob)):
        with pytest.raises(ValueError):
            m.NNGraph.from_bytes(blob[:size], device)
    # A node class renamed to one that is not a node class: refused by name.
    from test_graph_serialization import reseal
    data = bytearray(blob)
    i = bytes(data).index(b"NNGramMatrixCalculationNode")
    data[i:i + 2] = b"XX"
    with pytest.raises(ValueError, match="XXGramMatrixCalculationNode"):
        m.NNGraph.from_bytes(reseal(data), device)


def test_every_byte_flip_of_a_transpose_and_split_loss_blob_raises_or_decodes(device):
    """With the CRC recomputed, each flipped byte of a training graph holding the transposed
    convolution and split loss nodes either raises ValueError or decodes; every truncation raises."""
    from test_graph_serialization import assert_flipped_bytes_decode_or_raise
    gen = rng("gserial-flip")
    x = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(x, ConvSource(randn(gen, 2, 3, 3, 2), randn(gen, 2)))
    transpose = m.CNNConvolutionTransposeNode(conv.result_image, conv.result_state,
                                              ConvSource(randn(gen, 2, 3, 3, 2), randn(gen, 2)))
    for node in (conv, transpose):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    loss = m.NNForwardLossNode(transpose.result_image, m.NNImageNode(Handle("t")), desc)
    terminal = m.NNInitialGradientNode(loss.result_image).training_graph()
    blob = m.NNGraph(device, terminal[0].result_image).to_bytes()
    assert m.NNGraph.from_bytes(blob, device).to_bytes() == blob
    for size in range(len(blob)):
        with pytest.raises(ValueError):
            m.NNGraph.from_bytes(blob[:size], device)
    assert_flipped_bytes_decode_or_raise(blob, 20 + len("NNGraph") + 8, device)


# ---- instance and group normalization ------------------------------------------------------------------


def group_normalization_sources(gen, c=4):
    """Ready-made data sources (CPU-style SGD update) with an epsilon of their own and a label each."""
    instance = m.CNNInstanceNormalizationWeightsDataSource(1.0 + 0.2 * randn(gen, c), 0.2 * randn(gen, c),
                                                           epsilon=1e-3, label="in")
    group = m.CNNGroupNormalizationWeightsDataSource(1.0 + 0.2 * randn(gen, c), 0.2 * randn(gen, c),
                                                     number_of_groups=2, epsilon=1e-4, label="gn")
    for source in (instance, group):
        source.learning_rate = 0.05
    return instance, group


def group_normalization_network(instance, group, style):
    """x -> instance normalization -> tanh -> group normalization, both trained in `style`."""
    x = m.NNImageNode(Handle("x"))
    instance_node = m.CNNInstanceNormalizationNode(x, instance)
    tanh = m.CNNNeuronTanHNode(instance_node.result_image)
    group_node = m.CNNGroupNormalizationNode(tanh.result_image, group)
    for node in (instance_node, group_node):
        node.training_style = style
    return group_node


def gamma_and_beta(sources):
    return [np.array(v) for s in sources for v in (s.gamma(), s.beta())]


def test_instance_and_group_normalization_round_trip_after_training(device):
    """Trained CPU style for two steps, then: the inference graph of the trained nodes round-trips
    (to_bytes and pickle) bit for bit; the pickled training graph keeps training like the original
    (same dL/dx, gamma and beta at every step); from_bytes needs data sources that can update."""
    gen = rng("gserial-groupnorm")
    arrays = {"x": randn(gen, N, 5, 4, 4)}
    instance, group = group_normalization_sources(gen)
    initial = gamma_and_beta([instance, group])
    result = group_normalization_network(instance, group, m.NNTrainingStyle.UPDATE_DEVICE_CPU)
    training = seeded_training_graph(device, result.result_image)
    assert {"CNNInstanceNormalizationGradientNode", "CNNGroupNormalizationGradientNode"} <= \
        {kind(n) for n in training.nodes}
    for _ in range(2):
        run(device, training, arrays)
    trained = gamma_and_beta([instance, group])
    assert not any(np.array_equal(a, b) for a, b in zip(trained, initial))  # the test can fail

    inference = exact_graph(device, result.result_image)
    assert_same_results(device, inference, arrays)
    decoded = m.NNGraph.from_bytes(inference.to_bytes(), device)
    decoded_instance, decoded_group = decoded.data_sources
    assert isinstance(decoded_instance, m.CNNInstanceNormalizationWeightsDataSource)
    assert (decoded_instance.label(), decoded_instance.epsilon()) == ("in", np.float32(1e-3))
    assert (decoded_group.label(), decoded_group.epsilon(), decoded_group.number_of_groups()) == \
        ("gn", np.float32(1e-4), 2)
    for a, b in zip(gamma_and_beta(decoded.data_sources), trained):
        np.testing.assert_array_equal(a, b)

    copy = pickle.loads(pickle.dumps(training))
    copy_sources = copy.data_sources
    assert [type(s) for s in copy_sources] == [type(instance), type(group)]
    assert all(c is not s for c, s in zip(copy_sources, (instance, group)))
    assert copy_sources[0].learning_rate == np.float32(0.05)
    for _ in range(2):
        for a, b in zip(run(device, copy, arrays), run(device, training, arrays)):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(gamma_and_beta(copy_sources), gamma_and_beta([instance, group])):
            np.testing.assert_array_equal(a, b)

    blob = training.to_bytes()
    with pytest.raises(ValueError, match="data_sources"):
        m.NNGraph.from_bytes(blob, device)
    with pytest.raises(ValueError, match="2 data source"):
        m.NNGraph.from_bytes(blob, device, data_sources=[None])
    fresh = [pickle.loads(pickle.dumps(s)) for s in (instance, group)]
    given = m.NNGraph.from_bytes(blob, device, data_sources=fresh)
    assert given.data_sources == fresh
    for a, b in zip(run(device, given, arrays), run(device, training, arrays)):
        np.testing.assert_array_equal(a, b)


def test_instance_normalization_data_source_from_python_round_trips(device):
    """A Python data source object (duck-typed protocol, no update method) in a graph trained with
    UPDATE_DEVICE_NONE: to_bytes captures its values, pickle does not need it."""

    class Source:
        def number_of_feature_channels(self):
            return 4

        def gamma(self):
            return np.array([1.0, 2.0, 0.5, -1.0], np.float32)

        def beta(self):
            return None

    x = m.NNImageNode(Handle("x"))
    node = m.CNNInstanceNormalizationNode(x, Source())
    node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    arrays = {"x": randn(rng("gserial-in-python"), N, 3, 5, 4)}
    assert_same_results(device, seeded_training_graph(device, node.result_image), arrays)


def test_to_bytes_does_not_depend_on_whether_the_graph_has_run(device):
    """A blob describes the nodes and the weights, not what the graph's encodes set on the kernels: the
    nodes' accumulator precision (which changed a convolution's and a transposed convolution's bytes
    after the first encode) and a transposed convolution's kernel offsets, which its padding sets at
    encode (changed for an even kernel sized by a convolution's state)."""
    gen = rng("gserial-encode-independent")
    x = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(x, ConvSource(randn(gen, 4, 2, 2, 3) * 0.3, randn(gen, 4)))
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    transpose = m.CNNConvolutionTransposeNode(tanh.result_image, conv.result_state,
                                              ConvSource(randn(gen, 3, 2, 2, 4) * 0.3, randn(gen, 3)))
    alone = m.CNNConvolutionTransposeNode(transpose.result_image, None,
                                          ConvSource(randn(gen, 4, 3, 3, 3) * 0.3, randn(gen, 4)))
    for node in (conv, transpose, alone):
        node.accumulator_precision = m.NNConvolutionAccumulatorPrecisionOption.HALF
    instance, group = group_normalization_sources(gen)
    result = group_normalization_network(instance, group, m.NNTrainingStyle.UPDATE_DEVICE_NONE)
    for graph, channels in ((exact_graph(device, alone.result_image), 3),
                            (seeded_training_graph(device, result.result_image), 4)):
        arrays = {"x": randn(gen, N, 6, 5, channels)}
        before = graph.to_bytes()
        run(device, graph, arrays)
        assert graph.to_bytes() == before
        assert m.NNGraph.from_bytes(before, device).to_bytes() == before


# ---- every other node family in one training graph, and the walk over every node class ----------------


def many_families_graph(device):
    """Forward nodes of most families as an MPS user chains them, and their training graph (dL/dx of
    sum(result), every gradient exported)."""
    x = m.NNImageNode(Handle("x"))
    a = m.CNNNeuronPReLUNode(x, [0.25, 0.5, 0.75, 1.5]).result_image
    l2 = m.CNNPoolingL2NormNode(m.CNNNeuronELUNode(x).result_image, filter_size=2)
    b = m.CNNUpsamplingBilinearNode(l2.result_image, 2, 2).result_image
    d = m.NNMultiplicationNode(m.NNSubtractionNode(a, b).result_image, a).result_image
    quotient = m.NNDivisionNode(d, m.CNNNeuronExponentialNode(x).result_image).result_image
    # Every other per-type neuron node, chained (logarithm and power after the sigmoid: positive inputs).
    chain = x
    for make in (m.CNNNeuronAbsoluteNode, lambda s: m.CNNNeuronLinearNode(s, 0.5, 0.25), m.CNNNeuronSoftPlusNode,
                 m.CNNNeuronSoftSignNode, m.CNNNeuronHardSigmoidNode, m.CNNNeuronReLUNNode, m.CNNNeuronGeLUNode,
                 m.CNNNeuronSigmoidNode, lambda s: m.CNNNeuronPowerNode(s, 1.0, 0.5, 2.0), m.CNNNeuronLogarithmNode):
        chain = make(chain).result_image
    e = m.NNAdditionNode(quotient, chain).result_image
    f = m.CNNDilatedPoolingMaxNode(e, filter_size=2, stride=2, dilation_rate=1).result_image
    up = m.CNNUpsamplingNearestNode(f, 2, 2).result_image
    reshaped = m.NNReshapeNode(up, 16, 4, 4).result_image
    padded = m.NNPadNode(reshaped, (1, 1, 0), (1, 1, 0), m.ImageEdgeMode.ZERO).result_image
    cat = m.NNConcatenationNode([m.CNNLogSoftMaxNode(padded).result_image, m.CNNSoftMaxNode(padded).result_image])
    drop = m.CNNDropoutNode(cat.result_image, keep_probability=0.8, seed=3)
    return drop, seeded_training_graph(device, drop.result_image)


def test_many_families_training_graph_round_trips(device):
    arrays = {"x": randn(rng("gserial-many"), N, 8, 8, 4)}
    # Two copies of the network: a dropout node's mask advances at every encode of the original, while a
    # decoded one starts at its seed's first mask (docs/serialization.md), so each graph runs once.
    drop, _ = many_families_graph(device)
    assert_same_results(device, exact_graph(device, drop.result_image), arrays)
    _, training = many_families_graph(device)
    assert_same_results(device, training, arrays)


def test_yolo_loss_training_graph_keeps_training_after_pickle(device):
    from test_graph_yolo import N as YN, build_graph, problem
    cfg, neuron, lr, x, w, b, lab = problem("mean-tanh")
    source = ConvSource(w, b, lr)
    graph = exact_graph(device, build_graph(source, neuron, cfg).result_image)
    copy = pickle.loads(pickle.dumps(graph))
    (copy_source,) = copy.data_sources
    for _ in range(2):
        outs = []
        for g in (graph, copy):
            labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(lab[i])) for i in range(YN)]
            queue = m.CommandQueue(device)
            cb = queue.command_buffer()
            dx = g.encode_batch(cb, [images(device, x)], [labels])
            cb.commit()
            cb.wait_until_completed()
            outs.append((to_numpy(dx), [lb.loss_image.to_numpy().item() for lb in labels]))
        np.testing.assert_array_equal(outs[0][0], outs[1][0])
        assert outs[0][1] == outs[1][1]
        np.testing.assert_array_equal(copy_source.w, source.w)


# Python classes that are abstract bases (never a node of a graph themselves).
ABSTRACT = {"NNFilterNode", "NNGradientFilterNode", "CNNNormalizationNode", "CNNLocalNormalizationGradientNode",
            "NNUnaryReductionNode", "CNNPoolingGradientNode", "CNNUpsamplingGradientNode", "NNArithmeticGradientNode"}
# Node classes a graph blob cannot hold, and why (docs/serialization.md "Graphs"): none today.
NOT_SERIALIZABLE: dict[str, str] = {}
# Every other class, with the graph of this module or test_graph_serialization.py that round-trips it.
ROUND_TRIPPED_BY = {
    "test_graph_serialization.inference_graph": {"CNNConvolutionNode", "CNNNeuronReLUNode", "CNNNeuronNode",
                                                 "NNBinaryArithmeticNode", "CNNPoolingNode", "CNNUpsamplingNode",
                                                 "NNConcatenationNode", "CNNDropoutNode", "CNNSoftMaxNode"},
    "test_graph_serialization.training_graph": {"CNNConvolutionGradientNode", "CNNNeuronTanHNode",
                                                "CNNNeuronGradientNode", "CNNLossNode"},
    "test_graph_serialization.test_batch_normalization_network_trains_after_from_bytes_with_data_sources": {
        "CNNBatchNormalizationNode", "CNNBatchNormalizationGradientNode", "CNNFullyConnectedNode",
        "CNNFullyConnectedGradientNode", "CNNPoolingMaxGradientNode", "CNNPoolingAverageGradientNode"},
    "many_families_graph": {"CNNNeuronPReLUNode", "CNNNeuronELUNode", "CNNNeuronExponentialNode",
                            "CNNNeuronAbsoluteNode", "CNNNeuronLinearNode", "CNNNeuronSoftPlusNode",
                            "CNNNeuronSoftSignNode", "CNNNeuronHardSigmoidNode", "CNNNeuronReLUNNode",
                            "CNNNeuronGeLUNode", "CNNNeuronSigmoidNode", "CNNNeuronPowerNode", "CNNNeuronLogarithmNode",
                            "CNNPoolingL2NormGradientNode", "CNNUpsamplingBilinearGradientNode",
                            "CNNUpsamplingNearestGradientNode", "NNSubtractionGradientNode",
                            "NNMultiplicationGradientNode", "NNAdditionGradientNode", "CNNDilatedPoolingMaxGradientNode",
                            "NNReshapeNode", "NNReshapeGradientNode", "NNPadNode", "NNPadGradientNode",
                            "CNNLogSoftMaxNode", "CNNLogSoftMaxGradientNode", "CNNSoftMaxGradientNode",
                            "NNConcatenationGradientNode", "CNNDropoutGradientNode", "NNInitialGradientNode"},
    "test_local_normalization_nodes_round_trip_forward_and_gradient": {
        "CNNCrossChannelNormalizationNode", "CNNSpatialNormalizationNode", "CNNLocalContrastNormalizationNode",
        "CNNCrossChannelNormalizationGradientNode", "CNNSpatialNormalizationGradientNode",
        "CNNLocalContrastNormalizationGradientNode"},
    "test_reduction_nodes_round_trip_with_their_gradients": {
        "NNReductionSpatialMeanNode", "NNReductionSpatialMeanGradientNode", "NNGramMatrixCalculationNode",
        "NNGramMatrixCalculationGradientNode"},
    "test_split_loss_nodes_round_trip": {"NNForwardLossNode", "NNLossGradientNode"},
    "test_transposed_convolution_training_graph_keeps_training_after_pickle": {
        "CNNConvolutionTransposeNode", "CNNConvolutionTransposeGradientNode"},
    "test_yolo_loss_training_graph_keeps_training_after_pickle": {"CNNYOLOLossNode"},
    "test_instance_and_group_normalization_round_trip_after_training": {
        "CNNInstanceNormalizationNode", "CNNInstanceNormalizationGradientNode", "CNNGroupNormalizationNode",
        "CNNGroupNormalizationGradientNode"},
}


def node_classes():
    return {name for name in dir(m) if isinstance(getattr(m, name), type) and issubclass(getattr(m, name),
                                                                                           m.NNFilterNode)}


def test_every_node_class_round_trips_or_is_documented_as_not_serializable():
    listed = set().union(*ROUND_TRIPPED_BY.values())
    concrete = node_classes() - ABSTRACT
    assert not (listed & set(NOT_SERIALIZABLE))
    missing = concrete - listed - set(NOT_SERIALIZABLE)
    assert not missing, f"node classes with neither a graph round-trip test nor a documented reason: {missing}"
    assert not (listed - concrete), f"listed names that are no node class: {listed - concrete}"


def test_many_families_graph_holds_the_classes_it_is_listed_for(device):
    drop, training = many_families_graph(device)
    # Per-type neuron nodes are CNNNeuronNode objects of the Python subclass they were made with.
    held = {type(n).__name__ for n in training.nodes}
    assert ROUND_TRIPPED_BY["many_families_graph"] <= held, ROUND_TRIPPED_BY["many_families_graph"] - held
