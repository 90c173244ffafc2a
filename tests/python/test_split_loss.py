"""The 10.15 split loss: NNForwardLoss (the loss), NNLossGradient (source gradient x the loss's
derivative with respect to the predictions) and NNInitialGradient (the seed 1.0), against the float64 PyTorch reference of test_loss.py (the same
oracle CNNLoss is checked against: PyTorch loss functions, autograd for the gradients).

Chain rule under test: NNLossGradient(G) = G * dL/dy, where G is 1x1x1 per image (broadcast) for a
reduced loss and per element for reduction NONE, so with G = NNInitialGradient's ones it equals
CNNLoss's gradient. Bound: 1e-4 relative (as test_loss.py).

compute_label_gradients: the destination receives the gradient with respect to the labels (MPS:
"the secondary (labels) source image") of the same objective, against PyTorch autograd with the
target requiring grad, for every type x reduction x weighting and with label smoothing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import randn, rng
from test_loss import REDUCTIONS, TYPES, R, T, _elementwise, _inputs, _reference

N, H, W, C = 2, 3, 4, 5


def _cases():
    for t in TYPES:
        for r in REDUCTIONS:
            if t == T.COSINE_DISTANCE and r != R.SUM:
                continue
            yield t, r


def _images(a, device):
    return [m.Image.from_numpy(a[n:n + 1], device) for n in range(a.shape[0])]


def _stack(images):
    return np.concatenate([i.to_numpy() for i in images])


def _persistent(*kernels):
    """Returning encodes allocate through destination_image_allocator, temporary images by default
    (valid on their command buffer only): these tests read the results afterwards."""
    for k in kernels:
        k.destination_image_allocator = m.ImageAllocator.persistent()
    return kernels if len(kernels) > 1 else kernels[0]


def _run(device, queue, fn):
    cb = queue.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return out


@pytest.mark.parametrize("weighted", [False, True], ids=["scalar-weight", "weights-image"])
@pytest.mark.parametrize("loss_type,reduction", list(_cases()), ids=lambda v: str(v).split(".")[-1])
def test_forward_loss_and_gradient_match_cnn_loss_reference(device, queue, check, loss_type, reduction, weighted):
    gen = rng(f"split-{loss_type}-{reduction}-{weighted}")
    y, t = _inputs(gen, loss_type)
    w = (gen.uniform(0, 2, y.shape) * (gen.uniform(0, 1, y.shape) > 0.2)).astype(np.float32) if weighted else None
    d = m.CNNLossDescriptor(loss_type, reduction)
    d.weight = 0.7
    forward, gradient, initial = _persistent(m.NNForwardLoss(device, d), m.NNLossGradient(device, d),
                                             m.NNInitialGradient(device))
    ys, ts = _images(y, device), _images(t, device)
    ws = _images(w, device) if weighted else None
    losses = _run(device, queue, lambda cb: forward.encode_batch(cb, ys, ts, ws))
    seeds = _run(device, queue, lambda cb: initial.encode_batch(cb, losses))
    grads = _run(device, queue, lambda cb: gradient.encode_batch(cb, seeds, ys, ts, ws))
    ref_loss, ref_grad = _reference(d, y, t, w)
    per_element = reduction == R.NONE
    check(_stack(losses).reshape(ref_loss.shape), ref_loss, "forward loss")
    np.testing.assert_array_equal(_stack(seeds), np.ones_like(_stack(losses)))
    check(_stack(grads), ref_grad, "gradient with the initial gradient")
    # A non-trivial source gradient scales the derivative (per image, or per element for NONE).
    g_shape = y.shape if per_element else (N, 1, 1, 1)
    g = randn(gen, *g_shape)
    grads = _run(device, queue, lambda cb: gradient.encode_batch(cb, _images(g, device), ys, ts, ws))
    if per_element:
        yy = torch.tensor(y, dtype=torch.float64, requires_grad=True)
        ww = torch.tensor(w, dtype=torch.float64) if weighted else torch.full(y.shape, 0.7, dtype=torch.float64)
        el = ww * _elementwise(loss_type, yy, torch.tensor(t, dtype=torch.float64), d)
        (el * torch.tensor(g, dtype=torch.float64)).sum().backward()
        expected = yy.grad.numpy()
    else:
        expected = ref_grad * g
    check(_stack(grads), expected, "gradient with a random source gradient")


def test_initial_gradient_single_and_batch(device, queue):
    k = _persistent(m.NNInitialGradient(device))
    x = m.Image.from_numpy(randn(rng("initial"), 1, 7, 9, 6), device)
    dst = m.Image.from_numpy(np.zeros((1, 7, 9, 6), np.float32), device)
    out = _run(device, queue, lambda cb: k.encode(cb, x, dst))
    assert out is dst
    np.testing.assert_array_equal(dst.to_numpy(), np.ones((1, 7, 9, 6)))
    out = _run(device, queue, lambda cb: k.encode(cb, x))
    np.testing.assert_array_equal(out.to_numpy(), np.ones((1, 7, 9, 6)))


def test_properties_and_bad_inputs(device, queue):
    d = m.CNNLossDescriptor(T.HUBER, R.MEAN)
    k = m.NNLossGradient(device, d)
    assert (k.loss_type, k.reduction_type, k.number_of_classes, k.weight, k.delta) == (T.HUBER, R.MEAN, 1, 1.0, 1.0)
    assert k.reduce_across_batch is False
    k.delta = 2.5
    assert k.delta == 2.5
    with pytest.raises(ValueError, match="delta"):
        k.delta = -1.0
    assert k.delta == 2.5
    with pytest.raises(ValueError, match="label_smoothing"):
        k.label_smoothing = 1.5
    bad = m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)
    bad.loss_type, bad.reduction_type = T.COSINE_DISTANCE, R.MEAN
    with pytest.raises(ValueError, match="reduction_type"):
        m.NNForwardLoss(device, bad)
    gen = rng("split-bad")
    y, t = _images(randn(gen, N, H, W, C), device), _images(randn(gen, N, H, W + 1, C), device)
    forward = m.NNForwardLoss(device, d)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="labels"):
        forward.encode_batch(cb, y, t)
    with pytest.raises(ValueError, match="labels"):
        forward.encode_batch(cb, y, y[:1])
    with pytest.raises(ValueError, match="weights"):
        forward.encode_batch(cb, y, y, t)
    with pytest.raises(ValueError, match="destination_images"):
        forward.encode_batch(cb, y, y, None, y)  # a reduced loss is 1x1x1
    with pytest.raises(ValueError, match="source_gradients"):
        k.encode_batch(cb, y, y, y)  # a reduced loss's gradient is 1x1x1 per image
    cb.commit()
    cb.wait_until_completed()


def _label_inputs(gen, loss_type):
    """_inputs, with Hinge labels that include 0.5 (t' = 0: the margin is 1 whatever y)."""
    y, t = _inputs(gen, loss_type)
    if loss_type == T.HINGE:
        t = gen.choice(np.array([0.0, 0.5, 1.0], np.float32), size=t.shape)
    return y, t


def _label_reference(d, y_np, t_np, w_np, g_np):
    """d/dt of sum(G * loss) in float64 (loss per element for NONE, else per image)."""
    y = torch.tensor(y_np, dtype=torch.float64)
    t = torch.tensor(t_np, dtype=torch.float64, requires_grad=True)
    w = torch.tensor(w_np, dtype=torch.float64) if w_np is not None else torch.full(y.shape, d.weight, dtype=torch.float64)
    if d.loss_type == T.COSINE_DISTANCE:
        w = w[..., :1]
    el = w * _elementwise(d.loss_type, y, t, d)
    g = torch.tensor(g_np, dtype=torch.float64)
    if d.reduction_type == R.NONE:
        (el * g).sum().backward()
        return t.grad.numpy()
    sums = el.sum(dim=(1, 2, 3))
    if d.reduction_type == R.MEAN:
        sums = sums / (H * W * (1 if d.loss_type == T.SOFTMAX_CROSS_ENTROPY else C))
    elif d.reduction_type == R.SUM_BY_NON_ZERO_WEIGHTS:
        nz = w != 0
        if d.loss_type == T.SOFTMAX_CROSS_ENTROPY:
            nz = nz.any(-1)
        sums = sums / nz.flatten(1).sum(1).to(torch.float64)
    (sums * g.reshape(-1)).sum().backward()
    return t.grad.numpy()


def _label_cases():
    for t, r in _cases():
        for weighted in (False, True):
            yield pytest.param(t, r, weighted, 0.0, id=f"{t.name}-{r.name}-{'weights' if weighted else 'scalar'}")
        if t in (T.SOFTMAX_CROSS_ENTROPY, T.SIGMOID_CROSS_ENTROPY):
            yield pytest.param(t, r, True, 0.3, id=f"{t.name}-{r.name}-weights-smoothing")


@pytest.mark.parametrize("loss_type,reduction,weighted,smoothing", list(_label_cases()))
def test_label_gradients_match_autograd_wrt_target(device, queue, check, loss_type, reduction, weighted, smoothing):
    gen = rng(f"split-labels-{loss_type}-{reduction}-{weighted}-{smoothing}")
    y, t = _label_inputs(gen, loss_type)
    w = (gen.uniform(0, 2, y.shape) * (gen.uniform(0, 1, y.shape) > 0.2)).astype(np.float32) if weighted else None
    d = m.CNNLossDescriptor(loss_type, reduction)
    d.weight = 0.7
    d.label_smoothing = smoothing
    d.number_of_classes = C
    k = _persistent(m.NNLossGradient(device, d))
    assert k.compute_label_gradients is False
    k.compute_label_gradients = True
    assert k.compute_label_gradients is True
    ys, ts = _images(y, device), _images(t, device)
    ws = _images(w, device) if weighted else None
    per_element = reduction == R.NONE
    for name, g in (("ones", np.ones(y.shape if per_element else (N, 1, 1, 1), np.float32)),
                    ("random", randn(gen, *(y.shape if per_element else (N, 1, 1, 1))))):
        grads = _run(device, queue, lambda cb: k.encode_batch(cb, _images(g, device), ys, ts, ws))
        check(_stack(grads), _label_reference(d, y, t, w, g), f"label gradient, {name} source gradient")
    # The flag changes only the destination: off again, the prediction gradient is back.
    k.compute_label_gradients = False
    seeds = np.ones(y.shape if per_element else (N, 1, 1, 1), np.float32)
    grads = _run(device, queue, lambda cb: k.encode_batch(cb, _images(seeds, device), ys, ts, ws))
    check(_stack(grads), _reference(d, y, t, w)[1], "prediction gradient after the flag is cleared")


def test_forward_loss_states_carry_the_dynamic_properties(device, queue, check):
    """NNForwardLoss's destination states record weight, label_smoothing, epsilon and delta at
    encode time; NNLossGradient given them as source_states uses those, not its own."""
    gen = rng("split-states")
    y, t = _inputs(gen, T.SIGMOID_CROSS_ENTROPY)
    d = m.CNNLossDescriptor(T.SIGMOID_CROSS_ENTROPY, R.MEAN)
    forward, gradient = _persistent(m.NNForwardLoss(device, d), m.NNLossGradient(device, d))
    forward.weight, forward.label_smoothing = 0.6, 0.2
    ys, ts = _images(y, device), _images(t, device)
    states = forward.result_state_batch(ys)
    assert len(states) == N and all(isinstance(s, m.NNGradientState) and not s.is_temporary for s in states)
    losses = _run(device, queue, lambda cb: forward.encode_batch(cb, ys, ts, None, [
        m.Image.from_numpy(np.zeros((1, 1, 1, 1), np.float32), device) for _ in range(N)], destination_states=states))
    forward.weight, forward.label_smoothing = 1.0, 0.0  # later changes do not reach the states
    carried = m.CNNLossDescriptor(T.SIGMOID_CROSS_ENTROPY, R.MEAN)
    carried.weight, carried.label_smoothing = 0.6, 0.2
    ref_loss, ref_grad = _reference(carried, y, t, None)
    check(_stack(losses).reshape(N), ref_loss, "forward loss with the properties set")
    ones = lambda: _images(np.ones((N, 1, 1, 1), np.float32), device)  # noqa: E731
    grads = _run(device, queue, lambda cb: gradient.encode_batch(cb, ones(), ys, ts, source_states=states))
    check(_stack(grads), ref_grad, "gradient with the forward's states")
    grads = _run(device, queue, lambda cb: gradient.encode_batch(cb, ones(), ys, ts))
    check(_stack(grads), _reference(d, y, t, None)[1], "gradient with the kernel's own properties")
    gradient.compute_label_gradients = True
    grads = _run(device, queue, lambda cb: gradient.encode_batch(cb, ones(), ys, ts, source_states=states))
    check(_stack(grads), _label_reference(carried, y, t, None, np.ones((N, 1, 1, 1))), "label gradient, states")


def test_forward_loss_returning_form_with_temporary_states(device, queue, check):
    gen = rng("split-states-temporary")
    y, t = _inputs(gen, T.HUBER)
    d = m.CNNLossDescriptor(T.HUBER, R.NONE)
    forward, gradient = _persistent(m.NNForwardLoss(device, d), m.NNLossGradient(device, d))
    forward.delta = 0.4
    ys, ts = _images(y, device), _images(t, device)
    cb = queue.command_buffer()
    losses, states = forward.encode_batch(cb, ys, ts, destination_state_is_temporary=True)
    assert all(isinstance(s, m.NNGradientState) and s.is_temporary and s.read_count == 1 for s in states)
    grads = gradient.encode_batch(cb, _persistent(m.NNInitialGradient(device)).encode_batch(cb, losses), ys, ts,
                                  source_states=states)
    assert all(s.read_count == 0 for s in states)  # the gradient read them
    with pytest.raises(ValueError, match="source_states"):
        gradient.encode_batch(cb, losses, ys, ts, source_states=states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    carried = m.CNNLossDescriptor(T.HUBER, R.NONE)
    carried.delta = 0.4
    ref_loss, ref_grad = _reference(carried, y, t, None)
    check(_stack(losses), ref_loss, "per-element loss")
    check(_stack(grads), ref_grad, "gradient with delta from the temporary states")
    persistent = _run(device, queue, lambda cb: forward.encode_batch(cb, ys, ts, destination_state_is_temporary=False))
    assert all(not s.is_temporary for s in persistent[1])


def test_loss_states_bad_inputs(device, queue):
    d = m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)
    forward, gradient = m.NNForwardLoss(device, d), m.NNLossGradient(device, d)
    gen = rng("split-states-bad")
    ys, ts = _images(randn(gen, N, H, W, C), device), _images(randn(gen, N, H, W, C), device)
    gs = _images(np.ones((N, 1, 1, 1), np.float32), device)
    dst = _images(np.zeros((N, 1, 1, 1), np.float32), device)
    cb = queue.command_buffer()
    unwritten = forward.result_state_batch(ys)
    with pytest.raises(ValueError, match="source_states.*not written"):
        gradient.encode_batch(cb, gs, ys, ts, source_states=unwritten)
    with pytest.raises(ValueError, match="source_states: 1 states for 2"):
        gradient.encode_batch(cb, gs, ys, ts, source_states=unwritten[:1])
    with pytest.raises(TypeError, match="source_states"):
        gradient.encode_batch(cb, gs, ys, ts, source_states=[m.State(device), m.State(device)])
    with pytest.raises(ValueError, match="destination_states: 1 states for 2"):
        forward.encode_batch(cb, ys, ts, None, dst, destination_states=unwritten[:1])
    with pytest.raises(ValueError, match="destination_state_is_temporary"):
        forward.encode_batch(cb, ys, ts, None, dst, destination_state_is_temporary=True)
    with pytest.raises(ValueError, match="destination_states"):
        forward.encode_batch(cb, ys, ts, destination_states=unwritten)
    with pytest.raises(TypeError, match="compute_label_gradients"):
        gradient.compute_label_gradients = "yes"
    # States of two forward encodes with different properties cannot drive one gradient pass.
    first = forward.result_state_batch(ys[:1])
    forward.encode_batch(cb, ys[:1], ts[:1], None, dst[:1], destination_states=first)
    forward.weight = 0.5
    second = forward.result_state_batch(ys[1:])
    forward.encode_batch(cb, ys[1:], ts[1:], None, dst[1:], destination_states=second)
    with pytest.raises(ValueError, match="source_states: item 1 carries other properties"):
        gradient.encode_batch(cb, gs, ys, ts, source_states=first + second)
    cb.commit()
    cb.wait_until_completed()
