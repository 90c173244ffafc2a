"""CNNYOLOLoss against a float64 NumPy implementation of the formulas in
docs/losses_and_optimizers.md ("YOLO loss"), written here independently of the C++; the NumPy
gradient is itself proven by float64 central differences of the NumPy loss.

Under test: sigmoid(X), sigmoid(Y) against the labelled offsets; the raw W, H against
log(label size / anchor size); the confidence (raw C for SIGMOID_CROSS_ENTROPY, else sigmoid(C))
against 1 or the IOU (rescore) for labelled anchors and anchors whose best IOU exceeds
min_iou_for_object_presence, 0 for anchors below max_iou_for_object_absence, ignored in between;
the raw class scores for labelled anchors; each part through its internal CNNLoss with the shared
reduction; the loss is the sum of the four part losses (per element for reduction NONE).
Bound: 1e-4 relative to the largest magnitude (float32 sums; any wrong formula, mask, scale or
divisor is an O(1) error). The IOU-based labels are kept at least 1e-3 away from the thresholds,
so float32 rounding cannot flip an anchor between categories.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import mpsgrad as m
from conftest import persistent, rng

T = m.CNNLossType
R = m.CNNReductionType
REDUCTIONS = [R.NONE, R.SUM, R.MEAN, R.SUM_BY_NON_ZERO_WEIGHTS]
F64 = np.float64


@dataclass
class Config:
    """The descriptor fields the reference needs (defaults are MPS's)."""
    anchors: np.ndarray
    classes: int
    xy: T = T.MEAN_SQUARED_ERROR
    wh: T = T.MEAN_SQUARED_ERROR
    conf: T = T.SIGMOID_CROSS_ENTROPY
    cls: T = T.SOFTMAX_CROSS_ENTROPY
    reduction: R = R.SUM
    across: bool = False
    rescore: bool = True
    scale_xy: float = 10.0
    scale_wh: float = 10.0
    scale_no_object: float = 5.0
    scale_object: float = 100.0
    scale_class: float = 2.0
    min_iou: float = 0.7
    max_iou: float = 0.3
    part_weights: dict = field(default_factory=lambda: {"xy": 1.0, "wh": 1.0, "conf": 1.0, "cls": 1.0})
    delta: float = 1.0

    def descriptor(self):
        d = m.CNNYOLOLossDescriptor(self.xy, self.wh, self.conf, self.cls, self.reduction,
                                    self.anchors.astype(np.float32).tobytes(), len(self.anchors))
        d.classes_loss_descriptor.number_of_classes = self.classes
        d.reduce_across_batch = self.across
        d.rescore = self.rescore
        d.scale_xy, d.scale_wh = self.scale_xy, self.scale_wh
        d.scale_no_object, d.scale_object, d.scale_class = self.scale_no_object, self.scale_object, self.scale_class
        d.min_iou_for_object_presence, d.max_iou_for_object_absence = self.min_iou, self.max_iou
        d.xy_loss_descriptor.weight = self.part_weights["xy"]
        d.wh_loss_descriptor.weight = self.part_weights["wh"]
        d.confidence_loss_descriptor.weight = self.part_weights["conf"]
        d.classes_loss_descriptor.weight = self.part_weights["cls"]
        d.wh_loss_descriptor.delta = self.delta
        return d


# ---- the NumPy reference ------------------------------------------------------------------------

def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def box_iou(ax, ay, aw, ah, bx, by, bw, bh):
    """IOU of boxes given by centre and size (0 where the union is empty)."""
    iw = np.minimum(ax + aw / 2, bx + bw / 2) - np.maximum(ax - aw / 2, bx - bw / 2)
    ih = np.minimum(ay + ah / 2, by + bh / 2) - np.maximum(ay - ah / 2, by - bh / 2)
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    union = np.clip(aw, 0, None) * np.clip(ah, 0, None) + np.clip(bw, 0, None) * np.clip(bh, 0, None) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def split(x, cfg):
    n, h, w, _ = x.shape
    return np.asarray(x, F64).reshape(n, h, w, len(cfg.anchors), 5 + cfg.classes)


def cell_ious(src, lab, cfg):
    """(best, own, object): best IOU of each anchor's predicted box with the cell's labelled boxes,
    its IOU with its own labelled box, and the labelled-anchor mask."""
    s, t = split(src, cfg), split(lab, cfg)
    a = np.asarray(cfg.anchors, F64)
    px, py = sigmoid(s[..., 0]), sigmoid(s[..., 1])
    pw, ph = a[:, 0] * np.exp(s[..., 2]), a[:, 1] * np.exp(s[..., 3])
    obj = t[..., 4] > 0
    ious = box_iou(px[..., :, None], py[..., :, None], pw[..., :, None], ph[..., :, None],
                   t[..., None, :, 0], t[..., None, :, 1], t[..., None, :, 2], t[..., None, :, 3])
    ious = np.where(obj[..., None, :], ious, 0.0)
    return ious.max(-1), np.diagonal(ious, axis1=-2, axis2=-1), obj


def assignment(src, lab, cfg):
    """Per part (label, weight) arrays of shape (N, H, W, A, channels); constants of the gradient."""
    t = split(lab, cfg)
    best, own, obj = cell_ious(src, lab, cfg)
    o = obj[..., None]
    pw = cfg.part_weights
    present = ~obj & (best > cfg.min_iou)
    absent = ~obj & ~present & (best < cfg.max_iou)
    target = np.where(obj, own if cfg.rescore else 1.0, np.where(present, best if cfg.rescore else 1.0, 0.0))
    conf_w = np.where(obj | present, cfg.scale_object, np.where(absent, cfg.scale_no_object, 0.0)) * pw["conf"]
    anchors = np.asarray(cfg.anchors, F64)
    return {
        "xy": (np.where(o, t[..., 0:2], 0.0), np.broadcast_to(o * cfg.scale_xy * pw["xy"], o.shape[:-1] + (2,))),
        "wh": (np.where(o, np.log(np.maximum(t[..., 2:4], 1e-6) / anchors), 0.0),
               np.broadcast_to(o * cfg.scale_wh * pw["wh"], o.shape[:-1] + (2,))),
        "conf": (target[..., None], conf_w[..., None]),
        "cls": (np.where(o, t[..., 5:], 0.0),
                np.broadcast_to(o * cfg.scale_class * pw["cls"], o.shape[:-1] + (cfg.classes,))),
    }


def predictions(src, cfg):
    s = split(src, cfg)
    conf = s[..., 4:5] if cfg.conf == T.SIGMOID_CROSS_ENTROPY else sigmoid(s[..., 4:5])
    return {"xy": sigmoid(s[..., 0:2]), "wh": s[..., 2:4], "conf": conf, "cls": s[..., 5:]}


def element_loss(kind, y, t, w, delta):
    """Weighted per-element losses and their derivatives (SoftMaxCE over the last axis)."""
    d = y - t
    if kind == T.MEAN_SQUARED_ERROR:
        return w * d * d, w * 2 * d
    if kind == T.MEAN_ABSOLUTE_ERROR:
        return w * np.abs(d), w * np.sign(d)
    if kind == T.HUBER:
        small = np.abs(d) <= delta
        return (w * np.where(small, 0.5 * d * d, delta * (np.abs(d) - 0.5 * delta)),
                w * np.where(small, d, delta * np.sign(d)))
    if kind == T.SIGMOID_CROSS_ENTROPY:
        return (w * (np.maximum(y, 0) - y * t + np.log1p(np.exp(-np.abs(y)))), w * (sigmoid(y) - t))
    if kind == T.SOFTMAX_CROSS_ENTROPY:
        z = y - y.max(-1, keepdims=True)
        log_softmax = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return (-w * t * log_softmax, np.exp(log_softmax) * (w * t).sum(-1, keepdims=True) - w * t)
    raise AssertionError(f"no reference for {kind}")


def part_loss(kind, y, t, w, cfg):
    """(per-image reduced loss (N,) or per-element losses, gradient) of one internal CNNLoss."""
    el, g = element_loss(kind, y, t, w, cfg.delta if kind == T.HUBER else 1.0)
    if cfg.reduction == R.NONE:
        return el, g
    n = y.shape[0]
    sums = el.reshape(n, -1).sum(1)
    softmax = kind == T.SOFTMAX_CROSS_ENTROPY
    if cfg.reduction == R.SUM:
        count = np.ones(n)
    elif cfg.reduction == R.MEAN:
        count = np.full(n, float(np.prod(y.shape[1:-1] if softmax else y.shape[1:])))
    else:
        nonzero = (w != 0).any(-1) if softmax else (w != 0)
        count = nonzero.reshape(n, -1).sum(1).astype(F64)
    if cfg.across:
        total_count = count.sum() if cfg.reduction != R.SUM else 1.0
        scale = 1.0 / total_count if total_count > 0 else 0.0
        return np.full(n, sums.sum() * scale), g * scale
    scale = np.where(count > 0, 1.0 / np.where(count > 0, count, 1.0), 0.0)
    return sums * scale, g * scale.reshape((n,) + (1,) * (g.ndim - 1))


def reference(src, lab, cfg, frozen=None):
    """(loss, gradient dL/dsrc) of the documented formulas in float64. loss: (N,) per image, or
    the source-shaped per-element losses for reduction NONE. frozen: an assignment() to use."""
    parts = frozen if frozen is not None else assignment(src, lab, cfg)
    preds = predictions(src, cfg)
    kinds = {"xy": cfg.xy, "wh": cfg.wh, "conf": cfg.conf, "cls": cfg.cls}
    losses, grads = {}, {}
    for name in ("xy", "wh", "conf", "cls"):
        losses[name], grads[name] = part_loss(kinds[name], preds[name], *parts[name], cfg)
    s = split(src, cfg)
    g = np.empty_like(s)
    g[..., 0:2] = grads["xy"] * preds["xy"] * (1 - preds["xy"])
    g[..., 2:4] = grads["wh"]
    sc = sigmoid(s[..., 4:5])
    g[..., 4:5] = grads["conf"] if cfg.conf == T.SIGMOID_CROSS_ENTROPY else grads["conf"] * sc * (1 - sc)
    g[..., 5:] = grads["cls"]
    if cfg.reduction == R.NONE:
        loss = np.concatenate([losses["xy"], losses["wh"], losses["conf"], losses["cls"]], -1).reshape(src.shape)
    else:
        loss = losses["xy"] + losses["wh"] + losses["conf"] + losses["cls"]
    return loss, g.reshape(src.shape)


def objective(loss, cfg):
    """The scalar whose gradient the kernel writes: the per-element sum, the per-image sum, or
    (across the batch) the one batch value."""
    return loss[0] if cfg.across and cfg.reduction != R.NONE else loss.sum()


# ---- inputs -------------------------------------------------------------------------------------

def make_inputs(gen, n, h, w, cfg):
    """Raw predictions and labels: an object in about half of the cells; in cells with an object,
    other anchors are set to overlap it strongly (IOU ~0.9: present), moderately (~0.5: ignored)
    or weakly (~0.16: absent)."""
    A, K = len(cfg.anchors), cfg.classes
    S = 5 + K
    src = gen.standard_normal((n, h, w, A, S)) * 0.7
    lab = np.zeros((n, h, w, A, S))
    anchors = np.asarray(cfg.anchors, F64)
    for idx in np.ndindex(n, h, w):
        if gen.uniform() < 0.45:
            continue
        r = int(gen.integers(A))
        box = np.array([gen.uniform(0.15, 0.85), gen.uniform(0.15, 0.85),
                        anchors[r, 0] * gen.uniform(0.5, 2.0), anchors[r, 1] * gen.uniform(0.5, 2.0)])
        lab[idx + (r,)][:4] = box
        lab[idx + (r,)][4] = 1.0
        lab[idx + (r,)][5 + int(gen.integers(K))] = 1.0
        for j in range(A):
            if j == r:
                continue
            f = gen.choice([0.95, 0.7, 0.4, 1.0 / 0.7])
            ratio = np.clip(box[2:4] * f / anchors[j], 1e-3, None)
            src[idx + (j,)][0:2] = np.log(box[0:2] / (1 - box[0:2]))  # same centre
            src[idx + (j,)][2:4] = np.log(ratio)
    src = src.reshape(n, h, w, A * S)
    return src.astype(np.float32), lab.reshape(n, h, w, A * S).astype(np.float32)


def safe_inputs(seed, n, h, w, cfg):
    """make_inputs whose best IOUs stay 1e-3 away from both thresholds (see the module docstring)."""
    for attempt in range(50):
        src, lab = make_inputs(rng(f"{seed}-{attempt}"), n, h, w, cfg)
        best, _, obj = cell_ious(src, lab, cfg)
        b = best[~obj & (best > 0)]  # IOU 0 (no overlap) cannot move across a threshold
        if np.all(np.abs(b - cfg.min_iou) > 1e-3) and np.all(np.abs(b - cfg.max_iou) > 1e-3):
            return src, lab
    raise AssertionError("no input set away from the IOU thresholds")


def run(device, queue, cfg, src, lab, batch=True):
    loss = persistent(m.CNNYOLOLoss(device, cfg.descriptor()))
    n, h, w, c = src.shape
    per_element = cfg.reduction == R.NONE
    labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(lab[i]),
                              loss_image_size=(w, h, c) if per_element else None) for i in range(n)]
    sources = [m.Image.from_numpy(src[i:i + 1], device) for i in range(n)]
    cb = queue.command_buffer()
    if batch:
        grads = loss.encode_batch(cb, sources, labels)
    else:
        grads = [loss.encode(cb, s, lb) for s, lb in zip(sources, labels)]
    cb.commit()
    cb.wait_until_completed()
    grad = np.concatenate([g.to_numpy() for g in grads])
    values = np.concatenate([lb.loss_image.to_numpy() for lb in labels])
    return (values if per_element else values.reshape(n)), grad


def anchors_of(count):
    base = np.array([[1.0, 2.0], [1.0, 1.0], [2.0, 1.0], [3.0, 3.0], [0.6, 0.8]])
    return base[:count]


# ---- the reference's gradient, proven by finite differences --------------------------------------

FD_CASES = [
    dict(reduction=R.SUM),
    dict(reduction=R.NONE, rescore=False),
    dict(reduction=R.MEAN, wh=T.HUBER, conf=T.MEAN_SQUARED_ERROR, cls=T.MEAN_SQUARED_ERROR, delta=0.3),
    dict(reduction=R.SUM_BY_NON_ZERO_WEIGHTS, across=True, xy=T.MEAN_ABSOLUTE_ERROR),
    dict(reduction=R.MEAN, across=True, rescore=False, part_weights={"xy": 0.5, "wh": 2.0, "conf": 1.5, "cls": 0.25}),
]


@pytest.mark.parametrize("case", FD_CASES, ids=lambda c: "-".join(f"{k}={getattr(v, 'name', v)}" for k, v in c.items()))
def test_reference_gradient_matches_finite_differences(case):
    """Central differences (float64, h = 1e-6) of the NumPy loss with the IOU-based labels held at
    their values (they are constants of the documented gradient); with rescore off the labels do
    not depend on the predictions at all away from the thresholds, so there the plain loss is
    differentiated."""
    cfg = Config(anchors=anchors_of(2), classes=3, **case)
    src, lab = safe_inputs(f"fd-{case}", 2, 2, 3, cfg)
    src = src.astype(F64)
    frozen = assignment(src, lab, cfg)
    _, grad = reference(src, lab, cfg)
    fd = np.zeros_like(src)
    h = 1e-6
    for idx in np.ndindex(src.shape):
        plus, minus = src.copy(), src.copy()
        plus[idx] += h
        minus[idx] -= h
        use = None if not cfg.rescore else frozen
        fd[idx] = (objective(reference(plus, lab, cfg, use)[0], cfg) -
                   objective(reference(minus, lab, cfg, use)[0], cfg)) / (2 * h)
    scale = np.abs(fd).max()
    assert scale > 0
    assert np.abs(fd - grad).max() <= 1e-6 * scale, np.abs(fd - grad).max() / scale
    # The MAE / Huber kinks and the thresholds are not at the sampled points (generic inputs).


def test_inputs_reach_every_confidence_category():
    """The generated inputs hold labelled anchors, present (IOU > min), ignored and absent anchors."""
    cfg = Config(anchors=anchors_of(3), classes=3)
    src, lab = safe_inputs("categories", 2, 5, 6, cfg)
    best, _, obj = cell_ious(src, lab, cfg)
    assert obj.sum() > 0
    assert (~obj & (best > cfg.min_iou)).sum() > 0
    assert (~obj & (best >= cfg.max_iou) & (best <= cfg.min_iou)).sum() > 0
    assert (~obj & (best > 0) & (best < cfg.max_iou)).sum() > 0


# ---- the kernel against the reference -------------------------------------------------------------

SHAPES = [  # (N, H, W, anchors, classes)
    (1, 2, 3, 1, 1),
    (2, 3, 4, 2, 3),
    (1, 9, 7, 5, 20),  # 63 cells: several simdgroups of cell threads
    (3, 5, 8, 2, 3),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("reduction", REDUCTIONS, ids=lambda r: r.name)
def test_default_parts_every_reduction(device, queue, check, shape, reduction):
    n, h, w, A, K = shape
    cfg = Config(anchors=anchors_of(A), classes=K, reduction=reduction)
    src, lab = safe_inputs(f"default-{shape}-{reduction.name}", n, h, w, cfg)
    values, grad = run(device, queue, cfg, src, lab)
    ref_values, ref_grad = reference(src, lab, cfg)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient")


@pytest.mark.parametrize("reduction", [R.SUM, R.MEAN, R.SUM_BY_NON_ZERO_WEIGHTS], ids=lambda r: r.name)
def test_reduce_across_batch(device, queue, check, reduction):
    cfg = Config(anchors=anchors_of(2), classes=3, reduction=reduction, across=True)
    src, lab = safe_inputs(f"across-{reduction.name}", 3, 4, 5, cfg)
    values, grad = run(device, queue, cfg, src, lab)
    ref_values, ref_grad = reference(src, lab, cfg)
    check(values, ref_values, "batch loss")
    check(grad, ref_grad, "gradient")


OTHER_PARTS = [
    dict(wh=T.HUBER, conf=T.MEAN_SQUARED_ERROR, cls=T.MEAN_SQUARED_ERROR, delta=0.4),
    dict(xy=T.MEAN_ABSOLUTE_ERROR, rescore=False, scale_object=3.0, scale_no_object=0.5, scale_class=1.0),
    dict(part_weights={"xy": 0.5, "wh": 2.0, "conf": 1.5, "cls": 0.25}, min_iou=0.6, max_iou=0.6),
    dict(min_iou=1.0, max_iou=0.0, scale_xy=0.0),
]


@pytest.mark.parametrize("case", OTHER_PARTS, ids=lambda c: "-".join(sorted(c)))
@pytest.mark.parametrize("reduction", [R.NONE, R.MEAN], ids=lambda r: r.name)
def test_other_part_types_scales_and_thresholds(device, queue, check, case, reduction):
    cfg = Config(anchors=anchors_of(3), classes=4, reduction=reduction, **case)
    src, lab = safe_inputs(f"other-{case}-{reduction.name}", 2, 4, 5, cfg)
    values, grad = run(device, queue, cfg, src, lab)
    ref_values, ref_grad = reference(src, lab, cfg)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient")


def test_single_encodes_match_the_batch(device, queue, check):
    cfg = Config(anchors=anchors_of(2), classes=3, reduction=R.MEAN)
    src, lab = safe_inputs("single", 2, 3, 4, cfg)
    values, grad = run(device, queue, cfg, src, lab, batch=False)
    ref_values, ref_grad = reference(src, lab, cfg)
    check(values, ref_values, "loss")
    check(grad, ref_grad, "gradient")


def test_cells_without_objects_only_pay_no_object_confidence(device, queue, check):
    """No labelled box: every IOU is 0, so the loss is scale_no_object * SigmoidCE(C, 0) summed."""
    cfg = Config(anchors=anchors_of(2), classes=2)
    src = rng("empty").standard_normal((1, 3, 3, 14)).astype(np.float32)
    lab = np.zeros_like(src)
    values, grad = run(device, queue, cfg, src, lab)
    c = src.reshape(1, 3, 3, 2, 7)[..., 4].astype(F64)
    expected = (5.0 * (np.maximum(c, 0) + np.log1p(np.exp(-np.abs(c))))).sum()
    check(values, np.array([expected]), "loss")
    g = np.zeros((1, 3, 3, 2, 7))
    g[..., 4] = 5.0 * sigmoid(c)
    check(grad, g.reshape(grad.shape), "gradient")


# ---- properties, validation ----------------------------------------------------------------------

def test_descriptor_defaults_and_kernel_properties(device):
    anchors = anchors_of(2).astype(np.float32)
    d = m.CNNYOLOLossDescriptor.cnn_loss_descriptor_with_xy_loss_type(
        T.MEAN_SQUARED_ERROR, T.HUBER, T.SIGMOID_CROSS_ENTROPY, T.SOFTMAX_CROSS_ENTROPY, R.MEAN,
        anchors.tobytes(), 2)
    assert d.rescore is True and d.reduce_across_batch is False
    assert (d.scale_xy, d.scale_wh, d.scale_no_object, d.scale_object, d.scale_class) == (10, 10, 5, 100, 2)
    assert d.min_iou_for_object_presence == pytest.approx(0.7)
    assert d.max_iou_for_object_absence == pytest.approx(0.3)
    assert d.wh_loss_descriptor.loss_type == T.HUBER and d.wh_loss_descriptor.reduction_type == R.MEAN
    assert np.array_equal(np.frombuffer(d.anchor_boxes, np.float32), anchors.ravel())
    d.classes_loss_descriptor.number_of_classes = 4
    d.reduction_type = R.SUM
    d.reduce_across_batch = True
    k = persistent(m.CNNYOLOLoss(device, d))
    assert k.number_of_classes == 4 and k.number_of_anchor_boxes == 2
    for part, kind in ((k.loss_xy, T.MEAN_SQUARED_ERROR), (k.loss_wh, T.HUBER),
                       (k.loss_confidence, T.SIGMOID_CROSS_ENTROPY), (k.loss_classes, T.SOFTMAX_CROSS_ENTROPY)):
        assert isinstance(part, m.CNNLoss)
        assert part.loss_type == kind
        assert part.reduction_type == R.SUM and part.reduce_across_batch  # shared with the YOLO descriptor
    assert k.anchor_boxes == anchors.tobytes()
    assert k.rescore and k.scale_object == 100 and k.reduction_type == R.SUM
    with pytest.raises(AttributeError):
        k.loss_xy = k.loss_wh
    d.anchor_boxes = [1.0, 1.0, 2.0, 2.0]  # a float sequence works too
    assert np.frombuffer(d.anchor_boxes, np.float32).tolist() == [1.0, 1.0, 2.0, 2.0]


def _valid():
    return Config(anchors=anchors_of(2), classes=3).descriptor()


@pytest.mark.parametrize("change,name", [
    (lambda d: setattr(d, "scale_xy", -1.0), "scale_xy"),
    (lambda d: setattr(d, "scale_wh", float("nan")), "scale_wh"),
    (lambda d: setattr(d, "scale_no_object", -0.5), "scale_no_object"),
    (lambda d: setattr(d, "scale_object", -2.0), "scale_object"),
    (lambda d: setattr(d, "scale_class", float("inf")), "scale_class"),
    (lambda d: setattr(d, "min_iou_for_object_presence", 1.5), "min_iou_for_object_presence"),
    (lambda d: setattr(d, "max_iou_for_object_absence", -0.1), "max_iou_for_object_absence"),
    (lambda d: (setattr(d, "min_iou_for_object_presence", 0.4), setattr(d, "max_iou_for_object_absence", 0.5)),
     "max_iou_for_object_absence"),
    (lambda d: setattr(d, "anchor_boxes", [1.0, 1.0, 2.0]), "anchor_boxes"),
    (lambda d: setattr(d, "anchor_boxes", [1.0, 0.0, 2.0, 2.0]), "anchor_boxes"),
    (lambda d: setattr(d, "number_of_anchor_boxes", 0), "number_of_anchor_boxes"),
    (lambda d: setattr(d, "number_of_anchor_boxes", 3), "anchor_boxes"),
    (lambda d: (setattr(d.xy_loss_descriptor, "loss_type", T.COSINE_DISTANCE), setattr(d, "reduction_type", R.MEAN)),
     "xy_loss_descriptor"),  # CosineDistance needs SUM, and the parts get the YOLO reduction
    (lambda d: setattr(d.classes_loss_descriptor, "number_of_classes", 0), "classes_loss_descriptor"),
])
def test_bad_descriptor_raises_value_error_naming_the_field(device, change, name):
    d = _valid()
    change(d)
    with pytest.raises(ValueError, match=name):
        m.CNNYOLOLoss(device, d)


def test_bad_anchor_bytes_and_factory_arguments():
    with pytest.raises(ValueError, match="anchor_boxes"):
        m.CNNYOLOLossDescriptor(T.MEAN_SQUARED_ERROR, T.MEAN_SQUARED_ERROR, T.SIGMOID_CROSS_ENTROPY,
                                T.SOFTMAX_CROSS_ENTROPY, R.SUM, b"\x00" * 6, 1)
    with pytest.raises(ValueError, match="anchor_boxes"):
        m.CNNYOLOLossDescriptor(T.MEAN_SQUARED_ERROR, T.MEAN_SQUARED_ERROR, T.SIGMOID_CROSS_ENTROPY,
                                T.SOFTMAX_CROSS_ENTROPY, R.SUM, np.ones(4, np.float32).tobytes(), 3)


def test_bad_images_raise_value_error(device, queue):
    cfg = Config(anchors=anchors_of(2), classes=3)
    k = persistent(m.CNNYOLOLoss(device, cfg.descriptor()))
    good = np.zeros((1, 2, 2, 16), np.float32)
    cb = queue.command_buffer()
    wrong = m.Image.from_numpy(np.zeros((1, 2, 2, 15), np.float32), device)
    with pytest.raises(ValueError, match="source_image.*number_of_anchor_boxes"):
        k.encode(cb, wrong, m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 15), np.float32))))
    src = m.Image.from_numpy(good, device)
    with pytest.raises(ValueError, match="labels"):
        k.encode(cb, src, m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 3, 16), np.float32))))
    weighted = m.CNNLossLabels(device, m.CNNLossDataDescriptor(good[0]), weights=m.CNNLossDataDescriptor(good[0]))
    with pytest.raises(ValueError, match="labels: a weights image"):
        k.encode(cb, src, weighted)
    with pytest.raises(ValueError, match="loss_image_size"):
        k.encode(cb, src, m.CNNLossLabels(device, m.CNNLossDataDescriptor(good[0]), loss_image_size=(2, 2, 16)))
    with pytest.raises(ValueError, match="destination_image"):
        k.encode(cb, src, m.CNNLossLabels(device, m.CNNLossDataDescriptor(good[0])),
                 m.Image.from_numpy(np.zeros((1, 2, 3, 16), np.float32), device))
    with pytest.raises(ValueError, match="labels"):
        k.encode_batch(cb, [src, src], [m.CNNLossLabels(device, m.CNNLossDataDescriptor(good[0]))])
    cb.commit()
    cb.wait_until_completed()


def test_serialization_round_trip(device, queue, check):
    cfg = Config(anchors=anchors_of(2), classes=3, reduction=R.MEAN, rescore=False, scale_object=7.0)
    k = persistent(m.CNNYOLOLoss(device, cfg.descriptor()))
    k2 = m.Kernel.from_bytes(k.to_bytes(), device)
    assert isinstance(k2, m.CNNYOLOLoss)
    assert k2.to_bytes() == k.to_bytes()
    assert (k2.scale_object, k2.rescore, k2.number_of_classes, k2.anchor_boxes) == (7.0, False, 3, k.anchor_boxes)


def test_graph_node_is_its_own_gradient(device, queue, check):
    """CNNYOLOLossNode in an NNGraph gives the kernel's gradient and loss; it has no gradient node."""
    cfg = Config(anchors=anchors_of(2), classes=3, reduction=R.MEAN)
    src, lab = safe_inputs("graph", 2, 3, 4, cfg)
    node = m.CNNYOLOLossNode(m.NNImageNode(), cfg.descriptor())
    with pytest.raises(TypeError, match="its own gradient"):
        node.gradient_filter_with_source(node.result_image)
    graph = m.NNGraph(device, node.result_image)
    labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(lab[i])) for i in range(2)]
    cb = queue.command_buffer()
    out = graph.encode_batch(cb, [[m.Image.from_numpy(src[i:i + 1], device) for i in range(2)]], [labels])
    cb.commit()
    cb.wait_until_completed()
    ref_values, ref_grad = reference(src, lab, cfg)
    check(np.concatenate([o.to_numpy() for o in out]), ref_grad, "graph gradient")
    check(np.array([lb.loss_image.to_numpy().item() for lb in labels]), ref_values, "graph loss")
