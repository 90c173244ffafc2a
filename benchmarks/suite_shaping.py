"""Reshape, pad, Gram matrix and spatial-mean rows of benchmarks/run.py.

mpsgrad, one iteration = a command buffer, a batch encode, commit, wait (persistent images).
PyTorch on the same NHWC data:

* reshape (H x W x C -> 1 x HW x C): ``x.reshape(...).clone()`` (a reshape of a contiguous tensor is a
  free view in PyTorch; the clone is the copy MPS's reshape makes). Gradient: the same copy back.
* pad by 1 pixel on every side: zero (``F.pad`` constant on the NHWC tensor; gradient: the slice
  copy that constant_pad_nd's backward makes) and mirror (``F.pad(..., mode="reflect")`` on an NCHW
  copy; gradient: ``aten.reflection_pad2d_backward``).
* Gram matrix: ``alpha * X^T @ X`` per image (bmm); gradient ``alpha * X @ (Gr + Gr^T)``.
* spatial mean: ``x.mean((1, 2))``; gradient: ``(g / HW).expand(...)`` made contiguous.

Units: bytes moved (read + written, float32) for reshape, pad and the spatial mean; FLOPs
(2 * N * HW * C * C per GEMM) for the Gram matrix and its gradient.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m

OPS = ("forward", "gradient")

# (name, N, N with --quick, H, W, C) per family
CASES = {
    "reshape": [("56x56x64", 8, 2, 56, 56, 64), ("tiny 4x4x8", 2, 2, 4, 4, 8)],
    "pad": [("56x56x64 zero", 8, 2, 56, 56, 64), ("56x56x64 mirror", 8, 2, 56, 56, 64),
            ("tiny 4x4x8 mirror", 2, 2, 4, 4, 8)],
    "gram": [("56x56x128", 4, 1, 56, 56, 128), ("28x28x256", 4, 1, 28, 28, 256), ("tiny 4x4x8", 2, 2, 4, 4, 8)],
    "spatial_mean": [("7x7x2048", 32, 4, 7, 7, 2048), ("56x56x256", 8, 2, 56, 56, 256),
                     ("tiny 4x4x8", 2, 2, 4, 4, 8)],
}


def _run(queue, fn):
    cb = queue.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    return out


class _Case:
    """A forward kernel and its gradient on one shape: mine(op), theirs(op), amount(op), check."""

    def __init__(self, family, spec, quick, device, queue, rng):
        name, n_full, n_quick, h, w, c = spec
        self.n, self.h, self.w, self.c = (n_quick if quick else n_full), h, w, c
        self.label = f"N={self.n} {name}"
        self.queue = queue
        self.x = rng.standard_normal((self.n, h, w, c), dtype=np.float32)
        self.xs = m.batch_from_numpy(self.x, device)
        self.tx = torch.from_numpy(self.x)
        self.elements = self.x.size
        getattr(self, f"_setup_{family}")(name, device, rng)
        self.fwd.destination_image_allocator = m.ImageAllocator.persistent()
        self.grad.destination_image_allocator = m.ImageAllocator.persistent()
        self.ys, self.states = self._forward_with_states()
        self.gs = m.batch_from_numpy(self.g, device)
        self.tg = torch.from_numpy(self.g)

    def _forward_with_states(self):
        return _run(self.queue, lambda cb: self.fwd.encode_batch(cb, self.xs, destination_state_is_temporary=False))

    # ---- families
    def _setup_reshape(self, name, device, rng):
        n, h, w, c = self.n, self.h, self.w, self.c
        self.fwd, self.grad = m.NNReshape(device), m.NNReshapeGradient(device)
        self.encode_forward = lambda cb: self.fwd.encode_batch(cb, self.xs, reshaped_width=h * w, reshaped_height=1,
                                                              reshaped_feature_channels=c)
        self._forward_with_states = lambda: _run(self.queue, lambda cb: self.fwd.encode_batch(
            cb, self.xs, destination_state_is_temporary=False, reshaped_width=h * w, reshaped_height=1,
            reshaped_feature_channels=c))
        self.g = rng.standard_normal((n, 1, h * w, c), dtype=np.float32)
        self.torch_forward = lambda: self.tx.reshape(n, 1, h * w, c).clone()
        self.torch_gradient = lambda: self.tg.reshape(n, h, w, c).clone()
        self.amounts = {"forward": 8.0 * self.elements, "gradient": 8.0 * self.elements}

    def _setup_pad(self, name, device, rng):
        n, h, w, c = self.n, self.h, self.w, self.c
        self.fwd, self.grad = m.NNPad(device, (1, 1, 0), (1, 1, 0)), m.NNPadGradient(device)
        mirror = name.endswith("mirror")
        if mirror:
            self.fwd.edge_mode = m.ImageEdgeMode.MIRROR
        self.encode_forward = lambda cb: self.fwd.encode_batch(cb, self.xs)
        self.g = rng.standard_normal((n, h + 2, w + 2, c), dtype=np.float32)
        if mirror:
            xc = torch.from_numpy(np.ascontiguousarray(self.x.transpose(0, 3, 1, 2)))
            gc = torch.from_numpy(np.ascontiguousarray(self.g.transpose(0, 3, 1, 2)))
            self.torch_forward = lambda: F.pad(xc, (1, 1, 1, 1), mode="reflect")
            self.torch_gradient = lambda: torch.ops.aten.reflection_pad2d_backward(gc, xc, [1, 1, 1, 1])
            self.reference = (lambda: self.torch_forward().permute(0, 2, 3, 1),
                              lambda: self.torch_gradient().permute(0, 2, 3, 1))
        else:
            self.torch_forward = lambda: F.pad(self.tx, (0, 0, 1, 1, 1, 1))
            self.torch_gradient = lambda: self.tg[:, 1:-1, 1:-1, :].clone()
        out = 4.0 * n * (h + 2) * (w + 2) * c
        self.amounts = {"forward": 4.0 * self.elements + out, "gradient": 4.0 * self.elements + out}

    def _setup_gram(self, name, device, rng):
        n, h, w, c = self.n, self.h, self.w, self.c
        alpha = 1.0 / (h * w * c)
        self.fwd, self.grad = m.NNGramMatrixCalculation(device, alpha), m.NNGramMatrixCalculationGradient(device, alpha)
        self.encode_forward = lambda cb: self.fwd.encode_batch(cb, self.xs)
        self.g = rng.standard_normal((n, 1, c, c), dtype=np.float32)
        flat = self.tx.reshape(n, h * w, c)
        self.torch_forward = lambda: alpha * torch.bmm(flat.transpose(1, 2), flat)
        self.torch_gradient = lambda: (alpha * torch.bmm(flat, self.tg[:, 0] + self.tg[:, 0].transpose(1, 2))).reshape(
            n, h, w, c)
        self.reference = (lambda: self.torch_forward()[:, None], self.torch_gradient)
        flops = 2.0 * n * h * w * c * c
        self.amounts = {"forward": flops, "gradient": flops}

    def _setup_spatial_mean(self, name, device, rng):
        n, h, w, c = self.n, self.h, self.w, self.c
        self.fwd, self.grad = m.NNReductionSpatialMean(device), m.NNReductionSpatialMeanGradient(device)
        self.encode_forward = lambda cb: self.fwd.encode_batch(cb, self.xs)
        self.g = rng.standard_normal((n, 1, 1, c), dtype=np.float32)
        self.torch_forward = lambda: self.tx.mean((1, 2), keepdim=True)
        self.torch_gradient = lambda: (self.tg / (h * w)).expand(n, h, w, c).contiguous()
        self.amounts = {"forward": 4.0 * (self.elements + n * c), "gradient": 4.0 * (self.elements + n * c)}

    # ---- rows
    def mine(self, op):
        if op == "forward":
            return lambda: _run(self.queue, self.encode_forward)
        return lambda: _run(self.queue, lambda cb: self.grad.encode_batch(cb, self.gs, self.xs, self.states))

    def theirs(self, op):
        return self.torch_forward if op == "forward" else self.torch_gradient

    def check(self, compare):
        forward, gradient = getattr(self, "reference", (self.torch_forward, self.torch_gradient))
        compare(self.label, "forward", m.batch_to_numpy(_run(self.queue, self.encode_forward)), forward())
        compare(self.label, "gradient", m.batch_to_numpy(self.mine("gradient")()), gradient())


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for family, cases in CASES.items():
        unit = "flop" if family == "gram" else "byte"
        for spec in cases:
            label = f"N={spec[2] if quick else spec[1]} {spec[0]}"
            if not any(selected(f"{family} {label} {op}") for op in OPS):
                continue
            case = _Case(family, spec, quick, device, queue, rng)
            checked = False
            for op in OPS:
                if not selected(f"{family} {case.label} {op}"):
                    continue
                check = None
                if not checked:
                    check, checked = case.check, True
                yield family, case.label, op, unit, case.amounts[op], case.mine(op), case.theirs(op), check
