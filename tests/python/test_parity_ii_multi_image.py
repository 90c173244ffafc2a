"""Issue 29 item 3: legacy multi-image images (several images in one Image, selected through
offset.z and clip_rect's z).

A forward kernel reads source images offset.z ... and writes destination images clip_rect.origin.z
... (clip_rect.size.depth of them). Its gradient kernel, configured by
destination_image_descriptor from the gradient state, must address the same images: G from the
images the forward wrote, source_image from the images it read, and dX into the images it read,
leaving every other image of the destination gradient untouched. A gradient kernel that handles
one image per Image (the convolutions: their weight gradient sums over the batch) refuses such
images with a ValueError naming number_of_images instead.

Oracle: the same forward and gradient kernels run as a batch of single images on the selected
images (that path is checked against PyTorch in each family's own tests). Every gradient kernel
class of serialization_cases.FACTORIES whose forward is a unary or binary kernel is run.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import randn, rng, run_completed
from serialization_cases import FACTORIES
from test_parity_ii import H5, W5, _forward_for, _input

IMAGES = 4          # images in each multi-image Image
READ, WRITE = 1, 2  # the forward reads source images 1, 2 and writes destination images 2, 3
COUNT = 2
SENTINEL = 7.25
ALL = 2**64 - 1     # clip_rect size: no clipping along x and y
# Gradient kernels that handle one image per Image: refuse multi-image images.
SINGLE_IMAGE_ONLY = ("CNNConvolutionGradient", "CNNFullyConnectedGradient", "CNNConvolutionTransposeGradient")
# Gradient kernels whose source_image is the forward's output Y (read where the forward wrote).
READS_OUTPUT = ("CNNSoftMaxGradient", "CNNLogSoftMaxGradient")


def _gradient_names():
    names = []
    for name, factory in sorted(FACTORIES.items()):
        kernel = factory(m.Device("cpu"))
        # The concatenation gradient has a test of its own (test_concatenation.py, multi-image
        # sources); the statistics gradient has only encode_batch, whose images are single.
        if isinstance(kernel, m.CNNGradientKernel) and not isinstance(
                kernel, (m.CNNConcatenationGradient, m.CNNBatchNormalizationStatisticsGradient)):
            names.append(name)
    return names


GRADIENTS = _gradient_names()



def _filled(device, shape):
    return m.Image.from_numpy(np.full(shape, SENTINEL, np.float32), device)


def _single_images(device, queue, name, x, x2, g):
    """(Y, dX) of the selected images as a batch of single images."""
    forward, gradient = _forward_for(device, name), FACTORIES[name](device)
    forward.destination_image_allocator = m.ImageAllocator.persistent()
    gradient.destination_image_allocator = m.ImageAllocator.persistent()
    binary = isinstance(forward, m.CNNBinaryKernel)

    def encode(cb):
        xs = m.batch_from_numpy(x[READ:READ + COUNT], device)
        if binary:
            x2s = m.batch_from_numpy(x2[READ:READ + COUNT], device)
            ys, states = forward.encode_batch(cb, xs, x2s, destination_state_is_temporary=False)
            other = x2s if not _is_secondary(gradient) else xs
        elif isinstance(forward, m.CNNBatchNormalization):  # one state for the batch
            state = forward.result_state(xs[0])
            ys, states, other = forward.encode_batch(cb, xs, state), [state] * COUNT, xs
        else:
            ys, states = forward.encode_batch(cb, xs, destination_state_is_temporary=False)
            other = xs
        gs = m.batch_from_numpy(g[WRITE:WRITE + COUNT], device)
        return ys, gradient.encode_batch(cb, gs, ys if name in READS_OUTPUT else other, states)

    ys, dxs = run_completed(queue, encode)
    return m.batch_to_numpy(ys), m.batch_to_numpy(dxs)


def _is_secondary(gradient):
    return getattr(gradient, "is_secondary_source_filter", False)


def _multi_image(device, queue, name, x, x2, g, y_shape, dx_shape):
    """(Y, dX) of the same computation on multi-image Images selected through z."""
    forward, gradient = _forward_for(device, name), FACTORIES[name](device)
    binary = isinstance(forward, m.CNNBinaryKernel)
    xm = m.Image.from_numpy(x, device)
    x2m = m.Image.from_numpy(x2, device) if binary else None
    sources = [xm, x2m] if binary else [xm]
    forward.destination_image_descriptor(sources)  # the padding policy sets the x / y offsets
    if binary:
        for prop in ("primary_offset", "secondary_offset"):
            o = getattr(forward, prop)
            setattr(forward, prop, (o.x, o.y, READ))
    else:
        o = forward.offset
        forward.offset = (o.x, o.y, READ)
    forward.clip_rect = ((0, 0, WRITE), (ALL, ALL, COUNT))
    ym = _filled(device, (IMAGES,) + y_shape)
    gm = m.Image.from_numpy(g, device)
    dxm = _filled(device, (IMAGES,) + dx_shape)

    def encode(cb):
        state = forward.result_state(*sources)
        forward.encode(cb, *sources, state, ym)
        other = (xm if _is_secondary(gradient) else x2m) if binary else ym if name in READS_OUTPUT else xm
        gradient.destination_image_descriptor([gm, other], [state])
        gradient.encode(cb, gm, other, state, dxm)

    run_completed(queue, encode)
    return ym.to_numpy(), dxm.to_numpy()


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradient_kernels_address_the_images_the_forward_addressed(device, queue, check, name):
    forward = _forward_for(device, name)
    if forward is None:
        pytest.skip(f"{name}: no generic forward")
    x = np.concatenate([_input(name, f"mi-{i}", positive=True) for i in range(IMAGES)]).astype(np.float32)
    x2 = np.concatenate([_input(name, f"mi-b{i}", positive=True) for i in range(IMAGES)]).astype(np.float32)
    # G has the forward destination's shape: found from one single-image forward.
    probe = _forward_for(device, name)
    probe.destination_image_allocator = m.ImageAllocator.persistent()
    first = [m.Image.from_numpy(x[:1], device)]
    if isinstance(probe, m.CNNBinaryKernel):
        first.append(m.Image.from_numpy(x2[:1], device))
    y_shape = run_completed(queue, lambda cb: probe.encode(cb, *first)).to_numpy().shape[1:]
    g = randn(rng(f"mi-g-{name}"), IMAGES, *y_shape)
    if name.startswith(SINGLE_IMAGE_ONLY):
        with pytest.raises(ValueError, match="number_of_images"):
            _multi_image(device, queue, name, x, x2, g, tuple(y_shape), x.shape[1:])
        return
    y_ref, dx_ref = _single_images(device, queue, name, x, x2, g)
    dx_shape = dx_ref.shape[1:]
    y, dx = _multi_image(device, queue, name, x, x2, g, tuple(y_shape), tuple(dx_shape))
    check(y[WRITE:WRITE + COUNT], y_ref, f"{name}: forward Y")
    check(dx[READ:READ + COUNT], dx_ref, f"{name}: dX")
    untouched = [i for i in range(IMAGES) if not READ <= i < READ + COUNT]
    assert (dx[untouched] == SENTINEL).all(), f"{name}: dX images {untouched} were written"
