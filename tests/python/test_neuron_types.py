"""The per-type MPSCNNNeuron subclasses (CNNNeuronReLU, ..., CNNNeuronLogarithm).

Each is a CNNNeuron with a fixed type built by MPS's per-type initializer. Proven here: the init
signatures and their defaults (the documented descriptor defaults, docs/neurons.md), the class
hierarchy, and that every subclass computes bit for bit what CNNNeuron(device, NNNeuronDescriptor)
computes -- forward, the gradient state it writes, and CNNNeuronGradient on that state -- on every
device. The descriptor form itself is checked against PyTorch autograd / float64 references in
test_neuron.py; the forward is also compared with a float64 formula here (bound 1e-5 relative:
one float32 evaluation of an elementary function).
"""
from __future__ import annotations

import re
import struct
import zlib

import numpy as np
import pytest

import mpsgrad as m
from conftest import randn, rng

T = m.CNNNeuronType

# class name -> (type, positional parameters used in the test, documented defaults, float64 formula)
SUBCLASSES = {
    "CNNNeuronAbsolute": (T.ABSOLUTE, (), (), lambda x: np.abs(x)),
    "CNNNeuronSigmoid": (T.SIGMOID, (), (), lambda x: 1 / (1 + np.exp(-x))),
    "CNNNeuronSoftSign": (T.SOFT_SIGN, (), (), lambda x: x / (1 + np.abs(x))),
    "CNNNeuronReLU": (T.RELU, (0.125,), (0.0,), lambda x: np.where(x >= 0, x, 0.125 * x)),
    "CNNNeuronELU": (T.ELU, (0.75,), (1.0,), lambda x: np.where(x >= 0, x, 0.75 * np.expm1(x))),
    "CNNNeuronLinear": (T.LINEAR, (-1.5, 0.25), (1.0, 0.0), lambda x: -1.5 * x + 0.25),
    "CNNNeuronHardSigmoid": (T.HARD_SIGMOID, (0.25, 0.5), (0.2, 0.5), lambda x: np.clip(0.25 * x + 0.5, 0, 1)),
    "CNNNeuronTanH": (T.TANH, (1.5, 0.75), (1.0, 1.0), lambda x: 1.5 * np.tanh(0.75 * x)),
    "CNNNeuronSoftPlus": (T.SOFT_PLUS, (1.5, 0.75), (1.0, 1.0), lambda x: 1.5 * np.log1p(np.exp(0.75 * x))),
    "CNNNeuronReLUN": (T.RELUN, (0.1, 1.5), (1.0, 6.0), lambda x: np.minimum(np.where(x >= 0, x, 0.1 * x), 1.5)),
    "CNNNeuronPower": (T.POWER, (0.5, 3.0, 2.0), (1.0, 0.0, 1.0), lambda x: (0.5 * x + 3.0) ** 2),
    "CNNNeuronExponential": (T.EXPONENTIAL, (0.5, 0.25, 2.0), (1.0, 0.0, -1.0), lambda x: 2.0 ** (0.5 * x + 0.25)),
    "CNNNeuronLogarithm": (T.LOGARITHM, (0.5, 3.0, -1.0), (1.0, 0.0, -1.0), lambda x: np.log(0.5 * x + 3.0)),
}
PRELU = [0.1, -0.3, 0.25, 0.5, 1.5]


def test_every_per_type_class_is_bound():
    """The 14 MPSCNNNeuron subclasses of mps_training_classes.txt, all CNNNeuron subclasses."""
    names = set(SUBCLASSES) | {"CNNNeuronPReLU"}
    assert len(names) == 14
    for name in names:
        cls = getattr(m, name)
        assert issubclass(cls, m.CNNNeuron) and issubclass(cls, m.CNNKernel), name
    bound = {n for n, c in vars(m._mpsgrad).items()
             if isinstance(c, type) and issubclass(c, m.CNNNeuron) and c is not m.CNNNeuron}
    assert bound == names


@pytest.mark.parametrize("name", sorted(SUBCLASSES))
def test_defaults_are_the_descriptor_defaults(device, name):
    kind, params, defaults, _ = SUBCLASSES[name]
    cls = getattr(m, name)
    k = cls(device)  # every parameter has its documented default
    d = m.NNNeuronDescriptor(kind)
    assert k.neuron_type == kind
    assert (k.a, k.b, k.c) == (d.a, d.b, d.c)
    assert tuple(getattr(k, p) for p in "abc"[:len(defaults)]) == pytest.approx(defaults)
    sig = cls.__init__.__doc__.splitlines()[0]  # pybind11's signature line
    assert len(re.findall(r"\b[abc]: ", sig)) == len(defaults), sig
    k2 = cls(device, *params)
    assert (k2.a, k2.b, k2.c)[:len(params)] == pytest.approx(params)
    assert k2.neuron_descriptor.neuron_type == kind


def _run(device, neuron, x_arr, g_arr):
    """Forward into a zeroed destination with a state, then CNNNeuronGradient(neuron.neuron_descriptor)
    on that state (its returning form copies the forward geometry; dX in a fresh zeroed image)."""
    q = m.CommandQueue(device)
    x = m.Image.from_numpy(x_arr, device)
    g = m.Image.from_numpy(g_arr, device)
    y = m.Image(device, m.ImageDescriptor(x_arr.shape[2], x_arr.shape[1], 5))
    grad = m.CNNNeuronGradient(device, neuron.neuron_descriptor)
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    state = neuron.result_state(x)
    neuron.encode(cb, x, state, y)
    assert isinstance(state, m.CNNNeuronGradientState) and state.neuron_type == neuron.neuron_type
    dx = grad.encode(cb, g, x, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return y.to_numpy(), dx.to_numpy()


def _configure(k):
    """Offsets, a clip rectangle and channel offsets: the subclass inherits all of CNNNeuron's geometry."""
    k.offset = (1, 0, 0)
    k.clip_rect = m.Region((0, 1, 0), (5, 3, 1))
    k.source_feature_channel_offset = 4
    k.edge_mode = m.ImageEdgeMode.CLAMP
    return k


@pytest.mark.parametrize("name", sorted(SUBCLASSES) + ["CNNNeuronPReLU"])
def test_subclass_computes_what_the_descriptor_form_computes(device, check, name):
    gen = rng("neuron-type-" + name)
    x_arr = randn(gen, 1, 5, 7, 9)
    if name in ("CNNNeuronPower", "CNNNeuronLogarithm"):
        x_arr = np.abs(x_arr)  # a*x + b > 0
    g_arr = randn(gen, 1, 5, 7, 5)  # G read where the forward wrote: channels 0..4
    if name == "CNNNeuronPReLU":
        typed = m.CNNNeuronPReLU(device, PRELU)
        desc = m.NNNeuronDescriptor.prelu(PRELU)
        formula = lambda x: np.where(x >= 0, x, np.array(PRELU) * x)  # noqa: E731
    else:
        kind, params, _, formula = SUBCLASSES[name]
        typed = getattr(m, name)(device, *params)
        desc = m.NNNeuronDescriptor(kind, *params)
    plain = m.CNNNeuron(device, desc)
    y_t, dx_t = _run(device, _configure(typed), x_arr, g_arr)
    y_p, dx_p = _run(device, _configure(plain), x_arr, g_arr)
    assert y_t.tobytes() == y_p.tobytes(), "forward differs from the descriptor form"
    assert dx_t.tobytes() == dx_p.tobytes(), "gradient differs from the descriptor form"
    # The forward against a float64 formula: rows 0..2 of the clip read source rows 0..2 from column 1.
    x64 = x_arr[0, :3, 1:6, 4:9].astype(np.float64)
    check(y_t[0, 1:4, 0:5, :], formula(x64), "forward in the clip")


def test_bad_arguments(device):
    with pytest.raises(ValueError, match="a: PReLU needs at least one"):
        m.CNNNeuronPReLU(device, [])
    with pytest.raises(TypeError):
        m.CNNNeuronReLU(device, "0.5")
    with pytest.raises(TypeError):
        m.CNNNeuronSigmoid(device, 1.0)  # no parameters
    with pytest.raises(TypeError):
        m.CNNNeuronTanH(device, 1.0, 2.0, 3.0)
    with pytest.raises((TypeError, ValueError), match="device"):
        m.CNNNeuronLinear("no-such-device", 1.0, 0.0)


def test_decoding_checks_the_type():
    """A per-type class decodes only a payload of its own type (the class tag says CNNNeuronTanH, the
    descriptor inside says ReLU): ValueError, never a mistyped kernel."""
    relu = m.CNNNeuronReLU("cpu", 0.0).to_bytes()
    tanh = m.CNNNeuronTanH("cpu").to_bytes()
    assert m.Kernel.from_bytes(relu, "cpu").neuron_type == T.RELU
    # The ReLU payload under the other class tag, in the envelope of docs/serialization.md.
    payload = relu[8 + 12 + len("CNNNeuronReLU") + 8:-4]
    head = b"MPSGRAD\0" + struct.pack("<III", 1, 1, len("CNNNeuronTanH")) + b"CNNNeuronTanH"
    body = head + struct.pack("<Q", len(payload)) + payload
    forged = body + struct.pack("<I", zlib.crc32(body))
    with pytest.raises(ValueError, match="TanH"):
        m.Kernel.from_bytes(forged, "cpu")
    assert type(m.Kernel.from_bytes(tanh, "cpu")) is m.CNNNeuronTanH
