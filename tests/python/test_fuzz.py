"""The API fuzz test (tests/fuzz/api_fuzz.py) as part of the suite: MPSGRAD_FUZZ_CASES generated
call sequences (default 3,000) with a fresh seed printed in the log, or MPSGRAD_FUZZ_SEED to replay
one (MPSGRAD_FUZZ_DEVICES selects devices, default cpu; MPSGRAD_FUZZ_CASE_TIMEOUT the seconds after
which a case counts as a hang, default 60). The long run is one command (docs/verification.md,
"The API fuzz test"): python3 tests/fuzz/api_fuzz.py --cases 50000."""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

import api_fuzz  # noqa: E402


def test_api_fuzz(capsys):
    cases = int(os.environ.get("MPSGRAD_FUZZ_CASES", "3000"))
    seed = int(os.environ.get("MPSGRAD_FUZZ_SEED", str(random.SystemRandom().randrange(2**31))))
    case_timeout = float(os.environ.get("MPSGRAD_FUZZ_CASE_TIMEOUT", "60"))
    # The CPU device by default (the cost of the emulated Metal device is not budgeted in CI);
    # MPSGRAD_FUZZ_DEVICES=metal,cpu selects others.
    devices = [d for d in os.environ.get("MPSGRAD_FUZZ_DEVICES", "cpu").split(",") if d.strip()]
    start = time.monotonic()
    with capsys.disabled():
        print(f"\nmpsgrad API fuzz: seed {seed} (replay with MPSGRAD_FUZZ_SEED={seed}), {cases} cases, "
              f"devices {devices}", flush=True)
    # Chunks of 750 cases: each worker process imports mpsgrad (and torch, for mpsgrad.distributed) once.
    summary = api_fuzz.fuzz(seed, cases, devices=devices, jobs=2, chunk=750, case_timeout=case_timeout)
    line = api_fuzz.report(summary, seed, time.monotonic() - start)
    with capsys.disabled():
        print(line, flush=True)
        for group in api_fuzz.signatures(summary):
            print("  ", group, flush=True)
    assert summary.cases == cases, line
    assert not summary.failures, line + "\n" + "\n".join(summary.failures[:10])
