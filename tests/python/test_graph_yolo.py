"""A small detector trained through training_graph() on CNNYOLOLossNode (issue 14's closing note,
issue 15): x -> 3x3 convolution -> (optional tanh) -> CNNYOLOLossNode with labels, several SGD steps
through the convolution's data source, in both training styles.

Oracle: the same network in PyTorch (float64), where the YOLO loss and its gradient wrt the raw
predictions come from the NumPy reference of test_yolo_loss.py (itself proven by finite
differences there) and that gradient is back-propagated by conv2d's autograd
(pred.backward(gradient=...)); SGD by hand with the same learning rate. Compared at every step:
the per-image losses, dL/dx (the training graph's result; it depends on the step's weights) and,
in the CPU style, the data source's weights after the update.

The IOU-based confidence labels are discontinuous at the two thresholds; the test asserts that the
PyTorch-side best IOUs stay 1e-3 away from them at every step, so float32 rounding cannot move an
anchor between categories. Tolerance: test_graph.close (1e-4 of the largest magnitude)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng
from test_graph import ConvSource, GPUSource, close, exact_graph, images, nchw, nhwc, to_numpy, torch_weight
from test_yolo_loss import R, Config, anchors_of, cell_ious, make_inputs, reference

N, H, W, CIN, ANCHORS, CLASSES = 2, 4, 5, 3, 2, 3
STEPS = 3

CASES = {  # id: (Config keyword arguments, neuron after the convolution, learning rate)
    "mean": (dict(reduction=R.MEAN), None, 0.05),
    "mean-tanh": (dict(reduction=R.MEAN), "tanh", 0.05),
    "sum-across-batch": (dict(reduction=R.SUM, across=True), None, 2e-4),
}


def away_from_thresholds(pred, lab, cfg):
    """The unlabelled anchors' best IOUs are 1e-3 away from both thresholds (IOU 0 cannot move)."""
    best, _, obj = cell_ious(pred, lab, cfg)
    b = best[~obj & (best > 0)]
    return bool(np.all(np.abs(b - cfg.min_iou) > 1e-3) and np.all(np.abs(b - cfg.max_iou) > 1e-3))


def problem(case):
    """(cfg, neuron, lr, x, w, b, labels) of a case: OHWI weights, labels from make_inputs."""
    kwargs, neuron, lr = CASES[case]
    cfg = Config(anchors=anchors_of(ANCHORS), classes=CLASSES, **kwargs)
    gen = rng(f"graph-yolo-{case}")
    channels = ANCHORS * (5 + CLASSES)
    x = randn(gen, N, H, W, CIN)
    w, b = randn(gen, channels, 3, 3, CIN) * 0.3, randn(gen, channels) * 0.1
    _, lab = make_inputs(gen, N, H, W, cfg)
    return cfg, neuron, lr, x, w, b, lab


def build_graph(source, neuron, cfg):
    """x -> convolution (CPU or GPU style from the data source) -> neuron -> YOLO loss; the
    training graph of the loss node."""
    conv = m.CNNConvolutionNode(m.NNImageNode(), source)
    conv.training_style = m.NNTrainingStyle.UPDATE_DEVICE_GPU if isinstance(source, GPUSource) else \
        m.NNTrainingStyle.UPDATE_DEVICE_CPU
    out = conv.result_image if neuron is None else m.CNNNeuronTanHNode(conv.result_image).result_image
    loss = m.CNNYOLOLossNode(out, cfg.descriptor())
    seen = []
    terminal = loss.training_graph(node_handler=lambda g, f, s, gs: seen.append(type(g).__name__))
    # The loss node is its own gradient: the builder adds only the layers' gradient nodes.
    expected = ["CNNConvolutionGradientNode"] if neuron is None else \
        ["CNNNeuronGradientNode", "CNNConvolutionGradientNode"]
    assert seen == expected
    assert len(terminal) == 1
    return terminal[0]


@pytest.mark.parametrize("style", ["cpu", "gpu"])
@pytest.mark.parametrize("case", list(CASES))
def test_yolo_detector_trains_like_torch(device, case, style):
    cfg, neuron, lr, x, w, b, lab = problem(case)
    source = GPUSource(device, w, b, lr) if style == "gpu" else ConvSource(w, b, lr)
    # FLOAT32 intermediates: the comparison is at float32 tolerances.
    graph = exact_graph(device, build_graph(source, neuron, cfg).result_image)
    queue = m.CommandQueue(device)

    X = nchw(x).requires_grad_(True)
    Wt, Bt = torch_weight(w), torch.tensor(b, dtype=torch.float64, requires_grad=True)
    losses = []
    for step in range(STEPS):
        labels = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(lab[i])) for i in range(N)]
        cb = queue.command_buffer()
        dx = graph.encode_batch(cb, [images(device, x)], [labels])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        got_loss = np.array([lb.loss_image.to_numpy().item() for lb in labels])

        pred = F.conv2d(X, Wt, Bt, padding=1)
        if neuron == "tanh":
            pred = torch.tanh(pred)
        p = nhwc(pred)
        assert away_from_thresholds(p, lab, cfg), f"step {step}: an IOU is within 1e-3 of a threshold"
        ref_loss, ref_grad = reference(p, lab, cfg)
        pred.backward(gradient=nchw(ref_grad))
        close(got_loss, ref_loss)
        close(to_numpy(dx), nhwc(X.grad))
        with torch.no_grad():  # SGD, as the data sources do
            for t in (Wt, Bt):
                t -= lr * t.grad
                t.grad = None
        X.grad = None
        if style == "cpu":  # the host copies hold the trained weights
            close(source.w, nhwc(Wt))
            close(source.b, Bt.detach().numpy())
        losses.append(ref_loss.sum())
    assert source.updates == STEPS
    assert losses[-1] < losses[0]  # the steps train the detector


def test_training_graph_categories_are_reached():
    """The first step's predictions hold labelled anchors and confidently absent ones, so the
    training exercises the xy, wh, class and both confidence weights (the present / ignored
    categories are covered by test_yolo_loss.py's constructed inputs)."""
    for case in CASES:
        cfg, neuron, _, x, w, b, lab = problem(case)
        pred = F.conv2d(nchw(x), torch_weight(w).detach(), torch.tensor(b, dtype=torch.float64), padding=1)
        p = nhwc(torch.tanh(pred) if neuron else pred)
        best, _, obj = cell_ious(p, lab, cfg)
        assert obj.sum() > 0, case
        assert (~obj & (best < cfg.max_iou)).sum() > 0, case
