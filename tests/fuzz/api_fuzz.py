"""Property-based fuzz test of mpsgrad's public Python API (issue 8; docs/verification.md,
"Robustness and fuzzing").

A *case* is a short sequence of generated calls (1 to 4 operations from the registered families)
on one device and queue, with valid and invalid arguments. Cases run in worker subprocesses, each
with a timeout. The run fails on:
  * a signal (crash) or a hang of a worker,
  * an exception outside ValueError, TypeError, IndexError, MemoryError and mpsgrad's own
    CommandBufferError,
  * a call with a definitely invalid argument that is accepted,
  * a result that differs from the NumPy reference computed in the case.

Everything is derived from (seed, case index), so any failure is reproduced exactly with
    python3 tests/fuzz/api_fuzz.py --seed SEED --first INDEX --cases 1 --jobs 1

Families register an operation generator with @family("name"); an operation draws its arguments
from the random generator it is given, may make some of them invalid with Arg.bad(...), runs the
calls and checks results with check_close(...). Add a family by adding a function to one of the
families_*.py modules (or a new module imported below).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import List


# The family modules register their generators on import.
import families_convolution  # noqa: F401,E402
import families_elementwise  # noqa: F401,E402
import families_graph_shaping  # noqa: F401,E402
import families_training  # noqa: F401,E402
from fuzz_support import Context, FAMILIES, InvalidAccepted, WrongResult  # noqa: E402


# ---------------------------------------------------------------------------------------------
# the worker: runs cases [first, first + count) of a seed and reports each outcome as a JSON line

ALLOWED_NAMES = ("ValueError", "TypeError", "IndexError", "MemoryError")


def run_case(seed: int, index: int, m, devices) -> dict:
    r = random.Random(f"{seed}:{index}")
    device = m.Device(r.choice(devices))
    ctx = Context(m=m, device=device, queue=m.CommandQueue(device))
    names = sorted(FAMILIES)
    steps = [r.choice(names) for _ in range(r.randint(1, 4))]
    outcome = {"case": index, "calls": 0, "rejected": 0, "failure": None, "steps": steps}
    for step in steps:
        outcome["calls"] += 1
        try:
            FAMILIES[step](r, ctx)
        except (InvalidAccepted, WrongResult) as e:
            outcome["failure"] = f"{type(e).__name__} in {step}: {e}"
            return outcome
        except (ValueError, TypeError, IndexError, MemoryError, m.CommandBufferError):
            outcome["rejected"] += 1
        except BaseException as e:  # noqa: BLE001 - anything else is a wrong exception type
            outcome["failure"] = f"wrong exception type in {step}: {type(e).__name__}: {e}\n" + traceback.format_exc()
            return outcome
    return outcome


def worker(seed: int, first: int, count: int, devices) -> None:
    import warnings

    import mpsgrad as m
    warnings.simplefilter("ignore")
    for index in range(first, first + count):
        print(json.dumps({"start": index}), flush=True)
        print(json.dumps(run_case(seed, index, m, devices)), flush=True)


# ---------------------------------------------------------------------------------------------
# the driver: chunks of cases in parallel worker subprocesses


@dataclass
class Summary:
    cases: int = 0
    calls: int = 0
    rejected: int = 0
    crashes: int = 0
    hangs: int = 0
    wrong_exception_types: int = 0
    invalid_accepted: int = 0
    wrong_results: int = 0
    failures: List[str] = field(default_factory=list)


def _run_chunk(seed, first, count, devices, timeout, summary: Summary):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed), "--first", str(first),
           "--cases", str(count), "--devices", ",".join(devices)]
    started = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        lines, rc, hung = proc.stdout.splitlines(), proc.returncode, False
        stderr = proc.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines, rc, hung, stderr = out.splitlines(), None, True, ""
    done = set()
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "start" in record:
            started = record["start"]
            continue
        done.add(record["case"])
        summary.cases += 1
        summary.calls += record["calls"]
        summary.rejected += record["rejected"]
        failure = record["failure"]
        if failure:
            if failure.startswith("wrong exception"):
                summary.wrong_exception_types += 1
            elif failure.startswith("InvalidAccepted"):
                summary.invalid_accepted += 1
            else:
                summary.wrong_results += 1
            summary.failures.append(f"seed {seed} case {record['case']} {record['steps']}: {failure}")
    if hung or rc != 0:
        where = started if started is not None and started not in done else first
        kind = "hang" if hung else f"crash (exit {rc})"
        if hung:
            summary.hangs += 1
        else:
            summary.crashes += 1
        summary.failures.append(f"seed {seed} case {where}: {kind}\n{stderr[-3000:]}")
        # the cases after the one that died still run
        rest = first + count - (where + 1)
        if rest > 0:
            _run_chunk(seed, where + 1, rest, devices, timeout, summary)


def fuzz(seed: int, cases: int, first: int = 0, jobs: int = 2, chunk: int = 250, devices=("cpu",),
         timeout: float = 300.0) -> Summary:
    from concurrent.futures import ThreadPoolExecutor

    summaries = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for start in range(first, first + cases, chunk):
            s = Summary()
            summaries.append(s)
            futures.append(pool.submit(_run_chunk, seed, start, min(chunk, first + cases - start), list(devices),
                                       timeout, s))
        for f in futures:
            f.result()
    total = Summary()
    for s in summaries:
        for name in ("cases", "calls", "rejected", "crashes", "hangs", "wrong_exception_types", "invalid_accepted",
                     "wrong_results"):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        total.failures += s.failures
    return total


def report(summary: Summary, seed: int, seconds: float) -> str:
    return (f"mpsgrad API fuzz: seed {seed}, {summary.cases} cases, {summary.calls} calls "
            f"({summary.rejected} rejected with an allowed exception) in {seconds:.0f} s; "
            f"crashes {summary.crashes}, hangs {summary.hangs}, wrong exception types "
            f"{summary.wrong_exception_types}, invalid calls accepted {summary.invalid_accepted}, "
            f"wrong results {summary.wrong_results}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed (printed)")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0, help="index of the first case (to reproduce one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--devices", default=None, help="comma-separated devices (default: all available)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    if args.devices:
        devices = args.devices.split(",")
    else:
        import mpsgrad as m
        devices = list(m.Device.available())
    if args.worker:
        worker(seed, args.first, args.cases, devices)
        return 0
    print(f"mpsgrad API fuzz: seed {seed} (reproduce with --seed {seed}), devices {devices}", flush=True)
    start = time.monotonic()
    summary = fuzz(seed, args.cases, args.first, args.jobs, devices=devices)
    print(report(summary, seed, time.monotonic() - start))
    for failure in summary.failures[:20]:
        print("FAILURE:", failure)
    return 1 if summary.failures else 0





if __name__ == "__main__":
    sys.exit(main())
