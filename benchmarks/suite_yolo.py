"""YOLO loss rows of benchmarks/run.py: loss and gradient of a detector head's raw predictions.

mpsgrad, one iteration: a command buffer, CNNYOLOLoss.encode_batch(cb, predictions, labels,
destinations), commit, wait (the per-image losses go to the labels' loss images).

| row                | mpsgrad                                    | PyTorch                                        |
|--------------------|--------------------------------------------|------------------------------------------------|
| yolo loss+gradient | CNNYOLOLoss, MPS's default part types (xy, | the same loss written with tensor ops (below), |
|                    | wh MSE; confidence SigmoidCE; classes      | then autograd: loss.sum().backward() gives     |
|                    | SoftMaxCE), reduction SUM, default scales  | dL/d(predictions)                              |

The PyTorch side follows docs/losses_and_optimizers.md ("YOLO loss"): σ(X), σ(Y) against the
labelled offsets, raw W, H against log(label size / anchor), the IOU of each predicted box
(σ(X), σ(Y), anchor·e^W, anchor·e^H) with the cell's labelled boxes giving the confidence
targets (own IOU for labelled anchors, best IOU above min_iou_for_object_presence, 0 below
max_iou_for_object_absence, ignored between; computed without gradient, as the targets are
constants of the gradient), the four part losses weighted by scale_xy, scale_wh,
scale_object / scale_no_object and scale_class, summed per image.

Shapes: batch 8, 13 x 13 grid, 5 anchors, 20 classes (YOLO v2 on VOC), and a tiny one. Labels: an
object in about half of the cells. Bytes: predictions and labels read, gradient written (3
floats per element).

Measured (2026-11-23, x86_64 AMD EPYC, 2 cores shared with other builds, load ~4): --threads 1,
8 x 13 x 13 x 5 x 25: mpsgrad 5.1 ms, PyTorch 8.3 ms (ratio 1.62; tiny row 11.4). With 2 threads
PyTorch took 322 ms: its log_softmax, its backward and log_sigmoid each spent ~8-13 ms per call
waking OpenMP threads on the oversubscribed machine, so that ratio (36) measures the load, not the
loss; quote the one-thread figure from a shared machine.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m

T = m.CNNLossType
# (label suffix, N, N with --quick, grid, anchors, classes)
YOLO_SHAPES = [("", 8, 2, 13, 5, 20), (" tiny", 2, 2, 3, 2, 3)]
ANCHORS = np.array([[1.3, 1.7], [3.2, 4.0], [5.1, 8.1], [9.5, 4.8], [11.2, 10.0]], np.float32)
SCALE_XY, SCALE_WH, SCALE_NO_OBJECT, SCALE_OBJECT, SCALE_CLASS = 10.0, 10.0, 5.0, 100.0, 2.0
MIN_IOU, MAX_IOU = 0.7, 0.3


def _run(queue, encode):
    cb = queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


def _inputs(rng, n, grid, a, k):
    """Raw predictions and labels (N, grid, grid, A·(5 + K)): one box on a random anchor in about
    half of the cells, its size near the anchor's, with a one-hot class."""
    s = 5 + k
    src = (rng.standard_normal((n, grid, grid, a * s)) * 0.7).astype(np.float32)
    lab = np.zeros((n, grid, grid, a, s), np.float32)
    has = rng.uniform(size=(n, grid, grid)) < 0.5
    r = rng.integers(0, a, (n, grid, grid))
    for idx in zip(*np.nonzero(has)):
        box = lab[idx + (r[idx],)]
        box[0:2] = rng.uniform(0.15, 0.85, 2)
        box[2:4] = ANCHORS[r[idx]] * rng.uniform(0.5, 2.0, 2)
        box[4] = 1.0
        box[5 + rng.integers(0, k)] = 1.0
    return src, lab.reshape(n, grid, grid, a * s)


def torch_yolo_loss(src, lab, anchors, k):
    """Per-image YOLO losses (N,) of raw predictions `src` (N, H, W, A·(5 + K)), differentiable wrt
    src; the docs' formulas with MPS's default part types, scales and reduction SUM."""
    n, h, w, _ = src.shape
    a = anchors.shape[0]
    s, t = src.reshape(n, h, w, a, 5 + k), lab.reshape(n, h, w, a, 5 + k)
    obj = t[..., 4] > 0
    with torch.no_grad():  # the IOU-based confidence targets are constants of the gradient
        px, py = torch.sigmoid(s[..., 0]), torch.sigmoid(s[..., 1])
        pw, ph = anchors[:, 0] * torch.exp(s[..., 2]), anchors[:, 1] * torch.exp(s[..., 3])
        iou = _box_iou(px[..., :, None], py[..., :, None], pw[..., :, None], ph[..., :, None],
                       t[..., None, :, 0], t[..., None, :, 1], t[..., None, :, 2], t[..., None, :, 3])
        iou = torch.where(obj[..., None, :], iou, torch.zeros_like(iou))  # anchor i vs labelled box j
        best, own = iou.amax(-1), torch.diagonal(iou, dim1=-2, dim2=-1)
        present = ~obj & (best > MIN_IOU)
        absent = ~obj & ~present & (best < MAX_IOU)
        target = torch.where(obj, own, torch.where(present, best, torch.zeros_like(best)))
        conf_w = torch.where(obj | present, SCALE_OBJECT, torch.where(absent, SCALE_NO_OBJECT, 0.0))
        wh_label = torch.log(torch.clamp(t[..., 2:4], min=1e-6) / anchors)
    o = obj[..., None].to(src.dtype)
    xy = SCALE_XY * o * (torch.sigmoid(s[..., 0:2]) - t[..., 0:2]) ** 2
    wh = SCALE_WH * o * (s[..., 2:4] - o * wh_label) ** 2
    conf = conf_w * F.binary_cross_entropy_with_logits(s[..., 4], target, reduction="none")
    cls = SCALE_CLASS * o * -(t[..., 5:] * torch.log_softmax(s[..., 5:], -1))
    parts = (xy, wh, conf, cls)
    return sum(p.reshape(n, -1).sum(1) for p in parts)


def _box_iou(ax, ay, aw, ah, bx, by, bw, bh):
    """IOU of boxes given by centre and size (0 where the union is empty)."""
    iw = torch.minimum(ax + aw / 2, bx + bw / 2) - torch.maximum(ax - aw / 2, bx - bw / 2)
    ih = torch.minimum(ay + ah / 2, by + bh / 2) - torch.maximum(ay - ah / 2, by - bh / 2)
    inter = iw.clamp(min=0) * ih.clamp(min=0)
    union = aw.clamp(min=0) * ah.clamp(min=0) + bw.clamp(min=0) * bh.clamp(min=0) - inter
    return torch.where(union > 0, inter / torch.where(union > 0, union, torch.ones_like(union)),
                       torch.zeros_like(union))


def _yolo_rows(spec, quick, device, queue, rng):
    suffix, n_full, n_quick, grid, a, k = spec
    n = n_quick if quick else n_full
    label = f"{n}x{grid}x{grid} {a}x{5 + k}{suffix}"
    src, lab = _inputs(rng, n, grid, a, k)
    d = m.CNNYOLOLossDescriptor(T.MEAN_SQUARED_ERROR, T.MEAN_SQUARED_ERROR, T.SIGMOID_CROSS_ENTROPY,
                                T.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.SUM, ANCHORS[:a].tobytes(), a)
    d.classes_loss_descriptor.number_of_classes = k
    loss = m.CNNYOLOLoss(device, d)
    xs = m.batch_from_numpy(src, device)
    labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(lab[i])) for i in range(n)]
    dst = m.batch_from_numpy(np.zeros_like(src), device)
    tsrc, tlab, tanchors = torch.from_numpy(src), torch.from_numpy(lab), torch.from_numpy(ANCHORS[:a])

    def theirs():
        x = tsrc.detach().requires_grad_(True)
        values = torch_yolo_loss(x, tlab, tanchors, k)
        values.sum().backward()
        return values, x.grad

    def check(compare):
        _run(queue, lambda cb: loss.encode_batch(cb, xs, labels, dst))
        values, grad = theirs()
        compare(label, "yolo loss", np.array([lb.loss_image.to_numpy().item() for lb in labels]), values.detach())
        compare(label, "yolo loss gradient", m.batch_to_numpy(dst), grad)

    yield ("loss", label, "yolo loss+gradient", 4.0 * 3 * src.size,
           lambda: _run(queue, lambda cb: loss.encode_batch(cb, xs, labels, dst)), theirs, check)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in YOLO_SHAPES:
        suffix, n_full, n_quick, grid, a, k = spec
        label = f"{n_quick if quick else n_full}x{grid}x{grid} {a}x{5 + k}{suffix}"
        if selected(f"loss {label} yolo loss+gradient"):
            for fam, lab, op, amount, mine, theirs, check in _yolo_rows(spec, quick, device, queue, rng):
                yield fam, lab, op, "byte", amount, mine, theirs, check
