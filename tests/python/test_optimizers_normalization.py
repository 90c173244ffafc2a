"""The optimizers' batch-normalization encodes (spec §2.13): SGD, RMSProp and Adam updating γ/β from a
CNNBatchNormalizationState (its gamma/beta and gradient_for_gamma/beta) into a
CNNNormalizationGammaAndBetaState, and the gradient-state + source-state form.

Oracle: a PyTorch BatchNorm (F.batch_norm(training=True) then ReLU, float64) trained in lockstep by
torch.optim on the loss sum(Y·G_k) with a fresh random G_k each step. The fused ReLU makes each step's
gradient depend on the γ/β of the previous steps, so a wrong update (or γ/β not reloaded into the
kernel) changes every later gradient. After STEPS steps the kernel's γ/β (read back from the result
state) must match torch's within 1e-4 relative (float32 state against a float64 oracle over a few
steps; a wrong term is of the order of the learning rate, > 1e-2 relative).

MPS has no optimizer encode taking an instance or group normalization gradient state (their γ/β are
updated through the data source's update methods, tests/python/test_instance_group_normalization.py);
test_no_encodes_on_instance_or_group_states checks that mpsgrad invents none.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng

STEPS = 4
SHAPE = (2, 5, 6, 40)  # 40 channels: more than one simdgroup of the optimizer kernel's lanes
LR = 0.05


def _nchw(x):
    return torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)


class BatchNormTrainer:
    """One BN + ReLU layer trained by an mpsgrad optimizer through the batch-normalization encodes."""

    def __init__(self, device, gamma, beta):
        c = gamma.size
        self.device = device
        source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, np.zeros(c, np.float32),
                                                          np.ones(c, np.float32), epsilon=1e-3)
        relu = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
        self.forward = m.CNNBatchNormalization(device, source, relu)
        self.statistics = m.CNNBatchNormalizationStatistics(device)
        self.statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device, relu)
        self.result = m.CNNNormalizationGammaAndBetaState(device, gamma, beta)

    def step(self, queue, x, g, update, split):
        xs = m.batch_from_numpy(x, self.device)
        gs = m.batch_from_numpy(g, self.device)
        state = self.forward.result_state(xs[0])
        cb = queue.command_buffer()
        self.statistics.encode_batch(cb, xs, state)
        self.forward.encode_batch(cb, xs, state)
        self.statistics_gradient.encode_batch(cb, gs, xs, state)
        if split:
            # A second state written by an inference forward of the same kernel: it holds the
            # same γ/β, read from it as the source values.
            source = self.forward.result_state(xs[0])
            self.forward.encode(cb, xs[0], source)
            update(cb, state, source, self.result)
        else:
            update(cb, state, None, self.result)
        self.forward.reload_gamma_and_beta_with_command_buffer(cb, self.result)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error


def _vectors(device, c):
    return [m.Vector(device, c), m.Vector(device, c)]


def _make(kind, device, c):
    """(mpsgrad update(cb, state, source, result), torch optimizer factory) for one optimizer kind."""
    desc = m.NNOptimizerDescriptor(learning_rate=LR, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=0.01)

    def states(*args):  # the single-state or the gradient + source form
        return args[:1] if args[1] is None else args[:2]

    if kind in ("sgd", "nesterov", "sgd-plain"):
        mu = 0.0 if kind == "sgd-plain" else 0.9
        opt = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=mu,
                                                    use_nesterov_momentum=kind == "nesterov",
                                                    optimizer_descriptor=desc)
        mom = None if kind == "sgd-plain" else _vectors(device, c)

        def update(cb, state, source, result):
            opt.encode(cb, *states(state, source), mom, result)

        return update, lambda p: torch.optim.SGD(p, lr=LR, momentum=mu, nesterov=kind == "nesterov",
                                                 weight_decay=0.01)
    if kind == "rmsprop":
        opt = m.NNOptimizerRMSProp(device, decay=0.9, optimizer_descriptor=desc)
        s = _vectors(device, c)

        def update(cb, state, source, result):
            opt.encode(cb, *states(state, source), s, result)

        return update, lambda p: torch.optim.RMSprop(p, lr=LR, alpha=0.9, eps=1e-8, weight_decay=0.01)
    amsgrad = kind == "amsgrad"
    opt = m.NNOptimizerAdam(device, optimizer_descriptor=desc)
    mom, vel, vmax = _vectors(device, c), _vectors(device, c), (_vectors(device, c) if amsgrad else None)

    def update(cb, state, source, result):
        opt.encode(cb, *states(state, source), mom, vel, vmax, result)

    return update, lambda p: torch.optim.Adam(p, lr=LR, eps=1e-8, weight_decay=0.01, amsgrad=amsgrad)


@pytest.mark.parametrize("split", [False, True], ids=["state", "gradient+source"])
@pytest.mark.parametrize("kind", ["sgd-plain", "sgd", "nesterov", "rmsprop", "adam", "amsgrad"])
def test_batch_normalization_training_matches_torch(device, queue, check, kind, split):
    n, h, w, c = SHAPE
    gen = rng(f"bn-opt-{kind}-{split}")
    gamma = (1.0 + 0.3 * randn(gen, c)).astype(np.float32)
    beta = (0.3 * randn(gen, c)).astype(np.float32)
    trainer = BatchNormTrainer(device, gamma, beta)
    update, torch_opt = _make(kind, device, c)

    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    opt = torch_opt([W, B])
    for k in range(STEPS):
        x = (randn(gen, n, h, w, c) * 1.5 + 0.5).astype(np.float32)
        g = randn(gen, n, h, w, c)
        trainer.step(queue, x, g, update, split)
        opt.zero_grad()
        y = F.relu(F.batch_norm(_nchw(x), None, None, W, B, training=True, eps=1e-3))
        (y * _nchw(g)).sum().backward()
        opt.step()
        check(trainer.result.gamma, W.detach().numpy(), f"{kind} step {k}: gamma")
        check(trainer.result.beta, B.detach().numpy(), f"{kind} step {k}: beta")


def test_gamma_only_vectors_copy_beta(device, queue, check):
    """One momentum vector ([gamma]): beta is copied to the result unchanged (as for convolutions)."""
    n, h, w, c = SHAPE
    gen = rng("bn-opt-gamma-only")
    gamma, beta = (1.0 + 0.3 * randn(gen, c)).astype(np.float32), randn(gen, c)
    trainer = BatchNormTrainer(device, gamma, beta)
    sgd = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=0.5,
                                                optimizer_descriptor=m.NNOptimizerDescriptor(learning_rate=LR))
    mom = [m.Vector(device, c)]
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    trainer.step(queue, x, g, lambda cb, s, _src, r: sgd.encode(cb, s, mom, r), False)
    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    y = F.relu(F.batch_norm(_nchw(x), None, None, W, torch.tensor(beta, dtype=torch.float64), training=True,
                            eps=1e-3))
    (y * _nchw(g)).sum().backward()
    check(trainer.result.gamma, gamma - LR * W.grad.numpy(), "gamma")
    np.testing.assert_array_equal(trainer.result.beta, beta)


def test_source_state_supplies_the_values(device, queue, check):
    """Gradient + source form: the gradients come from the gradient state, the values from the source
    state (here a second kernel's state holding other γ/β)."""
    n, h, w, c = SHAPE
    gen = rng("bn-opt-source")
    trainer = BatchNormTrainer(device, np.ones(c, np.float32), np.zeros(c, np.float32))
    gamma2, beta2 = randn(gen, c), randn(gen, c)
    other = BatchNormTrainer(device, gamma2, beta2)
    xs = m.batch_from_numpy(randn(gen, n, h, w, c), device)
    gs = m.batch_from_numpy(randn(gen, n, h, w, c), device)
    state, source = trainer.forward.result_state(xs[0]), other.forward.result_state(xs[0])
    result = m.CNNNormalizationGammaAndBetaState(device, np.zeros(c, np.float32), np.zeros(c, np.float32))
    sgd = m.NNOptimizerStochasticGradientDescent(device, LR)
    cb = queue.command_buffer()
    trainer.statistics.encode_batch(cb, xs, state)
    trainer.forward.encode_batch(cb, xs, state)
    trainer.statistics_gradient.encode_batch(cb, gs, xs, state)
    other.forward.encode(cb, xs[0], source)
    sgd.encode(cb, batch_normalization_gradient_state=state, batch_normalization_source_state=source,
               result_state=result)
    cb.commit()
    cb.wait_until_completed()
    check(result.gamma, gamma2 - LR * state.gradient_for_gamma.astype(np.float64), "gamma")
    check(result.beta, beta2 - LR * state.gradient_for_beta.astype(np.float64), "beta")


def test_bad_batch_normalization_encodes_raise(device, queue):
    n, h, w, c = SHAPE
    gen = rng("bn-opt-bad")
    trainer = BatchNormTrainer(device, np.ones(c, np.float32), np.zeros(c, np.float32))
    xs = m.batch_from_numpy(randn(gen, n, h, w, c), device)
    gs = m.batch_from_numpy(randn(gen, n, h, w, c), device)
    state = trainer.forward.result_state(xs[0])
    adam = m.NNOptimizerAdam(device, 0.1)
    vecs = lambda k: [m.Vector(device, k), m.Vector(device, k)]  # noqa: E731
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="gradient_for_gamma"):  # no statistics gradient yet
        adam.encode(cb, state, vecs(c), vecs(c), None, trainer.result)
    trainer.statistics.encode_batch(cb, xs, state)
    trainer.forward.encode_batch(cb, xs, state)
    trainer.statistics_gradient.encode_batch(cb, gs, xs, state)
    with pytest.raises(ValueError, match="result_state"):
        adam.encode(cb, state, vecs(c), vecs(c))
    small = m.CNNNormalizationGammaAndBetaState(device, np.ones(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="result_state"):
        adam.encode(cb, state, vecs(c), vecs(c), None, small)
    with pytest.raises(ValueError, match=r"input_momentum_vectors\[1\] \(beta\)"):
        adam.encode(cb, state, [m.Vector(device, c), m.Vector(device, c + 1)], vecs(c), None, trainer.result)
    with pytest.raises(ValueError, match=r"input_velocity_vectors"):
        adam.encode(cb, state, vecs(c), [m.Vector(device, c)], None, trainer.result)
    with pytest.raises(ValueError, match=r"input_sum_of_squares_vectors: expected 1 vector \[gamma\]"):
        m.NNOptimizerRMSProp(device, 0.1).encode(cb, state, [], trainer.result)
    with pytest.raises(TypeError, match="input_momentum_vectors"):
        m.NNOptimizerStochasticGradientDescent(device, 0.1).encode(cb, state, "momentum", trainer.result)
    assert adam.time_step == 0  # failed encodes do not advance it
    cb.commit()
    cb.wait_until_completed()


@pytest.mark.parametrize("family", ["instance", "group"])
def test_no_encodes_on_instance_or_group_states(device, queue, family):
    """MPSNNOptimizers.h declares state encodes for convolution and batch normalization states only: an
    instance or group normalization gradient state is a TypeError for every optimizer."""
    c = 4
    gamma, beta = np.ones(c, np.float32), np.zeros(c, np.float32)
    if family == "instance":
        kernel = m.CNNInstanceNormalization(device, m.CNNInstanceNormalizationWeightsDataSource(gamma, beta))
    else:
        kernel = m.CNNGroupNormalization(device, m.CNNGroupNormalizationWeightsDataSource(gamma, beta,
                                                                                          number_of_groups=2))
    xs = m.batch_from_numpy(randn(rng(f"no-opt-{family}"), 1, 3, 3, c), device)
    cb = queue.command_buffer()
    _, states = kernel.encode_batch(cb, xs, destination_state_is_temporary=False)
    result = m.CNNNormalizationGammaAndBetaState(device, gamma, beta)
    vecs = lambda: [m.Vector(device, c), m.Vector(device, c)]  # noqa: E731
    forms = [(m.NNOptimizerStochasticGradientDescent(device, LR), (vecs(),)),
             (m.NNOptimizerRMSProp(device, LR), (vecs(),)),
             (m.NNOptimizerAdam(device, LR), (vecs(), vecs(), None))]
    for optimizer, vectors in forms:
        with pytest.raises(TypeError, match="encode"):
            optimizer.encode(cb, states[0], *vectors, result)
        with pytest.raises(TypeError, match="encode"):
            optimizer.encode(cb, states[0], states[0], *vectors, result)
    cb.commit()
    cb.wait_until_completed()
