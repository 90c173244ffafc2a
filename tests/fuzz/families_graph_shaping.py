"""Fuzz families: the graph API, reshape / pad, concatenation, Gram matrix and spatial mean.
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import Context, check_close, family, random_array, run


# ---------------------------------------------------------------------------------------------
# graph: a random chain of neuron nodes (optionally a residual addition, a pad node, a fully connected,
# spatial-mean or Gram-matrix head), its inference result and
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
    # Otherwise sometimes a reduction head: the spatial mean or a Gram matrix (alpha random).
    head = r.choice(["mean", "gram", None, None]) if not fc_out else None
    alpha = r.uniform(0.1, 2.0)
    if head == "mean":
        image = m.NNReductionSpatialMeanNode(image).result_image
    elif head == "gram":
        image = m.NNGramMatrixCalculationNode(image, alpha=alpha).result_image
    if fc_out:
        t = random_array(r, n, 1, 1, fc_out)
    elif head == "mean":
        t = random_array(r, n, 1, 1, c)
    elif head == "gram":
        t = random_array(r, n, 1, c, c)
    else:
        t = random_array(r, n, hp, wp, c)

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
    elif head == "mean":
        y_mean = y.mean(axis=(1, 2), keepdims=True)
        g = np.broadcast_to(2 * (y_mean - t) / (hp * wp), y.shape).copy()
        y = y_mean
    elif head == "gram":
        flat = y.reshape(n, hp * wp, c)
        gram = alpha * np.einsum("npf,npc->nfc", flat, flat)
        gr = 2 * (gram - t[:, 0])  # dL/dG, (n, f, c)
        g = (alpha * np.einsum("npc,nfc->npf", flat, gr + gr.transpose(0, 2, 1))).reshape(y.shape)
        y = gram[:, None]
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

    # Both intermediate formats: FLOAT16 (the default) rounds every intermediate to 11 bits, so its
    # tolerance is the suite's half tolerance (8e-3, 16 half ulps; docs/float16.md).
    # Half's range ends at 65504: a case whose forward or backward values come near it would
    # overflow its FLOAT16 intermediates, so it runs FLOAT32 (the draw is kept for the seeds).
    largest = max(float(np.abs(a).max()) for a in [*values, y, g, dx] + ([gr] if head == "gram" and not fc_out else []))
    half = r.random() < 0.5 and largest < 1e4
    fmt = m.ImageFeatureChannelFormat.FLOAT16 if half else m.ImageFeatureChannelFormat.FLOAT32
    inference = m.NNGraph(ctx.device, image)
    inference.format = fmt
    ctx.start_call()
    sources = ctx.bad(r, [xs], [[xs, xs], [], [[]], [xs[:1] + [None]]], what="source_images")
    cb = ctx.queue.command_buffer()
    out = inference.encode_batch(cb, sources)
    ctx.expect_rejected_if_invalid("NNGraph.encode_batch")
    run(ctx, cb)
    check_close(m.batch_to_numpy(out), y, "graph inference", tol=8e-3 if half else 1e-4)

    loss = m.CNNLossNode(image, m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM))
    training = m.NNGraph(ctx.device, loss.training_graph()[0].result_image)
    training.format = fmt
    labels = [m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(t[i])) for i in range(n)]
    ctx.start_call()
    label_batches = ctx.bad(r, [labels], [[], [labels[:-1] + [None]] if n > 1 else [[None]], [labels, labels]],
                            what="source_states")
    cb = ctx.queue.command_buffer()
    grads = training.encode_batch(cb, [xs], label_batches)
    ctx.expect_rejected_if_invalid("NNGraph.encode_batch (training)")
    run(ctx, cb)
    check_close(m.batch_to_numpy(grads), dx, "graph training dX", tol=1.6e-2 if half else 1e-3)



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


@family("concatenation")
def concatenation_ops(r: random.Random, ctx: Context):
    """CNNConcatenation of 1 to 4 random images (channel counts not multiples of 4 included) and one
    source's CNNConcatenationGradient against NumPy; sometimes a source of another size or a bad index."""
    m = ctx.m
    h, w = r.randint(1, 5), r.randint(1, 5)
    channels = [r.randint(1, 9) for _ in range(r.randint(1, 4))]
    arrays = [random_array(r, h, w, c) for c in channels]
    ctx.start_call()
    kernel = m.CNNConcatenation(ctx.device, ctx.bad(r, len(channels), [0, -1, "2", 2**40], what="source_count"))
    ctx.expect_rejected_if_invalid("CNNConcatenation")
    images = [m.Image.from_numpy(a, ctx.device) for a in arrays]
    if len(channels) > 1 and r.random() < 0.1:
        images[-1] = m.Image.from_numpy(random_array(r, h + 1, w, channels[-1]), ctx.device)
        ctx.invalid.append("a source of another size")
    index = r.randrange(len(channels))
    # Sometimes per-source offsets with ZERO or CLAMP edges (the CLAMP gradient sums repeated reads).
    no_shift = (0, 0, False)
    shifts = [no_shift] * len(channels)
    if r.random() < 0.3 and not ctx.invalid:
        shifts = [(r.randint(-2, 2), r.randint(-2, 2), r.random() < 0.5) for _ in channels]
        for i, (ox, oy, clamp) in enumerate(shifts):
            kernel.set_offset((ox, oy, 0), i)
            kernel.set_edge_mode(m.ImageEdgeMode.CLAMP if clamp else m.ImageEdgeMode.ZERO, i)
    cb = ctx.queue.command_buffer()
    starts = m.CNNConcatenation.range_starts(channels)
    total = starts[-1] + channels[-1]
    if all(shift == no_shift for shift in shifts):
        y, state = kernel.encode(cb, images, destination_state_is_temporary=r.random() < 0.5)
    else:  # the returning encode would reset the offsets through the padding policy
        y = m.Image.from_numpy(np.zeros((h, w, total), np.float32), ctx.device)
        state = kernel.result_state(images)
        kernel.encode(cb, images, state, y)
    ctx.expect_rejected_if_invalid("CNNConcatenation encode")
    g_arr = random_array(r, h, w, total)
    bad_index = ctx.bad(r, index, [len(channels), 4096], what="source_index")
    dx = m.CNNConcatenationGradient(ctx.device, bad_index).encode(cb, m.Image.from_numpy(g_arr, ctx.device),
                                                                  images[index], state)
    ctx.expect_rejected_if_invalid("CNNConcatenationGradient encode")
    run(ctx, cb)
    expected = np.zeros((h, w, total), np.float64)
    expected_dx = np.zeros((h, w, channels[index]), np.float64)
    for i, (a, s0, c, (ox, oy, clamp)) in enumerate(zip(arrays, starts, channels, shifts)):
        # Destination pixel (y, x) reads source pixel (y + oy, x + ox): clamped, or 0 outside.
        ys, xs = np.arange(h)[:, None] + oy, np.arange(w)[None, :] + ox
        inside = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
        keep = np.ones_like(inside) if clamp else inside
        expected[..., s0:s0 + c] = a[ys, xs] * keep[..., None]
        if i == index:
            rows, cols = np.broadcast_to(ys, (h, w)), np.broadcast_to(xs, (h, w))
            np.add.at(expected_dx, (rows[keep], cols[keep]), g_arr[..., s0:s0 + c][keep])
    check_close(y.to_numpy()[0], expected, "concatenation")
    check_close(dx.to_numpy()[0], expected_dx, "concatenation gradient")


# The guard comes last: worker subprocesses run this file as a script, so every family above must be
# registered before main() runs.
