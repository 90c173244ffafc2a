"""The API fuzz test (tests/fuzz/api_fuzz.py) as part of the suite: MPSGRAD_FUZZ_CASES generated
call sequences (default 2,000) with a fresh seed printed in the log, or MPSGRAD_FUZZ_SEED to replay
one (MPSGRAD_FUZZ_DEVICES selects devices, default cpu). The long run is one command: python3 tests/fuzz/api_fuzz.py --cases 20000 (docs/verification.md)."""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

import api_fuzz  # noqa: E402


def test_api_fuzz(capsys):
    cases = int(os.environ.get("MPSGRAD_FUZZ_CASES", "2000"))
    seed = int(os.environ.get("MPSGRAD_FUZZ_SEED", str(random.SystemRandom().randrange(2**31))))
    # The CPU device by default (the cost of the emulated Metal device is not budgeted in CI);
    # MPSGRAD_FUZZ_DEVICES=metal,cpu selects others.
    devices = [d for d in os.environ.get("MPSGRAD_FUZZ_DEVICES", "cpu").split(",") if d.strip()]
    start = time.monotonic()
    with capsys.disabled():
        print(f"\nmpsgrad API fuzz: seed {seed} (replay with MPSGRAD_FUZZ_SEED={seed}), {cases} cases, "
              f"devices {devices}", flush=True)
    summary = api_fuzz.fuzz(seed, cases, devices=devices, jobs=2)
    line = api_fuzz.report(summary, seed, time.monotonic() - start)
    with capsys.disabled():
        print(line, flush=True)
    assert summary.cases == cases, line
    assert not summary.failures, line + "\n" + "\n".join(summary.failures[:10])
