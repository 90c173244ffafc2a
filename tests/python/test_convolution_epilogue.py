"""The convolution epilogue (bias + fused neuron) for every neuron type, against float64 PyTorch.

The CPU backend picks one loop per (neuron type, bias) pair (cpp/mpsgrad/backend/cpu/conv_epilogue.h),
so every type is run, with and without a bias, through each product path that uses the epilogue:
the im2col product (24 output channels: vector body and remainder), a grouped 1x1 product (the
epilogue writes channels [g*Cog, (g+1)*Cog)), the depthwise path and the fully connected path (a
one-pixel result). PReLU takes one slope per output channel. On other devices the same cases check
the device's own fused neuron.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mpsgrad as m
from conftest import NEURONS, ConvSpec, conv_reference, randn, rng

T = m.CNNNeuronType
COUT = 24
SLOPES = [0.1 * (k % 7) - 0.3 for k in range(COUT)]  # negative, zero and positive slopes


def _prelu(x, a, b):
    s = torch.tensor(SLOPES, dtype=x.dtype).view(1, -1, 1, 1)[:, :x.shape[1]]
    return torch.where(x >= 0, x, s * x)


# name: (descriptor, float64 torch function of the preactivation). Power / logarithm arguments are
# kept positive (a*x + b with b = 3 and |a*x| well below 3 for these preactivations).
EPILOGUE_NEURONS = {
    "relu": (m.NNNeuronDescriptor(T.RELU), lambda x: torch.relu(x)),
    "leaky_relu": (m.NNNeuronDescriptor(T.RELU, a=0.125), lambda x: torch.where(x >= 0, x, 0.125 * x)),
    "linear": (m.NNNeuronDescriptor(T.LINEAR, a=-1.5, b=0.25), lambda x: -1.5 * x + 0.25),
    "sigmoid": (m.NNNeuronDescriptor(T.SIGMOID), torch.sigmoid),
    "hard_sigmoid": (m.NNNeuronDescriptor(T.HARD_SIGMOID, a=0.25, b=0.5), lambda x: torch.clamp(0.25 * x + 0.5, 0, 1)),
    "tanh": (m.NNNeuronDescriptor(T.TANH, a=1.5, b=0.75), lambda x: 1.5 * torch.tanh(0.75 * x)),
    "absolute": (m.NNNeuronDescriptor(T.ABSOLUTE), torch.abs),
    "soft_plus": (m.NNNeuronDescriptor(T.SOFT_PLUS, a=1.5, b=0.75), lambda x: 1.5 * torch.log1p(torch.exp(0.75 * x))),
    "soft_sign": (m.NNNeuronDescriptor(T.SOFT_SIGN), lambda x: x / (1 + x.abs())),
    "elu": (m.NNNeuronDescriptor(T.ELU, a=0.75), lambda x: torch.where(x >= 0, x, 0.75 * torch.expm1(x))),
    "prelu": (m.NNNeuronDescriptor.prelu(SLOPES), None),
    "relun": (m.NNNeuronDescriptor(T.RELUN, a=0.1, b=0.5), lambda x: torch.clamp(torch.where(x >= 0, x, 0.1 * x), max=0.5)),
    "power": (m.NNNeuronDescriptor(T.POWER, a=0.25, b=3.0, c=2.0), lambda x: (0.25 * x + 3.0) ** 2),
    "exponential": (m.NNNeuronDescriptor(T.EXPONENTIAL, a=0.5, b=0.25, c=2.0), lambda x: 2.0 ** (0.5 * x + 0.25)),
    "exp_e": (m.NNNeuronDescriptor(T.EXPONENTIAL, a=0.5, b=0.25, c=-1.0), lambda x: torch.exp(0.5 * x + 0.25)),
    "logarithm": (m.NNNeuronDescriptor(T.LOGARITHM, a=0.25, b=3.0, c=10.0), lambda x: torch.log10(0.25 * x + 3.0)),
    "log_e": (m.NNNeuronDescriptor(T.LOGARITHM, a=0.25, b=3.0, c=-1.0), lambda x: torch.log(0.25 * x + 3.0)),
    "gelu": (m.NNNeuronDescriptor(T.GELU), lambda x: torch.nn.functional.gelu(x, approximate="none")),
}

# name: (spec without neuron, image height, width, batch)
PATHS = {
    "im2col-3x3": (dict(kw=3, kh=3, cin=6, cout=COUT), 7, 9, 2),
    "g2-1x1": (dict(kw=1, kh=1, cin=8, cout=COUT, groups=2), 5, 6, 2),
    "depthwise-3x3": (dict(kw=3, kh=3, cin=COUT, cout=COUT, depthwise=True), 6, 5, 2),
    "fully-connected": (dict(kw=3, kh=3, cin=5, cout=COUT), 1, 1, 3),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("neuron", list(EPILOGUE_NEURONS))
def test_fused_neuron_epilogue(device, queue, check, monkeypatch, neuron, path, bias):
    nd, fn = EPILOGUE_NEURONS[neuron]
    ref_fn = (lambda x, a, b: _prelu(x, a, b)) if fn is None else (lambda x, a, b: fn(x))
    monkeypatch.setitem(NEURONS, "epilogue", (None, None, None, ref_fn))
    fields, h, w, n = PATHS[path]
    spec = ConvSpec(**fields, bias=bias)  # neuron "none" for the descriptor; the fused one is set below
    gen = rng(f"{neuron}-{path}-{bias}")
    x_arr = randn(gen, n, h, w, spec.cin)
    wts, b = spec.random_parameters(gen)
    desc = spec.descriptor()
    desc.fused_neuron_descriptor = nd
    conv = m.CNNConvolution(device, m.CNNConvolutionWeightsDataSource(desc, wts, b))
    conv.destination_image_allocator = m.ImageAllocator.persistent()
    cb = queue.command_buffer()
    ys = conv.encode_batch(cb, m.batch_from_numpy(x_arr, device))
    cb.commit()
    cb.wait_until_completed()
    y = m.batch_to_numpy(ys)
    ref_spec = ConvSpec(**fields, bias=bias, neuron="epilogue")
    ref = conv_reference(ref_spec, x_arr, wts, b, offset=tuple(conv.offset)[:2], out_size=(y.shape[2], y.shape[1]))
    check(y, ref["y"], f"{neuron} {path}")


def test_epilogue_cases_cover_every_neuron_type():
    types = {nd.neuron_type for nd, _ in EPILOGUE_NEURONS.values()}
    every = {t for t in T.__members__.values() if t != T.NONE}
    assert types == every
