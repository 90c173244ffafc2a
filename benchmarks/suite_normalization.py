"""Group and instance normalization rows of benchmarks/run.py (training: forward with its states,
then the gradient with dγ, dβ).

mpsgrad, one iteration: a command buffer, a batch encode (persistent destination images and
states), commit, wait. PyTorch gets channels_last tensors (the memory layout of mpsgrad's NHWC
images) and runs ATen's own ops: native_group_norm (forward, with the mean / rstd it saves) and
native_group_norm_backward (dX, dγ, dβ), which is what autograd of F.group_norm / F.instance_norm
calls.

Bytes: every float read or written once by the op (forward: read X, write Y; gradient: read G and X,
write dX).

| row                       | mpsgrad                                                       | PyTorch                            |
|---------------------------|---------------------------------------------------------------|------------------------------------|
| group norm forward        | CNNGroupNormalization.encode_batch(cb, xs, destination_state_is_temporary=False) | aten.native_group_norm |
| group norm gradient       | CNNGroupNormalizationGradient.encode_batch(cb, gs, xs, states) | aten.native_group_norm_backward    |
| instance norm forward     | CNNInstanceNormalization... (groups = channels)               | aten.native_group_norm (G = C)     |
| instance norm gradient    | CNNInstanceNormalizationGradient...                           | aten.native_group_norm_backward    |
"""
from __future__ import annotations

import numpy as np
import torch

import mpsgrad as m

# (label suffix, N, N with --quick, H, W, C, groups)
SHAPES = [
    ("", 8, 2, 56, 56, 64, 32),
    (" tiny", 2, 2, 8, 8, 8, 4),  # for smoke tests
]
OPS = {
    "group_normalization": ("group norm forward", "group norm gradient"),
    "instance_normalization": ("instance norm forward", "instance norm gradient"),
}
EPSILON = 1e-5


def _label(spec, quick):
    suffix, n_full, n_quick, h, w, c, _ = spec
    return f"{n_quick if quick else n_full}x{h}x{w}x{c}{suffix}"


def _run(queue, encode):
    cb = queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


def _rows(spec, quick, device, queue, rng, family):
    _, n_full, n_quick, h, w, c, groups = spec
    n = n_quick if quick else n_full
    label = _label(spec, quick)
    if family == "instance_normalization":
        groups = c
    x = rng.standard_normal((n, h, w, c), dtype=np.float32)
    g = rng.standard_normal((n, h, w, c), dtype=np.float32)
    gamma = (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(c)).astype(np.float32)
    if family == "instance_normalization":
        source = m.CNNInstanceNormalizationWeightsDataSource(gamma, beta, epsilon=EPSILON)
        fwd, bwd = m.CNNInstanceNormalization(device, source), m.CNNInstanceNormalizationGradient(device)
        name = "instance norm"
    else:
        source = m.CNNGroupNormalizationWeightsDataSource(gamma, beta, number_of_groups=groups, epsilon=EPSILON)
        fwd, bwd = m.CNNGroupNormalization(device, source), m.CNNGroupNormalizationGradient(device)
        name = "group norm"
    fwd.destination_image_allocator = bwd.destination_image_allocator = m.ImageAllocator.persistent()
    xs, gs = m.batch_from_numpy(x, device), m.batch_from_numpy(g, device)
    ys, states = _run(queue, lambda cb: fwd.encode_batch(cb, xs, destination_state_is_temporary=False))
    dxs = _run(queue, lambda cb: bwd.encode_batch(cb, gs, xs, states))

    # NCHW views of the NHWC arrays: channels_last tensors, the same bytes as mpsgrad's images.
    tx = torch.from_numpy(x).permute(0, 3, 1, 2)
    tg = torch.from_numpy(g).permute(0, 3, 1, 2)
    tw, tb = torch.from_numpy(gamma), torch.from_numpy(beta)
    _, t_mean, t_rstd = torch.ops.aten.native_group_norm(tx, tw, tb, n, c, h * w, groups, EPSILON)

    def theirs_forward():
        return torch.ops.aten.native_group_norm(tx, tw, tb, n, c, h * w, groups, EPSILON)

    def theirs_gradient():
        return torch.ops.aten.native_group_norm_backward(tg, tx, t_mean, t_rstd, tw, n, c, h * w, groups,
                                                         [True, True, True])

    def check(compare):
        ty = theirs_forward()[0].permute(0, 2, 3, 1)
        compare(label, f"{name} forward", m.batch_to_numpy(ys), ty)
        tdx, tdw, tdb = theirs_gradient()
        compare(label, f"{name} dX", m.batch_to_numpy(dxs), tdx.permute(0, 2, 3, 1))
        compare(label, f"{name} dgamma", sum(np.asarray(s.gradient_for_gamma) for s in states), tdw)
        compare(label, f"{name} dbeta", sum(np.asarray(s.gradient_for_beta) for s in states), tdb)

    elements = 4.0 * n * h * w * c
    yield (family, f"{name} forward", 2 * elements,
           lambda: _run(queue, lambda cb: fwd.encode_batch(cb, xs, destination_state_is_temporary=False)),
           theirs_forward, check)
    yield (family, f"{name} gradient", 3 * elements,
           lambda: _run(queue, lambda cb: bwd.encode_batch(cb, gs, xs, states)), theirs_gradient, None)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in SHAPES:
        label = _label(spec, quick)
        for family, ops in OPS.items():
            if not any(selected(f"{family} {label} {op}") for op in ops):
                continue
            checked = False
            for fam, op, amount, mine, theirs, check in _rows(spec, quick, device, queue, rng, family):
                if selected(f"{fam} {label} {op}"):
                    if checked:
                        check = None
                    checked = checked or check is not None
                    yield fam, label, op, "byte", amount, mine, theirs, check
