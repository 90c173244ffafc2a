"""The graph API (issue 15): inference graphs against the same kernels run by hand and PyTorch,
training graphs (training_graph) against PyTorch autograd, read counts and misuse errors.

Tolerance: float32 kernels against float64 PyTorch, relative 1e-4 of the largest magnitude."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import FLOAT16, FLOAT16_TOLERANCE, randn, rng

N, H, W, CIN, COUT = 2, 6, 6, 3, 4


class Handle:
    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


class ConvSource:
    """A convolution data source (OHWI weights) with the optional CPU-style update (SGD)."""

    def __init__(self, w, b, lr=0.0):
        self.w, self.b, self.lr = w.astype(np.float32), b.astype(np.float32), lr
        self.updates = 0

    def descriptor(self):
        o, kh, kw, i = self.w.shape
        return m.CNNConvolutionDescriptor(kw, kh, i, o)

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def load(self):
        return True

    def purge(self):
        pass

    def update_with_gradient_state(self, gradient_state, source_state):
        self.updates += 1
        self.w -= self.lr * np.asarray(gradient_state.gradient_for_weights).reshape(self.w.shape)
        self.b -= self.lr * np.asarray(gradient_state.gradient_for_biases).reshape(self.b.shape)
        return True



def exact_graph(device, *args, **kwargs):
    """An NNGraph with FLOAT32 intermediates, for the tests that compare with torch at float32
    tolerances (the default FLOAT16 intermediates round every intermediate to 11 bits)."""
    graph = m.NNGraph(device, *args, **kwargs)
    graph.format = m.ImageFeatureChannelFormat.FLOAT32
    return graph

def images(device, x):
    return [m.Image.from_numpy(x[i:i + 1], device) for i in range(x.shape[0])]


def to_numpy(batch):
    return m.batch_to_numpy(batch)


def nchw(x):
    return torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)


def nhwc(t):
    return t.detach().permute(0, 2, 3, 1).numpy()


def close(actual, expected, rel=1e-4):
    if FLOAT16:  # FLOAT16 graph inputs (MPSGRAD_TEST_IMAGE_FORMAT=float16): conftest.FLOAT16_TOLERANCE
        rel = max(rel, FLOAT16_TOLERANCE)
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, atol=rel * scale, rtol=0)


def run(device, graph, xs, states=None):
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out = graph.encode_batch(cb, [xs] if not isinstance(xs[0], list) else xs, states)
    cb.commit()
    cb.wait_until_completed()
    return out


def conv_problem(seed):
    gen = rng(seed)
    x = randn(gen, N, H, W, CIN)
    w = randn(gen, COUT, 3, 3, CIN) * 0.3
    b = randn(gen, COUT) * 0.1
    return x, w, b


def test_inference_chain_equals_kernels_by_hand_and_torch(device):
    x, w, b = conv_problem("graph-chain")
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, ConvSource(w, b))
    relu = m.CNNNeuronReLUNode(conv.result_image)
    pool = m.CNNPoolingMaxNode(relu.result_image, filter_size=2)
    graph = exact_graph(device, pool.result_image)
    assert [h.label() for h in graph.source_image_handles] == ["x"]
    xs = images(device, x)
    ys = to_numpy(run(device, graph, xs))

    # The same kernels by hand (pooling with edge mode clamp, as the graph node's default).
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    k_conv = m.CNNConvolution(device, ConvSource(w, b))
    k_relu = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    k_pool = m.CNNPoolingMax(device, 2, 2, 2, 2)
    k_pool.edge_mode = m.ImageEdgeMode.CLAMP
    k_pool.destination_image_allocator = m.ImageAllocator.persistent()  # read after the wait
    hand = k_pool.encode_batch(cb, k_relu.encode_batch(cb, k_conv.encode_batch(cb, images(device, x))))
    cb.commit()
    cb.wait_until_completed()
    # The graph's result is FLOAT32; with FLOAT16 inputs the kernels by hand write half, which is the
    # float32 result rounded once (docs/float16.md).
    np.testing.assert_array_equal(ys.astype(np.float16) if FLOAT16 else ys, to_numpy(hand))

    ref = F.max_pool2d(F.relu(F.conv2d(nchw(x), torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),
                                       torch.tensor(b, dtype=torch.float64), padding=1)), 2)
    close(ys, nhwc(ref))


def test_temporary_source_read_count_decremented_once(device):
    source = m.NNImageNode()
    # x is read by two nodes; the graph still takes one read count per encode.
    add = m.NNAdditionNode(m.CNNNeuronTanHNode(source).result_image, m.CNNNeuronReLUNode(source).result_image)
    graph = m.NNGraph(device, add.result_image)
    assert graph.read_count_for_source_image_at_index(0) == 1
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    desc = m.ImageDescriptor(width=W, height=H, feature_channels=CIN)
    xs = [m.TemporaryImage(cb, desc) for _ in range(N)]
    for t in xs:
        t.read_count = 2
    graph.encode_batch(cb, [xs])
    assert [t.read_count for t in xs] == [1] * N
    cb.commit()
    cb.wait_until_completed()


def test_execute_async_calls_handler_once(device):
    x, w, b = conv_problem("graph-async")
    source = m.NNImageNode()
    graph = m.NNGraph(device, m.CNNNeuronSigmoidNode(source).result_image)
    calls = []
    done = threading.Event()

    def handler(image, error):
        calls.append((image, error))
        done.set()

    result = graph.execute_async([images(device, x)[0]], handler)
    if device.name == "metal":
        # The emulated Metal device runs a command buffer only when the host waits for it
        # (docs/metal.md); on the CPU the handler must come without any wait.
        m.synchronize()
    assert done.wait(30)
    assert len(calls) == 1 and calls[0][1] is None and calls[0][0] is result
    close(result.to_numpy()[0], 1.0 / (1.0 + np.exp(-x[0].astype(np.float64))))


# ---- training graphs ---------------------------------------------------------------------------


class RecordingSource(ConvSource):
    """Records the weight and bias gradients the CPU-style update receives (lr 0: weights fixed)."""

    def __init__(self, w, b, lr=0.0):
        super().__init__(w, b, lr)
        self.dw = self.db = None

    def update_with_gradient_state(self, gradient_state, source_state):
        self.dw = np.array(gradient_state.gradient_for_weights).reshape(self.w.shape)
        self.db = np.array(gradient_state.gradient_for_biases).reshape(self.b.shape)
        return super().update_with_gradient_state(gradient_state, source_state)


def labels_for(device, target):
    return [m.CNNLossLabels(device, m.CNNLossDataDescriptor(target[i])) for i in range(target.shape[0])]


def mse_loss_node(out):
    return m.CNNLossNode(out, m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM))


def run_training(device, terminal, xs, labels):
    graph = exact_graph(device, [t.result_image for t in terminal])
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out, inter, _ = graph.encode_batch(cb, xs, [labels], return_intermediates=True)
    cb.commit()
    cb.wait_until_completed()
    return graph, out, inter


def torch_weight(w):
    return torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2).clone().requires_grad_(True)


def test_training_graph_chain_matches_autograd(device):
    x, w, b = conv_problem("graph-train-chain")
    target = randn(rng("graph-train-chain-t"), N, H, W, COUT)
    ds = RecordingSource(w, b)
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, ds)
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    tanh = m.CNNNeuronTanHNode(conv.result_image)
    loss = mse_loss_node(tanh.result_image)
    seen = []
    terminal = loss.training_graph(node_handler=lambda g, f, s, gs: seen.append((type(g).__name__, s)))
    assert [type(t).__name__ for t in terminal] == ["CNNConvolutionGradientNode"]
    assert terminal[0].training_style == m.NNTrainingStyle.UPDATE_DEVICE_CPU  # propagated
    assert [name for name, _ in seen] == ["CNNNeuronGradientNode", "CNNConvolutionGradientNode"]
    # The custom handler replaced the default one: no handle copied.
    assert terminal[0].result_image.handle is None
    xs = images(device, x)
    _, dx, _ = run_training(device, terminal, [xs], labels_for(device, target))
    assert ds.updates == 1

    X = nchw(x).requires_grad_(True)
    Wt, Bt = torch_weight(w), torch.tensor(b, dtype=torch.float64, requires_grad=True)
    ((torch.tanh(F.conv2d(X, Wt, Bt, padding=1)) - nchw(target)) ** 2).sum().backward()
    close(to_numpy(dx), nhwc(X.grad))
    close(ds.dw, Wt.grad.permute(0, 2, 3, 1).numpy())
    close(ds.db, Bt.grad.numpy())


def test_training_graph_residual_sums_gradients(device):
    """x feeds the convolution and the addition: its gradient is the sum of both paths."""
    gen = rng("graph-residual")
    x = randn(gen, N, H, W, COUT)
    w = randn(gen, COUT, 3, 3, COUT) * 0.3
    b = randn(gen, COUT) * 0.1
    target = randn(gen, N, H, W, COUT)
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, ConvSource(w, b))
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    relu = m.CNNNeuronReLUNode(conv.result_image)
    add = m.NNAdditionNode(relu.result_image, source)
    loss = mse_loss_node(m.CNNNeuronSigmoidNode(add.result_image).result_image)
    inserted = []
    terminal = loss.training_graph(
        node_handler=lambda g, f, s, gs: inserted.append(type(g).__name__) if f is None else None)
    assert inserted == ["NNBinaryArithmeticNode"]  # the addition node summing x's two gradients
    assert len(terminal) == 1
    assert terminal[0].result_image.handle is None  # custom handler
    _, dx, _ = run_training(device, terminal, [images(device, x)], labels_for(device, target))

    X = nchw(x).requires_grad_(True)
    y = torch.sigmoid(F.relu(F.conv2d(X, torch_weight(w), torch.tensor(b, dtype=torch.float64), padding=1)) + X)
    ((y - nchw(target)) ** 2).sum().backward()
    close(to_numpy(dx), nhwc(X.grad))


def test_training_graph_default_handler_copies_handles(device):
    source = m.NNImageNode(Handle("x"))
    relu = m.CNNNeuronReLUNode(source)
    loss = mse_loss_node(m.CNNSoftMaxNode(relu.result_image).result_image)
    terminal = loss.training_graph()
    assert terminal[0].result_image.handle.label() == "x"


def test_stop_gradient_stops_the_walk(device):
    x, w, b = conv_problem("graph-stop")
    target = randn(rng("graph-stop-t"), N, H, W, COUT)
    source = m.NNImageNode()
    first = m.CNNNeuronTanHNode(source)
    first.result_image.stop_gradient = True
    conv = m.CNNConvolutionNode(first.result_image, RecordingSource(w, b))
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    loss = mse_loss_node(conv.result_image)
    terminal = loss.training_graph()
    # The convolution's gradient node is built (it trains), nothing for tanh.
    assert [type(t).__name__ for t in terminal] == ["CNNConvolutionGradientNode"]
    graph = m.NNGraph(device, terminal[0].result_image)
    assert "CNNNeuronGradientNode" not in [type(n).__name__ for n in graph.nodes]


def test_multi_output_graph(device):
    x, w, b = conv_problem("graph-multi")
    source = m.NNImageNode()
    conv = m.CNNConvolutionNode(source, ConvSource(w, b))
    a = m.CNNNeuronReLUNode(conv.result_image)
    s = m.CNNNeuronSigmoidNode(conv.result_image)
    # Results 1..n-1 come back with the intermediates, on their node's allocator (temporary by
    # default, as in MPS); this one is read after the command buffer completed.
    s.result_image.image_allocator = m.ImageAllocator.persistent()
    graph = exact_graph(device, [a.result_image, s.result_image], [True, True])
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out, inter, _ = graph.encode_batch(cb, [images(device, x)], return_intermediates=True)
    cb.commit()
    cb.wait_until_completed()
    y = F.conv2d(nchw(x), torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),
                 torch.tensor(b, dtype=torch.float64), padding=1)
    close(to_numpy(out), nhwc(F.relu(y)))
    assert len(inter) == 1
    close(to_numpy(inter[0]), nhwc(torch.sigmoid(y)))


# ---- trainable nodes: a small network trained for several steps ------------------------------------


class GPUSource(ConvSource):
    """GPU-style update: SGD encoded on the graph's command buffer, in place on the exported weights."""

    def __init__(self, device, w, b, lr):
        super().__init__(w, b, lr)
        self.optimizer = m.NNOptimizerStochasticGradientDescent(device, learning_rate=lr)

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.updates += 1
        self.optimizer.encode(command_buffer, gradient_state, source_state)
        return source_state


class GPUBatchNormSource:
    """MPS's GPU-style batch-normalization update: SGD on gamma and beta encoded on the training step's
    command buffer (NNOptimizerStochasticGradientDescent with the batch normalization state) into a
    gamma-and-beta state the graph reloads there. No mean/variance method: the running statistics
    stay (the reference normalizes with batch statistics only)."""

    def __init__(self, device, gamma, beta, lr):
        self.g, self.b = gamma.astype(np.float32).copy(), beta.astype(np.float32).copy()
        self.device, self.updates = device, 0
        self.optimizer = m.NNOptimizerStochasticGradientDescent(device, learning_rate=lr)

    def number_of_feature_channels(self):
        return len(self.g)

    def gamma(self):
        return self.g

    def beta(self):
        return self.b

    def mean(self):
        return np.zeros_like(self.g)

    def variance(self):
        return np.ones_like(self.g)

    def epsilon(self):
        return 1e-5

    def load(self):
        return True

    def purge(self):
        pass

    def label(self):
        return "bn"

    def update_gamma_and_beta_with_command_buffer(self, command_buffer, batch_normalization_state):
        self.updates += 1
        result = m.CNNNormalizationGammaAndBetaState(self.device, self.g, self.b)
        self.optimizer.encode(command_buffer, batch_normalization_state, result_state=result)

        def keep(_):  # the data source's own copy follows once the step has run
            self.g, self.b = np.array(result.gamma, np.float32), np.array(result.beta, np.float32)

        command_buffer.add_completed_handler(keep)
        return result


def _torch_network_losses(x, labels, w1, b1, w2, b2, gamma, beta, lr, steps):
    X = nchw(x)
    T = torch.tensor(labels.argmax(-1).reshape(-1))
    params = [torch_weight(w1), torch.tensor(b1, dtype=torch.float64, requires_grad=True),
              torch_weight(w2), torch.tensor(b2, dtype=torch.float64, requires_grad=True),
              torch.tensor(gamma, dtype=torch.float64, requires_grad=True),
              torch.tensor(beta, dtype=torch.float64, requires_grad=True)]
    losses = []
    for _ in range(steps):
        W1, B1, W2, B2, G, Bb = params
        y = F.conv2d(X, W1, B1, padding=1)
        y = F.batch_norm(y, None, None, G, Bb, training=True, eps=1e-5)
        y = F.avg_pool2d(F.max_pool2d(F.relu(y), 2), 3)
        y = F.conv2d(y, W2, B2)
        loss = F.cross_entropy(y.reshape(y.shape[0], -1), T, reduction="none")
        losses.append(loss.detach().numpy())
        for p in params:
            p.grad = None
        loss.sum().backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
    return np.array(losses)


@pytest.mark.parametrize("head", ["conv", "fc"])
@pytest.mark.parametrize("style", ["gpu", "cpu", "gpu-bn"])
def test_training_small_network_matches_torch_sgd(device, style, head):
    gen = rng("graph-network")
    x = randn(gen, N, H, W, CIN)
    w1, b1 = randn(gen, 4, 3, 3, CIN) * 0.4, randn(gen, 4) * 0.1
    w2, b2 = randn(gen, 3, 1, 1, 4) * 0.5, randn(gen, 3) * 0.1
    gamma, beta = 1.0 + 0.1 * randn(gen, 4), 0.1 * randn(gen, 4)
    classes = np.eye(3, dtype=np.float32)[[0, 2]]
    labels = classes.reshape(N, 1, 1, 3)
    lr, steps = 0.05, 4

    if style.startswith("gpu"):
        ds1, ds2 = GPUSource(device, w1, b1, lr), GPUSource(device, w2, b2, lr)
        training = m.NNTrainingStyle.UPDATE_DEVICE_GPU
    else:
        ds1, ds2 = ConvSource(w1, b1, lr), ConvSource(w2, b2, lr)
        training = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    if style == "gpu-bn":  # BN's GPU-style methods too (otherwise its CPU methods at completion)
        bn_source = GPUBatchNormSource(device, gamma, beta, lr)
    else:
        bn_source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=1e-5)
        bn_source.learning_rate = lr
        bn_source.momentum = 0.0

    source = m.NNImageNode(Handle("x"))
    conv1 = m.CNNConvolutionNode(source, ds1)
    bn = m.CNNBatchNormalizationNode(conv1.result_image, bn_source)
    relu = m.CNNNeuronReLUNode(bn.result_image)
    pool = m.CNNPoolingMaxNode(relu.result_image, filter_size=2)
    avg = m.CNNPoolingAverageNode(pool.result_image, filter_size=3)
    # The last layer sees a 1x1 image: a 1x1 convolution or, the same math, a fully connected node.
    conv2 = (m.CNNConvolutionNode if head == "conv" else m.CNNFullyConnectedNode)(avg.result_image, ds2)
    for node in (conv1, conv2, bn):
        node.training_style = training
    loss = m.CNNLossNode(conv2.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM))
    terminal = loss.training_graph()
    graph = exact_graph(device, terminal[0].result_image, False)
    assert graph.source_image_handles[0].label() == "x"

    queue = m.CommandQueue(device)
    xs = images(device, x)
    losses = []
    for _ in range(steps):
        lab = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(labels[i])) for i in range(N)]
        cb = queue.command_buffer()
        assert graph.encode_batch(cb, [xs], [lab]) is None  # result not needed
        cb.commit()
        cb.wait_until_completed()
        losses.append([float(la.loss_image.to_numpy().ravel()[0]) for la in lab])
    # Exactly one update per trainable convolution (and GPU-style batch normalization) per step.
    assert ds1.updates == steps and ds2.updates == steps
    if style == "gpu-bn":
        assert bn_source.updates == steps
    expected = _torch_network_losses(x, labels, w1, b1, w2, b2, gamma, beta, lr, steps)
    np.testing.assert_allclose(np.array(losses), expected, rtol=2e-4, atol=2e-5)
    assert np.sum(losses[-1]) < np.sum(losses[0])


# ---- fully connected nodes -------------------------------------------------------------------------------


def test_fully_connected_training_graph_matches_autograd(device):
    """conv -> ReLU -> FC -> tanh -> FC -> softmax cross-entropy: dx and every weight gradient vs autograd."""
    gen = rng("graph-fc")
    x = randn(gen, N, 4, 5, CIN)
    wc, bc = randn(gen, 4, 3, 3, CIN) * 0.3, randn(gen, 4) * 0.1
    w1, b1 = randn(gen, 6, 4, 5, 4) * 0.2, randn(gen, 6) * 0.1  # the kernel covers the 5x4 image
    w2, b2 = randn(gen, 3, 1, 1, 6) * 0.5, randn(gen, 3) * 0.1
    labels = np.eye(3, dtype=np.float32)[[1, 2]].reshape(N, 1, 1, 3)
    dsc, ds1, ds2 = RecordingSource(wc, bc), RecordingSource(w1, b1), RecordingSource(w2, b2)
    source = m.NNImageNode(Handle("x"))
    conv = m.CNNConvolutionNode(source, dsc)
    fc1 = m.CNNFullyConnectedNode(m.CNNNeuronReLUNode(conv.result_image).result_image, ds1)
    fc2 = m.CNNFullyConnectedNode(m.CNNNeuronTanHNode(fc1.result_image).result_image, ds2)
    assert isinstance(fc1, m.CNNConvolutionNode)  # MPS: a convolution node subclass
    for node in (conv, fc1, fc2):
        node.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    loss = m.CNNLossNode(fc2.result_image,
                         m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM))
    seen = []
    terminal = loss.training_graph(node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    assert seen.count("CNNFullyConnectedGradientNode") == 2
    _, dx, _ = run_training(device, terminal, [images(device, x)], labels_for(device, labels))
    assert ds1.updates == ds2.updates == dsc.updates == 1

    X = nchw(x).requires_grad_(True)
    params = [torch_weight(wc), torch.tensor(bc, dtype=torch.float64, requires_grad=True),
              torch_weight(w1), torch.tensor(b1, dtype=torch.float64, requires_grad=True),
              torch_weight(w2), torch.tensor(b2, dtype=torch.float64, requires_grad=True)]
    Wc, Bc, W1, B1, W2, B2 = params
    y = F.conv2d(F.tanh(F.conv2d(F.relu(F.conv2d(X, Wc, Bc, padding=1)), W1, B1)), W2, B2)
    F.cross_entropy(y.reshape(N, 3), torch.tensor(labels.reshape(N, 3).argmax(-1)), reduction="sum").backward()
    close(to_numpy(dx), nhwc(X.grad))
    for ds, Wt, Bt in ((dsc, Wc, Bc), (ds1, W1, B1), (ds2, W2, B2)):
        close(ds.dw, Wt.grad.permute(0, 2, 3, 1).numpy())
        close(ds.db, Bt.grad.numpy())


def test_fully_connected_node_inference_and_gradient_node_by_hand(device):
    """The node's result equals the CNNFullyConnected kernel's; a gradient node built directly (weights
    None: the forward's) gives the kernel's gradient."""
    gen = rng("graph-fc-hand")
    x = randn(gen, N, 3, 3, CIN)
    w, b = randn(gen, 5, 3, 3, CIN) * 0.3, randn(gen, 5) * 0.1
    source = m.NNImageNode()
    fc = m.CNNFullyConnectedNode(source, ConvSource(w, b))
    fc.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    ys = to_numpy(run(device, m.NNGraph(device, fc.result_image), images(device, x)))
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    k_fc = m.CNNFullyConnected(device, ConvSource(w, b))
    k_fc.destination_image_allocator = m.ImageAllocator.persistent()  # read after the wait
    hand = k_fc.encode_batch(cb, images(device, x))
    cb.commit()
    cb.wait_until_completed()
    # The graph's result is FLOAT32; with FLOAT16 inputs the kernels by hand write half, which is the
    # float32 result rounded once (docs/float16.md).
    np.testing.assert_array_equal(ys.astype(np.float16) if FLOAT16 else ys, to_numpy(hand))
    assert ys.shape == (N, 1, 1, 5)

    g = m.NNImageNode(Handle("g"))
    grad = m.CNNFullyConnectedGradientNode(g, source, fc.convolution_gradient_state)
    assert type(grad).__name__ == "CNNFullyConnectedGradientNode"
    grad.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    graph = m.NNGraph(device, grad.result_image)
    assert sorted(h.label() if h is not None else "x" for h in graph.source_image_handles) == ["g", "x"]
    dy = randn(gen, N, 1, 1, 5)
    order = [h.label() if h is not None else "x" for h in graph.source_image_handles]
    feeds = {"g": images(device, dy), "x": images(device, x)}
    dx = to_numpy(run(device, graph, [feeds[k] for k in order]))
    X = nchw(x).requires_grad_(True)
    F.conv2d(X, torch_weight(w), torch.tensor(b, dtype=torch.float64)).backward(nchw(dy))
    close(dx, nhwc(X.grad))


# ---- reshape and pad nodes ------------------------------------------------------------------------------


def _loss_and_dx(device, node_image, x, target):
    """Trains tanh(node) against target (MSE, SUM): returns (per-image losses, dL/dX)."""
    loss = mse_loss_node(m.CNNNeuronTanHNode(node_image).result_image)
    terminal = loss.training_graph()
    labels = labels_for(device, target)
    _, dx, _ = run_training(device, terminal, [images(device, x)], labels)
    return [float(la.loss_image.to_numpy().ravel()[0]) for la in labels], to_numpy(dx)


def _torch_loss_and_dx(fn, x, target):
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)  # NHWC
    per_image = ((torch.tanh(fn(X)) - torch.tensor(target, dtype=torch.float64)) ** 2).flatten(1).sum(1)
    per_image.sum().backward()
    return per_image.detach().numpy(), X.grad.numpy()


def test_reshape_node_training_graph_matches_autograd(device):
    gen = rng("graph-reshape")
    x = randn(gen, N, 2, 3, 4)
    target = randn(gen, N, 3, 4, 2)  # result 4 wide, 3 high, 2 channels: the same 24 elements in HWC order
    node = m.NNReshapeNode(m.NNImageNode(), result_width=4, result_height=3, result_feature_channels=2)
    assert (node.result_width, node.result_height, node.result_feature_channels) == (4, 3, 2)
    losses, dx = _loss_and_dx(device, node.result_image, x, target)
    ref_losses, ref_dx = _torch_loss_and_dx(lambda X: X.reshape(N, 3, 4, 2), x, target)
    close(np.array(losses), ref_losses)
    close(dx, ref_dx)
    with pytest.raises(ValueError, match="result_width"):
        m.NNReshapeNode(m.NNImageNode(), 0, 3, 2)


_PAD_MODES = {"ZERO": "constant", "CONSTANT": "constant", "CLAMP": "edge", "MIRROR": "reflect",
              "MIRROR_WITH_EDGE": "symmetric"}


@pytest.mark.parametrize("mode", sorted(_PAD_MODES))
def test_pad_node_training_graph_matches_autograd(device, mode):
    gen = rng(f"graph-pad-{mode}")
    x = randn(gen, N, 4, 5, 3)
    before, after = (2, 1, 0), (1, 3, 0)  # (x, y, channel)
    target = randn(gen, N, 4 + 1 + 3, 5 + 2 + 1, 3)
    node = m.NNPadNode(m.NNImageNode(), before, after, getattr(m.ImageEdgeMode, mode))
    node.fill_value = 0.75 if mode == "CONSTANT" else 0.0
    assert node.padding_size_before.x == 2 and node.padding_size_after.y == 3
    losses, dx = _loss_and_dx(device, node.result_image, x, target)

    def pad(X):
        if _PAD_MODES[mode] == "constant":
            return F.pad(X, (0, 0, before[0], after[0], before[1], after[1]), value=node.fill_value)
        # Gather with np.pad's index maps: autograd sums the copies like the gradient kernel.
        iy = np.pad(np.arange(4), (before[1], after[1]), mode=_PAD_MODES[mode])
        ix = np.pad(np.arange(5), (before[0], after[0]), mode=_PAD_MODES[mode])
        return X[:, torch.tensor(iy)][:, :, torch.tensor(ix)]

    ref_losses, ref_dx = _torch_loss_and_dx(pad, x, target)
    close(np.array(losses), ref_losses)
    close(dx, ref_dx)


def test_pad_node_channel_padding_and_errors(device):
    gen = rng("graph-pad-channels")
    x = randn(gen, N, 3, 3, 2)
    target = randn(gen, N, 3, 3, 2 + 1 + 2)
    node = m.NNPadNode(m.NNImageNode(), m.ImageCoordinate(0, 0, 1), (0, 0, 2), m.ImageEdgeMode.ZERO)
    losses, dx = _loss_and_dx(device, node.result_image, x, target)
    ref_losses, ref_dx = _torch_loss_and_dx(lambda X: F.pad(X, (1, 2)), x, target)
    close(np.array(losses), ref_losses)
    close(dx, ref_dx)
    with pytest.raises(TypeError, match="padding_size_before"):
        m.NNPadNode(m.NNImageNode(), 3, (0, 0, 0), m.ImageEdgeMode.ZERO)
    grad = m.NNPadGradientNode(m.NNImageNode(), m.NNImageNode(), node.result_state)
    assert type(grad).__name__ == "NNPadGradientNode"
    assert type(m.NNReshapeNode(m.NNImageNode(), 1, 1, 4).gradient_filter_with_source(m.NNImageNode())).__name__ \
        == "NNReshapeGradientNode"


# ---- misuse --------------------------------------------------------------------------------------------


def test_trainable_node_without_update_method_is_refused(device):
    x, w, b = conv_problem("graph-misuse")
    plain = m.CNNConvolutionWeightsDataSource(ConvSource(w, b).descriptor(), w, b)  # no update methods
    source = m.NNImageNode()
    conv = m.CNNConvolutionNode(source, plain)  # default style: UPDATE_DEVICE_GPU
    terminal = mse_loss_node(conv.result_image).training_graph()
    with pytest.raises(ValueError, match="training_style.*update_with_command_buffer"):
        m.NNGraph(device, terminal[0].result_image)
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_CPU
    terminal = mse_loss_node(conv.result_image).training_graph()
    with pytest.raises(ValueError, match="update_with_gradient_state"):
        m.NNGraph(device, terminal[0].result_image)


def test_missing_labels_and_wrong_sources(device):
    x, w, b = conv_problem("graph-misuse2")
    source = m.NNImageNode()
    conv = m.CNNConvolutionNode(source, ConvSource(w, b))
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
    loss = mse_loss_node(conv.result_image)
    graph = m.NNGraph(device, loss.training_graph()[0].result_image)
    assert len(graph.source_state_handles) == 1
    cb = m.CommandQueue(device).command_buffer()
    xs = images(device, x)
    with pytest.raises(ValueError, match="source_states.*labels"):
        graph.encode_batch(cb, [xs])
    with pytest.raises(ValueError, match="source_images.*1 source image handle"):
        graph.encode_batch(cb, [xs, xs])
    # A source image of the wrong size (channels) is refused by the first kernel, before any work.
    wrong = [m.Image.from_numpy(np.zeros((1, H, W, CIN + 2), np.float32), device) for _ in range(N)]
    target = np.zeros((N, H, W, COUT), np.float32)
    with pytest.raises(ValueError):
        graph.encode_batch(cb, [wrong], [labels_for(device, target)])


def test_node_misuse_errors():
    source = m.NNImageNode()
    with pytest.raises(TypeError, match="handle"):
        m.NNImageNode(42)
    loss = mse_loss_node(source)
    with pytest.raises(TypeError, match="its own gradient"):
        loss.gradient_filter_with_source(source)
    grad = m.CNNNeuronReLUNode(source).gradient_filter_with_source(m.NNImageNode())
    with pytest.raises(TypeError, match="gradient nodes have no gradient"):
        grad.gradient_filter_with_source(m.NNImageNode())
    add = m.NNAdditionNode(source, source)
    with pytest.raises(TypeError, match="gradient_filters_with_sources"):
        add.gradient_filter_with_source(m.NNImageNode())
    assert len(add.gradient_filters_with_source(m.NNImageNode())) == 2
    with pytest.raises(ValueError, match="graph input"):
        m.NNGraph(m.Device("cpu"), source)
    with pytest.raises(ValueError, match="keep_probability"):
        m.CNNDropoutNode(source, 1.5)


def test_exported_intermediate_read_counts_and_failed_encode(device):
    x, w, b = conv_problem("graph-export")
    source = m.NNImageNode()
    tanh = m.CNNNeuronTanHNode(source)
    tanh.result_image.export_from_graph = True
    tanh.result_image.handle = Handle("t")
    relu = m.CNNNeuronReLUNode(tanh.result_image)
    graph = m.NNGraph(device, relu.result_image)
    assert [h.label() for h in graph.intermediate_image_handles] == ["t"]
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    out, inter, _ = graph.encode_batch(cb, [images(device, x)], return_intermediates=True)
    assert [img.read_count for img in inter[0]] == [1] * N  # temporary intermediates, read count 1
    seen = []  # temporary: read before the command buffer completes
    cb.encode_host_callback(lambda: seen.append(m.batch_to_numpy(inter[0])))
    cb.commit()
    cb.wait_until_completed()
    close(seen[0], np.tanh(x.astype(np.float64)))
    close(m.batch_to_numpy(out), np.maximum(np.tanh(x.astype(np.float64)), 0))

    # A failed encode leaves a temporary source's read count as it was.
    conv = m.CNNConvolutionNode(m.NNImageNode(), ConvSource(w, b))
    bad = m.NNGraph(device, conv.result_image)
    cb = queue.command_buffer()
    t = m.TemporaryImage(cb, m.ImageDescriptor(width=W, height=H, feature_channels=CIN + 2))  # wrong channels
    with pytest.raises(ValueError):
        bad.encode(cb, [t])
    assert t.read_count == 1
