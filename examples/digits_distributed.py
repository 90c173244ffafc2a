"""`train_digits.py --distributed`: data-parallel training of the digits network on torch.distributed.

    torchrun --standalone --nproc_per_node 2 examples/train_digits.py --distributed [--epochs 15]

Every rank builds the same network; rank 0's initial weights are broadcast to the others. Each
global batch of --batch-size images (the same sequence on every rank: one shuffle seed) is split
between the ranks; each rank runs the training graph on its shard, and before any Adam step the
graph's before_updates hook averages the gradients across ranks (mpsgrad.distributed.DataParallel),
weighted by the shard sizes, so the ranks take identical steps. Batch normalization normalizes with
each rank's own shard statistics (as PyTorch DDP without SyncBatchNorm), or with --sync-bn with the
statistics of all ranks' images (torch.nn.SyncBatchNorm: host points in the graph's command buffer);
the running mean and variance are averaged at the end of each epoch. Every
rank ends with `test accuracy: ...` and `weights checksum: <hex>` (identical on all ranks) and rank
0 with the step time and the exchange's share of it. docs/distributed.md.
"""
from __future__ import annotations

import time

import numpy as np


def _all_arrays(net):
    """Every trained array and batch normalization's running statistics, in a fixed order."""
    arrays = []
    for name in sorted(net.sources):
        arrays += [net.sources[name].w, net.sources[name].b]
    for bn in net.bn:
        arrays += [bn.g, bn.b, bn.mu, bn.var]
    return arrays


def main(args, digits):
    """Runs the training of train_digits.py (the module `digits`) as one rank of a torchrun job."""
    import mpsgrad.distributed as mdist

    mdist.init_process_group(backend="gloo")
    rank, world = mdist.rank(), mdist.world_size()
    if args.training_style != "cpu" and rank == 0:
        print("--distributed: the layers train UPDATE_DEVICE_CPU (the gradients are averaged once the command "
              "buffer has run, before the Adam steps)")
    x_train, y_train, x_test, y_test = digits.load_data(args.seed, args.train_limit)
    device = digits.m.Device(args.device)
    params = digits.initial_parameters(args.seed + rank)  # different per rank until the broadcast
    mdist.broadcast_arrays([a for pair in params.values() for a in pair])
    # The dropout masks differ per rank (their own images); everything else starts identical.
    net = digits.DigitsNet(device, params, args.lr, seed=args.seed + rank, training_style="cpu")
    parallel = mdist.DataParallel(net.train_graph, sync_batch_norm=args.sync_bn)
    rng = np.random.default_rng(args.seed)  # the same global batches on every rank
    steps, step_seconds = 0, 0.0
    for epoch in range(1, args.epochs + 1):
        totals = np.zeros(3, np.float32)  # loss sum, correct, images of this rank
        for idx in digits.batches(len(x_train), args.batch_size, rng):
            mine = mdist.shard(idx)
            parallel.weight = float(len(mine))  # the shards' mean losses weighted by their sizes
            start = time.perf_counter()
            loss, logits = net.train_step(x_train[mine], y_train[mine])
            parallel.check()
            step_seconds += time.perf_counter() - start
            steps += 1
            totals += [loss * len(mine), int((logits.argmax(1) == y_train[mine]).sum()), len(mine)]
        mdist.all_reduce_arrays([bn_array for bn in net.bn for bn_array in (bn.mu, bn.var)])
        mdist.all_reduce_arrays([totals])  # means over ranks: the ratios below are the global ones
        test_loss, test_acc = digits.evaluate(net, x_test, y_test)
        if rank == 0 and not args.no_progress:
            print(f"epoch {epoch}/{args.epochs}: train loss {totals[0] / totals[2]:.4f} "
                  f"acc {100 * totals[1] / totals[2]:.1f}%, test loss {test_loss:.4f} acc {100 * test_acc:.1f}%",
                  flush=True)
    if rank == 0:
        exchange = parallel.seconds / max(steps, 1)
        print(f"{world} process(es): {steps} steps, step time {1e3 * step_seconds / max(steps, 1):.2f} ms, of which "
              f"the gradient all-reduce {1e3 * exchange:.2f} ms ({100 * parallel.seconds / step_seconds:.1f} %), "
              f"{parallel.collectives / max(steps, 1):.0f} data collective(s) per step" +
              (f", synchronized BN {1e3 * parallel.sync_seconds / max(steps, 1):.2f} ms "
               f"({100 * parallel.sync_seconds / step_seconds:.1f} %)" if args.sync_bn else ""))
    print(f"test accuracy: {100 * test_acc:.1f}%")
    print(f"weights checksum: {mdist.checksum(_all_arrays(net))}", flush=True)
    mdist.torch.distributed.destroy_process_group()
