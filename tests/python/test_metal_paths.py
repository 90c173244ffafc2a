"""Shapes and data that reach every path of the Metal kernels, against PyTorch (float64), on every
device; plus the Metal device checks of the Linux emulation build.

The kernel paths (docs/verification.md, "coverage"):
* PReLU's slope gradient reduces each channel quad over 128 threads (four simdgroups of 32 lanes):
  a 40 x 40 image gives every lane of every simdgroup work, so a reduction that dropped a lane or a
  simdgroup is off by a large fraction (a 5 x 6 image leaves lane 31 and simdgroups 1-3 idle).
* Softmax over many channels runs one simdgroup per pixel, lane l taking channel quads l, l + 32, ...:
  one dominant logit per pixel, on a different lane for each pixel, makes exp() overflow unless the
  max really comes from every lane.
* The convolution weight gradient splits its reduction across threadgroups on large images and sums
  the slices with utility.metal's sum_slices.
* Depthwise data and weight gradients on channel counts that are and are not multiples of 4.

The emulation's fake device can play other GPUs (MTLEMU_GPU_FAMILY, MTLEMU_SIMD_WIDTH, ...); a GPU
the kernels cannot run on must leave only the CPU device, in a fresh process.

Bounds: max relative error <= 1e-4 (float32 sums of at most a few thousand terms, fixed order;
any wrong reduction gives an O(1) error).
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import ConvSpec, conv_reference, make_conv, randn, rng

T = m.CNNNeuronType


def _run(queue, fn):
    cb = queue.command_buffer()
    out = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    return out


# ---- PReLU slope gradient: all 32 lanes and all four simdgroups busy ---------------------------------


@pytest.mark.parametrize("shape", [(1, 40, 40, 8), (2, 37, 45, 5)], ids=["40x40x8", "2x37x45x5"])
def test_prelu_slope_gradient_with_every_lane_busy(device, queue, check, shape):
    gen = rng(f"prelu-lanes-{shape}")
    n, h, w, c = shape
    x = randn(gen, *shape)
    g = randn(gen, *shape)
    slopes = list(np.linspace(0.05, 0.4, c))
    desc = m.NNNeuronDescriptor.prelu(slopes)
    neuron, grad = m.CNNNeuron(device, desc), m.CNNNeuronGradient(device, desc)
    xs = m.batch_from_numpy(x, device)

    def encode(cb):
        _, states = neuron.encode_batch(cb, xs, destination_state_is_temporary=False)
        grad.encode_batch(cb, m.batch_from_numpy(g, device), xs, states)
        return states

    states = _run(queue, encode)
    for i in range(n):
        X = torch.tensor(x[i:i + 1], dtype=torch.float64).permute(0, 3, 1, 2)
        a = torch.tensor(slopes, dtype=torch.float64, requires_grad=True)
        (F.prelu(X, a) * torch.tensor(g[i:i + 1], dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
        check(states[i].gradient_for_data, a.grad.numpy(), f"dL/da of image {i}")


# ---- softmax: one dominant logit, on a different lane in every pixel ---------------------------------


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("channels", [160, 13], ids=["simd-160", "thread-13"])
def test_softmax_dominant_logit_on_every_lane(device, queue, check, channels, log):
    gen = rng(f"softmax-lanes-{channels}-{log}")
    pixels = 40
    x = randn(gen, 1, 1, pixels, channels)
    for p in range(pixels):  # the dominant channel's quad is p (lane p % 32 of the simd kernel)
        x[0, 0, p, (4 * p + p % 4) % channels] = 200.0  # exp(200) overflows float32
    g = randn(gen, 1, 1, pixels, channels)
    fwd = (m.CNNLogSoftMax if log else m.CNNSoftMax)(device)
    bwd = (m.CNNLogSoftMaxGradient if log else m.CNNSoftMaxGradient)(device)
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    bwd.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)

    def encode(cb):
        ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
        return ys, bwd.encode_batch(cb, m.batch_from_numpy(g, device), ys, states)

    ys, dxs = _run(queue, encode)
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    Y = torch.log_softmax(X, dim=-1) if log else torch.softmax(X, dim=-1)
    (Y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    y = m.batch_to_numpy(ys)
    assert np.all(np.isfinite(y)), "a max over fewer lanes than all overflows exp()"
    check(y, Y.detach().numpy(), "forward")
    check(m.batch_to_numpy(dxs), X.grad.numpy(), "gradient")


# ---- convolution gradients: split weight-gradient reduction, depthwise channel counts ----------------


def _conv_gradients(device, queue, check, spec, n, h, w, seed):
    gen = rng(seed)
    x = randn(gen, n, h, w, spec.cin)
    wts, b = spec.random_parameters(gen)
    _, conv, grad = make_conv(device, spec, wts, b)
    conv.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_SAME))
    xs = m.batch_from_numpy(x, device)

    def encode(cb):
        ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
        e = randn(gen, n, ys[0].shape[1], ys[0].shape[2], spec.cout)
        dxs = grad.encode_batch(cb, m.batch_from_numpy(e, device), xs, states)
        return ys, states, e, dxs

    ys, states, e, dxs = _run(queue, encode)
    oh, ow = ys[0].shape[1], ys[0].shape[2]
    ref = conv_reference(spec, x, wts, b, offset=tuple(conv.offset)[:2], out_size=(ow, oh), e_nhwc=e)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
    check(states[0].gradient_for_biases, ref["db"], "bias gradient")


@pytest.mark.parametrize("cin,cout", [(3, 5), (8, 8)])
def test_weight_gradient_split_across_threadgroups(device, queue, check, cin, cout):
    """2 x 24 x 20 pixels: the weight gradient's reduction is split into slices that sum_slices adds."""
    _conv_gradients(device, queue, check, ConvSpec(3, 3, cin, cout), 2, 20, 24, f"split-{cin}-{cout}")


@pytest.mark.parametrize("channels", [3, 4, 6, 8])
def test_depthwise_gradients_channel_counts(device, queue, check, channels):
    _conv_gradients(device, queue, check, ConvSpec(3, 3, channels, channels, depthwise=True, sx=2, sy=2),
                    2, 9, 11, f"dw-{channels}")


# ---- the emulation's fake device -----------------------------------------------------------------------


def _emulation_build() -> bool:
    try:
        return hasattr(ctypes.CDLL(m._mpsgrad.__file__), "mtlemu_trace_count")
    except OSError:
        return False


emulation_only = pytest.mark.skipif(not _emulation_build(), reason="needs the Linux Metal emulation build")


def _devices_with(**env) -> list:
    """mpsgrad.Device.available() in a fresh process whose fake GPU is configured by `env`."""
    full = dict(os.environ, **{k: str(v) for k, v in env.items()})
    code = "import mpsgrad; print(','.join(mpsgrad.Device.available()))"
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(",")


@emulation_only
@pytest.mark.parametrize("env,usable", [
    ({}, True),
    ({"MTLEMU_GPU_FAMILY": "apple9"}, True),
    ({"MTLEMU_GPU_FAMILY": "mac2"}, True),                          # a 32-wide Intel / AMD RDNA Mac GPU
    ({"MTLEMU_GPU_FAMILY": "apple6"}, False),                       # no SIMD-group reductions (A13)
    ({"MTLEMU_GPU_FAMILY": "apple5"}, False),                       # e.g. the paravirtual GPU of CI VMs
    ({"MTLEMU_GPU_FAMILY": "mac2", "MTLEMU_SIMD_WIDTH": 64}, False),  # AMD GCN / Vega: 64-wide
    ({"MTLEMU_MAX_THREADS_PER_THREADGROUP": 128}, False),
], ids=["default", "apple9", "mac2", "apple6", "apple5", "amd-64-wide", "128-threads"])
def test_unsuitable_gpus_leave_only_the_cpu(env, usable):
    devices = _devices_with(**env)
    assert ("metal" in devices) == usable, devices
    assert "cpu" in devices
