"""Shared fixtures and oracles for the mpsgrad Python tests.

* ``device``: every device this build provides (``mpsgrad.Device.available()``), optionally
  restricted by the environment variable ``MPSGRAD_TEST_DEVICES`` (comma list, e.g. "metal"),
  so the same tests run on the Metal backend in the emulation build.
* ``check``: compares an mpsgrad result with an oracle under a relative-error bound and records
  the worst relative error of every test; the worst values per test and per file are printed in
  the terminal summary (and stored as the junit property ``worst_rel_err``).
* ``MPSGRAD_TEST_IMAGE_FORMAT=float16`` (default float32) runs the family tests on FLOAT16 images:
  the image constructors the tests use make FLOAT16 images, the random inputs are drawn already
  rounded to half, and ``check`` widens its tolerance to ``FLOAT16_TOLERANCE`` (see below). Tests
  about float32 specifics opt out with ``@pytest.mark.float32_only("reason")``.
* PyTorch references that map the MPS conventions explicitly: OHWI weights -> OIHW, NHWC -> NCHW,
  the MPS window placement (``offset`` = centre of the first window, left edge
  ``offset - (kernel_extent >> 1)``) by explicit padding / cropping, clip rectangles, feature
  channel offsets, edge modes, fused neurons, and the padding-policy arithmetic of spec §1.8.1
  re-derived here independently of the library.
* Scaffolding several families' tests share: ``ConvCase`` (a convolution run over a batch, its
  geometry, inputs and oracle) with the ``SAME`` / ``VALID`` / ``FULL`` padding methods and the
  ``num_threads`` fixture (1 and 2 CPU threads); ``clipped_destination`` (a sentinel-filled
  destination and the check that only the clip rectangle was written); ``forward_and_gradient``
  and ``channel_slices_run`` / ``check_channel_slices`` (the forward-then-gradient runs of the
  windowed families).
"""
from __future__ import annotations

import collections
import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsgrad as m

# ---------------------------------------------------------------------------------------------
# devices


def _requested_devices():
    available = list(m.Device.available())
    env = os.environ.get("MPSGRAD_TEST_DEVICES", "").strip()
    if not env:
        return available, available
    requested = [name.strip() for name in env.split(",") if name.strip()]
    return requested, available


_REQUESTED, _AVAILABLE = _requested_devices()


@pytest.fixture(params=_REQUESTED, scope="session")
def device(request):
    """An mpsgrad Device, once per device of the build (or of MPSGRAD_TEST_DEVICES)."""
    name = request.param
    if name not in _AVAILABLE:
        pytest.fail(f"MPSGRAD_TEST_DEVICES requests device '{name}' but this build provides {_AVAILABLE}")
    return m.Device(name)


@pytest.fixture
def queue(device):
    return m.CommandQueue(device)


# ---------------------------------------------------------------------------------------------
# relative error and its session-wide record

TOLERANCE = 1e-4  # float32 results against a float64 oracle; see docs in test_convolution.py

# ---------------------------------------------------------------------------------------------
# float16 image storage (MPSGRAD_TEST_IMAGE_FORMAT=float16, docs/float16.md)

IMAGE_FORMAT = os.environ.get("MPSGRAD_TEST_IMAGE_FORMAT", "float32").strip().lower() or "float32"
if IMAGE_FORMAT not in ("float32", "float16"):
    raise RuntimeError(f"MPSGRAD_TEST_IMAGE_FORMAT: expected float32 or float16, got {IMAGE_FORMAT!r}")
FLOAT16 = IMAGE_FORMAT == "float16"

# The tolerance of a float16 run. The inputs are rounded to half before the oracle sees them
# (randn draws half values, and the image constructors round the caller's array in place), so the
# oracle and the kernel start from the same numbers; what remains is (a) the rounding of each
# stored output to half, at most 2**-11 (4.9e-4) of its magnitude, and (b) the rounding of every
# intermediate image a test chains through (a forward output that feeds a gradient, a gradient
# that feeds the next layer), each another 2**-11 of its own magnitude, amplified by the
# downstream derivative. The relative error is measured against the largest oracle value, so a
# handful of chained roundings of values near that magnitude stays below 16 half ulps: 8e-3.
FLOAT16_TOLERANCE = 8e-3
HALF_MAX = 65504.0  # the largest finite half; larger results become inf in FLOAT16 storage


def half_round(array):
    """float32 array rounded to the nearest half (what FLOAT16 storage keeps)."""
    return np.asarray(array, dtype=np.float32).astype(np.float16).astype(np.float32)


def _round_in_place(array):
    """Round a caller's writable float32 ndarray to half values, in place, so that an oracle that
    reads the same array afterwards sees what the FLOAT16 image holds."""
    if isinstance(array, np.ndarray) and array.dtype == np.float32 and array.flags.writeable:
        np.copyto(array, half_round(array))


def _install_float16_constructors():
    """Make the image constructors the tests call create FLOAT16 images (explicit channel_format
    arguments still win)."""
    fp16 = m.ImageFeatureChannelFormat.FLOAT16
    from_numpy, batch_from_numpy, write_bytes = m.Image.from_numpy, m.batch_from_numpy, m.Image.write_bytes
    descriptor_init = m.ImageDescriptor.__init__

    def default_format(array, channel_format):
        # uint8 / uint16 arrays keep the UNORM format their dtype picks (docs/storage_formats.md).
        if channel_format is None and getattr(array, "dtype", None) not in (np.uint8, np.uint16):
            return fp16
        return channel_format

    def image_from_numpy(array, device=None, channel_format=None):
        _round_in_place(array)
        return from_numpy(array, device, default_format(array, channel_format))

    def batch_from_numpy_fp16(array, device=None, channel_format=None):
        _round_in_place(array)
        return batch_from_numpy(array, device, default_format(array, channel_format))

    def image_write_bytes(self, data, *args, **kwargs):
        if self.feature_channel_format == fp16:
            _round_in_place(data)
        return write_bytes(self, data, *args, **kwargs)

    def descriptor(self, *args, **kwargs):
        if len(args) < 5 and "channel_format" not in kwargs:
            kwargs["channel_format"] = fp16
        descriptor_init(self, *args, **kwargs)

    m.Image.from_numpy = staticmethod(image_from_numpy)
    m.batch_from_numpy = batch_from_numpy_fp16
    m.Image.write_bytes = image_write_bytes
    m.ImageDescriptor.__init__ = descriptor


if FLOAT16:
    _install_float16_constructors()


def pytest_configure(config):
    config.addinivalue_line("markers", "float32_only(reason): the test is about float32 storage specifics; "
                                       "skipped when MPSGRAD_TEST_IMAGE_FORMAT=float16")


def pytest_collection_modifyitems(config, items):
    if not FLOAT16:
        return
    for item in items:
        marker = item.get_closest_marker("float32_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else "float32 specifics"
            item.add_marker(pytest.mark.skip(reason=f"float32 only: {reason}"))


def max_rel_err(actual, expected, scale: float = 1.0) -> float:
    """max|a - e| / max(1e-6 * scale, max|e|): the worst error relative to the oracle's magnitude."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    if e.size == 0:
        return 0.0
    if not np.all(np.isfinite(a)):
        return math.inf
    denom = max(1e-6 * scale, float(np.max(np.abs(e))))
    return float(np.max(np.abs(a - e))) / denom


_WORST: "collections.OrderedDict[str, float]" = collections.OrderedDict()


class Checker:
    """check(actual, expected, what) asserts max_rel_err <= tol and records the worst error."""

    def __init__(self, nodeid: str, record_property):
        self.nodeid = nodeid
        self.worst = 0.0
        self._record_property = record_property

    def __call__(self, actual, expected, what: str = "", tol: float = TOLERANCE, scale: float = 1.0) -> float:
        if FLOAT16:
            tol = max(tol, FLOAT16_TOLERANCE)
            if float(np.max(np.abs(np.asarray(expected, dtype=np.float64)), initial=0.0)) > HALF_MAX:
                pytest.skip(f"{what}: the oracle's values exceed float16's range (max {HALF_MAX:g})")
        err = max_rel_err(actual, expected, scale)
        self.worst = max(self.worst, err)
        _WORST[self.nodeid] = max(_WORST.get(self.nodeid, 0.0), err)
        self._record_property("worst_rel_err", self.worst)
        assert err <= tol, f"{what}: max relative error {err:.3g} > {tol:g}"
        return err


@pytest.fixture
def check(request, record_property):
    return Checker(request.node.nodeid, record_property)


_PASSED = set()


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
        _PASSED.add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Worst relative error per file and (with -v or MPSGRAD_PRINT_ERRORS=1) per test, over the
    tests that passed (expected failures and failures are reported by pytest itself)."""
    worst = collections.OrderedDict((k, v) for k, v in _WORST.items() if k in _PASSED)
    if not worst:
        return
    tr = terminalreporter
    tr.section("worst relative error (mpsgrad vs oracle), passing tests")
    per_file: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()
    for nodeid, err in worst.items():
        path = nodeid.split("::", 1)[0]
        if path not in per_file or err > per_file[path][0]:
            per_file[path] = (err, nodeid)
    for path, (err, nodeid) in per_file.items():
        tr.write_line(f"{path}: worst {err:.3e}  ({nodeid.split('::', 1)[1]})")
    if config.getoption("verbose") > 0 or os.environ.get("MPSGRAD_PRINT_ERRORS"):
        tr.write_line("")
        for nodeid, err in worst.items():
            tr.write_line(f"{err:.3e}  {nodeid}")


# ---------------------------------------------------------------------------------------------
# command-buffer helpers


def run(queue, fn):
    """Encode with fn(cb) into a fresh command buffer, commit, wait; return fn's result."""
    cb = queue.command_buffer()
    result = fn(cb)
    cb.commit()
    cb.wait_until_completed()
    return result


def run_completed(queue, fn):
    """run(), then an assertion that the command buffer completed (its error otherwise)."""
    buffers = []

    def encode(cb):
        buffers.append(cb)
        return fn(cb)

    result = run(queue, encode)
    assert buffers[0].status == m.CommandBufferStatus.COMPLETED, buffers[0].error
    return result


def rng(seed) -> np.random.Generator:
    """A reproducible generator; `seed` may be a string (hashed with crc32, stable across runs)."""
    if isinstance(seed, str):
        seed = zlib.crc32(seed.encode())
    return np.random.default_rng(seed)


def randn(gen: np.random.Generator, *shape) -> np.ndarray:
    """Standard normal float32 values (already rounded to half in a float16 run, so that images
    store them exactly)."""
    values = gen.standard_normal(shape).astype(np.float32)
    return half_round(values) if FLOAT16 else values


# ---------------------------------------------------------------------------------------------
# MPS padding arithmetic (spec §1.8.1), re-derived independently of the library


def c_div2(v: int) -> int:
    """Integer division by 2 truncating toward zero, as the header's C code."""
    return -((-v) // 2) if v < 0 else v // 2


def size_style(method: int) -> int:
    bits = method & 0x30
    return {0: -1, 16: 0, 32: 1}[bits]


def dest_size(S: int, s: int, k: int, style: int) -> int:
    """DestSize(S, s, k, style) = ceil((S + style*(k-1)) / s)."""
    n = S + style * (k - 1)
    return -(-n // s) if n > 0 else 0


def pad_offset(S: int, s: int, k: int, method: int, axis: str = "x") -> int:
    """The window-centre offset of MPSNNDefaultPadding along one axis (k = dilated extent)."""
    D = dest_size(S, s, k, size_style(method))
    extra = (D - 1) * s + k - S
    align = method & 3
    if align == 1:  # AlignTopLeft: all the extra padding on top/left
        left = extra
    elif align == 2:  # AlignBottomRight
        left = 0
    else:  # AlignCentered; the remainder bit of the axis sends the odd pixel right/bottom
        bit = 4 if axis == "x" else 8
        cp = 0 if method & bit else 1
        left = c_div2(extra + cp)
    return (k >> 1) - left


# ---------------------------------------------------------------------------------------------
# PyTorch reference of the MPS convolution


NEURONS = {
    # name: (mpsgrad type, a, b, torch function of (x, a, b))
    "none": (None, None, None, lambda x, a, b: x),
    "relu": (m.CNNNeuronType.RELU, 0.0, None, lambda x, a, b: F.relu(x)),
    "leaky_relu": (m.CNNNeuronType.RELU, 0.1, None, lambda x, a, b: F.leaky_relu(x, a)),
    "linear": (m.CNNNeuronType.LINEAR, 0.5, 0.25, lambda x, a, b: a * x + b),
    "sigmoid": (m.CNNNeuronType.SIGMOID, None, None, lambda x, a, b: torch.sigmoid(x)),
    "tanh": (m.CNNNeuronType.TANH, 1.5, 0.7, lambda x, a, b: a * torch.tanh(b * x)),
}


def neuron_descriptor(name: str):
    kind, a, b, _ = NEURONS[name]
    if kind is None:
        return None
    kwargs = {}
    if a is not None:
        kwargs["a"] = a
    if b is not None:
        kwargs["b"] = b
    return m.NNNeuronDescriptor(kind, **kwargs)


def apply_neuron(name: str, x: torch.Tensor) -> torch.Tensor:
    _, a, b, fn = NEURONS[name]
    return fn(x, a, b)


@dataclass
class ConvSpec:
    """Everything the reference needs about one MPS convolution."""

    kw: int
    kh: int
    cin: int
    cout: int
    sx: int = 1
    sy: int = 1
    dx: int = 1
    dy: int = 1
    groups: int = 1
    depthwise: bool = False
    neuron: str = "none"
    bias: bool = True

    @property
    def kw_dil(self) -> int:
        return (self.kw - 1) * self.dx + 1

    @property
    def kh_dil(self) -> int:
        return (self.kh - 1) * self.dy + 1

    @property
    def torch_groups(self) -> int:
        return self.cin if self.depthwise else self.groups

    @property
    def weight_shape(self):
        return (self.cout, self.kh, self.kw, self.cin // self.torch_groups)

    def descriptor(self):
        if self.depthwise:
            d = m.CNNDepthWiseConvolutionDescriptor(self.kw, self.kh, self.cin, self.cout)
        else:
            d = m.CNNConvolutionDescriptor(kernel_width=self.kw, kernel_height=self.kh,
                                           input_feature_channels=self.cin, output_feature_channels=self.cout)
            d.groups = self.groups
        d.stride_in_pixels_x, d.stride_in_pixels_y = self.sx, self.sy
        d.dilation_rate_x, d.dilation_rate_y = self.dx, self.dy
        nd = neuron_descriptor(self.neuron)
        if nd is not None:
            d.fused_neuron_descriptor = nd
        return d

    def random_parameters(self, gen):
        fan_in = self.kh * self.kw * (self.cin // self.torch_groups)
        w = (randn(gen, *self.weight_shape) / np.sqrt(fan_in)).astype(np.float32)
        b = randn(gen, self.cout) * 0.5 if self.bias else None
        return w, b


def _window_reads(X: torch.Tensor, left: int, top: int, span_w: int, span_h: int, edge: str) -> torch.Tensor:
    """X (N, C, H, W) read over rows [top, top+span_h) and columns [left, left+span_w), off-image
    reads being 0 (edge 'zero') or the nearest pixel ('clamp')."""
    H, W = X.shape[2], X.shape[3]
    pad_l, pad_t = max(0, -left), max(0, -top)
    pad_r, pad_b = max(0, left + span_w - W), max(0, top + span_h - H)
    if pad_l or pad_t or pad_r or pad_b:
        if edge == "clamp":
            X = F.pad(X, (pad_l, pad_r, pad_t, pad_b), mode="replicate")
        else:
            X = F.pad(X, (pad_l, pad_r, pad_t, pad_b))
    r0, c0 = top + pad_t, left + pad_l
    return X[:, :, r0:r0 + span_h, c0:c0 + span_w]


def conv_reference(spec: ConvSpec, x_nhwc: np.ndarray, w_ohwi: np.ndarray, b: Optional[np.ndarray],
                   offset=(0, 0), out_size=None, edge: str = "zero", e_nhwc: Optional[np.ndarray] = None):
    """The MPS convolution in float64 PyTorch.

    x_nhwc: (N, H, W, cin) -- the channels the convolution reads (already sliced).
    offset: the kernel's offset (window centre of the first output pixel).
    out_size: (width, height) of the region written (the clipped clip_rect); default: as many
      outputs as the padded read allows are NOT assumed -- pass it explicitly.
    e_nhwc: the incoming gradient (N, out_h, out_w, cout); when given, also returns the autograd
      gradients dx (N, H, W, cin), dw (OHWI), db.
    Returns dict(y=(N, out_h, out_w, cout) [, dx, dw, db]).
    """
    out_w, out_h = out_size
    X = torch.tensor(x_nhwc, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    Wt = torch.tensor(w_ohwi, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    # A zero bias when the convolution has none, so that db is dL/db all the same.
    Bt = torch.tensor(b if b is not None else np.zeros(spec.cout), dtype=torch.float64).requires_grad_(True)
    left = offset[0] - (spec.kw_dil >> 1)
    top = offset[1] - (spec.kh_dil >> 1)
    span_w = spec.sx * (out_w - 1) + spec.kw_dil
    span_h = spec.sy * (out_h - 1) + spec.kh_dil
    window = _window_reads(X, left, top, span_w, span_h, edge)
    pre = F.conv2d(window, Wt, Bt, stride=(spec.sy, spec.sx), dilation=(spec.dy, spec.dx), groups=spec.torch_groups)
    assert pre.shape[2:] == (out_h, out_w), (pre.shape, out_h, out_w)
    Y = apply_neuron(spec.neuron, pre)
    out = {"y": Y.detach().permute(0, 2, 3, 1).numpy()}
    if e_nhwc is not None:
        E = torch.tensor(e_nhwc, dtype=torch.float64).permute(0, 3, 1, 2)
        (Y * E).sum().backward()
        out["dx"] = X.grad.permute(0, 2, 3, 1).numpy()
        out["dw"] = Wt.grad.permute(0, 2, 3, 1).numpy()
        out["db"] = Bt.grad.numpy()
    return out


def persistent(kernel):
    """`kernel` with the persistent allocator, so the images its returning encodes make can be read
    after the command buffer completed (temporary ones cannot: docs/user_guide.md, "Reading results")."""
    kernel.destination_image_allocator = m.ImageAllocator.persistent()
    return kernel


def make_conv(device, spec: ConvSpec, w, b, persistent=True):
    ds = m.CNNConvolutionWeightsDataSource(spec.descriptor(), w, b)
    conv = m.CNNConvolution(device, ds)
    grad = m.CNNConvolutionGradient(device, ds)
    if persistent:
        conv.destination_image_allocator = m.ImageAllocator.persistent()
        grad.destination_image_allocator = m.ImageAllocator.persistent()
    return ds, conv, grad


# ---------------------------------------------------------------------------------------------
# Shared convolution cases, thread counts and clipped destinations

# MPSNNDefaultPadding's methods: windows centred, the odd padding pixel to the top left (both
# are the zero bits), a destination of the same size, of the valid windows only, or full.
_PM = m.PaddingMethod
SAME = int(_PM.ALIGN_CENTERED | _PM.ADD_REMAINDER_TO_TOP_LEFT | _PM.SIZE_SAME)
VALID = int(_PM.ALIGN_CENTERED | _PM.ADD_REMAINDER_TO_TOP_LEFT | _PM.SIZE_VALID_ONLY)
FULL = int(_PM.ALIGN_CENTERED | _PM.ADD_REMAINDER_TO_TOP_LEFT | _PM.SIZE_FULL)


@dataclass
class ConvCase:
    """One convolution run over a batch of `n` images of `hw` = (H, W) under the padding `method`.

    src_off / dst_off: the source / destination feature-channel offsets; the test file decides how
    many channels follow the slice when an offset is set. edge: "zero" or "clamp" (MPS's data
    gradient assumes zero edges, so clamp cases check the forward and the weight gradients only).
    """

    id: str
    spec: ConvSpec
    n: int
    hw: tuple
    method: int = SAME
    src_off: int = 0
    dst_off: int = 0
    edge: str = "zero"

    def geometry(self):
        """((width, height), (offset_x, offset_y)) of the destination the padding method gives."""
        spec, style = self.spec, size_style(self.method)
        H, W = self.hw
        size = (dest_size(W, spec.sx, spec.kw_dil, style), dest_size(H, spec.sy, spec.kh_dil, style))
        offset = (pad_offset(W, spec.sx, spec.kw_dil, self.method, "x"),
                  pad_offset(H, spec.sy, spec.kh_dil, self.method, "y"))
        return size, offset

    def kernels(self, device, w, b):
        """The case's CNNConvolution and CNNConvolutionGradient (make_conv) with its padding method,
        source and destination feature-channel offsets (the source slice is spec.cin channels
        long) and, for "clamp", the forward's CLAMP edge mode."""
        _, conv, grad = make_conv(device, self.spec, w, b)
        conv.padding = m.NNDefaultPadding(self.method)
        conv.source_feature_channel_offset = self.src_off
        if self.src_off:
            conv.source_feature_channel_max_count = self.spec.cin
        conv.destination_feature_channel_offset = self.dst_off
        if self.edge == "clamp":
            conv.edge_mode = m.ImageEdgeMode.CLAMP
        return conv, grad

    def inputs(self, channels_after_slice: int):
        """Random inputs drawn from a generator seeded by the id, and their oracle.

        Returns (x, e, w, b, ref): the sources (N, H, W, src_off + cin [+ channels_after_slice
        when src_off is set]), the incoming gradient of the destination, the weights and bias,
        and conv_reference's y, dx, dw, db for the channels the convolution reads.
        """
        spec, gen = self.spec, rng(self.id)
        H, W = self.hw
        x = randn(gen, self.n, H, W, self.src_off + spec.cin + (channels_after_slice if self.src_off else 0))
        w, b = spec.random_parameters(gen)
        (ow, oh), offset = self.geometry()
        e = randn(gen, self.n, oh, ow, spec.cout)
        ref = conv_reference(spec, x[..., self.src_off:self.src_off + spec.cin], w, b, offset=offset,
                             out_size=(ow, oh), edge=self.edge, e_nhwc=e)
        return x, e, w, b, ref


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def num_threads(request):
    """Runs the test with the CPU backend on one and on two threads, restoring the count after."""
    before = m.get_num_threads()
    m.set_num_threads(request.param)
    yield request.param
    m.set_num_threads(before)


@dataclass
class ClippedDestination:
    """A destination image filled with a sentinel, and the region (x, y, width, height) of it a
    kernel's clip rectangle lets it write: the clip rectangle within the image's bounds."""

    image: m.Image
    x: int
    y: int
    width: int
    height: int
    sentinel: float

    def check_written(self, check, expected, what="forward inside the clip rectangle"):
        """The region holds `expected` within `check`'s bound; every other value is the sentinel."""
        out = self.image.to_numpy()
        region = (slice(None), slice(self.y, self.y + self.height), slice(self.x, self.x + self.width))
        check(out[region], expected, what)
        outside = np.ones(out.shape, bool)
        outside[region] = False
        assert np.all(out[outside] == self.sentinel), "pixels outside the clip rectangle were written"


def clipped_destination(device, kernel, size, channels: int, clip=None, sentinel: float = -3.5) -> ClippedDestination:
    """A sentinel-filled destination of `size` = (height, width) and `channels`; with `clip` =
    ((x, y), (width, height)) also sets `kernel.clip_rect` (origin inside the image)."""
    height, width = size
    if clip is None:
        (cx, cy), (cw, ch) = (0, 0), (width, height)
    else:
        (cx, cy), (cw, ch) = clip
        kernel.clip_rect = ((cx, cy, 0), (cw, ch, 1))
    image = m.Image.from_numpy(np.full((height, width, channels), sentinel, np.float32), device)
    return ClippedDestination(image, cx, cy, min(cw, width - cx), min(ch, height - cy), sentinel)


# ---------------------------------------------------------------------------------------------
# Forward-then-gradient runs of the windowed families (pooling, local normalization, upsampling)


def random_like_result(gen: np.random.Generator, images: int):
    """An `incoming` for forward_and_gradient: standard normal values, `images` images of the
    forward result's size."""
    return lambda shape: randn(gen, images, *shape[1:])


def forward_and_gradient(device, queue, fwd, bwd, x, incoming):
    """The forward over the batch x (N, H, W, C) through the returning encode forms (padding
    policy, persistent results and states), then the gradient, configured from the states, of
    the incoming gradient incoming(shape) (shape: one result image's (1, H, W, C)), in one
    command buffer. Returns y, dx, the incoming gradient (NumPy) and the states."""
    fwd.destination_image_allocator = m.ImageAllocator.persistent()
    bwd.destination_image_allocator = m.ImageAllocator.persistent()
    xs = m.batch_from_numpy(x, device)
    cb = queue.command_buffer()
    ys, states = fwd.encode_batch(cb, xs, destination_state_is_temporary=False)
    g = incoming(ys[0].shape)
    dxs = bwd.encode_batch(cb, m.batch_from_numpy(g, device), xs, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return m.batch_to_numpy(ys), m.batch_to_numpy(dxs), g, states


SLICE_SENTINEL = -7.25  # what channel_slices_run's destinations hold outside what the kernels write
SLICE_CLIP = ((1, 2), (3, 4))  # its forward clip rectangle: (x, y), (width, height)


def channel_slices_run(device, queue, gen, fwd, bwd, x, read_channels: int, offset, result_shape):
    """One image x (1, H, W, C) through the forward and the gradient with feature-channel slices.

    The forward reads channels 4 .. 4 + read_channels of x with its windows at `offset`, writes
    them at channel 8 of a sentinel-filled result of `result_shape` (1, H, W, C) within the clip
    rectangle SLICE_CLIP, and records a temporary state; the gradient, configured from the state
    (its destination descriptor must be x's size), writes dX into a sentinel-filled image of x's
    shape. Returns the result, dX (both (H, W, C)) and the incoming gradient (result_shape, drawn
    from `gen` after the forward is encoded).
    """
    fwd.source_feature_channel_offset = 4
    fwd.source_feature_channel_max_count = read_channels
    fwd.destination_feature_channel_offset = 8
    fwd.offset = offset
    (cx, cy), (cw, ch) = SLICE_CLIP
    fwd.clip_rect = m.Region((cx, cy, 0), (cw, ch, 1))
    X = m.Image.from_numpy(x, device)
    Y = m.Image.from_numpy(np.full(result_shape, SLICE_SENTINEL, np.float32), device)
    cb = queue.command_buffer()
    state = fwd.temporary_result_state(cb, X)
    fwd.encode(cb, X, state, Y)
    g = randn(gen, *result_shape)
    G = m.Image.from_numpy(g, device)
    desc = bwd.destination_image_descriptor([G, X], [state])
    assert (desc.height, desc.width, desc.feature_channels) == x.shape[1:]
    dX = m.Image.from_numpy(np.full(x.shape, SLICE_SENTINEL, np.float32), device)
    bwd.encode(cb, G, X, state, dX)
    assert state.read_count == 0
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == m.CommandBufferStatus.COMPLETED
    return Y.to_numpy()[0], dX.to_numpy()[0], g


def check_channel_slices(check, y, dx, y_ref, dx_ref, read_channels: int):
    """channel_slices_run's result holds y_ref (one image) inside the clip rectangle at channels
    8 .. 8 + read_channels and the sentinel everywhere else; dX holds dx_ref at channels
    4 .. 4 + read_channels and the sentinel in the other channels."""
    (cx, cy), (cw, ch) = SLICE_CLIP
    written = (slice(cy, cy + ch), slice(cx, cx + cw), slice(8, 8 + read_channels))
    check(y[written], y_ref[0], "forward")
    outside = np.ones(y.shape, bool)
    outside[written] = False
    assert np.all(y[outside] == SLICE_SENTINEL), "the forward wrote outside its clip rectangle or channel slice"
    check(dx[..., 4:4 + read_channels], dx_ref[0], "gradient")
    assert np.all(dx[..., :4] == SLICE_SENTINEL) and np.all(dx[..., 4 + read_channels:] == SLICE_SENTINEL), \
        "the gradient wrote channels outside its slice"
