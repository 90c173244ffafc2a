"""CNNLoss: every loss type x reduction x weighting against PyTorch (float64): the loss value from
the PyTorch loss functions (l1/mse/huber/kl_div/binary_cross_entropy_with_logits/log_softmax-based
cross entropy, hand-written hinge, cosine, categorical and log losses per spec §2.12 with
mpsgrad's corrections) and the gradient dL/dy from autograd of the reduced loss.

Conventions under test (docs/losses_and_optimizers.md): the destination receives the gradient and
labels.loss_image the loss; each image of a batch has its own reduced loss (one value for the
batch with reduce_across_batch); Mean divides by W*H*C (W*H for SoftMaxCE); SumByNonZeroWeights
by the count of non-zero weights (pixels for SoftMaxCE and CosineDistance); the gradient is that of
the reduced loss. Bound: 1e-4 relative to the largest magnitude (float32 sums of at most 120
terms; any wrong formula, weight or divisor is an O(1) error).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import persistent, randn, rng
from conftest import FLOAT16

T = m.CNNLossType
R = m.CNNReductionType
N, H, W, C = 2, 3, 4, 5

TYPES = [T.MEAN_ABSOLUTE_ERROR, T.MEAN_SQUARED_ERROR, T.SOFTMAX_CROSS_ENTROPY, T.SIGMOID_CROSS_ENTROPY,
         T.CATEGORICAL_CROSS_ENTROPY, T.HINGE, T.HUBER, T.COSINE_DISTANCE, T.LOG, T.KULLBACK_LEIBLER_DIVERGENCE]
REDUCTIONS = [R.NONE, R.SUM, R.MEAN, R.SUM_BY_NON_ZERO_WEIGHTS]
PIXEL_TYPES = (T.SOFTMAX_CROSS_ENTROPY, T.COSINE_DISTANCE)


def _inputs(gen, loss_type, shape=(N, H, W, C)):
    y = randn(gen, *shape)
    t = randn(gen, *shape)
    probs = lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)  # noqa: E731
    if loss_type in (T.SOFTMAX_CROSS_ENTROPY, T.CATEGORICAL_CROSS_ENTROPY, T.KULLBACK_LEIBLER_DIVERGENCE):
        t = probs(t)
    if loss_type in (T.SIGMOID_CROSS_ENTROPY, T.LOG):
        t = gen.uniform(0, 1, t.shape)
    if loss_type == T.HINGE:
        t = (gen.uniform(0, 1, t.shape) > 0.5).astype(np.float64)
        if FLOAT16:  # half-valued inputs land on the hinge's kink |y| = 1, where conventions differ
            y[np.abs(np.abs(y) - 1.0) < 4e-3] *= 1.25
    if loss_type in (T.CATEGORICAL_CROSS_ENTROPY, T.LOG):
        y = gen.uniform(0.05, 0.95, y.shape)
    if loss_type == T.KULLBACK_LEIBLER_DIVERGENCE:
        y = np.log(probs(y))
    if loss_type == T.HUBER:
        y = y * 2.0  # both sides of delta
    return y.astype(np.float32), t.astype(np.float32)


def _elementwise(loss_type, y, t, d):
    """Per-element losses (N, H, W, C), or per pixel (N, H, W, 1) for CosineDistance."""
    if loss_type == T.MEAN_ABSOLUTE_ERROR:
        return F.l1_loss(y, t, reduction="none")
    if loss_type == T.MEAN_SQUARED_ERROR:
        return F.mse_loss(y, t, reduction="none")
    if loss_type == T.SOFTMAX_CROSS_ENTROPY:
        if d.label_smoothing > 0:
            t = t * (1 - d.label_smoothing) + d.label_smoothing / d.number_of_classes
        return -t * F.log_softmax(y, dim=-1)
    if loss_type == T.SIGMOID_CROSS_ENTROPY:
        if d.label_smoothing > 0:
            t = t * (1 - d.label_smoothing) + 0.5 * d.label_smoothing
        return F.binary_cross_entropy_with_logits(y, t, reduction="none")
    if loss_type == T.CATEGORICAL_CROSS_ENTROPY:
        return -t * torch.log(y)
    if loss_type == T.HINGE:
        return torch.clamp(1 - (2 * t - 1) * y, min=0)
    if loss_type == T.HUBER:
        return F.huber_loss(y, t, reduction="none", delta=d.delta)
    if loss_type == T.COSINE_DISTANCE:
        return 1 - (y * t).sum(-1, keepdim=True)
    if loss_type == T.LOG:
        eps = d.epsilon
        return -t * torch.log(y + eps) - (1 - t) * torch.log(1 - y + eps)
    return F.kl_div(y, t, reduction="none")


def _reference(d, y_np, t_np, w_np):
    """(loss per image or per element, gradient) in float64."""
    n_images, height, width, channels = y_np.shape
    y = torch.tensor(y_np, dtype=torch.float64, requires_grad=True)
    t = torch.tensor(t_np, dtype=torch.float64)
    w = torch.tensor(w_np, dtype=torch.float64) if w_np is not None else torch.full_like(t, d.weight)
    per_pixel = d.loss_type == T.COSINE_DISTANCE
    if per_pixel:
        w = w[..., :1]
    el = w * _elementwise(d.loss_type, y, t, d)
    if d.reduction_type == R.NONE:
        el.sum().backward()
        return el.detach().numpy(), y.grad.numpy()
    sums = el.sum(dim=(1, 2, 3))
    if d.reduction_type == R.MEAN:
        count = torch.full_like(sums, height * width * (1 if d.loss_type == T.SOFTMAX_CROSS_ENTROPY else channels))
    elif d.reduction_type == R.SUM_BY_NON_ZERO_WEIGHTS:
        nz = (w != 0)
        if d.loss_type == T.SOFTMAX_CROSS_ENTROPY:
            nz = nz.any(-1)
        count = nz.flatten(1).sum(1).to(torch.float64)
    else:
        count = torch.ones_like(sums)
    if d.reduce_across_batch:
        total = sums.sum() / (count.sum() if d.reduction_type != R.SUM else 1.0)
        total.backward()
        return np.full(n_images, total.item()), y.grad.numpy()
    reduced = sums / count
    reduced.sum().backward()
    return reduced.detach().numpy(), y.grad.numpy()


def _run_loss(device, queue, d, y, t, w, layout=m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS):
    loss = persistent(m.CNNLoss(device, d))
    per_element = d.reduction_type == R.NONE
    N, H, W, C = y.shape  # noqa: N806
    labels = []
    for n in range(N):
        tn = t[n] if layout == m.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS else t[n].transpose(2, 0, 1)
        wn = None
        if w is not None:
            wn = m.CNNLossDataDescriptor(w[n])
        labels.append(m.CNNLossLabels(device, m.CNNLossDataDescriptor(tn, layout),
                                      loss_image_size=(W, H, C) if per_element else None, weights=wn))
    sources = [m.Image.from_numpy(y[n:n + 1], device) for n in range(N)]
    cb = queue.command_buffer()
    grads = loss.encode_batch(cb, sources, labels)
    cb.commit()
    cb.wait_until_completed()
    grad = np.concatenate([g.to_numpy() for g in grads])
    values = np.concatenate([lab.loss_image.to_numpy() for lab in labels])
    return (values if per_element else values.reshape(N)), grad


def _weights(gen, kind, shape=(N, H, W, C)):
    if kind == "weights_image":
        w = gen.uniform(0.2, 2.0, shape).astype(np.float32)
        w[:, 0, 0, :] = 0.0  # a pixel with zero weight
        w[:, 1, :, 2] = 0.0  # and scattered zeros
        return w, 1.0
    return None, (1.0 if kind == "unit" else 0.7)


def _cases():
    for lt in TYPES:
        for red in REDUCTIONS:
            if lt == T.COSINE_DISTANCE and red != R.SUM:
                continue
            for weighting in ("unit", "scalar", "weights_image"):
                yield pytest.param(lt, red, weighting, id=f"{lt.name}-{red.name}-{weighting}")


@pytest.mark.parametrize("loss_type,reduction,weighting", list(_cases()))
def test_loss_value_and_gradient_match_torch(device, queue, check, loss_type, reduction, weighting):
    gen = rng(f"loss-{loss_type.name}-{reduction.name}-{weighting}")
    y, t = _inputs(gen, loss_type)
    w, scalar = _weights(gen, weighting)
    d = m.CNNLossDescriptor(loss_type, reduction)
    d.weight = scalar
    if loss_type == T.HUBER:
        d.delta = 1.5
    values, grad = _run_loss(device, queue, d, y, t, w)
    ref_values, ref_grad = _reference(d, y, t, w)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient dL/dy")


@pytest.mark.parametrize("loss_type,reduction", [(T.SOFTMAX_CROSS_ENTROPY, R.SUM_BY_NON_ZERO_WEIGHTS),
                                                 (T.HUBER, R.MEAN), (T.COSINE_DISTANCE, R.SUM)])
@pytest.mark.parametrize("across_batch", [False, True])
def test_larger_images(device, queue, check, loss_type, reduction, across_batch):
    """3 images of 9 x 11 pixels: several simdgroups of pixel threads and a longer reduction."""
    shape = (3, 9, 11, 6)
    gen = rng(f"large-{loss_type.name}-{across_batch}")
    y, t = _inputs(gen, loss_type, shape)
    w, _ = _weights(gen, "weights_image", shape)
    d = m.CNNLossDescriptor(loss_type, reduction)
    d.reduce_across_batch = across_batch
    values, grad = _run_loss(device, queue, d, y, t, w)
    ref_values, ref_grad = _reference(d, y, t, w)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient")


@pytest.mark.parametrize("shape", [(2, 3, 4, 21), (3, 2, 2, 64)], ids=["21ch", "64ch"])
@pytest.mark.parametrize("reduction", [R.MEAN, R.NONE])
def test_softmax_cross_entropy_channel_blocks(device, queue, check, shape, reduction):
    """Channel counts that reach the CPU loops' 8-float blocks (21: two blocks and a tail; 64: blocks only)."""
    gen = rng(f"softmax-ce-blocks-{shape[-1]}-{reduction.name}")
    y, t = _inputs(gen, T.SOFTMAX_CROSS_ENTROPY, shape)
    w, _ = _weights(gen, "weights_image", shape)
    d = m.CNNLossDescriptor(T.SOFTMAX_CROSS_ENTROPY, reduction)
    values, grad = _run_loss(device, queue, d, y, t, w)
    ref_values, ref_grad = _reference(d, y, t, w)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient")


@pytest.mark.parametrize("loss_type", [T.SOFTMAX_CROSS_ENTROPY, T.SIGMOID_CROSS_ENTROPY])
@pytest.mark.parametrize("reduction", [R.MEAN, R.NONE])
def test_label_smoothing(device, queue, check, loss_type, reduction):
    gen = rng(f"smoothing-{loss_type.name}-{reduction.name}")
    y, t = _inputs(gen, loss_type)
    d = m.CNNLossDescriptor(loss_type, reduction)
    d.label_smoothing = 0.2
    d.number_of_classes = C
    values, grad = _run_loss(device, queue, d, y, t, None)
    ref_values, ref_grad = _reference(d, y, t, None)
    check(values, ref_values, "smoothed loss")
    check(grad, ref_grad, "smoothed gradient")
    if loss_type == T.SOFTMAX_CROSS_ENTROPY and reduction == R.MEAN:
        # The same as PyTorch's cross_entropy with probability targets and label smoothing.
        logits = torch.tensor(y, dtype=torch.float64).reshape(-1, C)
        target = torch.tensor(t, dtype=torch.float64).reshape(-1, C)
        ce = F.cross_entropy(logits, target, label_smoothing=0.2, reduction="none").reshape(N, -1).mean(1)
        check(values, ce.numpy(), "vs F.cross_entropy(label_smoothing=0.2)")


def test_reduce_across_batch_and_chw_labels(device, queue, check):
    gen = rng("across-batch")
    y, t = _inputs(gen, T.MEAN_SQUARED_ERROR)
    d = m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.MEAN)
    d.reduce_across_batch = True
    values, grad = _run_loss(device, queue, d, y, t, None, layout=m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH)
    ref_values, ref_grad = _reference(d, y, t, None)
    check(values, ref_values, "one loss for the batch")
    check(grad, ref_grad, "gradient of the batch mean")
    check(values[0], F.mse_loss(torch.tensor(y, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)).item(),
          "vs F.mse_loss(reduction='mean')")


def test_unscaled_gradient_option(device, queue, check):
    gen = rng("unscaled")
    y, t = _inputs(gen, T.MEAN_ABSOLUTE_ERROR)
    d = m.CNNLossDescriptor(T.MEAN_ABSOLUTE_ERROR, R.MEAN)
    d.scale_gradient_by_reduction = False
    _, grad = _run_loss(device, queue, d, y, t, None)
    check(grad, np.sign(y - t), "unscaled MAE gradient")


def test_single_encode_and_labels_from_images(device, queue, check):
    gen = rng("single")
    y, t = _inputs(gen, T.MEAN_SQUARED_ERROR)
    labels = m.CNNLossLabels(device, m.Image.from_numpy(t[:1], device))
    assert labels.weights_image is None and labels.loss_image.shape == (1, 1, 1, 1)
    loss = persistent(m.CNNLoss(device, m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)))
    assert loss.loss_type == T.MEAN_SQUARED_ERROR and loss.reduction_type == R.SUM and loss.weight == 1.0
    cb = queue.command_buffer()
    dst = m.Image.from_numpy(np.zeros_like(y[:1]), device)
    out = loss.encode(cb, m.Image.from_numpy(y[:1], device), labels, dst)
    cb.commit()
    cb.wait_until_completed()
    assert out is dst
    check(dst.to_numpy(), 2 * (y[:1] - t[:1]), "MSE gradient")
    check(labels.loss_image.to_numpy().reshape(()), ((y[:1].astype(np.float64) - t[:1]) ** 2).sum(), "MSE sum")


def test_descriptor_defaults():
    d = m.CNNLossDescriptor(T.HUBER, R.MEAN)
    assert (d.weight, d.label_smoothing, d.number_of_classes, d.delta, d.reduce_across_batch) == (1.0, 0.0, 1, 1.0,
                                                                                                   False)
    assert d.epsilon == pytest.approx(1e-7)
    desc = m.CNNLossDataDescriptor(np.zeros((3, 4, 5), np.float32))
    assert desc.size == (4, 3, 5) and desc.bytes_per_row == 4 * 5 * 4 and desc.bytes_per_image == 3 * 80


def test_bad_inputs_raise(device, queue):
    with pytest.raises(ValueError, match="reduction_type"):
        m.CNNLossDescriptor(T.COSINE_DISTANCE, R.MEAN)
    with pytest.raises(ValueError, match="data"):
        m.CNNLossDataDescriptor(np.zeros(10, np.float32), size=(2, 2, 2))
    with pytest.raises(ValueError, match="bytes_per_row"):
        m.CNNLossDataDescriptor(np.zeros((2, 2, 2), np.float32)).bytes_per_row = 4
    with pytest.raises(ValueError, match="loss_image_size"):
        # more channels than the labels (fewer are fine: labels may be wider than the source)
        m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 2), np.float32)), loss_image_size=(2, 2, 3))
    with pytest.raises(ValueError, match="weights"):  # another height (the channel counts may differ)
        m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 2), np.float32)),
                        weights=m.CNNLossDataDescriptor(np.zeros((1, 2, 2), np.float32)))
    d = m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)
    d.label_smoothing = 1.5
    with pytest.raises(ValueError, match="label_smoothing"):
        m.CNNLoss(device, d)
    loss = persistent(m.CNNLoss(device, m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.SUM)))
    src = m.Image.from_numpy(np.zeros((1, 2, 2, 2), np.float32), device)
    cb = queue.command_buffer()
    wrong = m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 1), np.float32)))  # fewer channels
    with pytest.raises(ValueError, match="labels"):
        loss.encode(cb, src, wrong)
    per_element = m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 2), np.float32)),
                                  loss_image_size=(2, 2, 2))
    with pytest.raises(ValueError, match="loss_image_size"):
        loss.encode(cb, src, per_element)
    none = persistent(m.CNNLoss(device, m.CNNLossDescriptor(T.MEAN_SQUARED_ERROR, R.NONE)))
    with pytest.raises(ValueError, match="loss_image_size"):
        none.encode(cb, src, m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 2), np.float32))))
    with pytest.raises(ValueError, match="labels"):
        loss.encode_batch(cb, [src, src], [per_element])
    cb.commit()
    cb.wait_until_completed()
