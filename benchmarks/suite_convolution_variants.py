"""Fully connected, transposed-convolution and sub-pixel convolution rows of benchmarks/run.py.

mpsgrad, one iteration = a command buffer, a batch encode, commit, wait (persistent images):

* fully connected: ``CNNFullyConnected.encode_batch`` (forward), ``CNNFullyConnectedGradient.encode_batch``
  with ``GRADIENT_WITH_DATA`` (data grad) or ``GRADIENT_WITH_WEIGHTS_AND_BIAS`` (weight+bias grad).
  PyTorch: ``F.linear`` on the flattened source; ``dy @ W``; ``dy^T @ x`` and ``dy.sum(0)``
  (what linear's autograd runs).
* transposed convolution (FULL padding policy, i.e. PyTorch padding 0): ``CNNConvolutionTranspose``
  / ``CNNConvolutionTransposeGradient`` likewise. PyTorch: ``F.conv_transpose2d`` and
  ``torch.ops.aten.convolution_backward(..., transposed=True, ...)`` with output mask (input) or
  (weight, bias).

* sub-pixel convolution (3x3, stride 1, SAME policy = PyTorch padding 1, scale factor r):
  ``CNNConvolution`` of a ``CNNSubPixelConvolutionDescriptor`` and its ``CNNConvolutionGradient``.
  PyTorch: ``F.conv2d`` + ``F.pixel_shuffle`` (weights permuted to PyTorch's channel order, so the
  results are equal), ``F.pixel_unshuffle`` + ``convolution_backward`` for the gradients.

FLOPs: sub-pixel 2 * N * H * W * Cin * Cout * k * k per op (Cout before the shuffle); fully connected 2 * N * (H*W*C) * O per op; transposed 2 * N * H * W * Cin * Cout * k * k
per op (the scatter's multiplies; bias terms not counted).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m

OPS = ("forward", "data grad", "weight+bias grad")

# (name, N, N with --quick, H, W, C, O)
FC_CASES = [
    ("fc 7x7x512->1024", 32, 4, 7, 7, 512, 1024),
    ("fc 1x1x2048->1000", 64, 8, 1, 1, 2048, 1000),
    ("fc 4x4x64->256", 64, 8, 4, 4, 64, 256),
    ("tiny fc 2x2x8->4", 2, 2, 2, 2, 8, 4),
]
# (name, N, N with --quick, Cin, H, W, Cout, k, stride)
TRANSPOSE_CASES = [
    ("4x4 s2 128->64 14x14", 8, 2, 128, 14, 14, 64, 4, 2),
    ("3x3 s2 64->32 28x28", 8, 2, 64, 28, 28, 32, 3, 2),
    ("2x2 s2 256->128 14x14", 8, 2, 256, 14, 14, 128, 2, 2),
    ("3x3 s1 64->64 28x28", 8, 2, 64, 28, 28, 64, 3, 1),
    ("tiny 3x3 s2 8->4 4x4", 2, 2, 8, 4, 4, 4, 3, 2),
]


# (name, N, N with --quick, Cin, H, W, Cout before the shuffle, r)
SUB_PIXEL_CASES = [
    ("3x3 64->256 r2 28x28", 8, 2, 64, 28, 28, 256, 2),
    ("3x3 32->288 r3 16x16", 8, 2, 32, 16, 16, 288, 3),
    ("tiny 3x3 4->16 r2 4x4", 2, 2, 4, 4, 4, 16, 2),
]


def _run(queue, fn):
    cb = queue.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    return out


class _Pair:
    """A forward kernel and its gradient on one shape, set up once and shared by its three rows."""

    def __init__(self, queue, forward, gradient, xs, dys):
        self.queue, self.fwd, self.grad, self.xs, self.dys = queue, forward, gradient, xs, dys
        forward.destination_image_allocator = m.ImageAllocator.persistent()
        gradient.destination_image_allocator = m.ImageAllocator.persistent()
        self.ys, self.states = self._forward()

    def _forward(self):
        return _run(self.queue, lambda cb: self.fwd.encode_batch(cb, self.xs, destination_state_is_temporary=False))

    def _gradient(self, option):
        self.grad.gradient_option = option
        return _run(self.queue, lambda cb: self.grad.encode_batch(cb, self.dys, self.xs, self.states))

    def mine(self, op):
        if op == "forward":
            return self._forward
        option = (m.CNNConvolutionGradientOption.GRADIENT_WITH_DATA if op == "data grad"
                  else m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS)
        return lambda: self._gradient(option)


class _FullyConnected(_Pair):
    def __init__(self, spec, quick, device, queue, rng):
        name, n_full, n_quick, h, w, c, o = spec
        n = n_quick if quick else n_full
        self.label, self.flops = f"N={n} {name}", 2.0 * n * h * w * c * o
        x = rng.standard_normal((n, h, w, c), dtype=np.float32)
        dy = rng.standard_normal((n, 1, 1, o), dtype=np.float32)
        wt = (rng.standard_normal((o, h, w, c), dtype=np.float32) / np.sqrt(h * w * c)).astype(np.float32)
        b = rng.standard_normal(o, dtype=np.float32)
        ds = m.CNNConvolutionWeightsDataSource(m.CNNConvolutionDescriptor(w, h, c, o), wt, b)
        super().__init__(queue, m.CNNFullyConnected(device, ds), m.CNNFullyConnectedGradient(device, ds),
                         m.batch_from_numpy(x, device), m.batch_from_numpy(dy, device))
        self.tx = torch.from_numpy(x.reshape(n, -1))
        self.tdy = torch.from_numpy(dy.reshape(n, o))
        self.tw, self.tb = torch.from_numpy(wt.reshape(o, -1)), torch.from_numpy(b)
        self.shape = x.shape

    def theirs(self, op):
        if op == "forward":
            return lambda: F.linear(self.tx, self.tw, self.tb)
        if op == "data grad":
            return lambda: self.tdy @ self.tw
        return lambda: (self.tdy.t() @ self.tx, self.tdy.sum(0))

    def check(self, compare):
        ys, _ = self._forward()
        compare(self.label, "forward", m.batch_to_numpy(ys).reshape(self.tdy.shape), self.theirs("forward")())
        dxs = self.mine("data grad")()
        compare(self.label, "data gradient", m.batch_to_numpy(dxs).reshape(self.tx.shape), self.theirs("data grad")())
        self.mine("weight+bias grad")()
        dw, db = self.theirs("weight+bias grad")()
        compare(self.label, "weight gradient", np.array(self.states[0].gradient_for_weights).reshape(dw.shape), dw)
        compare(self.label, "bias gradient", np.array(self.states[0].gradient_for_biases), db)


class _Transpose(_Pair):
    def __init__(self, spec, quick, device, queue, rng):
        name, n_full, n_quick, cin, h, w, cout, k, s = spec
        n = n_quick if quick else n_full
        self.label, self.flops = f"N={n} {name}", 2.0 * n * h * w * cin * cout * k * k
        self.stride = s
        ho, wo = (h - 1) * s + k, (w - 1) * s + k  # the FULL policy = PyTorch padding 0
        x = rng.standard_normal((n, h, w, cin), dtype=np.float32)
        dy = rng.standard_normal((n, ho, wo, cout), dtype=np.float32)
        wt = (rng.standard_normal((cout, k, k, cin), dtype=np.float32) / np.sqrt(k * k * cin)).astype(np.float32)
        b = rng.standard_normal(cout, dtype=np.float32)
        d = m.CNNConvolutionDescriptor(k, k, cin, cout)
        d.stride_in_pixels_x = d.stride_in_pixels_y = s
        ds = m.CNNConvolutionWeightsDataSource(d, wt, b)
        t = m.CNNConvolutionTranspose(device, ds)
        t.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_FULL))
        super().__init__(queue, t, m.CNNConvolutionTransposeGradient(device, ds), m.batch_from_numpy(x, device),
                         m.batch_from_numpy(dy, device))
        if tuple(self.ys[0].shape) != (1, ho, wo, cout):
            raise RuntimeError(f"{self.label}: mpsgrad output is {self.ys[0].shape}, expected {(1, ho, wo, cout)}")
        self.tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        self.tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2)))
        # MPS weights are used as given; PyTorch's (in, out, kH, kW) are the rotated, swapped ones.
        self.tw = torch.from_numpy(np.ascontiguousarray(wt[:, ::-1, ::-1, :].transpose(3, 0, 1, 2)))
        self.tb = torch.from_numpy(b)

    def _backward(self, mask):
        return torch.ops.aten.convolution_backward(self.tdy, self.tx, self.tw, [self.tw.shape[1]], [self.stride] * 2,
                                                   [0, 0], [1, 1], True, [0, 0], 1, mask)

    def theirs(self, op):
        if op == "forward":
            return lambda: F.conv_transpose2d(self.tx, self.tw, self.tb, self.stride)
        if op == "data grad":
            return lambda: self._backward([True, False, False])
        return lambda: self._backward([False, True, True])

    def check(self, compare):
        ys, _ = self._forward()
        compare(self.label, "forward", m.batch_to_numpy(ys).transpose(0, 3, 1, 2), self.theirs("forward")())
        dxs = self.mine("data grad")()
        compare(self.label, "data gradient", m.batch_to_numpy(dxs).transpose(0, 3, 1, 2),
                self.theirs("data grad")()[0])
        self.mine("weight+bias grad")()
        _, dw, db = self.theirs("weight+bias grad")()
        mine = np.array(self.states[0].gradient_for_weights)[:, ::-1, ::-1, :].transpose(3, 0, 1, 2)
        compare(self.label, "weight gradient", mine, dw)
        compare(self.label, "bias gradient", np.array(self.states[0].gradient_for_biases), db)


class _SubPixel(_Pair):
    def __init__(self, spec, quick, device, queue, rng):
        name, n_full, n_quick, cin, h, w, cout, r = spec
        n = n_quick if quick else n_full
        self.label, self.flops = f"N={n} {name}", 2.0 * n * h * w * cin * cout * 9
        self.r = r
        c = cout // (r * r)
        x = rng.standard_normal((n, h, w, cin), dtype=np.float32)
        dy = rng.standard_normal((n, h * r, w * r, c), dtype=np.float32)
        wt = (rng.standard_normal((cout, 3, 3, cin), dtype=np.float32) / np.sqrt(9 * cin)).astype(np.float32)
        b = rng.standard_normal(cout, dtype=np.float32)
        d = m.CNNSubPixelConvolutionDescriptor(3, 3, cin, cout, r)
        ds = m.CNNConvolutionWeightsDataSource(d, wt, b)
        conv = m.CNNConvolution(device, ds)
        conv.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_SAME))
        super().__init__(queue, conv, m.CNNConvolutionGradient(device, ds), m.batch_from_numpy(x, device),
                         m.batch_from_numpy(dy, device))
        # PyTorch channel t = ci * r^2 + sy * r + sx holds MPS channel c * (r * sy + sx) + ci.
        perm = [c * (r * sy + sx) + ci for ci in range(c) for sy in range(r) for sx in range(r)]
        self.tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        self.tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2)))
        self.tw = torch.from_numpy(np.ascontiguousarray(wt[perm].transpose(0, 3, 1, 2)))
        self.tb = torch.from_numpy(b[perm].copy())
        self.perm = perm

    def _backward(self, mask):
        low = F.pixel_unshuffle(self.tdy, self.r)
        return torch.ops.aten.convolution_backward(low, self.tx, self.tw, [self.tw.shape[0]], [1, 1], [1, 1],
                                                   [1, 1], False, [0, 0], 1, mask)

    def theirs(self, op):
        if op == "forward":
            return lambda: F.pixel_shuffle(F.conv2d(self.tx, self.tw, self.tb, padding=1), self.r)
        if op == "data grad":
            return lambda: self._backward([True, False, False])
        return lambda: self._backward([False, True, True])

    def check(self, compare):
        ys, _ = self._forward()
        compare(self.label, "forward", m.batch_to_numpy(ys).transpose(0, 3, 1, 2), self.theirs("forward")())
        dxs = self.mine("data grad")()
        compare(self.label, "data gradient", m.batch_to_numpy(dxs).transpose(0, 3, 1, 2),
                self.theirs("data grad")()[0])
        self.mine("weight+bias grad")()
        _, dw, db = self.theirs("weight+bias grad")()
        mine_w = np.array(self.states[0].gradient_for_weights)[self.perm].transpose(0, 3, 1, 2)
        compare(self.label, "weight gradient", mine_w, dw)
        compare(self.label, "bias gradient", np.array(self.states[0].gradient_for_biases)[self.perm], db)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for family, cases, make in (("fc", FC_CASES, _FullyConnected),
                                ("transpose", TRANSPOSE_CASES, _Transpose),
                                ("sub-pixel", SUB_PIXEL_CASES, _SubPixel)):
        for spec in cases:
            label = f"N={spec[2] if quick else spec[1]} {spec[0]}"
            if not any(selected(f"{family} {label} {op}") for op in OPS):
                continue
            case = make(spec, quick, device, queue, rng)
            checked = False
            for op in OPS:
                if not selected(f"{family} {case.label} {op}"):
                    continue
                check = None
                if not checked:
                    check, checked = case.check, True
                yield family, case.label, op, "flop", case.flops, case.mine(op), case.theirs(op), check
