"""Smoke test of the benchmark suite: benchmarks/run.py runs in quick mode on its tiny rows and
writes its table. Timings are never asserted (DESIGN.md §7)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import mpsgrad as m

RUN = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def test_run_py_quick_tiny_rows(tmp_path):
    env = dict(os.environ)
    # The subprocess imports the same mpsgrad as this test (a build tree on PYTHONPATH or installed).
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(m.__file__).resolve().parents[1])] + [p for p in [env.get("PYTHONPATH")] if p])
    result = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--repeats", "1", "--warmup", "0", "--peak-seconds", "0.05",
         "--threads", "1", "--only", "tiny", "--output-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mpsgrad ms" in result.stdout and "tiny" in result.stdout

    (json_file,) = tmp_path.glob("run-*.json")
    (md_file,) = tmp_path.glob("run-*.md")
    data = json.loads(json_file.read_text())
    families = {row["family"] for row in data["rows"]}
    assert families == {"convolution", "fc", "transpose", "neuron", "arithmetic", "loss", "optimizer",
                        "group_normalization", "instance_normalization", "batch_normalization", "reshape", "pad", "gram",
                        "spatial_mean", "sub-pixel"}, families  # every tiny row ran
    assert all(row["mpsgrad_ms"] > 0 and row["torch_ms"] > 0 for row in data["rows"])
    table = md_file.read_text()
    assert "| family | case | op |" in table and "tiny 3x3 8->8" in table
