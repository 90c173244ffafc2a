"""CNNNeuron / CNNNeuronGradient for every CNNNeuronType, and every type as convolution's fused
neuron.

Oracles: PyTorch autograd in float64 where PyTorch has the function (relu, leaky_relu, hardsigmoid
in its MPS parametrization clamp(a*x + b, 0, 1) and as F.hardsigmoid, tanh, softplus with beta,
softsign, elu, prelu, relu6 / hardtanh and clamp(leaky_relu) for ReLUN, gelu exact, sigmoid,
abs, linear); for the MPS-specific parametrizations PyTorch lacks (Power (a*x + b)^c,
Exponential c^(a*x + b), Logarithm log_c(a*x + b)) a float64 NumPy formula written here, and
its float64 central finite difference for the derivative.

Inputs cover random values, the kinks, large magnitudes (|x| up to 80) and negative values.
At an exact kink PyTorch and MPS disagree: mpsgrad uses MPS's convention that the x >= 0 branch
includes the kink (ReLU, leaky ReLU, PReLU, ELU: f'(0) = 1; ReLUN: f'(0) = 1 and f' = 0 where the
pre-clamp value reaches b; HardSigmoid: 0 where a*x + b is exactly 0 or 1; Absolute: f'(0) = 0).
Kinks are therefore excluded from the autograd comparison and checked explicitly against that
convention (docs/neurons.md).

Bound: max relative error (max|a - e| / max|e|, per input group) <= 1e-4. Each value is one
float32 evaluation of an elementary function (error ~1e-7 relative) or the erfc fit of GeLU
(~1.2e-7); 1e-4 leaves headroom for the float32 rounding of a*x + b at large |x| while any
wrong formula or branch gives an O(1) error. Moderate and large inputs are compared separately
so that the large values cannot hide errors in the small ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import persistent, NEURONS, ConvSpec, conv_reference, randn, rng

T = m.CNNNeuronType
C = 6  # channels of the test images (PReLU data has C values)
PRELU_DATA = [0.1, -0.3, 0.25, 0.5, 1.5, 0.0]


def _erf64(x):
    return np.vectorize(math.erf)(x)


@dataclass
class NeuronCase:
    kind: "m.CNNNeuronType"
    a: Optional[float] = None
    b: Optional[float] = None
    c: Optional[float] = None
    torch_fn: Optional[Callable] = None     # f(x) on float64 tensors (x: N,C,H,W-agnostic NHWC), autograd oracle
    np_fn: Optional[Callable] = None        # float64 NumPy f(x) when PyTorch has no such function
    domain: tuple = (-4.0, 4.0)             # random inputs
    large: tuple = (-80.0, -30.0, 30.0, 80.0)  # large magnitudes included in the input
    kinks: list = field(default_factory=list)  # (x, expected f'(x)) checked explicitly
    prelu: bool = False

    def descriptor(self):
        if self.prelu:
            return m.NNNeuronDescriptor.prelu(PRELU_DATA)
        kwargs = {k: v for k, v in (("a", self.a), ("b", self.b), ("c", self.c)) if v is not None}
        return m.NNNeuronDescriptor(self.kind, **kwargs)


def _prelu_t(x):
    w = torch.tensor(PRELU_DATA, dtype=torch.float64)
    return torch.where(x >= 0, x, w * x)  # NHWC: channels last broadcast


def _power_np(a, b, c):
    return lambda x: np.power(a * x + b, c)


CASES = {
    "none": NeuronCase(T.NONE, torch_fn=lambda x: x),
    "relu": NeuronCase(T.RELU, torch_fn=F.relu, kinks=[(0.0, 1.0)]),
    "leaky_relu": NeuronCase(T.RELU, a=0.1, torch_fn=lambda x: F.leaky_relu(x, 0.1), kinks=[(0.0, 1.0)]),
    "linear": NeuronCase(T.LINEAR, a=-1.75, b=0.5, torch_fn=lambda x: -1.75 * x + 0.5),
    "sigmoid": NeuronCase(T.SIGMOID, torch_fn=torch.sigmoid),
    # HardSigmoid in MPS's parametrization (exact a, b so the boundaries x = -2, 2 are exact kinks)
    "hard_sigmoid": NeuronCase(T.HARD_SIGMOID, a=0.25, b=0.5, torch_fn=lambda x: torch.clamp(0.25 * x + 0.5, 0, 1),
                               kinks=[(-2.0, 0.0), (2.0, 0.0)]),
    # ... and PyTorch's own hardsigmoid = clamp(x/6 + 1/2, 0, 1)
    "hard_sigmoid_torch": NeuronCase(T.HARD_SIGMOID, a=1.0 / 6.0, b=0.5, torch_fn=F.hardsigmoid, domain=(-5, 5)),
    "tanh": NeuronCase(T.TANH, a=1.5, b=0.7, torch_fn=lambda x: 1.5 * torch.tanh(0.7 * x)),
    "absolute": NeuronCase(T.ABSOLUTE, torch_fn=torch.abs, kinks=[(0.0, 0.0)]),
    # a*log(1 + e^(b x)) = a*b*softplus_beta=b(x)
    "soft_plus": NeuronCase(T.SOFT_PLUS, a=1.5, b=0.7,
                            torch_fn=lambda x: 1.5 * 0.7 * F.softplus(x, beta=0.7, threshold=1e6)),
    "soft_sign": NeuronCase(T.SOFT_SIGN, torch_fn=F.softsign),
    "elu": NeuronCase(T.ELU, a=0.7, torch_fn=lambda x: F.elu(x, alpha=0.7), kinks=[(0.0, 1.0)]),
    "prelu": NeuronCase(T.PRELU, prelu=True, torch_fn=_prelu_t, kinks=[(0.0, 1.0)]),
    "relu6": NeuronCase(T.RELUN, a=0.0, b=6.0, torch_fn=F.relu6, kinks=[(0.0, 1.0), (6.0, 0.0)], domain=(-8, 8)),
    "hardtanh_relun": NeuronCase(T.RELUN, a=0.0, b=2.5, torch_fn=lambda x: F.hardtanh(x, 0.0, 2.5),
                                 kinks=[(2.5, 0.0)]),
    "relun_leaky": NeuronCase(T.RELUN, a=0.1, b=3.0, torch_fn=lambda x: torch.clamp(F.leaky_relu(x, 0.1), max=3.0),
                              kinks=[(0.0, 1.0), (3.0, 0.0)]),
    "power_cubic": NeuronCase(T.POWER, a=0.5, b=1.5, c=3.0, np_fn=_power_np(0.5, 1.5, 3.0), large=(-30.0, 30.0)),
    "power_sqrt": NeuronCase(T.POWER, a=-1.5, b=2.0, c=0.5, np_fn=_power_np(-1.5, 2.0, 0.5), domain=(-6.0, 1.2),
                             large=(-80.0, -30.0)),
    "exponential_e": NeuronCase(T.EXPONENTIAL, a=0.5, b=0.1, c=-1.0, np_fn=lambda x: np.exp(0.5 * x + 0.1)),
    "exponential_2": NeuronCase(T.EXPONENTIAL, a=-0.75, b=0.25, c=2.0,
                                np_fn=lambda x: np.power(2.0, -0.75 * x + 0.25)),
    "logarithm_e": NeuronCase(T.LOGARITHM, a=-2.0, b=0.5, c=-1.0, np_fn=lambda x: np.log(-2.0 * x + 0.5),
                              domain=(-6.0, 0.2), large=(-80.0, -30.0)),
    "logarithm_10": NeuronCase(T.LOGARITHM, a=2.0, b=0.5, c=10.0, np_fn=lambda x: np.log10(2.0 * x + 0.5),
                               domain=(-0.2, 6.0), large=(30.0, 80.0)),
    "gelu": NeuronCase(T.GELU, torch_fn=lambda x: F.gelu(x, approximate="none")),
}


def _inputs(case: NeuronCase, gen, n=2, h=5, w=6):
    lo, hi = case.domain
    x = gen.uniform(lo, hi, size=(n, h, w, C)).astype(np.float32)
    flat = x.reshape(-1)
    special = [v for v, _ in case.kinks] + list(case.large)
    # Each special value in every channel (PReLU's slope depends on the channel).
    for i, v in enumerate(special):
        flat[i * C:(i + 1) * C] = v
    kind = np.zeros(flat.shape, np.int8)  # 0 random, 1 kink, 2 large
    nk = len(case.kinks)
    kind[:nk * C] = 1
    kind[nk * C:len(special) * C] = 2
    return x, kind.reshape(x.shape)


def _oracle(case: NeuronCase, x32: np.ndarray, g32: np.ndarray):
    """(y, dx) in float64; dx from autograd or a central finite difference."""
    if case.torch_fn is not None:
        xt = torch.tensor(x32, dtype=torch.float64, requires_grad=True)
        yt = case.torch_fn(xt)
        (yt * torch.tensor(g32, dtype=torch.float64)).sum().backward()
        return yt.detach().numpy(), xt.grad.numpy()
    x = x32.astype(np.float64)
    y = case.np_fn(x)
    h = 1e-6 * np.maximum(1.0, np.abs(x))
    fd = (case.np_fn(x + h) - case.np_fn(x - h)) / (2 * h)
    return y, g32.astype(np.float64) * fd


def _check_groups(check, actual, expected, kind, what):
    for k, name in ((0, "random"), (2, "large")):
        sel = kind == k
        if sel.any():
            check(actual[sel], expected[sel], f"{what} ({name} inputs)")


@pytest.mark.parametrize("name", list(CASES))
def test_neuron_forward_and_gradient(device, queue, check, name):
    case = CASES[name]
    gen = rng("neuron-" + name)
    x_arr, kind = _inputs(case, gen)
    g_arr = randn(gen, *x_arr.shape)
    desc = case.descriptor()
    neuron = m.CNNNeuron(device, desc)
    grad = m.CNNNeuronGradient(device, desc)
    neuron.destination_image_allocator = m.ImageAllocator.persistent()
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x_arr, device)
    gs = m.batch_from_numpy(g_arr, device)
    cb = queue.command_buffer()
    ys, states = neuron.encode_batch(cb, xs, destination_state_is_temporary=False)
    assert all(isinstance(s, m.CNNNeuronGradientState) for s in states)
    dxs = grad.encode_batch(cb, gs, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    y = m.batch_to_numpy(ys)
    dx = m.batch_to_numpy(dxs)
    y_ref, dx_ref = _oracle(case, x_arr, g_arr)
    # Forward: every input, kinks included (f is continuous there).
    _check_groups(check, y, y_ref, kind, "forward")
    if (kind == 1).any():
        check(y[kind == 1], y_ref[kind == 1], "forward (kinks)")
    # Gradient away from the kinks against the oracle ...
    _check_groups(check, dx, dx_ref, kind, "gradient")
    # ... and at the kinks against MPS's x >= 0 convention: dX = G * f'(kink).
    for i, (xk, dk) in enumerate(case.kinks):
        sl = slice(i * C, (i + 1) * C)
        expected = g_arr.reshape(-1)[sl].astype(np.float64) * dk
        np.testing.assert_array_equal(dx.reshape(-1)[sl], expected.astype(np.float32),
                                      err_msg=f"derivative at the kink x = {xk}")


def test_kink_convention_explicit(device, queue):
    """f'(kink) with G = 1: the x >= 0 branch includes the kink (MPS), unlike PyTorch's relu (0)."""
    table = [
        (m.NNNeuronDescriptor(T.RELU), 0.0, 1.0),
        (m.NNNeuronDescriptor(T.RELU, a=0.2), 0.0, 1.0),
        (m.NNNeuronDescriptor(T.ELU, a=0.5), 0.0, 1.0),
        (m.NNNeuronDescriptor.prelu([0.3] * 4), 0.0, 1.0),
        (m.NNNeuronDescriptor(T.RELUN, a=0.1, b=6.0), 0.0, 1.0),
        (m.NNNeuronDescriptor(T.RELUN, a=0.1, b=6.0), 6.0, 0.0),
        (m.NNNeuronDescriptor(T.HARD_SIGMOID, a=0.25, b=0.5), -2.0, 0.0),
        (m.NNNeuronDescriptor(T.HARD_SIGMOID, a=0.25, b=0.5), 2.0, 0.0),
        (m.NNNeuronDescriptor(T.ABSOLUTE), 0.0, 0.0),
    ]
    for desc, xk, expected in table:
        x = m.Image.from_numpy(np.full((1, 1, 2, 4), xk, np.float32), device)
        g = m.Image.from_numpy(np.ones((1, 1, 2, 4), np.float32), device)
        cb = queue.command_buffer()
        _, state = m.CNNNeuron(device, desc).encode(cb, x, destination_state_is_temporary=False)
        dx = persistent(m.CNNNeuronGradient(device, desc)).encode(cb, g, x, state)
        cb.commit()
        cb.wait_until_completed()
        assert np.all(dx.to_numpy() == expected), (desc, xk, dx.to_numpy())


def test_descriptor_defaults_and_properties(device):
    """NNNeuronDescriptor(type) parameter defaults (docs/neurons.md) and CNNNeuron's read-only properties."""
    defaults = {
        T.NONE: (0, 0, 0), T.RELU: (0, 0, 0), T.LINEAR: (1, 0, 0), T.SIGMOID: (0, 0, 0),
        T.HARD_SIGMOID: (0.2, 0.5, 0), T.TANH: (1, 1, 0), T.ABSOLUTE: (0, 0, 0), T.SOFT_PLUS: (1, 1, 0),
        T.SOFT_SIGN: (0, 0, 0), T.ELU: (1, 0, 0), T.RELUN: (1, 6, 0), T.POWER: (1, 0, 1),
        T.EXPONENTIAL: (1, 0, -1), T.LOGARITHM: (1, 0, -1), T.GELU: (0, 0, 0),
    }
    for kind, (a, b, c) in defaults.items():
        d = m.NNNeuronDescriptor(kind)
        assert (d.a, d.b, d.c) == pytest.approx((a, b, c)), kind
        n = m.CNNNeuron(device, d)
        assert n.neuron_type == kind and (n.a, n.b, n.c) == pytest.approx((a, b, c))
        g = m.CNNNeuronGradient(device, d)
        assert g.neuron_type == kind
    d = m.NNNeuronDescriptor(T.TANH, a=2.0)
    assert (d.a, d.b) == (2.0, 1.0), "unspecified parameters keep the type's default"
    p = m.CNNNeuron(device, m.NNNeuronDescriptor.prelu([1.0, 2.0]))
    assert p.neuron_type == T.PRELU and list(p.data) == [1.0, 2.0]
    with pytest.raises(AttributeError):
        p.a = 3.0  # read-only, as in MPS


def test_destination_forms_offsets_clip_and_prelu_channels(device, queue, check):
    """Explicit destination forms with feature-channel offsets, a clip rectangle and an offset; PReLU data
    given per channel of the source image (indexed from source_feature_channel_offset)."""
    gen = rng("neuron-dest")
    H, W, CT = 6, 7, 12
    data = list(np.linspace(-0.5, 0.9, CT))
    desc = m.NNNeuronDescriptor.prelu(data)
    x_arr = randn(gen, 1, H, W, CT)
    neuron = m.CNNNeuron(device, desc)
    neuron.source_feature_channel_offset = 4
    neuron.source_feature_channel_max_count = 6  # channels 4..9
    neuron.destination_feature_channel_offset = 8
    neuron.offset = (1, 2, 0)
    neuron.clip_rect = m.Region((2, 1, 0), (4, 3, 1))
    x = m.Image.from_numpy(x_arr, device)
    sentinel = 3.5
    y = m.Image.from_numpy(np.full((1, H, W, 16), sentinel, np.float32), device)
    state = neuron.result_state(x)
    grad = m.CNNNeuronGradient(device, desc)
    g_arr = randn(gen, 1, H, W, 16)
    g = m.Image.from_numpy(g_arr, device)
    cb = queue.command_buffer()
    assert neuron.encode(cb, x, state, y) is y
    gdesc = grad.destination_image_descriptor([g, x], [state])
    assert (gdesc.width, gdesc.height, gdesc.feature_channels) == (W, H, CT)
    dx = m.Image.from_numpy(np.full((1, H, W, CT), sentinel, np.float32), device)
    assert grad.encode(cb, g, x, state, dx) is dx
    cb.commit()
    cb.wait_until_completed()

    a = np.array(data, np.float64)[4:10]
    xs = x_arr[0, 2:5, 1:5, 4:10].astype(np.float64)  # rows offset.y + [0,3), columns offset.x + [0,4)
    y_ref = np.where(xs >= 0, xs, a * xs)
    yo = y.to_numpy()[0]
    check(yo[1:4, 2:6, 8:14], y_ref, "forward in the clip")
    mask = np.ones(yo.shape, bool)
    mask[1:4, 2:6, 8:14] = False
    assert np.all(yo[mask] == sentinel), "pixels/channels outside the clip and channel range were written"
    gs = g_arr[0, 1:4, 2:6, 8:14].astype(np.float64)  # G read where the forward wrote
    dx_ref = gs * np.where(xs >= 0, 1.0, a)
    dxo = dx.to_numpy()[0]
    check(dxo[2:5, 1:5, 4:10], dx_ref, "gradient where the forward read")
    mask = np.ones(dxo.shape, bool)
    mask[2:5, 1:5, 4:10] = False
    assert np.all(dxo[mask] == sentinel)


def test_temporary_state_and_single_encode(device, queue, check):
    gen = rng("neuron-temp")
    x_arr = randn(gen, 1, 4, 5, 3)
    g_arr = randn(gen, 1, 4, 5, 3)
    desc = m.NNNeuronDescriptor(T.SOFT_PLUS, a=2.0, b=0.5)
    cb = queue.command_buffer()
    x = m.Image.from_numpy(x_arr, device)
    y, state = persistent(m.CNNNeuron(device, desc)).encode(cb, x, destination_state_is_temporary=True)
    assert state.is_temporary and state.read_count == 1
    dx = persistent(m.CNNNeuronGradient(device, desc)).encode(cb, m.Image.from_numpy(g_arr, device), x, state)
    assert state.read_count == 0
    cb.commit()
    cb.wait_until_completed()
    xt = torch.tensor(x_arr, dtype=torch.float64, requires_grad=True)
    yt = 2.0 * torch.log1p(torch.exp(0.5 * xt))
    (yt * torch.tensor(g_arr, dtype=torch.float64)).sum().backward()
    check(y.to_numpy(), yt.detach().numpy(), "forward")
    check(dx.to_numpy(), xt.grad.numpy(), "gradient")


# ---- bad inputs ---------------------------------------------------------------------------------------


def test_bad_neuron_inputs(device, queue):
    with pytest.raises(ValueError, match="neuron_type"):
        m.NNNeuronDescriptor(16)
    with pytest.raises(ValueError, match="neuron_type"):
        m.NNNeuronDescriptor(-1)
    d = m.NNNeuronDescriptor(T.RELU)
    with pytest.raises(ValueError, match="neuron_type"):
        d.neuron_type = 99
    with pytest.raises(ValueError, match="data"):
        m.NNNeuronDescriptor.prelu([])
    with pytest.raises(TypeError, match="neuron_descriptor"):
        m.CNNNeuron(device, None)

    x = m.Image.from_numpy(np.ones((1, 3, 3, 6), np.float32), device)
    cb = queue.command_buffer()
    xt = m.TemporaryImage(cb, m.ImageDescriptor(width=3, height=3, feature_channels=6))
    # PReLU data of the wrong length (neither 6 processed channels nor 6 image channels), before anything is encoded
    bad = m.CNNNeuron(device, m.NNNeuronDescriptor.prelu([0.1] * 5))
    with pytest.raises(ValueError, match="PReLU data has 5"):
        bad.encode(cb, xt)
    assert xt.read_count == 1, "nothing was encoded and the source's read count is unchanged"
    relu = m.NNNeuronDescriptor(T.RELU)
    neuron = m.CNNNeuron(device, relu)
    neuron.edge_mode = m.ImageEdgeMode.MIRROR
    with pytest.raises(ValueError, match="edge_mode"):
        neuron.encode(cb, xt)
    assert xt.read_count == 1
    neuron.edge_mode = m.ImageEdgeMode.ZERO

    # gradient kernels given the wrong secondary or state
    y, state = neuron.encode(cb, x, destination_state_is_temporary=False)
    g = m.Image.from_numpy(np.ones((1, 3, 3, 6), np.float32), device)
    grad = persistent(m.CNNNeuronGradient(device, relu))
    with pytest.raises(ValueError, match="forward output Y"):
        grad.encode(cb, g, y, state)
    with pytest.raises(ValueError, match="source_image"):
        grad.encode(cb, g, m.Image.from_numpy(np.ones((1, 4, 3, 6), np.float32), device), state)
    with pytest.raises(ValueError, match="type ReLU"):
        m.CNNNeuronGradient(device, m.NNNeuronDescriptor(T.SIGMOID)).encode(cb, g, x, state)
    _, sm_state = m.CNNSoftMax(device).encode(cb, x, destination_state_is_temporary=False)
    with pytest.raises(TypeError, match="CNNNeuronGradientState"):
        grad.encode(cb, g, x, sm_state)
    with pytest.raises(TypeError, match="gradient_state"):
        grad.encode(cb, g, x, None)
    small_g = m.Image.from_numpy(np.ones((1, 2, 2, 6), np.float32), device)
    with pytest.raises(ValueError, match="source_gradient"):
        grad.encode(cb, small_g, x, state)
    # the buffer is still good
    dx = grad.encode(cb, g, x, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    assert np.all(dx.to_numpy() == 1.0)


# ---- fused neurons in convolution ------------------------------------------------------------------------

FUSED = {
    # name: (descriptor, torch function of the pre-activation (float64, NCHW))
    "relu": (m.NNNeuronDescriptor(T.RELU), F.relu),
    "leaky_relu": (m.NNNeuronDescriptor(T.RELU, a=0.1), lambda x: F.leaky_relu(x, 0.1)),
    "linear": (m.NNNeuronDescriptor(T.LINEAR, a=0.5, b=-0.25), lambda x: 0.5 * x - 0.25),
    "sigmoid": (m.NNNeuronDescriptor(T.SIGMOID), torch.sigmoid),
    "hard_sigmoid": (m.NNNeuronDescriptor(T.HARD_SIGMOID, a=0.2, b=0.5), lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    "tanh": (m.NNNeuronDescriptor(T.TANH, a=1.2, b=0.8), lambda x: 1.2 * torch.tanh(0.8 * x)),
    "absolute": (m.NNNeuronDescriptor(T.ABSOLUTE), torch.abs),
    "soft_plus": (m.NNNeuronDescriptor(T.SOFT_PLUS, a=1.5, b=0.7),
                  lambda x: 1.5 * 0.7 * F.softplus(x, beta=0.7, threshold=1e6)),
    "soft_sign": (m.NNNeuronDescriptor(T.SOFT_SIGN), F.softsign),
    "elu": (m.NNNeuronDescriptor(T.ELU, a=0.8), lambda x: F.elu(x, alpha=0.8)),
    "prelu": (m.NNNeuronDescriptor.prelu([0.1, -0.2, 0.3, 0.5, 0.05, 1.5]),
              lambda x: F.prelu(x, torch.tensor([0.1, -0.2, 0.3, 0.5, 0.05, 1.5], dtype=torch.float64))),
    "relun": (m.NNNeuronDescriptor(T.RELUN, a=0.1, b=0.8), lambda x: torch.clamp(F.leaky_relu(x, 0.1), max=0.8)),
    "power": (m.NNNeuronDescriptor(T.POWER, a=0.5, b=1.0, c=3.0), lambda x: (0.5 * x + 1.0) ** 3),
    "exponential": (m.NNNeuronDescriptor(T.EXPONENTIAL, a=0.5, b=0.1, c=2.0), lambda x: 2.0 ** (0.5 * x + 0.1)),
    "logarithm": (m.NNNeuronDescriptor(T.LOGARITHM, a=0.2, b=4.0, c=-1.0), lambda x: torch.log(0.2 * x + 4.0)),
    "gelu": (m.NNNeuronDescriptor(T.GELU), lambda x: F.gelu(x, approximate="none")),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_neuron_in_convolution(device, queue, check, monkeypatch, name):
    desc, fn = FUSED[name]
    kind = desc.neuron_type
    monkeypatch.setitem(NEURONS, "fused-" + name, (kind, None, None, lambda x, a, b: fn(x)))
    spec = ConvSpec(3, 3, 4, 6, sx=1, sy=1, neuron="fused-" + name)
    gen = rng("fused-" + name)
    x_arr = randn(gen, 2, 6, 7, 4)
    w, b = spec.random_parameters(gen)
    d = spec.descriptor()
    d.fused_neuron_descriptor = desc
    ds = m.CNNConvolutionWeightsDataSource(d, w, b)
    conv = m.CNNConvolution(device, ds)
    grad = m.CNNConvolutionGradient(device, ds)
    conv.destination_image_allocator = m.ImageAllocator.persistent()
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x_arr, device)
    e_arr = randn(gen, 2, 6, 7, 6)
    cb = queue.command_buffer()
    ys, states = conv.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = grad.encode_batch(cb, m.batch_from_numpy(e_arr, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    ref = conv_reference(spec, x_arr, w, b, offset=tuple(conv.offset)[:2], out_size=(7, 6), e_nhwc=e_arr)
    check(m.batch_to_numpy(ys), ref["y"], "forward")
    check(m.batch_to_numpy(dxs), ref["dx"], "data gradient")
    check(states[0].gradient_for_weights, ref["dw"], "weight gradient")
    check(states[0].gradient_for_biases, ref["db"], "bias gradient")


def test_fused_prelu_data_length_is_checked(device):
    d = m.CNNConvolutionDescriptor(kernel_width=3, kernel_height=3, input_feature_channels=4,
                                   output_feature_channels=6)
    d.fused_neuron_descriptor = m.NNNeuronDescriptor.prelu([0.1] * 4)
    with pytest.raises(ValueError, match="PReLU data has 4"):
        m.CNNConvolutionWeightsDataSource(d, np.zeros((6, 3, 3, 4), np.float32))


# ---- PReLU slope gradient (mpsgrad extension) ---------------------------------------------------------


def test_prelu_slope_gradient_extension(device, queue, check):
    """CNNNeuronGradientState.gradient_for_data = dL/da of this state's forward image, against autograd
    of F.prelu's weight; with data per channel of the source image, only the processed slice is nonzero."""
    gen = rng("prelu-da")
    x = randn(gen, 2, 5, 6, C)
    g = randn(gen, 2, 5, 6, C)
    desc = m.NNNeuronDescriptor.prelu(PRELU_DATA)
    neuron, grad = m.CNNNeuron(device, desc), m.CNNNeuronGradient(device, desc)
    xs = m.batch_from_numpy(x, device)
    cb = queue.command_buffer()
    _, states = neuron.encode_batch(cb, xs, destination_state_is_temporary=False)
    grad.encode_batch(cb, m.batch_from_numpy(g, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    for i in range(2):
        X = torch.tensor(x[i:i + 1], dtype=torch.float64).permute(0, 3, 1, 2)
        w = torch.tensor(PRELU_DATA, dtype=torch.float64, requires_grad=True)
        (F.prelu(X, w) * torch.tensor(g[i:i + 1], dtype=torch.float64).permute(0, 3, 1, 2)).sum().backward()
        check(states[i].gradient_for_data, w.grad.numpy(), f"dL/da of image {i}")

    # data per channel of a 12-channel image, channels 4..9 processed
    data = list(np.linspace(-0.5, 0.5, 12))
    x2 = randn(gen, 1, 4, 5, 12)
    g2 = randn(gen, 1, 4, 5, 12)
    desc2 = m.NNNeuronDescriptor.prelu(data)
    n2 = m.CNNNeuron(device, desc2)
    n2.source_feature_channel_offset = 4
    n2.source_feature_channel_max_count = 6
    X2 = m.Image.from_numpy(x2, device)
    cb = queue.command_buffer()
    _, state = n2.encode(cb, X2, destination_state_is_temporary=False)
    m.CNNNeuronGradient(device, desc2).encode(cb, m.Image.from_numpy(g2[..., 4:10].copy(), device), X2, state)
    cb.commit()
    cb.wait_until_completed()
    xs2, gs2 = x2[0, ..., 4:10].astype(np.float64), g2[0, ..., 4:10].astype(np.float64)
    expected = np.zeros(12)
    expected[4:10] = (gs2 * np.minimum(xs2, 0)).sum(axis=(0, 1))
    check(state.gradient_for_data, expected, "dL/da of the processed slice")
    assert np.all(state.gradient_for_data[:4] == 0) and np.all(state.gradient_for_data[10:] == 0)

    _, relu_state = m.CNNNeuron(device, m.NNNeuronDescriptor(T.RELU)).encode(
        queue.command_buffer(), X2, destination_state_is_temporary=False)
    assert relu_state.gradient_for_data is None
