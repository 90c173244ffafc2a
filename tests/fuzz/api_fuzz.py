"""Property-based fuzz test of mpsgrad's public Python API (issues 8 and 28; docs/verification.md,
"The API fuzz test").

A *case* is a short sequence of generated calls (1 to 4 operations from the registered families)
on one device and queue, with valid arguments and arguments the docs call invalid. Cases run in
worker subprocesses; each case is classified on its own:
  * crash: the worker died (a signal or a non-zero exit) while the case ran,
  * hang: the case gave no result within --case-timeout seconds,
  * wrong exception type: an exception outside ValueError, TypeError, IndexError, MemoryError and
    mpsgrad's CommandBufferError, or an allowed one where the docs name another,
  * invalid call accepted: a call with a documented-invalid argument returned normally,
  * wrong result: a result that differs from its oracle (NumPy references, adjoint identities,
    documented outcomes).
The summary counts cases, calls, crashes, hangs, wrong exception types, accepted-invalid calls and
wrong results, and groups the failures into classes with one reproducing case each.

Everything is derived from (seed, case index), so any failure is reproduced exactly with
    python3 tests/fuzz/api_fuzz.py --seed SEED --first INDEX --cases 1 --jobs 1

Families register an operation generator with @family("name") (fuzz_support.py); an operation draws
its arguments from the random generator it is given, marks documented-invalid ones with ctx.bad(...)
or ctx.invalid, runs the calls and checks results with check_close(...) and the other checks of
fuzz_support.py. Generator parts that reach defects still being fixed are drawn through
ctx.reach(r, part, p) and can be left out with MPSGRAD_FUZZ_SKIP / --skip (KNOWN_DEFECT_PARTS).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import List, Optional


# The family modules register their generators on import.
import families_convolution  # noqa: F401,E402
import families_edges  # noqa: F401,E402
import families_elementwise  # noqa: F401,E402
import families_gradients  # noqa: F401,E402
import families_graph_shaping  # noqa: F401,E402
import families_runtime  # noqa: F401,E402
import families_serialization  # noqa: F401,E402
import families_training  # noqa: F401,E402
import families_training_extra  # noqa: F401,E402
from fuzz_support import (Context, FAMILIES, WORKER_SETUP, InvalidAccepted, PersistentResults,  # noqa: E402
                          WrongExceptionType, WrongResult)


# ---------------------------------------------------------------------------------------------
# the worker: runs cases [first, first + count) of a seed and reports each outcome as a JSON line

REJECTIONS = os.environ.get("MPSGRAD_FUZZ_REJECTIONS") == "1"  # --rejections: report why calls were refused
ALLOWED_NAMES = ("ValueError", "TypeError", "IndexError", "MemoryError", "CommandBufferError")


def run_case(seed: int, index: int, m, devices, announce=None, entering=None) -> dict:
    r = random.Random(f"{seed}:{index}")
    device = m.Device(r.choice(devices))
    ctx = Context(m=PersistentResults(m), device=device, queue=m.CommandQueue(device))
    names = sorted(FAMILIES)
    steps = [r.choice(names) for _ in range(r.randint(1, 4))]
    if announce:
        announce(steps)
    outcome = {"case": index, "calls": 0, "rejected": 0, "failure": None, "kind": None, "steps": steps}
    for step in steps:
        ctx.step = step
        if entering:
            entering(step)
        calls_before = ctx.calls
        started = time.perf_counter()
        try:
            FAMILIES[step](r, ctx)
        except WrongExceptionType as e:
            outcome["kind"] = "wrong_exception_type"
            outcome["failure"] = f"wrong exception type in {step}: {e}"
        except (InvalidAccepted, WrongResult) as e:
            outcome["kind"] = "invalid_accepted" if isinstance(e, InvalidAccepted) else "wrong_result"
            outcome["failure"] = f"{type(e).__name__} in {step}: {e}"
        except (ValueError, TypeError, IndexError, MemoryError, m.CommandBufferError) as e:
            outcome["rejected"] += 1
            if REJECTIONS:
                outcome.setdefault("rejections", []).append(f"{step}: {type(e).__name__}: {str(e)[:100]}")
        except BaseException as e:  # noqa: BLE001 - anything else is a wrong exception type
            outcome["kind"] = "wrong_exception_type"
            outcome["failure"] = (f"wrong exception type in {step}: {type(e).__name__}: {e}\n"
                                  + traceback.format_exc(limit=-3))
        outcome["calls"] += max(1, ctx.calls - calls_before)
        outcome.setdefault("seconds", {})[step] = outcome.get("seconds", {}).get(step, 0.0) + time.perf_counter() - started
        if outcome["failure"]:
            return outcome
    return outcome


def worker(seed: int, first: int, count: int, devices) -> None:
    import warnings

    import mpsgrad as m
    warnings.simplefilter("ignore")
    for setup in WORKER_SETUP:
        setup()
    for index in range(first, first + count):
        # the families are announced before they run: a crash or a hang is then charged to them
        announce = lambda steps, index=index: print(json.dumps({"start": index, "steps": steps}), flush=True)
        entering = lambda step: print(json.dumps({"in": step}), flush=True)
        print(json.dumps(run_case(seed, index, m, devices, announce, entering)), flush=True)


# ---------------------------------------------------------------------------------------------
# the driver: chunks of cases in parallel worker subprocesses; a case that runs past its timeout is
# a hang and one that kills its worker a crash, each charged to that case; the chunk then goes on
# from the next case in a fresh worker

KINDS = ("crashes", "hangs", "wrong_exception_types", "invalid_accepted", "wrong_results")
KIND_OF = {"wrong_exception_type": "wrong_exception_types", "invalid_accepted": "invalid_accepted",
           "wrong_result": "wrong_results"}


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
    rejections: List[str] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)   # family -> seconds spent in it (worker side)

    def add(self, other: "Summary") -> None:
        for name in ("cases", "calls", "rejected") + KINDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures += other.failures
        self.rejections += other.rejections
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v


def _record(summary: Summary, seed: int, record: dict) -> None:
    summary.cases += 1
    summary.calls += record["calls"]
    summary.rejected += record["rejected"]
    summary.rejections += record.get("rejections", [])
    for k, v in record.get("seconds", {}).items():
        summary.seconds[k] = summary.seconds.get(k, 0.0) + v
    if record["failure"]:
        kind = KIND_OF[record["kind"]]
        setattr(summary, kind, getattr(summary, kind) + 1)
        summary.failures.append(f"seed {seed} case {record['case']} {record['steps']}: {record['failure']}")


def _start_worker(seed, first, count, devices):
    import tempfile
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed), "--first", str(first),
           "--cases", str(count), "--devices", ",".join(devices)]
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines, err


def _run_chunk(seed, first, count, devices, case_timeout, summary: Summary):
    end = first + count
    while first < end:
        proc, lines, err = _start_worker(seed, first, end - first, devices)
        started, deadline, hung = None, time.monotonic() + case_timeout + 60, False  # (+ import time)
        steps = current = None
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                hung = True
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if line is None:
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "start" in record:
                started, deadline = record["start"], time.monotonic() + case_timeout
                steps = record["steps"]
            elif "in" in record:
                current = record["in"]
            else:
                _record(summary, seed, record)
                started = None
        rc = proc.wait()
        err.seek(0)
        stderr = err.read()[-3000:]
        err.close()
        if not hung and rc == 0 and started is None:
            return
        where = started if started is not None else first
        summary.cases += 1
        if hung:
            summary.hangs += 1
            what = f"hang (no result after {case_timeout:.0f} s)"
        else:
            summary.crashes += 1
            what = f"crash (exit {rc})"
        if started is None:
            steps = "(before its first case)"
        else:
            what += f" in {current}"
        summary.failures.append(f"seed {seed} case {where} {steps}: {what}\n{stderr}")
        first = where + 1  # the cases after the one that died still run


def fuzz(seed: int, cases: int, first: int = 0, jobs: int = 2, chunk: int = 250, devices=("cpu",),
         case_timeout: float = 30.0) -> Summary:
    from concurrent.futures import ThreadPoolExecutor

    summaries = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for start in range(first, first + cases, chunk):
            s = Summary()
            summaries.append(s)
            futures.append(pool.submit(_run_chunk, seed, start, min(chunk, first + cases - start), list(devices),
                                       case_timeout, s))
        for f in futures:
            f.result()
    total = Summary()
    for s in summaries:
        total.add(s)
    return total


def report(summary: Summary, seed: int, seconds: float) -> str:
    return (f"mpsgrad API fuzz: seed {seed}, {summary.cases} cases, {summary.calls} calls "
            f"({summary.rejected} rejected with an allowed exception) in {seconds:.0f} s; "
            f"crashes {summary.crashes}, hangs {summary.hangs}, wrong exception types "
            f"{summary.wrong_exception_types}, invalid calls accepted {summary.invalid_accepted}, "
            f"wrong results {summary.wrong_results}")


def signatures(summary: Summary) -> List[str]:
    """The failures grouped by (kind, family, first words of the message), most frequent first."""
    import collections
    import re
    groups = collections.Counter()
    first_case = {}
    for f in summary.failures:
        head = f.splitlines()[0]
        key = re.sub(r"^seed \d+ case \d+ \[[^]]*\]: ", "", head)
        key = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", key)[:140]
        groups[key] += 1
        first_case.setdefault(key, head.split(" [")[0])
    return [f"{n:5d} x {key}   (e.g. {first_case[key]})" for key, n in groups.most_common()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed (printed)")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0, help="index of the first case (to reproduce one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--devices", default=None, help="comma-separated devices (default: all available)")
    parser.add_argument("--case-timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    parser.add_argument("--skip", default=None, help="comma-separated generator parts to leave out "
                        "(family.part, as in MPSGRAD_FUZZ_SKIP; fuzz_support.KNOWN_DEFECT_PARTS lists them)")
    parser.add_argument("--rejections", action="store_true", help="list the refused calls by family and message "
                        "(to see that generators are refused for the reasons they mean)")
    parser.add_argument("--profile", action="store_true", help="seconds spent in each family")
    parser.add_argument("--failures", type=int, default=20, help="how many failures to print in full")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    if args.devices:
        devices = args.devices.split(",")
    else:
        import mpsgrad as m
        devices = list(m.Device.available())
    if args.rejections:
        os.environ["MPSGRAD_FUZZ_REJECTIONS"] = "1"
    if args.skip is not None:
        os.environ["MPSGRAD_FUZZ_SKIP"] = args.skip  # inherited by the workers
    if args.worker:
        worker(seed, args.first, args.cases, devices)
        return 0
    print(f"mpsgrad API fuzz: seed {seed} (reproduce with --seed {seed}), devices {devices}", flush=True)
    start = time.monotonic()
    summary = fuzz(seed, args.cases, args.first, args.jobs, devices=devices, case_timeout=args.case_timeout)
    print(report(summary, seed, time.monotonic() - start))
    for line in signatures(summary):
        print("CLASS:", line)
    if args.profile:
        for k, v in sorted(summary.seconds.items(), key=lambda kv: -kv[1]):
            print(f"SECONDS: {v:8.2f}  {k}")
    if args.rejections:
        import collections
        for text, n in collections.Counter(re.sub(r"-?\d+", "N", t) for t in summary.rejections).most_common():
            print(f"REJECTED: {n:5d} x {text}")
    for failure in summary.failures[:args.failures]:
        print("FAILURE:", failure)
    return 1 if summary.failures else 0





if __name__ == "__main__":
    sys.exit(main())
