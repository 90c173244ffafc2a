"""One process of tests/python/test_distributed.py (run as a script by the test, one per rank, with
MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE in the environment like torchrun sets them).

    distributed_worker.py suite OUT
    distributed_worker.py graph OUT [--bn [--sync-bn]] [--steps N] [--reference] [--die-after K] [--wide-fc] [--uneven]
    distributed_worker.py syncbn OUT

graph: trains a small graph (conv 3x3 -> [BN] -> ReLU -> FC -> softmax cross-entropy, mean over the
batch) with SGD for a few steps on this rank's shard of a fixed global batch, the gradients averaged
by mpsgrad.distributed.DataParallel; saves the final weights. --reference: one process, no
torch.distributed, the whole batch. --die-after K: rank 1 exits abruptly after K steps.
--wide-fc: rank 1 builds a wider FC layer (a layout mismatch). --uneven: shards of 5 and 3 images.
--sync-bn: DataParallel(graph, sync_batch_norm=True), BN over all ranks' images (as one process on the
whole batch); the weights after the first step are saved too (first_*: the first step's gradients).
syncbn: one synchronized batch normalization training pass with the kernels on this rank's shard;
saves the output, the input gradient and dγ/dβ.
suite: in one process group (the launches dominate the test's time): graph without and with BN,
with sync-BN, syncbn, then graph --wide-fc, whose ValueError is printed; OUT names the files with {name} and {rank}.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import mpsgrad as m

if __name__ == "__main__":
    # The worker computes in float32 whatever the test pass: test_graph imports conftest, which in the
    # float16 pass (MPSGRAD_TEST_IMAGE_FORMAT) would switch the image constructors to FLOAT16.
    os.environ.pop("MPSGRAD_TEST_IMAGE_FORMAT", None)
# The script's directory (tests/python) is first on sys.path, so the tests' data sources import.
from test_graph import ConvSource, Handle  # noqa: E402

N, H, W, C_IN, C_MID, CLASSES = 8, 6, 6, 2, 4, 3
LR = 0.1


def global_batch(step):
    rng = np.random.default_rng(100 + step)
    x = rng.standard_normal((N, H, W, C_IN)).astype(np.float32)
    labels = rng.integers(0, CLASSES, N)
    return x, labels


def initial_weights(seed, fc_out=CLASSES):
    rng = np.random.default_rng(seed)
    return {
        "conv_w": (0.3 * rng.standard_normal((C_MID, 3, 3, C_IN))).astype(np.float32),
        "conv_b": (0.1 * rng.standard_normal(C_MID)).astype(np.float32),
        "bn_g": (1.0 + 0.1 * rng.standard_normal(C_MID)).astype(np.float32),
        "bn_b": (0.1 * rng.standard_normal(C_MID)).astype(np.float32),
        "fc_w": (0.1 * rng.standard_normal((fc_out, H, W, C_MID))).astype(np.float32),
        "fc_b": (0.1 * rng.standard_normal(fc_out)).astype(np.float32),
    }


def batch_normalization_source(gamma, beta):
    """gamma and beta trained with SGD from the completion handler (CPU style); momentum 0 keeps the
    running statistics, which a training graph does not use, at their defaults."""
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, epsilon=1e-5)
    source.learning_rate = LR
    source.momentum = 0.0
    return source


def _init(args):
    import mpsgrad.distributed as mdist

    if not mdist.torch.distributed.is_initialized():
        mdist.init_process_group(timeout_seconds=args.timeout)
    return mdist


def train_graph(args):
    device = m.Device("cpu")
    world, rank = 1, 0
    if not args.reference:
        mdist = _init(args)
        world, rank = mdist.world_size(), mdist.rank()
    fc_out = CLASSES + 1 if args.wide_fc and rank == 1 else CLASSES
    params = initial_weights(seed=7 + rank, fc_out=fc_out)  # the ranks start different: the broadcast fixes it
    if not args.reference:
        mdist.broadcast_arrays([params[k] for k in ("conv_w", "conv_b", "bn_g", "bn_b")])
        if not args.wide_fc:
            mdist.broadcast_arrays([params["fc_w"], params["fc_b"]])
    conv, fc = ConvSource(params["conv_w"], params["conv_b"], LR), ConvSource(params["fc_w"], params["fc_b"], LR)
    norm = batch_normalization_source(params["bn_g"], params["bn_b"])
    cpu = m.NNTrainingStyle.UPDATE_DEVICE_CPU

    x_node = m.NNImageNode(Handle("x"))
    c = m.CNNConvolutionNode(x_node, conv)
    c.training_style = cpu
    h = c.result_image
    if args.bn:
        bn = m.CNNBatchNormalizationNode(h, norm)
        bn.training_style = cpu
        h = bn.result_image
    relu = m.CNNNeuronReLUNode(h)
    f = m.CNNFullyConnectedNode(relu.result_image, fc)
    f.training_style = cpu
    descriptor = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True
    loss = m.CNNLossNode(f.result_image, descriptor)
    terminal = loss.training_graph()
    graph = m.NNGraph(device, [t.result_image for t in terminal], [False] * len(terminal))
    graph.format = m.ImageFeatureChannelFormat.FLOAT32
    parallel = None if args.reference else mdist.DataParallel(graph, sync_batch_norm=args.sync_bn)
    queue = m.CommandQueue(device)

    for step in range(args.steps):
        if args.die_after is not None and rank == 1 and step == args.die_after:
            os._exit(3)  # no clean shutdown: the peer sees a closed connection
        x, labels = global_batch(step)
        if args.reference:
            mine = np.arange(N)
        elif args.uneven:  # 5 and 3 images: the gradients weighted by the shard sizes
            mine = np.arange(5) if rank == 0 else np.arange(5, N)
            parallel.weight = float(len(mine))
        else:
            mine = mdist.shard(np.arange(N))
        onehot = np.eye(fc_out, dtype=np.float32)[labels[mine] % fc_out].reshape(-1, 1, 1, fc_out)
        states = [m.CNNLossLabels(device, m.CNNLossDataDescriptor(t)) for t in onehot]
        cb = queue.command_buffer()
        graph.encode_batch(cb, [m.batch_from_numpy(np.ascontiguousarray(x[mine]), device)], [states])
        cb.commit()
        cb.wait_until_completed()
        if parallel is not None:
            parallel.check()
        weights = {"conv_w": conv.w, "conv_b": conv.b, "bn_g": norm.gamma(), "bn_b": norm.beta(), "fc_w": fc.w,
                   "fc_b": fc.b}
        if step == 0:
            first = {"first_" + k: np.array(v) for k, v in weights.items()}

    np.savez(args.out.format(rank=rank), **{k: np.array(v) for k, v in weights.items()}, **first)
    if parallel is not None:
        print("collectives", parallel.collectives, flush=True)


def train_syncbn(args):
    """One sync-BN training pass with the kernels: statistics, sync, forward, statistics gradient,
    sync, gradient."""
    mdist = _init(args)
    device = m.Device("cpu")
    rng = np.random.default_rng(5)
    n, h, w, c = 6, 3, 4, 5
    x = (1.5 * rng.standard_normal((n, h, w, c)) + 0.7).astype(np.float32)
    g = rng.standard_normal((n, h, w, c)).astype(np.float32)
    gamma = (1.0 + 0.2 * rng.standard_normal(c)).astype(np.float32)
    beta = (0.2 * rng.standard_normal(c)).astype(np.float32)
    # Unequal shards (rank 0: 4 images, rank 1: 2): the statistics must be weighted by the counts.
    mine = np.arange(4) if mdist.rank() == 0 else np.arange(4, n)
    xs = m.batch_from_numpy(np.ascontiguousarray(x[mine]), device)
    gs = m.batch_from_numpy(np.ascontiguousarray(g[mine]), device)
    source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, np.zeros(c, np.float32),
                                                      np.ones(c, np.float32), epsilon=1e-5)
    forward = m.CNNBatchNormalization(device, source)
    statistics = m.CNNBatchNormalizationStatistics(device)
    statistics_gradient = m.CNNBatchNormalizationStatisticsGradient(device)
    gradient = m.CNNBatchNormalizationGradient(device)
    for k in (forward, gradient):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    queue = m.CommandQueue(device)
    count = len(mine) * h * w
    state = forward.result_state(xs[0])

    cb = queue.command_buffer()
    statistics.encode_batch(cb, xs, state)
    cb.commit()
    cb.wait_until_completed()
    total = mdist.sync_batch_norm_statistics(state, count)
    cb = queue.command_buffer()
    ys = forward.encode_batch(cb, xs, state)
    statistics_gradient.encode_batch(cb, gs, xs, state)
    cb.commit()
    cb.wait_until_completed()
    mdist.sync_batch_norm_gradients(state, count)
    cb = queue.command_buffer()
    dxs = gradient.encode_batch(cb, gs, xs, [state] * len(mine))
    cb.commit()
    cb.wait_until_completed()
    np.savez(args.out.format(rank=mdist.rank()), y=m.batch_to_numpy(ys), dx=m.batch_to_numpy(dxs), mine=mine, total=total,
             d_gamma=np.array(state.gradient_for_gamma), d_beta=np.array(state.gradient_for_beta),
             x=x, g=g, gamma=gamma, beta=beta)


def suite(args):
    out = args.out
    for name, bn, uneven, sync_bn in (("plain", False, False, False), ("bn", True, False, False),
                                      ("uneven", False, True, False), ("syncgraph", True, False, True)):
        train_graph(argparse.Namespace(**{**vars(args), "out": out.replace("{name}", name), "bn": bn,
                                          "uneven": uneven, "sync_bn": sync_bn}))
    train_syncbn(argparse.Namespace(**{**vars(args), "out": out.replace("{name}", "sync")}))
    try:
        train_graph(argparse.Namespace(**{**vars(args), "out": out.replace("{name}", "wide"), "wide_fc": True}))
    except ValueError as error:
        print("wide-fc: ValueError:", error, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["suite", "graph", "syncbn"])
    parser.add_argument("out")
    parser.add_argument("--bn", action="store_true")
    parser.add_argument("--sync-bn", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--wide-fc", action="store_true")
    parser.add_argument("--uneven", action="store_true")
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    {"suite": suite, "graph": train_graph, "syncbn": train_syncbn}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
