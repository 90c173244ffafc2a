"""Issue 29 (MPS parity II), items 9 and 10: objects over another object's buffer.

9. **CNNConvolutionWeightsAndBiasesState over existing memory** (``-initWithWeights:biases:``,
   ``-initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor:``) and the
   temporary state (``+temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:...``). The
   state aliases the memory: a convolution reloaded from it computes with what the memory holds
   (oracle: PyTorch's conv2d), and an optimizer's in-place update through the state lands in the
   memory (oracle: PyTorch autograd's dW, db and the SGD rule w - lr·g in NumPy).
10. **Objects over another object's buffer**: ``Vector(buffer=, descriptor=, offset=)``
   (``-[MPSVector initWithBuffer:offset:descriptor:]``) over a Vector or a state's buffer; the
   states' buffers as Vectors (``*_vector``, ``State.vector_at_index``); the gamma / beta and
   mean / variance states over Vectors (no copies: oracle PyTorch's batch_norm with the values the
   memory holds at reload time). Optimizer descriptors accept any finite learning rate and
   regularization scale, as MPS does: Turi Create keeps batch-normalization running statistics with
   SGD at learning rate -0.1 and L2 scale -1 on the batch statistic, a moving average
   (oracle: NumPy's r = 0.9·r + 0.1·batch statistic, and torch's running_mean).

Bad input (a buffer too small, an offset out of range or not a multiple of 4, a wrong dtype, a
read-only or non-contiguous array, a NumPy array on a GPU device) is a ValueError / TypeError naming
the parameter. Serialization of aliased states writes the values they see, never the whole buffer.

Tolerance: conftest.TOLERANCE (1e-4 relative) for float32 results against float64 oracles; an
aliasing bug (a copy instead of an alias, an offset ignored) is off by O(1).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng, run_completed

pytestmark = pytest.mark.float32_only("vectors and states are float32; the images are not under test")

KH, KW, CIN, COUT = 3, 3, 2, 4
NW, NB = COUT * KH * KW * CIN, COUT
PAD = 4  # floats before the weights in a shared buffer: offsets must be honoured
PAD_VALUE = 123.0



def _descriptor():
    return m.CNNConvolutionDescriptor(KW, KH, CIN, COUT)


def _torch_conv(x, w, b):
    """SAME 3x3 convolution of NHWC x with OHWI w (float64), NHWC result."""
    X = torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)
    W = torch.tensor(np.transpose(w, (0, 3, 1, 2)), dtype=torch.float64)
    y = F.conv2d(X, W, torch.tensor(b, dtype=torch.float64), padding=1)
    return np.transpose(y.numpy(), (0, 2, 3, 1))


def _torch_conv_gradients(x, w, b, e):
    """dW (OHWI) and db of sum(conv(x) * e)."""
    X = torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)
    W = torch.tensor(np.transpose(w, (0, 3, 1, 2)), dtype=torch.float64, requires_grad=True)
    B = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    E = torch.tensor(np.transpose(e, (0, 3, 1, 2)), dtype=torch.float64)
    (F.conv2d(X, W, B, padding=1) * E).sum().backward()
    return np.transpose(W.grad.numpy(), (0, 2, 3, 1)), B.grad.numpy()


def _convolution(device):
    """A convolution whose own weights are zero: only a reload gives it others."""
    ds = m.CNNConvolutionWeightsDataSource(_descriptor(), np.zeros((COUT, KH, KW, CIN), np.float32),
                                           np.zeros(COUT, np.float32))
    conv, grad = m.CNNConvolution(device, ds), m.CNNConvolutionGradient(device, ds)
    conv.destination_image_allocator = m.ImageAllocator.persistent()
    grad.destination_image_allocator = m.ImageAllocator.persistent()
    return conv, grad


def _shared_buffer(device, w, b):
    """One Vector holding [PAD floats | weights | biases], as an MPS program's one MTLBuffer."""
    data = np.concatenate([np.full(PAD, PAD_VALUE, np.float32), w.reshape(-1), b]).astype(np.float32)
    return m.Vector.from_numpy(data, device)


def _other_device(device):
    others = [name for name in m.Device.available() if name != device.name]
    return m.Device(others[0]) if others else None


# ---------------------------------------------------------------------------------------------
# Vector(buffer=, descriptor=, offset=)


def test_vector_over_a_vector_aliases_from_the_offset(device):
    base = m.Vector.from_numpy(np.arange(12, dtype=np.float32), device)
    sub = m.Vector(buffer=base, descriptor=m.VectorDescriptor(4), offset=16)
    assert (sub.length, sub.offset, sub.device) == (4, base.offset + 16, device)
    np.testing.assert_array_equal(sub.numpy(), [4, 5, 6, 7])
    sub.numpy()[...] = -1.0  # writes through the sub-vector are the base's
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11])
    base.numpy()[5] = 42.0  # and the other way round
    assert sub.numpy()[1] == 42.0
    inner = m.Vector(buffer=sub, descriptor=2, offset=8)  # a vector over a vector over a vector
    assert inner.offset == 24 and inner.numpy().tolist() == [-1.0, -1.0]
    strided = m.Vector(buffer=base, descriptor=m.VectorDescriptor(2, vectors=3, vector_bytes=16), offset=4)
    np.testing.assert_array_equal(strided.numpy(), [[1, 2], [42, -1], [9, 10]])


def test_optimizer_updates_only_its_range_of_a_shared_buffer(device, queue, check):
    gen = rng("shared-vector-sgd")
    data, g = randn(gen, 16), randn(gen, 6)
    base = m.Vector.from_numpy(data, device)
    w = m.Vector(buffer=base, descriptor=6, offset=20)
    sgd = m.NNOptimizerStochasticGradientDescent(device, 0.25)
    run_completed(queue, lambda cb: sgd.encode(cb, m.Vector.from_numpy(g, device), w))
    expected = data.astype(np.float64)
    expected[5:11] -= 0.25 * g
    check(base.to_numpy(), expected, "the updated range")
    np.testing.assert_array_equal(base.to_numpy()[:5], data[:5])  # bitwise untouched around it
    np.testing.assert_array_equal(base.to_numpy()[11:], data[11:])


def test_vector_over_a_numpy_array(device, queue, check):
    """Host memory aliases on the cpu device; on a GPU device it is refused, never copied silently."""
    array = np.zeros(10, np.float32)
    if device.name != "cpu":
        with pytest.raises(ValueError, match="buffer.*cpu device only"):
            m.Vector(buffer=array, descriptor=4, device=device)
        return
    v = m.Vector(buffer=array, descriptor=4, offset=8, device=device)
    g = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    run_completed(queue, lambda cb: m.NNOptimizerStochasticGradientDescent(device, 0.5).encode(
        cb, m.Vector.from_numpy(g, device), v))
    check(array, np.concatenate([[0, 0], -0.5 * g, [0, 0, 0, 0]]), "the array after the update")


def _vector_bad_cases(device):
    base = m.Vector(device, 8)
    read_only = np.zeros(8, np.float32)
    read_only.flags.writeable = False
    return [
        (dict(buffer=base, descriptor=4, offset=2), ValueError, "offset"),
        (dict(buffer=base, descriptor=4, offset=20), ValueError, "buffer"),
        (dict(buffer=base, descriptor=4, offset=2**40), ValueError, "buffer"),
        (dict(buffer=base, descriptor=9), ValueError, "buffer"),
        (dict(buffer=base, descriptor=4, offset=-4), ValueError, "offset"),
        (dict(buffer=base, descriptor=4, offset="4"), TypeError, "offset"),
        (dict(buffer=[0.0] * 8, descriptor=4), TypeError, "buffer"),
        (dict(buffer=np.zeros(8), descriptor=4, device="cpu"), TypeError, "buffer"),
        (dict(buffer=read_only, descriptor=4, device="cpu"), ValueError, "buffer"),
        (dict(buffer=np.zeros(16, np.float32)[::2], descriptor=4, device="cpu"), ValueError, "buffer"),
        (dict(buffer=base, descriptor="4"), TypeError, "descriptor"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_vector_over_a_bad_buffer_raises(device, case):
    kwargs, error, name = _vector_bad_cases(device)[case]
    with pytest.raises(error, match=name):
        m.Vector(**kwargs)


def test_vector_over_another_devices_vector_raises(device):
    other = _other_device(device)
    if other is None:
        pytest.skip("a single device in this build")
    with pytest.raises(ValueError, match="buffer.*device"):
        m.Vector(buffer=m.Vector(other, 4), descriptor=4, device=device)


# ---------------------------------------------------------------------------------------------
# item 9: CNNConvolutionWeightsAndBiasesState over existing memory


def test_weights_state_over_one_shared_vector(device, queue, check):
    """Weights and biases at offsets of one buffer: the convolution computes with them, SGD's
    in-place update through the state lands there, and a write to the buffer reaches the next reload."""
    gen = rng("weights-state-shared")
    w, b = randn(gen, COUT, KH, KW, CIN), randn(gen, COUT)
    x, e = randn(gen, 1, 5, 6, CIN), randn(gen, 1, 5, 6, COUT)
    buffer = _shared_buffer(device, w, b)
    state = m.CNNConvolutionWeightsAndBiasesState(weights=buffer, biases=buffer, descriptor=_descriptor(),
                                                  weights_offset=4 * PAD, biases_offset=4 * (PAD + NW))
    assert (state.weights_offset, state.biases_offset) == (4 * PAD, 4 * (PAD + NW))
    assert state.device == device and not state.is_temporary
    np.testing.assert_array_equal(state.weights, w)
    conv, grad = _convolution(device)
    xi = m.Image.from_numpy(x, device)

    def forward_and_gradient(cb):
        conv.reload_weights_and_biases_with_command_buffer(cb, state)
        grad.reload_weights_and_biases_with_command_buffer(cb, state)
        y, gstate = conv.encode(cb, xi, destination_state_is_temporary=False)
        grad.encode(cb, m.Image.from_numpy(e, device), xi, gstate)
        return y, gstate

    y, gstate = run_completed(queue, forward_and_gradient)
    check(y.to_numpy(), _torch_conv(x, w, b), "convolution with the aliased weights")
    dw, db = _torch_conv_gradients(x, w, b, e)
    check(gstate.gradient_for_weights, dw, "dW")
    run_completed(queue, lambda cb: m.NNOptimizerStochasticGradientDescent(device, 0.1).encode(cb, gstate, state))
    after = buffer.to_numpy()
    check(after[PAD:PAD + NW], (w - 0.1 * dw).reshape(-1), "weights updated in the shared buffer")
    check(after[PAD + NW:], b - 0.1 * db, "biases updated in the shared buffer")
    np.testing.assert_array_equal(after[:PAD], PAD_VALUE)  # nothing before the offset is written

    w2 = randn(gen, COUT, KH, KW, CIN)
    buffer.numpy()[PAD:PAD + NW] = w2.reshape(-1)  # the memory changes, the state is not rebuilt

    def forward(cb):
        conv.reload_weights_and_biases_with_command_buffer(cb, state)
        return conv.encode(cb, xi)
    check(run_completed(queue, forward).to_numpy(), _torch_conv(x, w2, after[PAD + NW:]), "after writing the buffer")


def test_weights_state_over_numpy_arrays(device, queue, check):
    """A 4-D (O, kH, kW, I) array says its own shape; the state aliases it (cpu), biases None are zero."""
    gen = rng("weights-state-numpy")
    w = randn(gen, COUT, KH, KW, CIN)
    if device.name != "cpu":
        with pytest.raises(ValueError, match="weights.*cpu device only"):
            m.CNNConvolutionWeightsAndBiasesState(weights=w, device=device)
        return
    state = m.CNNConvolutionWeightsAndBiasesState(weights=w)
    assert state.device == device
    np.testing.assert_array_equal(state.biases, np.zeros(COUT))
    state.weights[0, 1, 2, 1] = 7.0  # a write through the state is the array's
    assert w[0, 1, 2, 1] == 7.0
    x = randn(gen, 1, 4, 4, CIN)
    conv, _ = _convolution(device)

    def forward(cb):
        conv.reload_weights_and_biases_with_command_buffer(cb, state)
        return conv.encode(cb, m.Image.from_numpy(x, device))
    check(run_completed(queue, forward).to_numpy(), _torch_conv(x, w, np.zeros(COUT)), "convolution over the array")
    b = randn(gen, COUT)
    flat = m.CNNConvolutionWeightsAndBiasesState(weights=w.reshape(-1), biases=b, descriptor=_descriptor())
    np.testing.assert_array_equal(flat.biases_vector.numpy(), b)
    np.testing.assert_array_equal(flat.weights_vector.numpy(), w.reshape(-1))


@pytest.mark.parametrize("factory", ["temporary", "temporary_cnn_convolution_weights_and_biases_state"])
def test_temporary_weights_state(device, queue, check, factory):
    gen = rng(f"weights-state-temporary-{factory}")
    w, b, x = randn(gen, COUT, KH, KW, CIN), randn(gen, COUT), randn(gen, 1, 4, 5, CIN)
    conv, _ = _convolution(device)
    make = getattr(m.CNNConvolutionWeightsAndBiasesState, factory)
    with pytest.raises(ValueError, match="state"):  # valid only on the command buffer it was made for
        conv.reload_weights_and_biases_with_command_buffer(queue.command_buffer(), make(queue.command_buffer(),
                                                                                         _descriptor()))
    seen = {}

    def forward(cb):
        state = make(cb, _descriptor())
        assert state.is_temporary and state.read_count == 1
        np.testing.assert_array_equal(state.weights, 0.0)
        state.weights[...] = w
        state.biases[...] = b
        conv.reload_weights_and_biases_with_command_buffer(cb, state)
        seen["read_count"] = state.read_count
        with pytest.raises(ValueError, match="read_count"):
            state.weights_vector  # consumed: its storage is released
        return conv.encode(cb, m.Image.from_numpy(x, device))
    y = run_completed(queue, forward)
    assert seen["read_count"] == 0
    check(y.to_numpy(), _torch_conv(x, w, b), "convolution with the temporary state's weights")


def _weights_bad_cases(device):
    small, vec = m.Vector(device, NW - 1), m.Vector(device, NW + NB)
    read_only = np.zeros((COUT, KH, KW, CIN), np.float32)
    read_only.flags.writeable = False
    d = _descriptor()
    return [
        (dict(weights=small, descriptor=d), ValueError, "weights"),
        (dict(weights=vec, descriptor=d, weights_offset=2), ValueError, "weights_offset"),
        (dict(weights=vec, descriptor=d, weights_offset=4 * (NB + 1)), ValueError, "weights"),
        (dict(weights=vec, biases=vec, descriptor=d, biases_offset=4 * (NW + 1)), ValueError, "biases"),
        (dict(weights=vec, biases=vec, descriptor=d, biases_offset=6), ValueError, "biases_offset"),
        (dict(weights=vec, descriptor=d, biases_offset=4), ValueError, "biases_offset"),
        (dict(weights=vec, descriptor=d, weights_offset=-4), ValueError, "weights_offset"),
        (dict(weights=vec), TypeError, "descriptor"),
        (dict(weights=vec, descriptor="3x3"), TypeError, "descriptor"),
        (dict(weights=[0.0] * NW, descriptor=d), TypeError, "weights"),
        (dict(weights=np.zeros((COUT, KH, KW, CIN)), device="cpu"), TypeError, "weights"),
        (dict(weights=read_only, device="cpu"), ValueError, "weights"),
        (dict(weights=vec, biases=np.zeros(NB, np.float32), descriptor=d), ValueError, "biases"),
    ]


@pytest.mark.parametrize("case", range(13))
def test_weights_state_over_bad_memory_raises(device, case):
    kwargs, error, name = _weights_bad_cases(device)[case]
    if case == 12 and device.name == "cpu":
        # A NumPy array is host memory of the cpu device, so it may join a cpu Vector.
        m.CNNConvolutionWeightsAndBiasesState(**kwargs)
        return
    with pytest.raises(error, match=name):
        m.CNNConvolutionWeightsAndBiasesState(**kwargs)


# ---------------------------------------------------------------------------------------------
# item 10: normalization states over Vectors, the states' buffers as Vectors

C = 5
EPS = 1e-3


def _batch_norm_kernels(device, gen):
    """A batch normalization whose data source holds values no test expects (only reloads matter)."""
    junk = [randn(gen, C) for _ in range(3)] + [np.full(C, 9.0, np.float32)]
    bn = m.CNNBatchNormalization(device, m.CNNBatchNormalizationWeightsDataSource(*junk, epsilon=EPS))
    bn.destination_image_allocator = m.ImageAllocator.persistent()
    return bn, m.CNNBatchNormalizationStatistics(device), m.CNNBatchNormalizationStatisticsGradient(device)


def _torch_inference(x, gamma, beta, mean, variance):
    X = torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    y = F.batch_norm(X, t(mean), t(variance), t(gamma), t(beta), training=False, eps=EPS)
    return np.transpose(y.numpy(), (0, 2, 3, 1))


def test_normalization_states_over_vectors_are_not_copies(device, queue, check):
    """[mean | variance] and [gamma | beta] each in one Vector; every reload reads what the memory
    holds then, so writing the Vectors needs no new state."""
    gen = rng("bn-states-over-vectors")
    x = randn(gen, 2, 3, 4, C)
    bn, _, _ = _batch_norm_kernels(device, gen)
    stats = m.Vector(device, 2 * C)
    params = m.Vector(device, 2 * C + 2)
    mv = m.CNNNormalizationMeanAndVarianceState(mean=stats, variance=stats, number_of_feature_channels=C,
                                                variance_offset=4 * C)
    gb = m.CNNNormalizationGammaAndBetaState(device, params, params, number_of_feature_channels=C, gamma_offset=8,
                                             beta_offset=8 + 4 * C)
    assert (mv.number_of_feature_channels, gb.number_of_feature_channels) == (C, C)
    xs = m.batch_from_numpy(x, device)
    for round_ in range(2):
        mean, variance = randn(gen, C), 0.5 + gen.random(C).astype(np.float32)
        gamma, beta = randn(gen, C), randn(gen, C)
        stats.numpy()[...] = np.concatenate([mean, variance])
        params.numpy()[2:] = np.concatenate([gamma, beta])
        np.testing.assert_array_equal(mv.variance, variance)  # the state's views are the memory
        np.testing.assert_array_equal(gb.gamma_vector.numpy(), gamma)

        def forward(cb):
            bn.reload_mean_and_variance_with_command_buffer(cb, mv)
            bn.reload_gamma_and_beta_with_command_buffer(cb, gb)
            return bn.encode_batch(cb, xs)
        ys = run_completed(queue, forward)
        check(m.batch_to_numpy(ys), _torch_inference(x, gamma, beta, mean, variance), f"round {round_}")


def test_optimizer_result_state_over_a_vector(device, queue, check):
    """SGD's batch-normalization form writes γ/β into a result state that aliases a Vector."""
    gen = rng("bn-result-over-vector")
    x, g = randn(gen, 2, 3, 3, C), randn(gen, 2, 3, 3, C)
    gamma, beta = 1.0 + 0.3 * randn(gen, C), randn(gen, C)
    bn = m.CNNBatchNormalization(device, m.CNNBatchNormalizationWeightsDataSource(
        gamma, beta, np.zeros(C, np.float32), np.ones(C, np.float32), epsilon=EPS))
    statistics, statistics_gradient = m.CNNBatchNormalizationStatistics(device), \
        m.CNNBatchNormalizationStatisticsGradient(device)
    xs, gs = m.batch_from_numpy(x, device), m.batch_from_numpy(g, device)
    out = m.Vector(device, 2 * C)
    result = m.CNNNormalizationGammaAndBetaState(gamma=out, beta=out, number_of_feature_channels=C,
                                                 beta_offset=4 * C)
    state = bn.result_state(xs[0])

    def step(cb):
        statistics.encode_batch(cb, xs, state)
        bn.encode_batch(cb, xs, state)
        statistics_gradient.encode_batch(cb, gs, xs, state)
        m.NNOptimizerStochasticGradientDescent(device, 0.5).encode(cb, state, None, result)
    run_completed(queue, step)
    X = torch.tensor(np.transpose(x, (0, 3, 1, 2)), dtype=torch.float64)
    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    y = F.batch_norm(X, None, None, W, B, training=True, eps=EPS)
    (y * torch.tensor(np.transpose(g, (0, 3, 1, 2)), dtype=torch.float64)).sum().backward()
    check(out.to_numpy(), np.concatenate([gamma - 0.5 * W.grad.numpy(), beta - 0.5 * B.grad.numpy()]),
          "γ, β written into the Vector")
    check(state.gradient_for_gamma_vector.numpy(), W.grad.numpy(), "gradient_for_gamma_vector")
    check(state.gradient_for_beta_vector.numpy(), B.grad.numpy(), "gradient_for_beta_vector")


def test_batch_normalization_state_buffers_as_vectors(device, queue):
    gen = rng("bn-state-vectors")
    x = randn(gen, 2, 3, 3, C)
    bn, statistics, _ = _batch_norm_kernels(device, gen)
    xs = m.batch_from_numpy(x, device)
    state = bn.result_state(xs[0])
    vectors = {name: getattr(state, f"{name}_vector") for name in
               ("gamma", "beta", "mean", "variance", "gradient_for_gamma", "gradient_for_beta")}
    run_completed(queue, lambda cb: statistics.encode_batch(cb, xs, state))
    for name in ("mean", "variance"):  # made before the kernel ran: the same memory, not a snapshot
        assert vectors[name].length == C and vectors[name].device == device
        np.testing.assert_array_equal(vectors[name].numpy(), getattr(state, name), err_msg=name)
    vectors["mean"].numpy()[0] = -5.0
    assert state.mean[0] == -5.0
    np.testing.assert_array_equal(state.vector_at_index(3).numpy(), state.variance)


def test_convolution_gradient_state_buffers_as_vectors(device, queue, check):
    gen = rng("conv-gradient-vectors")
    w, b, x, e = randn(gen, COUT, KH, KW, CIN), randn(gen, COUT), randn(gen, 1, 4, 4, CIN), randn(gen, 1, 4, 4, COUT)
    ds = m.CNNConvolutionWeightsDataSource(_descriptor(), w, b)
    conv, grad = m.CNNConvolution(device, ds), m.CNNConvolutionGradient(device, ds)
    xi = m.Image.from_numpy(x, device)

    def step(cb):
        _, gstate = conv.encode(cb, xi, destination_state_is_temporary=False)
        grad.encode(cb, m.Image.from_numpy(e, device), xi, gstate)
        return gstate
    gstate = run_completed(queue, step)
    dw, db = _torch_conv_gradients(x, w, b, e)
    check(gstate.gradient_for_weights_vector.numpy(), dw.reshape(-1), "gradient_for_weights_vector")
    check(gstate.gradient_for_biases_vector.numpy(), db, "gradient_for_biases_vector")
    assert gstate.vector_at_index(1, length=2).length == 2
    with pytest.raises(ValueError, match="length"):
        gstate.vector_at_index(1, length=NB + 1)
    with pytest.raises(ValueError, match="index"):
        gstate.vector_at_index(2)


def test_turi_create_running_statistics(device, queue, check):
    """Turi Create's batch-normalization update on the GPU: SGD with learning rate -0.1 and L2 scale -1
    takes the batch statistic as the gradient and the running value as the values, in place:
    g' = stat - r, r - (-0.1)·g' = 0.9·r + 0.1·stat, a moving average with momentum 0.9."""
    gen = rng("turi-create-running-statistics")
    bn, statistics, _ = _batch_norm_kernels(device, gen)
    desc = m.NNOptimizerDescriptor(learning_rate=-0.1, gradient_rescale=1.0,
                                   regularization_type=m.NNRegularizationType.L2, regularization_scale=-1.0)
    sgd = m.NNOptimizerStochasticGradientDescent(device, optimizer_descriptor=desc)
    running_mean = m.Vector.from_numpy(np.zeros(C, np.float32), device)
    running_variance = m.Vector.from_numpy(np.ones(C, np.float32), device)
    ref_mean, ref_variance = np.zeros(C), np.ones(C)
    torch_mean, torch_variance = torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64)
    for step in range(4):
        x = (2.0 * randn(gen, 3, 4, 4, C) + step).astype(np.float32)
        xs = m.batch_from_numpy(x, device)
        state = bn.result_state(xs[0])

        def update(cb):
            statistics.encode_batch(cb, xs, state)
            sgd.encode(cb, state.mean_vector, running_mean)  # in place: result None
            sgd.encode(cb, state.variance_vector, running_variance)
        run_completed(queue, update)
        x64 = x.astype(np.float64)
        ref_mean = 0.9 * ref_mean + 0.1 * x64.mean(axis=(0, 1, 2))
        ref_variance = 0.9 * ref_variance + 0.1 * x64.var(axis=(0, 1, 2))  # the state's biased variance
        # torch's own running mean (its running variance is unbiased, unlike the state's variance)
        F.batch_norm(torch.tensor(np.transpose(x64, (0, 3, 1, 2))), torch_mean, torch_variance, training=True,
                     momentum=0.1)
        check(running_mean.to_numpy(), ref_mean, f"running mean, step {step}")
        check(running_mean.to_numpy(), torch_mean.numpy(), f"running mean against torch, step {step}")
        check(running_variance.to_numpy(), ref_variance, f"running variance, step {step}")
    # The running statistics drive inference through a state over the same Vectors.
    mv = m.CNNNormalizationMeanAndVarianceState(mean=running_mean, variance=running_variance)
    gamma, beta, x = randn(gen, C), randn(gen, C), randn(gen, 2, 3, 3, C)

    def infer(cb):
        bn.reload_mean_and_variance_with_command_buffer(cb, mv)
        bn.reload_gamma_and_beta_with_command_buffer(cb, m.CNNNormalizationGammaAndBetaState(device, gamma, beta))
        return bn.encode_batch(cb, m.batch_from_numpy(x, device))
    check(m.batch_to_numpy(run_completed(queue, infer)), _torch_inference(x, gamma, beta, ref_mean, ref_variance),
          "inference with the running statistics")


def test_any_finite_learning_rate_and_regularization_scale(device, queue, check):
    d = m.NNOptimizerDescriptor(learning_rate=-2.0, regularization_scale=-0.5,
                                regularization_type=m.NNRegularizationType.L1)
    assert (d.learning_rate, d.regularization_scale) == (-2.0, -0.5)
    d.learning_rate = -1e-3
    sgd = m.NNOptimizerStochasticGradientDescent(device, -0.5)
    sgd.set_learning_rate(-0.25)
    assert sgd.learning_rate == -0.25
    w, g = np.array([1.0, -2.0, 0.0], np.float32), np.array([0.5, 0.5, -1.0], np.float32)
    wv = m.Vector.from_numpy(w, device)
    run_completed(queue, lambda cb: sgd.encode(cb, m.Vector.from_numpy(g, device), wv))
    check(wv.to_numpy(), w + 0.25 * g, "gradient ascent")
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="learning_rate"):
            sgd.set_learning_rate(bad)
        with pytest.raises(ValueError, match="regularization_scale"):
            m.NNOptimizerDescriptor(regularization_scale=bad)
    assert sgd.learning_rate == -0.25


def _normalization_bad_cases(device):
    v, short = m.Vector(device, 2 * C), m.Vector(device, C - 1)
    MV, GB = m.CNNNormalizationMeanAndVarianceState, m.CNNNormalizationGammaAndBetaState
    return [
        (MV, dict(mean=short, variance=v, number_of_feature_channels=C), ValueError, "mean"),
        (MV, dict(mean=v, variance=short), ValueError, "variance"),
        (MV, dict(mean=v, variance=v, variance_offset=6, number_of_feature_channels=C), ValueError,
         "variance_offset"),
        (MV, dict(mean=v, variance=v, mean_offset=8 * C), ValueError, "mean_offset"),
        (MV, dict(mean=v, variance=np.ones(2 * C, np.float32)), TypeError, "variance"),
        (MV, dict(mean=v, variance=v, number_of_feature_channels=0), ValueError, "number_of_feature_channels"),
        (GB, dict(gamma=np.ones(C, np.float32), beta=np.ones(C, np.float32), gamma_offset=4), TypeError,
         "gamma_offset"),
        (GB, dict(gamma=v, beta=v, beta_offset=4 * C + 4, number_of_feature_channels=C), ValueError, "beta"),
        (GB, dict(gamma=v, beta=v, gamma_offset=-4), ValueError, "gamma_offset"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_normalization_states_over_bad_memory_raise(device, case):
    cls, kwargs, error, name = _normalization_bad_cases(device)[case]
    with pytest.raises(error, match=name):
        cls(**kwargs)


# ---------------------------------------------------------------------------------------------
# serialization: an aliased state writes what it sees, and comes back owning its memory


def test_aliased_states_serialize_their_values(device):
    gen = rng("aliased-serialization")
    w, b = randn(gen, COUT, KH, KW, CIN), randn(gen, COUT)
    buffer = _shared_buffer(device, w, b)
    state = m.CNNConvolutionWeightsAndBiasesState(weights=buffer, biases=buffer, descriptor=_descriptor(),
                                                  weights_offset=4 * PAD, biases_offset=4 * (PAD + NW))
    view = state.buffer_at_index(0)  # from the resource's offset to the end of the buffer, no further
    assert view.size == NW + NB and state.buffer_size_at_index(0) == 4 * (PAD + NW + NB)
    np.testing.assert_array_equal(view[:NW], w.reshape(-1))
    stats = m.Vector.from_numpy(np.arange(2 * C + 1, dtype=np.float32), device)
    mv = m.CNNNormalizationMeanAndVarianceState(mean=stats, variance=stats, number_of_feature_channels=C,
                                                mean_offset=4, variance_offset=4 + 4 * C)
    gb = m.CNNNormalizationGammaAndBetaState(gamma=stats, beta=stats, number_of_feature_channels=C,
                                             beta_offset=4 * C)
    for original in (state, mv, gb):
        for restored in (type(original).from_bytes(original.to_bytes(), device), pickle.loads(pickle.dumps(original))):
            assert type(restored) is type(original)
            views = ("weights", "biases") if original is state else ("mean", "variance") if original is mv \
                else ("gamma", "beta")
            for view in views:
                np.testing.assert_array_equal(getattr(restored, view), getattr(original, view), err_msg=view)
    restored = m.CNNConvolutionWeightsAndBiasesState.from_bytes(state.to_bytes(), device)
    assert restored.weights_offset == 0  # its own memory, no longer the buffer's
    buffer.numpy()[PAD] = -77.0
    assert state.weights.reshape(-1)[0] == -77.0 and restored.weights.reshape(-1)[0] == w.reshape(-1)[0]
    np.testing.assert_array_equal(mv.mean, np.arange(1, C + 1))


def test_weights_state_without_descriptor_takes_the_counts_of_its_buffers(device):
    """-initWithWeights:biases: has no descriptor: the buffers' sizes give the counts (a 1 x 1
    convolution of weights / biases inputs); the memory is still aliased."""
    weights, biases = m.Vector(device, 5 * 5 * 3 * 8), m.Vector(device, 8)
    state = m.CNNConvolutionWeightsAndBiasesState(weights=weights, biases=biases)
    assert np.asarray(state.weights).size == 75 * 8 and np.asarray(state.biases).size == 8
    weights.numpy()[:] = 2.0
    assert np.all(np.asarray(state.weights) == 2.0)
    # it serves a 5 x 5 x 3 -> 8 convolution, which checks the two counts
    conv = m.CNNConvolution(device, m.CNNConvolutionWeightsDataSource(
        m.CNNConvolutionDescriptor(5, 5, 3, 8), np.zeros((8, 5, 5, 3), np.float32), np.zeros(8, np.float32)))
    cb = m.CommandQueue(device).command_buffer()
    conv.reload_weights_and_biases_with_command_buffer(cb, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.error is None
    with pytest.raises(ValueError, match="weights"):
        m.CNNConvolutionWeightsAndBiasesState(weights=m.Vector(device, 10), biases=m.Vector(device, 3))
    with pytest.raises(TypeError, match="descriptor"):
        m.CNNConvolutionWeightsAndBiasesState(weights=weights)
