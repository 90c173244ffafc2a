"""The input checks the gradient families share (core/kernel.cpp: CNNGradientKernel::
checkSourceGradientChannels and checkSourceImageChannels, and nonEmptyClip, which the unary,
binary and multiary forward kernels use as well).

Each family gets an incoming gradient with fewer feature channels than its forward pass wrote,
a source image with fewer channels than the forward pass read, and a clip rectangle beside its
destination; each must raise a ValueError naming the parameter and the counts, and encode
nothing (the command buffer then still commits and completes).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import mpsgrad as m

RELU = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
OUTSIDE = ((100, 100, 0), (4, 4, 1))  # a clip rectangle beside every destination here

# name: (forward kernel, gradient kernel, what the gradient's source image must be, the check the
# gradient makes on its source image's channels: the "forward pass <verb>" of the message, or
# None when the gradient does not read that image or checks its whole shape first).
FAMILIES = {
    "neuron": (lambda d: m.CNNNeuron(d, RELU), lambda d: m.CNNNeuronGradient(d, RELU), "x", None),
    "pooling": (lambda d: m.CNNPoolingMax(d, 2, 2, 2, 2), lambda d: m.CNNPoolingMaxGradient(d, 2, 2, 2, 2), "x",
                "read"),
    "cross-channel": (lambda d: m.CNNCrossChannelNormalization(d, 3),
                      lambda d: m.CNNCrossChannelNormalizationGradient(d, 3), "x", "read"),
    "upsampling": (lambda d: m.CNNUpsamplingNearest(d, 2, 2), lambda d: m.CNNUpsamplingNearestGradient(d, 2, 2), "x",
                   None),
    "dropout": (lambda d: m.CNNDropout(d, 0.5, 3), lambda d: m.CNNDropoutGradient(d, 0.5, 3), "x", None),
    "softmax": (lambda d: m.CNNSoftMax(d), lambda d: m.CNNSoftMaxGradient(d), "y", None),
    "reshape": (lambda d: m.NNReshape(d), lambda d: m.NNReshapeGradient(d), "x", None),
    "pad": (lambda d: m.NNPad(d, (1, 1, 0), (1, 2, 0)), lambda d: m.NNPadGradient(d), "x", None),
}
# The families whose gradient writes through clip_rect (reshape and pad write the whole source).
CLIPPED = ["neuron", "pooling", "cross-channel", "upsampling", "dropout", "softmax"]


def _image(device, h, w, c):
    return m.Image.from_numpy(np.ones((h, w, c), np.float32), device)


def _forward(device, queue, name):
    """The forward pass over an 8x6x4 image: (x, y, state)."""
    forward = FAMILIES[name][0](device)
    forward.destination_image_allocator = m.ImageAllocator.persistent()
    x = _image(device, 6, 8, 4)
    cb = queue.command_buffer()
    ys, states = forward.encode_batch(cb, [x], destination_state_is_temporary=False)
    cb.commit()
    cb.wait_until_completed()
    return x, ys[0], states[0]


def _encode_must_fail(queue, kernel, message, *args):
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match=message):
        kernel.encode(cb, *args)
    cb.commit()  # nothing was encoded: the buffer still runs to completion
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED


@pytest.mark.parametrize("name", list(FAMILIES))
def test_source_gradient_with_too_few_channels(device, queue, name):
    x, y, state = _forward(device, queue, name)
    source = x if FAMILIES[name][2] == "x" else y
    g = _image(device, y.height, y.width, 2)
    _encode_must_fail(queue, FAMILIES[name][1](device),
                      re.escape("source_gradient: provides 2 feature channel(s) at primary_source_feature_channel_"
                                "offset 0 but the forward pass wrote 4"), g, source, state)


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f[3]])
def test_source_image_with_too_few_channels(device, queue, name):
    x, y, state = _forward(device, queue, name)
    g = _image(device, y.height, y.width, 4)
    _encode_must_fail(queue, FAMILIES[name][1](device),
                      re.escape("source_image: provides 2 feature channel(s) at secondary_source_feature_channel_"
                                f"offset 0 but the forward pass {FAMILIES[name][3]} 4"),
                      g, _image(device, x.height, x.width, 2), state)


@pytest.mark.parametrize("name", CLIPPED)
def test_gradient_clip_rect_beside_the_destination(device, queue, name):
    x, y, state = _forward(device, queue, name)
    gradient = FAMILIES[name][1](device)
    gradient.clip_rect = OUTSIDE
    source = x if FAMILIES[name][2] == "x" else y
    _encode_must_fail(queue, gradient, re.escape("clip_rect: selects no pixel of the 8x6 destination_gradient"),
                      _image(device, y.height, y.width, 4), source, state, _image(device, 6, 8, 4))


@pytest.mark.parametrize("kind", ["unary", "binary", "multiary"])
def test_forward_clip_rect_beside_the_destination(device, queue, kind):
    sources = {"unary": (m.CNNNeuron(device, RELU), [_image(device, 6, 8, 4)], 4),
               "binary": (m.CNNAdd(device), [_image(device, 6, 8, 4), _image(device, 6, 8, 4)], 4),
               "multiary": (m.CNNConcatenation(device, 2), [[_image(device, 6, 8, 4), _image(device, 6, 8, 4)]], 8)}
    kernel, inputs, channels = sources[kind]
    kernel.clip_rect = OUTSIDE
    name = "destination_image" if kind == "binary" else "destination image"
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match=re.escape(f"clip_rect: selects no pixel of the 8x6 {name}")):
        kernel.encode(cb, *inputs, destination_image=_image(device, 6, 8, channels))
    cb.commit()
    cb.wait_until_completed()
