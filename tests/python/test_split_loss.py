"""The 10.15 split loss: NNForwardLoss (the loss), NNLossGradient (source gradient x the loss's
derivative with respect to the predictions) and NNInitialGradient (the seed 1.0), against the float64 PyTorch reference of test_loss.py (the same
oracle CNNLoss is checked against: PyTorch loss functions, autograd for the gradients).

Chain rule under test: NNLossGradient(G) = G * dL/dy, where G is 1x1x1 per image (broadcast) for a
reduced loss and per element for reduction NONE, so with G = NNInitialGradient's ones it equals
CNNLoss's gradient. Bound: 1e-4 relative (as test_loss.py).
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
    forward, gradient, initial = m.NNForwardLoss(device, d), m.NNLossGradient(device, d), m.NNInitialGradient(device)
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
    k = m.NNInitialGradient(device)
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
