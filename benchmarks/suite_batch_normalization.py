"""Batch normalization training rows of benchmarks/run.py (ResNet-style shapes).

mpsgrad, one iteration: a command buffer holding the family's training pass, commit, wait.
- forward: CNNBatchNormalizationStatistics.encode_batch (batch mean and variance into a new state)
  then CNNBatchNormalization.encode_batch (normalize with them);
- gradient: CNNBatchNormalizationStatisticsGradient.encode_batch (dγ, dβ into the state) then
  CNNBatchNormalizationGradient.encode_batch (dX).
PyTorch gets channels_last tensors (the memory layout of mpsgrad's NHWC images) and runs ATen's own
ops, which is what autograd of F.batch_norm(training=True) calls: native_batch_norm (statistics and
normalization, saving mean and 1/std) and native_batch_norm_backward (dX, dγ, dβ).

Bytes: every float the op must read or write once (forward: read X, write Y; gradient: read G and
X, write dX). Each pass reads X twice in both libraries (statistics, then the normalization or dX),
so neither reaches this figure at copy bandwidth.

| row                       | mpsgrad                                                        | PyTorch                          |
|---------------------------|----------------------------------------------------------------|----------------------------------|
| batch norm forward        | statistics + forward encode_batch (a new state each iteration) | aten.native_batch_norm           |
| batch norm gradient       | statistics gradient + gradient encode_batch                    | aten.native_batch_norm_backward  |
| batch norm fwd+bwd        | the four encodes above in one command buffer (a training step) | the two ops above                |
| bn+relu fwd+bwd           | the same four kernels with a fused ReLU neuron (forward,       | native_batch_norm, relu_,        |
|                           | statistics gradient and gradient all carry it)                 | threshold_backward(g, y, 0),     |
|                           |                                                                | native_batch_norm_backward       |

The fwd+bwd rows time a whole training step of the layer (forward and backward together), the
figure issue 12's target is about. For BN followed by ReLU, PyTorch runs what autograd runs for
torchvision's ResNet block (`nn.ReLU(inplace=True)`: an in-place relu_ on the normalized output,
then threshold_backward on the ReLU's output); MPS fuses the ReLU into the normalization kernels, so
mpsgrad moves the same bytes as for plain BN. Their bytes count X, Y, G and dX once each.
"""
from __future__ import annotations

import numpy as np
import torch

import mpsgrad as m

FAMILY = "batch_normalization"
OPS = ("batch norm forward", "batch norm gradient", "batch norm fwd+bwd", "bn+relu fwd+bwd")
# (label suffix, N, N with --quick, H, W, C)
SHAPES = [
    (" conv2", 8, 2, 56, 56, 64),
    (" conv3", 8, 2, 28, 28, 128),
    (" conv4", 8, 2, 14, 14, 256),
    (" tiny", 2, 2, 8, 8, 8),  # for smoke tests
]
EPSILON = 1e-5


def _label(spec, quick):
    suffix, n_full, n_quick, h, w, c = spec
    return f"{n_quick if quick else n_full}x{h}x{w}x{c}{suffix}"


def _run(queue, encode):
    cb = queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


def _rows(spec, quick, device, queue, rng):
    _, n_full, n_quick, h, w, c = spec
    n = n_quick if quick else n_full
    label = _label(spec, quick)
    x = rng.standard_normal((n, h, w, c), dtype=np.float32)
    g = rng.standard_normal((n, h, w, c), dtype=np.float32)
    gamma = (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(c)).astype(np.float32)
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=EPSILON)
    forward = m.CNNBatchNormalization(device, source)
    statistics = m.CNNBatchNormalizationStatistics(device)
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device)
    gradient = m.CNNBatchNormalizationGradient(device)
    forward.destination_image_allocator = gradient.destination_image_allocator = m.ImageAllocator.persistent()
    xs, gs = m.batch_from_numpy(x, device), m.batch_from_numpy(g, device)

    def forward_pass(cb):
        state = forward.result_state(xs[0])  # a training step starts with a fresh state
        statistics.encode_batch(cb, xs, state)
        return forward.encode_batch(cb, xs, state), state

    def gradient_pass(cb, state):
        statistics_gradient.encode_batch(cb, gs, xs, state)
        return gradient.encode_batch(cb, gs, xs, [state] * n)

    ys, state = _run(queue, forward_pass)
    dxs = _run(queue, lambda cb: gradient_pass(cb, state))
    dgamma, dbeta = np.array(state.gradient_for_gamma), np.array(state.gradient_for_beta)  # before re-runs add

    # NCHW views of the NHWC arrays: channels_last tensors, the same bytes as mpsgrad's images.
    tx = torch.from_numpy(x).permute(0, 3, 1, 2)
    tg = torch.from_numpy(g).permute(0, 3, 1, 2)
    tw, tb = torch.from_numpy(gamma), torch.from_numpy(beta)
    _, t_mean, t_invstd = torch.ops.aten.native_batch_norm(tx, tw, tb, None, None, True, 0.1, EPSILON)

    def theirs_forward():
        return torch.ops.aten.native_batch_norm(tx, tw, tb, None, None, True, 0.1, EPSILON)

    def theirs_gradient():
        return torch.ops.aten.native_batch_norm_backward(tg, tx, tw, None, None, t_mean, t_invstd, True, EPSILON,
                                                         [True, True, True])

    def check(compare):
        compare(label, "batch norm forward", m.batch_to_numpy(ys), theirs_forward()[0].permute(0, 2, 3, 1))
        tdx, tdw, tdb = theirs_gradient()
        compare(label, "batch norm dX", m.batch_to_numpy(dxs), tdx.permute(0, 2, 3, 1))
        compare(label, "batch norm dgamma", dgamma, tdw)
        compare(label, "batch norm dbeta", dbeta, tdb)

    elements = 4.0 * n * h * w * c
    yield "batch norm forward", 2 * elements, lambda: _run(queue, forward_pass), theirs_forward, check
    # Repeated gradient passes keep adding into the state's dγ, dβ, as sub-batches would: the same work.
    yield ("batch norm gradient", 3 * elements, lambda: _run(queue, lambda cb: gradient_pass(cb, state)),
           theirs_gradient, None)

    def step(cb):  # a training step: a fresh state, forward, then backward
        ys, state = forward_pass(cb)
        return ys, gradient_pass(cb, state), state

    def theirs_step():
        y, mean, invstd = theirs_forward()
        return torch.ops.aten.native_batch_norm_backward(tg, tx, tw, None, None, mean, invstd, True, EPSILON,
                                                         [True, True, True])

    yield "batch norm fwd+bwd", 4 * elements, lambda: _run(queue, step), theirs_step, check
    yield ("bn+relu fwd+bwd", 4 * elements) + _relu_step(device, queue, label, source, xs, gs, n, tx, tg, tw, tb)


def _relu_step(device, queue, label, source, xs, gs, n, tx, tg, tw, tb):
    """(mine, theirs, check) of the BN + ReLU training step."""
    relu = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
    forward = m.CNNBatchNormalization(device, source, fused_neuron_descriptor=relu)
    statistics = m.CNNBatchNormalizationStatistics(device)
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device, fused_neuron_descriptor=relu)
    gradient = m.CNNBatchNormalizationGradient(device, fused_neuron_descriptor=relu)
    forward.destination_image_allocator = gradient.destination_image_allocator = m.ImageAllocator.persistent()

    def step(cb):
        state = forward.result_state(xs[0])
        statistics.encode_batch(cb, xs, state)
        ys = forward.encode_batch(cb, xs, state)
        statistics_gradient.encode_batch(cb, gs, xs, state)
        return ys, gradient.encode_batch(cb, gs, xs, [state] * n), state

    def theirs():
        z, mean, invstd = torch.ops.aten.native_batch_norm(tx, tw, tb, None, None, True, 0.1, EPSILON)
        y = torch.relu_(z)
        gz = torch.ops.aten.threshold_backward(tg, y, 0)
        return (y,) + tuple(torch.ops.aten.native_batch_norm_backward(gz, tx, tw, None, None, mean, invstd, True,
                                                                      EPSILON, [True, True, True]))

    def check(compare):
        ys, dxs, state = _run(queue, step)
        y, dx, dw, db = theirs()
        compare(label, "bn+relu forward", m.batch_to_numpy(ys), y.permute(0, 2, 3, 1))
        compare(label, "bn+relu dX", m.batch_to_numpy(dxs), dx.permute(0, 2, 3, 1))
        compare(label, "bn+relu dgamma", np.array(state.gradient_for_gamma), dw)
        compare(label, "bn+relu dbeta", np.array(state.gradient_for_beta), db)

    return lambda: _run(queue, step), theirs, check


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in SHAPES:
        label = _label(spec, quick)
        if not any(selected(f"{FAMILY} {label} {op}") for op in OPS):
            continue
        checked = False
        for op, amount, mine, theirs, check in _rows(spec, quick, device, queue, rng):
            if selected(f"{FAMILY} {label} {op}"):
                own_kernels = op.startswith("bn+relu")  # its check covers kernels the others do not
                if checked and not own_kernels:
                    check = None
                checked = checked or (check is not None and not own_kernels)
                yield FAMILY, label, op, "byte", amount, mine, theirs, check
