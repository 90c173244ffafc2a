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
  crash fails the test instead of killing pytest.
"""
from __future__ import annotations

import copy
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

import mpsgrad as m
from conftest import _REQUESTED, max_rel_err, randn, rng

PROTOCOLS = range(0, pickle.HIGHEST_PROTOCOL + 1)


class MyPadding(m.NNPadding):
    """A custom Python padding policy (module level, so pickle finds it by reference)."""

    def __init__(self):
        super().__init__()
        self.method = int(m.PaddingMethod.SIZE_VALID_ONLY)

    def padding_method(self):
        return self.method


class MyAllocator(m.ImageAllocator):
    def __init__(self):
        super().__init__()
        self.made = 0

    def image_for_command_buffer(self, command_buffer, descriptor, kernel):
        self.made += 1
        return m.Image(command_buffer.device, descriptor)


# ---------------------------------------------------------------------------------------------
# objects under test


def conv_source(seed="conv", neuron=None, bias=True, groups=1):
    gen = rng(seed)
    d = m.CNNConvolutionDescriptor(3, 3, 8, 8, neuron=neuron)
    d.groups = groups
    d.stride_in_pixels_x = 2
    d.dilation_rate_y = 2
    w = randn(gen, 8, 3, 3, 8 // groups)
    b = randn(gen, 8) if bias else None
    return m.CNNConvolutionWeightsDataSource(d, w, b, label="weights")


def fc_source(seed="fc"):
    """A fully connected layer over the 7x9x8 test images (kernel = source size), 8 -> 6 channels."""
    gen = rng(seed)
    d = m.CNNConvolutionDescriptor(9, 7, 8, 6)
    return m.CNNConvolutionWeightsDataSource(d, randn(gen, 6, 7, 9, 8), randn(gen, 6), label="fc")


def transpose_source(seed="transpose"):
    """A 2x-upsampling transposed convolution, 8 -> 4 channels (the 7x9x8 test images)."""
    gen = rng(seed)
    d = m.CNNConvolutionDescriptor(3, 3, 8, 4)
    d.stride_in_pixels_x = d.stride_in_pixels_y = 2
    return m.CNNConvolutionWeightsDataSource(d, randn(gen, 4, 3, 3, 8), randn(gen, 4), label="transpose")


def set_cnn_properties(k):
    """Non-default values for every MPSCNNKernel property (not meant to run)."""
    k.options = int(m.KernelOptions.ALLOW_REDUCED_PRECISION | m.KernelOptions.VERBOSE)
    k.label = "kernel \u00e9\u4e2d"
    k.offset = (1, -2, 0)
    k.clip_rect = m.Region((1, 2, 0), (3, 4, 1))
    k.destination_feature_channel_offset = 4
    k.source_feature_channel_offset = 8
    k.source_feature_channel_max_count = 4
    k.edge_mode = m.ImageEdgeMode.CLAMP
    k.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_VALID_ONLY | m.PaddingMethod.ALIGN_TOP_LEFT))
    k.destination_image_allocator = m.ImageAllocator.persistent()
    return k


def set_binary_properties(k):
    k.options = 2
    k.label = "binary"
    k.primary_offset = (1, 2, 0)
    k.secondary_offset = (-3, 4, 1)
    k.clip_rect = m.Region((0, 1, 0), (5, 6, 2))
    k.destination_feature_channel_offset = 8
    k.primary_source_feature_channel_offset = 4
    k.secondary_source_feature_channel_offset = 12
    k.primary_source_feature_channel_max_count = 3
    k.secondary_source_feature_channel_max_count = 7
    k.primary_edge_mode = m.ImageEdgeMode.CLAMP
    k.secondary_edge_mode = m.ImageEdgeMode.MIRROR
    k.primary_stride_in_pixels_x = 0
    k.secondary_stride_in_pixels_y = 0
    k.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_FULL))
    k.destination_image_allocator = m.ImageAllocator.temporary()
    if isinstance(k, m.CNNGradientKernel):
        k.kernel_offset_x, k.kernel_offset_y = 2, -1
    if hasattr(k, "primary_scale"):
        k.primary_scale, k.secondary_scale, k.bias = 0.5, -2.0, 0.25
        k.primary_stride_in_feature_channels = 0
        k.minimum_value, k.maximum_value = -3.0, float("inf")
    return k


def arithmetic_kernels():
    out = {}
    for name in ("CNNAdd", "CNNSubtract", "CNNMultiply", "CNNDivide", "NNCompare"):
        out[name] = (lambda cls: lambda dev: getattr(m, cls)(dev))(name)
    for name in ("CNNAddGradient", "CNNSubtractGradient", "CNNMultiplyGradient", "CNNDivideGradient"):
        for secondary in (False, True):
            out[f"{name}[{secondary}]"] = (lambda cls, s: lambda dev: getattr(m, cls)(dev, s))(name, secondary)
    return out


POOLING = ("CNNPoolingMax", "CNNPoolingAverage", "CNNPoolingL2Norm")
UPSAMPLING = ("CNNUpsamplingNearest", "CNNUpsamplingBilinear")


def family_kernels():
    """Pooling, dilated pooling, upsampling and dropout, forward and gradient (constructor arguments
    that differ from the defaults)."""
    out = {}
    for name in POOLING:
        for suffix in ("", "Gradient"):
            out[name + suffix] = (lambda cls: lambda dev: getattr(m, cls)(dev, 3, 2, 2, 1))(name + suffix)
    out["CNNDilatedPoolingMax"] = lambda dev: m.CNNDilatedPoolingMax(dev, 2, 3, 2, 1, 1, 2)
    out["CNNDilatedPoolingMaxGradient"] = lambda dev: m.CNNDilatedPoolingMaxGradient(dev, 2, 3, 2, 1, 1, 2)
    for name in UPSAMPLING:
        for suffix in ("", "Gradient"):
            out[name + suffix] = (lambda cls: lambda dev: getattr(m, cls)(dev, 2, 3))(name + suffix)
    out["CNNUpsamplingBilinear[align_corners]"] = lambda dev: m.CNNUpsamplingBilinear(dev, 3, 2, True)
    out["CNNDropout"] = lambda dev: m.CNNDropout(dev, 0.625, 2**63 + 12345, (1, 0, 1))
    out["CNNDropout[broadcast]"] = lambda dev: m.CNNDropout(dev, 0.25, 7, (0, 1, 0))
    out["CNNDropoutGradient"] = lambda dev: m.CNNDropoutGradient(dev, 0.625, 2**63 + 12345, (1, 0, 1))
    return out


def local_normalization_kernels():
    """Cross-channel, spatial and local contrast normalization, forward and gradient."""
    out = {}
    for suffix in ("", "Gradient"):
        out["CNNCrossChannelNormalization" + suffix] = (
            lambda cls: lambda dev: getattr(m, cls)(dev, 4))("CNNCrossChannelNormalization" + suffix)
        for name in ("CNNSpatialNormalization", "CNNLocalContrastNormalization"):
            out[name + suffix] = (lambda cls: lambda dev: getattr(m, cls)(dev, 3, 3))(name + suffix)
    return out


LOCAL_NORMALIZATION = tuple(getattr(m, n) for n in local_normalization_kernels())


def set_local_normalization_parameters(k):
    """alpha, beta, delta (and p0, pm, ps) off their defaults, still valid."""
    k.alpha, k.beta, k.delta = 0.75, 0.625, 0.5
    if hasattr(k, "p0"):
        k.p0, k.pm, k.ps = 0.875, 0.125, 1.5
    return k


def set_family_properties(k):
    """The properties of the pooling / upsampling / dropout classes beyond their base class."""
    if isinstance(k, (m.CNNPoolingAverage, m.CNNPoolingAverageGradient)):
        k.zero_pad_size_x, k.zero_pad_size_y = 1, 2
    if isinstance(k, m.CNNPoolingGradient):
        k.source_size = (4, 3, 1)
    if isinstance(k, m.CNNUpsamplingBilinear):
        k.coordinate_mode = m.UpsamplingCoordinateMode.ASYMMETRIC
    if isinstance(k, m.NNPad):
        k.fill_value = 0.375
        k.padding_size_after = (2, 0, 3)
    if isinstance(k, LOCAL_NORMALIZATION):
        set_local_normalization_parameters(k)
    return k


def reshape_pad_kernels():
    """The reshape and pad family (MPSNNReshape.h)."""
    return {
        "NNReshape": lambda dev: m.NNReshape(dev),
        "NNReshapeGradient": lambda dev: m.NNReshapeGradient(dev),
        "NNPad": lambda dev: m.NNPad(dev, (1, 2, 0), (3, 1, 4)),
        "NNPad[fill_value_array]": lambda dev: m.NNPad(dev, (1, 0, 1), (0, 2, 3), fill_value_array=[0.5] * 16),
        "NNPadGradient": lambda dev: m.NNPadGradient(dev),
    }


def prelu():
    return m.NNNeuronDescriptor.prelu([0.1, 0.2, 0.3, 0.4])


def neuron_type_kernels():
    """The per-type CNNNeuron subclasses, parameters off their defaults."""
    return {
        "CNNNeuronAbsolute": lambda dev: m.CNNNeuronAbsolute(dev),
        "CNNNeuronSigmoid": lambda dev: m.CNNNeuronSigmoid(dev),
        "CNNNeuronSoftSign": lambda dev: m.CNNNeuronSoftSign(dev),
        "CNNNeuronReLU": lambda dev: m.CNNNeuronReLU(dev, 0.25),
        "CNNNeuronELU": lambda dev: m.CNNNeuronELU(dev, 0.5),
        "CNNNeuronPReLU": lambda dev: m.CNNNeuronPReLU(dev, [0.5, -0.25, 0.125, 2.0]),
        "CNNNeuronLinear": lambda dev: m.CNNNeuronLinear(dev, -1.5, 0.25),
        "CNNNeuronHardSigmoid": lambda dev: m.CNNNeuronHardSigmoid(dev, 0.25, 0.375),
        "CNNNeuronTanH": lambda dev: m.CNNNeuronTanH(dev, 1.5, 0.5),
        "CNNNeuronSoftPlus": lambda dev: m.CNNNeuronSoftPlus(dev, 1.5, 0.5),
        "CNNNeuronReLUN": lambda dev: m.CNNNeuronReLUN(dev, 0.125, 2.5),
        "CNNNeuronPower": lambda dev: m.CNNNeuronPower(dev, 0.5, 4.0, 2.0),
        "CNNNeuronExponential": lambda dev: m.CNNNeuronExponential(dev, 0.5, 0.25, 2.0),
        "CNNNeuronLogarithm": lambda dev: m.CNNNeuronLogarithm(dev, 0.25, 4.0, 10.0),
    }


def bn_source(seed="bn", c=4):
    gen = rng(seed)
    return m.CNNBatchNormalizationWeightsDataSource(
        randn(gen, c) + 1.0, randn(gen, c), randn(gen, c), gen.random(c).astype(np.float32) + 0.5, epsilon=1e-3,
        label="bn")


def batch_normalization_kernels():
    tanh = m.NNNeuronDescriptor(m.CNNNeuronType.TANH)
    return {
        "CNNBatchNormalization": lambda dev: m.CNNBatchNormalization(dev, bn_source()),
        "CNNBatchNormalization[prelu]": lambda dev: m.CNNBatchNormalization(dev, bn_source("p"), prelu()),
        "CNNBatchNormalizationStatistics": lambda dev: m.CNNBatchNormalizationStatistics(dev),
        "CNNBatchNormalizationStatisticsGradient": lambda dev: m.CNNBatchNormalizationStatisticsGradient(dev, tanh),
        "CNNBatchNormalizationGradient": lambda dev: m.CNNBatchNormalizationGradient(dev, tanh),
    }


def instance_source(c=6):
    gen = rng("in")
    return m.CNNInstanceNormalizationWeightsDataSource(randn(gen, c) + 1.0, randn(gen, c), epsilon=1e-3, label="in")


def group_source(c=6, groups=3):
    gen = rng("gn")
    return m.CNNGroupNormalizationWeightsDataSource(randn(gen, c) + 1.0, randn(gen, c), number_of_groups=groups,
                                                    epsilon=1e-3, label="gn")


def instance_group_kernels():
    return {
        "CNNInstanceNormalization": lambda dev: m.CNNInstanceNormalization(dev, instance_source()),
        "CNNInstanceNormalizationGradient": lambda dev: m.CNNInstanceNormalizationGradient(dev),
        "CNNGroupNormalization": lambda dev: m.CNNGroupNormalization(dev, group_source()),
        "CNNGroupNormalizationGradient": lambda dev: m.CNNGroupNormalizationGradient(dev),
    }


FACTORIES = {
    "CNNNeuron": lambda dev: m.CNNNeuron(dev, m.NNNeuronDescriptor(m.CNNNeuronType.TANH, a=1.5, b=0.5)),
    "CNNNeuron[prelu]": lambda dev: m.CNNNeuron(dev, prelu()),
    "CNNNeuronGradient": lambda dev: m.CNNNeuronGradient(dev, m.NNNeuronDescriptor(m.CNNNeuronType.ELU, a=0.7)),
    **neuron_type_kernels(),
    "CNNConvolution": lambda dev: m.CNNConvolution(dev, conv_source()),
    "CNNConvolution[grouped,neuron,nobias]": lambda dev: m.CNNConvolution(
        dev, conv_source("g", m.NNNeuronDescriptor(m.CNNNeuronType.RELU, a=0.1), bias=False, groups=2)),
    "CNNConvolutionGradient": lambda dev: m.CNNConvolutionGradient(dev, conv_source()),
    "CNNFullyConnected": lambda dev: m.CNNFullyConnected(dev, fc_source()),
    "CNNFullyConnectedGradient": lambda dev: m.CNNFullyConnectedGradient(dev, fc_source()),
    "CNNConvolutionTranspose": lambda dev: m.CNNConvolutionTranspose(dev, transpose_source()),
    "CNNConvolutionTransposeGradient": lambda dev: m.CNNConvolutionTransposeGradient(dev, transpose_source()),
    "CNNSoftMax": lambda dev: m.CNNSoftMax(dev),
    "CNNLogSoftMax": lambda dev: m.CNNLogSoftMax(dev),
    "CNNSoftMaxGradient": lambda dev: m.CNNSoftMaxGradient(dev),
    "CNNLogSoftMaxGradient": lambda dev: m.CNNLogSoftMaxGradient(dev),
    **arithmetic_kernels(),
    **family_kernels(),
    **batch_normalization_kernels(),
    **instance_group_kernels(),
    **reshape_pad_kernels(),
    **local_normalization_kernels(),
    "NNOptimizerStochasticGradientDescent": lambda dev: m.NNOptimizerStochasticGradientDescent(
        dev, momentum_scale=0.75, use_nesterov_momentum=True, optimizer_descriptor=optimizer_descriptor()),
    "NNOptimizerStochasticGradientDescent[plain]": lambda dev: m.NNOptimizerStochasticGradientDescent(dev, 0.5),
    "NNOptimizerRMSProp": lambda dev: m.NNOptimizerRMSProp(
        dev, decay=0.8, epsilon=1e-6, optimizer_descriptor=optimizer_descriptor()),
    "NNOptimizerAdam": lambda dev: m.NNOptimizerAdam(
        dev, beta1=0.85, beta2=0.995, epsilon=1e-7, time_step=7, optimizer_descriptor=optimizer_descriptor()),
    "CNNLoss": lambda dev: m.CNNLoss(dev, loss_descriptor()),
    "CNNLoss[cosine]": lambda dev: m.CNNLoss(
        dev, m.CNNLossDescriptor(m.CNNLossType.COSINE_DISTANCE, m.CNNReductionType.SUM)),
    "NNForwardLoss": lambda dev: m.NNForwardLoss(dev, loss_descriptor()),
    "NNLossGradient": lambda dev: m.NNLossGradient(dev, loss_descriptor()),
    "NNLossGradient[labels]": lambda dev: _label_gradient_kernel(dev),
    "NNInitialGradient": lambda dev: m.NNInitialGradient(dev),
}



def optimizer_descriptor():
    """Every NNOptimizerDescriptor field off its default."""
    return m.NNOptimizerDescriptor(0.125, gradient_rescale=0.5, apply_gradient_clipping=True, gradient_clip_max=2.0,
                                   gradient_clip_min=-1.5, regularization_type=m.NNRegularizationType.L2,
                                   regularization_scale=0.01)


def loss_descriptor():
    """Every CNNLossDescriptor field off its default."""
    d = m.CNNLossDescriptor(m.CNNLossType.HUBER, m.CNNReductionType.SUM_BY_NON_ZERO_WEIGHTS)
    d.weight, d.label_smoothing, d.number_of_classes = 0.5, 0.1, 3
    d.epsilon, d.delta, d.reduce_across_batch, d.scale_gradient_by_reduction = 1e-5, 0.75, True, False
    return d


def configured(name, dev):
    k = FACTORIES[name](dev)
    if isinstance(k, (m.NNOptimizer, m.CNNLoss, m.NNLossKernel, m.NNInitialGradient)):  # Kernel properties only
        k.options = int(m.KernelOptions.VERBOSE)
        k.label = "optimizer or loss"
        return k
    if isinstance(k, m.CNNKernel):
        set_cnn_properties(k)
    else:
        set_binary_properties(k)
    if isinstance(k, m.CNNConvolution):
        k.accumulator_precision_option = m.NNConvolutionAccumulatorPrecisionOption.HALF
    if isinstance(k, (m.CNNConvolutionGradient, m.CNNConvolutionTransposeGradient)):
        k.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_DATA
    if isinstance(k, m.CNNConvolutionTranspose):
        k.accumulator_precision_option = m.NNConvolutionAccumulatorPrecisionOption.HALF
        k.kernel_offset_x, k.kernel_offset_y = -3, 2
    if isinstance(k, m.NNCompare):
        k.comparison_type, k.threshold = m.NNComparisonType.GREATER_OR_EQUAL, 0.125
    if isinstance(k, (m.CNNBatchNormalization, m.CNNInstanceNormalization, m.CNNGroupNormalization)):
        k.epsilon = 0.25
    if isinstance(k, m.CNNBatchNormalizationGradient):
        k.training_statistics = False
    return set_family_properties(k)


# ---------------------------------------------------------------------------------------------
# property comparison

SKIP = {"device", "data_source", "padding", "destination_image_allocator"}


def public_properties(obj):
    """Every readable non-callable public attribute (properties of the bound class)."""
    out = {}
    for name in dir(type(obj)):
        if name.startswith("_") or name in SKIP:
            continue
        if not isinstance(getattr(type(obj), name), property):
            continue
        out[name] = getattr(obj, name)
    return out


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<f", a) == struct.pack("<f", b) or a == b
    if type(a).__module__ == "mpsgrad._mpsgrad" and hasattr(a, "to_bytes"):
        return type(a) is type(b) and a.to_bytes() == b.to_bytes()
    if isinstance(a, (m.Offset, m.Region)):
        return repr(a) == repr(b)
    return a == b


def assert_same_properties(a, b):
    assert type(a) is type(b)
    pa, pb = public_properties(a), public_properties(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert same(pa[name], pb[name]), f"{type(a).__name__}.{name}: {pa[name]!r} != {pb[name]!r}"
    for name in ("padding", "destination_image_allocator"):
        if hasattr(a, name):
            x, y = getattr(a, name), getattr(b, name)
            assert type(x) is type(y), name
            if isinstance(x, m.NNDefaultPadding):
                assert x.padding_method() == y.padding_method()
            if isinstance(x, m.ImageAllocator) and not isinstance(x, MyAllocator):
                assert x is y or repr(x) == repr(y)


# ---------------------------------------------------------------------------------------------
# round trips of every kernel


def test_every_kernel_class_has_a_case():
    """A new kernel family must add its classes here (and to the registry in C++)."""
    abstract = {"Kernel", "CNNKernel", "CNNBinaryKernel", "CNNGradientKernel", "CNNArithmetic", "CNNArithmeticGradient",
                "CNNPooling", "CNNPoolingGradient", "CNNUpsampling", "CNNUpsamplingGradient", "NNOptimizer",
                "NNLossKernel"}
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


# ---- bitwise identical outputs ----------------------------------------------------------------


def run_unary(q, k, x):
    k.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    y = k.encode(cb, x)
    cb.commit()
    cb.wait_until_completed()
    return y.to_numpy()


def forward_and_gradient(q, fwd, grad, inputs, g, source_for_gradient):
    """Runs fwd with a persistent state, then grad; returns (dX, extra buffers of the state)."""
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    y, state = fwd.encode(cb, *inputs, destination_state_is_temporary=False)
    dx = grad.encode(cb, g(y), source_for_gradient(inputs, y), state)
    cb.commit()
    cb.wait_until_completed()
    extra = [np.array(state.gradient_for_weights), np.array(state.gradient_for_biases)] \
        if isinstance(state, m.CNNConvolutionGradientState) else []
    return [dx.to_numpy()] + extra


def image(gen, dev, h=5, w=6, c=8):
    return m.Image.from_numpy(randn(gen, h, w, c), dev)


def output_cases():
    """name -> fn(queue, device, kernel, gen_seed) that runs `kernel` (or uses it as the gradient)."""
    cases = {}
    for name in ("CNNNeuron", "CNNNeuron[prelu]", "CNNConvolution", "CNNConvolution[grouped,neuron,nobias]",
                 "CNNSoftMax", "CNNLogSoftMax"):
        cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev))]
    cases["CNNNeuron[prelu]"] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, c=4))]
    for name in neuron_type_kernels():
        cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, c=4))]
    cases["CNNNeuronGradient"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNNeuron(dev, k.neuron_descriptor), k, [image(rng("x"), dev)], lambda y: image(rng("g"), dev),
        lambda inputs, y: inputs[0])
    cases["CNNConvolutionGradient"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNConvolution(dev, conv_source()), k, [image(rng("x"), dev, 7, 9)],
        lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, 8), dev), lambda inputs, y: inputs[0])
    cases["CNNFullyConnected"] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9))]
    cases["CNNFullyConnectedGradient"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNFullyConnected(dev, fc_source()), k, [image(rng("x"), dev, 7, 9)],
        lambda y: m.Image.from_numpy(randn(rng("g"), 1, 1, 6), dev), lambda inputs, y: inputs[0])
    cases["CNNConvolutionTranspose"] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9))]
    cases["CNNConvolutionTransposeGradient"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNConvolutionTranspose(dev, transpose_source()), k, [image(rng("x"), dev, 7, 9)],
        lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, 4), dev), lambda inputs, y: inputs[0])
    for fwd_name, grad_name in (("CNNSoftMax", "CNNSoftMaxGradient"), ("CNNLogSoftMax", "CNNLogSoftMaxGradient")):
        cases[grad_name] = (lambda f: lambda q, dev, k: forward_and_gradient(
            q, getattr(m, f)(dev), k, [image(rng("x"), dev)], lambda y: image(rng("g"), dev),
            lambda inputs, y: y))(fwd_name)
    for op in ("Add", "Subtract", "Multiply", "Divide"):
        cases[f"CNN{op}"] = lambda q, dev, k: [binary_forward(q, dev, k)]
        for secondary in (False, True):
            cases[f"CNN{op}Gradient[{secondary}]"] = (lambda o, s: lambda q, dev, k: forward_and_gradient(
                q, getattr(m, f"CNN{o}")(dev), k, [image(rng("x"), dev), image(rng("y"), dev)],
                lambda y: image(rng("g"), dev), lambda inputs, y: inputs[0 if s else 1]))(op, secondary)
    cases["NNCompare"] = lambda q, dev, k: [binary_forward(q, dev, k)]
    for name in family_kernels():
        if "Gradient" not in name:
            cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9))]
    for grad_name, forward in (
            ("CNNPoolingMaxGradient", lambda dev: m.CNNPoolingMax(dev, 3, 2, 2, 1)),
            ("CNNPoolingAverageGradient", lambda dev: m.CNNPoolingAverage(dev, 3, 2, 2, 1)),
            ("CNNPoolingL2NormGradient", lambda dev: m.CNNPoolingL2Norm(dev, 3, 2, 2, 1)),
            ("CNNDilatedPoolingMaxGradient", lambda dev: m.CNNDilatedPoolingMax(dev, 2, 3, 2, 1, 1, 2)),
            ("CNNUpsamplingNearestGradient", lambda dev: m.CNNUpsamplingNearest(dev, 2, 3)),
            ("CNNUpsamplingBilinearGradient", lambda dev: m.CNNUpsamplingBilinear(dev, 2, 3)),
            ("CNNDropoutGradient", lambda dev: m.CNNDropout(dev, 0.625, 2**63 + 12345, (1, 0, 1)))):
        cases[grad_name] = (lambda f: lambda q, dev, k: forward_and_gradient(
            q, f(dev), k, [image(rng("x"), dev, 7, 9)],
            lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, y.feature_channels), dev),
            lambda inputs, y: inputs[0]))(forward)
    for name in ("NNReshape", "NNPad", "NNPad[fill_value_array]"):
        cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9, c=6))]
    for grad_name, forward in (("NNReshapeGradient", lambda dev: m.NNReshape(dev)),
                               ("NNPadGradient", lambda dev: m.NNPad(dev, (2, 1, 1), (1, 3, 2)))):
        cases[grad_name] = (lambda f: lambda q, dev, k: forward_and_gradient(
            q, f(dev), k, [image(rng("x"), dev, 7, 9, c=6)],
            lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, y.feature_channels), dev),
            lambda inputs, y: inputs[0]))(forward)
    for name in local_normalization_kernels():
        if "Gradient" in name:
            cases[name] = (lambda f: lambda q, dev, k: forward_and_gradient(
                q, set_local_normalization_parameters(getattr(m, f)(dev, *k_args(k))), k,
                [image(rng("x"), dev, 7, 9)],
                lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, y.feature_channels), dev),
                lambda inputs, y: inputs[0]))(name[:-len("Gradient")])
        else:
            cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9))]
    for name, role in (("CNNBatchNormalization", "forward"), ("CNNBatchNormalization[prelu]", "forward"),
                       ("CNNBatchNormalizationStatistics", "statistics"),
                       ("CNNBatchNormalizationStatisticsGradient", "statistics_gradient"),
                       ("CNNBatchNormalizationGradient", "gradient")):
        cases[name] = (lambda r: lambda q, dev, k: batch_normalization_pass(q, dev, **{r: k}))(role)
    for name in ("NNOptimizerStochasticGradientDescent", "NNOptimizerStochasticGradientDescent[plain]",
                 "NNOptimizerRMSProp", "NNOptimizerAdam"):
        cases[name] = optimizer_steps
    cases["CNNLoss"] = cases["CNNLoss[cosine]"] = loss_outputs
    cases["NNForwardLoss"] = cases["NNLossGradient"] = cases["NNInitialGradient"] = split_loss_outputs
    cases["NNLossGradient[labels]"] = split_loss_outputs
    for family in ("Instance", "Group"):
        cases[f"CNN{family}Normalization"] = (lambda f: lambda q, dev, k: group_normalization_pass(
            q, dev, f, forward=k))(family)
        cases[f"CNN{family}NormalizationGradient"] = (
            lambda f: lambda q, dev, k: group_normalization_pass(q, dev, f, gradient=k))(family)
    return cases


def group_normalization_pass(q, dev, family, forward=None, gradient=None):
    """Forward (with per-image states) and gradient of two images; the outputs and the states' dγ, dβ."""
    source = instance_source() if family == "Instance" else group_source()
    forward = forward or getattr(m, f"CNN{family}Normalization")(dev, source)
    gradient = gradient or getattr(m, f"CNN{family}NormalizationGradient")(dev)
    forward.destination_image_allocator = m.ImageAllocator.persistent()
    gradient.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(randn(rng("x"), 2, 5, 6, 6), dev)
    gs = m.batch_from_numpy(randn(rng("g"), 2, 5, 6, 6), dev)
    cb = q.command_buffer()
    ys, states = forward.encode_batch(cb, xs, destination_state_is_temporary=False)
    dxs = gradient.encode_batch(cb, gs, xs, states)
    cb.commit()
    cb.wait_until_completed()
    return [m.batch_to_numpy(ys), m.batch_to_numpy(dxs)] + [np.array(s.gradient_for_gamma) for s in states] + \
        [np.array(s.gradient_for_beta) for s in states]


def batch_normalization_pass(q, dev, forward=None, statistics=None, statistics_gradient=None, gradient=None):
    """A training pass of the family with the given kernel in its role; returns Y, dγ, dβ, dX."""
    tanh = m.NNNeuronDescriptor(m.CNNNeuronType.TANH)
    forward = forward or m.CNNBatchNormalization(dev, bn_source(), tanh)
    neuron = forward.fused_neuron_descriptor
    statistics = statistics or m.CNNBatchNormalizationStatistics(dev)
    statistics_gradient = statistics_gradient or m.CNNBatchNormalizationStatisticsGradient(dev, neuron)
    gradient = gradient or m.CNNBatchNormalizationGradient(dev, neuron)
    def blob(d):  # None: no fused neuron
        return None if d is None else d.to_bytes()

    if blob(statistics_gradient.fused_neuron_descriptor) != blob(neuron):  # the kernel under test's neuron
        forward = m.CNNBatchNormalization(dev, bn_source(), statistics_gradient.fused_neuron_descriptor)
    if blob(gradient.fused_neuron_descriptor) != blob(neuron):
        forward = m.CNNBatchNormalization(dev, bn_source(), gradient.fused_neuron_descriptor)
    for k in (forward, gradient):
        k.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(randn(rng("x"), 2, 5, 6, 4), dev)
    gs = m.batch_from_numpy(randn(rng("g"), 2, 5, 6, 4), dev)
    state = forward.result_state(xs[0])
    cb = q.command_buffer()
    statistics.encode_batch(cb, xs, state)
    ys = forward.encode_batch(cb, xs, state)
    statistics_gradient.encode_batch(cb, gs, xs, state)
    dxs = [gradient.encode(cb, gs[i], xs[i], state) for i in range(len(xs))]
    cb.commit()
    cb.wait_until_completed()
    return [m.batch_to_numpy(ys), np.array(state.gradient_for_gamma), np.array(state.gradient_for_beta),
            m.batch_to_numpy(dxs)]


def optimizer_steps(q, dev, k):
    """Three updates of a vector (Adam's time step advances on each); the weights and every state."""
    gen = rng("optimizer")
    w = m.Vector.from_numpy(randn(gen, 16), dev)
    g = m.Vector.from_numpy(randn(gen, 16), dev)
    states = [m.Vector(dev, 16) for _ in range(2)]
    cb = q.command_buffer()
    for _ in range(3):
        if isinstance(k, m.NNOptimizerAdam):
            k.encode(cb, g, w, states[0], states[1], None, w)
        elif isinstance(k, m.NNOptimizerRMSProp):
            k.encode(cb, g, w, states[0], w)
        else:
            k.encode(cb, g, w, states[0] if k.momentum_scale > 0 else None, w)
    cb.commit()
    cb.wait_until_completed()
    return [w.to_numpy()] + [s.to_numpy() for s in states]


def loss_outputs(q, dev, k):
    """The gradient and the loss value of one image."""
    gen = rng("loss")
    y, t = randn(gen, 1, 4, 5, 3), randn(gen, 4, 5, 3)
    labels = m.CNNLossLabels(dev, m.CNNLossDataDescriptor(t))
    cb = q.command_buffer()
    out = k.encode(cb, m.Image.from_numpy(y, dev), labels)
    cb.commit()
    cb.wait_until_completed()
    return [out.to_numpy(), labels.loss_image.to_numpy()]


def _label_gradient_kernel(dev):
    k = m.NNLossGradient(dev, loss_descriptor())
    k.compute_label_gradients = True
    return k


def split_loss_outputs(q, dev, k):
    """NNForwardLoss: the loss images; NNLossGradient: the gradients for a source gradient of 2;
    NNInitialGradient: its ones."""
    gen = rng("split-loss")
    ys = m.batch_from_numpy(randn(gen, 2, 4, 5, 3), dev)
    ts = m.batch_from_numpy(randn(gen, 2, 4, 5, 3), dev)
    cb = q.command_buffer()
    if isinstance(k, m.NNForwardLoss):
        out = k.encode_batch(cb, ys, ts)
    elif isinstance(k, m.NNLossGradient):
        out = k.encode_batch(cb, m.batch_from_numpy(np.full((2, 1, 1, 1), 2.0, np.float32), dev), ys, ts)
    else:
        out = k.encode_batch(cb, ys)
    cb.commit()
    cb.wait_until_completed()
    return [m.batch_to_numpy(out)]


def binary_forward(q, dev, k):
    k.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    r = k.encode(cb, image(rng("x"), dev), image(rng("y"), dev))
    cb.commit()
    cb.wait_until_completed()
    return r.to_numpy()


OUTPUTS = output_cases()


def k_args(k):
    """The constructor's window arguments of a local normalization kernel."""
    return (k.kernel_size,) if hasattr(k, "kernel_size") else (k.kernel_width, k.kernel_height)


def runnable(name, dev):
    """A kernel with non-default properties that still runs on the test images."""
    k = FACTORIES[name](dev)
    k.label = "run"
    if isinstance(k, m.CNNKernel):
        k.edge_mode = m.ImageEdgeMode.CLAMP if not isinstance(k, (m.CNNSoftMax, m.CNNLogSoftMax, *LOCAL_NORMALIZATION)) \
            else k.edge_mode
        k.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_VALID_ONLY)) if isinstance(k, m.CNNConvolution) \
            else k.padding
    if hasattr(k, "primary_scale"):
        k.primary_scale, k.secondary_scale, k.bias = 0.5, 1.5, 0.25
        if not isinstance(k, m.CNNArithmeticGradient):
            k.minimum_value, k.maximum_value = -0.75, 2.0
    if isinstance(k, m.NNCompare):
        k.comparison_type = m.NNComparisonType.LESS
    if isinstance(k, (m.CNNPoolingAverage, m.CNNPoolingAverageGradient)):
        k.zero_pad_size_x, k.zero_pad_size_y = 1, 1
    if isinstance(k, LOCAL_NORMALIZATION):
        set_local_normalization_parameters(k)
    if isinstance(k, m.CNNUpsamplingBilinear) and not k.align_corners:
        k.coordinate_mode = m.UpsamplingCoordinateMode.ASYMMETRIC
    return k


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
            else:  # another backend (own exp / reduction order): float32 rounding differences only
                assert max_rel_err(g, e) <= 1e-5, f"{name} decoded on {target}"


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


# ---------------------------------------------------------------------------------------------
# descriptors, data sources, states


def descriptor_objects():
    depthwise = m.CNNDepthWiseConvolutionDescriptor(3, 5, 8, 8, neuron=prelu())
    d = m.CNNConvolutionDescriptor(2, 3, 8, 16, neuron=m.NNNeuronDescriptor(m.CNNNeuronType.POWER, a=2, b=1, c=3))
    d.set_batch_normalization_parameters_for_inference([0.5] * 16, [2.0] * 16, [1.5] * 16, [0.25] * 16, 0.01)
    return [
        m.ImageDescriptor(7, 5, 12, 3, m.ImageFeatureChannelFormat.FLOAT16, usage=1),
        m.NNNeuronDescriptor(m.CNNNeuronType.LOGARITHM, a=2.0, b=float("nan"), c=-0.0),
        prelu(),
        m.CNNConvolutionDescriptor(),  # default: invalid for a kernel, still a descriptor
        depthwise,
        d,
        conv_source(),
        conv_source("nb", bias=False),
    ]


@pytest.mark.parametrize("index", range(len(descriptor_objects())))
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_descriptor_and_data_source_round_trip(index, protocol):
    obj = descriptor_objects()[index]
    blob = obj.to_bytes()
    back = type(obj).from_bytes(blob)
    assert back.to_bytes() == blob
    assert_same_properties(obj, back)
    if isinstance(obj, m.CNNConvolutionWeightsDataSource):
        assert back.label() == obj.label()
        assert back.descriptor().to_bytes() == obj.descriptor().to_bytes()
        assert np.asarray(back.weights).tobytes() == np.asarray(obj.weights).tobytes()
    pickled = pickle.loads(pickle.dumps(obj, protocol=protocol))
    assert pickled.to_bytes() == blob


def test_descriptor_from_bytes_rejects_other_classes():
    blob = m.NNNeuronDescriptor(m.CNNNeuronType.RELU).to_bytes()
    with pytest.raises(m.SerializationError, match="expected a CNNConvolutionDescriptor"):
        m.CNNConvolutionDescriptor.from_bytes(blob)
    with pytest.raises(ValueError, match="kernel class"):
        m.Kernel.from_bytes(blob)
    with pytest.raises(ValueError, match="state class"):
        m.State.from_bytes(blob)
    with pytest.raises(TypeError, match="bytes-like"):
        m.Kernel.from_bytes("MPSGRAD")
    with pytest.raises(TypeError, match="device"):
        m.Kernel.from_bytes(m.CNNSoftMax("cpu").to_bytes(), 3.5)
    with pytest.raises(ValueError):
        m.Kernel.from_bytes(m.CNNSoftMax("cpu").to_bytes(), "tpu")


def states(device):
    plain = m.State(device, 24)
    plain.buffer_at_index(0)[...] = np.arange(6, dtype=np.float32)
    plain.label = "plain"
    empty = m.State(device)
    wb = m.CNNConvolutionWeightsAndBiasesState(device, m.CNNConvolutionDescriptor(3, 3, 4, 8))
    wb.weights[...] = randn(rng("wb"), 8, 3, 3, 4)
    wb.biases[...] = randn(rng("bb"), 8)
    wb.label = "wb"
    gamma_beta = m.CNNNormalizationGammaAndBetaState(device, randn(rng("gamma"), 5), randn(rng("beta"), 5))
    gamma_beta.label = "gamma/beta"
    mean_variance = m.CNNNormalizationMeanAndVarianceState(device, randn(rng("mean"), 3),
                                                           np.abs(randn(rng("var"), 3)))
    return [plain, empty, wb, gamma_beta, mean_variance]


def image_holding_states(device):
    """States that hold images, which have no coder (as MPSImage): they refuse with TypeError."""
    labels = m.CNNLossLabels(device, m.CNNLossDataDescriptor(randn(rng("labels"), 2, 3, 4)))
    return [labels]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_state_round_trip(device, protocol):
    for state in states(device):
        blob = state.to_bytes()
        for target in _REQUESTED:
            back = m.State.from_bytes(blob, target)
            assert type(back) is type(state) and back.label == state.label and not back.is_temporary
            assert back.to_bytes() == blob
            assert [back.buffer_size_at_index(i) for i in range(back.resource_count)] == \
                [state.buffer_size_at_index(i) for i in range(state.resource_count)]
            for i in range(state.resource_count):
                assert back.buffer_at_index(i).tobytes() == state.buffer_at_index(i).tobytes()
        back = pickle.loads(pickle.dumps(state, protocol=protocol))
        assert back.to_bytes() == blob and back.device == device


def test_weights_state_reloads_into_a_convolution(device):
    """A decoded CNNConvolutionWeightsAndBiasesState is a real state: a kernel reloads from it."""
    q = m.CommandQueue(device)
    conv = m.CNNConvolution(device, conv_source())
    cb = q.command_buffer()
    exported = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()
    back = m.CNNConvolutionWeightsAndBiasesState.from_bytes(exported.to_bytes(), device)
    other = m.CNNConvolution(device, conv_source("other"))
    cb = q.command_buffer()
    other.reload_weights_and_biases_with_command_buffer(cb, back)
    cb.commit()
    cb.wait_until_completed()
    x = image(rng("x"), device, 7, 7, 8)
    assert run_unary(q, conv, x).tobytes() == run_unary(q, other, x).tobytes()


def test_dropout_copy_continues_the_mask_sequence(device):
    """encode_count round-trips: a copy taken after n encodes draws the mask the original draws next."""
    q = m.CommandQueue(device)
    k = m.CNNDropout(device, 0.5, 99, (1, 1, 1))
    x = image(rng("x"), device, 7, 9)
    first = run_unary(q, k, x)
    copy_ = m.Kernel.from_bytes(k.to_bytes(), device)
    assert copy_.encode_count == k.encode_count == 1
    a, b = run_unary(q, k, x), run_unary(q, copy_, x)
    assert a.tobytes() == b.tobytes() and a.tobytes() != first.tobytes()


def gradient_states(device):
    """One gradient state of every family, each from a real forward pass."""
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    out = []
    for k in (m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU)), m.CNNConvolution(device, conv_source()),
              m.CNNSoftMax(device), m.CNNPoolingMax(device, 2, 2, 2, 2), m.CNNUpsamplingNearest(device, 2, 2),
              m.CNNDropout(device, 0.5, 1, (1, 1, 1)), m.CNNInstanceNormalization(device, instance_source(8)),
              m.CNNGroupNormalization(device, group_source(8, 2)), m.CNNConvolutionTranspose(device, transpose_source()),
              m.NNReshape(device), m.NNPad(device, (1, 1, 0), (1, 1, 0)), m.CNNSpatialNormalization(device, 3, 3)):
        out.append(k.encode(cb, image(rng("x"), device, 7, 9), destination_state_is_temporary=False)[1])
    _, state = m.CNNAdd(device).encode(cb, image(rng("x"), device), image(rng("y"), device),
                                       destination_state_is_temporary=False)
    out.append(state)
    out.append(m.CNNBatchNormalization(device, bn_source()).result_state(image(rng("x"), device)))
    cb.commit()
    cb.wait_until_completed()
    return out


def test_every_state_class_has_a_rule(device):
    """Every State class is serializable (states() covers it) or a gradient state that refuses."""
    classes = {n for n, c in vars(m._mpsgrad).items() if isinstance(c, type) and issubclass(c, m.State)}
    serializable = {type(s).__name__ for s in states(device)}
    refusing = {type(s).__name__ for s in gradient_states(device) + image_holding_states(device)}
    bases = {"NNGradientState", "NNBinaryGradientState"}  # the abstract gradient-state classes
    assert classes - serializable - refusing - bases == set(), "State classes without a rule"
    for state in image_holding_states(device):
        with pytest.raises(TypeError, match="not serializable"):
            state.to_bytes()
    for state in gradient_states(device):
        assert isinstance(state, (m.NNGradientState, m.NNBinaryGradientState))
        with pytest.raises(TypeError, match="gradient state"):
            state.to_bytes()
        for protocol in PROTOCOLS:
            with pytest.raises(TypeError, match="gradient state"):
                pickle.dumps(state, protocol=protocol)


def test_not_serializable(device):
    q = m.CommandQueue(device)
    cb = q.command_buffer()
    with pytest.raises(ValueError, match="temporary"):
        m.State.temporary(cb, [16]).to_bytes()
    neuron = m.CNNNeuron(device, m.NNNeuronDescriptor(m.CNNNeuronType.RELU))
    _, state = neuron.encode(cb, image(rng("x"), device), destination_state_is_temporary=False)
    cb.commit()
    cb.wait_until_completed()
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match="gradient state"):
            pickle.dumps(state, protocol=protocol)
        for obj in (image(rng("x"), device), q, q.command_buffer()):
            with pytest.raises(TypeError, match="cannot pickle"):
                pickle.dumps(obj, protocol=protocol)
    # A Vector is GPU data like an Image (save vector.to_numpy()); CNNLossLabels holds images.
    labels = m.CNNLossLabels(device, m.CNNLossDataDescriptor(np.zeros((2, 2, 1), np.float32)))
    with pytest.raises(TypeError, match="CNNLossLabels is not serializable"):
        labels.to_bytes()
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match="cannot pickle"):
            pickle.dumps(m.Vector(device, 4), protocol=protocol)
        with pytest.raises(TypeError, match="CNNLossLabels"):
            pickle.dumps(labels, protocol=protocol)


# ---------------------------------------------------------------------------------------------
# the documented byte layout, checked by an independent encoder


def blob(tag, payload, class_version=1, format_version=1, magic=b"MPSGRAD\0"):
    head = magic + struct.pack("<III", format_version, class_version, len(tag)) + tag.encode()
    body = head + struct.pack("<Q", len(payload)) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def f32s(values):
    return struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}f", *values)


def string(s):
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def test_documented_layout():
    d = m.NNNeuronDescriptor.prelu([1.0, -2.0])
    d.a, d.b, d.c = 0.5, 0.25, 2.0
    expected = blob("NNNeuronDescriptor", struct.pack("<ifff", 10, 0.5, 0.25, 2.0) + f32s([1.0, -2.0]))
    assert d.to_bytes() == expected
    state = m.State("cpu", 8)
    state.buffer_at_index(0)[...] = [1.0, 2.0]
    state.label = "s"
    assert state.to_bytes() == blob("State", string("s") + struct.pack("<Q", 1) + struct.pack("<Q2f", 8, 1.0, 2.0))
    image_descriptor = m.ImageDescriptor(2, 3, 4, 5)
    assert image_descriptor.to_bytes() == blob("ImageDescriptor", struct.pack("<IqqqqI", 4, 2, 3, 4, 5, 3))


def test_hand_built_kernel_decodes():
    """A CNNSoftMax written by the independent encoder from the documented payload."""
    base = struct.pack("<I", 1) + string("hand")  # options, label
    cnn = struct.pack("<3q", 1, 2, 0) + struct.pack("<3q3Q", 0, 0, 0, 4, 5, 1) + struct.pack("<qqQI", 0, 0, 2**64 - 1, 1)
    cnn += bytes([1]) + struct.pack("<I", 16) + bytes([2])  # NNDefaultPadding(SIZE_SAME), persistent allocator
    k = m.Kernel.from_bytes(blob("CNNSoftMax", base + cnn), "cpu")
    assert isinstance(k, m.CNNSoftMax) and k.label == "hand" and k.options == 1
    assert k.offset == m.Offset(1, 2, 0) and k.edge_mode == m.ImageEdgeMode.CLAMP
    assert k.padding.padding_method() == 16 and k.destination_image_allocator is m.ImageAllocator.persistent()


# ---------------------------------------------------------------------------------------------
# hostile input


def test_wrong_envelope():
    good = m.CNNSoftMax("cpu").to_bytes()
    payload = good[8 + 12 + len("CNNSoftMax") + 8:-4]
    cases = {
        "magic": blob("CNNSoftMax", payload, magic=b"MPSGRAX\0"),
        "format version": blob("CNNSoftMax", payload, format_version=2),
        "class version": blob("CNNSoftMax", payload, class_version=9),
        "class version 0": blob("CNNSoftMax", payload, class_version=0),
        "unknown class": blob("CNNSoftMix", payload),
        "bad tag bytes": blob("CNN\nSoftMax", payload),
        "empty": b"",
        "CRC-32": good[:-1] + bytes([good[-1] ^ 1]),
        "trailing byte": good + b"\0",
        "payload too long": blob("CNNSoftMax", payload + b"\0"),
        "payload too short": blob("CNNSoftMax", payload[:-1]),
    }
    for what, data in cases.items():
        with pytest.raises(m.SerializationError):
            m.Kernel.from_bytes(data, "cpu")
        assert issubclass(m.SerializationError, ValueError), what
    with pytest.raises(m.SerializationError, match="holds a serialized CNNSoftMax, not a CNNConvolution"):
        m.CNNConvolution.from_bytes(good)


HUGE = 2**62


def test_huge_declared_sizes_raise_without_allocating():
    """Every size field set to 2**62, decoded in a subprocess whose address space is capped at 512 MiB
    above what its imports took: an attempt to allocate 2**62 * k bytes would give MemoryError (or
    kill the process), not the SerializationError required."""
    script = """
        import resource, struct, zlib
        import mpsgrad as m
        from test_serialization import blob, string, HUGE
        size = [int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmSize')][0] * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), size + (512 << 20)))
        d = m.CNNConvolutionDescriptor(1, 1, 4, 4).to_bytes()
        cases = {
            'state resource count': blob('State', string('') + struct.pack('<Q', HUGE)),
            'state resource size': blob('State', string('') + struct.pack('<QQ', 1, HUGE) + b'x' * 64),
            'neuron data': blob('NNNeuronDescriptor', struct.pack('<ifffQ', 1, 0, 0, 0, HUGE)),
            'label': blob('CNNSoftMax', struct.pack('<IQ', 0, HUGE) + b'x' * 100),
            'nested descriptor': blob('CNNNeuron', struct.pack('<Q', HUGE) + b'x' * 100),
            'weights': blob('CNNConvolutionWeightsDataSource', struct.pack('<Q', len(d)) + d + struct.pack('<Q', HUGE)),
            'kernel weights': blob('CNNConvolution', struct.pack('<Q', len(d)) + d + struct.pack('<Q', HUGE)),
            'tag length': b'MPSGRAD\\0' + struct.pack('<IIIQ', 1, 1, 2**31, HUGE) + b'x' * 40,
            'payload size': blob('State', b'')[:-12] + struct.pack('<Q', HUGE) + b'\\0' * 4,
        }
        for name, data in cases.items():
            for decode in (lambda: m.Kernel.from_bytes(data, 'cpu'), lambda: m.State.from_bytes(data, 'cpu'),
                           lambda: m.NNNeuronDescriptor.from_bytes(data),
                           lambda: m.CNNConvolutionWeightsDataSource.from_bytes(data)):
                try:
                    decode()
                except m.SerializationError:
                    pass
                else:
                    raise SystemExit('decoded hostile data: ' + name)
        print('ok', len(cases))
    """
    result = run_isolated(script)
    assert result.stdout.strip().endswith("ok 9"), result.stdout + result.stderr


def run_isolated(script, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), os.path.dirname(os.path.dirname(m.__file__))]
                                        + env.get("PYTHONPATH", "").split(os.pathsep))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, f"subprocess died with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


# Objects whose blobs the corruption loops attack (built in the subprocess).
CORRUPTION_SETUP = """
    import json, random, struct, sys, zlib
    import numpy as np
    import mpsgrad as m
    from test_serialization import configured, conv_source, states, descriptor_objects, public_properties

    objects = [configured('CNNConvolution[grouped,neuron,nobias]', 'cpu'), configured('CNNNeuron[prelu]', 'cpu'),
               configured('CNNMultiplyGradient[True]', 'cpu'), configured('NNCompare', 'cpu'),
               configured('CNNConvolutionGradient', 'cpu'), configured('CNNPoolingAverageGradient', 'cpu'),
               configured('CNNUpsamplingBilinear', 'cpu'), configured('CNNDropout', 'cpu'),
               states('cpu')[0], states('cpu')[2]] \\
              + descriptor_objects()

    def decode(obj, data):
        if isinstance(obj, m.Kernel):
            return m.Kernel.from_bytes(data, 'cpu')
        if isinstance(obj, m.State):
            return m.State.from_bytes(data, 'cpu')
        return type(obj).from_bytes(data)

    def exercise(obj):
        # A decoded object must be fully usable: every property readable, re-encodable.
        public_properties(obj)
        again = obj.to_bytes()
        assert decode(obj, again).to_bytes() == again

    def fix_crc(data):
        return data[:-4] + struct.pack('<I', zlib.crc32(data[:-4]))

    counts = {'value_error': 0, 'decoded': 0}
    def attempt(obj, data):
        try:
            back = decode(obj, data)
        except ValueError:
            counts['value_error'] += 1
            return
        exercise(back)
        counts['decoded'] += 1
"""


def test_every_truncation_raises():
    script = CORRUPTION_SETUP + """
    for obj in objects:
        data = obj.to_bytes()
        for n in range(len(data)):
            for candidate in (data[:n], fix_crc(data[:n]) if n >= 4 else data[:n]):
                attempt(obj, candidate)
        assert counts['decoded'] == 0, 'a truncated blob decoded'
    print(json.dumps(counts))
    """
    counts = json.loads(run_isolated(script).stdout.strip().splitlines()[-1])
    print(f"truncations: {counts}")
    assert counts["decoded"] == 0 and counts["value_error"] > 2000


@pytest.mark.parametrize("repair_crc", [False, True])
def test_random_bit_flips(repair_crc):
    """2,000 single-bit flips per object (with repair_crc the checksum is recomputed so the flips
    reach the payload decoders): each raises ValueError or decodes to a usable object."""
    seed = int.from_bytes(os.urandom(4), "little")
    script = CORRUPTION_SETUP + f"""
    gen = random.Random({seed})
    for obj in objects:
        data = obj.to_bytes()
        for _ in range(2000):
            bit = gen.randrange(len(data) * 8)
            flipped = bytearray(data)
            flipped[bit // 8] ^= 1 << (bit % 8)
            flipped = bytes(flipped)
            attempt(obj, fix_crc(flipped) if {repair_crc} else flipped)
    print(json.dumps(counts))
    """
    counts = json.loads(run_isolated(script).stdout.strip().splitlines()[-1])
    print(f"seed {seed}: {counts}")
    total = counts["value_error"] + counts["decoded"]
    assert total == 2000 * len(descriptor_objects()) + 2000 * 10
    if not repair_crc:
        assert counts["decoded"] == 0  # CRC-32 detects every single-bit error
    else:
        assert counts["decoded"] > 0 and counts["value_error"] > 0
