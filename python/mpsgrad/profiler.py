"""mpsgrad.profile(): where a training step's time goes, per backend op and per graph node.

    with mpsgrad.profile() as prof:
        for _ in range(10):
            step()                      # encode, commit, wait: whatever the program does
    print(prof.table())                 # by node, slowest first
    print(prof.table(by="op"))          # by backend op
    prof.save_chrome_trace("step.json")  # open in Perfetto (ui.perfetto.dev) or chrome://tracing

While the context is open, every backend op that *runs* records its wall time and the process CPU
time (all threads: the op's thread pool and BLAS threads included) with the op's name, the graph
node that encoded it (its class and label; "+ neuron" for a fused neuron) and the command buffer.
Ops encoded while the profiler was off are not recorded, nor are ops still running when the
context closes: wait for your command buffers inside it. One profile at a time per process.
The CPU backend records every op; the Metal backend records nothing yet (on a Mac, use Xcode's
Metal System Trace).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Optional

from . import _mpsgrad


@dataclass(frozen=True)
class ProfileEvent:
    """One backend op that ran: `op` (the backend op), `scope` (the graph node that encoded it,
    or "" for a kernel encoded directly), times in microseconds since the profile started."""

    op: str
    scope: str
    backend: str
    command_buffer: int
    start_us: float
    wall_us: float
    cpu_us: float
    thread: int


@dataclass
class ProfileRow:
    """Totals of the events sharing one key (a node, an op, or both)."""

    key: str
    calls: int = 0
    wall_us: float = 0.0
    cpu_us: float = 0.0


class Profile:
    """The events of one `mpsgrad.profile()` context (complete once the context has closed)."""

    def __init__(self) -> None:
        self.events: List[ProfileEvent] = []

    def rows(self, by: str = "node") -> List[ProfileRow]:
        """Totals per `by` ("node", "op" or "node+op"), slowest (wall time) first."""
        keys = {"node": lambda e: e.scope or "(no node)", "op": lambda e: e.op,
                "node+op": lambda e: f"{e.scope or '(no node)'} / {e.op}"}
        if by not in keys:
            raise ValueError(f"by: expected one of {sorted(keys)}, got {by!r}")
        totals: Dict[str, ProfileRow] = {}
        for e in self.events:
            key = keys[by](e)
            row = totals.setdefault(key, ProfileRow(key))
            row.calls += 1
            row.wall_us += e.wall_us
            row.cpu_us += e.cpu_us
        return sorted(totals.values(), key=lambda r: -r.wall_us)

    def table(self, by: str = "node", limit: Optional[int] = 30) -> str:
        """A text table of rows(by): calls, wall and CPU milliseconds, share of the total wall time."""
        rows = self.rows(by)
        total = sum(r.wall_us for r in rows) or 1.0
        width = max([len(by)] + [len(r.key) for r in rows[:limit]])
        lines = [f"{by:<{width}}  {'calls':>6}  {'wall ms':>9}  {'cpu ms':>9}  {'wall %':>6}"]
        for r in rows[:limit]:
            lines.append(f"{r.key:<{width}}  {r.calls:>6}  {r.wall_us / 1e3:>9.2f}  {r.cpu_us / 1e3:>9.2f}  "
                         f"{100 * r.wall_us / total:>6.1f}")
        if limit is not None and len(rows) > limit:
            rest = rows[limit:]
            lines.append(f"{f'({len(rest)} more)':<{width}}  {sum(r.calls for r in rest):>6}  "
                         f"{sum(r.wall_us for r in rest) / 1e3:>9.2f}  {sum(r.cpu_us for r in rest) / 1e3:>9.2f}  "
                         f"{100 * sum(r.wall_us for r in rest) / total:>6.1f}")
        lines.append(f"{'total':<{width}}  {sum(r.calls for r in rows):>6}  {total / 1e3:>9.2f}  "
                     f"{sum(r.cpu_us for r in rows) / 1e3:>9.2f}  {100.0 if rows else 0.0:>6.1f}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        """The events in the Chrome trace event format (one complete event per op, a row per thread)."""
        return {"displayTimeUnit": "ms", "traceEvents": [
            {"name": e.op, "cat": e.backend, "ph": "X", "ts": e.start_us, "dur": e.wall_us, "pid": 0,
             "tid": e.thread, "args": {"node": e.scope, "cpu_us": e.cpu_us, "command_buffer": e.command_buffer}}
            for e in self.events]}

    def save_chrome_trace(self, path: str) -> None:
        """Writes chrome_trace() as JSON: open it in Perfetto or chrome://tracing."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)

    def __repr__(self) -> str:
        wall = sum(e.wall_us for e in self.events) / 1e3
        return f"<mpsgrad.Profile {len(self.events)} ops, {wall:.2f} ms of op wall time>"


class profile:  # noqa: N801 - a context manager used like a function, as torch.profiler.profile
    """Records every backend op that runs while the context is open (see the module docstring)."""

    def __init__(self) -> None:
        self.result = Profile()

    def __enter__(self) -> Profile:
        if _mpsgrad._profiler_enabled():
            raise RuntimeError("mpsgrad.profile: a profile is already open in this process")
        _mpsgrad._profiler_set_enabled(True)
        return self.result

    def __exit__(self, *exc) -> None:
        events = _mpsgrad._profiler_take()
        _mpsgrad._profiler_set_enabled(False)
        self.result.events = [ProfileEvent(*e) for e in events]

