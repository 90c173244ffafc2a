"""Element-wise and reduction rows of benchmarks/run.py: neuron, arithmetic, softmax.

mpsgrad, one iteration: a command buffer, a batch encode (persistent destination images),
commit, wait. PyTorch gets tensors with the same memory layout as mpsgrad's NHWC images (so
softmax over the feature channels is a reduction over the innermost dimension for both).

Bytes: every float read or written once by the op (e.g. ReLU forward: read X, write Y).

Rows labelled "... f16" run the same ops on FLOAT16 images (docs/float16.md) against the same
PyTorch float32 ops; their bytes count 2 per element (the storage's traffic, not the float32
shadows the kernels compute through). Comparing a "f16" row's mpsgrad time with the plain row's
gives mpsgrad float16 against mpsgrad float32.

| row                     | mpsgrad                                              | PyTorch                              |
|-------------------------|------------------------------------------------------|--------------------------------------|
| neuron forward          | CNNNeuron(ReLU).encode_batch(cb, xs)                 | torch.relu(x)                        |
| neuron forward+state    | ... destination_state_is_temporary=False (training)  | torch.relu(x)                        |
| neuron gradient         | CNNNeuronGradient(ReLU).encode_batch(cb, gs, xs, st) | aten.threshold_backward(g, x, 0)     |
| add / mul forward       | CNNAdd / CNNMultiply .encode_batch(cb, xs, ys)       | torch.add / torch.mul                |
| add gradient            | CNNAddGradient(primary).encode_batch(cb, gs, ys, st) | g.clone() (add's gradient is a copy) |
| mul gradient            | CNNMultiplyGradient(primary)...                      | torch.mul(g, y)                      |
| softmax forward         | CNNSoftMax.encode_batch(cb, xs)                      | torch.softmax(x, -1)                 |
| softmax gradient        | CNNSoftMaxGradient.encode_batch(cb, gs, ys, st)      | aten._softmax_backward_data          |
"""
from __future__ import annotations

import numpy as np
import torch

import mpsgrad as m

# (label suffix, N, N with --quick, H, W, C): the row label is "NxHxWxC" + suffix
SHAPES = [
    ("", 8, 2, 56, 56, 64),
    (" f16", 8, 2, 56, 56, 64),  # FLOAT16 images
    (" tiny", 2, 2, 8, 8, 8),  # for smoke tests (tests/python/test_benchmarks.py)
]
SOFTMAX_SHAPES = [
    ("", 8, 2, 56, 56, 64),
    (" logits", 256, 64, 1, 1, 1000),
]
OPS = {
    "neuron": ("relu forward", "relu forward+state", "relu gradient"),
    "arithmetic": ("add forward", "add gradient", "mul forward", "mul gradient"),
    "softmax": ("softmax forward", "softmax gradient"),
}


def _label(spec, quick):
    suffix, n_full, n_quick, h, w, c = spec
    return f"{n_quick if quick else n_full}x{h}x{w}x{c}{suffix}"


def _run(queue, encode):
    cb = queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


class _Shape:
    def __init__(self, spec, quick, device, queue, rng):
        _, n_full, n_quick, h, w, c = spec
        self.n = n_quick if quick else n_full
        self.label = _label(spec, quick)
        self.elements = self.n * h * w * c
        self.device, self.queue = device, queue
        shape = (self.n, h, w, c)
        self.x = rng.standard_normal(shape, dtype=np.float32)
        # float32 normal draws include exact zeros now and then, where ReLU's derivative is a
        # convention (MPS: 1 at x = 0, PyTorch's threshold_backward: 0): keep the data off them.
        self.x[self.x == 0] = 0.5
        self.y = (rng.standard_normal(shape, dtype=np.float32) + 3.0).astype(np.float32)
        self.g = rng.standard_normal(shape, dtype=np.float32)
        self.half = spec[0].endswith("f16")
        fmt = m.ImageFeatureChannelFormat.FLOAT16 if self.half else m.ImageFeatureChannelFormat.FLOAT32
        if self.half:  # PyTorch computes on the values the half images hold
            self.x, self.y, self.g = (a.astype(np.float16).astype(np.float32) for a in (self.x, self.y, self.g))
            self.x[self.x == 0] = 0.5
        self.xs, self.ys, self.gs = (m.batch_from_numpy(a, device, channel_format=fmt)
                                     for a in (self.x, self.y, self.g))
        self.tx, self.ty, self.tg = (torch.from_numpy(a) for a in (self.x, self.y, self.g))

    def bytes(self, arrays):
        return (2.0 if self.half else 4.0) * self.elements * arrays


def _neuron_rows(s):
    desc = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
    fwd, bwd = m.CNNNeuron(s.device, desc), m.CNNNeuronGradient(s.device, desc)
    fwd.destination_image_allocator = bwd.destination_image_allocator = m.ImageAllocator.persistent()
    _, states = _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs, destination_state_is_temporary=False))

    def check(compare):
        ys = _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs))
        compare(s.label, "relu forward", m.batch_to_numpy(ys), torch.relu(s.tx))
        dxs = _run(s.queue, lambda cb: bwd.encode_batch(cb, s.gs, s.xs, states))
        compare(s.label, "relu gradient", m.batch_to_numpy(dxs), torch.ops.aten.threshold_backward(s.tg, s.tx, 0))

    yield ("neuron", "relu forward", s.bytes(2),
           lambda: _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs)), lambda: torch.relu(s.tx), check)
    yield ("neuron", "relu forward+state", s.bytes(2),
           lambda: _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs, destination_state_is_temporary=False)),
           lambda: torch.relu(s.tx), None)
    yield ("neuron", "relu gradient", s.bytes(3),
           lambda: _run(s.queue, lambda cb: bwd.encode_batch(cb, s.gs, s.xs, states)),
           lambda: torch.ops.aten.threshold_backward(s.tg, s.tx, 0), None)


def _arithmetic_rows(s):
    for name, fwd_cls, grad_cls, torch_fwd, torch_grad, grad_arrays in (
            ("add", m.CNNAdd, m.CNNAddGradient, torch.add, lambda: s.tg.clone(), 2),
            ("mul", m.CNNMultiply, m.CNNMultiplyGradient, torch.mul, lambda: torch.mul(s.tg, s.ty), 3)):
        fwd, grad = fwd_cls(s.device), grad_cls(s.device, False)
        fwd.destination_image_allocator = grad.destination_image_allocator = m.ImageAllocator.persistent()
        _, states = _run(s.queue, lambda cb, fwd=fwd: fwd.encode_batch(cb, s.xs, s.ys,
                                                                      destination_state_is_temporary=False))

        def check(compare, fwd=fwd, grad=grad, states=states, torch_fwd=torch_fwd, torch_grad=torch_grad, name=name):
            out = _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs, s.ys))
            compare(s.label, f"{name} forward", m.batch_to_numpy(out), torch_fwd(s.tx, s.ty))
            dxs = _run(s.queue, lambda cb: grad.encode_batch(cb, s.gs, s.ys, states))
            compare(s.label, f"{name} gradient", m.batch_to_numpy(dxs), torch_grad())

        yield ("arithmetic", f"{name} forward", s.bytes(3),
               lambda fwd=fwd: _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs, s.ys)),
               lambda torch_fwd=torch_fwd: torch_fwd(s.tx, s.ty), check)
        yield ("arithmetic", f"{name} gradient", s.bytes(grad_arrays),
               lambda grad=grad, states=states: _run(s.queue, lambda cb: grad.encode_batch(cb, s.gs, s.ys, states)),
               torch_grad, None)


def _softmax_rows(s):
    fwd, bwd = m.CNNSoftMax(s.device), m.CNNSoftMaxGradient(s.device)
    fwd.destination_image_allocator = bwd.destination_image_allocator = m.ImageAllocator.persistent()
    ys, states = _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs, destination_state_is_temporary=False))
    ty = torch.softmax(s.tx, -1)

    def their_grad():
        return torch.ops.aten._softmax_backward_data(s.tg, ty, -1, torch.float32)

    def check(compare):
        out = _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs))
        compare(s.label, "softmax forward", m.batch_to_numpy(out), torch.softmax(s.tx, -1))
        dxs = _run(s.queue, lambda cb: bwd.encode_batch(cb, s.gs, ys, states))
        compare(s.label, "softmax gradient", m.batch_to_numpy(dxs), their_grad())

    yield ("softmax", "softmax forward", s.bytes(2),
           lambda: _run(s.queue, lambda cb: fwd.encode_batch(cb, s.xs)), lambda: torch.softmax(s.tx, -1), check)
    yield ("softmax", "softmax gradient", s.bytes(3),
           lambda: _run(s.queue, lambda cb: bwd.encode_batch(cb, s.gs, ys, states)), their_grad, None)


def rows(quick, device, queue, rng, selected):
    """Yields (family, label, op, unit, amount, mine, theirs, check) for the rows `selected` accepts."""
    plans = [(spec, (("neuron", _neuron_rows), ("arithmetic", _arithmetic_rows))) for spec in SHAPES]
    plans += [(spec, (("softmax", _softmax_rows),)) for spec in SOFTMAX_SHAPES]
    for spec, makers in plans:
        label, shape = _label(spec, quick), None
        for family, maker in makers:
            if not any(selected(f"{family} {label} {op}") for op in OPS[family]):
                continue
            shape = shape or _Shape(spec, quick, device, queue, rng)
            checked = False
            for fam, op, amount, mine, theirs, check in maker(shape):
                if selected(f"{fam} {label} {op}"):
                    if checked:  # the first selected row of a family carries the family's check
                        check = None
                    checked = checked or check is not None
                    yield fam, label, op, "byte", amount, mine, theirs, check
