"""Objects for the serialization tests: one configured instance of every serializable kernel class
(FACTORIES), the states, and the property comparison. Shared by tests/python/test_serialization*.py.
"""
from __future__ import annotations

import pickle
import struct

import numpy as np

import mpsgrad as m
from conftest import randn, rng

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


def sub_pixel_source(seed="subpix"):
    """A sub-pixel convolution 8 -> 16 channels, scale 2 (destination: 4 channels, twice the size)."""
    gen = rng(seed)
    d = m.CNNSubPixelConvolutionDescriptor(3, 3, 8, 16, 2, neuron=m.NNNeuronDescriptor(m.CNNNeuronType.TANH))
    return m.CNNConvolutionWeightsDataSource(d, randn(gen, 16, 3, 3, 8), randn(gen, 16), label="subpix")


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


MULTIARY_PER_INDEX = ("offset", "source_feature_channel_offset", "source_feature_channel_max_count", "edge_mode",
                      "kernel_width", "kernel_height", "stride_in_pixels_x", "stride_in_pixels_y", "dilation_rate_x",
                      "dilation_rate_y")


def set_multiary_properties(k):
    """Every CNNMultiaryKernel property and per-index value off its default."""
    k.options = 1
    k.label = "multiary"
    k.clip_rect = ((1, 0, 0), (5, 4, 1))
    k.destination_feature_channel_offset = 4
    for i in range(k.source_count):
        k.set_offset((i, -1, 0), i)
        k.set_source_feature_channel_offset(4 * i, i)
        k.set_source_feature_channel_max_count(7 + i, i)
        k.set_edge_mode(m.ImageEdgeMode.CLAMP if i % 2 else m.ImageEdgeMode.ZERO, i)
        for j, name in enumerate(MULTIARY_PER_INDEX[4:]):
            getattr(k, "set_" + name)(1 + (i + j) % 3, i)
    k.padding = m.NNDefaultPadding(int(m.PaddingMethod.SIZE_VALID_ONLY))
    k.destination_image_allocator = m.ImageAllocator.persistent()


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


def concatenation_kernels():
    """The concatenation kernels (docs/concatenation.md), per-index properties off their defaults."""
    def concatenation(dev):
        k = m.CNNConcatenation(dev, 3)
        k.set_edge_mode(m.ImageEdgeMode.CLAMP, 1)
        k.set_source_feature_channel_max_count(5, 2)
        return k
    return {
        "CNNConcatenation": concatenation,
        "CNNConcatenationGradient": lambda dev: m.CNNConcatenationGradient(dev, 1),
    }


def reduction_kernels():
    """The Gram matrix and spatial-mean family, properties off their defaults."""
    def spatial_mean(dev):
        k = m.NNReductionSpatialMean(dev)
        k.clip_rect_source = m.Region((1, 1, 0), (3, 2, 1))
        return k

    return {
        "NNGramMatrixCalculation": lambda dev: m.NNGramMatrixCalculation(dev, 0.375),
        "NNGramMatrixCalculationGradient": lambda dev: m.NNGramMatrixCalculationGradient(dev, 0.375),
        "NNReductionSpatialMean": spatial_mean,
        "NNReductionSpatialMeanGradient": lambda dev: m.NNReductionSpatialMeanGradient(dev),
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
    "CNNConvolution[sub-pixel]": lambda dev: m.CNNConvolution(dev, sub_pixel_source()),
    "CNNConvolutionGradient[sub-pixel]": lambda dev: m.CNNConvolutionGradient(dev, sub_pixel_source()),
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
    **concatenation_kernels(),
    **reduction_kernels(),
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
    "CNNYOLOLoss": lambda dev: m.CNNYOLOLoss(dev, yolo_descriptor()),
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


def yolo_descriptor():
    """Every CNNYOLOLossDescriptor field off its default (2 anchors, 3 classes: 16 channels)."""
    T, R = m.CNNLossType, m.CNNReductionType
    d = m.CNNYOLOLossDescriptor(T.HUBER, T.MEAN_SQUARED_ERROR, T.MEAN_SQUARED_ERROR, T.SOFTMAX_CROSS_ENTROPY,
                                R.MEAN, np.array([1.5, 0.5, 0.75, 2.0], np.float32).tobytes(), 2)
    d.classes_loss_descriptor.number_of_classes = 3
    d.classes_loss_descriptor.label_smoothing = 0.1
    d.xy_loss_descriptor.delta, d.wh_loss_descriptor.weight = 0.25, 0.5
    d.reduce_across_batch, d.rescore = True, False
    d.scale_xy, d.scale_wh, d.scale_no_object, d.scale_object, d.scale_class = 3.0, 4.0, 0.5, 6.0, 1.5
    d.min_iou_for_object_presence, d.max_iou_for_object_absence = 0.6, 0.2
    return d


def configured(name, dev):
    k = FACTORIES[name](dev)
    if isinstance(k, (m.NNOptimizer, m.CNNLoss, m.NNLossKernel, m.NNInitialGradient,
                      m.CNNYOLOLoss)):  # Kernel properties only
        k.options = int(m.KernelOptions.VERBOSE)
        k.label = "optimizer or loss"
        return k
    if isinstance(k, m.CNNKernel):
        set_cnn_properties(k)
    elif isinstance(k, m.CNNMultiaryKernel):
        set_multiary_properties(k)
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
    if isinstance(a, m.CNNMultiaryKernel):  # the per-index values are methods, not properties
        assert a.source_count == b.source_count
        for name in MULTIARY_PER_INDEX:
            for i in range(a.source_count):
                x, y = getattr(a, name + "_at_index")(i), getattr(b, name + "_at_index")(i)
                assert same(x, y), f"{type(a).__name__}.{name}_at_index({i}): {x!r} != {y!r}"
    for name in ("padding", "destination_image_allocator"):
        if hasattr(a, name):
            x, y = getattr(a, name), getattr(b, name)
            assert type(x) is type(y), name
            if isinstance(x, m.NNDefaultPadding):
                assert x.padding_method() == y.padding_method()
            if isinstance(x, m.ImageAllocator) and not isinstance(x, MyAllocator):
                assert x is y or repr(x) == repr(y)


def _label_gradient_kernel(dev):
    k = m.NNLossGradient(dev, loss_descriptor())
    k.compute_label_gradients = True
    return k


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
