"""Fuzz families: optimizers, losses (incl. the split loss), dropout, batch / instance / group and
local normalization.
"""
from __future__ import annotations

import random

import numpy as np

from fuzz_support import Context, WrongResult, check_close, family, random_array, run


# ---------------------------------------------------------------------------------------------
# optimizers: one update of a vector (plain SGD and Adam's first step have NumPy references)


@family("optimizers")
def optimizer_ops(r: random.Random, ctx: Context):
    m = ctx.m
    n = r.randint(1, 40)
    g_arr, w_arr = random_array(r, n), random_array(r, n)
    lr = r.choice([0.0, 0.01, 0.5, -0.1])  # any finite rate is valid, as in MPS (a negative one ascends)
    ctx.start_call()
    lr_arg = ctx.bad(r, lr, [float("-inf"), float("nan"), float("inf"), "0.1"], what="learning_rate")
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


def narrower_labels(h: int, w: int, c: int):
    """Label shapes a loss must refuse for an h x w x c source: another width or height, or fewer
    channels (wider ones are valid: docs/losses_and_optimizers.md)."""
    return [(h, w + 1, c), (h + 1, w, c)] + ([(h, w, c - 1)] if c > 1 else [])


def widened_labels(r: random.Random, ctx: Context, t: np.ndarray) -> np.ndarray:
    """t, or t with 1-3 more channels of noise (as Apple's sample rounds labels up to a multiple of
    4): a loss reads only the source's channels, so the result must be t's either way."""
    if not ctx.reach(r, "loss.wide_labels", 0.3):
        return t
    return np.concatenate([t, random_array(r, t.shape[0], t.shape[1], r.randint(1, 3))], axis=2)


@family("loss")
def loss_ops(r: random.Random, ctx: Context):
    m = ctx.m
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 6)
    y_arr, t_arr = random_array(r, h, w, c), random_array(r, h, w, c)
    ctx.start_call()
    d = m.CNNLossDescriptor(m.CNNLossType.MEAN_SQUARED_ERROR, m.CNNReductionType.SUM)
    d.label_smoothing = ctx.bad(r, 0.0, [-0.5, 1.5, float("nan")], what="label_smoothing")
    d.number_of_classes = ctx.bad(r, 1, [0, -3, 2**30], what="number_of_classes")
    t_shape = ctx.bad(r, (h, w, c), narrower_labels(h, w, c), what="labels shape")
    loss = m.CNNLoss(ctx.device, d)
    labels = m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(
        widened_labels(r, ctx, t_arr) if t_shape == (h, w, c) else random_array(r, *t_shape)))
    cb = ctx.queue.command_buffer()
    grad = loss.encode(cb, m.Image.from_numpy(y_arr, ctx.device), labels)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("CNNLoss encode")
    diff = y_arr.astype(np.float64) - t_arr
    check_close(grad.to_numpy()[0], 2 * diff, "MSE gradient")
    check_close(labels.loss_image.to_numpy().reshape(()), (diff * diff).sum(), "MSE loss value")


@family("yolo_loss")
def yolo_loss_ops(r: random.Random, ctx: Context):
    """CNNYOLOLoss on labels without objects: every anchor pays scale_no_object * SigmoidCE(C, 0)
    (every IOU is 0 < max_iou_for_object_absence); the gradient is scale_no_object * sigmoid(C)
    on the C channels and 0 elsewhere."""
    m = ctx.m
    h, w, anchors, classes = r.randint(1, 5), r.randint(1, 5), r.randint(1, 3), r.randint(1, 3)
    c = anchors * (5 + classes)
    y_arr = random_array(r, h, w, c)
    ctx.start_call()
    T, R = m.CNNLossType, m.CNNReductionType
    boxes = ctx.bad(r, anchors, [anchors + 1], what="anchor data length")
    d = m.CNNYOLOLossDescriptor(T.MEAN_SQUARED_ERROR, T.MEAN_SQUARED_ERROR, T.SIGMOID_CROSS_ENTROPY,
                                T.SOFTMAX_CROSS_ENTROPY, R.SUM, np.ones(2 * boxes, np.float32).tobytes(), anchors)
    d.classes_loss_descriptor.number_of_classes = classes
    d.scale_no_object = ctx.bad(r, 0.5, [-1.0, float("nan")], what="scale_no_object")
    d.max_iou_for_object_absence = ctx.bad(r, 0.3, [1.5, 0.9], what="max_iou_for_object_absence")
    src_c = ctx.bad(r, c, [c + 1], what="source channels")
    loss = m.CNNYOLOLoss(ctx.device, d)
    labels = m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(np.zeros((h, w, src_c), np.float32)))
    source = y_arr if src_c == c else random_array(r, h, w, src_c)
    cb = ctx.queue.command_buffer()
    grad = loss.encode(cb, m.Image.from_numpy(source, ctx.device), labels)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid("CNNYOLOLoss encode")
    conf = y_arr.reshape(h, w, anchors, 5 + classes)[..., 4].astype(np.float64)
    expected = np.zeros((h, w, anchors, 5 + classes))
    expected[..., 4] = 0.5 / (1.0 + np.exp(-conf))
    check_close(grad.to_numpy()[0], expected.reshape(h, w, c), "YOLO no-object gradient")
    value = 0.5 * (np.maximum(conf, 0) + np.log1p(np.exp(-np.abs(conf)))).sum()
    check_close(labels.loss_image.to_numpy().reshape(()), value, "YOLO no-object loss")


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
    t_shape = ctx.bad(r, (h, w, c), narrower_labels(h, w, c), what="labels shape")
    g_shape = ctx.bad(r, (1, 1, 1), [(h, w, c)] if (h, w, c) != (1, 1, 1) else [(1, 1, 2)],
                      what="source gradient shape")
    ys = [m.Image.from_numpy(y_arr, ctx.device)]
    ts = [m.Image.from_numpy(widened_labels(r, ctx, t_arr) if t_shape == (h, w, c) else random_array(r, *t_shape),
                             ctx.device)]
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
