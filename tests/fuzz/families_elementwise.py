"""Fuzz families: core objects (images, buffers, queues), neurons, arithmetic, softmax.
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import (Context, HUGE_INTS, InvalidAccepted, WRONG_TYPES, WrongResult, as_stored, check_close,
                          family, format_tol, image_format, random_array, run, values_of)


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
        fmt = ctx.bad(r, image_format(r, m), [m.ImageFeatureChannelFormat.NONE], p=0.05, what="channel_format")
        image = m.Image(ctx.device, m.ImageDescriptor(w, h, c, n, fmt))
        ctx.expect_rejected_if_invalid("Image")
        data = as_stored(random_array(r, h, w, c), fmt, m)
        index = r.randrange(n)
        ctx.start_call()
        bad_index = ctx.bad(r, index, [n, -1, 2**40, 2**64, "0"], what="image_index")
        image.write_bytes(data, image_index=bad_index)
        ctx.expect_rejected_if_invalid("write_bytes")
        check_close(values_of(image.read_bytes(image_index=index), fmt, m), data, "read_bytes after write_bytes")
        chw = image.read_bytes(m.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH, image_index=index)
        check_close(values_of(chw, fmt, m), np.transpose(data, (2, 0, 1)), "read_bytes CHW")
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
    check_close(values_of(result.to_numpy()[0], fa, m), as_stored(ops[name](a_arr, b_arr), fa, m), f"{name} forward",
                tol=format_tol(fa, m))


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
