"""Small convolution layers (the digits example's and their neighbours) against PyTorch autograd.

These shapes reach the CPU paths chosen by problem size (backend/cpu/convolution.cpp,
docs/performance.md "Small layers"): a one-thread run below about a million multiply-adds, two
or more threads above it with as many pixel blocks as a multiple of the thread count, the weight
gradient summed straight into the state (one chunk) or through per-thread partial sums, and the
im2col rows copied as one run per tap row (channels filling the pixels), per tap (group and
channel-offset slices) or a few floats at a time (one or three input channels), and the strided
data gradient's two forms (products then scatter-add when the layer has no more input than
output channels, per-phase products otherwise). Each case runs on one
and on two threads, as one encode over a contiguous batch (one backend op per gradient) and as a
batch of separately allocated images (one op per image, the weight gradient accumulating).

Oracle: conftest.conv_reference (F.conv2d in float64 under autograd). Bound: the ``check``
fixture's (relative error 1e-4 in float32): the sums hold at most 5*5*32 products (forward, data
gradient) or 32*8*8 pixels (weight gradient) of O(1) values. Each run is repeated to check the
results are bitwise reproducible for a given thread count.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsgrad as m
from conftest import VALID, ConvCase, ConvSpec

SOURCE_CHANNELS_AFTER_SLICE = 4  # when src_off is set


CASES = [
    # the digits example's two layers (one input channel: im2col one float at a time; 16 channels: one run per row)
    ConvCase("digits-1->16", ConvSpec(3, 3, 1, 16, neuron="relu"), 32, (8, 8)),
    ConvCase("digits-16->32", ConvSpec(3, 3, 16, 32), 32, (4, 4)),
    # mid-size: two threads, pixel blocks balanced over them, per-thread partial weight sums
    ConvCase("5x5-32->32", ConvSpec(5, 5, 32, 32), 8, (8, 8)),
    ConvCase("3x3-16->32-12x12-valid", ConvSpec(3, 3, 16, 32, neuron="tanh"), 6, (12, 12), method=VALID),
    # groups and a channel offset: the tap rows are slices of the pixels (one copy per tap)
    ConvCase("g2-3x3-d2", ConvSpec(3, 3, 16, 32, groups=2, dx=2, dy=2), 6, (10, 9)),
    ConvCase("src-off4-3x3", ConvSpec(3, 3, 4, 16), 16, (7, 6), src_off=4),
    # strided (the data gradient's phase path) and a single channel with stride
    ConvCase("1->8-s2", ConvSpec(3, 3, 1, 8, sx=2, sy=2), 12, (9, 8)),
    # clamp edges: the im2col edge path
    ConvCase("clamp-1->16", ConvSpec(3, 3, 1, 16), 32, (8, 8), edge="clamp"),
    ConvCase("clamp-16->32", ConvSpec(5, 5, 16, 32), 8, (6, 6), edge="clamp"),
    # RGB stems: im2col copies three floats per tap (pixels of four); the strided data gradient is
    # products then scatter-add (conv_col2im.cpp), whole images per thread or, with one image on
    # two threads, bands of rows; with a channel offset, VALID padding, dilation, odd sizes
    ConvCase("stem-3->16-7x7-s2", ConvSpec(7, 7, 3, 16, sx=2, sy=2), 2, (23, 21)),
    ConvCase("stem-3->64-7x7-s2-one-image", ConvSpec(7, 7, 3, 64, sx=2, sy=2), 1, (48, 45)),
    ConvCase("stem-off4-3->16-5x5-s2", ConvSpec(5, 5, 3, 16, sx=2, sy=2), 3, (15, 14), src_off=4),
    ConvCase("stem-3->8-5x5-s2-valid", ConvSpec(5, 5, 3, 8, sx=2, sy=2), 2, (13, 11), method=VALID),
    ConvCase("4->8-3x3-s3x2-d2", ConvSpec(3, 3, 4, 8, sx=3, sy=2, dx=2, dy=2), 2, (11, 10)),
    ConvCase("g2-8->16-4x4-s2", ConvSpec(4, 4, 8, 16, groups=2, sx=2, sy=2), 3, (11, 9)),
    ConvCase("clamp-stem-3->16-7x7-s2", ConvSpec(7, 7, 3, 16, sx=2, sy=2), 2, (17, 19), edge="clamp"),
    # more input than output channels: the strided data gradient's per-phase products
    ConvCase("16->8-3x3-s2", ConvSpec(3, 3, 16, 8, sx=2, sy=2), 4, (9, 9)),
]


def _run(device, queue, case, x_arr, e_arr, w, b, contiguous):
    """Forward, then the data gradient (zero edges) and the weight and bias gradients of the batch."""
    spec = case.spec
    conv, grad = case.kernels(device, w, b)
    if case.edge == "clamp":
        grad.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS

    def images(arr):
        return m.batch_from_numpy(arr, device) if contiguous else [m.Image.from_numpy(a, device) for a in arr]

    xs, es = images(x_arr), images(e_arr)
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    dx = None if case.edge == "clamp" else m.batch_to_numpy(dxs)
    return (m.batch_to_numpy(ys), dx, np.array(states[0].gradient_for_weights),
            np.array(states[0].gradient_for_biases))


@pytest.mark.parametrize("contiguous", [True, False], ids=["one-op", "per-image"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_small_layers(device, queue, check, num_threads, case, contiguous):
    spec = case.spec
    x_arr, e_arr, w, b, ref = case.inputs(SOURCE_CHANNELS_AFTER_SLICE)
    (ow, oh), _ = case.geometry()

    y, dx, dw, db = _run(device, queue, case, x_arr, e_arr, w, b, contiguous)
    assert y.shape == (case.n, oh, ow, spec.cout)
    check(y, ref["y"], "forward")
    if dx is not None:
        check(dx[..., case.src_off:case.src_off + spec.cin], ref["dx"], "data gradient")
    check(dw, ref["dw"], "weight gradient")
    check(db, ref["db"], "bias gradient")

    again = _run(device, queue, case, x_arr, e_arr, w, b, contiguous)
    for name, a, b_ in zip(("forward", "data gradient", "weight gradient", "bias gradient"), (y, dx, dw, db), again):
        if a is not None:
            assert np.array_equal(a, b_), f"{name} differs between two identical runs on {num_threads} thread(s)"
