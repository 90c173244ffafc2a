#!/usr/bin/env python3
"""Train one convolution layer with mpsgrad, MPS-style, and print the loss per step.

The layer (3x3, 4 -> 8 channels, TF-SAME padding) learns to reproduce the output of a fixed
"teacher" convolution on a small batch of random images: mean squared error to the target, plain
SGD. The update takes MPS's GPU path: the weights live in a CNNConvolutionWeightsAndBiasesState,
the gradient kernel fills a CNNConvolutionGradientState (weight and bias gradients summed over the
batch), the step updates the weights state, and reload_weights_and_biases_with_command_buffer
hands it to BOTH the forward and the gradient kernel.

    python examples/train_conv.py [--device cpu|metal] [--steps 20] [--lr 0.5]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

try:
    import mpsgrad as m
except ImportError:  # a source checkout with the extension built into python/mpsgrad
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
    import mpsgrad as m


def build(device, rng, in_channels=4, out_channels=8, k=3):
    desc = m.CNNConvolutionDescriptor(kernel_width=k, kernel_height=k, input_feature_channels=in_channels,
                                      output_feature_channels=out_channels)
    fan_in = k * k * in_channels
    weights = (rng.standard_normal((out_channels, k, k, in_channels)) / np.sqrt(fan_in)).astype(np.float32)  # OHWI
    biases = np.zeros(out_channels, np.float32)
    source = m.CNNConvolutionWeightsDataSource(desc, weights, biases)
    conv = m.CNNConvolution(device, source)
    conv_grad = m.CNNConvolutionGradient(device, source)  # the same data source as the forward kernel
    conv.padding = m.NNDefaultPadding(int(m.PaddingMethod.TENSORFLOW_SAME))
    for kernel in (conv, conv_grad):
        kernel.destination_image_allocator = m.ImageAllocator.persistent()  # read results after completion
    conv_grad.gradient_option = m.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS  # first layer: no dX
    return desc, conv, conv_grad


def make_data(device, queue, rng, batch=4, size=12, in_channels=4, out_channels=8):
    """A batch of random images and the targets a random teacher convolution gives for them."""
    x = rng.standard_normal((batch, size, size, in_channels)).astype(np.float32)
    images = m.batch_from_numpy(x, device)
    _, teacher, _ = build(device, rng, in_channels, out_channels)
    cb = queue.command_buffer()
    targets = teacher.encode_batch(cb, images)
    cb.commit()
    cb.wait_until_completed()
    return images, m.batch_to_numpy(targets)


def train(device_name="cpu", steps=20, lr=0.5, seed=0, log=print):
    """Runs the loop; returns the list of losses (one per step, before that step's update)."""
    device = m.Device(device_name)
    queue = m.CommandQueue(device)
    rng = np.random.default_rng(seed)
    images, targets = make_data(device, queue, rng)
    desc, conv, conv_grad = build(device, rng)

    # The trainable weights: exported once from the forward kernel into a persistent state.
    cb = queue.command_buffer()
    weights = conv.export_weights_and_biases_with_command_buffer(cb)
    cb.commit()
    cb.wait_until_completed()

    losses = []
    for step in range(steps):
        # forward: one shared gradient state for the whole batch
        cb = queue.command_buffer()
        outputs, states = conv.encode_batch(cb, images, destination_state_is_temporary=False)
        cb.commit()
        cb.wait_until_completed()
        residual = m.batch_to_numpy(outputs) - targets
        loss = float(np.mean(residual.astype(np.float64) ** 2))
        losses.append(loss)
        log(f"step {step:3d}  loss {loss:.6f}")

        # backward: dL/dY = 2 (Y - T) / numel, the weight and bias gradients land in the state
        cb = queue.command_buffer()
        dloss = m.batch_from_numpy((2.0 / residual.size) * residual, device)
        conv_grad.encode_batch(cb, dloss, images, states)
        cb.commit()
        cb.wait_until_completed()

        # SGD step on the weights state, then reload it into BOTH kernels
        state = states[0]
        weights.weights[...] -= lr * state.gradient_for_weights
        weights.biases[...] -= lr * state.gradient_for_biases
        cb = queue.command_buffer()
        conv.reload_weights_and_biases_with_command_buffer(cb, weights)
        conv_grad.reload_weights_and_biases_with_command_buffer(cb, weights)
        cb.commit()
        cb.wait_until_completed()
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=m.Device.default().name, choices=list(m.Device.available()),
                        help="device to train on (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=20, help="SGD steps (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    args = parser.parse_args(argv)
    print(f"training a 3x3 4->8 convolution on device '{args.device}' for {args.steps} steps")
    losses = train(args.device, args.steps, args.lr, args.seed)
    if len(losses) > 1:
        decreasing = all(b < a for a, b in zip(losses, losses[1:]))
        print(f"loss {losses[0]:.6f} -> {losses[-1]:.6f} ({'monotonically decreasing' if decreasing else 'NOT monotone'})")
        return 0 if decreasing else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
