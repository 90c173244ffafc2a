#!/usr/bin/env python3
"""Convolution training kernels: mpsgrad against PyTorch, side by side, in one run.

For a handful of realistic training shapes this times, on the same machine and in the same run:

* forward          mpsgrad ``CNNConvolution.encode_batch(..., destination_state_is_temporary=False)``
                   vs ``torch.nn.functional.conv2d``
* data gradient    mpsgrad ``CNNConvolutionGradient.encode_batch`` with ``GRADIENT_WITH_DATA``
                   vs ``torch.ops.aten.convolution_backward`` with output mask (input)
* weight+bias grad mpsgrad ``CNNConvolutionGradient.encode_batch`` with ``GRADIENT_WITH_WEIGHTS_AND_BIAS``
                   vs ``torch.ops.aten.convolution_backward`` with output mask (weight, bias)

``convolution_backward`` is the op PyTorch's autograd calls for conv2d's backward (it is also what
``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` call), so this is the cost of a training step
without autograd's bookkeeping. PyTorch gets NCHW float32 contiguous tensors and as many threads
as mpsgrad uses.

One mpsgrad iteration is what a user pays per call: make a command buffer, encode the batch
(destination images come from ``ImageAllocator.persistent()``), commit, wait. Each op is run
``--warmup`` times, then ``--repeats`` times alternating mpsgrad and PyTorch (so machine noise
hits both alike); the table shows medians. Before timing, every case checks that both libraries
computed the same thing (forward output, data gradient, weight and bias gradients).

GFLOP/s counts a multiply-add as 2 FLOPs: 2*N*Ho*Wo*Cout*(Cin/groups)*kH*kW for each of the
three ops (the bias terms are not counted). "% peak" is against the *achievable BLAS peak*
measured at start: the fastest of several large float32 matmuls (2048 x 2048) by NumPy's BLAS
and by PyTorch, with the same thread count. It is what a tuned GEMM reaches on this machine,
not the datasheet number.

Run:  PYTHONPATH=<dir holding the mpsgrad package> python benchmarks/bench_convolution.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

# mpsgrad's CPU backend uses std::thread::hardware_concurrency() threads (os.cpu_count()) and
# that is not configurable; give the BLAS libraries the same number before they are imported.
_THREADS = os.cpu_count() or 1
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_THREADS)

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("bench_convolution.py compares against PyTorch: pip install torch (the project uses torch==2.13.0, CPU)")

import mpsgrad as m  # noqa: E402

# (name, N (full), N (--quick), Cin, H, W, Cout, k, stride, depthwise)
CASES = [
    ("3x3 64->64 56x56", 8, 2, 64, 56, 56, 64, 3, 1, False),
    ("3x3 128->128 28x28", 8, 2, 128, 28, 28, 128, 3, 1, False),
    ("3x3 s2 64->128 56x56", 8, 2, 64, 56, 56, 128, 3, 2, False),
    ("1x1 256->64 56x56", 8, 2, 256, 56, 56, 64, 1, 1, False),
    ("dw 3x3 128 56x56", 8, 2, 128, 56, 56, 128, 3, 1, True),
    ("5x5 32->64 16x16", 32, 8, 32, 16, 16, 64, 5, 1, False),
]
OPS = ("forward", "data grad", "weight+bias grad")


def run_times(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def measure_peak(seconds):
    """Achievable float32 GEMM rate in GFLOP/s: 2048 x 2048 matmuls by NumPy (its BLAS) and by
    PyTorch, alternating, for about `seconds` after a warm-up. Returns {library: (best, median)}.
    The best of both is the reference: the peak is a capability of the machine (other processes
    and clock ramp-up only ever lower a sample), while the convolution rows report typical
    (median) times."""
    n = 2048
    flops = 2.0 * n ** 3
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    libraries = {"numpy": lambda: a @ b, "torch": lambda: ta @ tb}
    times = {name: [] for name in libraries}
    for fn in libraries.values():
        fn()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or min(len(t) for t in times.values()) < 3:
        for name, fn in libraries.items():
            times[name] += run_times(fn, 1)
    return {name: (flops / min(t) / 1e9, flops / statistics.median(t) / 1e9) for name, t in times.items()}


class Case:
    """One convolution shape, set up for both libraries."""

    def __init__(self, spec, quick, device, queue, rng):
        (self.name, n_full, n_quick, cin, h, w, cout, k, stride, depthwise) = spec
        self.n = n = n_quick if quick else n_full
        self.stride = stride
        self.pad = k // 2
        self.groups = cin if depthwise else 1
        ho = (h + 2 * self.pad - k) // stride + 1
        wo = (w + 2 * self.pad - k) // stride + 1
        self.flops = 2.0 * n * ho * wo * cout * (cin // self.groups) * k * k
        self.label = f"N={n} {self.name}"

        # Data, drawn once: NHWC for mpsgrad, the same values NCHW for PyTorch.
        x = rng.standard_normal((n, h, w, cin), dtype=np.float32)
        dy = rng.standard_normal((n, ho, wo, cout), dtype=np.float32)
        w_ohwi = (rng.standard_normal((cout, k, k, cin // self.groups), dtype=np.float32)
                  / np.sqrt(k * k * cin / self.groups)).astype(np.float32)
        bias = rng.standard_normal(cout, dtype=np.float32)

        # mpsgrad
        if depthwise:
            desc = m.CNNDepthWiseConvolutionDescriptor(kernel_width=k, kernel_height=k,
                                                       input_feature_channels=cin, output_feature_channels=cout)
        else:
            desc = m.CNNConvolutionDescriptor(kernel_width=k, kernel_height=k,
                                              input_feature_channels=cin, output_feature_channels=cout)
        desc.stride_in_pixels_x = desc.stride_in_pixels_y = stride
        source = m.CNNConvolutionWeightsDataSource(desc, w_ohwi, bias)
        self.queue = queue
        self.conv = m.CNNConvolution(device, source)
        self.conv_grad = m.CNNConvolutionGradient(device, source)
        self.conv.destination_image_allocator = m.ImageAllocator.persistent()
        self.conv_grad.destination_image_allocator = m.ImageAllocator.persistent()
        self.xs = m.batch_from_numpy(x, device)
        self.dys = m.batch_from_numpy(dy, device)
        ys, states = self._forward()
        if tuple(ys[0].shape) != (1, ho, wo, cout):
            raise RuntimeError(f"{self.label}: mpsgrad output is {ys[0].shape}, expected {(1, ho, wo, cout)}")
        self.states = states if isinstance(states, list) else [states] * n

        # PyTorch
        self.tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        self.tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2)))
        self.tw = torch.from_numpy(np.ascontiguousarray(w_ohwi.transpose(0, 3, 1, 2)))
        self.tb = torch.from_numpy(bias)

    # --- mpsgrad: one iteration = command buffer, encode, commit, wait ---
    def _forward(self):
        cb = self.queue.command_buffer()
        ys, states = self.conv.encode_batch(cb, self.xs, destination_state_is_temporary=False)
        cb.commit()
        cb.wait_until_completed()
        return ys, states

    def _gradient(self, option):
        self.conv_grad.gradient_option = option
        cb = self.queue.command_buffer()
        dxs = self.conv_grad.encode_batch(cb, self.dys, self.xs, self.states)
        cb.commit()
        cb.wait_until_completed()
        return dxs

    def run_mpsgrad(self, op):
        if op == "forward":
            return self._forward()
        if op == "data grad":
            return self._gradient(m.CNNConvolutionGradientOption.GRADIENT_WITH_DATA)
        return self._gradient(m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS)

    # --- PyTorch ---
    def _backward(self, mask):
        return torch.ops.aten.convolution_backward(
            self.tdy, self.tx, self.tw, [self.tw.shape[0]], [self.stride] * 2, [self.pad] * 2, [1, 1],
            False, [0, 0], self.groups, mask)

    def run_torch(self, op):
        if op == "forward":
            return F.conv2d(self.tx, self.tw, self.tb, self.stride, self.pad, 1, self.groups)
        if op == "data grad":
            return self._backward([True, False, False])
        return self._backward([False, True, True])

    def check(self):
        """Both libraries computed the same thing (max |a - e| / max |e| <= 1e-3)."""
        def compare(what, ours, ref):
            ref = ref.numpy() if isinstance(ref, torch.Tensor) else ref
            err = float(np.max(np.abs(ours - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
            if not err <= 1e-3:
                raise RuntimeError(f"{self.label}: mpsgrad and PyTorch disagree on {what} "
                                   f"(relative error {err:.2e}); the timings would not compare like with like")

        ys, _ = self.run_mpsgrad("forward")
        compare("forward", m.batch_to_numpy(ys).transpose(0, 3, 1, 2), self.run_torch("forward"))
        dxs = self.run_mpsgrad("data grad")
        compare("data gradient", m.batch_to_numpy(dxs).transpose(0, 3, 1, 2), self.run_torch("data grad")[0])
        self.run_mpsgrad("weight+bias grad")
        _, dw, db = self.run_torch("weight+bias grad")
        state = self.states[0]
        compare("weight gradient", np.array(state.gradient_for_weights).transpose(0, 3, 1, 2), dw)
        compare("bias gradient", np.array(state.gradient_for_biases), db)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="mpsgrad device name (default: cpu)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed iterations per op and library (default 15, --quick 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 2, --quick 1)")
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats (~5-10 s)")
    parser.add_argument("--case", default="", help="only the cases whose name contains this text")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (5 if args.quick else 15)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if repeats < 1 or warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")

    cases = [spec for spec in CASES if args.case in spec[0]]
    if not cases:
        parser.error(f"--case {args.case!r} matches none of: " + ", ".join(spec[0] for spec in CASES))

    threads = _THREADS
    torch.set_num_threads(threads)
    device = m.Device(args.device)
    queue = m.CommandQueue(device)

    started = time.perf_counter()
    print(f"mpsgrad {m.__version__} on {device!r} | torch {torch.__version__} | numpy {np.__version__} | "
          f"python {platform.python_version()}")
    print(f"machine: {platform.machine()} {_cpu_model()} | threads: {threads} for both libraries "
          f"(mpsgrad: std::thread::hardware_concurrency; torch.set_num_threads({threads}))")
    if device.name != "cpu":
        print(f"note: PyTorch runs on the CPU; mpsgrad runs on '{device.name}'")
    peak_seconds = 1.0 if args.quick else 2.5
    rates = measure_peak(peak_seconds)
    peak = max(best for best, _ in rates.values())
    print(f"achievable BLAS peak (float32 2048x2048 matmul, best over {peak_seconds:g} s): {peak:.1f} GFLOP/s "
          f"[best/median: " + ", ".join(f"{k} {b:.1f}/{md:.1f}" for k, (b, md) in rates.items()) + "]")
    print(f"{warmup} warm-up + {repeats} timed iterations per op, mpsgrad and torch alternating; medians shown")
    print("ratio = torch time / mpsgrad time, median over the back-to-back pairs (> 1: mpsgrad is faster); "
          "GFLOP/s and % peak are mpsgrad's")
    print(f"load average at start: {_load()}\n")

    rng = np.random.default_rng(0)
    header = (f"{'case':<29} {'op':<16} {'mpsgrad ms':>10} {'torch ms':>9} {'ratio':>6} "
              f"{'GFLOP/s':>8} {'% peak':>7} {'torch GFLOP/s':>13}")
    print(header)
    print("-" * len(header))
    ratios = []
    for spec in cases:
        case = Case(spec, args.quick, device, queue, rng)
        case.check()
        for op in OPS:
            for _ in range(warmup):
                case.run_mpsgrad(op)
                case.run_torch(op)
            ours, theirs = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                case.run_mpsgrad(op)
                t1 = time.perf_counter()
                case.run_torch(op)
                t2 = time.perf_counter()
                ours.append(t1 - t0)
                theirs.append(t2 - t1)
            t_ours, t_torch = statistics.median(ours), statistics.median(theirs)
            # The ratio is the median of the per-iteration ratios: each pair ran back to back, so
            # load that drifts over the run (a shared machine) cancels out of it.
            ratio = statistics.median(b / a for a, b in zip(ours, theirs))
            rate, torch_rate_op = case.flops / t_ours / 1e9, case.flops / t_torch / 1e9
            ratios.append(ratio)
            print(f"{case.label:<29} {op:<16} {t_ours * 1e3:>10.2f} {t_torch * 1e3:>9.2f} {ratio:>6.2f} "
                  f"{rate:>8.1f} {100 * rate / peak:>6.1f}% {torch_rate_op:>13.1f}", flush=True)
        del case
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        print(f"\ngeometric mean ratio (torch/mpsgrad) over {len(ratios)} rows: {geo:.2f}")
    end_rates = measure_peak(peak_seconds)
    end_peak = max(best for best, _ in end_rates.values())
    print(f"BLAS peak re-measured at end: {end_peak:.1f} GFLOP/s (start: {peak:.1f})"
          + (" -- the start figure was low (a busy moment), so % peak above is overstated"
             if end_peak > 1.15 * peak else ""))
    print(f"load average at end: {_load()} | total time {time.perf_counter() - started:.1f} s")
    return 0


def _load():
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg()) + f" (1/5/15 min, {_THREADS} CPUs)"
    except OSError:
        return "unavailable"


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
