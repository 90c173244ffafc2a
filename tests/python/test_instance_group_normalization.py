"""Instance and group normalization against PyTorch autograd (float64 F.instance_norm / F.group_norm).

MPS ↔ PyTorch mapping: images are NHWC, PyTorch is NCHW (transposed explicitly). Statistics are per
image (and channel, or group of consecutive channels) with the biased variance, as PyTorch's. MPS keeps
one gradient state per image, whose gradient_for_gamma / gradient_for_beta are the sums over that
image's pixels: PyTorch's weight.grad / bias.grad of the loss sum(Y·G) restricted to that image (the
batch's dγ, dβ are their sums; each state is also checked against the float64 per-image sums). dX is
X.grad of the same loss.

Bound: max relative error <= 1e-4 (conftest TOLERANCE). The sums are over a few hundred float32 terms
(~1e-6 relative); dX = r·(γG − A/M − x̂·B/M) cancels terms of the size of γG, leaving a few float32
ulps of max|γG|. A wrong term (a missing 1/M, unbiased variance, statistics over the wrong channels)
is an error of 1e-2 or more.

Every autograd reference runs on a batch of at least two images: torch 2.13's CPU group_norm /
instance_norm backward gives wrong values or crashes for a single image on this machine.

Shapes: channel counts that are not multiples of 4, and groups of more than 256 values (the Metal
kernels' threadgroup size), so every simdgroup and lane of the reductions holds data.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import randn, rng

FLT_MIN = float(np.finfo(np.float32).tiny)

# (family, (N, H, W, C), groups): groups is C for instance normalization.
CASES = [
    ("instance", (2, 5, 7, 6), 6),
    ("instance", (2, 17, 19, 5), 5),      # 323 pixels per channel: more than 256 threads
    ("group", (2, 5, 7, 6), 3),           # 2 channels per group
    ("group", (2, 12, 13, 12), 4),        # 3 channels x 156 pixels = 468 values per group
    ("group", (2, 6, 9, 10), 1),          # one group: layer normalization over C·H·W
    ("group", (2, 4, 5, 7), 7),           # groups == channels: instance normalization
    ("group", (2, 6, 5, 40), 8),          # CPU reductions: two whole 16-channel blocks and a tail of 8
    ("instance", (2, 4, 3, 16), 16),      # one whole 16-channel block
]


def _ids(case):
    family, shape, groups = case
    return f"{family}-{'x'.join(map(str, shape))}-g{groups}"


def _images(array, device):
    return m.batch_from_numpy(np.ascontiguousarray(array, dtype=np.float32), device)


def _nchw(x):
    return torch.tensor(np.transpose(np.asarray(x), (0, 3, 1, 2)), dtype=torch.float64)


def _nhwc(t):
    return np.transpose(t.detach().numpy(), (0, 2, 3, 1))


class Family:
    """The forward and gradient kernels of one family over a ready-made data source."""

    def __init__(self, family, device, gamma, beta, groups, epsilon):
        self.family = family
        if family == "instance":
            self.source = m.CNNInstanceNormalizationWeightsDataSource(gamma, beta, epsilon=epsilon)
            self.forward = m.CNNInstanceNormalization(device, self.source)
            self.gradient = m.CNNInstanceNormalizationGradient(device)
            self.state_class = m.CNNInstanceNormalizationGradientState
        else:
            self.source = m.CNNGroupNormalizationWeightsDataSource(gamma, beta, number_of_groups=groups,
                                                                   epsilon=epsilon)
            self.forward = m.CNNGroupNormalization(device, self.source)
            self.gradient = m.CNNGroupNormalizationGradient(device)
            self.state_class = m.CNNGroupNormalizationGradientState
        for k in (self.forward, self.gradient):
            k.destination_image_allocator = m.ImageAllocator.persistent()

    def update_cpu_style(self, states):
        if self.family == "instance":
            return self.source.update_gamma_and_beta_with_instance_normalization_state_batch(states)
        return self.source.update_gamma_and_beta_with_group_normalization_state_batch(states)


def _normalize(X, groups, W, B, epsilon, instance):
    if instance:
        return F.instance_norm(X, weight=W, bias=B, eps=epsilon)
    return F.group_norm(X, groups, W, B, eps=epsilon)


def _torch(x, g, gamma, beta, groups, epsilon, instance=False):
    """Y, dX, dγ, dβ of the loss sum(Y·G) over the whole batch under float64 autograd."""
    X = _nchw(x).requires_grad_(True)
    W = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    B = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    Y = _normalize(X, groups, W, B, epsilon, instance)
    (Y * _nchw(g)).sum().backward()
    return _nhwc(Y), _nhwc(X.grad), W.grad.numpy(), B.grad.numpy()


def _per_image_parameter_gradients(x, g, groups, epsilon):
    """(N, C) float64 Σ_{y,x} G·x̂ and Σ_{y,x} G per image: the spec's per-image state contents (§2.6).
    Their sums over the batch are autograd's dγ, dβ, which the tests check too. (Autograd is not run on
    single images: torch 2.13's CPU group_norm backward crashes or misbehaves for N = 1 here.)"""
    n, h, w, c = x.shape
    xg = x.astype(np.float64).reshape(n, h, w, groups, c // groups)
    xhat = (xg - xg.mean(axis=(1, 2, 4), keepdims=True)) / np.sqrt(xg.var(axis=(1, 2, 4), keepdims=True) + epsilon)
    g64 = g.astype(np.float64)
    return (g64 * xhat.reshape(n, h, w, c)).sum(axis=(1, 2)), g64.sum(axis=(1, 2))


def _parameters(gen, c):
    return (1.0 + 0.5 * randn(gen, c)).astype(np.float32), (0.3 * randn(gen, c)).astype(np.float32)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_and_gradients_match_autograd(device, queue, check, case):
    family, (n, h, w, c), groups = case
    gen = rng(f"gn-{_ids(case)}")
    x = (randn(gen, n, h, w, c) * 2.0 + 3.0).astype(np.float32)  # far from zero: tests the shifted sums
    g = randn(gen, n, h, w, c)
    gamma, beta = _parameters(gen, c)
    eps = 1e-3
    fam = Family(family, device, gamma, beta, groups, eps)
    xs, gs = _images(x, device), _images(g, device)
    cb = queue.command_buffer()
    ys, states = fam.forward.encode_batch(cb, xs, destination_state_is_temporary=False)
    assert len(states) == n and all(isinstance(s, fam.state_class) for s in states)
    assert len({id(s) for s in states}) == n  # one state per image
    assert states[0].gradient_for_gamma is None
    dxs = fam.gradient.encode_batch(cb, gs, xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

    y_ref, dx_ref, dgamma_ref, dbeta_ref = _torch(x, g, gamma, beta, groups, eps, instance=family == "instance")
    check(m.batch_to_numpy(ys), y_ref, "forward")
    check(m.batch_to_numpy(dxs), dx_ref, "dX")
    check(sum(np.asarray(s.gradient_for_gamma, np.float64) for s in states), dgamma_ref, "sum of gradient_for_gamma")
    check(sum(np.asarray(s.gradient_for_beta, np.float64) for s in states), dbeta_ref, "sum of gradient_for_beta")
    per_gamma, per_beta = _per_image_parameter_gradients(x, g, groups, eps)
    for i, state in enumerate(states):
        check(state.gamma, gamma, "state gamma")
        check(state.beta, beta, "state beta")
        check(state.gradient_for_gamma, per_gamma[i], f"image {i} gradient_for_gamma")
        check(state.gradient_for_beta, per_beta[i], f"image {i} gradient_for_beta")
        assert state.number_of_groups == groups


@pytest.mark.parametrize("family", ["instance", "group"])
def test_single_image_forms_and_feature_channel_offsets(device, queue, check, family):
    """encode(cb, x, state, y) with source / destination feature-channel offsets, then the returning
    gradient encode, which takes the offsets from the state (dX lands at the source's offset)."""
    h, w, c, groups = 6, 5, 6, (6 if family == "instance" else 2)
    gen = rng(f"gn-offsets-{family}")
    big = randn(gen, 1, h, w, 12)
    x = big[..., 4:4 + c]
    g = randn(gen, 1, h, w, c)
    gamma, beta = _parameters(gen, c)
    fam = Family(family, device, gamma, beta, groups, 1e-4)
    fam.forward.source_feature_channel_offset = 4
    fam.forward.source_feature_channel_max_count = c
    fam.forward.destination_feature_channel_offset = 4
    src = _images(big, device)[0]
    dst = _images(np.zeros((1, h, w, 10)), device)[0]
    grad_image = _images(np.pad(g, ((0, 0), (0, 0), (0, 0), (4, 0))), device)[0]
    cb = queue.command_buffer()
    state = fam.forward.result_state(src)
    fam.forward.encode(cb, src, state, dst)
    dx = fam.gradient.encode(cb, grad_image, src, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
    # Autograd on a batch of two (torch's N = 1 group_norm backward crashes here); image 0 is ours.
    other_x, other_g = randn(gen, 1, h, w, c), randn(gen, 1, h, w, c)
    y_ref, dx_ref, _, _ = _torch(np.concatenate([x, other_x]), np.concatenate([g, other_g]), gamma, beta, groups,
                                 1e-4, instance=family == "instance")
    y_ref, dx_ref = y_ref[:1], dx_ref[:1]
    (dgamma_ref,), (dbeta_ref,) = _per_image_parameter_gradients(x, g, groups, 1e-4)
    check(dst.to_numpy()[..., 4:4 + c], y_ref, "forward at the destination offset")
    assert dx.feature_channels == 12
    check(dx.to_numpy()[..., 4:4 + c], dx_ref, "dX at the source offset")
    check(state.gradient_for_gamma, dgamma_ref, "gradient_for_gamma")
    check(state.gradient_for_beta, dbeta_ref, "gradient_for_beta")


class GpuStyleGroupSource:
    """A duck-typed group normalization data source with the GPU-style update: it sums the batch's
    gradients (the states of the previous, completed command buffer) and returns a temporary
    CNNNormalizationGammaAndBetaState on the command buffer, which the kernel copies."""

    def __init__(self, gamma, beta, groups, lr, epsilon):
        self.g, self.b, self.groups, self.lr, self.eps = gamma.copy(), beta.copy(), groups, lr, epsilon

    def number_of_feature_channels(self):
        return len(self.g)

    def number_of_groups(self):
        return self.groups

    def gamma(self):
        return self.g

    def beta(self):
        return self.b

    def epsilon(self):
        return self.eps

    def update_gamma_and_beta_with_command_buffer(self, command_buffer, group_normalization_state_batch):
        states = group_normalization_state_batch
        self.g = (self.g - self.lr * sum(s.gradient_for_gamma for s in states)).astype(np.float32)
        self.b = (self.b - self.lr * sum(s.gradient_for_beta for s in states)).astype(np.float32)
        result = m.CNNNormalizationGammaAndBetaState.temporary(command_buffer, len(self.g))
        result.gamma[:] = self.g
        result.beta[:] = self.b
        return result


@pytest.mark.parametrize("style", ["cpu", "gpu"])
@pytest.mark.parametrize("family", ["instance", "group"])
def test_update_loop_matches_torch(device, queue, check, family, style):
    """Three SGD steps through the data source's update methods against torch.nn.GroupNorm /
    InstanceNorm2d(affine=True) + torch.optim.SGD on the same batches."""
    n, h, w, c = 3, 4, 5, 6
    groups = c if family == "instance" else 3
    lr, eps = 0.05, 1e-5
    gen = rng(f"gn-loop-{family}-{style}")
    gamma, beta = _parameters(gen, c)
    if family == "instance":
        ref = torch.nn.InstanceNorm2d(c, eps=eps, affine=True).double()
    else:
        ref = torch.nn.GroupNorm(groups, c, eps=eps).double()
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(gamma))
        ref.bias.copy_(torch.tensor(beta))
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    if style == "cpu":
        fam = Family(family, device, gamma, beta, groups, eps)
        fam.source.learning_rate = lr
        forward, gradient = fam.forward, fam.gradient
    else:
        if family == "instance":
            pytest.skip("the GPU-style protocol is the same for both families; shown once, with group")
        source = GpuStyleGroupSource(gamma, beta, groups, lr, eps)
        forward = m.CNNGroupNormalization(device, source)
        assert forward.data_source is source and forward.number_of_groups == groups
        gradient = m.CNNGroupNormalizationGradient(device)
        for k in (forward, gradient):
            k.destination_image_allocator = m.ImageAllocator.persistent()
    for step in range(3):
        x = (randn(gen, n, h, w, c) * 1.5 + 0.5).astype(np.float32)
        g = randn(gen, n, h, w, c)
        xs, gs = _images(x, device), _images(g, device)
        cb = queue.command_buffer()
        ys, states = forward.encode_batch(cb, xs, destination_state_is_temporary=True)
        for s in states:
            s.read_count = 2  # read by the gradient and by the data source's update
        dxs = gradient.encode_batch(cb, gs, xs, states)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error

        opt.zero_grad()
        X = _nchw(x).requires_grad_(True)
        Y = ref(X)
        (Y * _nchw(g)).sum().backward()
        opt.step()
        check(m.batch_to_numpy(ys), _nhwc(Y), f"step {step} forward")
        check(m.batch_to_numpy(dxs), _nhwc(X.grad), f"step {step} dX")

        if style == "cpu":
            assert fam.update_cpu_style(states)
            forward.reload_gamma_and_beta_from_data_source()
            new_gamma, new_beta = fam.source.gamma(), fam.source.beta()
        else:
            cb2 = queue.command_buffer()
            gb = source.update_gamma_and_beta_with_command_buffer(cb2, states)
            forward.reload_gamma_and_beta_with_command_buffer(cb2, gb)
            assert gb.read_count == 0
            cb2.commit()
            cb2.wait_until_completed()
            new_gamma, new_beta = source.g, source.b
        assert all(s.read_count == (0 if style == "cpu" else 1) for s in states)
        check(new_gamma, ref.weight.detach().numpy(), f"step {step} gamma")
        check(new_beta, ref.bias.detach().numpy(), f"step {step} beta")


@pytest.mark.parametrize("family", ["instance", "group"])
def test_results_are_bitwise_reproducible(device, queue, family):
    n, h, w, c = 2, 12, 13, 8
    groups = c if family == "instance" else 2
    gen = rng(f"gn-determinism-{family}")
    x, g = randn(gen, n, h, w, c), randn(gen, n, h, w, c)
    gamma, beta = _parameters(gen, c)

    def once():
        fam = Family(family, device, gamma, beta, groups, 1e-3)
        xs, gs = _images(x, device), _images(g, device)
        cb = queue.command_buffer()
        ys, states = fam.forward.encode_batch(cb, xs, destination_state_is_temporary=False)
        dxs = fam.gradient.encode_batch(cb, gs, xs, states)
        cb.commit()
        cb.wait_until_completed()
        return [m.batch_to_numpy(ys), m.batch_to_numpy(dxs)] + [np.array(s.gradient_for_gamma) for s in states]

    for a, b in zip(once(), once()):
        assert np.array_equal(a, b)


class InstanceProtocolSource:
    """The required methods only (no epsilon, beta None: no bias, no load / purge)."""

    def __init__(self, c):
        self.c = c

    def number_of_feature_channels(self):
        return self.c

    def gamma(self):
        return np.full(self.c, 2.0, np.float32)

    def beta(self):
        return None


def test_duck_typed_data_source_defaults(device, queue, check):
    fwd = m.CNNInstanceNormalization(device, InstanceProtocolSource(5))
    assert fwd.epsilon == pytest.approx(FLT_MIN)
    assert fwd.number_of_feature_channels == 5
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    x = randn(rng("gn-duck"), 1, 3, 4, 5)
    cb = queue.command_buffer()
    y = fwd.encode(cb, _images(x, device)[0])
    cb.commit()
    cb.wait_until_completed()
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    check(y.to_numpy(), 2.0 * (x - mean) / np.sqrt(var + FLT_MIN), "y = 2·(x - mean)/sqrt(var + FLT_MIN)")


def test_bad_inputs_raise(device, queue):
    gen = rng("gn-errors")
    c = 6
    gamma, beta = _parameters(gen, c)
    # Groups that do not divide the channels: the ready-made source, and a duck-typed one.
    with pytest.raises(ValueError, match="number_of_groups"):
        m.CNNGroupNormalizationWeightsDataSource(gamma, beta, number_of_groups=4)
    with pytest.raises(ValueError, match="number_of_groups"):
        m.CNNGroupNormalizationWeightsDataSource(gamma, beta, number_of_groups=0)

    class WrongGroups(GpuStyleGroupSource):
        def number_of_groups(self):
            return 5

    with pytest.raises(ValueError, match="number_of_groups"):
        m.CNNGroupNormalization(device, WrongGroups(gamma, beta, 5, 0.1, 1e-3))
    # Non-positive epsilon: the data source's, the ready-made source's and the kernel property.
    with pytest.raises(ValueError, match="epsilon"):
        m.CNNGroupNormalization(device, GpuStyleGroupSource(gamma, beta, 2, 0.1, 0.0))
    with pytest.raises(ValueError, match="epsilon"):
        m.CNNInstanceNormalizationWeightsDataSource(gamma, beta, epsilon=-1.0)
    fam = Family("group", device, gamma, beta, 2, 1e-3)
    for bad in (0.0, -1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon"):
            fam.forward.epsilon = bad
    with pytest.raises(TypeError, match="epsilon"):
        fam.forward.epsilon = "small"
    # Channel counts that do not match the data source.
    x = randn(gen, 1, 3, 3, c)
    xs = _images(x, device)
    wrong = _images(randn(gen, 1, 3, 3, c + 1), device)
    short = _images(randn(gen, 1, 3, 3, c - 1), device)
    cb = queue.command_buffer()
    with pytest.raises(ValueError, match="source_image"):
        fam.forward.encode(cb, wrong[0])
    ys, states = fam.forward.encode_batch(cb, xs, destination_state_is_temporary=False)
    with pytest.raises(ValueError, match="source_gradient"):
        fam.gradient.encode(cb, short[0], xs[0], states[0])
    # A state of the other family, and a gradient before its forward pass.
    other = Family("instance", device, gamma, beta, c, 1e-3)
    with pytest.raises(TypeError, match="CNNGroupNormalizationGradientState"):
        fam.gradient.encode(cb, xs[0], xs[0], other.forward.result_state(xs[0]))
    with pytest.raises(ValueError, match="not encoded"):
        fam.gradient.encode(cb, xs[0], xs[0], fam.forward.result_state(xs[0]))
    with pytest.raises(TypeError, match="destination_state"):
        fam.forward.encode(cb, xs[0], other.forward.result_state(xs[0]), ys[0])
    # The family works on whole images.
    fam.forward.offset = m.Offset(1, 0, 0)
    with pytest.raises(ValueError, match="offset"):
        fam.forward.encode(cb, xs[0], destination_image=ys[0])
    fam.forward.offset = m.Offset(0, 0, 0)
    cb.commit()
    cb.wait_until_completed()
    # The update needs gradients, and a list of the family's states.
    with pytest.raises(ValueError, match="no gradients"):
        fam.update_cpu_style(states)
    with pytest.raises(TypeError, match="group_normalization_state_batch"):
        fam.update_cpu_style([object()])
    # Malformed data sources.
    with pytest.raises(TypeError, match="data_source.*number_of_feature_channels"):
        m.CNNInstanceNormalization(device, object())

    class ShortGamma(InstanceProtocolSource):
        def gamma(self):
            return np.ones(2, np.float32)

    with pytest.raises(ValueError, match=r"data_source.gamma\(\)"):
        m.CNNInstanceNormalization(device, ShortGamma(5))
    with pytest.raises(ValueError, match="gamma_and_beta_state"):
        fam.forward.reload_gamma_and_beta_with_command_buffer(
            queue.command_buffer(), m.CNNNormalizationGammaAndBetaState(device, np.ones(3), np.zeros(3)))
