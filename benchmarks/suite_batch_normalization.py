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
"""
from __future__ import annotations

import numpy as np
import torch

import mpsgrad as m

FAMILY = "batch_normalization"
OPS = ("batch norm forward", "batch norm gradient")
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


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in SHAPES:
        label = _label(spec, quick)
        if not any(selected(f"{FAMILY} {label} {op}") for op in OPS):
            continue
        checked = False
        for op, amount, mine, theirs, check in _rows(spec, quick, device, queue, rng):
            if selected(f"{FAMILY} {label} {op}"):
                if checked:
                    check = None
                checked = checked or check is not None
                yield FAMILY, label, op, "byte", amount, mine, theirs, check
