"""The optimizers (NNOptimizerStochasticGradientDescent, NNOptimizerRMSProp, NNOptimizerAdam) over
20 steps against torch.optim (float64) and, for what PyTorch does not have (gradient clipping,
gradient rescale, L1 regularization), against a float64 NumPy transcription of spec §2.13.

Each step feeds the same random gradient to both sides. The bound is 1e-4 of the largest value
(float32 state over 20 steps: each element's rounding error grows ~1e-7 per step, far below; any
wrong formula, order or missing term gives an error of the order of the learning rate, >= 1e-3
relative here). Adam: torch adds epsilon after dividing sqrt(v) by sqrt(1 - beta2^t), MPS before;
with epsilon = 1e-8 the difference is < 1e-7 relative.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import ConvSpec, make_conv, randn, rng

STEPS = 20
LENGTH = 1000  # more than one threadgroup of the Metal kernel


def _vec(device, a):
    return m.Vector.from_numpy(np.asarray(a, np.float32), device)


def _gradients(seed, length=LENGTH, steps=STEPS, scale=1.0):
    gen = rng(seed)
    return [randn(gen, length) * np.float32(scale) for _ in range(steps)]


def _torch_run(make_opt, w0, grads):
    p = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    opt = make_opt([p])
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().numpy()


def _run(queue, encode_step, steps):
    for k in range(steps):
        cb = queue.command_buffer()
        encode_step(cb, k)
        cb.commit()
        cb.wait_until_completed()


# ---- NumPy reference of spec §2.13 (float64) ---------------------------------------------------------


def _preprocess(g, w, rescale=1.0, clip=None, reg=None, reg_scale=0.0):
    g = np.asarray(g, np.float64)
    if clip is not None:
        g = np.clip(g, clip[0], clip[1])
    g = rescale * g
    if reg == "l1":
        g = g + reg_scale * np.sign(w)
    elif reg == "l2":
        g = g + reg_scale * w
    return g


def _numpy_sgd(w0, grads, lr, mu=0.0, nesterov=False, momentum=True, **pre):
    w = np.asarray(w0, np.float64).copy()
    mom = np.zeros_like(w)
    for g in grads:
        g = _preprocess(g, w, **pre)
        if not momentum:
            w = w - lr * g
        elif nesterov:
            mom = mu * mom + g
            w = w - lr * (g + mu * mom)
        else:
            mom = mu * mom + lr * g
            w = w - mom
    return w


def _numpy_adam(w0, grads, lr, b1=0.9, b2=0.999, eps=1e-8, amsgrad=False, t0=0, **pre):
    w = np.asarray(w0, np.float64).copy()
    mom, vel, vmax = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    t = t0
    for g in grads:
        g = _preprocess(g, w, **pre)
        t += 1
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        mom = b1 * mom + (1 - b1) * g
        vel = b2 * vel + (1 - b2) * g * g
        vmax = np.maximum(vmax, vel)
        w = w - lr_t * mom / (np.sqrt(vmax if amsgrad else vel) + eps)
    return w


# ---- SGD ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("momentum,nesterov,weight_decay", [
    (0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.0), (0.5, False, 0.01), (0.9, True, 0.05)],
    ids=["plain", "momentum", "nesterov", "momentum-l2", "nesterov-l2"])
def test_sgd_matches_torch(device, queue, check, momentum, nesterov, weight_decay):
    gen = rng(f"sgd-{momentum}-{nesterov}-{weight_decay}")
    w0 = randn(gen, LENGTH)
    grads = _gradients(f"sgd-g-{momentum}")
    lr = 0.05
    desc = m.NNOptimizerDescriptor(learning_rate=lr, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=weight_decay)
    opt = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=momentum, use_nesterov_momentum=nesterov,
                                                 optimizer_descriptor=desc)
    w, mom = _vec(device, w0), m.Vector(device, LENGTH)
    g = m.Vector(device, LENGTH)

    def step(cb, k):
        g.numpy()[...] = grads[k]
        opt.encode(cb, g, w, mom if momentum > 0 else None, w)

    _run(queue, step, STEPS)
    expected = _torch_run(lambda p: torch.optim.SGD(p, lr=lr, momentum=momentum, nesterov=nesterov,
                                                    weight_decay=weight_decay), w0, grads)
    check(w.to_numpy(), expected, "SGD weights after 20 steps vs torch.optim.SGD")


def test_sgd_misspelled_nesterov_and_learning_rate_init(device):
    opt = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=0.5, use_nestrov_momentum=True)
    assert opt.use_nesterov_momentum and opt.use_nestrov_momentum
    assert opt.momentum_scale == 0.5
    plain = m.NNOptimizerStochasticGradientDescent(device, 0.25)
    assert plain.learning_rate == 0.25 and plain.momentum_scale == 0.0 and not plain.use_nesterov_momentum
    assert plain.gradient_rescale == 1.0 and not plain.apply_gradient_clipping
    assert plain.regularization_type == m.NNRegularizationType.NONE
    plain.set_learning_rate(0.5)
    assert plain.learning_rate == 0.5
    with pytest.raises(ValueError, match="use_nesterov_momentum"):
        m.NNOptimizerStochasticGradientDescent(device, use_nesterov_momentum=True, use_nestrov_momentum=False)


@pytest.mark.parametrize("reg", ["l1", "l2", None])
def test_sgd_with_clipping_rescale_and_regularization_matches_numpy(device, queue, check, reg):
    gen = rng(f"sgd-clip-{reg}")
    w0 = randn(gen, LENGTH)
    w0[:8] = 0.0  # sign(0) = 0 for L1
    grads = _gradients(f"sgd-clip-g-{reg}", scale=2.0)
    lr, mu = 0.03, 0.8
    reg_type = {"l1": m.NNRegularizationType.L1, "l2": m.NNRegularizationType.L2, None: m.NNRegularizationType.NONE}
    desc = m.NNOptimizerDescriptor(learning_rate=lr, gradient_rescale=0.5, apply_gradient_clipping=True,
                                   gradient_clip_max=1.0, gradient_clip_min=-0.75, regularization_type=reg_type[reg],
                                   regularization_scale=0.02)
    opt = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=mu, optimizer_descriptor=desc)
    assert opt.apply_gradient_clipping and opt.gradient_clip_max == 1.0 and opt.gradient_clip_min == -0.75
    w, mom, out = _vec(device, w0), m.Vector(device, LENGTH), m.Vector(device, LENGTH)
    g = m.Vector(device, LENGTH)

    def step(cb, k):
        g.numpy()[...] = grads[k]
        opt.encode(cb, g, w, mom, out)  # out of place, then copy back
    for k in range(STEPS):
        cb = queue.command_buffer()
        step(cb, k)
        cb.commit()
        cb.wait_until_completed()
        w.numpy()[...] = out.numpy()
    expected = _numpy_sgd(w0, grads, lr, mu, clip=(-0.75, 1.0), rescale=0.5, reg=reg, reg_scale=0.02)
    check(w.to_numpy(), expected, "SGD with clipping / rescale / regularization vs NumPy")


def test_clipping_happens_before_rescale(device, queue):
    """One element, one plain SGD step: clip(4) = 1 then rescale 3 gives 3 (rescale first would give 1)."""
    desc = m.NNOptimizerDescriptor(learning_rate=1.0, gradient_rescale=3.0, apply_gradient_clipping=True,
                                   gradient_clip_max=1.0, gradient_clip_min=-1.0)
    opt = m.NNOptimizerStochasticGradientDescent(device, optimizer_descriptor=desc)
    w, g = _vec(device, [0.0, 0.0]), _vec(device, [4.0, -0.25])
    _run(queue, lambda cb, k: opt.encode(cb, g, w), 1)
    np.testing.assert_array_equal(w.to_numpy(), np.float32([-3.0, 0.75]))


# ---- RMSProp ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("decay,weight_decay", [(0.9, 0.0), (0.99, 0.01)])
def test_rmsprop_matches_torch(device, queue, check, decay, weight_decay):
    gen = rng(f"rms-{decay}")
    w0 = randn(gen, LENGTH)
    grads = _gradients(f"rms-g-{decay}")
    lr, eps = 0.01, 1e-8
    desc = m.NNOptimizerDescriptor(learning_rate=lr, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=weight_decay)
    opt = m.NNOptimizerRMSProp(device, decay=decay, epsilon=eps, optimizer_descriptor=desc)
    assert opt.decay == decay
    w, s, g = _vec(device, w0), m.Vector(device, LENGTH), m.Vector(device, LENGTH)

    def step(cb, k):
        g.numpy()[...] = grads[k]
        opt.encode(cb, g, w, s)

    _run(queue, step, STEPS)
    expected = _torch_run(lambda p: torch.optim.RMSprop(p, lr=lr, alpha=decay, eps=eps, weight_decay=weight_decay),
                          w0, grads)
    check(w.to_numpy(), expected, "RMSProp weights after 20 steps vs torch.optim.RMSprop")


# ---- Adam ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("amsgrad", [False, True], ids=["adam", "amsgrad"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch(device, queue, check, amsgrad, weight_decay):
    gen = rng(f"adam-{amsgrad}-{weight_decay}")
    w0 = randn(gen, LENGTH)
    # Shrinking gradients make AMSGrad's maximum differ from the current velocity.
    grads = [g * np.float32(1.0 / (1 + k)) for k, g in enumerate(_gradients(f"adam-g-{amsgrad}"))]
    lr = 0.01
    desc = m.NNOptimizerDescriptor(learning_rate=lr, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=weight_decay)
    opt = m.NNOptimizerAdam(device, beta1=0.8, beta2=0.95, optimizer_descriptor=desc)
    assert opt.time_step == 0 and opt.epsilon == pytest.approx(1e-8)
    w, mom, vel, vmax, g = (_vec(device, w0), m.Vector(device, LENGTH), m.Vector(device, LENGTH),
                            m.Vector(device, LENGTH), m.Vector(device, LENGTH))

    def step(cb, k):
        g.numpy()[...] = grads[k]
        opt.encode(cb, g, w, mom, vel, vmax if amsgrad else None)

    _run(queue, step, STEPS)
    assert opt.time_step == STEPS
    expected = _torch_run(lambda p: torch.optim.Adam(p, lr=lr, betas=(0.8, 0.95), eps=1e-8,
                                                     weight_decay=weight_decay, amsgrad=amsgrad), w0, grads)
    check(w.to_numpy(), expected, "Adam weights after 20 steps vs torch.optim.Adam")
    ref = _numpy_adam(w0, grads, lr, 0.8, 0.95, amsgrad=amsgrad, reg="l2" if weight_decay else None,
                      reg_scale=weight_decay)
    check(w.to_numpy(), ref, "Adam vs the NumPy transcription of spec §2.13")


def test_adam_time_step_and_l1_clipping_match_numpy(device, queue, check):
    gen = rng("adam-l1")
    w0 = randn(gen, LENGTH)
    grads = _gradients("adam-l1-g", scale=3.0)
    desc = m.NNOptimizerDescriptor(learning_rate=0.02, apply_gradient_clipping=True, gradient_clip_max=2.0,
                                   gradient_clip_min=-2.0, regularization_type=m.NNRegularizationType.L1,
                                   regularization_scale=0.1)
    opt = m.NNOptimizerAdam(device, time_step=5, optimizer_descriptor=desc)
    w, mom, vel, g = _vec(device, w0), m.Vector(device, LENGTH), m.Vector(device, LENGTH), m.Vector(device, LENGTH)

    def step(cb, k):
        g.numpy()[...] = grads[k]
        opt.encode(cb, g, w, mom, vel)

    _run(queue, step, STEPS)
    assert opt.time_step == 5 + STEPS
    ref = _numpy_adam(w0, grads, 0.02, t0=5, clip=(-2.0, 2.0), reg="l1", reg_scale=0.1)
    check(w.to_numpy(), ref, "Adam with L1 and clipping from time_step 5 vs NumPy")


# ---- convolution states ---------------------------------------------------------------------------------

SPEC = ConvSpec(3, 3, 8, 40)  # 2880 weights, 40 biases


def _conv_states(device, queue, seed):
    gen = rng(seed)
    w0, b0 = SPEC.random_parameters(gen)
    _, conv, _ = make_conv(device, SPEC, w0, b0)
    x = m.Image.from_numpy(randn(gen, 1, 4, 4, SPEC.cin), device)
    cb = queue.command_buffer()
    ws = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    gs = conv.result_state(x)
    return gen, w0, b0, ws, gs


@pytest.mark.parametrize("kind", ["sgd", "sgd-weights-only", "rmsprop", "adam", "amsgrad"])
def test_convolution_state_update_matches_vectors(device, queue, check, kind):
    gen, w0, b0, ws, gs = _conv_states(device, queue, f"conv-opt-{kind}")
    nw, nb = w0.size, b0.size
    gw = [randn(gen, nw) for _ in range(3)]
    gb = [randn(gen, nb) for _ in range(3)]
    result = m.CNNConvolutionWeightsAndBiasesState(device, SPEC.descriptor())
    desc = m.NNOptimizerDescriptor(learning_rate=0.05, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=0.01)
    vecs = lambda: [m.Vector(device, nw), m.Vector(device, nb)]  # noqa: E731
    if kind.startswith("sgd"):
        opt = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=0.9, optimizer_descriptor=desc)
        mom = vecs()[:1] if kind == "sgd-weights-only" else vecs()
        encode = lambda cb, src, dst: opt.encode(cb, gs, src, mom, dst)  # noqa: E731
        ref = lambda w, gl: _numpy_sgd(w, gl, 0.05, 0.9, reg="l2", reg_scale=0.01)  # noqa: E731
    elif kind == "rmsprop":
        opt = m.NNOptimizerRMSProp(device, optimizer_descriptor=desc)
        s = vecs()
        encode = lambda cb, src, dst: opt.encode(cb, gs, src, s, dst)  # noqa: E731
        ref = lambda w, gl: _torch_run(lambda p: torch.optim.RMSprop(p, lr=0.05, alpha=0.9, eps=1e-8,  # noqa: E731
                                                                     weight_decay=0.01), w, gl)
    else:
        opt = m.NNOptimizerAdam(device, optimizer_descriptor=desc)
        mom, vel, vmax = vecs(), vecs(), vecs() if kind == "amsgrad" else None
        encode = lambda cb, src, dst: opt.encode(cb, gs, src, mom, vel, vmax, dst)  # noqa: E731
        ref = lambda w, gl: _numpy_adam(w, gl, 0.05, amsgrad=kind == "amsgrad", reg="l2",  # noqa: E731
                                        reg_scale=0.01)
    for k in range(3):
        gs.gradient_for_weights.reshape(-1)[...] = gw[k]
        gs.gradient_for_biases[...] = gb[k]
        # Alternate out-of-place (ws -> result) and in-place (result -> result) updates.
        src, dst = (ws, result) if k == 0 else (result, result if k == 1 else None)
        _run(queue, lambda cb, _k: encode(cb, src, dst), 1)
    check(result.weights.reshape(-1), ref(w0.reshape(-1), gw), f"{kind}: weights")
    if kind == "sgd-weights-only":
        np.testing.assert_array_equal(result.biases, b0)  # copied, not updated
    else:
        check(result.biases, ref(b0, gb), f"{kind}: biases")
    np.testing.assert_array_equal(ws.weights, w0)  # the out-of-place source is untouched


# ---- bad input ------------------------------------------------------------------------------------------


def test_bad_hyperparameters_raise(device):
    # Negative learning rates and regularization scales are valid, as in MPS (test_parity_ii_buffers.py
    # uses them); only non-finite values are refused.
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="learning_rate"):
            m.NNOptimizerDescriptor(learning_rate=bad)
        with pytest.raises(ValueError, match="learning_rate"):
            m.NNOptimizerStochasticGradientDescent(device, bad)
        with pytest.raises(ValueError, match="regularization_scale"):
            m.NNOptimizerDescriptor(regularization_scale=bad)
    with pytest.raises(ValueError, match="learning_rate"):
        m.NNOptimizerAdam(device, 0.1).set_learning_rate(float("nan"))
    with pytest.raises(ValueError, match="gradient_clip_min"):
        m.NNOptimizerDescriptor(apply_gradient_clipping=True, gradient_clip_max=-1.0, gradient_clip_min=1.0)
    d = m.NNOptimizerDescriptor()
    with pytest.raises(ValueError, match="learning_rate"):
        d.learning_rate = float("inf")
    assert d.learning_rate == pytest.approx(0.001)  # unchanged by the failed assignment
    for bad in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="beta1"):
            m.NNOptimizerAdam(device, beta1=bad)
        with pytest.raises(ValueError, match="beta2"):
            m.NNOptimizerAdam(device, beta2=bad)
        with pytest.raises(ValueError, match="decay"):
            m.NNOptimizerRMSProp(device, decay=bad)
        with pytest.raises(ValueError, match="momentum_scale"):
            m.NNOptimizerStochasticGradientDescent(device, momentum_scale=bad)
    with pytest.raises(ValueError, match="time_step"):
        m.NNOptimizerAdam(device, time_step=-1)
    with pytest.raises(TypeError, match="learning_rate"):
        m.NNOptimizerAdam(device, 0.1, optimizer_descriptor=m.NNOptimizerDescriptor())
    with pytest.raises(ValueError, match="length"):
        m.Vector(device, 0)
    with pytest.raises(ValueError, match="vector_bytes"):
        m.VectorDescriptor(4, vectors=2, vector_bytes=8)


def test_mismatched_vectors_raise(device, queue):
    opt = m.NNOptimizerAdam(device, 0.1)
    g, w = m.Vector(device, 10), m.Vector(device, 10)
    short = m.Vector(device, 9)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="input_momentum_vector"):
        opt.encode(cb, g, w, short, m.Vector(device, 10))
    with pytest.raises(ValueError, match="input_velocity_vector"):
        opt.encode(cb, g, w, m.Vector(device, 10), short)
    with pytest.raises(ValueError, match="maximum_velocity_vector"):
        opt.encode(cb, g, w, m.Vector(device, 10), m.Vector(device, 10), short)
    with pytest.raises(ValueError, match="result_values_vector"):
        opt.encode(cb, g, w, m.Vector(device, 10), m.Vector(device, 10), None, short)
    with pytest.raises(ValueError, match="input_values_vector"):
        m.NNOptimizerStochasticGradientDescent(device, 0.1).encode(cb, g, short)
    assert opt.time_step == 0  # failed encodes do not advance it
    padded = m.Vector(device, m.VectorDescriptor(10, vectors=2, vector_bytes=48))
    with pytest.raises(ValueError, match="dense"):
        m.NNOptimizerStochasticGradientDescent(device, 0.1).encode(cb, padded, padded)
    cb.commit()
    cb.wait_until_completed()


def test_mismatched_convolution_momentum_vectors_raise(device, queue):
    _, w0, b0, ws, gs = _conv_states(device, queue, "conv-bad")
    sgd = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=0.9,
                                                optimizer_descriptor=m.NNOptimizerDescriptor())
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match=r"input_momentum_vectors\[0\]"):
        sgd.encode(cb, gs, ws, [m.Vector(device, w0.size + 1)])
    with pytest.raises(ValueError, match=r"input_momentum_vectors\[1\]"):
        sgd.encode(cb, gs, ws, [m.Vector(device, w0.size), m.Vector(device, 3)])
    with pytest.raises(ValueError, match="input_momentum_vectors"):
        sgd.encode(cb, gs, ws, [m.Vector(device, w0.size)] * 3)
    adam = m.NNOptimizerAdam(device, 0.1)
    with pytest.raises(ValueError, match="input_velocity_vectors"):
        adam.encode(cb, gs, ws, [m.Vector(device, w0.size), m.Vector(device, b0.size)], [m.Vector(device, w0.size)])
    with pytest.raises(ValueError, match="input_sum_of_squares_vectors"):
        m.NNOptimizerRMSProp(device, 0.1).encode(cb, gs, ws, [])
    other = m.CNNConvolutionWeightsAndBiasesState(device, ConvSpec(3, 3, 8, 4).descriptor())
    with pytest.raises(ValueError, match="result_state"):
        sgd.encode(cb, gs, ws, None, other)
    cb.commit()
    cb.wait_until_completed()


def test_vector_views(device):
    v = m.Vector.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device)
    assert (v.length, v.vectors, v.vector_bytes, v.resource_size) == (3, 2, 12, 24)
    np.testing.assert_array_equal(v.numpy(), np.arange(6).reshape(2, 3))
    v.numpy()[1, 2] = 42.0
    assert v.to_numpy()[1, 2] == 42.0
    assert m.VectorDescriptor.vector_bytes_for_length(5) == 20
