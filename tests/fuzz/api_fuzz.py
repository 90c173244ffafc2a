"""Property-based fuzz test of mpsgrad's public Python API (issue 8; docs/verification.md,
"Robustness and fuzzing").

A *case* is a short sequence of generated calls (1 to 4 operations from the registered families)
on one device and queue, with valid and invalid arguments. Cases run in worker subprocesses, each
with a timeout. The run fails on:
  * a signal (crash) or a hang of a worker,
  * an exception outside ValueError, TypeError, IndexError, MemoryError and mpsgrad's own
    CommandBufferError,
  * a call with a definitely invalid argument that is accepted,
  * a result that differs from the NumPy reference computed in the case.

Everything is derived from (seed, case index), so any failure is reproduced exactly with
    python3 tests/fuzz/api_fuzz.py --seed SEED --first INDEX --cases 1 --jobs 1

Families register an operation generator with @family("name"); an operation draws its arguments
from the random generator it is given, may make some of them invalid with Arg.bad(...), runs the
calls and checks results with check_close(...). Add a family by adding a function.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np

# ---------------------------------------------------------------------------------------------
# the registry and the context an operation runs in

FAMILIES: Dict[str, Callable] = {}


def family(name: str):
    """Registers an operation generator: fn(r: random.Random, ctx: Context) -> None."""

    def register(fn):
        FAMILIES[name] = fn
        return fn

    return register


class InvalidAccepted(AssertionError):
    pass


class WrongResult(AssertionError):
    pass


@dataclass
class Context:
    m: object                 # the mpsgrad module
    device: object
    queue: object
    invalid: List[str] = field(default_factory=list)   # definitely invalid arguments of the current call

    def bad(self, r: random.Random, good, bad_values, p: float = 0.15, what: str = "argument"):
        """Returns `good`, or with probability p one of `bad_values` (noted as definitely invalid)."""
        if r.random() < p:
            value = r.choice(bad_values)
            self.invalid.append(f"{what}={value!r}")
            return value
        return good

    def start_call(self):
        self.invalid = []

    def expect_rejected_if_invalid(self, label: str):
        """Called after a call returned normally: it must not have had a definitely invalid argument."""
        if self.invalid:
            raise InvalidAccepted(f"{label} accepted invalid argument(s): {', '.join(self.invalid)}")


WRONG_TYPES = ["x", 1.5, None, [1], object()]
HUGE_INTS = [2**31, 2**32, 2**40, 2**62, 2**63, 2**64 - 1, 2**64, -(2**63) - 1]


def check_close(actual, expected, what: str, tol: float = 1e-4):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise WrongResult(f"{what}: shape {actual.shape} != reference {expected.shape}")
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    err = float(np.max(np.abs(actual - expected))) / scale if expected.size else 0.0
    if not err <= tol:
        raise WrongResult(f"{what}: relative error {err:.3g} > {tol}")


def random_array(r: random.Random, *shape) -> np.ndarray:
    gen = np.random.default_rng(r.getrandbits(32))
    return gen.standard_normal(shape).astype(np.float32)


def image_format(r: random.Random, m):
    """FLOAT16 for about a third of the images (docs/float16.md), else FLOAT32."""
    return m.ImageFeatureChannelFormat.FLOAT16 if r.random() < 0.3 else m.ImageFeatureChannelFormat.FLOAT32


def as_stored(array: np.ndarray, fmt, m) -> np.ndarray:
    """The values an image of format `fmt` holds after writing `array` (half rounding for FLOAT16)."""
    if fmt == m.ImageFeatureChannelFormat.FLOAT16:
        return np.asarray(array, np.float32).astype(np.float16).astype(np.float32)
    return array


# One rounding of the result to half (2**-11 relative) plus the rounding of the inputs the reference
# already sees: 4e-3 of the largest value leaves room for both.
FLOAT16_TOL = 4e-3


def run(ctx: Context, cb):
    cb.commit()
    cb.wait_until_completed()


# ---------------------------------------------------------------------------------------------
# core objects: descriptors, images, read/write, views, states, padding helpers, command buffers


@family("core")
def core_ops(r: random.Random, ctx: Context):
    m = ctx.m
    op = r.randrange(6)
    ctx.start_call()
    if op == 0:  # image creation with possibly invalid sizes, then a read/write round trip
        w = ctx.bad(r, r.randint(1, 6), [0, -1] + HUGE_INTS + WRONG_TYPES[:2], what="width")
        h = ctx.bad(r, r.randint(1, 6), [0, -3] + HUGE_INTS, what="height")
        c = ctx.bad(r, r.randint(1, 9), [0, -4] + HUGE_INTS + ["4"], what="feature_channels")
        # (2**31 images of a few bytes would be a valid, if huge, allocation: only overflowing counts)
        n = ctx.bad(r, r.randint(1, 3), [0, -1, 2**62, 2**63, 2**64, -(2**63) - 1], what="number_of_images")
        fmt = ctx.bad(r, image_format(r, m), [m.ImageFeatureChannelFormat.UNORM8, m.ImageFeatureChannelFormat.NONE],
                      p=0.05, what="channel_format")
        image = m.Image(ctx.device, m.ImageDescriptor(w, h, c, n, fmt))
        ctx.expect_rejected_if_invalid("Image")
        data = as_stored(random_array(r, h, w, c), fmt, m)
        index = r.randrange(n)
        ctx.start_call()
        bad_index = ctx.bad(r, index, [n, -1, 2**40, 2**64, "0"], what="image_index")
        image.write_bytes(data, image_index=bad_index)
        ctx.expect_rejected_if_invalid("write_bytes")
        check_close(image.read_bytes(image_index=index), data, "read_bytes after write_bytes")
        chw = image.read_bytes(m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH, image_index=index)
        check_close(chw, np.transpose(data, (2, 0, 1)), "read_bytes CHW")
    elif op == 1:  # channel ranges of read_bytes and sub-images
        c = r.randint(1, 12)
        image = m.Image.from_numpy(random_array(r, 3, 3, c), ctx.device)
        offset = ctx.bad(r, 4 * r.randrange((c + 3) // 4), [2, -4, c + 4, 2**63, 1.0], what="feature_channel_offset")
        count = ctx.bad(r, None, [0, -1, c + 1, 2**64, "all"], what="number_of_feature_channels")
        out = image.read_bytes(feature_channel_offset=offset, number_of_feature_channels=count)
        ctx.expect_rejected_if_invalid("read_bytes")
        check_close(out, image.to_numpy()[0][:, :, offset:], "read_bytes channel range")
        ctx.start_call()
        loc = ctx.bad(r, 0, [1, -4, 2**40], what="location")
        sub = image.sub_image_with_feature_channel_range(loc, c)
        ctx.expect_rejected_if_invalid("sub_image_with_feature_channel_range")
        check_close(sub.to_numpy(), image.to_numpy(), "sub-image view")
    elif op == 2:  # states and read counts
        size = ctx.bad(r, 4 * r.randint(0, 8), [-1, 2**64 - 1, 2**63, "8", 1.5], what="buffer_size")
        state = m.State(ctx.device, size)
        ctx.expect_rejected_if_invalid("State")
        ctx.start_call()
        count = ctx.bad(r, r.randint(0, 3), [-1, -(2**63), 2**64, "1"], what="read_count")
        state.read_count = count
        ctx.expect_rejected_if_invalid("State.read_count")
    elif op == 3:  # padding helpers against the spec's formula
        s, k = r.randint(1, 20), r.randint(1, 7)
        stride = ctx.bad(r, r.randint(1, 4), [0, -1, -5], what="stride")
        style = ctx.bad(r, r.choice([-1, 0, 1]), [2, -2, 99], what="style")
        got = m.padding_destination_size(s, stride, k, style)
        ctx.expect_rejected_if_invalid("padding_destination_size")
        num = s + style * (k - 1)
        expected = 0 if num <= 0 else -(-num // stride)
        if got != expected:
            raise WrongResult(f"padding_destination_size({s}, {stride}, {k}, {style}) = {got}, expected {expected}")
    elif op == 4:  # command buffer misuse and the failure hook
        cb = ctx.queue.command_buffer()
        action = r.randrange(4)
        try:
            if action == 0:
                cb.wait_until_completed()   # never committed
                raise InvalidAccepted("wait_until_completed before commit accepted")
            if action == 1:
                cb.commit()
                cb.commit()                 # twice
                raise InvalidAccepted("commit twice accepted")
            if action == 2:
                cb.fail_on_commit("fuzz")
                cb.commit()
                try:
                    cb.wait_until_completed()
                    raise InvalidAccepted("a failed command buffer's wait returned normally")
                except m.CommandBufferError:
                    pass
                if cb.status != m.CommandBufferStatus.ERROR:
                    raise WrongResult("fail_on_commit: status is not ERROR")
            if action == 3:
                seen = []
                cb.add_completed_handler(lambda done: seen.append(done.status))
                cb.commit()
                cb.wait_until_completed()
                if seen != [m.CommandBufferStatus.COMPLETED]:
                    raise WrongResult(f"completed handler saw {seen}")
        except m.CommandBufferError:
            pass
    else:  # temporary images: read counts and command buffer identity
        cb = ctx.queue.command_buffer()
        t = m.TemporaryImage(cb, m.ImageDescriptor(2, 2, 4))
        k = m.CNNNeuron(ctx.device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
        other = ctx.queue.command_buffer()
        target = cb if r.random() < 0.5 else other
        if target is other:
            ctx.invalid.append("temporary image on another command buffer")
        if r.random() < 0.3:
            t.read_count = 0
            ctx.invalid.append("temporary image with read_count 0")
        k.encode(target, t, destination_image=m.Image(ctx.device, m.ImageDescriptor(2, 2, 4)))
        ctx.expect_rejected_if_invalid("encode of a temporary image")


# ---------------------------------------------------------------------------------------------
# neurons (forward and gradient)

NEURONS = {
    "RELU": (lambda x: np.maximum(x, 0), lambda x: (x >= 0).astype(np.float32)),
    "ABSOLUTE": (np.abs, lambda x: np.where(x >= 0, 1.0, -1.0)),
    "TANH": (lambda x: np.tanh(x), lambda x: 1 - np.tanh(x) ** 2),  # a = b = 1
    "SIGMOID": (lambda x: 1 / (1 + np.exp(-x)), lambda x: (1 / (1 + np.exp(-x))) * (1 - 1 / (1 + np.exp(-x)))),
    "LINEAR": (lambda x: x, lambda x: np.ones_like(x)),  # a = 1, b = 0
}


TYPED_NEURONS = {"RELU": "CNNNeuronReLU", "ABSOLUTE": "CNNNeuronAbsolute", "TANH": "CNNNeuronTanH",
                 "SIGMOID": "CNNNeuronSigmoid", "LINEAR": "CNNNeuronLinear"}


@family("neuron")
def neuron_ops(r: random.Random, ctx: Context):
    m = ctx.m
    name = r.choice(sorted(NEURONS))
    f, df = NEURONS[name]
    kind = getattr(m.CNNNeuronType, name)
    ctx.start_call()
    descriptor = m.NNNeuronDescriptor(ctx.bad(r, kind, ["relu", 99, -1, 2**64], what="neuron_type"))
    ctx.expect_rejected_if_invalid("NNNeuronDescriptor")
    forward = m.CNNNeuron(ctx.device, descriptor)
    if r.random() < 0.3:  # the per-type subclass with its default parameters computes the same
        forward = getattr(m, TYPED_NEURONS[name])(ctx.device)
    h, w, c = r.randint(1, 6), r.randint(1, 6), r.randint(1, 8)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    if r.random() < 0.4:
        neuron_into_destination(r, ctx, forward, f, x_arr, name)
        return
    ctx.start_call()
    # The returning form runs the padding policy, which sets offset.x/y: only z can be invalid.
    forward.offset = ctx.bad(r, (0, 0, 0), [(0, 0, 2**32), (0, 0, -1), (1.5, 0), "0,0", (0, 0, 5)],
                             what="offset")
    forward.clip_rect = ctx.bad(r, m.RECT_NO_CLIP, [((2**32, 0, 0), (1, 1, 1)), ((0, 0), (-1, 1)),
                                                    ((0, 0, 0), (0, 0, 0)), ((0.5, 0), (1, 1))], what="clip_rect")
    forward.destination_feature_channel_offset = ctx.bad(r, 0, [1, -4, 2**40, "0"],
                                                         what="destination_feature_channel_offset")
    temporary = r.random() < 0.5
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state_is_temporary=temporary)
    g_arr = random_array(r, h, w, c)
    g = m.Image.from_numpy(g_arr, ctx.device)
    gradient = m.CNNNeuronGradient(ctx.device, descriptor)
    dx = gradient.encode(cb, g, x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("CNNNeuron / CNNNeuronGradient encode")
    check_close(y.to_numpy()[0], f(x_arr), f"{name} forward")
    check_close(dx.to_numpy()[0], g_arr * df(x_arr), f"{name} gradient", tol=2e-4)


def neuron_into_destination(r, ctx, forward, f, x_arr, name):
    """The into-destination form: offset used as set, off-image reads are zero (edge mode ZERO)."""
    m = ctx.m
    h, w, c = x_arr.shape
    ox, oy = r.randint(-3, 3), r.randint(-3, 3)
    ctx.start_call()
    forward.offset = ctx.bad(r, (ox, oy, 0), [(2**32 + ox, oy, 0), (ox, -(2**31) - 1, 0), (ox, oy, 1)],
                             what="offset")
    y = m.Image(ctx.device, m.ImageDescriptor(w, h, c))
    cb = ctx.queue.command_buffer()
    forward.encode(cb, m.Image.from_numpy(x_arr, ctx.device), destination_image=y)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("CNNNeuron encode into a destination")
    padded = np.zeros((h + 6, w + 6, c), np.float32)
    padded[3:3 + h, 3:3 + w] = x_arr
    check_close(y.to_numpy()[0], f(padded[3 + oy:3 + oy + h, 3 + ox:3 + ox + w]), f"{name} forward with offset")


# ---------------------------------------------------------------------------------------------
# arithmetic


@family("arithmetic")
def arithmetic_ops(r: random.Random, ctx: Context):
    m = ctx.m
    ops = {"CNNAdd": np.add, "CNNSubtract": np.subtract, "CNNMultiply": np.multiply}
    name = r.choice(sorted(ops))
    kernel = getattr(m, name)(ctx.device)
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 8)
    fa, fb = image_format(r, m), image_format(r, m)
    a_arr, b_arr = as_stored(random_array(r, h, w, c), fa, m), as_stored(random_array(r, h, w, c), fb, m)
    a = m.Image.from_numpy(a_arr, ctx.device, channel_format=fa)
    b = m.Image.from_numpy(b_arr, ctx.device, channel_format=fb)
    ctx.start_call()
    kernel.primary_scale = ctx.bad(r, 1.0, ["2", None, [1.0]], what="primary_scale")
    if r.random() < 0.15:
        b = m.Image.from_numpy(random_array(r, 2, h, w, c), ctx.device)   # 2 images: returning form rejects it
        ctx.invalid.append("secondary with 2 images")
    # The returning form's padding policy sets primary_offset.x/y: only z can be invalid.
    kernel.primary_offset = ctx.bad(r, (0, 0, 0), [(0, 0, 2**32), (0, 0, 2**40), ("a", 0)], what="primary_offset")
    cb = ctx.queue.command_buffer()
    result = kernel.encode(cb, a, b)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(name)
    # The result takes the primary's format (docs/float16.md, the allocator rule).
    if result.feature_channel_format != fa:
        raise WrongResult(f"{name}: the result's format {result.feature_channel_format} is not the primary's {fa}")
    tol = FLOAT16_TOL if fa == m.ImageFeatureChannelFormat.FLOAT16 else 1e-4
    check_close(result.to_numpy()[0], ops[name](a_arr, b_arr), f"{name} forward", tol=tol)


# ---------------------------------------------------------------------------------------------
# softmax


@family("softmax")
def softmax_ops(r: random.Random, ctx: Context):
    m = ctx.m
    log = r.random() < 0.5
    kernel = (m.CNNLogSoftMax if log else m.CNNSoftMax)(ctx.device)
    h, w, c = r.randint(1, 4), r.randint(1, 4), r.randint(1, 10)
    x_arr = random_array(r, h, w, c) * 3
    x = m.Image.from_numpy(x_arr, ctx.device)
    ctx.start_call()
    kernel.source_feature_channel_offset = ctx.bad(r, 0, [2, -4, 2**62, 1.0], what="source_feature_channel_offset")
    cb = ctx.queue.command_buffer()
    y = kernel.encode(cb, x)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("softmax encode")
    shifted = x_arr.astype(np.float64) - x_arr.max(axis=2, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=2, keepdims=True))
    expected = shifted - lse if log else np.exp(shifted - lse)
    check_close(y.to_numpy()[0], expected, "log-softmax" if log else "softmax")


# ---------------------------------------------------------------------------------------------
# optimizers: one update of a vector (plain SGD and Adam's first step have NumPy references)


@family("optimizers")
def optimizer_ops(r: random.Random, ctx: Context):
    m = ctx.m
    n = r.randint(1, 40)
    g_arr, w_arr = random_array(r, n), random_array(r, n)
    lr = r.choice([0.0, 0.01, 0.5])
    ctx.start_call()
    lr_arg = ctx.bad(r, lr, [-1.0, float("nan"), float("inf"), "0.1"], what="learning_rate")
    w_len = ctx.bad(r, n, [n + 1, n + 7], what="values length")
    g, w = m.Vector.from_numpy(g_arr, ctx.device), m.Vector.from_numpy(random_array(r, w_len), ctx.device)
    if w_len == n:
        w.numpy()[...] = w_arr
    cb = ctx.queue.command_buffer()
    if r.random() < 0.5:
        momentum = ctx.bad(r, 0.0, [-0.5, 1.5, float("nan")], what="momentum_scale")
        desc = m.NNOptimizerDescriptor(lr_arg) if isinstance(lr_arg, float) else lr_arg
        opt = m.NNOptimizerStochasticGradientDescent(ctx.device, momentum_scale=momentum, optimizer_descriptor=desc)
        opt.encode(cb, g, w, None, w)
        expected = w_arr.astype(np.float64) - lr * g_arr
        name = "SGD"
    else:
        eps = ctx.bad(r, 1e-8, [-1.0, float("nan")], what="epsilon")
        opt = m.NNOptimizerAdam(ctx.device, lr_arg, epsilon=1e-8) if eps == 1e-8 else \
            m.NNOptimizerAdam(ctx.device, beta1=0.9, beta2=0.999, epsilon=eps,
                              optimizer_descriptor=m.NNOptimizerDescriptor(0.1))
        mom, vel = m.Vector(ctx.device, n), m.Vector(ctx.device, n)
        opt.encode(cb, g, w, mom, vel, None, w)
        g64 = g_arr.astype(np.float64)
        lr_t = lr * np.sqrt(1 - 0.999) / (1 - 0.9)
        expected = w_arr - lr_t * (0.1 * g64) / (np.sqrt(0.001 * g64 * g64) + 1e-8)
        name = "Adam"
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{name} update")
    check_close(w.to_numpy(), expected, f"{name} step", tol=1e-4)


# ---------------------------------------------------------------------------------------------
# loss: mean squared error, SUM reduction (value sum((y - t)^2), gradient 2 (y - t))


@family("loss")
def loss_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 6)
    y_arr, t_arr = random_array(r, h, w, c), random_array(r, h, w, c)
    ctx.start_call()
    d = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    d.label_smoothing = ctx.bad(r, 0.0, [-0.5, 1.5, float("nan")], what="label_smoothing")
    d.number_of_classes = ctx.bad(r, 1, [0, -3, 2**30], what="number_of_classes")
    t_shape = ctx.bad(r, (h, w, c), [(h, w, c + 1), (h + 1, w, c)], what="labels shape")
    loss = m.CNNLoss(ctx.device, d)
    labels = m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(
        t_arr if t_shape == (h, w, c) else random_array(r, *t_shape)))
    cb = ctx.queue.command_buffer()
    grad = loss.encode(cb, m.Image.from_numpy(y_arr, ctx.device), labels)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("CNNLoss encode")
    diff = y_arr.astype(np.float64) - t_arr
    check_close(grad.to_numpy()[0], 2 * diff, "MSE gradient")
    check_close(labels.loss_image.to_numpy().reshape(()), (diff * diff).sum(), "MSE loss value")


@family("split_loss")
def split_loss_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 6)
    y_arr, t_arr = random_array(r, h, w, c), random_array(r, h, w, c)
    seed = np.float32(r.uniform(-2.0, 2.0))
    ctx.start_call()
    d = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    forward, gradient = m.NNForwardLoss(ctx.device, d), m.NNLossGradient(ctx.device, d)
    gradient.delta = ctx.bad(r, 1.0, [0.0, -1.0, float("inf")], what="delta")
    t_shape = ctx.bad(r, (h, w, c), [(h, w, c + 1), (h, w + 1, c)], what="labels shape")
    g_shape = ctx.bad(r, (1, 1, 1), [(h, w, c)] if (h, w, c) != (1, 1, 1) else [(1, 1, 2)],
                      what="source gradient shape")
    ys = [m.Image.from_numpy(y_arr, ctx.device)]
    ts = [m.Image.from_numpy(t_arr if t_shape == (h, w, c) else random_array(r, *t_shape), ctx.device)]
    gs = [m.Image.from_numpy(np.full(g_shape, seed, np.float32), ctx.device)]
    labels_gradient = r.random() < 0.5  # d/dt of (y - t)^2 is -(d/dy)
    gradient.compute_label_gradients = labels_gradient
    cb = ctx.queue.command_buffer()
    states = None
    if r.random() < 0.5:  # the forward's destination states carry its properties to the gradient
        losses, states = forward.encode_batch(cb, ys, ts, destination_state_is_temporary=r.random() < 0.5)
    else:
        losses = forward.encode_batch(cb, ys, ts)
    grads = gradient.encode_batch(cb, gs, ys, ts, source_states=states)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("NNForwardLoss / NNLossGradient encode")
    diff = y_arr.astype(np.float64) - t_arr
    check_close(losses[0].to_numpy().reshape(()), (diff * diff).sum(), "MSE loss value")
    check_close(grads[0].to_numpy()[0], (-2 if labels_gradient else 2) * float(seed) * diff,
                "MSE gradient x source gradient")


# ---------------------------------------------------------------------------------------------
# convolution (forward, data and weight gradients), stride 1, same size, zero padding


def conv_reference(x, wgt, bias, e):
    """x (H, W, I), wgt (O, k, k, I), e (H, W, O): y, dx, dw, db of a same-size correlation."""
    k = wgt.shape[1]
    p = k // 2
    H, W, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((p, k - 1 - p), (p, k - 1 - p), (0, 0)))
    y = np.zeros((H, W, wgt.shape[0]))
    dxp = np.zeros_like(xp)
    dw = np.zeros(wgt.shape)
    for ky in range(k):
        for kx in range(k):
            window = xp[ky:ky + H, kx:kx + W, :]
            y += window @ wgt[:, ky, kx, :].T.astype(np.float64)
            dxp[ky:ky + H, kx:kx + W, :] += e @ wgt[:, ky, kx, :].astype(np.float64)
            dw[:, ky, kx, :] = np.einsum("hwo,hwi->oi", e, window)
    y += bias
    return y, dxp[p:p + H, p:p + W, :], dw, e.sum(axis=(0, 1))


@family("convolution")
def convolution_ops(r: random.Random, ctx: Context):
    m = ctx.m
    k = r.choice([1, 3])
    cin, cout = r.choice([1, 3, 4]), r.choice([1, 4, 5])
    h, w = r.randint(2, 6), r.randint(2, 6)
    ctx.start_call()
    kw = ctx.bad(r, k, [0, -1, 2**31, 2**63, "3"], what="kernel_width")
    d = m.CNNConvolutionDescriptor(kw, k, cin, cout)
    d.stride_in_pixels_x = ctx.bad(r, 1, [0, -2, 2**31, 2**64], what="stride_in_pixels_x")
    wgt = random_array(r, cout, k, k, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, ctx.bad(r, wgt, [wgt[:-1], "w"], what="weights"), bias)
    conv = m.CNNConvolution(ctx.device, source)
    grad = m.CNNConvolutionGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNConvolution")
    x_arr = random_array(r, h, w, cin)
    e_arr = random_array(r, h, w, cout)
    x = m.Image.from_numpy(x_arr, ctx.device)
    ctx.start_call()
    grad.gradient_option = ctx.bad(r, m.CNNConvolutionGradientOption.ALL, [0, 3, "ALL"], what="gradient_option")
    cb = ctx.queue.command_buffer()
    y, state = conv.encode(cb, x, destination_state_is_temporary=False)
    e = m.Image.from_numpy(e_arr, ctx.device)
    dx = grad.encode(cb, e, x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("convolution encode")
    ref_y, ref_dx, ref_dw, ref_db = conv_reference(x_arr, wgt, bias, e_arr.astype(np.float64))
    check_close(y.to_numpy()[0], ref_y, "convolution forward")
    check_close(dx.to_numpy()[0], ref_dx, "convolution data gradient")
    check_close(np.asarray(state.gradient_for_weights).reshape(ref_dw.shape), ref_dw, "weight gradient")
    check_close(np.asarray(state.gradient_for_biases), ref_db, "bias gradient")


@family("fully_connected")
def fully_connected_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w = r.randint(1, 5), r.randint(1, 5)
    cin, cout = r.choice([1, 3, 4, 8]), r.choice([1, 2, 5])
    ctx.start_call()
    d = m.CNNConvolutionDescriptor(w, h, cin, cout)
    d.stride_in_pixels_y = ctx.bad(r, 1, [2, 3], what="stride_in_pixels_y")
    wgt = random_array(r, cout, h, w, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, bias)
    fc = m.CNNFullyConnected(ctx.device, source)
    grad = m.CNNFullyConnectedGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNFullyConnected")
    n = r.randint(1, 3)
    x_arr = random_array(r, n, h, w, cin)
    e_arr = random_array(r, n, 1, 1, cout)
    ctx.start_call()
    src_w = ctx.bad(r, w, [w + 1], what="source width")
    xs = m.batch_from_numpy(random_array(r, n, h, src_w, cin) if src_w != w else x_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    ys, states = fc.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, ctx.device), xs, states)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("fully connected encode")
    x2, w2 = x_arr.reshape(n, -1).astype(np.float64), wgt.reshape(cout, -1).astype(np.float64)
    e2 = e_arr.reshape(n, cout).astype(np.float64)
    check_close(m.batch_to_numpy(ys).reshape(n, cout), x2 @ w2.T + bias, "fully connected forward")
    check_close(m.batch_to_numpy(dxs).reshape(n, -1), e2 @ w2, "fully connected data gradient")
    check_close(np.asarray(states[0].gradient_for_weights).reshape(cout, -1), e2.T @ x2, "fully connected dW")
    check_close(np.asarray(states[0].gradient_for_biases), e2.sum(0), "fully connected dB")


def transpose_reference(x, wgt, bias, e, s):
    """x (H, W, I), wgt (O, k, k, I) used as given, stride s, offset 0 and kernel offset (k>>1) - (k-1)
    (window top-left tap at -(k-1) in Z: the "full" placement), e (D, D', O): y, dx, dw, db."""
    H, W, _ = x.shape
    k = wgt.shape[1]
    z = np.zeros(((H - 1) * s + 1, (W - 1) * s + 1, x.shape[2]))
    z[::s, ::s] = x
    zp = np.pad(z, ((k - 1, k - 1), (k - 1, k - 1), (0, 0)))
    Dh, Dw = zp.shape[0] - k + 1, zp.shape[1] - k + 1
    y = np.tile(bias.astype(np.float64), (Dh, Dw, 1))
    dzp = np.zeros_like(zp)
    dw = np.zeros(wgt.shape)
    for ky in range(k):
        for kx in range(k):
            y += zp[ky:ky + Dh, kx:kx + Dw] @ wgt[:, ky, kx, :].T.astype(np.float64)
            dzp[ky:ky + Dh, kx:kx + Dw] += e @ wgt[:, ky, kx, :].astype(np.float64)
            dw[:, ky, kx, :] = np.einsum("hwo,hwi->oi", e, zp[ky:ky + Dh, kx:kx + Dw])
    dx = dzp[k - 1:k - 1 + z.shape[0]:s, k - 1:k - 1 + z.shape[1]:s]
    return y, dx, dw, e.sum((0, 1))


@family("convolution_transpose")
def convolution_transpose_ops(r: random.Random, ctx: Context):
    m = ctx.m
    k, s = r.choice([1, 2, 3]), r.choice([1, 2, 3])
    cin, cout = r.choice([1, 3, 4]), r.choice([1, 4, 5])
    h, w = r.randint(1, 4), r.randint(1, 4)
    ctx.start_call()
    d = m.CNNConvolutionDescriptor(k, k, cin, cout)
    d.stride_in_pixels_x = d.stride_in_pixels_y = s
    if r.random() < 0.1:
        d.fused_neuron_descriptor = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
        ctx.invalid.append("fused_neuron_descriptor")
    wgt = random_array(r, cout, k, k, cin)
    bias = random_array(r, cout)
    source = m.CNNConvolutionWeightsDataSource(d, wgt, bias)
    t = m.CNNConvolutionTranspose(ctx.device, source)
    grad = m.CNNConvolutionTransposeGradient(ctx.device, source)
    ctx.expect_rejected_if_invalid("CNNConvolutionTranspose")
    t.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_FULL))
    x_arr = random_array(r, h, w, cin)
    x = m.Image.from_numpy(x_arr, ctx.device)
    Dh, Dw = (h - 1) * s + k, (w - 1) * s + k
    e_arr = random_array(r, Dh, Dw, cout)
    ctx.start_call()
    e_h = ctx.bad(r, Dh, [Dh + 1], what="gradient height")
    cb = ctx.queue.command_buffer()
    y, state = t.encode(cb, x, destination_state_is_temporary=False)
    dx = grad.encode(cb, m.Image.from_numpy(random_array(r, e_h, Dw, cout) if e_h != Dh else e_arr, ctx.device),
                     x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("transpose encode")
    ref_y, ref_dx, ref_dw, ref_db = transpose_reference(x_arr, wgt, bias, e_arr.astype(np.float64), s)
    check_close(y.to_numpy()[0], ref_y, "transpose forward")
    check_close(dx.to_numpy()[0], ref_dx, "transpose data gradient")
    check_close(np.asarray(state.gradient_for_weights), ref_dw, "transpose weight gradient")
    check_close(np.asarray(state.gradient_for_biases), ref_db, "transpose bias gradient")


# ---------------------------------------------------------------------------------------------
# pooling (2x2 stride 2, windows inside the image: edge mode ZERO never reads off-image)


@family("pooling")
def pooling_ops(r: random.Random, ctx: Context):
    m = ctx.m
    ops = {"CNNPoolingMax": lambda b: b.max(axis=(1, 3)), "CNNPoolingAverage": lambda b: b.mean(axis=(1, 3)),
           "CNNPoolingL2Norm": lambda b: np.sqrt((b.astype(np.float64) ** 2).sum(axis=(1, 3)))}
    name = r.choice(sorted(ops))
    ctx.start_call()
    kw = ctx.bad(r, 2, [0, -1, 2**63, 2**64, "2", None], what="kernel_width")
    sy = ctx.bad(r, 2, [0, -2, 2**64, 1.5], what="stride_in_pixels_y")
    kernel = getattr(m, name)(ctx.device, kw, 2, 2, sy)
    ctx.expect_rejected_if_invalid(name)
    if r.random() < 0.2:
        ctx.start_call()
        dilation = ctx.bad(r, r.randint(1, 3), [0, -1, 2**63, "1"], what="dilation_rate_x")
        m.CNNDilatedPoolingMax(ctx.device, 2, 2, dilation, 1, 2, 2)
        ctx.expect_rejected_if_invalid("CNNDilatedPoolingMax")
    h, w, c = r.randint(2, 7), r.randint(2, 7), r.randint(1, 9)
    x_arr = random_array(r, h, w, c)
    ho, wo = h // 2, w // 2
    ctx.start_call()
    # offset = center of the first window: taps (center - 1, center) of an even window
    kernel.offset = ctx.bad(r, (1, 1, 0), [(1, 1, 2**32), (2**40, 1, 0), ("1", 1, 0)], what="offset")
    kernel.edge_mode = m.ImageEdgeMode.ZERO
    y = m.Image(ctx.device, m.ImageDescriptor(wo, ho, c))
    cb = ctx.queue.command_buffer()
    kernel.encode(cb, m.Image.from_numpy(x_arr, ctx.device), destination_image=y)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{name} encode")
    blocks = x_arr[:2 * ho, :2 * wo].reshape(ho, 2, wo, 2, c)
    check_close(y.to_numpy()[0], ops[name](blocks), f"{name} 2x2 stride 2")


# ---------------------------------------------------------------------------------------------
# upsampling (nearest, forward and gradient)


@family("upsampling")
def upsampling_ops(r: random.Random, ctx: Context):
    m = ctx.m
    sx, sy = r.randint(1, 3), r.randint(1, 3)
    ctx.start_call()
    bad_sx = ctx.bad(r, sx, [0, -1, 2**63, 2**64, "2", None], what="integer_scale_factor_x")
    forward = m.CNNUpsamplingNearest(ctx.device, bad_sx, sy)
    ctx.expect_rejected_if_invalid("CNNUpsamplingNearest")
    if r.random() < 0.2:
        ctx.start_call()
        m.CNNUpsamplingBilinear(ctx.device, sx, ctx.bad(r, sy, [0, -3, 2**64], what="integer_scale_factor_y"),
                                # (pybind11's bool conversion takes None as False: not listed as invalid)
                                ctx.bad(r, r.random() < 0.5, ["yes", [True]], what="align_corners"))
        ctx.expect_rejected_if_invalid("CNNUpsamplingBilinear")
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 8)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
    g_arr = random_array(r, h * sy, w * sx, c)
    dx = m.CNNUpsamplingNearestGradient(ctx.device, sx, sy).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x,
                                                                   state)
    run(ctx, cb)
    check_close(y.to_numpy()[0], np.repeat(np.repeat(x_arr, sy, axis=0), sx, axis=1), "nearest upsampling")
    check_close(dx.to_numpy()[0], g_arr.reshape(h, sy, w, sx, c).sum(axis=(1, 3)), "nearest upsampling gradient")


# ---------------------------------------------------------------------------------------------
# dropout: every output element is 0 or x / keep_probability


@family("dropout")
def dropout_ops(r: random.Random, ctx: Context):
    m = ctx.m
    keep = r.choice([0.1, 0.5, 0.75, 0.999])
    ctx.start_call()
    bad_keep = ctx.bad(r, keep, [0.0, 1.0, -0.5, 1.5, float("nan"), "0.5", None], what="keep_probability")
    seed = ctx.bad(r, r.getrandbits(64), [-1, 2**64, 1.5, "1"], what="seed")
    stride = ctx.bad(r, (1, 1, 1), [(2, 1, 1), (1, 1, -1), (1, 1), "1", (2**64, 1, 1)], what="mask_stride_in_pixels")
    kernel = m.CNNDropout(ctx.device, bad_keep, seed, stride)
    ctx.expect_rejected_if_invalid("CNNDropout")
    h, w, c = r.randint(1, 6), r.randint(1, 6), r.randint(1, 9)
    x_arr = random_array(r, h, w, c)
    cb = ctx.queue.command_buffer()
    y = kernel.encode(cb, m.Image.from_numpy(x_arr, ctx.device))
    run(ctx, cb)
    out = y.to_numpy()[0].astype(np.float64)
    scaled = x_arr.astype(np.float64) / np.float32(keep)
    kept = np.abs(out - scaled) <= 1e-5 * np.maximum(1.0, np.abs(scaled))
    if not np.all(kept | (out == 0)):
        raise WrongResult("dropout: an output is neither 0 nor x / keep_probability")
# batch normalization: statistics, training forward, statistics gradient, gradient over a batch


def batch_norm_reference(x, g, gamma, beta, eps):
    """x, g (N, H, W, C): Y, dγ, dβ, dX of a training-mode batch norm (biased variance over N·H·W)."""
    x = x.astype(np.float64)
    g = g.astype(np.float64)
    mean = x.mean(axis=(0, 1, 2))
    var = x.var(axis=(0, 1, 2))
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * inv
    y = xhat * gamma + beta
    dbeta = g.sum(axis=(0, 1, 2))
    dgamma = (g * xhat).sum(axis=(0, 1, 2))
    count = x.shape[0] * x.shape[1] * x.shape[2]
    dx = gamma * inv * (g - dbeta / count - xhat * dgamma / count)
    return mean, var, y, dgamma, dbeta, dx


@family("batch_normalization")
def batch_normalization_ops(r: random.Random, ctx: Context):
    m = ctx.m
    n, h, w, c = r.randint(1, 3), r.randint(1, 5), r.randint(1, 5), r.randint(1, 9)
    gamma, beta, mean, var = (random_array(r, c) for _ in range(4))
    var = np.abs(var) + 0.5
    ctx.start_call()
    bad_mean = ctx.bad(r, mean, [mean[:-1], np.zeros(c + 1, np.float32), "m", np.zeros((c, 2), np.float32)],
                       what="mean")
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, bad_mean, var)
    kernel = m.CNNBatchNormalization(ctx.device, source)
    eps = r.choice([1e-5, 1e-3, 0.1])
    kernel.epsilon = ctx.bad(r, eps, [0.0, -1.0, float("nan"), float("inf"), "x", None], what="epsilon")
    ctx.expect_rejected_if_invalid("CNNBatchNormalization")
    kernel.destination_image_allocator = m.ImageAllocator.persistent()
    statistics = m.CNNBatchNormalizationStatistics(ctx.device)
    tanh = m.NNNeuronDescriptor(m.CNNNeuronType.TANH)
    ctx.start_call()
    neuron = ctx.bad(r, None, [tanh], what="statistics gradient fused_neuron_descriptor (forward has none)")
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(ctx.device, neuron)
    gradient = m.CNNBatchNormalizationGradient(ctx.device)
    gradient.destination_image_allocator = m.ImageAllocator.persistent()
    x_arr = (random_array(r, n, h, w, c) * 2 + 1).astype(np.float32)
    g_arr = random_array(r, n, h, w, c)
    xs = m.batch_from_numpy(x_arr, ctx.device)
    gs = m.batch_from_numpy(g_arr, ctx.device)
    state = kernel.result_state(xs[0])
    cb = ctx.queue.command_buffer()
    statistics.encode_batch(cb, xs, state)
    ys = kernel.encode_batch(cb, xs, state)
    statistics_gradient.encode_batch(cb, gs, xs, state)
    dxs = [gradient.encode(cb, gs[i], xs[i], state) for i in range(n)]
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("batch normalization encode")
    ref_mean, ref_var, ref_y, ref_dgamma, ref_dbeta, ref_dx = batch_norm_reference(x_arr, g_arr, gamma, beta, eps)
    check_close(state.mean, ref_mean, "batch mean")
    check_close(state.variance, ref_var, "batch variance")
    check_close(m.batch_to_numpy(ys), ref_y, "batch normalization training forward", tol=1e-3)
    check_close(state.gradient_for_gamma, ref_dgamma, "gradient_for_gamma", tol=1e-3)
    check_close(state.gradient_for_beta, ref_dbeta, "gradient_for_beta", tol=1e-3)
    check_close(m.batch_to_numpy(dxs), ref_dx, "batch normalization dX", tol=1e-3)


def group_norm_reference(x, g, gamma, beta, groups, eps):
    """x, g (N, H, W, C): Y, dX and per-image dγ, dβ (N, C) of group normalization (biased variance per
    image and group of C/groups consecutive channels; groups == C is instance normalization)."""
    n, h, w, c = x.shape
    k = c // groups
    xg = x.astype(np.float64).reshape(n, h, w, groups, k)
    gg = g.astype(np.float64).reshape(n, h, w, groups, k)
    mean = xg.mean(axis=(1, 2, 4), keepdims=True)
    inv = 1.0 / np.sqrt(xg.var(axis=(1, 2, 4), keepdims=True) + eps)
    xhat = (xg - mean) * inv
    gam = gamma.astype(np.float64).reshape(groups, k)
    y = (xhat * gam + beta.astype(np.float64).reshape(groups, k)).reshape(n, h, w, c)
    dbeta = gg.sum(axis=(1, 2)).reshape(n, c)
    dgamma = (gg * xhat).sum(axis=(1, 2)).reshape(n, c)
    hh = gg * gam
    count = h * w * k
    dx = inv * (hh - hh.sum(axis=(1, 2, 4), keepdims=True) / count
                - xhat * (hh * xhat).sum(axis=(1, 2, 4), keepdims=True) / count)
    return y, dx.reshape(n, h, w, c), dgamma, dbeta


@family("instance_group_normalization")
def instance_group_normalization_ops(r: random.Random, ctx: Context):
    m = ctx.m
    n, h, w = r.randint(1, 3), r.randint(1, 5), r.randint(1, 5)
    instance = r.random() < 0.5
    c = r.choice([1, 2, 3, 4, 5, 6, 8, 9, 12])
    divisors = [d for d in range(1, c + 1) if c % d == 0]
    groups = c if instance else r.choice(divisors)
    gamma, beta = random_array(r, c), random_array(r, c)
    eps = r.choice([1e-5, 1e-3, 0.1])
    ctx.start_call()
    bad_beta = ctx.bad(r, beta, [beta[:-1], np.zeros(c + 1, np.float32), "b", np.zeros((c, 2), np.float32)],
                       what="beta")
    if instance:
        source = m.CNNInstanceNormalizationWeightsDataSource(gamma, bad_beta)
        kernel = m.CNNInstanceNormalization(ctx.device, source)
        gradient = m.CNNInstanceNormalizationGradient(ctx.device)
    else:
        bad_groups = ctx.bad(r, groups, [0, -1, c + 1, "2", 2**40] + ([c - 1] if c > 2 else []),
                             what="number_of_groups")
        source = m.CNNGroupNormalizationWeightsDataSource(gamma, bad_beta, number_of_groups=bad_groups)
        kernel = m.CNNGroupNormalization(ctx.device, source)
        gradient = m.CNNGroupNormalizationGradient(ctx.device)
    kernel.epsilon = ctx.bad(r, eps, [0.0, -1.0, float("nan"), float("inf"), "x", None], what="epsilon")
    ctx.expect_rejected_if_invalid("instance / group normalization")
    for k in (kernel, gradient):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    x_arr = (random_array(r, n, h, w, c) * 2 + 1).astype(np.float32)
    g_arr = random_array(r, n, h, w, c)
    ctx.start_call()
    channels = ctx.bad(r, c, [c + 1] + ([c - 1] if c > 1 else []), what="image channels")
    xs = m.batch_from_numpy(np.ascontiguousarray(np.resize(x_arr, (n, h, w, channels)), np.float32), ctx.device)
    gs = m.batch_from_numpy(g_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    ys, states = kernel.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = gradient.encode_batch(cb, gs, xs, states)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("instance / group normalization encode")
    ref_y, ref_dx, ref_dgamma, ref_dbeta = group_norm_reference(x_arr, g_arr, gamma, beta, groups, eps)
    check_close(m.batch_to_numpy(ys), ref_y, "group normalization forward", tol=1e-3)
    check_close(m.batch_to_numpy(dxs), ref_dx, "group normalization dX", tol=1e-3)
    check_close(np.stack([s.gradient_for_gamma for s in states]), ref_dgamma, "gradient_for_gamma", tol=1e-3)
    check_close(np.stack([s.gradient_for_beta for s in states]), ref_dbeta, "gradient_for_beta", tol=1e-3)


# ---------------------------------------------------------------------------------------------
# cross-channel / spatial / local contrast normalization (forward vs NumPy, gradient vs float64
# finite differences of the same NumPy forward)


def local_normalization_reference(kind, x, k, alpha, beta, delta, p0=1.0, pm=0.0, ps=1.0):
    """Y (H, W, C float64) of MPS's formulas; windows centered on each pixel, zeros off the image."""
    x = np.asarray(x, np.float64)
    if kind == "cross":
        c = x.shape[2]
        sq = np.pad(x * x, ((0, 0), (0, 0), (k >> 1, (k - 1) >> 1)))
        return x * (delta + alpha / k * sum(sq[..., i:i + c] for i in range(k))) ** -beta
    h, w = x.shape[:2]
    xp = np.pad(x, ((k >> 1, (k - 1) >> 1), (k >> 1, (k - 1) >> 1), (0, 0)))
    taps = np.stack([xp[ty:ty + h, tx:tx + w] for ty in range(k) for tx in range(k)])
    if kind == "spatial":
        return x * (delta + alpha / (k * k) * np.sum(taps * taps, axis=0)) ** -beta
    mean = taps.mean(axis=0)
    var = ((taps - mean) ** 2).mean(axis=0)
    return pm + ps * (x - p0 * mean) * (delta + alpha * var) ** -beta


@family("local_normalization")
def local_normalization_ops(r: random.Random, ctx: Context):
    m = ctx.m
    kind = r.choice(["cross", "spatial", "contrast"])
    size = r.randint(1, 4)
    ctx.start_call()
    if kind == "cross":
        names = ("CNNCrossChannelNormalization", "CNNCrossChannelNormalizationGradient")
        args = (ctx.bad(r, size, [0, -1, 2**63, 2**64, "3", None, 1.5], what="kernel_size"),)
    else:
        names = ("CNNSpatialNormalization", "CNNSpatialNormalizationGradient") if kind == "spatial" else \
            ("CNNLocalContrastNormalization", "CNNLocalContrastNormalizationGradient")
        args = (ctx.bad(r, size, [0, -2, 2**63, "3", None], what="kernel_width"),
                ctx.bad(r, size, [size + 1, 0, 2**64], what="kernel_height (must equal kernel_width)"))
    forward = getattr(m, names[0])(ctx.device, *args)
    gradient = getattr(m, names[1])(ctx.device, *args)
    ctx.expect_rejected_if_invalid(names[0])
    params = dict(alpha=r.choice([0.0, 0.5, 1.0]), beta=r.choice([0.5, 0.75, 2.0]), delta=r.choice([0.5, 1.0, 2.0]))
    if kind == "contrast":
        params.update(p0=r.choice([0.0, 1.0, 0.5]), pm=r.choice([0.0, 0.25]), ps=r.choice([1.0, 2.0]))
    ctx.start_call()
    for k in (forward, gradient):
        for name, value in params.items():
            setattr(k, name, value)
    forward.alpha = ctx.bad(r, params["alpha"], [-1.0, float("nan"), "x", None], what="alpha")
    forward.delta = ctx.bad(r, params["delta"], [0.0, -0.5, float("inf")], what="delta")
    forward.edge_mode = ctx.bad(r, m.ImageEdgeMode.ZERO, [m.ImageEdgeMode.CLAMP], what="edge_mode")
    h, w, c = r.randint(1, 3), r.randint(1, 3), r.randint(1, 5)
    x_arr = random_array(r, h, w, c)
    g_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
    dx = gradient.encode(cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"{names[0]} encode")
    f = lambda v: local_normalization_reference(kind, v, size, **params)
    check_close(y.to_numpy()[0], f(x_arr), f"{names[0]} forward")
    xd, hstep = x_arr.astype(np.float64), 1e-6
    ref_dx = np.zeros_like(xd)
    for i in np.ndindex(xd.shape):
        keep = xd[i]
        xd[i] = keep + hstep
        up = np.sum(f(xd) * g_arr)
        xd[i] = keep - hstep
        ref_dx[i] = (up - np.sum(f(xd) * g_arr)) / (2 * hstep)
        xd[i] = keep
    check_close(dx.to_numpy()[0], ref_dx, f"{names[1]} (finite differences)", tol=1e-3)


# ---------------------------------------------------------------------------------------------
# graph: a random chain of neuron nodes (optionally a residual addition), its inference result and
# the input gradient of its training graph (MSE, reduction SUM) against NumPy; misused sources


GRAPH_NEURONS = {
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(np.float64)),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
}


@family("graph")
def graph_ops(r: random.Random, ctx: Context):
    m = ctx.m
    names = [r.choice(sorted(GRAPH_NEURONS)) for _ in range(r.randint(1, 4))]
    residual = r.random() < 0.5
    node_class = {"relu": m.CNNNeuronReLUNode, "tanh": m.CNNNeuronTanHNode, "sigmoid": m.CNNNeuronSigmoidNode}
    source = m.NNImageNode()
    image = source
    for name in names:
        image = node_class[name](image).result_image
    if residual:
        image = m.NNAdditionNode(image, source).result_image
    n, h, w, c = r.randint(1, 3), r.randint(1, 5), r.randint(1, 5), r.randint(1, 9)
    x = random_array(r, n, h, w, c)
    xs = [m.Image.from_numpy(x[i:i + 1], ctx.device) for i in range(n)]
    # Sometimes a pad node (ZERO / CLAMP edges), as index maps into the unpadded image (-1: zero).
    hp, wp = h, w
    padded = r.random() < 0.3
    if padded:
        mode = r.choice(["ZERO", "CLAMP"])
        bx, by, ax, ay = (r.randint(0, 2) for _ in range(4))
        image = m.NNPadNode(image, (bx, by, 0), (ax, ay, 0), getattr(m.ImageEdgeMode, mode)).result_image
        kw = {"mode": "edge"} if mode == "CLAMP" else {"mode": "constant", "constant_values": -1}
        iy, ix = np.pad(np.arange(h), (by, ay), **kw), np.pad(np.arange(w), (bx, ax), **kw)
        hp, wp = len(iy), len(ix)
    # Sometimes a fully connected head (weights fixed: training style NONE).
    fc_out = r.randint(1, 6) if r.random() < 0.4 else 0
    if fc_out:
        wf, bf = random_array(r, fc_out, hp, wp, c) * 0.3, random_array(r, fc_out)
        fc = m.CNNFullyConnectedNode(image, m.CNNConvolutionWeightsDataSource(
            m.CNNConvolutionDescriptor(wp, hp, c, fc_out), wf, bf))
        fc.training_style = m.NNTrainingStyle.UPDATE_DEVICE_NONE
        image = fc.result_image
    t = random_array(r, n, 1, 1, fc_out) if fc_out else random_array(r, n, hp, wp, c)

    # forward and dL/dX in float64
    values = [x.astype(np.float64)]
    for name in names:
        values.append(GRAPH_NEURONS[name][0](values[-1]))
    y = values[-1] + (values[0] if residual else 0)
    unpadded = y
    if padded:
        valid = ((iy[:, None] >= 0) & (ix[None, :] >= 0))[None, :, :, None]
        IY, IX = np.broadcast_arrays(np.maximum(iy, 0)[:, None], np.maximum(ix, 0)[None, :])
        y = y[:, IY, IX] * valid
    if fc_out:
        wf64 = wf.astype(np.float64)
        y_fc = np.einsum("nhwc,ohwc->no", y, wf64)[:, None, None, :] + bf
        g = np.einsum("no,ohwc->nhwc", 2 * (y_fc - t)[:, 0, 0, :], wf64)
        y = y_fc
    else:
        g = 2 * (y - t)
    if padded:  # the pad gradient: each copy's gradient summed back into its source pixel
        gp, g = g * valid, np.zeros_like(unpadded)
        np.add.at(g, (slice(None), IY, IX), gp)
    dx = g.copy()
    for name, v in zip(reversed(names), reversed(values[:-1])):
        dx = dx * GRAPH_NEURONS[name][1](v)
    if residual:
        dx = dx + g

    inference = m.NNGraph(ctx.device, image)
    ctx.start_call()
    sources = ctx.bad(r, [xs], [[xs, xs], [], [[]], [xs[:1] + [None]]], what="source_images")
    cb = ctx.queue.command_buffer()
    out = inference.encode_batch(cb, sources)
    ctx.expect_rejected_if_invalid("NNGraph.encode_batch")
    run(ctx, cb)
    check_close(m.batch_to_numpy(out), y, "graph inference")

    loss = m.CNNLossNode(image, m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM))
    training = m.NNGraph(ctx.device, loss.training_graph()[0].result_image)
    labels = [m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(t[i])) for i in range(n)]
    ctx.start_call()
    label_batches = ctx.bad(r, [labels], [[], [labels[:-1] + [None]] if n > 1 else [[None]], [labels, labels]],
                            what="source_states")
    cb = ctx.queue.command_buffer()
    grads = training.encode_batch(cb, [xs], label_batches)
    ctx.expect_rejected_if_invalid("NNGraph.encode_batch (training)")
    run(ctx, cb)
    check_close(m.batch_to_numpy(grads), dx, "graph training dX", tol=1e-3)


# ---------------------------------------------------------------------------------------------
# the worker: runs cases [first, first + count) of a seed and reports each outcome as a JSON line

ALLOWED_NAMES = ("ValueError", "TypeError", "IndexError", "MemoryError")


def run_case(seed: int, index: int, m, devices) -> dict:
    r = random.Random(f"{seed}:{index}")
    device = m.Device(r.choice(devices))
    ctx = Context(m=m, device=device, queue=m.CommandQueue(device))
    names = sorted(FAMILIES)
    steps = [r.choice(names) for _ in range(r.randint(1, 4))]
    outcome = {"case": index, "calls": 0, "rejected": 0, "failure": None, "steps": steps}
    for step in steps:
        outcome["calls"] += 1
        try:
            FAMILIES[step](r, ctx)
        except (InvalidAccepted, WrongResult) as e:
            outcome["failure"] = f"{type(e).__name__} in {step}: {e}"
            return outcome
        except (ValueError, TypeError, IndexError, MemoryError, m.CommandBufferError):
            outcome["rejected"] += 1
        except BaseException as e:  # noqa: BLE001 - anything else is a wrong exception type
            outcome["failure"] = f"wrong exception type in {step}: {type(e).__name__}: {e}\n" + traceback.format_exc()
            return outcome
    return outcome


def worker(seed: int, first: int, count: int, devices) -> None:
    import warnings

    import mpsgrad as m
    warnings.simplefilter("ignore")
    for index in range(first, first + count):
        print(json.dumps({"start": index}), flush=True)
        print(json.dumps(run_case(seed, index, m, devices)), flush=True)


# ---------------------------------------------------------------------------------------------
# the driver: chunks of cases in parallel worker subprocesses


@dataclass
class Summary:
    cases: int = 0
    calls: int = 0
    rejected: int = 0
    crashes: int = 0
    hangs: int = 0
    wrong_exception_types: int = 0
    invalid_accepted: int = 0
    wrong_results: int = 0
    failures: List[str] = field(default_factory=list)


def _run_chunk(seed, first, count, devices, timeout, summary: Summary):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed), "--first", str(first),
           "--cases", str(count), "--devices", ",".join(devices)]
    started = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        lines, rc, hung = proc.stdout.splitlines(), proc.returncode, False
        stderr = proc.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines, rc, hung, stderr = out.splitlines(), None, True, ""
    done = set()
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "start" in record:
            started = record["start"]
            continue
        done.add(record["case"])
        summary.cases += 1
        summary.calls += record["calls"]
        summary.rejected += record["rejected"]
        failure = record["failure"]
        if failure:
            if failure.startswith("wrong exception"):
                summary.wrong_exception_types += 1
            elif failure.startswith("InvalidAccepted"):
                summary.invalid_accepted += 1
            else:
                summary.wrong_results += 1
            summary.failures.append(f"seed {seed} case {record['case']} {record['steps']}: {failure}")
    if hung or rc != 0:
        where = started if started is not None and started not in done else first
        kind = "hang" if hung else f"crash (exit {rc})"
        if hung:
            summary.hangs += 1
        else:
            summary.crashes += 1
        summary.failures.append(f"seed {seed} case {where}: {kind}\n{stderr[-3000:]}")
        # the cases after the one that died still run
        rest = first + count - (where + 1)
        if rest > 0:
            _run_chunk(seed, where + 1, rest, devices, timeout, summary)


def fuzz(seed: int, cases: int, first: int = 0, jobs: int = 2, chunk: int = 250, devices=("cpu",),
         timeout: float = 300.0) -> Summary:
    from concurrent.futures import ThreadPoolExecutor

    summaries = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for start in range(first, first + cases, chunk):
            s = Summary()
            summaries.append(s)
            futures.append(pool.submit(_run_chunk, seed, start, min(chunk, first + cases - start), list(devices),
                                       timeout, s))
        for f in futures:
            f.result()
    total = Summary()
    for s in summaries:
        for name in ("cases", "calls", "rejected", "crashes", "hangs", "wrong_exception_types", "invalid_accepted",
                     "wrong_results"):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        total.failures += s.failures
    return total


def report(summary: Summary, seed: int, seconds: float) -> str:
    return (f"mpsgrad API fuzz: seed {seed}, {summary.cases} cases, {summary.calls} calls "
            f"({summary.rejected} rejected with an allowed exception) in {seconds:.0f} s; "
            f"crashes {summary.crashes}, hangs {summary.hangs}, wrong exception types "
            f"{summary.wrong_exception_types}, invalid calls accepted {summary.invalid_accepted}, "
            f"wrong results {summary.wrong_results}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed (printed)")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0, help="index of the first case (to reproduce one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--devices", default=None, help="comma-separated devices (default: all available)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    if args.devices:
        devices = args.devices.split(",")
    else:
        import mpsgrad as m
        devices = list(m.Device.available())
    if args.worker:
        worker(seed, args.first, args.cases, devices)
        return 0
    print(f"mpsgrad API fuzz: seed {seed} (reproduce with --seed {seed}), devices {devices}", flush=True)
    start = time.monotonic()
    summary = fuzz(seed, args.cases, args.first, args.jobs, devices=devices)
    print(report(summary, seed, time.monotonic() - start))
    for failure in summary.failures[:20]:
        print("FAILURE:", failure)
    return 1 if summary.failures else 0



# ---------------------------------------------------------------------------------------------
# reshape and pad (forward and gradient): NumPy reshape / np.pad are the oracle

PAD_MODES = {"ZERO": "constant", "CLAMP": "edge", "MIRROR": "reflect", "MIRROR_WITH_EDGE": "symmetric"}


@family("reshape_pad")
def reshape_pad_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 7)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    if r.random() < 0.5:
        # Reshape to a random factorization of the element count (sometimes a wrong one).
        n = h * w * c
        c2 = r.choice([d for d in range(1, n + 1) if n % d == 0])
        w2 = r.choice([d for d in range(1, n // c2 + 1) if (n // c2) % d == 0])
        h2 = n // (c2 * w2)
        ctx.start_call()
        bad_c = ctx.bad(r, c2, [c2 + 1, 0, -1, 2**40, "3"], what="reshaped_feature_channels")
        cb = ctx.queue.command_buffer()
        y, state = m.NNReshape(ctx.device).encode(cb, x, destination_state_is_temporary=r.random() < 0.5,
                                                 reshaped_width=w2, reshaped_height=h2,
                                                 reshaped_feature_channels=bad_c)
        ctx.expect_rejected_if_invalid("NNReshape encode")
        g_arr = random_array(r, h2, w2, c2)
        dx = m.NNReshapeGradient(ctx.device).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
        run(ctx, cb)
        check_close(y.to_numpy()[0], x_arr.reshape(h2, w2, c2), "reshape")
        check_close(dx.to_numpy()[0], g_arr.reshape(h, w, c), "reshape gradient")
        return
    mode = r.choice(sorted(PAD_MODES))
    before = (r.randint(0, 6), r.randint(0, 6), r.randint(0, 3))
    after = (r.randint(0, 6), r.randint(0, 6), r.randint(0, 3))
    ctx.start_call()
    pad = m.NNPad(ctx.device, ctx.bad(r, before, [(-1, 0, 0), (0, 0), "x", (2**40, 0, 0)], what="padding_size_before"),
                  after)
    ctx.expect_rejected_if_invalid("NNPad")
    pad.edge_mode = getattr(m.ImageEdgeMode, mode)
    cb = ctx.queue.command_buffer()
    y, state = pad.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
    widths = ((before[1], after[1]), (before[0], after[0]), (before[2], after[2]))
    index = [np.pad(np.arange(n), wd, mode=PAD_MODES[mode]) if mode != "ZERO"
             else np.pad(np.arange(n), wd, constant_values=-1) for n, wd in zip(x_arr.shape, widths)]
    g_arr = random_array(r, *[len(i) for i in index])
    dx = m.NNPadGradient(ctx.device).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
    run(ctx, cb)
    expected = np.pad(x_arr, widths, mode=PAD_MODES[mode])
    check_close(y.to_numpy()[0], expected, f"pad {mode}")
    dx_ref = np.zeros(x_arr.shape, np.float64)  # every copy summed back
    iy, ix, ic = index
    for a, sy in enumerate(iy):
        for b, sx in enumerate(ix):
            for k, sc in enumerate(ic):
                if sy >= 0 and sx >= 0 and sc >= 0:
                    dx_ref[sy, sx, sc] += g_arr[a, b, k]
    check_close(dx.to_numpy()[0], dx_ref, f"pad {mode} gradient")


@family("gram_matrix_spatial_mean")
def gram_and_spatial_mean_ops(r: random.Random, ctx: Context):
    """The Gram matrix (alpha * X^T X per image) or the spatial mean (over a random clip_rect_source),
    forward and gradient, against NumPy; sometimes with an invalid alpha or region."""
    m = ctx.m
    h, w, c = r.randint(1, 6), r.randint(1, 6), r.randint(1, 9)
    x_arr = random_array(r, h, w, c)
    x = m.Image.from_numpy(x_arr, ctx.device)
    cb = ctx.queue.command_buffer()
    if r.random() < 0.5:
        alpha = r.choice([1.0, 0.5, -3.0, 1.0 / (h * w)])
        ctx.start_call()
        fwd = m.NNGramMatrixCalculation(ctx.device, ctx.bad(r, alpha, ["x", [1.0], object(), 2j], what="alpha"))
        ctx.expect_rejected_if_invalid("NNGramMatrixCalculation")
        y, state = fwd.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
        g_arr = random_array(r, 1, c, c)
        dx = m.NNGramMatrixCalculationGradient(ctx.device, alpha).encode(
            cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
        run(ctx, cb)
        flat = x_arr.reshape(h * w, c).astype(np.float64)
        gram = alpha * flat.T @ flat
        check_close(y.to_numpy()[0, 0], gram, "Gram matrix")
        g2 = g_arr[0].astype(np.float64)
        check_close(dx.to_numpy()[0], (alpha * flat @ (g2 + g2.T)).reshape(h, w, c), "Gram matrix gradient")
        return
    x0, y0 = r.randint(-2, w), r.randint(-2, h)
    rw, rh = r.randint(0, 7), r.randint(1, 7)
    fwd = m.NNReductionSpatialMean(ctx.device)
    fwd.clip_rect_source = m.Region((x0, y0, 0), (rw, rh, 1))
    cx0, cy0 = max(x0, 0), max(y0, 0)
    cw, ch = min(x0 + rw, w) - cx0, min(y0 + rh, h) - cy0
    ctx.start_call()
    if cw <= 0 or ch <= 0:
        ctx.invalid.append("clip_rect_source selects no pixel")
    y, state = fwd.encode(cb, x, destination_state_is_temporary=r.random() < 0.5)
    ctx.expect_rejected_if_invalid("NNReductionSpatialMean encode")
    g_arr = random_array(r, 1, 1, c)
    dx = m.NNReductionSpatialMeanGradient(ctx.device).encode(cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
    run(ctx, cb)
    region = x_arr[cy0:cy0 + ch, cx0:cx0 + cw].astype(np.float64)
    check_close(y.to_numpy()[0, 0, 0], region.mean(axis=(0, 1)), "spatial mean")
    dx_ref = np.zeros(x_arr.shape, np.float64)
    dx_ref[cy0:cy0 + ch, cx0:cx0 + cw] = g_arr[0, 0] / (cw * ch)
    check_close(dx.to_numpy()[0], dx_ref, "spatial mean gradient")


# The guard comes last: worker subprocesses run this file as a script, so every family above must be
# registered before main() runs.
if __name__ == "__main__":
    sys.exit(main())
