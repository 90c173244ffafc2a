"""Issue 29 (MPS parity II), items 1, 2, 4, 5, 7 and 13, and CNNBatchNormalization's returning forms.
(Item 3, legacy multi-image images in the gradient kernels: test_parity_ii_multi_image.py.)

1. **Labels wider than the loss source.** Apple's samples pass 12 label channels for a 10-class
   output (a labels buffer rounded up to a multiple of 4). Every loss path (CNNLoss, CNNYOLOLoss,
   NNForwardLoss / NNLossGradient, the graph's loss nodes, CNNLossLabels) reads the first C =
   source feature channels of the labels and weights; narrower ones are refused. Oracle: PyTorch
   for softmax cross-entropy (Apple's case), and for the other types the same loss run with
   labels of exactly C channels (checked against PyTorch in test_loss.py, test_split_loss.py and
   test_yolo_loss.py), while the extra channels hold values that would change every result.
2. **Batch normalization with constant statistics** (the data source's: CALCULATE_STATISTICS_NEVER
   in a training graph, or a state no statistics kernel ran on): dX = γ/√(σ²+ε)·G', dβ = ΣG',
   dγ = ΣG'·x̂ (spec §2.5). Oracle: PyTorch autograd through F.batch_norm(training=False) with the
   data source's mean and variance; the batch-statistics flags against F.batch_norm(training=True).
4. **NNDefaultPadding.padding_for_tensorflow_average_pooling()** sets the CLAMP edge mode, so
   TF-SAME average pooling averages the in-image pixels only. Oracle: PyTorch sum pooling of the
   zero-padded image divided by the number of in-image taps (TensorFlow's rule), autograd for dX.
5. **Temporary-image read counts** (spec §1.5): every kernel that reads a temporary image
   decrements it once. Every kernel class of serialization_cases.FACTORIES that reads images is
   run on temporary images of read count 1, which must end at 0; the batch normalization
   statistics kernels have a test of their own.

7. **The loss kernels are CNN kernels**: CNNLoss, CNNYOLOLoss, NNForwardLoss and NNInitialGradient
   are CNNKernels, NNLossGradient a CNNBinaryKernel; returning encodes allocate through
   destination_image_allocator (temporary images by default); non-default offsets / clip
   rectangles and the label-less generic encodes are refused.
13. **NNGraph debugging**: options (KernelOptions; VERBOSE prints debug_description at the first
   encode, once), debug_description (every node in encode order) and a one-line repr.

Also: CNNBatchNormalization.encode / encode_batch without destinations (the returning forms)
refuse sources with number_of_images > 1, as every returning form does (docs/api.md).

Tolerance: conftest.TOLERANCE (1e-4 relative to the largest oracle value) for float32 results
against float64 PyTorch; a wrong formula (a batch-statistics term, a full-window divisor, a
shifted label channel) is off by 1e-2 or more.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import persistent, randn, rng
from serialization_cases import FACTORIES, yolo_descriptor

T, R = m.CNNLossType, m.CNNReductionType
C_OUT, C_LABELS = 10, 12  # Apple's sample: a 10-class output, labels rounded up to 12 channels
JUNK = 7.5  # what the label channels beyond the source's hold: reading them changes every result


def _run(queue, fn):
    cb = queue.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return out


def _images(a, device):
    return [m.Image.from_numpy(np.ascontiguousarray(a[n:n + 1], np.float32), device) for n in range(a.shape[0])]


def _stack(images):
    return np.concatenate([i.to_numpy().reshape((1,) + i.to_numpy().shape[-3:]) for i in images])


def _widen(a, channels=C_LABELS, value=JUNK):
    """a (..., C) with channels - C more channels holding `value`."""
    extra = np.full(a.shape[:-1] + (channels - a.shape[-1],), value, np.float32)
    return np.concatenate([a.astype(np.float32), extra], axis=-1)


def _nchw(x):
    return torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)


def _nhwc(t):
    return np.transpose(t.detach().numpy(), (0, 2, 3, 1))


# ---- 1. labels wider than the loss source ------------------------------------------------------------


def _labels(device, t, weights=None, loss_size=None):
    """CNNLossLabels of one image from (H, W, C) arrays (descriptors: the data is copied)."""
    d = m.CNNLossDataDescriptor(np.ascontiguousarray(t, np.float32))
    w = None if weights is None else m.CNNLossDataDescriptor(np.ascontiguousarray(weights, np.float32))
    return m.CNNLossLabels(device, d, loss_size, w)


def _cnn_loss(device, queue, desc, y, t, w=None, per_element=False):
    """(gradient, loss) of CNNLoss over the batch y (N, H, W, C) with labels t (and weights w)."""
    n, h, wd, c = y.shape
    size = (wd, h, t.shape[-1] if per_element == "labels" else c) if per_element else None
    labels = [_labels(device, t[i], None if w is None else w[i], size) for i in range(n)]
    kernel = persistent(m.CNNLoss(device, desc))
    grads = _run(queue, lambda cb: kernel.encode_batch(cb, _images(y, device), labels))
    return _stack(grads), np.stack([la.loss_image.to_numpy()[..., :c] for la in labels])


def test_cnn_loss_reads_the_first_label_channels_softmax_cross_entropy(device, queue, check):
    """Apple's case: a 1x1x10 softmax cross-entropy output with 12-channel labels."""
    gen = rng("parity-wide-softmax")
    y = randn(gen, 3, 1, 1, C_OUT)
    t = np.eye(C_OUT, dtype=np.float32)[[2, 7, 0]].reshape(3, 1, 1, C_OUT)
    desc = m.CNNLossDescriptor(T.SOFTMAX_CROSS_ENTROPY, R.SUM)
    grad, loss = _cnn_loss(device, queue, desc, y, _widen(t))
    Y = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    per_image = -(torch.tensor(t, dtype=torch.float64) * torch.log_softmax(Y, -1)).flatten(1).sum(1)
    per_image.sum().backward()
    check(loss.reshape(3), per_image.detach().numpy(), "loss")
    check(grad, Y.grad.numpy(), "dL/dy")


@pytest.mark.parametrize("per_element", [False, "source", "labels"], ids=["sum", "none-source", "none-labels"])
@pytest.mark.parametrize("weighted", [False, True], ids=["scalar-weight", "wide-weights"])
@pytest.mark.parametrize("loss_type", [T.MEAN_SQUARED_ERROR, T.SIGMOID_CROSS_ENTROPY, T.SOFTMAX_CROSS_ENTROPY],
                         ids=lambda v: str(v).split(".")[-1])
def test_cnn_loss_wide_labels_equal_exact_labels(device, queue, check, loss_type, weighted, per_element):
    """Wide labels (and weights) give what labels of exactly the source's channels give; with
    reduction NONE the loss image may have the source's channels or the labels' (only the first C
    are written)."""
    gen = rng(f"parity-wide-{loss_type}-{weighted}-{per_element}")
    y, t = randn(gen, 2, 3, 2, C_OUT), gen.random((2, 3, 2, C_OUT)).astype(np.float32)
    w = gen.uniform(0.5, 2.0, y.shape).astype(np.float32) if weighted else None
    desc = m.CNNLossDescriptor(loss_type, R.NONE if per_element else R.SUM)
    exact = _cnn_loss(device, queue, desc, y, t, w, "source" if per_element else False)
    wide = _cnn_loss(device, queue, desc, y, _widen(t), None if w is None else _widen(w), per_element)
    check(wide[0], exact[0], "dL/dy")
    check(wide[1], exact[1], "loss")


def test_narrower_labels_and_weights_are_refused(device, queue):
    gen = rng("parity-narrow")
    y = _images(randn(gen, 1, 2, 2, C_OUT), device)
    desc = m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)
    kernel = persistent(m.CNNLoss(device, desc))
    cb = queue.command_buffer()
    narrow = _labels(device, np.zeros((2, 2, 8), np.float32))
    with pytest.raises(ValueError, match=r"labels: the labels image is 2 x 2 x 8 but the source image 2 x 2 x 10"):
        kernel.encode_batch(cb, y, [narrow])
    other_width = _labels(device, np.zeros((2, 3, C_LABELS), np.float32))
    with pytest.raises(ValueError, match="labels image is 3 x 2 x 12"):
        kernel.encode_batch(cb, y, [other_width])
    thin_weights = _labels(device, np.zeros((2, 2, C_LABELS), np.float32), np.ones((2, 2, 8), np.float32))
    with pytest.raises(ValueError, match="weights: the weights image is 2 x 2 x 8"):
        kernel.encode_batch(cb, y, [thin_weights])
    with pytest.raises(ValueError, match="loss_image_size"):  # more channels than the labels
        _labels(device, np.zeros((2, 2, C_LABELS), np.float32), None, (2, 2, 16))
    forward = persistent(m.NNForwardLoss(device, desc))
    with pytest.raises(ValueError, match="labels image is 2 x 2 x 8"):
        forward.encode_batch(cb, y, _images(np.zeros((1, 2, 2, 8), np.float32), device))
    cb.commit()
    cb.wait_until_completed()


@pytest.mark.parametrize("reduction", [R.SUM, R.NONE], ids=["sum", "none"])
def test_split_loss_reads_the_first_label_and_weight_channels(device, queue, check, reduction):
    """NNForwardLoss, NNLossGradient (predictions and labels gradients) with 12-channel labels and
    weights images equal the same kernels with 10-channel ones."""
    gen = rng(f"parity-split-wide-{reduction}")
    y, t = randn(gen, 2, 2, 3, C_OUT), gen.random((2, 2, 3, C_OUT)).astype(np.float32)
    w = gen.uniform(0.5, 2.0, y.shape).astype(np.float32)
    desc = m.CNNLossDescriptor(T.SIGMOID_CROSS_ENTROPY, reduction)

    def run(labels, weights, label_gradients):
        forward = persistent(m.NNForwardLoss(device, desc))
        gradient = persistent(m.NNLossGradient(device, desc))
        gradient.compute_label_gradients = label_gradients
        ys = _images(y, device)
        losses = _run(queue, lambda cb: forward.encode_batch(cb, ys, _images(labels, device), _images(weights, device)))
        seeds = _images(randn(rng("parity-split-seed"), *_stack(losses).shape), device)
        grads = _run(queue, lambda cb: gradient.encode_batch(cb, seeds, ys, _images(labels, device),
                                                              _images(weights, device)))
        return _stack(losses), _stack(grads)

    for label_gradients in (False, True):
        exact = run(t, w, label_gradients)
        wide = run(_widen(t), _widen(w), label_gradients)
        assert wide[1].shape == y.shape  # dL/dy or dL/dlabels: the source's size
        check(wide[0], exact[0], "forward loss")
        check(wide[1], exact[1], "labels gradient" if label_gradients else "predictions gradient")


class Handle:
    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


def test_graph_loss_nodes_read_the_first_label_channels(device, check):
    """CNNLossNode (labels as CNNLossLabels source states) and NNForwardLossNode (labels as an
    image) in training graphs: dL/dx with wide labels equals dL/dx with exact ones."""
    gen = rng("parity-graph-wide")
    x, t = randn(gen, 2, 2, 2, C_OUT), gen.random((2, 2, 2, C_OUT)).astype(np.float32)
    desc = m.CNNLossDescriptor(T.SOFTMAX_CROSS_ENTROPY, R.SUM)

    def cnn_loss_node(labels):
        loss = m.CNNLossNode(m.CNNNeuronTanHNode(m.NNImageNode()).result_image, desc)
        graph = m.NNGraph(device, loss.training_graph()[0].result_image)
        graph.format = m.ImageFeatureChannelFormat.FLOAT32
        states = [_labels(device, labels[i]) for i in range(labels.shape[0])]
        return _stack(_run(m.CommandQueue(device), lambda cb: graph.encode_batch(cb, [_images(x, device)], [states])))

    def forward_loss_node(labels):
        predictions = m.CNNNeuronTanHNode(m.NNImageNode(Handle("x"))).result_image
        loss = m.NNForwardLossNode(predictions, m.NNImageNode(Handle("t")), desc)
        terminal = m.NNInitialGradientNode(loss.result_image).training_graph()
        graph = m.NNGraph(device, terminal[0].result_image)
        graph.format = m.ImageFeatureChannelFormat.FLOAT32
        arrays = {"x": x, "t": labels}
        return _stack(_run(m.CommandQueue(device), lambda cb: graph.encode_batch(
            cb, [_images(arrays[h.label()], device) for h in graph.source_image_handles])))

    for build in (cnn_loss_node, forward_loss_node):
        exact, wide = build(t), build(_widen(t))
        check(wide, exact, build.__name__)
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (-(torch.tensor(t, dtype=torch.float64) * torch.log_softmax(torch.tanh(X), -1)).sum()).backward()
    check(wide, X.grad.numpy(), "dL/dx against autograd")


def test_yolo_loss_reads_the_first_label_channels(device, queue, check):
    """CNNYOLOLoss (2 anchors, 3 classes: 16 channels) with 20-channel labels."""
    desc = yolo_descriptor()
    gen = rng("parity-yolo-wide")
    y = randn(gen, 2, 3, 2, 16) * 0.5
    t = gen.random((2, 3, 2, 16)).astype(np.float32)

    def run(labels):
        kernel = persistent(m.CNNYOLOLoss(device, desc))
        states = [_labels(device, labels[i]) for i in range(2)]
        grads = _run(queue, lambda cb: kernel.encode_batch(cb, _images(y, device), states))
        return _stack(grads), np.array([s.loss_image.to_numpy().ravel()[0] for s in states])

    exact, wide = run(t), run(_widen(t, 20))
    check(wide[0], exact[0], "dL/dy")
    check(wide[1], exact[1], "loss")
    with pytest.raises(ValueError, match="labels: the labels image is 2 x 3 x 12"):
        run(t[..., :12].copy())


# ---- 2. batch normalization with constant statistics -------------------------------------------------


def _bn_problem(seed, c=5):
    gen = rng(seed)
    x = (randn(gen, 2, 3, 4, c) * 1.5 + 0.5).astype(np.float32)
    g = randn(gen, 2, 3, 4, c)
    gamma = (1.0 + 0.5 * randn(gen, c)).astype(np.float32)
    beta = (0.3 * randn(gen, c)).astype(np.float32)
    mean = (0.2 * randn(gen, c)).astype(np.float32)
    variance = (0.5 + gen.random(c)).astype(np.float32)
    return x, g, gamma, beta, mean, variance


def _torch_bn(x, g, gamma, beta, mean, variance, eps, training, neuron=None):
    """Y, dX, dγ, dβ of sum(f(batch_norm(x)) · g) by autograd (float64)."""
    X = _nchw(x).requires_grad_(True)
    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    rm, rv = torch.tensor(mean, dtype=torch.float64), torch.tensor(variance, dtype=torch.float64)
    Y = F.batch_norm(X, None if training else rm, None if training else rv, W, B, training=training, eps=eps)
    if neuron == "relu":
        Y = torch.relu(Y)
    (Y * _nchw(g)).sum().backward()
    return _nhwc(Y), _nhwc(X.grad), W.grad.numpy(), B.grad.numpy()


@pytest.mark.parametrize("neuron", [None, "relu"])
@pytest.mark.parametrize("with_statistics_gradient", [True, False], ids=["stats-gradient", "no-stats-gradient"])
def test_kernel_gradient_with_constant_statistics(device, queue, check, neuron, with_statistics_gradient):
    """The forward with a state but no statistics kernel normalizes with the data source's mean and
    variance; the gradient (training_statistics left at True) must then be γ/√(σ²+ε)·G', and the
    statistics gradient's dγ, dβ use x̂ of those constants. dX needs no statistics gradient."""
    x, g, gamma, beta, mean, variance = _bn_problem(f"parity-bn-const-{neuron}")
    eps = 1e-3
    desc = m.NNNeuronDescriptor(m.CNNNeuronType.RELU) if neuron else None
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance, epsilon=eps)
    forward = m.CNNBatchNormalization(device, source, desc)
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device, desc)
    gradient = m.CNNBatchNormalizationGradient(device, desc)
    assert gradient.training_statistics
    for k in (forward, gradient):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    xs, gs = _images(x, device), _images(g, device)
    state = forward.result_state(xs[0])

    def encode(cb):
        ys = forward.encode_batch(cb, xs, state)
        if with_statistics_gradient:
            statistics_gradient.encode_batch(cb, gs, xs, state)
        return ys, gradient.encode_batch(cb, gs, xs, [state] * len(xs))

    ys, dxs = _run(queue, encode)
    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch_bn(x, g, gamma, beta, mean, variance, eps, False, neuron)
    check(_stack(ys), y_ref, "forward")
    check(_stack(dxs), dx_ref, "dX")
    if with_statistics_gradient:
        check(state.gradient_for_gamma, dgamma_ref, "gradient_for_gamma")
        check(state.gradient_for_beta, dbeta_ref, "gradient_for_beta")


def _bn_graph(device, flags, gamma, beta, mean, variance, eps, training):
    """x -> CNNBatchNormalizationNode(flags) [-> MSE (SUM) loss -> its training graph]."""
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance, epsilon=eps)
    bn = m.CNNBatchNormalizationNode(m.NNImageNode(), source)
    bn.flags = flags
    bn.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    result = bn.result_image
    if training:
        loss = m.CNNLossNode(result, m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM))
        result = loss.training_graph()[0].result_image
    graph = m.NNGraph(device, result)
    graph.format = m.ImageFeatureChannelFormat.FLOAT32
    return graph


FLAGS = [m.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_NEVER, m.CNNBatchNormalizationFlags.DEFAULT,
         m.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS]


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: str(f).split(".")[-1])
def test_training_graph_batch_normalization_flags(device, check, flags):
    """In a training graph, NEVER normalizes with the data source's statistics and must
    differentiate with them as constants; AUTOMATIC (DEFAULT) and ALWAYS use the batch's."""
    x, _, gamma, beta, mean, variance = _bn_problem(f"parity-bn-graph-{flags}")
    target = randn(rng(f"parity-bn-graph-t-{flags}"), *x.shape)
    eps = 1e-3
    graph = _bn_graph(device, flags, gamma, beta, mean, variance, eps, training=True)
    labels = [_labels(device, target[i]) for i in range(x.shape[0])]
    dx = _stack(_run(m.CommandQueue(device), lambda cb: graph.encode_batch(cb, [_images(x, device)], [labels])))
    training = flags != m.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_NEVER
    X = _nchw(x).requires_grad_(True)
    rm, rv = torch.tensor(mean, dtype=torch.float64), torch.tensor(variance, dtype=torch.float64)
    Y = F.batch_norm(X, None if training else rm, None if training else rv, torch.tensor(gamma, dtype=torch.float64),
                     torch.tensor(beta, dtype=torch.float64), training=training, eps=eps)
    ((Y - _nchw(target)) ** 2).sum().backward()
    check(dx, _nhwc(X.grad), "dL/dx")


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: str(f).split(".")[-1])
def test_inference_graph_batch_normalization_flags(device, check, flags):
    """In an inference graph, AUTOMATIC (DEFAULT) and NEVER use the data source's statistics,
    ALWAYS the batch's."""
    x, g, gamma, beta, mean, variance = _bn_problem(f"parity-bn-inference-{flags}")
    eps = 1e-3
    graph = _bn_graph(device, flags, gamma, beta, mean, variance, eps, training=False)
    y = _stack(_run(m.CommandQueue(device), lambda cb: graph.encode_batch(cb, [_images(x, device)])))
    training = flags == m.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS
    check(y, _torch_bn(x, g, gamma, beta, mean, variance, eps, training)[0], "forward")


def test_batch_normalization_returning_forms_need_single_images(device, queue):
    """encode / encode_batch without destinations return one single-image destination per source,
    so a multi-image source (which would come back as its image 0 only) is refused."""
    x, _, gamma, beta, mean, variance = _bn_problem("parity-bn-returning")
    forward = m.CNNBatchNormalization(device, m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance))
    multi = m.Image(device, m.ImageDescriptor(width=4, height=3, feature_channels=5, number_of_images=2))
    state = forward.result_state(_images(x, device)[0])
    cb = queue.command_buffer()
    for encode in (lambda: forward.encode(cb, multi), lambda: forward.encode(cb, multi, state),
                   lambda: forward.encode_batch(cb, [multi]), lambda: forward.encode_batch(cb, [multi], state)):
        with pytest.raises(ValueError, match="number_of_images == 1"):
            encode()
    single = _images(x, device)
    ys = forward.encode_batch(cb, single, state)  # single images still work
    assert [y.number_of_images for y in ys] == [1, 1]
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error


# ---- 4. TensorFlow SAME average pooling ----------------------------------------------------------------


def _tf_same_average(x, g, k, s):
    """TensorFlow's SAME average pooling of x (N, H, W, C) and its gradient for the incoming g:
    windows over the zero-padded image (extra padding at the bottom / right) divided by their
    in-image taps."""
    n, h, w, c = x.shape
    pads = []
    for size in (w, h):  # F.pad's order: last axis first
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    X = _nchw(x).requires_grad_(True)
    sums = F.avg_pool2d(F.pad(X, pads), k, s) * k * k
    counts = F.avg_pool2d(F.pad(torch.ones_like(X), pads), k, s) * k * k
    Y = sums / counts
    (Y * _nchw(g)).sum().backward()
    return _nhwc(Y), _nhwc(X.grad)


@pytest.mark.parametrize("k,s,h,w", [(3, 2, 7, 8), (2, 2, 5, 7), (3, 1, 4, 5)])
def test_tensorflow_average_pooling_padding_averages_in_image_pixels(device, queue, check, k, s, h, w):
    x = randn(rng(f"parity-tf-avg-{k}-{s}-{h}-{w}"), 2, h, w, 3)
    padding = m.NNDefaultPadding.padding_for_tensorflow_average_pooling()
    forward, gradient = m.CNNPoolingAverage(device, k, k, s, s), m.CNNPoolingAverageGradient(device, k, k, s, s)
    # The policy survives serialization (its method is all a kernel blob stores).
    forward.padding = padding
    forward = m.Kernel.from_bytes(forward.to_bytes(), device)
    for kernel in (forward, gradient):
        kernel.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    g_shape = (1, -(-h // s), -(-w // s), 3)
    g = randn(rng(f"parity-tf-avg-g-{k}-{s}-{h}-{w}"), 2, *g_shape[1:])

    def encode(cb):
        ys, states = forward.encode_batch(cb, xs, destination_state_is_temporary=False)
        return ys, gradient.encode_batch(cb, m.batch_from_numpy(g, device), xs, states)

    ys, dxs = _run(queue, encode)
    y_ref, dx_ref = _tf_same_average(x, g, k, s)
    check(m.batch_to_numpy(ys), y_ref, "forward")
    check(m.batch_to_numpy(dxs), dx_ref, "dX")
    # How (docs/api.md): the policy's custom step set CLAMP on the kernel.
    assert forward.edge_mode == m.ImageEdgeMode.CLAMP
    P = m.PaddingMethod
    assert int(padding.padding_method()) == int(P.SIZE_SAME | P.ALIGN_CENTERED | P.ADD_REMAINDER_TO_BOTTOM_RIGHT
                                                | P.CUSTOM | P.CUSTOM_WHITELIST_FOR_NODE_FUSION)


# ---- 5. temporary-image read counts ---------------------------------------------------------------------

H5, W5 = 7, 9  # serialization_cases' kernels are configured for 7x9x8 images
CHANNELS = {"CNNNeuron[prelu]": 4, "CNNNeuronPReLU": 4, "CNNBatchNormalization": 4,
            "CNNBatchNormalizationStatistics": 4, "CNNInstanceNormalization": 6,
            "CNNGroupNormalization": 6, "CNNYOLOLoss": 16}


def _temporary(device, cb, array):
    """A TemporaryImage of read count 1 holding array (1, H, W, C), written by a copy kernel (a
    write: it leaves the read count alone)."""
    _, h, w, c = array.shape
    t = m.TemporaryImage(cb, m.ImageDescriptor(width=w, height=h, feature_channels=c))
    m.CNNNeuronLinear(device, 1.0, 0.0).encode(cb, m.Image.from_numpy(array.astype(np.float32), device),
                                             destination_image=t)
    assert t.read_count == 1
    return t


def _input(name, seed="parity-rc", positive=False):
    c = CHANNELS.get(re.sub(r"(Gradient)?(\[.*\])?$", "", name), CHANNELS.get(name, 8))
    a = randn(rng(f"{seed}-{name}"), 1, H5, W5, c)
    return np.abs(a) + 0.5 if positive else a


def _forward_name(name):
    return re.sub(r"\[(True|False)\]$", "", name).replace("Gradient", "")


def _reads_unary(device, cb, kernel, name):
    t = _temporary(device, cb, _input(name, positive=True))
    if isinstance(kernel, m.CNNBatchNormalizationStatistics):
        kernel.encode_batch(cb, [t], m.CNNBatchNormalization(device, _bn_source()).result_state(t))
    else:
        kernel.encode_batch(cb, [t])
    return [t]


def _bn_source(c=4):
    return m.CNNBatchNormalizationWeightsDataSource(np.ones(c, np.float32), np.zeros(c, np.float32),
                                                    np.zeros(c, np.float32), np.ones(c, np.float32))


def _forward_for(device, name):
    """The forward kernel whose state the gradient kernel `name` takes (None: not generic)."""
    if name.startswith("CNNNeuronGradient"):
        return m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.ELU, a=0.7))
    if name.startswith("CNNBatchNormalization"):
        return m.CNNBatchNormalization(device, _bn_source(), m.NNNeuronDescriptor(m.CNNNeuronType.TANH))
    if name == "CNNConcatenationGradient":
        return FACTORIES["CNNConcatenation"](device)
    forward = _forward_name(name)
    return FACTORIES[forward](device) if forward in FACTORIES else None


def _reads_gradient(device, cb, kernel, name):
    forward = _forward_for(device, name)
    forward.destination_image_allocator = m.ImageAllocator.persistent()
    array = _input(name, positive=True).astype(np.float32)
    x = m.Image.from_numpy(array, device)
    if isinstance(forward, m.CNNBinaryKernel):
        ys, states = forward.encode_batch(cb, [x], [x], destination_state_is_temporary=False)
    elif isinstance(forward, m.CNNMultiaryKernel):
        ys, states = forward.encode_batch(cb, [[x], [x], [x]], destination_state_is_temporary=False)
    elif isinstance(forward, m.CNNBatchNormalization):
        states = [forward.result_state(x)]
        ys = forward.encode_batch(cb, [x], states[0])
    else:
        ys, states = forward.encode_batch(cb, [x], destination_state_is_temporary=False)
    y = ys[0]
    g = _temporary(device, cb, randn(rng(f"parity-rc-g-{name}"), 1, y.height, y.width, y.feature_channels))
    xt = _temporary(device, cb, array)
    if isinstance(kernel, m.CNNBatchNormalizationStatisticsGradient):
        kernel.encode_batch(cb, [g], [xt], states[0])
    else:
        kernel.encode_batch(cb, [g], [xt], states)
    return [g, xt]


def _reads_loss(device, cb, kernel, name):
    y = _temporary(device, cb, _input(name))
    if isinstance(kernel, m.NNInitialGradient):
        kernel.encode_batch(cb, [y])
        return [y]
    if isinstance(kernel, (m.CNNLoss, m.CNNYOLOLoss)):
        kernel.encode_batch(cb, [y], [_labels(device, _input(name, "parity-rc-t")[0])])
        return [y]
    t, w = _temporary(device, cb, _input(name, "parity-rc-t")), _temporary(device, cb, _input(name, "parity-rc-w"))
    if isinstance(kernel, m.NNForwardLoss):
        kernel.encode_batch(cb, [y], [t], [w])
        return [y, t, w]
    per_element = kernel.reduction_type == R.NONE  # the seed gradient has the forward loss's size
    seed = _temporary(device, cb, np.ones((1, H5, W5, y.feature_channels) if per_element else (1, 1, 1, 1),
                                          np.float32))
    kernel.encode_batch(cb, [seed], [y], [t], [w])
    return [seed, y, t, w]


def _reads_binary(device, cb, kernel, name):
    a = _temporary(device, cb, _input(name, positive=True))
    b = _temporary(device, cb, _input(name, "parity-rc-b", positive=True))
    kernel.encode_batch(cb, [a], [b])
    return [a, b]


def _reads_multiary(device, cb, kernel, name):
    sources = [_temporary(device, cb, _input(name, f"parity-rc-{i}")) for i in range(3)]
    kernel.encode_batch(cb, [[s] for s in sources])
    return sources


def _runner(kernel):
    if isinstance(kernel, (m.CNNLoss, m.CNNYOLOLoss, m.NNLossKernel, m.NNInitialGradient)):
        return _reads_loss
    if isinstance(kernel, m.CNNGradientKernel):
        return _reads_gradient
    if isinstance(kernel, m.CNNMultiaryKernel):
        return _reads_multiary
    if isinstance(kernel, m.CNNBinaryKernel):
        return _reads_binary
    return _reads_unary


# Every kernel class but the optimizers, which read vectors and states, no images.
READERS = sorted(name for name in FACTORIES if not name.startswith("NNOptimizer"))


@pytest.mark.parametrize("name", READERS)
def test_every_kernel_decrements_its_temporary_sources(device, queue, name):
    kernel = FACTORIES[name](device)
    runner = _runner(kernel)
    cb = queue.command_buffer()
    temporaries = runner(device, cb, kernel, name)
    assert [t.read_count for t in temporaries] == [0] * len(temporaries), name
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error


def test_batch_normalization_statistics_kernels_decrement_temporary_images(device, queue, check):
    """The statistics kernels read their images (and still compute on them), so each temporary
    image's read count drops by one; a second read at 0 is refused."""
    x, g, gamma, beta, mean, variance = _bn_problem("parity-bn-read-count", c=4)
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance, epsilon=1e-3)
    forward = m.CNNBatchNormalization(device, source)
    statistics = m.CNNBatchNormalizationStatistics(device)
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device)
    state = forward.result_state(_images(x, device)[0])
    cb = queue.command_buffer()
    xt = [_temporary(device, cb, x[i:i + 1]) for i in range(2)]
    for t in xt:
        t.read_count = 2  # the statistics, then the forward
    statistics.encode_batch(cb, xt, state)
    assert [t.read_count for t in xt] == [1, 1]
    forward.encode_batch(cb, xt, state, _images(np.zeros_like(x), device))
    assert [t.read_count for t in xt] == [0, 0]
    with pytest.raises(ValueError, match="read_count"):
        statistics.encode_batch(cb, xt, state)
    gt = [_temporary(device, cb, g[i:i + 1]) for i in range(2)]
    xs = [_temporary(device, cb, x[i:i + 1]) for i in range(2)]
    statistics_gradient.encode_batch(cb, gt, xs, state)
    assert [t.read_count for t in gt + xs] == [0] * 4
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    check(state.gradient_for_beta, g.astype(np.float64).sum(axis=(0, 1, 2)), "gradient_for_beta")


# ---- 13. NNGraph debugging: options, debug_description, repr ----------------------------------------


class _Handle:
    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


def _debug_graph(device):
    x = m.NNImageNode(_Handle("x"))
    pool = m.CNNPoolingMaxNode(x, 2)
    pool.label = "pool"
    relu = m.CNNNeuronReLUNode(pool.result_image)
    scale = m.NNImageNode(_Handle("scale"))
    add = m.NNAdditionNode(relu.result_image, scale)
    graph = m.NNGraph(device, add.result_image, True)
    graph.label = "debug"
    return graph


def test_graph_repr_and_debug_description(device):
    graph = _debug_graph(device)
    assert repr(graph) == (f"<NNGraph 'debug' on {device.name}: 3 filter node(s), 2 source image(s), "
                           "0 source state(s)>")
    lines = graph.debug_description.splitlines()
    assert lines[0] == f"NNGraph 'debug' on {device.name}: 3 filter node(s), intermediates FLOAT16"
    assert lines[1] == "  source images: 'x', 'scale'"
    # every node in encode order, its inputs by handle label or number, its result
    assert lines[2].startswith("  [0] CNNPoolingMaxNode 'pool' ('x') -> image 1")
    assert lines[3].startswith("  [1] CNNNeuronReLUNode (image 1) -> image 2")
    assert lines[4].startswith("  [2] NNAdditionNode (image 2, 'scale') -> image 3")
    assert lines[5] == "  results: image 3"
    assert len(lines) == 6


def test_graph_debug_description_shows_training_styles(device):
    x = m.NNImageNode(_Handle("x"))
    from test_graph import ConvSource
    source = ConvSource(randn(rng("debug-w"), 3, 1, 1, 2), np.zeros(3, np.float32), 0.1)
    conv = m.CNNConvolutionNode(x, source)
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    graph = m.NNGraph(device, conv.result_image, True)
    assert "training UPDATE_DEVICE_CPU" in graph.debug_description


def test_graph_verbose_option_prints_the_description_once(device, capfd):
    graph = _debug_graph(device)
    assert graph.options == 0
    queue = m.CommandQueue(device)

    def encode():
        cb = queue.command_buffer()
        graph.encode(cb, [m.Image.from_numpy(randn(rng("debug-x"), 1, 4, 4, 3), device),
                          m.Image.from_numpy(randn(rng("debug-s"), 1, 2, 2, 3), device)])
        cb.commit()
        cb.wait_until_completed()

    encode()
    assert "NNGraph 'debug'" not in capfd.readouterr().err  # not verbose: silent
    graph.options = m.KernelOptions.VERBOSE
    assert graph.options == m.KernelOptions.VERBOSE
    encode()
    encode()
    err = capfd.readouterr().err
    assert err.count("NNGraph 'debug'") == 1 and graph.debug_description in err
    with pytest.raises((TypeError, ValueError), match="options"):
        graph.options = "verbose"
    with pytest.raises((TypeError, ValueError), match="options"):
        graph.options = -1


# ---- 7. the loss kernels are CNN kernels --------------------------------------------------------------


def _loss_kernels(device):
    """(kernel, returning encode(cb, y) -> images) for every loss kernel class."""
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.MEAN)
    t = randn(rng("loss-cnn-t"), 1, 3, 4, 5)

    def labels():
        return _labels(device, t[0])

    def labels_image():
        return m.Image.from_numpy(t, device)

    cnn, forward = m.CNNLoss(device, desc), m.NNForwardLoss(device, desc)
    gradient, initial = m.NNLossGradient(device, desc), m.NNInitialGradient(device)
    seed = m.Image.from_numpy(np.ones((1, 1, 1, 1), np.float32), device)
    return [
        (cnn, lambda cb, y: [cnn.encode(cb, y, labels())]),
        (forward, lambda cb, y: forward.encode_batch(cb, [y], [labels_image()])),
        (gradient, lambda cb, y: gradient.encode_batch(cb, [seed], [y], [labels_image()])),
        (initial, lambda cb, y: [initial.encode(cb, y)]),
    ]


def test_loss_kernels_are_cnn_kernels(device):
    desc = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.MEAN)
    for k in (m.CNNLoss(device, desc), m.NNForwardLoss(device, desc), m.NNInitialGradient(device),
              m.CNNYOLOLoss(device, yolo_descriptor())):
        assert isinstance(k, m.CNNKernel), type(k).__name__
    assert isinstance(m.NNLossGradient(device, desc), m.CNNBinaryKernel)
    assert isinstance(m.NNForwardLoss(device, desc), m.NNLossKernel)
    assert isinstance(m.NNLossGradient(device, desc), m.NNLossKernel)
    # the split loss properties still work through the second base
    k = m.NNLossGradient(device, desc)
    k.weight = 0.5
    assert k.weight == 0.5 and k.loss_type == m.CNNLossType.MEAN_SQUARED_ERROR


def test_loss_kernels_returning_forms_use_the_destination_allocator(device, queue, check):
    """Temporary images by default (as every MPSCNNKernel), usable by a later kernel of the same
    command buffer; a persistent or custom allocator is used when set."""
    y = m.Image.from_numpy(randn(rng("loss-cnn-y"), 1, 3, 4, 5), device)
    calls = []

    class Counting(m.ImageAllocator):
        def image_for_command_buffer(self, cb, descriptor, kernel):
            calls.append(type(kernel).__name__)
            return m.Image(cb.device, descriptor)

    for kernel, encode in _loss_kernels(device):
        name = type(kernel).__name__
        cb = queue.command_buffer()
        out = encode(cb, y)
        assert all(i.is_temporary and i.read_count == 1 for i in out), name
        copy = m.CNNNeuronLinear(device, 1.0, 0.0)
        copy.destination_image_allocator = m.ImageAllocator.persistent()
        copies = [copy.encode(cb, i) for i in out]  # reads them: read count 0
        assert all(i.read_count == 0 for i in out), name
        kernel.destination_image_allocator = m.ImageAllocator.persistent()
        persistent = encode(cb, y)
        kernel.destination_image_allocator = Counting()
        custom = encode(cb, y)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        assert not any(i.is_temporary for i in persistent + custom), name
        assert calls[-1] == name
        for a in copies + custom:
            check(a.to_numpy(), persistent[0].to_numpy(), f"{name}: the same result whatever the allocator")


def test_loss_kernels_refuse_offsets_and_the_generic_encodes(device, queue):
    y = m.Image.from_numpy(randn(rng("loss-cnn-y"), 1, 3, 4, 5), device)
    for kernel, encode in _loss_kernels(device):
        name = type(kernel).__name__
        cb = queue.command_buffer()
        prop = "primary_offset" if isinstance(kernel, m.CNNBinaryKernel) else "offset"
        setattr(kernel, prop, (1, 0, 0))
        with pytest.raises(ValueError, match=prop):
            encode(cb, y)
        setattr(kernel, prop, (0, 0, 0))
        kernel.clip_rect = ((0, 0, 0), (1, 1, 1))
        with pytest.raises(ValueError, match="clip_rect"):
            encode(cb, y)
        kernel.clip_rect = m.RECT_NO_CLIP
        if not isinstance(kernel, (m.CNNLoss, m.NNInitialGradient)):  # their encode takes labels / is theirs
            with pytest.raises(TypeError):
                kernel.encode(cb, y, y) if isinstance(kernel, m.CNNBinaryKernel) else kernel.encode(cb, y)
        cb.commit()
        cb.wait_until_completed()


def test_loss_kernels_destination_image_descriptor(device):
    y = m.Image.from_numpy(randn(rng("loss-cnn-y"), 1, 3, 4, 5), device)
    g = m.Image.from_numpy(np.ones((1, 1, 1, 1), np.float32), device)
    mean = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.MEAN)
    none = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.NONE)
    shape = lambda d: (d.width, d.height, d.feature_channels)  # noqa: E731
    assert shape(m.NNForwardLoss(device, mean).destination_image_descriptor([y])) == (1, 1, 1)
    assert shape(m.NNForwardLoss(device, none).destination_image_descriptor([y])) == (4, 3, 5)
    assert shape(m.NNLossGradient(device, mean).destination_image_descriptor([g, y])) == (4, 3, 5)
    assert shape(m.CNNLoss(device, mean).destination_image_descriptor([y])) == (4, 3, 5)
