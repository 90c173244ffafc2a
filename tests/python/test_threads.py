"""Thread control of the CPU backend: mpsgrad.set_num_threads / get_num_threads,
MPSGRAD_NUM_THREADS and MPSGRAD_SPIN_MICROSECONDS. Results stay right (against PyTorch) and bitwise reproducible on any count."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import FLOAT16, FLOAT16_TOLERANCE


@pytest.fixture
def restore_threads():
    before = m.get_num_threads()
    yield
    m.set_num_threads(before)


def test_default_is_at_least_one():
    assert isinstance(m.get_num_threads(), int) and m.get_num_threads() >= 1


def test_default_respects_affinity():
    if not hasattr(os, "sched_getaffinity") or "MPSGRAD_NUM_THREADS" in os.environ:
        pytest.skip("needs sched_getaffinity and no MPSGRAD_NUM_THREADS override")
    assert m.get_num_threads() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("bad", [0, -3])
def test_rejects_counts_below_one(bad, restore_threads):
    with pytest.raises(ValueError, match="n must be"):
        m.set_num_threads(bad)


@pytest.mark.parametrize("bad", [1.5, "2", None, True])
def test_rejects_non_integers(bad, restore_threads):
    with pytest.raises(TypeError, match="n must be an int"):
        m.set_num_threads(bad)


def test_environment_variable_sets_the_default():
    code = "import mpsgrad; print(mpsgrad.get_num_threads())"
    env = dict(os.environ, MPSGRAD_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
    env["MPSGRAD_NUM_THREADS"] = "zero"  # not an integer >= 1: ignored, the default applies
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) >= 1


_SPIN_CODE = """
import numpy as np, mpsgrad as m
m.set_num_threads(2)
device = m.Device("cpu")
queue = m.CommandQueue(device)
relu = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
relu.destination_image_allocator = m.ImageAllocator.persistent()  # results read after the wait
x = np.random.default_rng(3).standard_normal((4, 64, 64, 16), dtype=np.float32)
xs = m.batch_from_numpy(x, device)
for _ in range(20):  # back-to-back ops: the pool's threads find the next job while spinning
    cb = queue.command_buffer()
    ys = relu.encode_batch(cb, xs)
    cb.commit()
    cb.wait_until_completed()
    assert np.array_equal(m.batch_to_numpy(ys), np.maximum(x, 0)), "wrong result"
print("ok")
"""


@pytest.mark.parametrize("spin", ["0", "100", "100000", "-5", "often"])
def test_spin_environment_variable(spin):
    """MPSGRAD_SPIN_MICROSECONDS: 0 (sleep at once), the default, the longest spin (0.1 s, and the
    process still exits at once: stopping the pool does not wait out a spin by more than that),
    and values outside 0-100000 (ignored: the default applies). Every setting computes the same."""
    env = dict(os.environ, MPSGRAD_SPIN_MICROSECONDS=spin)
    out = subprocess.run([sys.executable, "-c", _SPIN_CODE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _conv_all(device, x, w, b, dy):
    """Forward, data gradient and weight + bias gradients of a 3x3 SAME convolution."""
    n, h, wd, cin = x.shape
    cout = w.shape[0]
    desc = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=cin,
                                      output_feature_channels=cout)
    source = m.CNNConvolutionWeightsDataSource(desc, w, b)
    conv, grad = m.CNNConvolution(device, source), m.CNNConvolutionGradient(device, source)
    for kernel in (conv, grad):  # results read after the wait: persistent images
        kernel.destination_image_allocator = m.ImageAllocator.persistent()
    queue = m.CommandQueue(device)
    cb = queue.command_buffer()
    xs = m.batch_from_numpy(x, device)
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(dy, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    return (m.batch_to_numpy(ys), m.batch_to_numpy(dxs), np.array(states[0].gradient_for_weights),
            np.array(states[0].gradient_for_biases))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_results_right_and_reproducible_for_each_count(threads, restore_threads):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 9, 11, 8), dtype=np.float32)
    w = rng.standard_normal((16, 3, 3, 8), dtype=np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    dy = rng.standard_normal((3, 9, 11, 16), dtype=np.float32)
    device = m.Device("cpu")
    m.set_num_threads(threads)
    assert m.get_num_threads() == threads
    first = _conv_all(device, x, w, b, dy)
    second = _conv_all(device, x, w, b, dy)
    for a, c in zip(first, second):
        assert np.array_equal(a, c)  # bitwise, run to run

    tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
    tw = torch.from_numpy(w.transpose(0, 3, 1, 2).copy()).requires_grad_()
    tb = torch.from_numpy(b).requires_grad_()
    ty = F.conv2d(tx, tw, tb, padding=1)
    ty.backward(torch.from_numpy(dy.transpose(0, 3, 1, 2).copy()))
    expected = (ty.detach().numpy().transpose(0, 2, 3, 1), tx.grad.numpy().transpose(0, 2, 3, 1),
                tw.grad.numpy().transpose(0, 2, 3, 1), tb.grad.numpy())
    for got, want in zip(first, expected):
        # float32 sums of <= 3*9*11 = 297 products of unit-scale values: 1e-4 of the largest magnitude
        # (FLOAT16 images: the inputs and outputs are rounded to half, conftest.FLOAT16_TOLERANCE).
        tol = FLOAT16_TOLERANCE if FLOAT16 else 1e-4
        assert np.max(np.abs(got - want)) <= tol * max(1.0, float(np.max(np.abs(want))))
