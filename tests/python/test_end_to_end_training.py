"""End-to-end training: conv 3x3 -> batch normalization + ReLU -> fully connected -> softmax cross-entropy,
every forward, gradient, loss and optimizer step done by mpsgrad kernels, for 50 steps, against the same
model trained by PyTorch (float64 autograd, torch.optim) step by step.

Each step is one command buffer: forward, loss (CNNLoss: gradient to the destination, loss to the labels'
loss image), gradients, optimizer encodes on the convolution and batch-normalization states, and the
reloads of the new weights into the kernels. The loss of every step must match PyTorch's within 1e-4
relative: a missing reload, a stale state or any wrong gradient or update term shows up within a few
steps far above that bound, while float32 rounding (a few 1e-7 per step, carried through 50 steps of
SGD with momentum) stays well below it.

The fully connected layer is, as MPS defines it (spec §2.1.7), a convolution whose kernel covers the
whole input with valid-only padding (a 1x1 output). `fully_connected()` builds it; switching to
CNNFullyConnected is a one-line change there.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import mpsgrad as m
from conftest import FLOAT16, FLOAT16_TOLERANCE, ConvSpec, randn, rng

N, H, W, CIN = 6, 5, 5, 3  # FC kernel = the 5x5 input: odd, so the valid-only window is centred
HIDDEN, CLASSES = 8, 4
STEPS = 50
LR, MOMENTUM = 0.02, 0.9
BN_EPSILON = 1e-3
ADAM_LR = 0.005
BLOB = 0.5  # a faint signal in unit noise: the loss falls but stays O(0.1), where float32 resolves it


def _persistent(*kernels):
    for k in kernels:
        k.destination_image_allocator = m.ImageAllocator.persistent()


def fully_connected(device, w, b):
    """The FC layer: CNNFullyConnected, MPS's convolution whose kernel covers its whole input
    (spec §2.1.7); it shares the convolution's data source, gradient state and weight states."""
    d = m.CNNConvolutionDescriptor(kernel_width=W, kernel_height=H, input_feature_channels=HIDDEN,
                                   output_feature_channels=CLASSES)
    ds = m.CNNConvolutionWeightsDataSource(d, w, b)
    return m.CNNFullyConnected(device, ds), m.CNNFullyConnectedGradient(device, ds)


class Model:
    """The mpsgrad side: kernels, their exported weight states and the optimizers' state vectors."""

    def __init__(self, device, queue, params):
        w1, b1, gamma, beta, w2, b2 = params
        self.device, self.queue = device, queue
        ds1 = m.CNNConvolutionWeightsDataSource(ConvSpec(3, 3, CIN, HIDDEN).descriptor(), w1, b1)
        self.conv, self.conv_grad = m.CNNConvolution(device, ds1), m.CNNConvolutionGradient(device, ds1)
        relu = m.NNNeuronDescriptor(m.CNNNeuronType.RELU)
        bn_source = m.CNNBatchNormalizationWeightsDataSource(gamma, beta, np.zeros(HIDDEN, np.float32),
                                                             np.ones(HIDDEN, np.float32), epsilon=BN_EPSILON)
        self.bn = m.CNNBatchNormalization(device, bn_source, relu)  # BN with the ReLU fused
        self.bn_statistics = m.CNNBatchNormalizationStatistics(device)
        self.bn_statistics_grad = m.CNNBatchNormalizationStatisticsGradient(device, relu)
        self.bn_grad = m.CNNBatchNormalizationGradient(device, relu)
        self.fc, self.fc_grad = fully_connected(device, w2, b2)
        d = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
        d.reduce_across_batch = True  # one loss for the batch: the mean over images, as F.cross_entropy
        self.loss = m.CNNLoss(device, d)
        _persistent(self.conv, self.conv_grad, self.bn, self.bn_grad, self.fc, self.fc_grad)

        cb = queue.command_buffer()
        self.conv_weights = self.conv.export_weights_and_biases_with_command_buffer(cb)
        self.fc_weights = self.fc.export_weights_and_biases_with_command_buffer(cb)
        cb.commit()
        cb.wait_until_completed()
        self.gamma_beta = m.CNNNormalizationGammaAndBetaState(device, gamma, beta)

        desc = m.NNOptimizerDescriptor(learning_rate=LR)
        self.sgd = m.NNOptimizerStochasticGradientDescent(device, momentum_scale=MOMENTUM, optimizer_descriptor=desc)
        self.adam = m.NNOptimizerAdam(device, ADAM_LR)
        self.conv_momentum = [m.Vector(device, w1.size), m.Vector(device, HIDDEN)]
        self.fc_momentum = [m.Vector(device, w2.size), m.Vector(device, CLASSES)]
        self.bn_moments = ([m.Vector(device, HIDDEN), m.Vector(device, HIDDEN)],
                           [m.Vector(device, HIDDEN), m.Vector(device, HIDDEN)])

    def step(self, x, labels):
        """One training step in one command buffer; returns the batch loss computed by CNNLoss."""
        xs = m.batch_from_numpy(x, self.device)
        label_states = [m.CNNLossLabels(self.device, m.CNNLossDataDescriptor(labels[n].reshape(1, 1, CLASSES)))
                        for n in range(N)]
        cb = self.queue.command_buffer()
        # forward
        h1, conv_states = self.conv.encode_batch(cb, xs, destination_state_is_temporary=False)
        bn_state = self.bn.result_state(h1[0])
        self.bn_statistics.encode_batch(cb, h1, bn_state)
        h2 = self.bn.encode_batch(cb, h1, bn_state)
        logits, fc_states = self.fc.encode_batch(cb, h2, destination_state_is_temporary=False)
        # loss and backward
        d_logits = self.loss.encode_batch(cb, logits, label_states)
        d_h2 = self.fc_grad.encode_batch(cb, d_logits, h2, fc_states)
        self.bn_statistics_grad.encode_batch(cb, d_h2, h1, bn_state)
        d_h1 = self.bn_grad.encode_batch(cb, d_h2, h1, [bn_state] * N)
        self.conv_grad.encode_batch(cb, d_h1, xs, conv_states)
        # updates (in place on the exported weight states), then the reloads
        self.sgd.encode(cb, conv_states[0], self.conv_weights, self.conv_momentum)
        self.sgd.encode(cb, fc_states[0], self.fc_weights, self.fc_momentum)
        self.adam.encode(cb, bn_state, *self.bn_moments, None, self.gamma_beta)
        for kernel, state in ((self.conv, self.conv_weights), (self.conv_grad, self.conv_weights),
                              (self.fc, self.fc_weights), (self.fc_grad, self.fc_weights)):
            kernel.reload_weights_and_biases_with_command_buffer(cb, state)
        self.bn.reload_gamma_and_beta_with_command_buffer(cb, self.gamma_beta)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == m.CommandBufferStatus.COMPLETED, cb.error
        return float(label_states[0].loss_image.to_numpy().reshape(-1)[0])


class TorchModel:
    """The oracle: the same model and optimizers in float64 PyTorch (NCHW, OIHW weights)."""

    def __init__(self, params):
        w1, b1, gamma, beta, w2, b2 = params
        t = lambda a, perm=None: (torch.tensor(a, dtype=torch.float64) if perm is None  # noqa: E731
                                  else torch.tensor(a, dtype=torch.float64).permute(*perm).contiguous()
                                  ).requires_grad_(True)
        self.w1, self.b1 = t(w1, (0, 3, 1, 2)), t(b1)
        self.gamma, self.beta = t(gamma), t(beta)
        self.w2, self.b2 = t(w2, (0, 3, 1, 2)), t(b2)
        self.sgd = torch.optim.SGD([self.w1, self.b1, self.w2, self.b2], lr=LR, momentum=MOMENTUM)
        self.adam = torch.optim.Adam([self.gamma, self.beta], lr=ADAM_LR, eps=1e-8)

    def step(self, x, labels):
        X = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)
        h = F.conv2d(X, self.w1, self.b1, padding=1)
        h = F.relu(F.batch_norm(h, None, None, self.gamma, self.beta, training=True, eps=BN_EPSILON))
        logits = F.conv2d(h, self.w2, self.b2).reshape(N, CLASSES)
        loss = F.cross_entropy(logits, torch.tensor(labels, dtype=torch.float64))
        self.sgd.zero_grad()
        self.adam.zero_grad()
        loss.backward()
        self.sgd.step()
        self.adam.step()
        return loss.item()


def _problem():
    """A classification task a small CNN can fit: the class is the channel/quadrant of a bright blob."""
    gen = rng("end-to-end")
    w1 = (randn(gen, HIDDEN, 3, 3, CIN) / np.sqrt(9 * CIN)).astype(np.float32)
    b1 = (0.1 * randn(gen, HIDDEN)).astype(np.float32)
    gamma = (1.0 + 0.1 * randn(gen, HIDDEN)).astype(np.float32)
    beta = (0.1 * randn(gen, HIDDEN)).astype(np.float32)
    w2 = (randn(gen, CLASSES, H, W, HIDDEN) / np.sqrt(H * W * HIDDEN)).astype(np.float32)
    b2 = np.zeros(CLASSES, np.float32)
    batches = []
    for _ in range(STEPS):
        cls = gen.integers(0, CLASSES, N)
        x = randn(gen, N, H, W, CIN)
        for n, c in enumerate(cls):
            r, q = divmod(int(c), 2)
            x[n, 3 * r:3 * r + 2, 3 * q:3 * q + 2, :] += BLOB
        batches.append((x.astype(np.float32), np.eye(CLASSES, dtype=np.float32)[cls]))
    return (w1, b1, gamma, beta, w2, b2), batches


def test_conv_bn_relu_fc_softmax_training_matches_torch(device, queue, check):
    params, batches = _problem()
    model, oracle = Model(device, queue, params), TorchModel(params)
    losses, ref_losses = [], []
    for k, (x, labels) in enumerate(batches):
        losses.append(model.step(x, labels))
        ref_losses.append(oracle.step(x, labels))
        check(losses[-1], ref_losses[-1], f"loss at step {k}")
    # The model learns (the comparison is not between two stalled runs).
    assert np.mean(ref_losses[-10:]) < 0.8 * np.mean(ref_losses[:10]), ref_losses
    assert model.adam.time_step == STEPS
    # The final parameters too (the last update is not seen by any loss).
    # Several training steps chain FLOAT16 roundings through every layer: twice conftest's bound then.
    final_tol = 2 * FLOAT16_TOLERANCE if FLOAT16 else 1e-4
    check(model.conv_weights.weights, oracle.w1.detach().permute(0, 2, 3, 1).numpy(), "conv weights", tol=final_tol)
    check(model.fc_weights.biases, oracle.b2.detach().numpy(), "fc biases", tol=final_tol)
    check(model.gamma_beta.gamma, oracle.gamma.detach().numpy(), "gamma", tol=final_tol)
    check(model.gamma_beta.beta, oracle.beta.detach().numpy(), "beta", tol=final_tol)
