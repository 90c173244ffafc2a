"""For every kernel class of serialization_cases.FACTORIES, a function that runs the kernel (and its
forward/gradient partner) on fixed inputs and returns its outputs: the bitwise round-trip oracle.
"""
from __future__ import annotations


import numpy as np

import mpsgrad as m
from conftest import randn, rng
from serialization_cases import FACTORIES, LOCAL_NORMALIZATION, bn_source, conv_source, family_kernels, fc_source, group_source, instance_source, local_normalization_kernels, neuron_type_kernels, set_local_normalization_parameters, sub_pixel_source, transpose_source


# ---- bitwise identical outputs ----------------------------------------------------------------


def run_unary(q, k, x):
    k.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    y = k.encode(cb, x)
    cb.commit()
    cb.wait_until_completed()
    return y.to_numpy()


def run_multiary(q, k, xs):
    k.destination_image_allocator = m.ImageAllocator.persistent()
    cb = q.command_buffer()
    y = k.encode(cb, xs)
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
    cases["CNNConvolution[sub-pixel]"] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 5, 6))]
    cases["CNNConvolutionGradient[sub-pixel]"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNConvolution(dev, sub_pixel_source()), k, [image(rng("x"), dev, 5, 6)],
        lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, 4), dev), lambda inputs, y: inputs[0])
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
    concatenation_inputs = lambda dev: [[image(rng("x"), dev, 5, 6, c=3), image(rng("y"), dev, 5, 6, c=6),
                                         image(rng("z"), dev, 5, 6, c=7)]]
    cases["CNNConcatenation"] = lambda q, dev, k: [run_multiary(q, k, concatenation_inputs(dev)[0])]
    cases["CNNConcatenationGradient"] = lambda q, dev, k: forward_and_gradient(
        q, m.CNNConcatenation(dev, 3), k, concatenation_inputs(dev),
        lambda y: m.Image.from_numpy(randn(rng("g"), y.height, y.width, y.feature_channels), dev),
        lambda inputs, y: inputs[0][1])
    for name in ("NNGramMatrixCalculation", "NNReductionSpatialMean"):
        cases[name] = lambda q, dev, k: [run_unary(q, k, image(rng("x"), dev, 7, 9, c=6))]
    for grad_name, forward in (("NNGramMatrixCalculationGradient", lambda dev: m.NNGramMatrixCalculation(dev, 0.375)),
                               ("NNReductionSpatialMeanGradient", lambda dev: m.NNReductionSpatialMean(dev))):
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
    cases["CNNYOLOLoss"] = yolo_loss_outputs
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
    k.destination_image_allocator = m.ImageAllocator.persistent()  # results read after completion
    gen = rng("loss")
    y, t = randn(gen, 1, 4, 5, 3), randn(gen, 4, 5, 3)
    labels = m.CNNLossLabels(dev, m.CNNLossDataDescriptor(t))
    cb = q.command_buffer()
    out = k.encode(cb, m.Image.from_numpy(y, dev), labels)
    cb.commit()
    cb.wait_until_completed()
    return [out.to_numpy(), labels.loss_image.to_numpy()]




def yolo_loss_outputs(q, dev, k):
    """The gradients and loss values of two 3 x 4 images of 2 anchors x 8 channels (3 classes), an
    object in some cells."""
    k.destination_image_allocator = m.ImageAllocator.persistent()  # results read after completion
    gen = rng("yolo-loss")
    y = randn(gen, 2, 3, 4, 16)
    t = np.zeros((2, 3, 4, 2, 8), np.float32)
    t[:, ::2, 1::2, 1, :5] = [0.4, 0.6, 1.2, 0.8, 1.0]
    t[:, ::2, 1::2, 1, 6] = 1.0
    labels = [m.CNNLossLabels(dev, m.CNNLossDataDescriptor(t[n].reshape(3, 4, 16))) for n in range(2)]
    cb = q.command_buffer()
    out = k.encode_batch(cb, [m.Image.from_numpy(y[n:n + 1], dev) for n in range(2)], labels)
    cb.commit()
    cb.wait_until_completed()
    return [o.to_numpy() for o in out] + [lab.loss_image.to_numpy() for lab in labels]


def split_loss_outputs(q, dev, k):
    """NNForwardLoss: the loss images; NNLossGradient: the gradients for a source gradient of 2;
    NNInitialGradient: its ones."""
    k.destination_image_allocator = m.ImageAllocator.persistent()  # results read after completion
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
