"""Training: a hand-written SGD loop through the weights state, the CPU data-source update flow,
and determinism of the gradients."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import ConvSpec, conv_reference, make_conv, randn, rng

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))

SPEC = ConvSpec(3, 3, 4, 8, neuron="relu")
N, H, W = 3, 8, 9
LR = 0.3
STEPS = 20


def _problem(seed="training"):
    """Inputs, a reachable target (a teacher convolution's output), and the student's init."""
    gen = rng(seed)
    x = randn(gen, N, H, W, SPEC.cin)
    w_teacher, b_teacher = SPEC.random_parameters(gen)
    target = conv_reference(SPEC, x, w_teacher, b_teacher, offset=(0, 0), out_size=(W, H))["y"].astype(np.float32)
    w0, b0 = SPEC.random_parameters(gen)
    return x, target, w0, b0


def _torch_sgd_losses(x, target, w0, b0, steps, lr):
    """The same loop in float64 PyTorch: the oracle for the loss trajectory."""
    X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)
    T = torch.tensor(target, dtype=torch.float64).permute(0, 3, 1, 2)
    Wt = torch.tensor(w0, dtype=torch.float64).permute(0, 3, 1, 2).clone().requires_grad_(True)
    Bt = torch.tensor(b0, dtype=torch.float64).clone().requires_grad_(True)
    losses = []
    for _ in range(steps):
        loss = ((F.relu(F.conv2d(X, Wt, Bt, padding=1)) - T) ** 2).mean()
        losses.append(loss.item())
        Wt.grad = Bt.grad = None
        loss.backward()
        with torch.no_grad():
            Wt -= lr * Wt.grad
            Bt -= lr * Bt.grad
    return np.array(losses), Wt.detach().permute(0, 2, 3, 1).numpy()


def _step_forward_backward(queue, device, conv, grad, xs, target):
    """One forward (shared batch state) and gradient; returns (loss, state, dx batch, dL/dY)."""
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    cb.commit()
    cb.wait_until_completed()
    residual = m.batch_to_numpy(ys) - target
    loss = float(np.mean(residual.astype(np.float64) ** 2))
    cb = queue.command_buffer()
    e = ((2.0 / residual.size) * residual).astype(np.float32)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    return loss, states[0], dxs, e


def _train_with_weights_state(device, queue, steps, seed="training"):
    x, target, w0, b0 = _problem(seed)
    _, conv, grad = make_conv(device, SPEC, w0, b0)
    xs = m.batch_from_numpy(x, device)
    cb = queue.command_buffer()
    ws = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(ws.weights, w0)
    np.testing.assert_array_equal(ws.biases, b0)
    losses, grads = [], []
    for _ in range(steps):
        w_used, b_used = ws.weights.copy(), ws.biases.copy()
        loss, state, dxs, e = _step_forward_backward(queue, device, conv, grad, xs, target)
        losses.append(loss)
        grads.append((state.gradient_for_weights.copy(), state.gradient_for_biases.copy(), m.batch_to_numpy(dxs),
                      e, w_used, b_used))
        ws.weights[...] -= np.float32(LR) * state.gradient_for_weights
        ws.biases[...] -= np.float32(LR) * state.gradient_for_biases
        cb = queue.command_buffer()
        conv.reload_weights_and_biases_with_command_buffer(cb, ws)
        grad.reload_weights_and_biases_with_command_buffer(cb, ws)
        cb.commit()
        cb.wait_until_completed()
    return np.array(losses), ws.weights.copy(), ws.biases.copy(), grads, (conv, grad, x, target)


def test_sgd_through_weights_state_decreases_loss_monotonically(device, queue, check):
    losses, w_final, _, grads, (conv, grad, x, target) = _train_with_weights_state(device, queue, STEPS)
    assert all(b < a for a, b in zip(losses, losses[1:])), f"loss is not monotone: {losses}"
    assert losses[-1] < 0.5 * losses[0]
    ref_losses, ref_w = _torch_sgd_losses(*_problem(), STEPS, LR)
    check(losses, ref_losses, "loss trajectory vs PyTorch SGD")
    check(w_final, ref_w, "final weights vs PyTorch SGD")
    # The gradient kernel got every reload: the data gradient of each step is that of the weights
    # the step's forward pass used (stale weights in the gradient kernel would differ by O(LR)).
    for step in (1, STEPS - 1):
        _, _, dx, e, w_used, b_used = grads[step]
        ref = conv_reference(SPEC, x, w_used, b_used, offset=(0, 0), out_size=(W, H), e_nhwc=e)
        check(dx, ref["dx"], f"data gradient at step {step} with the reloaded weights")
        check(grads[step][0], ref["dw"], f"weight gradient at step {step}")
    # The forward kernel holds the final weights.
    cb = queue.command_buffer()
    exported = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(exported.weights, w_final)


def test_data_source_flow_matches_weights_state_flow(device, queue):
    """MPS's CPU update flow (mutate the data source, reload_weights_and_biases_from_data_source on
    both kernels) and the weights-state flow give bitwise-identical weights and losses."""
    steps = 6
    losses_state, w_state, b_state, _, _ = _train_with_weights_state(device, queue, steps)
    x, target, w0, b0 = _problem()
    ds, conv, grad = make_conv(device, SPEC, w0, b0)
    xs = m.batch_from_numpy(x, device)
    losses = []
    for _ in range(steps):
        loss, state, _, _ = _step_forward_backward(queue, device, conv, grad, xs, target)
        losses.append(loss)
        ds.weights[...] -= np.float32(LR) * state.gradient_for_weights
        ds.biases[...] -= np.float32(LR) * state.gradient_for_biases
        conv.reload_weights_and_biases_from_data_source()
        grad.reload_weights_and_biases_from_data_source()
    np.testing.assert_array_equal(ds.weights, w_state)
    np.testing.assert_array_equal(ds.biases, b_state)
    np.testing.assert_array_equal(np.array(losses), losses_state)


class ArraySource:
    """A user-written data source (the MPSCNNConvolutionDataSource protocol in Python)."""

    def __init__(self, desc, w, b):
        self.desc, self.w, self.b = desc, w.copy(), b.copy()
        self.loads = self.purges = 0

    def descriptor(self):
        return self.desc

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def load(self):
        self.loads += 1
        return True

    def purge(self):
        self.purges += 1

    def label(self):
        return "array source"


def test_python_data_source_flow_matches_weights_state_flow(device, queue):
    steps = 4
    losses_state, w_state, b_state, _, _ = _train_with_weights_state(device, queue, steps)
    x, target, w0, b0 = _problem()
    src = ArraySource(SPEC.descriptor(), w0, b0)
    conv, grad = m.CNNConvolution(device, src), m.CNNConvolutionGradient(device, src)
    for k in (conv, grad):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    losses = []
    for _ in range(steps):
        loss, state, _, _ = _step_forward_backward(queue, device, conv, grad, xs, target)
        losses.append(loss)
        src.w -= np.float32(LR) * state.gradient_for_weights
        src.b -= np.float32(LR) * state.gradient_for_biases
        conv.reload_weights_and_biases_from_data_source()
        grad.reload_weights_and_biases_from_data_source()
    assert src.loads == src.purges == 2 + 2 * steps, "every load is balanced by a purge"
    np.testing.assert_array_equal(src.w, w_state)
    np.testing.assert_array_equal(np.array(losses), losses_state)


def test_reload_acts_at_encode_order(device, queue, check):
    """Work encoded before a reload keeps the old weights; work encoded after it uses the new ones."""
    spec = ConvSpec(3, 3, 4, 4)
    gen = rng("reload-order")
    w0, b0 = spec.random_parameters(gen)
    w1, b1 = spec.random_parameters(gen)
    _, conv, _ = make_conv(device, spec, w0, b0)
    x_arr = randn(gen, 1, 6, 6, 4)
    x = m.Image.from_numpy(x_arr, device)
    ws = m.CNNConvolutionWeightsAndBiasesState(device, spec.descriptor())
    ws.weights[...] = w1
    ws.biases[...] = b1
    cb = queue.command_buffer()
    y0 = conv.encode(cb, x)
    conv.reload_weights_and_biases_with_command_buffer(cb, ws)
    y1 = conv.encode(cb, x)
    cb.commit()
    cb.wait_until_completed()
    check(y0.to_numpy(), conv_reference(spec, x_arr, w0, b0, out_size=(6, 6))["y"], "before the reload")
    check(y1.to_numpy(), conv_reference(spec, x_arr, w1, b1, out_size=(6, 6))["y"], "after the reload")


def test_temporary_weights_state_is_consumed_by_reload(device, queue):
    spec = ConvSpec(1, 1, 4, 4)
    w, b = spec.random_parameters(rng(8))
    _, conv, grad = make_conv(device, spec, w, b)
    cb = queue.command_buffer()
    ws = conv.export_weights_and_biases_with_command_buffer(cb, result_state_can_be_temporary=True)
    assert ws.is_temporary and ws.read_count == 1
    ws.read_count = 2
    conv.reload_weights_and_biases_with_command_buffer(cb, ws)
    grad.reload_weights_and_biases_with_command_buffer(cb, ws)
    assert ws.read_count == 0
    with pytest.raises(ValueError, match="read_count"):
        conv.reload_weights_and_biases_with_command_buffer(cb, ws)
    cb.commit()
    cb.wait_until_completed()


# ---- determinism ----------------------------------------------------------------------------------


def _gradients_once(device, queue, seed):
    spec = ConvSpec(5, 5, 16, 16, sx=2, sy=2, groups=2, neuron="tanh")
    gen = rng(seed)
    x = randn(gen, 4, 12, 12, 16)
    w, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, w, b)
    conv.padding = m.NNDefaultPadding(int(m.PaddingMethod.TENSORFLOW_SAME))
    xs = m.batch_from_numpy(x, device)
    e = m.batch_from_numpy(randn(gen, 4, 6, 6, 16), device)
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, e, xs, states)
    cb.commit()
    cb.wait_until_completed()
    return (m.batch_to_numpy(ys), m.batch_to_numpy(dxs), states[0].gradient_for_weights.copy(),
            states[0].gradient_for_biases.copy())


def test_gradients_are_bitwise_deterministic(device, queue):
    first = _gradients_once(device, queue, "determinism")
    for _ in range(2):
        again = _gradients_once(device, m.CommandQueue(device), "determinism")
        for a, b, name in zip(first, again, ("forward", "data gradient", "weight gradient", "bias gradient")):
            assert np.array_equal(a, b), f"{name} differs between identical runs"


def test_training_runs_are_bitwise_identical(device, queue):
    a = _train_with_weights_state(device, queue, 5)
    b = _train_with_weights_state(device, m.CommandQueue(device), 5)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    for step_a, step_b in zip(a[3], b[3]):
        for u, v in zip(step_a, step_b):
            assert np.array_equal(u, v)


# ---- the example script ------------------------------------------------------------------------------


def test_example_script_runs(device):
    env = dict(os.environ)
    # The subprocess must import the same mpsgrad as this process (installed wheel, or a build tree).
    package_parent = os.path.dirname(os.path.dirname(m.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "train_conv.py"), "--device", device.name,
                          "--steps", "20"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    losses = [float(line.split()[-1]) for line in out.stdout.splitlines() if line.startswith("step")]
    assert len(losses) == 20
    assert all(b < a for a, b in zip(losses, losses[1:]))
