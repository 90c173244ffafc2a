#!/usr/bin/env python3
"""Train a LeNet-style CNN on scikit-learn's 8x8 digits with mpsgrad's graph API.

The network is described once as graph nodes (MPSNNGraph style):

    conv 3x3 (1->16) -> BN -> ReLU -> max pool 2 -> conv 3x3 (16->32) -> BN -> ReLU -> max pool 2
    -> fully connected (2x2x32 -> 64) -> ReLU -> dropout -> fully connected (64 -> 10)
    -> softmax cross-entropy loss

and `training_graph()` on the loss node builds the whole backward pass. The trainable gradient
nodes hand their gradients to the data sources below, which take an Adam step:

* the convolution and fully connected layers GPU style by default (UPDATE_DEVICE_GPU, the MPS
  way): right after the gradient is encoded, `update_with_command_buffer` encodes an
  `NNOptimizerAdam` on the same command buffer and returns the updated weights state, which the
  kernels reload on that command buffer;
* batch normalization's gamma and beta GPU style too: `update_gamma_and_beta_with_command_buffer`
  encodes `NNOptimizerAdam` with the batch-normalization state into a
  `CNNNormalizationGammaAndBetaState` the BN kernel reloads on that command buffer; the running mean
  and variance (inference statistics) follow from the completion handler (no optimizer encodes a
  running average; docs/graph.md "Trainable nodes and training styles");
* `--training-style cpu` trains every layer from the completion handler instead
  (UPDATE_DEVICE_CPU, NumPy Adam).

The 1797 digits ship with scikit-learn (no download); a stratified 20 % is held out for testing.

    pip install ".[examples]" && python examples/train_digits.py [--epochs 15] [--plot digits.png]

Prints a progress bar per epoch (tqdm), saves a plot of train/test loss and accuracy per epoch
(matplotlib) and ends with the line `test accuracy: NN.N%`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

try:
    import mpsgrad as m
except ImportError:  # a source checkout with the extension built into python/mpsgrad
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
    import mpsgrad as m

CLASSES = 10
# --training-style: how the convolution, fully connected and batch-normalization layers take their Adam step.
TRAINING_STYLES = {"gpu": "UPDATE_DEVICE_GPU", "cpu": "UPDATE_DEVICE_CPU"}


class Name:
    """An MPSHandle: names a graph input or result."""

    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


class Adam:
    """Adam (Kingma & Ba) on a list of float32 arrays, updated in place; PyTorch's formula."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        step = self.lr / (1 - b1 ** self.t)
        root = np.sqrt(1 - b2 ** self.t)
        for p, g, m_, v in zip(self.params, grads, self.m, self.v):
            g = np.asarray(g, np.float32).reshape(p.shape)
            m_ *= b1
            m_ += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= step * m_ / (np.sqrt(v) / root + self.eps)


class ConvWeights:
    """A convolution / fully connected data source (OHWI weights) that trains with Adam.

    The weights live in a CNNConvolutionWeightsAndBiasesState; weights() and bias_terms() are views
    of it, so the kernels (re)load the current values whichever way the layer trains.

    GPU style (MPS's way): the graph calls update_with_command_buffer right after encoding the
    gradient, with the batch-summed gradient state and the forward kernel's current weights;
    NNOptimizerAdam is encoded on the same command buffer into our state, which the forward and
    gradient kernels then reload on that command buffer. NNOptimizerAdam applies PyTorch's bias
    corrections (lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)); its epsilon is added to sqrt(v)
    before the correction (MPS's formula), PyTorch's after, so the two differ only where sqrt(v)
    is within a few orders of magnitude of epsilon = 1e-8 (docs/losses_and_optimizers.md).

    CPU style: update_with_gradient_state runs from the completion handler and takes a NumPy
    Adam step (PyTorch's formula exactly); returning True makes the kernels reload."""

    def __init__(self, device, weights, biases, lr):
        out, kh, kw, inp = weights.shape
        self.device, self.lr = device, lr
        self.desc = m.CNNConvolutionDescriptor(kw, kh, inp, out)
        self.state = m.CNNConvolutionWeightsAndBiasesState(device, self.desc)
        self.w, self.b = self.state.weights, self.state.biases  # writable views of the state
        self.w[...] = weights
        self.b[...] = biases
        self.optimizer = self.adam = None  # made by the first update of either style

    def descriptor(self):
        return self.desc

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def load(self):
        return True

    def purge(self):
        pass

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        if self.optimizer is None:
            self.optimizer = m.NNOptimizerAdam(self.device, self.lr)  # beta1 0.9, beta2 0.999, eps 1e-8
            # First and second moments of [weights, biases], zero-filled.
            self.moments = [[m.Vector(self.device, a.size) for a in (self.w, self.b)] for _ in range(2)]
        self.optimizer.encode(command_buffer, gradient_state, source_state or self.state, self.moments[0],
                              self.moments[1], None, self.state)
        return self.state

    def update_with_gradient_state(self, gradient_state, source_state):
        if self.adam is None:
            self.adam = Adam([self.w, self.b], self.lr)
        self.adam.step([gradient_state.gradient_for_weights, gradient_state.gradient_for_biases])
        return True


class BatchNormParameters:
    """A batch-normalization data source: gamma and beta train with Adam, mean and variance are
    PyTorch-style running averages (momentum 0.1, unbiased batch variance) used for inference.

    gamma() and beta() are views of a CNNNormalizationGammaAndBetaState. GPU style, the graph calls
    update_gamma_and_beta_with_command_buffer right after encoding the BN gradient: NNOptimizerAdam
    (its batch-normalization form) reads the state's gradients and the gamma/beta the forward used and
    writes the new values into our state, which the graph reloads into the BN kernel on the same
    command buffer. CPU style, update_gamma_and_beta_with_batch_normalization_state takes a NumPy Adam
    step from the completion handler. The running statistics are updated from the completion handler
    in both styles (update_mean_and_variance_with_batch_normalization_state)."""

    def __init__(self, device, channels, lr, momentum=0.1):
        self.device, self.lr, self.momentum = device, lr, momentum
        self.state = m.CNNNormalizationGammaAndBetaState(device, np.ones(channels, np.float32),
                                                         np.zeros(channels, np.float32))
        self.g, self.b = self.state.gamma, self.state.beta  # writable views of the state
        self.mu, self.var = np.zeros(channels, np.float32), np.ones(channels, np.float32)
        self.optimizer = self.adam = None  # made by the first update of either style

    def number_of_feature_channels(self):
        return self.g.size

    def gamma(self):
        return self.g

    def beta(self):
        return self.b

    def mean(self):
        return self.mu

    def variance(self):
        return self.var

    def epsilon(self):
        return 1e-5

    def load(self):
        return True

    def purge(self):
        pass

    def update_gamma_and_beta_with_command_buffer(self, command_buffer, state):
        if self.optimizer is None:
            self.optimizer = m.NNOptimizerAdam(self.device, self.lr)  # beta1 0.9, beta2 0.999, eps 1e-8
            self.moments = [[m.Vector(self.device, self.g.size) for _ in range(2)] for _ in range(2)]
        self.optimizer.encode(command_buffer, state, self.moments[0], self.moments[1], None, self.state)
        return self.state

    def update_gamma_and_beta_with_batch_normalization_state(self, state):
        if self.adam is None:
            self.adam = Adam([self.g, self.b], self.lr)
        self.adam.step([state.gradient_for_gamma, state.gradient_for_beta])
        return True

    def update_mean_and_variance_with_batch_normalization_state(self, state):
        count = self.pixels_per_batch
        self.mu += self.momentum * (np.asarray(state.mean) - self.mu)
        self.var += self.momentum * (np.asarray(state.variance) * count / (count - 1) - self.var)
        return True


def initial_parameters(seed):
    """Kaiming-uniform weights like PyTorch's default, biases zero; OHWI layout."""
    rng = np.random.default_rng(seed)

    def layer(out, kh, kw, inp):
        bound = 1.0 / np.sqrt(kh * kw * inp)
        return (rng.uniform(-bound, bound, (out, kh, kw, inp)).astype(np.float32),
                rng.uniform(-bound, bound, out).astype(np.float32))

    return {"conv1": layer(16, 3, 3, 1), "conv2": layer(32, 3, 3, 16),
            "fc1": layer(64, 2, 2, 32), "fc2": layer(CLASSES, 1, 1, 64)}


class DigitsNet:
    """The network as graph nodes, a training graph and an inference graph sharing the kernels."""

    def __init__(self, device, params, lr, keep_probability=0.5, seed=0, training_style="gpu"):
        if training_style not in TRAINING_STYLES:
            raise ValueError(f"training_style: expected one of {sorted(TRAINING_STYLES)}, got {training_style!r}")
        self.device = device
        self.sources = {name: ConvWeights(device, w, b, lr) for name, (w, b) in params.items()}
        self.bn = [BatchNormParameters(device, 16, lr), BatchNormParameters(device, 32, lr)]
        style = getattr(m.NNTrainingStyle, TRAINING_STYLES[training_style])

        x = m.NNImageNode(Name("digits"))
        h = x
        for i, conv in enumerate(("conv1", "conv2")):
            c = m.CNNConvolutionNode(h, self.sources[conv])  # 3x3, "same" size (MPS's default padding)
            bn = m.CNNBatchNormalizationNode(c.result_image, self.bn[i])
            relu = m.CNNNeuronReLUNode(bn.result_image)
            pool = m.CNNPoolingMaxNode(relu.result_image, filter_size=2)
            c.training_style = bn.training_style = style
            h = pool.result_image
        fc1 = m.CNNFullyConnectedNode(h, self.sources["fc1"])
        hidden = m.CNNNeuronReLUNode(fc1.result_image).result_image
        drop = m.CNNDropoutNode(hidden, keep_probability=keep_probability, seed=seed)
        fc2 = m.CNNFullyConnectedNode(drop.result_image, self.sources["fc2"])
        fc1.training_style = fc2.training_style = style
        # Training reads the logits too (for the accuracy): an exported intermediate.
        fc2.result_image.export_from_graph = True
        fc2.result_image.handle = Name("logits")
        # An exported image is still temporary (as in MPS) unless its node allocates persistent images;
        # the logits are read after the command buffer completed.
        fc2.result_image.image_allocator = m.ImageAllocator.persistent()
        descriptor = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True  # the batch mean, like PyTorch's cross_entropy
        loss = m.CNNLossNode(fc2.result_image, descriptor)
        terminal = loss.training_graph()
        self.train_graph = m.NNGraph(device, [t.result_image for t in terminal], [False] * len(terminal))

        # Inference skips the dropout: a second FC node on the same data source (the first FC,
        # the convolutions and BN nodes are shared, so their kernels are the training graph's; BN
        # uses the running mean and variance in an inference graph).
        self.fc2_eval = m.CNNFullyConnectedNode(hidden, self.sources["fc2"])
        self.eval_graph = m.NNGraph(device, self.fc2_eval.result_image)
        # FLOAT32 intermediates: the graphs default to MPS's FLOAT16, but on these 8x8 images the
        # half conversions of the kernels that still use float32 shadows cost more than the halved
        # bytes save (about 1.4x the step here; docs/graph.md "Formats and storage").
        for graph in (self.train_graph, self.eval_graph):
            graph.format = m.ImageFeatureChannelFormat.FLOAT32
        self.queue = m.CommandQueue(device)
        self.labels = {}  # batch size -> the label states (label_states)

    def train_step(self, x, labels):
        """One Adam step on a batch (N, 8, 8, 1) with integer labels; returns (loss, logits)."""
        for bn, pixels in zip(self.bn, (64, 16)):
            bn.pixels_per_batch = x.shape[0] * pixels
        onehot = np.eye(CLASSES, dtype=np.float32)[labels].reshape(-1, 1, 1, CLASSES)
        states = self.label_states(len(onehot))
        for state, t in zip(states, onehot):
            state.labels_image.write_bytes(t)  # the new labels into the reused label images
        cb = self.queue.command_buffer()
        _, intermediates, _ = self.train_graph.encode_batch(cb, [m.batch_from_numpy(x, self.device)], [states],
                                                            return_intermediates=True)
        cb.commit()
        cb.wait_until_completed()  # the Adam steps ran on the command buffer or in its completion handler
        loss = float(states[0].loss_image.to_numpy().ravel()[0])
        return loss, m.batch_to_numpy(intermediates[0]).reshape(-1, CLASSES)

    def label_states(self, n):
        """n CNNLossLabels made once per batch size and reused every step (new states every step cost
        about 5 % of a step here): each holds a one-image labels image the step overwrites."""
        if n not in self.labels:
            self.labels[n] = [m.CNNLossLabels(self.device, m.Image.from_numpy(np.zeros((1, 1, CLASSES), np.float32),
                                                                              self.device)) for _ in range(n)]
        return self.labels[n]

    def logits(self, x):
        self.eval_graph.reload_from_data_sources()  # the FC node only the inference graph has
        cb = self.queue.command_buffer()
        out = self.eval_graph.encode_batch(cb, [m.batch_from_numpy(x, self.device)])
        cb.commit()
        cb.wait_until_completed()
        return m.batch_to_numpy(out).reshape(-1, CLASSES)


def load_data(seed, train_limit=None):
    """The 8x8 digits scaled to [0, 1], NHWC, with a stratified 20 % test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2, random_state=seed,
                                                        stratify=digits.target)
    if train_limit:
        x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    return x_train, y_train, x_test, y_test


def cross_entropy(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(labels)), labels].mean())


def evaluate(net, x, y, batch=256):
    logits = np.concatenate([net.logits(x[i:i + batch]) for i in range(0, len(x), batch)])
    return cross_entropy(logits, y), float((logits.argmax(1) == y).mean())


def batches(n, batch_size, rng):
    order = rng.permutation(n)
    # A last batch of one image has no batch variance: fold it into the previous one.
    starts = list(range(0, n - batch_size // 2, batch_size)) if n > batch_size else [0]
    return [order[s:(starts[i + 1] if i + 1 < len(starts) else n)] for i, s in enumerate(starts)]


def save_plot(history, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(history["train_loss"]) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, history["train_loss"], label="train")
    left.plot(epochs, history["test_loss"], label="test")
    left.set(xlabel="epoch", ylabel="cross-entropy loss", title="loss")
    right.plot(epochs, 100 * np.array(history["train_acc"]), label="train")
    right.plot(epochs, 100 * np.array(history["test_acc"]), label="test")
    right.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("mpsgrad graph API: LeNet-style CNN on scikit-learn digits")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or metal (default cpu)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate (default 2e-3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-limit", type=int, default=None, help="use only this many training images")
    parser.add_argument("--plot", default="digits_training.png", help="where to save the plot (PNG)")
    parser.add_argument("--training-style", choices=sorted(TRAINING_STYLES), default="gpu",
                        help="gpu (default): Adam on the command buffer (NNOptimizerAdam); cpu: NumPy Adam "
                             "from the completion handler")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over torch.distributed, one rank per process: run under torchrun "
                             "--standalone --nproc_per_node N (examples/digits_distributed.py, docs/distributed.md)")
    parser.add_argument("--sync-bn", action="store_true",
                        help="with --distributed: synchronized batch normalization (statistics over all ranks' "
                             "images, as torch.nn.SyncBatchNorm)")
    return parser.parse_args(argv)


def main(argv=None):
    from tqdm import tqdm

    args = parse_args(argv)
    if args.distributed:
        from digits_distributed import main as distributed_main  # examples/, next to this script

        return distributed_main(args, sys.modules[__name__])
    x_train, y_train, x_test, y_test = load_data(args.seed, args.train_limit)
    device = m.Device(args.device)
    net = DigitsNet(device, initial_parameters(args.seed), args.lr, seed=args.seed, training_style=args.training_style)
    rng = np.random.default_rng(args.seed)
    history = {"train_loss": [], "train_acc": [], "test_loss": [], "test_acc": []}
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        total_loss = correct = seen = 0
        bar = tqdm(batches(len(x_train), args.batch_size, rng), desc=f"epoch {epoch}/{args.epochs}",
                   unit="batch", disable=args.no_progress, leave=True)
        for idx in bar:
            loss, logits = net.train_step(x_train[idx], y_train[idx])
            total_loss += loss * len(idx)
            correct += int((logits.argmax(1) == y_train[idx]).sum())
            seen += len(idx)
            bar.set_postfix(loss=f"{total_loss / seen:.4f}", acc=f"{100 * correct / seen:.1f}%")
        test_loss, test_acc = evaluate(net, x_test, y_test)
        bar.set_postfix(loss=f"{total_loss / seen:.4f}", acc=f"{100 * correct / seen:.1f}%",
                        test_acc=f"{100 * test_acc:.1f}%")
        bar.close()
        history["train_loss"].append(total_loss / seen)
        history["train_acc"].append(correct / seen)
        history["test_loss"].append(test_loss)
        history["test_acc"].append(test_acc)
    elapsed = time.perf_counter() - start
    save_plot(history, args.plot)
    print(f"trained {args.epochs} epochs on {len(x_train)} images in {elapsed:.1f} s; plot: {args.plot}")
    print(f"test accuracy: {100 * history['test_acc'][-1]:.1f}%")
    return history


if __name__ == "__main__":
    main()
