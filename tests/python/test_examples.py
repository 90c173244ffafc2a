"""The graph-API examples: a shortened examples/train_digits.py run (its accuracy climbs far above
chance, its plot is written, its last line is the accuracy) and examples/compare_pytorch.py.

The default runs (15 epochs, >= 97 % test accuracy) are too long for the suite; docs/graph.md
records their measured figures."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mpsgrad as m

pytest.importorskip("sklearn")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_example(script, *args):
    env = dict(os.environ)
    # The subprocess must import the same mpsgrad as this process (installed wheel, or a build tree).
    package_parent = os.path.dirname(os.path.dirname(m.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", script), *args], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


# (epochs, training images, batch size, accuracy floor) per device. Chance is 10 %. The Metal backend runs
# emulated on Linux (with CI's race detector on: many times slower than the CPU), so its run is
# smaller; the learning itself is the CPU run's check, the Metal run checks the same script works
# end to end on that device and still learns well above chance.
SHORT_RUNS = {"cpu": (3, 480, 32, 70.0), "metal": (3, 160, 16, 30.0)}


def test_train_digits_short_run_learns_and_plots(device, tmp_path):
    epochs, images, batch, floor = SHORT_RUNS.get(device.name, SHORT_RUNS["metal"])
    plot = tmp_path / "digits.png"
    out = run_example("train_digits.py", "--device", device.name, "--epochs", str(epochs), "--train-limit",
                      str(images), "--batch-size", str(batch), "--plot", str(plot))
    last = out.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"test accuracy: (\d+\.\d)%", last)
    assert match, out.stdout
    assert float(match.group(1)) >= floor, out.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"epoch {epochs}/{epochs}" in out.stderr  # tqdm's bar, one per epoch


def test_train_digits_history_improves(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "examples"))
    try:
        import train_digits
    finally:
        sys.path.pop(0)
    history = train_digits.main(["--epochs", "2", "--train-limit", "320", "--no-progress",
                                 "--plot", str(tmp_path / "h.png")])
    assert len(history["test_acc"]) == 2
    assert history["train_loss"][1] < history["train_loss"][0]
    assert history["test_acc"][1] > 0.3


def test_compare_pytorch_prints_both_runs():
    pytest.importorskip("torch")
    out = run_example("compare_pytorch.py", "--epochs", "1", "--threads", "1")
    lines = out.stdout.splitlines()
    assert any(line.startswith("mpsgrad") and "ms per training step" in line for line in lines), out.stdout
    assert any(line.startswith("pytorch") and "ms per training step" in line for line in lines), out.stdout
    assert "pytorch / mpsgrad" in lines[-1]


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_digits_network_steps_match_torch_adam(style):
    """Three steps of the example's network (dropout keeping all but ~1e-6) against compare_pytorch's
    TorchNet (torch.optim.Adam, BatchNorm2d) from the same weights: the losses and batch
    normalization's gamma, beta and running statistics. GPU style, gamma/beta take NNOptimizerAdam's
    batch-normalization encode on the step's command buffer; CPU style, the NumPy Adam."""
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(REPO, "examples"))
    try:
        import compare_pytorch
        import train_digits
    finally:
        sys.path.pop(0)
    x, y, _, _ = train_digits.load_data(0, 96)
    params = train_digits.initial_parameters(0)
    ours = train_digits.DigitsNet(m.Device("cpu"), params, 2e-3, keep_probability=1 - 1e-6, training_style=style)
    theirs = compare_pytorch.TorchNet(params, 2e-3, keep_probability=1 - 1e-6)
    for step in range(3):
        batch = slice(32 * step, 32 * (step + 1))
        loss, _ = ours.train_step(x[batch], y[batch])
        assert loss == pytest.approx(theirs.train_step(x[batch], y[batch])[0], rel=1e-4)
    for source, bn in zip(ours.bn, theirs.bn):
        # The GPU-style path really ran (optimizer made by the command-buffer method) or the CPU one did.
        assert (source.optimizer is not None) == (style == "gpu") and (source.adam is not None) == (style == "cpu")
        gamma, beta = bn.weight.detach().numpy(), bn.bias.detach().numpy()
        assert np.abs(gamma - 1).max() > 5e-3 and np.abs(beta).max() > 5e-3  # three Adam steps of ~lr each
        np.testing.assert_allclose(source.gamma(), gamma, rtol=0, atol=2e-5)
        np.testing.assert_allclose(source.beta(), beta, rtol=0, atol=2e-5)
        # The convolution biases before BN have ~zero gradients, on which Adam takes steps of ~lr in
        # directions set by rounding; they shift the batch means (not the normalized values) by ~lr.
        np.testing.assert_allclose(source.mean(), bn.running_mean.numpy(), rtol=0, atol=2e-3)
        np.testing.assert_allclose(source.variance(), bn.running_var.numpy(), rtol=0, atol=2e-4)
