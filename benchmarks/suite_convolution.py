"""Convolution rows of benchmarks/run.py: forward, data gradient, weight + bias gradient.

mpsgrad, one iteration = what a training loop pays per call: a command buffer, a batch encode,
commit, wait (destination images from ``ImageAllocator.persistent()``):

* forward          ``CNNConvolution.encode_batch(cb, xs, destination_state_is_temporary=False)``
* data grad        ``CNNConvolutionGradient.encode_batch`` with ``GRADIENT_WITH_DATA``
* weight+bias grad the same with ``GRADIENT_WITH_WEIGHTS_AND_BIAS``

PyTorch, NCHW float32 contiguous: ``F.conv2d`` and ``torch.ops.aten.convolution_backward`` with
output mask (input) or (weight, bias), the op autograd calls for conv2d's backward.
FLOPs: 2 * N * Ho * Wo * Cout * (Cin / groups) * kH * kW per op (bias terms not counted).

Rows labelled "... f16" run the same shape on FLOAT16 images (source, result and gradients;
docs/float16.md) against the same PyTorch float32 ops on the half-rounded values: their mpsgrad
time against the plain row's is float16 storage against float32 storage.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m

FAMILY = "convolution"

# (name, N, N with --quick, Cin, H, W, Cout, k, stride, depthwise)
CASES = [
    ("3x3 64->64 56x56", 8, 2, 64, 56, 56, 64, 3, 1, False),
    ("3x3 128->128 28x28", 8, 2, 128, 28, 28, 128, 3, 1, False),
    ("3x3 s2 64->128 56x56", 8, 2, 64, 56, 56, 128, 3, 2, False),
    ("1x1 256->64 56x56", 8, 2, 256, 56, 56, 64, 1, 1, False),
    ("dw 3x3 128 56x56", 8, 2, 128, 56, 56, 128, 3, 1, True),
    ("5x5 32->64 16x16", 32, 8, 32, 16, 16, 64, 5, 1, False),
    ("stem 7x7 s2 3->64 224x224", 4, 1, 3, 224, 224, 64, 7, 2, False),
    ("3x3 256->256 14x14", 8, 2, 256, 14, 14, 256, 3, 1, False),
    ("1x1 512->128 14x14", 8, 2, 512, 14, 14, 128, 1, 1, False),
    ("3x3 32->32 32x32", 16, 4, 32, 32, 32, 32, 3, 1, False),
    # FLOAT16 images (the row name ends in " f16")
    ("3x3 64->64 56x56 f16", 8, 2, 64, 56, 56, 64, 3, 1, False),
    ("1x1 256->64 56x56 f16", 8, 2, 256, 56, 56, 64, 1, 1, False),
    ("3x3 32->32 32x32 f16", 16, 4, 32, 32, 32, 32, 3, 1, False),
    # the digits example's layers (examples/train_digits.py, batch 32) and a 5x5 of the same size:
    # tiny images, where the fixed costs of an op dominate
    ("digits 3x3 1->16 8x8", 32, 32, 1, 8, 8, 16, 3, 1, False),
    ("digits 3x3 16->32 4x4", 32, 32, 16, 4, 4, 32, 3, 1, False),
    ("digits 5x5 32->32 8x8", 32, 32, 32, 8, 8, 32, 5, 1, False),
    # a tiny row for smoke tests (tests/python/test_benchmarks.py)
    ("tiny 3x3 8->8 8x8", 2, 2, 8, 8, 8, 8, 3, 1, False),
]
OPS = ("forward", "data grad", "weight+bias grad")


class _Case:
    """One convolution shape, set up once for both libraries and shared by its three rows."""

    def __init__(self, spec, quick, device, queue, rng):
        (self.name, n_full, n_quick, cin, h, w, cout, k, stride, depthwise) = spec
        self.n = n = n_quick if quick else n_full
        self.stride, self.pad = stride, k // 2
        self.groups = cin if depthwise else 1
        ho = (h + 2 * self.pad - k) // stride + 1
        wo = (w + 2 * self.pad - k) // stride + 1
        self.flops = 2.0 * n * ho * wo * cout * (cin // self.groups) * k * k
        self.label = f"N={n} {self.name}"

        x = rng.standard_normal((n, h, w, cin), dtype=np.float32)
        dy = rng.standard_normal((n, ho, wo, cout), dtype=np.float32)
        half = self.name.endswith(" f16")
        fmt = m.ImageFeatureChannelFormat.FLOAT16 if half else m.ImageFeatureChannelFormat.FLOAT32
        if half:  # PyTorch computes on the values the half images hold
            x, dy = (a.astype(np.float16).astype(np.float32) for a in (x, dy))
        w_ohwi = (rng.standard_normal((cout, k, k, cin // self.groups), dtype=np.float32)
                  / np.sqrt(k * k * cin / self.groups)).astype(np.float32)
        bias = rng.standard_normal(cout, dtype=np.float32)

        cls = m.CNNDepthWiseConvolutionDescriptor if depthwise else m.CNNConvolutionDescriptor
        desc = cls(kernel_width=k, kernel_height=k, input_feature_channels=cin, output_feature_channels=cout)
        desc.stride_in_pixels_x = desc.stride_in_pixels_y = stride
        source = m.CNNConvolutionWeightsDataSource(desc, w_ohwi, bias)
        self.queue = queue
        self.conv = m.CNNConvolution(device, source)
        self.conv_grad = m.CNNConvolutionGradient(device, source)
        self.conv.destination_image_allocator = m.ImageAllocator.persistent()
        self.conv_grad.destination_image_allocator = m.ImageAllocator.persistent()
        self.xs = m.batch_from_numpy(x, device, channel_format=fmt)
        self.dys = m.batch_from_numpy(dy, device, channel_format=fmt)
        ys, states = self._forward()
        if tuple(ys[0].shape) != (1, ho, wo, cout):
            raise RuntimeError(f"{self.label}: mpsgrad output is {ys[0].shape}, expected {(1, ho, wo, cout)}")
        self.states = states if isinstance(states, list) else [states] * n

        self.tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        self.tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2)))
        self.tw = torch.from_numpy(np.ascontiguousarray(w_ohwi.transpose(0, 3, 1, 2)))
        self.tb = torch.from_numpy(bias)

    def _forward(self):
        cb = self.queue.command_buffer()
        ys, states = self.conv.encode_batch(cb, self.xs, destination_state_is_temporary=False)
        cb.commit()
        cb.wait_until_completed()
        return ys, states

    def _gradient(self, option):
        self.conv_grad.gradient_option = option
        cb = self.queue.command_buffer()
        dxs = self.conv_grad.encode_batch(cb, self.dys, self.xs, self.states)
        cb.commit()
        cb.wait_until_completed()
        return dxs

    def mine(self, op):
        if op == "forward":
            return self._forward
        option = (m.CNNConvolutionGradientOption.GRADIENT_WITH_DATA if op == "data grad"
                  else m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS)
        return lambda: self._gradient(option)

    def _backward(self, mask):
        return torch.ops.aten.convolution_backward(
            self.tdy, self.tx, self.tw, [self.tw.shape[0]], [self.stride] * 2, [self.pad] * 2, [1, 1],
            False, [0, 0], self.groups, mask)

    def theirs(self, op):
        if op == "forward":
            return lambda: F.conv2d(self.tx, self.tw, self.tb, self.stride, self.pad, 1, self.groups)
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
        state = self.states[0]
        compare(self.label, "weight gradient", np.array(state.gradient_for_weights).transpose(0, 3, 1, 2), dw)
        compare(self.label, "bias gradient", np.array(state.gradient_for_biases), db)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    for spec in CASES:
        labels = [f"N={spec[2] if quick else spec[1]} {spec[0]}"]
        if not any(selected(f"{FAMILY} {labels[0]} {op}") for op in OPS):
            continue
        case = _Case(spec, quick, device, queue, rng)
        checked = False
        for op in OPS:
            if not selected(f"{FAMILY} {case.label} {op}"):
                continue
            check = None
            if not checked:
                check, checked = case.check, True
            yield FAMILY, case.label, op, "flop", case.flops, case.mine(op), case.theirs(op), check
