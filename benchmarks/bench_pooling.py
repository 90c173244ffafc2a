#!/usr/bin/env python3
"""Pooling and upsampling training kernels: mpsgrad against PyTorch, side by side, in one run.

For a few training shapes this times, on the same machine and in the same run:

* max pooling 2x2/2        ``CNNPoolingMax`` / ``CNNPoolingMaxGradient``
                           vs ``F.max_pool2d`` / ``torch.ops.aten.max_pool2d_with_indices_backward``
* average pooling 3x3/2    ``CNNPoolingAverage`` / ``CNNPoolingAverageGradient`` (edge mode CLAMP, i.e.
                           count_include_pad=False) vs ``F.avg_pool2d`` / ``torch.ops.aten.avg_pool2d_backward``
* bilinear upsampling x2   ``CNNUpsamplingBilinear`` / ``CNNUpsamplingBilinearGradient``
                           vs ``F.interpolate`` / ``torch.ops.aten.upsample_bilinear2d_backward``

PyTorch runs in channels-last memory format (NHWC, mpsgrad's layout) with as many threads as
mpsgrad uses; its backward ops are the ones autograd calls. One mpsgrad iteration is what a user
pays per call: make a command buffer, encode the batch, commit, wait. Each op runs --warmup times,
then --repeats times alternating mpsgrad and PyTorch; the table shows medians and the traffic
each op must move (inputs read once, output written once) as GB/s. Before timing, every case
checks that both libraries computed the same thing.

Run:  PYTHONPATH=<dir holding the mpsgrad package> python benchmarks/bench_pooling.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_THREADS = os.cpu_count() or 1
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_THREADS)

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("bench_pooling.py compares against PyTorch: pip install torch")

import mpsgrad as m  # noqa: E402

# (name, N (full), N (--quick), C, H, W)
SHAPES = [("64ch 56x56", 8, 2, 64, 56, 56), ("256ch 14x14", 16, 4, 256, 14, 14)]


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Case:
    """One op on one shape: mpsgrad and PyTorch closures for the forward pass and the gradient."""

    def __init__(self, op, shape, quick, device, queue, rng):
        name, n_full, n_quick, c, h, w = shape
        n = n_quick if quick else n_full
        self.label = f"{op} {name} N={n}"
        self.device, self.queue = device, queue
        self.x = rng.standard_normal((n, h, w, c)).astype(np.float32)
        self.xs = m.batch_from_numpy(self.x, device)
        self.X = torch.from_numpy(self.x).permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels last
        if op == "max 2x2/2":
            self.fwd, self.bwd = m.CNNPoolingMax(device, 2, 2, 2, 2), m.CNNPoolingMaxGradient(device, 2, 2, 2, 2)
            self.fwd.edge_mode = m.ImageEdgeMode.CLAMP
            self.torch_fwd = lambda: F.max_pool2d(self.X, 2, 2, return_indices=True)
            self.torch_bwd = lambda y: torch.ops.aten.max_pool2d_with_indices_backward(
                self.G, self.X, [2, 2], [2, 2], [0, 0], [1, 1], False, y[1])
        elif op == "avg 3x3/2":
            self.fwd, self.bwd = m.CNNPoolingAverage(device, 3, 3, 2, 2), m.CNNPoolingAverageGradient(device, 3, 3, 2, 2)
            self.fwd.edge_mode = m.ImageEdgeMode.CLAMP
            self.torch_fwd = lambda: (F.avg_pool2d(self.X, 3, 2, 1, count_include_pad=False),)
            self.torch_bwd = lambda y: torch.ops.aten.avg_pool2d_backward(
                self.G, self.X, [3, 3], [2, 2], [1, 1], False, False, None)
        else:
            self.fwd, self.bwd = m.CNNUpsamplingBilinear(device, 2, 2), m.CNNUpsamplingBilinearGradient(device, 2, 2)
            self.torch_fwd = lambda: (F.interpolate(self.X, scale_factor=2, mode="bilinear", align_corners=False),)
            self.torch_bwd = lambda y: torch.ops.aten.upsample_bilinear2d_backward(
                self.G, [h * 2, w * 2], [n, c, h, w], False, 2.0, 2.0)
        self.fwd.destination_image_allocator = m.ImageAllocator.persistent()
        self.bwd.destination_image_allocator = m.ImageAllocator.persistent()
        cb = queue.command_buffer()
        ys, self.states = self.fwd.encode_batch(cb, self.xs, destination_state_is_temporary=False)
        cb.commit()
        cb.wait_until_completed()
        self.y = m.batch_to_numpy(ys)
        self.g = rng.standard_normal(self.y.shape).astype(np.float32)
        self.gs = m.batch_from_numpy(self.g, device)
        self.G = torch.from_numpy(self.g).permute(0, 3, 1, 2)
        self.torch_y = self.torch_fwd()

    def mps_forward(self):
        cb = self.queue.command_buffer()
        out = self.fwd.encode_batch(cb, self.xs, destination_state_is_temporary=False)
        cb.commit()
        cb.wait_until_completed()
        return out

    def mps_gradient(self):
        cb = self.queue.command_buffer()
        out = self.bwd.encode_batch(cb, self.gs, self.xs, self.states)
        cb.commit()
        cb.wait_until_completed()
        return out

    def check(self):
        y_ref = self.torch_y[0].permute(0, 2, 3, 1).numpy()
        dx = m.batch_to_numpy(self.mps_gradient())
        dx_ref = self.torch_bwd(self.torch_y).permute(0, 2, 3, 1).numpy()
        for what, ours, ref in (("forward", self.y, y_ref), ("gradient", dx, dx_ref)):
            err = np.max(np.abs(ours - ref)) / max(1e-6, np.max(np.abs(ref)))
            if err > 1e-4:
                sys.exit(f"{self.label} {what}: mpsgrad and PyTorch differ (relative error {err:.2g})")

    def traffic(self, op):
        """Bytes an op must move: forward reads X and writes Y; the gradient reads G and X, writes dX."""
        return 4 * (self.x.size + self.y.size if op == "forward" else self.g.size + 2 * self.x.size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    repeats = args.repeats or (5 if args.quick else 15)
    torch.set_num_threads(_THREADS)
    device = m.Device(args.device)
    queue = m.CommandQueue(device)
    rng = np.random.default_rng(0)
    print(f"mpsgrad device {device.name}, PyTorch {torch.__version__} (CPU, channels last), {_THREADS} threads, "
          f"medians of {repeats}; load average {os.getloadavg()[0]:.2f} ({_THREADS} CPUs)")
    print(f"{'case':34} {'op':9} {'mpsgrad ms':>11} {'torch ms':>9} {'ratio':>6} {'mpsgrad GB/s':>13} {'torch GB/s':>11}")
    for op in ("max 2x2/2", "avg 3x3/2", "bilinear x2"):
        for shape in SHAPES:
            case = Case(op, shape, args.quick, device, queue, rng)
            case.check()
            for which, ours, theirs in (("forward", case.mps_forward, case.torch_fwd),
                                        ("gradient", case.mps_gradient, lambda: case.torch_bwd(case.torch_y))):
                for _ in range(args.warmup):
                    ours(), theirs()
                t_ours, t_theirs = [], []
                for _ in range(repeats):
                    t_ours.append(median_time(ours, 1))
                    t_theirs.append(median_time(theirs, 1))
                a, b = statistics.median(t_ours), statistics.median(t_theirs)
                gb = case.traffic(which) / 1e9
                print(f"{case.label:34} {which:9} {a * 1e3:11.3f} {b * 1e3:9.3f} {b / a:6.2f} {gb / a:13.2f} {gb / b:11.2f}")
    print(f"load average at end {os.getloadavg()[0]:.2f}; ratio = torch ms / mpsgrad ms (> 1: mpsgrad faster)")


if __name__ == "__main__":
    main()
