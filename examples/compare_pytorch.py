#!/usr/bin/env python3
"""Train the digits network of train_digits.py with mpsgrad and with PyTorch, side by side.

Same data and split, same initial weights, the same batches in the same order (the two take their
steps alternately, so both see the same machine load), same optimizer (Adam with PyTorch's bias corrections),
same epochs (mpsgrad's NNOptimizerAdam places epsilon as MPS does, before the bias correction of
v: a difference of order epsilon; `--training-style cpu` uses a NumPy Adam with PyTorch's formula
exactly). The dropout masks differ (each library draws its own), so the runs are not
bit-identical; the accuracies should be close. Prints both test accuracies, the wall time per
training step of each (forward + backward + parameter update of one batch; mean and median) and
their ratios.

    pip install ".[examples]" torch && python examples/compare_pytorch.py [--epochs 15] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_digits as td  # noqa: E402  (the mpsgrad side; it imports mpsgrad)

m = td.m


class TorchNet:
    """The same layers in PyTorch (NCHW; the FC layers as convolutions covering the image)."""

    def __init__(self, params, lr, keep_probability=0.5):
        import torch

        self.torch = torch
        self.p = {}
        for name, (w, b) in params.items():
            self.p[name + ".w"] = torch.tensor(w).permute(0, 3, 1, 2).contiguous().requires_grad_(True)  # OIHW
            self.p[name + ".b"] = torch.tensor(b).requires_grad_(True)
        self.bn = [torch.nn.BatchNorm2d(c, eps=1e-5, momentum=0.1) for c in (16, 32)]
        params_list = list(self.p.values()) + [q for bn in self.bn for q in bn.parameters()]
        self.opt = torch.optim.Adam(params_list, lr=lr)
        self.drop = 1.0 - keep_probability

    def forward(self, x, training):
        F = self.torch.nn.functional
        h = self.torch.from_numpy(x).permute(0, 3, 1, 2)
        for i, conv in enumerate(("conv1", "conv2")):
            self.bn[i].train(training)
            h = F.max_pool2d(F.relu(self.bn[i](F.conv2d(h, self.p[conv + ".w"], self.p[conv + ".b"], padding=1))), 2)
        h = F.relu(F.conv2d(h, self.p["fc1.w"], self.p["fc1.b"]))
        h = F.dropout(h, self.drop, training=training)
        return F.conv2d(h, self.p["fc2.w"], self.p["fc2.b"]).flatten(1)

    def train_step(self, x, labels):
        logits = self.forward(x, True)
        loss = self.torch.nn.functional.cross_entropy(logits, self.torch.from_numpy(labels))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach()), logits.detach().numpy()

    def logits(self, x):
        with self.torch.no_grad():
            return self.forward(x, False).numpy()


def train_side_by_side(nets, data, epochs, batch_size, seed):
    """Trains every net on the same batches, alternating step by step, so that both see the same
    machine load; returns {name: (test accuracy, mean step time, median step time)}."""
    x_train, y_train, x_test, y_test = data
    rng = np.random.default_rng(seed)
    times = {name: [] for name in nets}
    for epoch in range(1, epochs + 1):
        for idx in td.batches(len(x_train), batch_size, rng):
            xb, yb = x_train[idx], y_train[idx]
            for name, net in nets.items():
                start = time.perf_counter()
                net.train_step(xb, yb)
                times[name].append(time.perf_counter() - start)
    results = {}
    for name, net in nets.items():
        _, accuracy = td.evaluate(net, x_test, y_test)
        steps = times[name]
        # The first epoch warms caches and allocators: time the rest when there is a rest.
        steady = steps[len(steps) // epochs:] if epochs > 1 else steps
        print(f"{name:8s} test accuracy {100 * accuracy:5.1f}%   {1e3 * np.mean(steady):.3f} ms per training step "
              f"(median {1e3 * np.median(steady):.3f} ms, {len(steady)} steps timed)")
        results[name] = (accuracy, float(np.mean(steady)), float(np.median(steady)))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for both libraries")
    parser.add_argument("--training-style", choices=sorted(td.TRAINING_STYLES), default="gpu",
                        help="how mpsgrad's convolutions take their Adam step (train_digits.py --training-style)")
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    m.set_num_threads(args.threads)
    data = td.load_data(args.seed)
    params = td.initial_parameters(args.seed)  # both start from these
    print(f"{len(data[0])} training / {len(data[2])} test digits, {args.epochs} epochs, batch {args.batch_size}, "
          f"{args.threads} threads; torch {torch.__version__}")
    nets = {"mpsgrad": td.DigitsNet(m.Device("cpu"), params, args.lr, seed=args.seed,
                                    training_style=args.training_style),
            "pytorch": TorchNet(params, args.lr)}
    results = train_side_by_side(nets, data, args.epochs, args.batch_size, args.seed)
    ours, theirs = results["mpsgrad"], results["pytorch"]
    # On a shared machine the mean catches other processes' bursts; the median is the steadier figure.
    print(f"time per step, pytorch / mpsgrad: {theirs[2] / ours[2]:.2f}x by the median, "
          f"{theirs[1] / ours[1]:.2f}x by the mean ({'mpsgrad' if ours[2] < theirs[2] else 'pytorch'} is faster)")


if __name__ == "__main__":
    main()
