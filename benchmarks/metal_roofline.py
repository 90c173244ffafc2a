#!/usr/bin/env python3
"""A roofline model of mpsgrad's Metal kernels on Apple GPUs, before anyone times them on a Mac.

For every kernel dispatch of the benchmark shapes (benchmarks/the convolution benchmark's (suite_convolution.py) convolutions
plus element-wise ops on the activations they produce), this prints

  FLOPs          useful floating-point operations (a multiply-add is 2; bias and neuron per output)
  DRAM bytes     compulsory device traffic: every input read once, every output written once
  tile bytes     what the kernel loads from device memory given its tiling, with no reuse between
                 threadgroups (an upper bound; Apple GPUs' caches serve most of the re-reads)
  tg bytes       threadgroup-memory bytes written + read
  threads / threadgroups / barriers (threadgroup barrier releases) / simd ops
  AI             arithmetic intensity, FLOPs per DRAM byte
  time           the roofline time on M1, M2 Pro and M3 Max: max(FLOPs / peak FP32, DRAM bytes /
                 bandwidth), i.e. the best any kernel could do; measured times above it show what
                 is left to gain.

Where the counts come from. threads, threadgroups, barriers and simd ops are the Metal emulation's
counters (tests/metal_emulation: mtlemu_kernel_stats) when run with --measure on the emulation
build: every op is executed once on Device("metal") of the Linux emulation and the counters of
each kernel are read back and checked against the model's (all rows agree in the tree this was
written in). FLOPs and bytes follow from each
kernel's algorithm and tiling as written in metal/*.metal (the emulator does not count
individual arithmetic instructions or memory accesses); the model states them per kernel below.

Peak figures (published; FP32 = ALUs x 2 x clock):
  M1 (8-core GPU)       2.6 TFLOPS   68.25 GB/s   Apple newsroom 2020-11-10 "Apple unleashes M1"; M1 memory: LPDDR4X-4266, 128-bit
  M2 Pro (19-core GPU)  6.8 TFLOPS   200 GB/s     Apple newsroom 2023-01-17 "Apple unveils M2 Pro and M2 Max"
  M3 Max (40-core GPU)  16.4 TFLOPS  400 GB/s     Apple newsroom 2023-10-30 "Apple unveils M3, M3 Pro, and M3 Max"
(The TFLOPS of M2 Pro and M3 Max are 19 x 128 x 2 x 1.398 GHz and 40 x 128 x 2 x 1.6 GHz; Apple
quotes bandwidth for all three and TFLOPS for M1.)

Run:  python benchmarks/metal_roofline.py [--quick] [--measure]   (--measure needs PYTHONPATH to
      hold an mpsgrad built with -DMPSGRAD_METAL_EMULATION=ON)
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
from dataclasses import dataclass, field

GPUS = [  # name, FP32 FLOP/s, bytes/s
    ("M1", 2.6e12, 68.25e9),
    ("M2 Pro", 6.8e12, 200e9),
    ("M3 Max", 16.4e12, 400e9),
]
F = 4  # bytes per float

# (name, N (full), N (--quick), Cin, H, W, Cout, k, stride, depthwise): the convolution benchmark's (suite_convolution.py) CASES
CONV_CASES = [
    ("3x3 64->64 56x56", 8, 2, 64, 56, 56, 64, 3, 1, False),
    ("3x3 128->128 28x28", 8, 2, 128, 28, 28, 128, 3, 1, False),
    ("3x3 s2 64->128 56x56", 8, 2, 64, 56, 56, 128, 3, 2, False),
    ("1x1 256->64 56x56", 8, 2, 256, 56, 56, 64, 1, 1, False),
    ("dw 3x3 128 56x56", 8, 2, 128, 56, 56, 128, 3, 1, True),
    ("5x5 32->64 16x16", 32, 8, 32, 16, 16, 64, 5, 1, False),
]
# Element-wise ops on the first two cases' activations: (name, N, N quick, H, W, C)
ELEMENTWISE_CASES = [
    ("56x56x64", 8, 2, 56, 56, 64),
    ("28x28x128", 8, 2, 28, 28, 128),
]

# Tile sizes of metal/convolution.metal (conv enum) and the element-wise kernels.
TILE_M, TILE_N, TILE_K, GEMM_THREADS = 32, 32, 16, 64
WG_TILE_O, WG_TILE_C, WG_THREADS, WG_PIXELS = 8, 16, 128, 32
REDUCE_THREADS = 256
ELEMENTWISE_TG = 256  # KernelDispatch::threadgroupFor caps element-wise threadgroups at 256


def cdiv(a, b):
    return -(-a // b)


@dataclass
class Dispatch:
    op: str
    kernel: str
    flops: float
    dram: float        # compulsory bytes
    tile: float        # bytes loaded + stored by the kernel's tiling
    tg_bytes: float = 0.0
    threads: int = 0
    threadgroups: int = 0
    barriers: int = 0
    simd_ops: int = 0
    measured: dict = field(default_factory=dict)


def gemm_conv(op, P, G, cig, cog, K, in_bytes, w_bytes, out_bytes, kernel):
    """An implicit-GEMM kernel: P rows, G groups of cog columns, reduction K, 32 x 32 tiles of
    64 threads, 16-deep staging with two barriers per step."""
    tiles = cdiv(P, TILE_M) * cdiv(cog, TILE_N) * G
    steps = cdiv(K, TILE_K)
    flops = 2.0 * P * G * cog * K
    tile = F * (cdiv(cog, TILE_N) * G * P * K + cdiv(P, TILE_M) * G * cog * K) + out_bytes
    tg = tiles * steps * (2 * TILE_K * TILE_M * F + GEMM_THREADS * TILE_K * 2 * 4 * F)
    return Dispatch(op, kernel, flops, in_bytes + w_bytes + out_bytes, tile, tg, tiles * GEMM_THREADS, tiles,
                    tiles * steps * 2)


def threadgroups_for(grid, width=32, limit=ELEMENTWISE_TG):
    """KernelDispatch::threadgroupFor (metal_dispatch.cpp): one simdgroup wide along x where the
    grid allows, then filled along y and z, at most `limit` threads."""
    x = max(1, min(grid[0], width))
    y = max(1, min(grid[1], limit // x))
    z = max(1, min(grid[2], limit // (x * y)))
    return cdiv(grid[0], x) * cdiv(grid[1], y) * cdiv(grid[2], z)


def elementwise(op, kernel, grid, flops, dram, tile=None):
    threads = grid[0] * grid[1] * grid[2]
    return Dispatch(op, kernel, flops, dram, dram if tile is None else tile, 0.0, threads, threadgroups_for(grid), 0)


def phase_taps(k, s):
    """Taps of a k-tap axis that land on samples of a stride-s gradient, per stride phase (dilation
    1): k mod s phases get ceil(k / s) taps, the others floor(k / s)."""
    return [cdiv(k, s)] * (k % s) + [k // s] * (s - k % s)


def phase_rows(n, s):
    return [n // s + (1 if r < n % s else 0) for r in range(s)]


def weight_gradient_split(pixels, tiles):
    """metal_convolution.cpp weightGradientSplit: (slices, pixels per slice)."""
    steps = cdiv(pixels, WG_PIXELS)
    wanted = max(1, min(max(1, steps // 8), 512 // max(tiles, 1)))
    per = max(1, cdiv(steps, wanted))
    return max(1, cdiv(steps, per)), per * WG_PIXELS


def conv_dispatches(case, quick):
    """The dispatches the host encodes for one forward + gradient (data, weights, bias) of the
    batch: the forward is one dispatch over the batch; CNNConvolutionGradient encodes the
    gradients image by image (batch 1, accumulating dW and dB), so N dispatches of each."""
    name, n_full, n_quick, cin, H, W, cout, k, s, dw = case
    N = n_quick if quick else n_full
    Ho, Wo = cdiv(H, s), cdiv(W, s)  # SAME padding
    P_img, P_out = Ho * Wo, N * Ho * Wo
    x_b, y_b = F * N * H * W * cin, F * P_out * cout
    taps = k * k
    out = []
    if dw:
        w_b = F * cout * taps
        out.append(elementwise(f"{name} forward", "convolution_forward_depthwise", (cdiv(cout, 4), Wo, N * Ho),
                               2.0 * P_out * cout * taps + P_out * cout, x_b + w_b + y_b,
                               F * P_out * cout * taps * 2 + y_b))
        dg = elementwise(f"{name} data grad", "convolution_data_gradient_depthwise", (cdiv(cin, 4), W, H),
                         2.0 * P_out * cout * taps, y_b + w_b + x_b, F * N * H * W * cin * taps * 2 + x_b)
        dg.threads *= N
        dg.threadgroups *= N
        out.append(dg)
        tgs = cdiv(cout, 4) * taps
        out.append(Dispatch(f"{name} weight grad", "convolution_weight_gradient_depthwise", 2.0 * P_out * cout * taps,
                            x_b + y_b + N * w_b, F * 2 * P_out * cout * taps + 2 * N * w_b, 0.0,
                            N * tgs * REDUCE_THREADS, N * tgs, N * tgs))
    else:
        K = taps * cin
        w_b = F * cout * K
        out.append(gemm_conv(f"{name} forward", P_out, 1, cin, cout, K, x_b, w_b, y_b, "convolution_forward"))
        # Data gradient, per image: one GEMM layer per stride phase, sized by the largest phase;
        # the threadgroups of smaller phases past their rows return at once.
        grid_rows = cdiv(H, s) * cdiv(W, s)
        n_tiles = cdiv(cin, TILE_N)
        tgs = barriers = tg_bytes = tile_b = 0
        for ty, ry in zip(phase_taps(k, s), phase_rows(H, s)):
            for tx, rx in zip(phase_taps(k, s), phase_rows(W, s)):
                kk = ty * tx * cout
                working = cdiv(ry * rx, TILE_M) * n_tiles
                steps = cdiv(kk, TILE_K)
                tgs += cdiv(grid_rows, TILE_M) * n_tiles
                barriers += working * 2 * steps
                tg_bytes += working * steps * (2 * TILE_K * TILE_M * F + GEMM_THREADS * TILE_K * 2 * 4 * F)
                tile_b += F * (n_tiles * ry * rx * kk + cdiv(ry * rx, TILE_M) * cin * kk)
        out.append(Dispatch(f"{name} data grad", "convolution_data_gradient", 2.0 * P_out * cout * K,
                            y_b + w_b + x_b, N * tile_b + x_b, N * tg_bytes, N * tgs * GEMM_THREADS, N * tgs,
                            N * barriers))
        # Weight gradient, per image: dW tiles of 8 output channels x 16 weight-row columns (128
        # threads), pixels in steps of 32, split into slices when the tiles alone are few.
        tiles = cdiv(K, WG_TILE_C) * cdiv(cout, WG_TILE_O)
        slices, pps = weight_gradient_split(P_img, tiles)
        steps = sum(cdiv(min(P_img, (i + 1) * pps) - i * pps, WG_PIXELS) for i in range(slices))
        # per step: stage 32 pixels x (8 E + 16 X) floats, then each of the 128 threads reads one X
        # quad and two E quads; two barriers
        step_tg = F * WG_PIXELS * (WG_TILE_O + WG_TILE_C) + WG_THREADS * 3 * 4 * F
        tile_b = F * tiles * P_out * (WG_TILE_O + WG_TILE_C) + N * (slices + 1) * w_b
        out.append(Dispatch(f"{name} weight grad", "convolution_weight_gradient", 2.0 * P_out * cout * K,
                            x_b + y_b + w_b, tile_b, N * tiles * steps * step_tg, N * tiles * slices * WG_THREADS,
                            N * tiles * slices, N * tiles * steps * 2))
        if slices > 1:
            count = cout * K
            d = elementwise(f"{name} weight grad", "sum_slices", (cdiv(count, 4), 1, 1), float(N * slices * count),
                            F * N * (slices + 2) * count)
            d.threads *= N
            d.threadgroups *= N
            out.append(d)
    bt = cdiv(cout, 4)
    out.append(Dispatch(f"{name} bias grad", "convolution_bias_gradient", float(P_out * cout), y_b + F * cout,
                        y_b + 2 * N * F * cout, 0.0, N * bt * REDUCE_THREADS, N * bt, N * bt))
    return out


def per_image(d, n):
    """`d` (the counts of one image) dispatched once per image of an n-image batch; FLOPs and
    bytes are already the batch's."""
    d.threads *= n
    d.threadgroups *= n
    return d


def elementwise_dispatches(case, quick):
    _, n_full, n_quick, H, W, C = case
    N = n_quick if quick else n_full
    name = f"{N}x{H}x{W}x{C}"
    elems = N * H * W * C
    b = F * elems
    # One thread per channel quad of 4 consecutive pixels (the element-wise kernels' shared
    # geometry); the arithmetic kernel classes dispatch image by image.
    quad_grid = (cdiv(C, 4), W, N * H)
    arith_grid = (cdiv(C, 4), cdiv(W, 4), N * H)
    pixels = N * H * W
    # softmax over C channels: max, exp and sum, divide (exp counted as one operation); more than
    # 16 channels: one simdgroup per pixel, 4 pixels per threadgroup of 128 (metal_softmax.cpp)
    if C > 16:
        groups = cdiv(pixels, 4)
        softmax = Dispatch(f"{name} softmax", "softmax_forward_simd", 5.0 * elems, 2 * b, 2 * b, 0.0, groups * 128,
                           groups, 0, 2 * pixels)  # simd_max and simd_sum per pixel
    else:
        softmax = elementwise(f"{name} softmax", "softmax_forward", (pixels, 1, 1), 5.0 * elems, 2 * b)
    return [
        elementwise(f"{name} relu forward", "neuron_forward", arith_grid, float(elems), 2 * b),
        elementwise(f"{name} relu gradient", "neuron_gradient", arith_grid, float(elems), 3 * b),
        per_image(elementwise(f"{name} add", "arithmetic_forward", (cdiv(C, 4), cdiv(W, 4), H), float(elems),
                              3 * b), N),
        per_image(elementwise(f"{name} add gradient (primary)", "arithmetic_gradient_direct", (cdiv(C, 4), W, H),
                              float(elems), 2 * b), N),
        # softmax over C channels: max, exp and sum, divide (exp counted as one operation)
        softmax,
    ]


def emulator_counters():
    """{kernel: (dispatches, threadgroups, threads, barriers, simdOps)} from the emulation build."""
    import mpsgrad as m
    lib = ctypes.CDLL(m._mpsgrad.__file__)
    if not hasattr(lib, "mtlemu_kernel_stats"):
        sys.exit("--measure needs the Metal emulation build of mpsgrad (-DMPSGRAD_METAL_EMULATION=ON)")
    lib.mtlemu_kernel_stats.restype = ctypes.c_size_t
    size = lib.mtlemu_kernel_stats(None, 0) + 1
    buf = ctypes.create_string_buffer(size)
    lib.mtlemu_kernel_stats(buf, size)
    lib.mtlemu_reset_kernel_stats()
    out = {}
    for line in buf.value.decode().splitlines():
        name, *nums = line.split()
        out[name] = tuple(int(v) for v in nums)
    return out


def run_conv_on_emulator(case, quick):
    """Runs forward, data and weight gradients of `case` once on the emulated Metal device and
    returns the emulator's per-kernel counters."""
    import numpy as np
    import mpsgrad as m
    name, n_full, n_quick, cin, H, W, cout, k, s, dw = case
    N = n_quick if quick else n_full
    dev = m.Device("metal")
    q = m.CommandQueue(dev)
    if dw:
        desc = m.CNNDepthWiseConvolutionDescriptor(k, k, cin, cout)
        w = np.zeros((cout, k, k, 1), np.float32)
    else:
        desc = m.CNNConvolutionDescriptor(kernel_width=k, kernel_height=k, input_feature_channels=cin,
                                          output_feature_channels=cout)
        w = np.zeros((cout, k, k, cin), np.float32)
    desc.stride_in_pixels_x = desc.stride_in_pixels_y = s
    ds = m.CNNConvolutionWeightsDataSource(desc, w, np.zeros(cout, np.float32))
    conv, grad = m.CNNConvolution(dev, ds), m.CNNConvolutionGradient(dev, ds)
    xs = m.batch_from_numpy(np.ones((N, H, W, cin), np.float32), dev)
    emulator_counters()  # reset
    cb = q.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    es = m.batch_from_numpy(np.ones((N,) + tuple(ys[0].shape[1:]), np.float32), dev)
    grad.encode_batch(cb, es, xs, states)
    cb.commit()
    cb.wait_until_completed()
    return emulator_counters()


def run_elementwise_on_emulator(case, quick):
    """Runs the element-wise ops of `case` once on the emulated Metal device; returns
    {kernel: counters}."""
    import numpy as np
    import mpsgrad as m
    _, n_full, n_quick, H, W, C = case
    N = n_quick if quick else n_full
    dev = m.Device("metal")
    q = m.CommandQueue(dev)
    a = np.linspace(-1.0, 1.0, N * H * W * C, dtype=np.float32).reshape(N, H, W, C)
    xs, ys, gs = (m.batch_from_numpy(a, dev) for _ in range(3))
    relu = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
    emulator_counters()  # reset
    cb = q.command_buffer()
    _, states = m.CNNNeuron(dev, relu).encode_batch(cb, xs, destination_state_is_temporary=False)
    m.CNNNeuronGradient(dev, relu).encode_batch(cb, gs, xs, states)
    _, add_states = m.CNNAdd(dev).encode_batch(cb, xs, ys, destination_state_is_temporary=False)
    m.CNNAddGradient(dev, False).encode_batch(cb, gs, ys, add_states)
    m.CNNSoftMax(dev).encode_batch(cb, xs)
    cb.commit()
    cb.wait_until_completed()
    return emulator_counters()


def fmt_count(v):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.0f}"


def fmt_time(seconds):
    return f"{seconds * 1e6:9.1f}" if seconds < 1 else f"{seconds:9.3f}s"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the convolution benchmark's (suite_convolution.py) --quick batch sizes")
    ap.add_argument("--measure", action="store_true",
                    help="run the convolutions on the emulation build and report its counters")
    args = ap.parse_args(argv)

    dispatches = []
    for case in CONV_CASES:
        ds = conv_dispatches(case, args.quick)
        if args.measure:
            measured = run_conv_on_emulator(case, args.quick)
            for d in ds:
                d.measured = dict(zip(("dispatches", "threadgroups", "threads", "barriers", "simd"),
                                      measured.get(d.kernel, (0, 0, 0, 0, 0))))
        dispatches += ds
    for case in ELEMENTWISE_CASES:
        ds = elementwise_dispatches(case, args.quick)
        if args.measure:
            measured = run_elementwise_on_emulator(case, args.quick)
            for d in ds:
                d.measured = dict(zip(("dispatches", "threadgroups", "threads", "barriers", "simd"),
                                      measured.get(d.kernel, (0, 0, 0, 0, 0))))
        dispatches += ds

    print("mpsgrad Metal roofline model (%s batch sizes); time = max(FLOPs/peak, DRAM bytes/bandwidth) in us"
          % ("--quick" if args.quick else "full"))
    print("peaks: " + "; ".join(f"{n} {p / 1e12:.2f} TFLOPS FP32, {bw / 1e9:.2f} GB/s" for n, p, bw in GPUS))
    print("sources: Apple newsroom (M1 2020-11-10: 2.6 TFLOPS; M2 Pro 2023-01-17: 200 GB/s; M3 Max 2023-10-30: "
          "400 GB/s); M1 68.25 GB/s = LPDDR4X-4266 x 128 bit; M2 Pro / M3 Max FP32 = GPU cores x 128 ALUs x 2 x clock")
    header = (f"{'op':34} {'kernel':38} {'FLOPs':>8} {'DRAM B':>8} {'tile B':>8} {'tg B':>8} {'threads':>8} "
              f"{'tgroups':>8} {'barriers':>8} {'AI':>7} " + " ".join(f"{n + ' us':>10}" for n, _, _ in GPUS))
    print(header)
    print("-" * len(header))
    totals = [0.0] * len(GPUS)
    for d in dispatches:
        ai = d.flops / d.dram if d.dram else math.inf
        times = [max(d.flops / p, d.dram / bw) for _, p, bw in GPUS]
        totals = [t + x for t, x in zip(totals, times)]
        print(f"{d.op:34} {d.kernel:38} {fmt_count(d.flops):>8} {fmt_count(d.dram):>8} {fmt_count(d.tile):>8} "
              f"{fmt_count(d.tg_bytes):>8} {fmt_count(d.threads):>8} {fmt_count(d.threadgroups):>8} "
              f"{fmt_count(d.barriers):>8} {ai:7.2f} " + " ".join(f"{fmt_time(t):>10}" for t in times))
        if d.measured:
            mm = d.measured
            agree = ("agrees" if (mm["threads"], mm["threadgroups"], mm["barriers"]) ==
                     (d.threads, d.threadgroups, d.barriers) else "DIFFERS")
            print(f"{'':34} {'  emulator counted':38} {mm['dispatches']} dispatch(es), threads {fmt_count(mm['threads'])}, threadgroups "
                  f"{fmt_count(mm['threadgroups'])}, barriers {fmt_count(mm['barriers'])}, simd ops "
                  f"{fmt_count(mm['simd'])} ({agree} with the model)")
    print("-" * len(header))
    print(f"{'total':34} {'':38} " + " " * 81 + " ".join(f"{fmt_time(t):>10}" for t in totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
