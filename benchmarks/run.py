#!/usr/bin/env python3
"""mpsgrad against PyTorch, every op family, side by side in one run.

Each row times one op (forward or gradient) of mpsgrad and its PyTorch equivalent on the same
machine, in the same run, with the same thread count (mpsgrad.set_num_threads and
torch.set_num_threads), alternating blocks of back-to-back mpsgrad and PyTorch iterations (a short
pause before each block lets the other library's threads fall asleep) so that load from other
processes hits both alike. Before timing, each case checks that both libraries compute
the same values, so the rows compare like with like.

Per row: median times, ratio = PyTorch time / mpsgrad time (the median of the ratios of the
back-to-back pairs; > 1 means mpsgrad is faster), mpsgrad's GFLOP/s (convolutions) or GB/s
(element-wise ops), and that rate as a fraction of the machine's peak measured at start:
float32 SGEMM (2048 x 2048 matmul, best of NumPy's BLAS and PyTorch) and copy bandwidth (a large
NumPy copy, bytes read + written). Results go to benchmarks/results/ as JSON and markdown.

The rows: suite_convolution.py, suite_convolution_variants.py, suite_elementwise.py, suite_training.py,
suite_normalization.py, suite_batch_normalization.py, suite_shaping.py (reshape, pad, Gram matrix,
spatial mean) and suite_yolo.py (YOLO loss) (each documents what it calls).

    python benchmarks/run.py                # everything, a few minutes on 2 cores
    python benchmarks/run.py --quick        # smaller batches, fewer repeats
    python benchmarks/run.py --only "relu"  # rows whose "family label op" contains the text
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import time


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed pairs of blocks per row (default 7, --quick 3)")
    parser.add_argument("--block", type=int, default=3,
                        help="back-to-back iterations of one library per block (default 3)")
    parser.add_argument("--settle-ms", type=float, default=10.0,
                        help="pause before each block, so the other library's threads fall asleep (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed pairs first (default 2, --quick 1)")
    parser.add_argument("--only", action="append", default=[],
                        help="only rows whose 'family label op' contains this text (repeatable: any of them)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both libraries (default: mpsgrad.get_num_threads())")
    parser.add_argument("--device", default="cpu", help="mpsgrad device (default cpu)")
    parser.add_argument("--peak-seconds", type=float, default=None,
                        help="time spent measuring each peak (default 2.5, --quick 1)")
    parser.add_argument("--output-dir", default=str(pathlib.Path(__file__).resolve().parent / "results"),
                        help="where the JSON and markdown results go (default benchmarks/results)")
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    args = parser.parse_args(argv)
    args.repeats = args.repeats if args.repeats is not None else (3 if args.quick else 7)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.peak_seconds = args.peak_seconds if args.peak_seconds is not None else (1.0 if args.quick else 2.5)
    if args.repeats < 1 or args.block < 1 or args.warmup < 0 or args.peak_seconds <= 0 or args.settle_ms < 0:
        parser.error("--repeats and --block must be >= 1, --warmup and --settle-ms >= 0, --peak-seconds > 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


ARGS = _parse(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None and ARGS.threads:
    # NumPy's BLAS reads its thread count when it loads: set it before the imports.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MPSGRAD_NUM_THREADS"):
        os.environ[_var] = str(ARGS.threads)



def _keep_freed_memory():
    """Tells glibc's malloc to keep freed memory instead of returning it to the system.

    Freed blocks of megabytes go back to the system by default (above malloc's mmap threshold, or
    trimmed from the top of its heap), and the next tensor of that size then page-faults on every
    4 KB page it writes: more than an element-wise op itself costs. mpsgrad's CPU backend recycles
    its own buffers (docs/performance.md, "Buffer recycling"); PyTorch relies on malloc, whose
    behaviour also changes with what else the process has allocated. Blocks below 32 MiB from the
    heap, never trimmed: PyTorch's tensors then land on resident memory as they would in its best
    case, so the comparison does not flatter mpsgrad. Returns what was set (for the results).
    """
    if not sys.platform.startswith("linux"):
        return "system default"
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold = -1, -3
        if libc.mallopt(m_trim_threshold, 1 << 30) == 1 and libc.mallopt(m_mmap_threshold, 32 << 20) == 1:
            return "glibc mallopt: trim threshold 1 GiB, mmap threshold 32 MiB"
    except (OSError, AttributeError):
        pass
    return "system default"


MALLOC = _keep_freed_memory() if ARGS is not None else "system default"

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("benchmarks/run.py compares against PyTorch: pip install torch (the project uses torch==2.13.0, CPU)")

import mpsgrad as m  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import suite_batch_normalization  # noqa: E402
import suite_convolution  # noqa: E402
import suite_convolution_variants  # noqa: E402
import suite_elementwise  # noqa: E402
import suite_normalization  # noqa: E402
import suite_shaping  # noqa: E402
import suite_training  # noqa: E402
import suite_yolo  # noqa: E402

SUITES = (suite_convolution, suite_convolution_variants, suite_elementwise, suite_training, suite_normalization,
          suite_batch_normalization, suite_shaping, suite_yolo)


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _times(fn):
    """(wall seconds, CPU seconds of the whole process: every thread's)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def measure_peaks(seconds, quick):
    """(SGEMM GFLOP/s, copy GB/s, details): the best rates seen over about `seconds` each.
    The best, not the median: other processes and clock ramp-up only ever lower a sample."""
    n = 1024 if quick else 2048
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    gemm = {"numpy": lambda: a @ b, "torch": lambda: ta @ tb}
    elements = (8 if quick else 32) << 20  # 32 or 128 MB per array: far beyond the caches
    src, dst = np.ones(elements, np.float32), np.empty(elements, np.float32)
    tsrc, tdst = torch.from_numpy(src), torch.from_numpy(dst)
    copy = {"numpy": lambda: np.copyto(dst, src), "torch": lambda: tdst.copy_(tsrc)}
    result = {}
    for kind, fns, amount in (("sgemm", gemm, 2.0 * n ** 3), ("copy", copy, 8.0 * elements)):
        times = {name: [] for name in fns}
        for fn in fns.values():
            fn()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or min(len(t) for t in times.values()) < 3:
            for name, fn in fns.items():
                times[name].append(_time(fn))
        result[kind] = {name: amount / min(t) / 1e9 for name, t in times.items()}
    return max(result["sgemm"].values()), max(result["copy"].values()), result


def _compare(label, what, ours, ref):
    ref = ref.numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    err = float(np.max(np.abs(ours - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    if not err <= 1e-3:
        raise RuntimeError(f"{label}: mpsgrad and PyTorch disagree on {what} (relative error {err:.2e}); "
                           "the timings would not compare like with like")


def _settle(seconds):
    """Lets the other library's idle threads fall asleep before the next one is timed.

    PyTorch's OpenMP team spins for a while after each parallel region (libgomp's default wait
    policy) before it sleeps; an op timed right after a PyTorch op shares the cores with those
    spinning threads. mpsgrad's pool sleeps on a condition variable at once. A short pause at
    each switch of library lets either one run as it would in a program that uses only it."""
    if seconds > 0:
        time.sleep(seconds)


def time_row(mine, theirs, warmup, repeats, block=3, settle=0.01):
    """Medians and ratios of `repeats` pairs of blocks: `block` back-to-back mpsgrad iterations,
    a pause, `block` back-to-back PyTorch iterations, a pause. Each library runs its iterations
    back to back, as in a training loop that uses only it (its threads warm, the other's asleep);
    the blocks alternate so that drifting load from other processes hits both alike. A block's
    time is the median of its iterations; the ratio is the median of the per-pair ratios."""
    for _ in range(warmup):
        mine()
        theirs()
    ours, their = [], []
    for _ in range(repeats):
        for fn, out in ((mine, ours), (theirs, their)):
            _settle(settle)
            samples = [_times(fn) for _ in range(block)]
            out.append((statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)))
    # The median of per-pair ratios: each pair ran back to back, so drifting load cancels out.
    ratio = statistics.median(b[0] / a[0] for a, b in zip(ours, their))
    # The same with process CPU time: on an oversubscribed machine wall time mostly measures
    # waiting for a core (and every thread hand-off pays it), CPU time much less so.
    cpu_ratio = statistics.median(b[1] / max(a[1], 1e-9) for a, b in zip(ours, their))
    return (statistics.median(a[0] for a in ours), statistics.median(b[0] for b in their), ratio,
            cpu_ratio)


def geomean(values):
    values = [v for v in values if v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


GROUPS = {  # summary lines: family -> group
    "convolution": "convolution (forward + data + weight gradients)",
    "fc": "fully connected (forward + data + weight gradients)",
    "transpose": "transposed convolution (forward + data + weight gradients)",
    "neuron": "element-wise (neuron, arithmetic)",
    "arithmetic": "element-wise (neuron, arithmetic)",
    "softmax": "softmax (forward + gradient)",
    "loss": "loss and optimizer",
    "optimizer": "loss and optimizer",
    "batch_normalization": "batch normalization training (forward, gradient)",
}


def to_markdown(meta, rows, summary):
    lines = [f"# mpsgrad vs PyTorch, {meta['date']}", "",
             f"- machine: {meta['machine']}, {meta['threads']} threads for both libraries",
             f"- mpsgrad {meta['mpsgrad']} (BLAS: {meta['blas']}), torch {meta['torch']}, numpy {meta['numpy']}",
             f"- peak: SGEMM {meta['peak_gflops']:.1f} GFLOP/s, copy {meta['peak_gbps']:.1f} GB/s "
             f"(best seen at start)",
             f"- load average start / end: {meta['load_start']} / {meta['load_end']}",
             f"- malloc: {meta.get('malloc', 'system default')}",
             f"- {meta['warmup']} warm-up pairs, then {meta['repeats']} pairs of blocks of {meta.get('block', 1)} "
             f"back-to-back iterations per library, {meta.get('settle_ms', 0):g} ms pause before each block"
             + (", --quick" if meta["quick"] else ""), "",
             "ratio = PyTorch time / mpsgrad time (median over the pairs of blocks; > 1: mpsgrad faster); "
             "CPU-time ratio: the same with process CPU time (all threads); rate and % peak are mpsgrad's.", "",
             "| family | case | op | mpsgrad ms | torch ms | ratio | CPU-time ratio | rate | % peak |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        flag = " (check failed)" if r["check_failed"] else ""
        lines.append(f"| {r['family']} | {r['case']} | {r['op']}{flag} | {r['mpsgrad_ms']:.3f} | {r['torch_ms']:.3f} | "
                     f"{r['ratio']:.2f} | {r['cpu_ratio']:.2f} | {r['rate']:.1f} {r['rate_unit']} | {r['peak_percent']:.1f}% |")
    lines += ["", "| group | rows | geometric mean ratio | geometric mean CPU-time ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {g} | {s['rows']} | {s['geomean_ratio']:.2f} | {s['geomean_cpu_ratio']:.2f} |"
              for g, s in summary.items()]
    return "\n".join(lines) + "\n"


def main(args):
    # (getattr: the suite also runs on builds older than thread control, to measure "before")
    threads = args.threads or getattr(m, "get_num_threads", os.cpu_count)()
    if hasattr(m, "set_num_threads"):
        m.set_num_threads(threads)
    torch.set_num_threads(threads)
    device = m.Device(args.device)
    queue = m.CommandQueue(device)
    started = time.perf_counter()
    load = _load()
    print(f"mpsgrad {m.__version__} on {device!r} (BLAS: {_blas()}) | torch {torch.__version__} | "
          f"numpy {np.__version__} | python {platform.python_version()}")
    print(f"machine: {platform.machine()} {_cpu_model()} | {threads} threads for both libraries | load {load}")
    print(f"malloc: {MALLOC} (both libraries)")
    peak_gflops, peak_gbps, peaks = measure_peaks(args.peak_seconds, args.quick)
    print(f"peak: SGEMM {peak_gflops:.1f} GFLOP/s, copy {peak_gbps:.1f} GB/s  "
          f"[{json.dumps(peaks, default=lambda v: round(v, 1))}]")
    print("ratio = torch time / mpsgrad time, median over back-to-back pairs (> 1: mpsgrad is faster); "
          "cpu r. = the same with process CPU time\n")

    def selected(text):
        return not args.only or any(o in text for o in args.only)

    header = (f"{'family':<11} {'case':<30} {'op':<19} {'mpsgrad ms':>10} {'torch ms':>9} {'ratio':>6} "
              f"{'cpu r.':>6} {'rate':>14} {'% peak':>7}")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    rows, mismatch = [], None
    for suite in SUITES:
        for family, label, op, unit, amount, mine, theirs, check in suite.rows(args.quick, device, queue, rng,
                                                                             selected):
            if check is not None:
                try:
                    check(_compare)
                    mismatch = None
                except RuntimeError as error:  # reported and kept in the results, not hidden
                    mismatch = str(error)
                    print(f"CHECK FAILED: {mismatch}", flush=True)
            t_ours, t_torch, ratio, cpu_ratio = time_row(mine, theirs, args.warmup, args.repeats, args.block,
                                                         args.settle_ms / 1e3)
            rate = amount / t_ours / 1e9
            peak = peak_gflops if unit == "flop" else peak_gbps
            rate_unit = "GFLOP/s" if unit == "flop" else "GB/s"
            row = dict(family=family, case=label, op=op, mpsgrad_ms=t_ours * 1e3, torch_ms=t_torch * 1e3,
                       ratio=ratio, cpu_ratio=cpu_ratio, rate=rate, rate_unit=rate_unit, peak_percent=100 * rate / peak,
                       torch_rate=amount / t_torch / 1e9, check_failed=mismatch)
            rows.append(row)
            print(f"{family:<11} {label:<30} {op:<19} {t_ours * 1e3:>10.3f} {t_torch * 1e3:>9.3f} {ratio:>6.2f} "
                  f"{cpu_ratio:>6.2f} {rate:>6.1f} {rate_unit:<7} {row['peak_percent']:>6.1f}%", flush=True)
    if not rows:
        print("no row matches --only " + " / ".join(args.only))
        return 1

    summary = {}
    for row in rows:
        if row["check_failed"] or "tiny" in row["case"]:
            continue  # a row that computed something else, or a smoke-test row, does not count
        summary.setdefault(GROUPS.get(row["family"], row["family"]), []).append(row)
    summary = {g: {"rows": len(r), "geomean_ratio": geomean([x["ratio"] for x in r]),
                   "geomean_cpu_ratio": geomean([x["cpu_ratio"] for x in r])} for g, r in summary.items()}
    print()
    if not summary:
        print("(only smoke-test 'tiny' rows ran: no geometric means)")
    for group, s in summary.items():
        print(f"geometric mean ratio, {group}: {s['geomean_ratio']:.2f} (CPU time: {s['geomean_cpu_ratio']:.2f}) "
              f"over {s['rows']} rows")
    load_end = _load()
    print(f"load average at end: {load_end} | total {time.perf_counter() - started:.1f} s")

    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                machine=f"{platform.machine()} {_cpu_model()} ({os.cpu_count()} CPUs)", threads=threads,
                mpsgrad=m.__version__, blas=_blas(), torch=torch.__version__, numpy=np.__version__,
                peak_gflops=peak_gflops, peak_gbps=peak_gbps, peaks=peaks, load_start=load, load_end=load_end,
                quick=args.quick, repeats=args.repeats, block=args.block, settle_ms=args.settle_ms,
                warmup=args.warmup, only=args.only, device=args.device,
                malloc=MALLOC)
    if not args.no_save:
        out = pathlib.Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = "run-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S") + \
            ("-quick" if args.quick else "")
        (out / f"{stem}.json").write_text(json.dumps(dict(meta=meta, rows=rows, summary=summary), indent=1))
        (out / f"{stem}.md").write_text(to_markdown(meta, rows, summary))
        print(f"results: {out / stem}.json and .md")
    return 0


def _blas():
    return m.blas_info() if hasattr(m, "blas_info") else "built-in GEMM"


def _load():
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
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
    sys.exit(main(ARGS))
