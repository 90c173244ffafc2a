"""Whole training steps of three CIFAR-sized networks, mpsgrad against PyTorch eager (issue 30).

    python benchmarks/networks.py                       # every network, 1 and 2 threads
    python benchmarks/networks.py --threads 1,2,4,8,16  # the many-core run
    python benchmarks/networks.py --network vgg --format float16 --blocks 5

The networks (32 x 32 x 3 images, batch 64 by default, 10 classes, softmax cross-entropy over the
batch mean, Adam with lr 1e-3):

* ``vgg``: five 3x3 convolutions with batch normalization and ReLU (32, 32, 64, 128, 128
  channels), three 2x2 max pools, a fully connected layer.
* ``resnet``: a 3x3 stem (32 channels) and three basic blocks (two 3x3 convolutions with batch
  normalization, the residual add, ReLU) of 32, 64 and 128 channels, the last two downsampling
  with stride 2 (a 1x1 stride-2 convolution with batch normalization on the shortcut), global
  average pooling, a fully connected layer.
* ``mobilenet``: a 3x3 stem (32 channels) and five depthwise-separable blocks (3x3 depthwise and
  1x1 pointwise convolutions, each with batch normalization and ReLU6; 64, 128 (stride 2), 128,
  256 (stride 2), 256 channels), global average pooling, a fully connected layer.

mpsgrad builds each network with the graph API and ``training_graph()``; every convolution and
batch normalization trains GPU style, with ``NNOptimizerAdam`` encoded on the step's command buffer
by the data sources below. One mpsgrad step is one command buffer: ``encode_batch``, ``commit``,
``wait_until_completed``. PyTorch runs the same network in eager mode (``nn.Module``, autograd,
``torch.optim.Adam``), in NCHW and in channels_last; the faster of the two is the reference. Both
start from the same weights (PyTorch's default initialisation, drawn once) and train on the same
fixed batch; batch normalization uses batch statistics and keeps no running statistics on either
side (``track_running_stats=False``), so the two compute the same function.

Before timing, both libraries train ``--check-steps`` steps from the same start, and the losses must
agree step by step (within ``--check-tolerance``, relative) and fall: a benchmark of two different
computations would be meaningless. Then blocks of ``--steps`` steps alternate between the libraries
(mpsgrad, PyTorch NCHW, PyTorch channels_last, repeated ``--blocks`` times); each block gives ms per
step and process CPU time per step (all threads). The table prints medians of the per-block
figures and the median of the per-pair ratios PyTorch / mpsgrad (> 1: mpsgrad is faster).
Nothing here is asserted on time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import mpsgrad as m

CLASSES = 10
LR = 1e-3
NETWORKS = ("vgg", "resnet", "mobilenet")


class Name:
    """An MPSHandle: any object with label()."""

    def __init__(self, name):
        self.name = name

    def label(self):
        return self.name


# ---------------------------------------------------------------------------------------------
# mpsgrad's data sources: weights and batch-normalization parameters trained by Adam on the
# command buffer (MPS's GPU training style)


class AdamWeights:
    """A convolution / fully connected data source (OHWI weights) that trains with NNOptimizerAdam."""

    def __init__(self, device, weights, biases, descriptor):
        self.device, self.desc = device, descriptor
        self.state = m.CNNConvolutionWeightsAndBiasesState(device, descriptor)
        self.state.weights[...] = weights
        self.state.biases[...] = biases
        self.adam = m.NNOptimizerAdam(device, LR)
        self.moments = [[m.Vector(device, a.size) for a in (weights, biases)] for _ in range(2)]

    def descriptor(self):
        return self.desc

    def weights(self):
        return self.state.weights

    def bias_terms(self):
        return self.state.biases

    def load(self):
        return True

    def purge(self):
        pass

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.adam.encode(command_buffer, gradient_state, source_state or self.state, self.moments[0],
                         self.moments[1], None, self.state)
        return self.state


class AdamBatchNorm:
    """A batch-normalization data source: gamma and beta train with NNOptimizerAdam; no running
    statistics (the benchmark trains only)."""

    def __init__(self, device, channels):
        self.device = device
        self.state = m.CNNNormalizationGammaAndBetaState(device, np.ones(channels, np.float32),
                                                         np.zeros(channels, np.float32))
        self.adam = m.NNOptimizerAdam(device, LR)
        self.moments = [[m.Vector(device, channels) for _ in range(2)] for _ in range(2)]
        self.mu, self.var = np.zeros(channels, np.float32), np.ones(channels, np.float32)

    def number_of_feature_channels(self):
        return self.state.gamma.size

    def gamma(self):
        return self.state.gamma

    def beta(self):
        return self.state.beta

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
        self.adam.encode(command_buffer, state, self.moments[0], self.moments[1], None, self.state)
        return self.state


# ---------------------------------------------------------------------------------------------
# The networks, described once as a list of layers both libraries build from


@dataclass
class Conv:
    name: str
    inp: int
    out: int
    k: int = 3
    stride: int = 1
    depthwise: bool = False


def vgg_layers():
    convs = [Conv("c1", 3, 32), Conv("c2", 32, 32), Conv("c3", 32, 64), Conv("c4", 64, 128), Conv("c5", 128, 128)]
    # (conv, pool after it); the FC reads 4 x 4 x 128
    return convs, {"c2", "c3", "c5"}


def resnet_blocks():
    """(name, in, out, stride) of the basic blocks after the 3 -> 32 stem."""
    return [("b1", 32, 32, 1), ("b2", 32, 64, 2), ("b3", 64, 128, 2)]


def mobilenet_blocks():
    """(name, in, out, stride) of the depthwise-separable blocks after the 3 -> 32 stem."""
    return [("d1", 32, 64, 1), ("d2", 64, 128, 2), ("d3", 128, 128, 1), ("d4", 128, 256, 2), ("d5", 256, 256, 1)]


def network_convs(network: str) -> List[Conv]:
    """Every convolution of a network (the parameters to initialise), in a fixed order."""
    if network == "vgg":
        return vgg_layers()[0]
    convs = [Conv("stem", 3, 32)]
    if network == "resnet":
        for name, inp, out, stride in resnet_blocks():
            convs += [Conv(name + "a", inp, out, 3, stride), Conv(name + "b", out, out)]
            if stride != 1 or inp != out:
                convs.append(Conv(name + "s", inp, out, 1, stride))
    else:
        for name, inp, out, stride in mobilenet_blocks():
            convs += [Conv(name + "dw", inp, inp, 3, stride, depthwise=True), Conv(name + "pw", inp, out, 1)]
    return convs


def fc_input(network: str):
    """(height, width, channels) the fully connected layer reads."""
    return {"vgg": (4, 4, 128), "resnet": (1, 1, 128), "mobilenet": (1, 1, 256)}[network]


def initial_parameters(network: str, seed: int) -> Dict[str, tuple]:
    """PyTorch's default initialisation (Kaiming-uniform bounds 1/sqrt(fan_in)), OHWI, drawn once."""
    rng = np.random.default_rng(seed)

    def draw(out, kh, kw, inp):
        bound = 1.0 / np.sqrt(kh * kw * inp)
        return (rng.uniform(-bound, bound, (out, kh, kw, inp)).astype(np.float32),
                rng.uniform(-bound, bound, out).astype(np.float32))

    params = {c.name: draw(c.out, c.k, c.k, 1 if c.depthwise else c.inp) for c in network_convs(network)}
    h, w, c = fc_input(network)
    params["fc"] = draw(CLASSES, h, w, c)
    return params


# ---------------------------------------------------------------------------------------------
# mpsgrad: the graph


class MpsgradNet:
    def __init__(self, network, params, batch, image_format, device):
        self.device, self.batch = device, batch
        self.queue = m.CommandQueue(device)
        self.convs = {c.name: c for c in network_convs(network)}
        self.params = params
        x = m.NNImageNode(Name("images"))
        build = {"vgg": self._vgg, "resnet": self._resnet, "mobilenet": self._mobilenet}[network]
        features = build(x)
        h, w, c = fc_input(network)
        fc = m.CNNFullyConnectedNode(features, self._weights("fc", m.CNNConvolutionDescriptor(w, h, c, CLASSES)))
        descriptor = m.CNNLossDescriptor(m.CNNLossType.SOFTMAX_CROSS_ENTROPY, m.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True  # the batch mean, as F.cross_entropy
        loss = m.CNNLossNode(fc.result_image, descriptor)
        terminal = loss.training_graph()
        self.graph = m.NNGraph(device, [t.result_image for t in terminal], [False] * len(terminal))
        self.graph.format = image_format
        self.labels = [m.CNNLossLabels(device, m.Image.from_numpy(np.zeros((1, 1, CLASSES), np.float32), device))
                       for _ in range(batch)]
        self.images = None

    def _weights(self, name, descriptor):
        w, b = self.params[name]
        return AdamWeights(self.device, w, b, descriptor)

    def _conv(self, source, name):
        c = self.convs[name]
        make = m.CNNDepthWiseConvolutionDescriptor if c.depthwise else m.CNNConvolutionDescriptor
        d = make(c.k, c.k, c.inp, c.out)
        d.stride_in_pixels_x = d.stride_in_pixels_y = c.stride
        return m.CNNConvolutionNode(source, self._weights(name, d)).result_image

    def _bn(self, source, channels):
        return m.CNNBatchNormalizationNode(source, AdamBatchNorm(self.device, channels)).result_image

    def _conv_bn(self, source, name, relu6=False):
        y = self._bn(self._conv(source, name), self.convs[name].out)
        return (m.CNNNeuronReLUNNode(y, 0.0, 6.0) if relu6 else m.CNNNeuronReLUNode(y)).result_image

    def _vgg(self, x):
        convs, pooled = vgg_layers()
        h = x
        for c in convs:
            h = self._conv_bn(h, c.name)
            if c.name in pooled:
                h = m.CNNPoolingMaxNode(h, filter_size=2).result_image
        return h

    def _resnet(self, x):
        h = self._conv_bn(x, "stem")
        for name, inp, out, stride in resnet_blocks():
            y = self._bn(self._conv(self._conv_bn(h, name + "a"), name + "b"), out)
            shortcut = self._bn(self._conv(h, name + "s"), out) if (stride != 1 or inp != out) else h
            h = m.CNNNeuronReLUNode(m.NNAdditionNode(y, shortcut).result_image).result_image
        return m.NNReductionSpatialMeanNode(h).result_image

    def _mobilenet(self, x):
        h = self._conv_bn(x, "stem", relu6=True)
        for name, _, _, _ in mobilenet_blocks():
            h = self._conv_bn(self._conv_bn(h, name + "dw", relu6=True), name + "pw", relu6=True)
        return m.NNReductionSpatialMeanNode(h).result_image

    def set_batch(self, x_nhwc, onehot):
        self.images = m.batch_from_numpy(x_nhwc, self.device)
        for state, t in zip(self.labels, onehot):
            state.labels_image.write_bytes(t.reshape(1, 1, CLASSES))

    def step(self) -> float:
        cb = self.queue.command_buffer()
        self.graph.encode_batch(cb, [self.images], [self.labels])
        cb.commit()
        cb.wait_until_completed()
        return float(self.labels[0].loss_image.to_numpy().ravel()[0])


# ---------------------------------------------------------------------------------------------
# PyTorch: the same networks


def _torch_conv(c: Conv, params) -> nn.Conv2d:
    w, b = params[c.name]
    conv = nn.Conv2d(c.inp, c.out, c.k, stride=c.stride, padding=c.k // 2, groups=c.inp if c.depthwise else 1)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(w).permute(0, 3, 1, 2))  # OHWI -> OIHW
        conv.bias.copy_(torch.from_numpy(b))
    return conv


def _torch_bn(channels):
    return nn.BatchNorm2d(channels, track_running_stats=False)


class TorchBasicBlock(nn.Module):
    def __init__(self, name, inp, out, stride, convs, params):
        super().__init__()
        self.a, self.bna = _torch_conv(convs[name + "a"], params), _torch_bn(out)
        self.b, self.bnb = _torch_conv(convs[name + "b"], params), _torch_bn(out)
        self.shortcut = (nn.Sequential(_torch_conv(convs[name + "s"], params), _torch_bn(out))
                         if (stride != 1 or inp != out) else nn.Identity())

    def forward(self, x):
        y = self.bnb(self.b(F.relu(self.bna(self.a(x)))))
        return F.relu(y + self.shortcut(x))


class TorchNet(nn.Module):
    def __init__(self, network, params):
        super().__init__()
        convs = {c.name: c for c in network_convs(network)}
        layers: List[nn.Module] = []
        if network == "vgg":
            order, pooled = vgg_layers()
            for c in order:
                layers += [_torch_conv(c, params), _torch_bn(c.out), nn.ReLU()]
                if c.name in pooled:
                    layers.append(nn.MaxPool2d(2))
        elif network == "resnet":
            layers += [_torch_conv(convs["stem"], params), _torch_bn(32), nn.ReLU()]
            layers += [TorchBasicBlock(n, i, o, s, convs, params) for n, i, o, s in resnet_blocks()]
            layers.append(nn.AdaptiveAvgPool2d(1))
        else:
            layers += [_torch_conv(convs["stem"], params), _torch_bn(32), nn.ReLU6()]
            for name, _, out, _ in mobilenet_blocks():
                dw = convs[name + "dw"]
                layers += [_torch_conv(dw, params), _torch_bn(dw.out), nn.ReLU6(),
                           _torch_conv(convs[name + "pw"], params), _torch_bn(out), nn.ReLU6()]
            layers.append(nn.AdaptiveAvgPool2d(1))
        self.features = nn.Sequential(*layers)
        w, b = params["fc"]
        self.fc = nn.Linear(w[0].size, CLASSES)
        with torch.no_grad():  # OHWI over an NHWC image = the NCHW flatten of permuted weights
            self.fc.weight.copy_(torch.from_numpy(w).permute(0, 3, 1, 2).reshape(CLASSES, -1))
            self.fc.bias.copy_(torch.from_numpy(b))

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


class TorchTrainer:
    def __init__(self, network, params, x_nhwc, targets, channels_last):
        self.model = TorchNet(network, params)
        self.x = torch.from_numpy(x_nhwc).permute(0, 3, 1, 2).contiguous()
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.targets = torch.from_numpy(targets)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x), self.targets)
        loss.backward()
        self.opt.step()
        return float(loss.detach())


# ---------------------------------------------------------------------------------------------
# the protocol


@dataclass
class Row:
    network: str
    image_format: str
    threads: int
    mpsgrad_ms: float
    torch_ms: float
    torch_layout: str
    ratio: float          # median over pairs of torch time / mpsgrad time (> 1: mpsgrad faster)
    mpsgrad_cpu_ms: float  # process CPU time per step, all threads
    torch_cpu_ms: float
    cpu_ratio: float       # median over pairs of torch CPU / mpsgrad CPU
    losses_checked: int


def _block(step: Callable[[], float], steps: int):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - wall) * 1e3 / steps, (time.process_time() - cpu) * 1e3 / steps


def check_losses(network, mine: MpsgradNet, theirs: TorchTrainer, steps: int, tolerance: float) -> List[tuple]:
    """Both libraries train `steps` steps from the same start; the losses must agree and fall."""
    pairs = [(mine.step(), theirs.step()) for _ in range(steps)]
    for i, (a, b) in enumerate(pairs):
        if not (np.isfinite(a) and abs(a - b) <= tolerance * abs(b)):
            raise SystemExit(f"{network}: step {i}: mpsgrad's loss {a:.6f} differs from PyTorch's {b:.6f} "
                             f"(tolerance {tolerance} relative): the two networks differ")
    if not (pairs[-1][0] < pairs[0][0] and pairs[-1][1] < pairs[0][1]):
        raise SystemExit(f"{network}: the losses do not fall: {pairs}")
    return pairs


def measure(network, image_format, threads, args) -> Row:
    m.set_num_threads(threads)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.batch, 32, 32, 3), dtype=np.float32)
    targets = rng.integers(0, CLASSES, args.batch)
    onehot = np.eye(CLASSES, dtype=np.float32)[targets]
    params = initial_parameters(network, args.seed)
    fmt = {"float32": m.ImageFeatureChannelFormat.FLOAT32, "float16": m.ImageFeatureChannelFormat.FLOAT16}[image_format]
    mine = MpsgradNet(network, params, args.batch, fmt, m.Device(args.device))
    mine.set_batch(x, onehot)
    layouts = {"nchw": TorchTrainer(network, params, x, targets, False),
               "channels_last": TorchTrainer(network, params, x, targets, True)}
    # FLOAT16 intermediates round every activation to 11 bits: a looser loss tolerance.
    tolerance = args.check_tolerance * (20 if image_format == "float16" else 1)
    checked = check_losses(network, mine, layouts["nchw"], args.check_steps, tolerance)
    for trainer in layouts.values():  # warm-up
        _block(trainer.step, 1)
    _block(mine.step, 1)
    samples = {name: [] for name in ["mpsgrad", *layouts]}
    for _ in range(args.blocks):
        samples["mpsgrad"].append(_block(mine.step, args.steps))
        for name, trainer in layouts.items():
            samples[name].append(_block(trainer.step, args.steps))
    best = min(layouts, key=lambda name: statistics.median(s[0] for s in samples[name]))
    ours, ref = samples["mpsgrad"], samples[best]
    med = lambda values: statistics.median(values)  # noqa: E731
    return Row(network, image_format, threads, med(s[0] for s in ours), med(s[0] for s in ref), best,
               med(r[0] / o[0] for o, r in zip(ours, ref)), med(s[1] for s in ours), med(s[1] for s in ref),
               med(r[1] / max(o[1], 1e-9) for o, r in zip(ours, ref)), len(checked))


def print_header() -> None:
    print(f"{'network':<10} {'format':<8} {'thr':>3} {'mpsgrad ms':>10} {'torch ms':>9} {'layout':<13} "
          f"{'ratio':>6} {'mps cpu ms':>10} {'torch cpu ms':>12} {'cpu ratio':>9}")


def print_rows(rows: List[Row]) -> None:
    for r in rows:
        print(f"{r.network:<10} {r.image_format:<8} {r.threads:>3} {r.mpsgrad_ms:>10.1f} {r.torch_ms:>9.1f} "
              f"{r.torch_layout:<13} {r.ratio:>6.2f} {r.mpsgrad_cpu_ms:>10.1f} {r.torch_cpu_ms:>12.1f} "
              f"{r.cpu_ratio:>9.2f}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--network", action="append", choices=NETWORKS, help="repeat for several (default: all)")
    p.add_argument("--format", action="append", choices=("float32", "float16"),
                   help="the graph's intermediate format; repeat for both (default: float32 and float16)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--blocks", type=int, default=5, help="timed blocks per library (default 5)")
    p.add_argument("--steps", type=int, default=3, help="steps per block (default 3)")
    p.add_argument("--check-steps", type=int, default=4, help="steps of the loss check (default 4)")
    p.add_argument("--check-tolerance", type=float, default=2e-3, help="relative, FLOAT32 (FLOAT16: x20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    args.network = args.network or list(NETWORKS)
    args.format = args.format or ["float32", "float16"]
    try:
        args.threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads: expected comma-separated integers, got {args.threads!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"machine: {platform.machine()} {os.cpu_count()} logical CPUs, {platform.processor() or platform.system()}; "
          f"mpsgrad {m.blas_info() if hasattr(m, 'blas_info') else ''}; torch {torch.__version__}; batch {args.batch}",
          flush=True)
    print("medians of blocks; ratio = PyTorch time / mpsgrad time (> 1: mpsgrad faster), median of pairs")
    print_header()
    rows = []
    for threads in args.threads:
        for network in args.network:
            for image_format in args.format:
                rows.append(measure(network, image_format, threads, args))
                print_rows(rows[-1:])
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
