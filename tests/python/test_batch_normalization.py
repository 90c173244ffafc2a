"""The batch normalization family against PyTorch (float64 autograd, torch.nn.BatchNorm2d).

MPS ↔ PyTorch mapping: images are NHWC, PyTorch is NCHW (transposed explicitly); MPS's statistics are
the biased batch variance over N·H·W (spec §2.5 [I]), which is what F.batch_norm(training=True) uses to
normalize; the statistics gradient's sums (gradient_for_gamma / gradient_for_beta) are exactly
PyTorch's weight.grad / bias.grad for the loss sum(Y·G); the fused neuron is applied after the affine
transform, as F.relu / sigmoid / tanh after batch_norm.

Bound: max relative error <= 1e-4 (TOLERANCE). Statistics and parameter gradients are sums of a few
hundred float32 terms (~1e-6 relative); dX = γ/σ·(G' − dβ/M − x̂·dγ/M) subtracts terms of the size of
G' from G', so its error is a few float32 ulps of max|G'| — well under the bound, while any wrong term
(a missing 1/M, unbiased instead of biased variance, a neuron derivative at the wrong point) gives an
error of 1e-2 or more.

Shapes: 3x5x7 images of 6 channels (a partial RGBA slice) and 2x12x13x5 (312 pixels per channel:
more than the Metal reductions' 256 threads, so every simdgroup and lane of them holds data).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import apply_neuron, neuron_descriptor, randn, rng

SHAPES = [(3, 5, 7, 6), (2, 12, 13, 5)]
FLT_MIN = float(np.finfo(np.float32).tiny)


def _persistent(*kernels):
    for k in kernels:
        k.destination_image_allocator = m.ImageAllocator.persistent()


def _images(array, device):
    return m.batch_from_numpy(np.ascontiguousarray(array, dtype=np.float32), device)


def _nchw(x):
    return torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)


def _nhwc(t):
    return np.transpose(t.detach().numpy(), (0, 2, 3, 1))


def _parameters(gen, c):
    gamma = (1.0 + 0.5 * randn(gen, c)).astype(np.float32)
    beta = (0.3 * randn(gen, c)).astype(np.float32)
    mean = (0.2 * randn(gen, c)).astype(np.float32)
    variance = (0.5 + gen.random(c)).astype(np.float32)
    return gamma, beta, mean, variance


class Family:
    """A forward kernel over a ready-made data source and the three other kernels of the family."""

    def __init__(self, device, gamma, beta, mean, variance, epsilon, neuron="none"):
        self.source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, variance, epsilon=epsilon)
        desc = neuron_descriptor(neuron)
        self.forward = m.CNNBatchNormalization(device, self.source, desc)
        self.statistics = m.CNNBatchNormalizationStatistics(device)
        self.statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device, desc)
        self.gradient = m.CNNBatchNormalizationGradient(device, desc)
        _persistent(self.forward, self.gradient)


def _torch_training(x, g, gamma, beta, epsilon, neuron, training=True, mean=None, variance=None):
    X = _nchw(x).requires_grad_(True)
    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    rm = None if mean is None else torch.tensor(mean, dtype=torch.float64)
    rv = None if variance is None else torch.tensor(variance, dtype=torch.float64)
    Y = apply_neuron(neuron, F.batch_norm(X, rm, rv, W, B, training=training, eps=epsilon))
    (Y * _nchw(g)).sum().backward()
    return _nhwc(Y), _nhwc(X.grad), W.grad.numpy(), B.grad.numpy()


@pytest.mark.parametrize("neuron", ["none", "relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_training_pass_over_sub_batches(device, queue, check, shape, neuron):
    """Statistics and statistics gradient accumulated over two sub-batches, forward and gradient per
    image, against autograd of batch_norm(training=True) followed by the neuron."""
    n, h, w, c = shape
    gen = rng(f"bn-train-{shape}-{neuron}")
    x = (randn(gen, n, h, w, c) * 2.0 + 3.0).astype(np.float32)  # far from zero: tests the shifted sums
    g = randn(gen, n, h, w, c)
    gamma, beta, mean, variance = _parameters(gen, c)
    eps = 1e-3
    fam = Family(device, gamma, beta, mean, variance, eps, neuron)
    xs, gs = _images(x, device), _images(g, device)
    state = fam.forward.result_state(xs[0])
    assert isinstance(state, m.CNNBatchNormalizationState)
    assert state.gradient_for_gamma is None and state.gradient_for_beta is None
    cb = queue.command_buffer()
    fam.statistics.encode_batch(cb, xs[:1], state)  # sub-batch 1
    fam.statistics.encode_batch(cb, xs[1:], state)  # sub-batch 2 accumulates
    ys = fam.forward.encode_batch(cb, xs, state)
    fam.statistics_gradient.encode_batch(cb, gs[:1], xs[:1], state)
    fam.statistics_gradient.encode_batch(cb, gs[1:], xs[1:], state)
    dxs = [fam.gradient.encode(cb, gs[i], xs[i], state) for i in range(n)]  # the returning single form
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch_training(x, g, gamma, beta, eps, neuron)
    x64 = x.astype(np.float64)
    check(state.mean, x64.mean(axis=(0, 1, 2)), "batch mean")
    check(state.variance, x64.var(axis=(0, 1, 2)), "biased batch variance")
    check(state.gamma, gamma, "state gamma")
    check(state.beta, beta, "state beta")
    check(m.batch_to_numpy(ys), y_ref, "forward")
    check(state.gradient_for_gamma, dgamma_ref, "gradient_for_gamma")
    check(state.gradient_for_beta, dbeta_ref, "gradient_for_beta")
    check(m.batch_to_numpy(dxs), dx_ref, "dX")


def test_inference_forward_and_inference_gradient(device, queue, check):
    """No statistics kernel: the data source's mean and variance, and training_statistics=False,
    against autograd of batch_norm(training=False) (mean and variance constants)."""
    n, h, w, c = 2, 4, 5, 7
    gen = rng("bn-inference")
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    gamma, beta, mean, variance = _parameters(gen, c)
    eps = 1e-5
    fam = Family(device, gamma, beta, mean, variance, eps, "tanh")
    fam.gradient.training_statistics = False
    xs, gs = _images(x, device), _images(g, device)
    state = fam.forward.result_state(xs[0])
    cb = queue.command_buffer()
    ys_plain = fam.forward.encode_batch(cb, xs)  # no state at all
    ys = fam.forward.encode_batch(cb, xs, state)
    dxs_early = fam.gradient.encode_batch(cb, gs, xs, [state] * n)  # needs no statistics gradient
    fam.statistics_gradient.encode_batch(cb, gs, xs, state)
    dxs = fam.gradient.encode_batch(cb, gs, xs, [state] * n)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch_training(x, g, gamma, beta, eps, "tanh", training=False,
                                                           mean=mean, variance=variance)
    check(m.batch_to_numpy(ys_plain), y_ref, "forward without a state")
    check(m.batch_to_numpy(ys), y_ref, "forward with an inference state")
    check(state.mean, mean, "state mean = data source mean")
    check(state.variance, variance, "state variance = data source variance")
    check(m.batch_to_numpy(dxs_early), dx_ref, "inference dX")
    check(m.batch_to_numpy(dxs), dx_ref, "inference dX after the statistics gradient")
    check(state.gradient_for_gamma, dgamma_ref, "dgamma")
    check(state.gradient_for_beta, dbeta_ref, "dbeta")


class GpuStyleSource:
    """A Python data source (protocol by duck typing) with the GPU-style update methods: it returns
    temporary states on the command buffer, which the kernel's reload_*_with_command_buffer copies.
    (mpsgrad has no optimizer kernels yet, so the new values are computed on the host from the
    state of the previous, completed command buffer.)"""

    def __init__(self, gamma, beta, lr, momentum, epsilon):
        self.g, self.b = gamma.copy(), beta.copy()
        self.mu = np.zeros_like(gamma)
        self.var = np.ones_like(gamma)
        self.lr, self.momentum, self.eps = lr, momentum, epsilon

    def number_of_feature_channels(self):
        return len(self.g)

    def gamma(self):
        return self.g

    def beta(self):
        return self.b

    def mean(self):
        return self.mu

    def variance(self):
        return self.var

    def epsilon(self):
        return self.eps

    def load(self):
        return True

    def purge(self):
        pass

    def update_gamma_and_beta_with_command_buffer(self, command_buffer, batch_normalization_state):
        s = batch_normalization_state
        result = m.CNNNormalizationGammaAndBetaState.temporary(command_buffer, len(self.g))
        self.g = (self.g - self.lr * s.gradient_for_gamma).astype(np.float32)
        self.b = (self.b - self.lr * s.gradient_for_beta).astype(np.float32)
        result.gamma[:] = self.g
        result.beta[:] = self.b
        return result

    def update_mean_and_variance_with_command_buffer(self, command_buffer, batch_normalization_state, count):
        s = batch_normalization_state
        result = m.CNNNormalizationMeanAndVarianceState.temporary(command_buffer, len(self.g))
        unbiased = s.variance * (count / (count - 1))
        self.mu = ((1 - self.momentum) * self.mu + self.momentum * s.mean).astype(np.float32)
        self.var = ((1 - self.momentum) * self.var + self.momentum * unbiased).astype(np.float32)
        result.mean[:] = self.mu
        result.variance[:] = self.var
        return result


@pytest.mark.parametrize("style", ["cpu", "gpu"])
def test_training_loop_matches_batchnorm2d(device, queue, check, style):
    """Four SGD steps of gamma/beta and running mean/variance updates through the data source's update
    methods, against torch.nn.BatchNorm2d (momentum 0.1, unbiased running variance) + torch.optim.SGD."""
    n, h, w, c = 3, 4, 5, 6
    gen = rng(f"bn-loop-{style}")
    gamma = (1.0 + 0.3 * randn(gen, c)).astype(np.float32)
    beta = (0.2 * randn(gen, c)).astype(np.float32)
    lr, momentum, eps = 0.05, 0.1, 1e-5
    bn = torch.nn.BatchNorm2d(c, eps=eps, momentum=momentum).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(gamma))
        bn.bias.copy_(torch.tensor(beta))
    opt = torch.optim.SGD(bn.parameters(), lr=lr)
    if style == "cpu":
        source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=eps)
        source.learning_rate, source.momentum = lr, momentum
    else:
        source = GpuStyleSource(gamma, beta, lr, momentum, eps)
    fwd = m.CNNBatchNormalization(device, source)
    assert fwd.data_source is source
    stats = m.CNNBatchNormalizationStatistics(device)
    sgrad = m.CNNBatchNormalizationStatisticsGradient(device)
    grad = m.CNNBatchNormalizationGradient(device)
    _persistent(fwd, grad)
    for step in range(4):
        x = (randn(gen, n, h, w, c) * 1.5 + 0.5).astype(np.float32)
        g = randn(gen, n, h, w, c)
        xs, gs = _images(x, device), _images(g, device)
        state = fwd.result_state(xs[0])
        cb = queue.command_buffer()
        stats.encode_batch(cb, xs, state)
        ys = fwd.encode_batch(cb, xs, state)
        sgrad.encode_batch(cb, gs, xs, state)
        dxs = grad.encode_batch(cb, gs, xs, [state] * n)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

        bn.train()
        opt.zero_grad()
        X = _nchw(x).requires_grad_(True)
        Y = bn(X)
        (Y * _nchw(g)).sum().backward()
        opt.step()
        check(m.batch_to_numpy(ys), _nhwc(Y), f"step {step} forward")
        check(m.batch_to_numpy(dxs), _nhwc(X.grad), f"step {step} dX")

        if style == "cpu":
            assert source.update_gamma_and_beta_with_batch_normalization_state(state)
            assert source.update_mean_and_variance_with_batch_normalization_state(state)
            fwd.reload_gamma_and_beta_from_data_source()
            fwd.reload_mean_and_variance_from_data_source()
            new_gamma, new_beta = source.gamma(), source.beta()
            new_mean, new_var = source.mean(), source.variance()
        else:
            cb2 = queue.command_buffer()
            gb = source.update_gamma_and_beta_with_command_buffer(cb2, state)
            mv = source.update_mean_and_variance_with_command_buffer(cb2, state, n * h * w)
            fwd.reload_gamma_and_beta_with_command_buffer(cb2, gb)
            fwd.reload_mean_and_variance_with_command_buffer(cb2, mv)
            assert gb.read_count == 0 and mv.read_count == 0  # temporary states read once
            cb2.commit()
            cb2.wait_until_completed()
            new_gamma, new_beta, new_mean, new_var = source.g, source.b, source.mu, source.var
        check(new_gamma, bn.weight.detach().numpy(), f"step {step} gamma")
        check(new_beta, bn.bias.detach().numpy(), f"step {step} beta")
        check(new_mean, bn.running_mean.numpy(), f"step {step} running mean")
        check(new_var, bn.running_var.numpy(), f"step {step} running variance")

    # Inference with the learned running statistics matches BatchNorm2d.eval().
    x = randn(gen, n, h, w, c)
    ys = None
    cb = queue.command_buffer()
    ys = fwd.encode_batch(cb, _images(x, device))
    cb.commit()
    cb.wait_until_completed()
    bn.eval()
    check(m.batch_to_numpy(ys), _nhwc(bn(_nchw(x))), "inference after training")


def test_temporary_state_read_counts(device, queue):
    """A temporary state: the statistics kernel writes it without reading it; the forward, the
    statistics gradient and the gradient (once per batch, however many images share it) each
    decrement its read count; at 0 it can no longer be used."""
    n, h, w, c = 3, 2, 3, 4
    gen = rng("bn-read-count")
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    fam = Family(device, *_parameters(gen, c), 1e-3)
    xs, gs = _images(x, device), _images(g, device)
    cb = queue.command_buffer()
    state = fam.forward.temporary_result_state(cb, xs[0])
    assert state.is_temporary and state.read_count == 1
    state.read_count = 3
    fam.statistics.encode_batch(cb, xs, state)
    assert state.read_count == 3
    fam.forward.encode_batch(cb, xs, state)
    assert state.read_count == 2
    fam.statistics_gradient.encode_batch(cb, gs, xs, state)
    assert state.read_count == 1
    fam.gradient.encode_batch(cb, gs, xs, [state] * n)
    assert state.read_count == 0
    with pytest.raises(ValueError, match="read_count"):
        fam.gradient.encode_batch(cb, gs, xs, [state] * n)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error


def test_results_are_bitwise_reproducible(device, queue):
    n, h, w, c = 2, 12, 13, 9
    gen = rng("bn-determinism")
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    params = _parameters(gen, c)

    def once():
        fam = Family(device, *params, 1e-3, "sigmoid")
        xs, gs = _images(x, device), _images(g, device)
        state = fam.forward.result_state(xs[0])
        cb = queue.command_buffer()
        fam.statistics.encode_batch(cb, xs, state)
        ys = fam.forward.encode_batch(cb, xs, state)
        fam.statistics_gradient.encode_batch(cb, gs, xs, state)
        dxs = fam.gradient.encode_batch(cb, gs, xs, [state] * n)
        cb.commit()
        cb.wait_until_completed()
        return [np.array(a) for a in (state.mean, state.variance, state.gradient_for_gamma, state.gradient_for_beta,
                                      m.batch_to_numpy(ys), m.batch_to_numpy(dxs))]

    for a, b in zip(once(), once()):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("neuron", ["none", "relu", "leaky_relu", "linear", "tanh"])
def test_large_images_match_torch_whatever_the_thread_count(device, queue, check, neuron):
    """Images of 37x41 = 1517 pixels: the CPU reductions cut each image into two chunks of 64-pixel
    blocks (batch_normalization.cpp), the Metal ones give every thread several pixels. The training
    pass matches autograd, and the CPU results are bitwise equal with 1, 2 and 3 threads (the chunk
    partial sums are added in a fixed order). The CPU statistics gradient takes each fused neuron's
    derivative lane by lane inside its vector-register sums (a select for ReLU, leaky ReLU, linear;
    a libm call for tanh) and one channel at a time for the last 5."""
    n, h, w, c = 2, 37, 41, 29  # 29 = 16 + 8 + 5 channels: every path of the CPU reductions' grouping
    gen = rng(f"bn-large-{neuron}")
    x = (randn(gen, n, h, w, c) * 2.0 - 1.5).astype(np.float32)
    g = randn(gen, n, h, w, c)
    gamma, beta, mean, variance = _parameters(gen, c)
    eps = 1e-3

    def once():
        fam = Family(device, gamma, beta, mean, variance, eps, neuron)
        xs, gs = _images(x, device), _images(g, device)
        state = fam.forward.result_state(xs[0])
        cb = queue.command_buffer()
        fam.statistics.encode_batch(cb, xs, state)
        ys = fam.forward.encode_batch(cb, xs, state)
        fam.statistics_gradient.encode_batch(cb, gs, xs, state)
        dxs = fam.gradient.encode_batch(cb, gs, xs, [state] * n)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        return [np.array(a) for a in (state.mean, state.variance, m.batch_to_numpy(ys), state.gradient_for_gamma,
                                      state.gradient_for_beta, m.batch_to_numpy(dxs))]

    threads = m.get_num_threads()
    try:
        runs = []
        for t in (1, 2, 3):
            m.set_num_threads(t)
            runs.append(once())
    finally:
        m.set_num_threads(threads)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert np.array_equal(a, b)
    mean_, var_, y, dgamma, dbeta, dx = runs[0]
    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch_training(x, g, gamma, beta, eps, neuron)
    x64 = x.astype(np.float64)
    check(mean_, x64.mean(axis=(0, 1, 2)), "batch mean")
    check(var_, x64.var(axis=(0, 1, 2)), "biased batch variance")
    check(y, y_ref, "forward")
    check(dgamma, dgamma_ref, "gradient_for_gamma")
    check(dbeta, dbeta_ref, "gradient_for_beta")
    check(dx, dx_ref, "dX")


@pytest.mark.parametrize("layout", ["separate", "two-blocks"])
def test_batches_not_stored_back_to_back(device, queue, check, layout):
    """Back-to-back images are encoded as one op per run (kernels/batch_normalization.cpp): a batch
    of separately allocated images (runs of one) and one made of two back-to-back blocks (two
    runs) give the training pass of autograd."""
    n, h, w, c = 5, 6, 7, 6
    gen = rng(f"bn-runs-{layout}")
    x = (randn(gen, n, h, w, c) + 1.0).astype(np.float32)
    g = randn(gen, n, h, w, c)
    gamma, beta, mean, variance = _parameters(gen, c)
    eps = 1e-3
    fam = Family(device, gamma, beta, mean, variance, eps, "relu")

    def batch(a):
        if layout == "separate":
            return [m.Image.from_numpy(np.ascontiguousarray(a[i:i + 1]), device) for i in range(n)]
        return _images(a[:2], device) + _images(a[2:], device)

    xs, gs = batch(x), batch(g)
    destinations = batch(np.zeros_like(x))
    state = fam.forward.result_state(xs[0])
    cb = queue.command_buffer()
    fam.statistics.encode_batch(cb, xs, state)
    ys = fam.forward.encode_batch(cb, xs, state)
    fam.statistics_gradient.encode_batch(cb, gs, xs, state)
    fam.gradient.encode_batch(cb, gs, xs, [state] * n, destinations)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch_training(x, g, gamma, beta, eps, "relu")
    check(m.batch_to_numpy(ys), y_ref, "forward")
    check(state.gradient_for_gamma, dgamma_ref, "gradient_for_gamma")
    check(state.gradient_for_beta, dbeta_ref, "gradient_for_beta")
    check(m.batch_to_numpy(destinations), dx_ref, "dX")


class ProtocolSource:
    """The required protocol methods only (no epsilon, beta None: no bias)."""

    def __init__(self, c):
        self.c = c

    def number_of_feature_channels(self):
        return self.c

    def gamma(self):
        return np.full(self.c, 2.0, np.float32)

    def beta(self):
        return None

    def mean(self):
        return np.full(self.c, 1.0, np.float32)

    def variance(self):
        return np.full(self.c, 4.0, np.float32)

    def load(self):
        return True

    def purge(self):
        pass


def test_duck_typed_data_source_defaults(device, queue, check):
    fwd = m.CNNBatchNormalization(device, ProtocolSource(5))
    assert fwd.epsilon == pytest.approx(FLT_MIN)
    assert fwd.number_of_feature_channels == 5
    assert fwd.fused_neuron_descriptor is None
    _persistent(fwd)
    x = randn(rng("bn-duck"), 1, 3, 3, 5)
    cb = queue.command_buffer()
    y = fwd.encode(cb, _images(x, device)[0])
    cb.commit()
    cb.wait_until_completed()
    check(y.to_numpy(), (x - 1.0) * 2.0 / np.sqrt(4.0 + FLT_MIN), "y = (x - mean)·gamma/sqrt(var + FLT_MIN)")


def _trained_state(device, queue, fam, xs, gs, statistics_gradient=True):
    state = fam.forward.result_state(xs[0])
    cb = queue.command_buffer()
    fam.statistics.encode_batch(cb, xs, state)
    fam.forward.encode_batch(cb, xs, state)
    if statistics_gradient:
        fam.statistics_gradient.encode_batch(cb, gs, xs, state)
    return cb, state


def test_bad_inputs_raise(device, queue):
    n, h, w, c = 2, 3, 3, 4
    gen = rng("bn-errors")
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    params = _parameters(gen, c)
    fam = Family(device, *params, 1e-3, "relu")
    xs, gs = _images(x, device), _images(g, device)

    # A statistics gradient whose fused neuron differs from the forward's.
    cb, state = _trained_state(device, queue, fam, xs, gs, statistics_gradient=False)
    other = m.CNNBatchNormalizationStatisticsGradient(device, neuron_descriptor("sigmoid"))
    with pytest.raises(ValueError, match="fused_neuron_descriptor"):
        other.encode_batch(cb, gs, xs, state)
    with pytest.raises(ValueError, match="fused_neuron_descriptor"):
        m.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, gs, xs, state)
    # The gradient before the statistics gradient.
    with pytest.raises(ValueError, match="CNNBatchNormalizationStatisticsGradient"):
        fam.gradient.encode_batch(cb, gs, xs, [state] * n)
    # Channel counts that do not match the data source.
    wrong = _images(randn(gen, 1, h, w, c + 1), device)
    with pytest.raises(ValueError, match="source_image"):
        fam.forward.encode(cb, wrong[0], state)
    with pytest.raises(ValueError, match="source_images"):
        fam.statistics.encode_batch(cb, wrong, state)
    with pytest.raises(ValueError, match="source_gradients"):
        fam.statistics_gradient.encode_batch(cb, wrong, xs[:1], state)
    # Unavailable encode forms (as in MPS).
    with pytest.raises(TypeError, match="encode_batch"):
        fam.statistics.encode(cb, xs[0])
    with pytest.raises(TypeError, match="encode_batch"):
        fam.statistics_gradient.encode(cb, gs[0], xs[0], state)
    # A state of another family.
    smax = m.CNNSoftMax(device)
    with pytest.raises(TypeError, match="batch_normalization_state"):
        fam.statistics.encode_batch(cb, xs, smax.result_state(xs[0]))
    cb.commit()
    cb.wait_until_completed()

    # Non-positive variance + epsilon, bad epsilon, malformed data sources.
    gamma, beta, mean, variance = params
    bad = variance.copy()
    bad[2] = -1.0
    with pytest.raises(ValueError, match="variance"):
        m.CNNBatchNormalization(device, m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, bad))
    with pytest.raises(ValueError, match="variance: channel 2 is -1.*must be >= 0"):
        m.CNNNormalizationMeanAndVarianceState(device, mean, bad)
    with pytest.raises(ValueError, match="epsilon"):
        fam.forward.epsilon = 0.0
    with pytest.raises(ValueError, match="beta"):
        m.CNNBatchNormalizationWeightsDataSource(gamma, beta[:2])
    with pytest.raises(TypeError, match="data_source.*number_of_feature_channels"):
        m.CNNBatchNormalization(device, object())

    class ShortGamma(ProtocolSource):
        def gamma(self):
            return np.ones(2, np.float32)

    with pytest.raises(ValueError, match=r"data_source.gamma\(\)"):
        m.CNNBatchNormalization(device, ShortGamma(5))
    with pytest.raises(TypeError, match="gamma_and_beta_state"):
        fam.forward.reload_gamma_and_beta_with_command_buffer(queue.command_buffer(), None)
    with pytest.raises(ValueError, match="gamma_and_beta_state"):
        fam.forward.reload_gamma_and_beta_with_command_buffer(
            queue.command_buffer(), m.CNNNormalizationGammaAndBetaState(device, np.ones(3), np.zeros(3)))
