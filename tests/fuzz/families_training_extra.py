"""Fuzz families of the training API beyond the basics: every closed-form loss type with every
reduction (docs/losses_and_optimizers.md's table), RMSProp and optimizer edge cases (NaN gradients,
huge vector lengths), batch normalization on multi-image batches, padding policies (destination
sizes against the documented padding helpers), and graph nodes built with sizes at and beyond their
limits.
"""
from __future__ import annotations

import random

import numpy as np

from families_training import batch_norm_reference
from fuzz_support import (HUGE_INTS, Context, WrongResult, check_close, check_nan_where, family,
                          random_array, run)


# ---------------------------------------------------------------------------------------------
# losses: per-element loss and gradient (weight w, descriptor delta), reductions NONE / SUM / MEAN


def loss_table(kind, y, t, delta):
    """(loss, gradient) per element, docs/losses_and_optimizers.md."""
    d = y - t
    if kind == "MEAN_ABSOLUTE_ERROR":
        return np.abs(d), np.sign(d)
    if kind == "MEAN_SQUARED_ERROR":
        return d * d, 2 * d
    if kind == "HUBER":
        small = np.abs(d) <= delta
        return np.where(small, 0.5 * d * d, delta * (np.abs(d) - 0.5 * delta)), np.where(small, d, delta * np.sign(d))
    if kind == "SIGMOID_CROSS_ENTROPY":
        return np.maximum(y, 0) - y * t + np.log1p(np.exp(-np.abs(y))), 1 / (1 + np.exp(-y)) - t
    tp = 2 * t - 1  # HINGE, labels in {0, 1}
    return np.maximum(1 - tp * y, 0), np.where(1 - tp * y > 0, -tp, 0)


@family("loss_types")
def loss_types_ops(r: random.Random, ctx: Context):
    m = ctx.m
    kind = r.choice(["MEAN_ABSOLUTE_ERROR", "MEAN_SQUARED_ERROR", "HUBER", "SIGMOID_CROSS_ENTROPY", "HINGE"])
    reduction = r.choice(["NONE", "SUM", "MEAN"])
    h, w, c = r.randint(1, 5), r.randint(1, 5), r.randint(1, 6)
    y_arr = random_array(r, h, w, c)
    t_arr = (random_array(r, h, w, c) > 0).astype(np.float32) if kind in ("HINGE", "SIGMOID_CROSS_ENTROPY") \
        else random_array(r, h, w, c)
    d = m.CNNLossDescriptor(getattr(m.CNNLossType, kind), getattr(m.CNNReductionType, reduction))
    weight, delta = r.choice([1.0, 0.5, 2.0]), r.choice([0.5, 1.0, 2.0])
    d.weight = weight
    ctx.start_call()
    d.delta = ctx.bad(r, delta, [0.0, -1.0], p=0.1 if kind == "HUBER" else 0.0, what="delta")
    loss = m.CNNLoss(ctx.device, d)
    labels = m.CNNLossLabels(ctx.device, m.CNNLossDataDescriptor(t_arr),
                             loss_image_size=(w, h, c) if reduction == "NONE" else (1, 1, 1))
    cb = ctx.queue.command_buffer()
    grad = loss.encode(cb, m.Image.from_numpy(y_arr, ctx.device), labels)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"CNNLoss {kind}")
    per, dper = loss_table(kind, y_arr.astype(np.float64), t_arr.astype(np.float64), delta)
    per, dper = weight * per, weight * dper
    count = {"NONE": 1, "SUM": 1, "MEAN": h * w * c}[reduction]
    value = per if reduction == "NONE" else per.sum() / count
    check_close(labels.loss_image.to_numpy().reshape(np.shape(value)), value, f"{kind} {reduction} loss")
    check_close(grad.to_numpy()[0], dper / count, f"{kind} {reduction} gradient")


# ---------------------------------------------------------------------------------------------
# optimizers: RMSProp's first step, NaN gradients propagate, huge lengths are refused


@family("optimizer_edges")
def optimizer_edges_ops(r: random.Random, ctx: Context):
    m = ctx.m
    action = r.choice(["rmsprop", "nan", "huge"])
    ctx.start_call()
    if action == "huge":
        n = r.choice(HUGE_INTS + [-1])
        ctx.rejects(f"Vector(device, {n})", m.Vector, ctx.device, n)
        return
    n = r.randint(1, 50)
    g_arr, w_arr = random_array(r, n), random_array(r, n)
    if action == "nan":
        g_arr[r.randrange(n)] = r.choice([np.nan, np.inf])
    lr, decay = r.choice([0.01, 0.5]), r.choice([0.0, 0.5, 0.9])
    g, w, s = m.Vector.from_numpy(g_arr, ctx.device), m.Vector.from_numpy(w_arr, ctx.device), m.Vector(ctx.device, n)
    cb = ctx.queue.command_buffer()
    m.NNOptimizerRMSProp(ctx.device, lr, decay=decay, epsilon=1e-8).encode(cb, g, w, s, w)
    run(ctx, cb)
    g64 = g_arr.astype(np.float64)
    with np.errstate(all="ignore"):
        ss = (1 - decay) * g64 * g64
        expected = w_arr - lr * g64 / (np.sqrt(ss) + 1e-8)
    check_nan_where(w.to_numpy(), expected, f"RMSProp step ({action})")


# ---------------------------------------------------------------------------------------------
# batch normalization: one Image holding N images and the batch of N single images agree


@family("batch_normalization_batch")
def batch_normalization_batch_ops(r: random.Random, ctx: Context):
    """Training-mode batch normalization of N images given as a batch (a list) or as one Image holding
    N images (number_of_images, into destinations): statistics, Y, the statistics gradient and dX
    against the float64 reference over all N images."""
    m = ctx.m
    if not ctx.reach(r, "batch_normalization.batch", 1.0):
        return
    n, h, w, c = r.randint(2, 3), r.randint(1, 4), r.randint(1, 4), r.randint(1, 6)
    gamma, beta, mean, var = (random_array(r, c) for _ in range(4))
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, mean, np.abs(var) + 0.5)
    kernel, gradient = m.CNNBatchNormalization(ctx.device, source), m.CNNBatchNormalizationGradient(ctx.device)
    x_arr, g_arr = random_array(r, n, h, w, c), random_array(r, n, h, w, c)
    multi = r.random() < 0.5
    ctx.start_call()
    cb = ctx.queue.command_buffer()
    if multi:
        xs, gs = [m.Image.from_numpy(x_arr, ctx.device)], [m.Image.from_numpy(g_arr, ctx.device)]
        ys, dxs = [m.Image(ctx.device, m.ImageDescriptor(w, h, c, n)) for _ in range(2)]
        ys, dxs = [ys], [dxs]
    else:
        xs, gs = m.batch_from_numpy(x_arr, ctx.device), m.batch_from_numpy(g_arr, ctx.device)
        ys, dxs = ([m.Image(ctx.device, m.ImageDescriptor(w, h, c)) for _ in range(n)] for _ in range(2))
    state = kernel.result_state(xs[0])
    m.CNNBatchNormalizationStatistics(ctx.device).encode_batch(cb, xs, state)
    kernel.encode_batch(cb, xs, state, ys)
    m.CNNBatchNormalizationStatisticsGradient(ctx.device).encode_batch(cb, gs, xs, state)
    gradient.encode_batch(cb, gs, xs, [state] * len(xs), dxs)
    run(ctx, cb)
    ref_mean, ref_var, ref_y, ref_dgamma, ref_dbeta, ref_dx = batch_norm_reference(x_arr, g_arr, gamma, beta,
                                                                                 kernel.epsilon)
    label = "one Image of N images" if multi else "a batch of N images"
    check_close(state.mean, ref_mean, f"batch mean over {label}")
    check_close(state.variance, ref_var, f"batch variance over {label}")
    check_close(np.concatenate([y.to_numpy() for y in ys]), ref_y, f"batch normalization Y of {label}", tol=1e-3)
    check_close(state.gradient_for_gamma, ref_dgamma, f"gradient_for_gamma over {label}", tol=1e-3)
    # dX = γ/σ · (G − mean G − x̂ · mean(G x̂)): float32 rounding of the terms is amplified by γ/σ, which
    # is large where a channel's few pixels (as few as 2) vary little, while the difference cancels.
    amplification = max(1.0, float(np.max(np.abs(gamma) / np.sqrt(ref_var + kernel.epsilon))))
    check_close(np.concatenate([d.to_numpy() for d in dxs]), ref_dx, f"batch normalization dX of {label}",
                tol=1e-3 * amplification)


# ---------------------------------------------------------------------------------------------
# padding policies: the returning forms size the destination as padding_destination_size says


SIZE_STYLES = {"SIZE_VALID_ONLY": -1, "SIZE_SAME": 0, "SIZE_FULL": 1}


@family("padding_policies")
def padding_policy_ops(r: random.Random, ctx: Context):
    m = ctx.m
    if not ctx.reach(r, "padding.policies", 1.0):
        return
    size = r.choice(sorted(SIZE_STYLES))
    align = r.choice(["ALIGN_CENTERED", "ALIGN_TOP_LEFT", "ALIGN_BOTTOM_RIGHT"])
    rem = r.choice(["ADD_REMAINDER_TO_TOP_LEFT", "ADD_REMAINDER_TO_BOTTOM_RIGHT", "ADD_REMAINDER_TO_TOP_RIGHT"])
    method = getattr(m.PaddingMethod, size) | getattr(m.PaddingMethod, align) | getattr(m.PaddingMethod, rem)
    k, s = r.randint(1, 5), r.randint(1, 3)
    h, w, c = r.randint(1, 9), r.randint(1, 9), r.randint(1, 4)
    kernel = r.choice([lambda: m.CNNPoolingMax(ctx.device, k, k, s, s), lambda: m.CNNPoolingAverage(ctx.device, k, k, s, s)])()
    ctx.start_call()
    kernel.padding = m.NNDefaultPadding(int(method))
    expected = (m.padding_destination_size(w, s, k, SIZE_STYLES[size]),
                m.padding_destination_size(h, s, k, SIZE_STYLES[size]))
    cb = ctx.queue.command_buffer()
    x = m.Image.from_numpy(random_array(r, h, w, c), ctx.device)
    if min(expected) <= 0:
        ctx.invalid.append(f"padding {size} leaves an empty destination ({expected})")
    y = kernel.encode(cb, x)
    run(ctx, cb)
    ctx.expect_rejected_if_invalid(f"pooling with padding {method!r}")
    if (y.width, y.height) != expected:
        raise WrongResult(f"padding {size}|{align}|{rem}, k {k}, s {s}, {w}x{h}: destination {y.width}x{y.height}, "
                          f"padding_destination_size says {expected[0]}x{expected[1]}")
    if not np.all(np.isfinite(y.to_numpy())):
        raise WrongResult(f"padding {method!r}: non-finite output")


# ---------------------------------------------------------------------------------------------
# graph nodes at their limits: pooling / upsampling / normalization node sizes are validated when the
# node is built (ValueError naming the parameter), not later


NODE_LIMIT = 2**20


@family("graph_nodes")
def graph_node_ops(r: random.Random, ctx: Context):
    m = ctx.m
    kind = r.choice(["pooling", "upsampling", "dropout", "local_normalization"])
    source = m.NNImageNode()
    ctx.start_call()
    bad = ctx.reach(r, "graph.filter_sizes", 0.25)
    if kind == "pooling":
        size = r.choice([0, -1, NODE_LIMIT + 1, 2**31, 2**63]) if bad else r.randint(1, 3)
        node = getattr(m, r.choice(["CNNPoolingMaxNode", "CNNPoolingAverageNode", "CNNPoolingL2NormNode"]))(
            source, size)
    elif kind == "upsampling":  # scale factors in [1, 2^16] (docs/upsampling.md)
        size = r.choice([0, -1, 2**16 + 1, 2**31, 2**64]) if bad else r.randint(1, 3)
        node = m.CNNUpsamplingNearestNode(source, size, 1)
    elif kind == "dropout":  # keep_probability in (0, 1] (docs/dropout.md)
        size = r.choice([0.0, 1.5, float("nan"), -0.5]) if bad else 0.5
        node = m.CNNDropoutNode(source, size)
    else:  # sizes in [1, 2^20] (docs/normalization.md)
        size = r.choice([0, NODE_LIMIT + 1, 2**63]) if bad else r.randint(1, 3)
        node = m.CNNCrossChannelNormalizationNode(source, size)
    if bad:
        ctx.invalid.append(f"{kind} node size {size}")
    ctx.expect_rejected_if_invalid(f"{type(node).__name__} constructor")
    graph = m.NNGraph(ctx.device, node.result_image)
    h, w, c = r.randint(2, 5), r.randint(2, 5), r.randint(1, 4)
    x_arr = random_array(r, h, w, c)
    cb = ctx.queue.command_buffer()
    out = graph.encode(cb, [m.Image.from_numpy(x_arr, ctx.device)])
    run(ctx, cb)
    if not np.all(np.isfinite(out.to_numpy())):
        raise WrongResult(f"{type(node).__name__} graph: non-finite output for finite input")


# ---------------------------------------------------------------------------------------------
# objects over another object's buffer (issue 29 items 9, 10): a Vector, a convolution weights state
# or a normalization state over a shared Vector at random offsets; an offset that is not a multiple
# of 4 or leaves too little memory is invalid; a valid one must alias (an SGD step through the new
# object, with a learning rate of either sign, lands in the shared buffer and nowhere else)


def _aliasing_target(r: random.Random, ctx: Context, shared, floats: int):
    """One aliasing object over `shared` and the (first float, count) range it covers."""
    m = ctx.m
    kind = r.choice(["vector", "weights", "mean_variance", "gamma_beta"])
    count = r.randint(1, 6)
    start = ctx.bad(r, r.randint(0, floats - count), [floats - count + 1, floats + 3, 2**40], what="offset floats")
    offset = ctx.bad(r, 4 * start, [4 * start + r.choice([1, 2, 3])], what="byte offset")
    if kind == "vector":
        return m.Vector(buffer=shared, descriptor=count, offset=offset).numpy, start, count
    if kind == "weights":  # a 1x1 convolution of `count` input channels to 1 output
        d = m.CNNConvolutionDescriptor(1, 1, count, 1)
        state = m.CNNConvolutionWeightsAndBiasesState(weights=shared, descriptor=d, weights_offset=offset)
        return state.weights_vector.numpy, start, count
    cls = m.CNNNormalizationMeanAndVarianceState if kind == "mean_variance" else m.CNNNormalizationGammaAndBetaState
    first, second = ("mean", "variance") if kind == "mean_variance" else ("gamma", "beta")
    state = cls(**{first: shared, second: shared, "number_of_feature_channels": count, f"{first}_offset": offset})
    return getattr(state, f"{first}_vector").numpy, start, count


@family("aliasing")
def aliasing_ops(r: random.Random, ctx: Context):
    m = ctx.m
    floats = r.randint(6, 24)
    data = random_array(r, floats)
    shared = m.Vector.from_numpy(data, ctx.device)
    ctx.start_call()
    view, start, count = _aliasing_target(r, ctx, shared, floats)
    ctx.expect_rejected_if_invalid("an object over a shared Vector")
    target = m.Vector(buffer=shared, descriptor=count, offset=4 * start)
    g = random_array(r, count)
    lr = r.choice([0.5, -0.5, -0.1])
    cb = ctx.queue.command_buffer()
    m.NNOptimizerStochasticGradientDescent(ctx.device, lr).encode(cb, m.Vector.from_numpy(g, ctx.device), target)
    run(ctx, cb)
    expected = data.astype(np.float64)
    expected[start:start + count] -= lr * g
    check_close(shared.to_numpy(), expected, "the shared buffer after an update of one range")
    check_close(view(), expected[start:start + count], "the aliasing object's view of the range")
