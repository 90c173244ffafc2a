"""The registry of operation families and the context an operation runs in, shared by the fuzz
test's family modules (tests/fuzz/families_*.py) and its driver (tests/fuzz/api_fuzz.py).
"""
from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np


# ---------------------------------------------------------------------------------------------
# the registry and the context an operation runs in

FAMILIES: Dict[str, Callable] = {}
# Run once by each worker before its first case (its start-up time is not charged to a case), e.g.
# the import of torch that mpsgrad.distributed needs.
WORKER_SETUP: List[Callable] = []


def family(name: str):
    """Registers an operation generator: fn(r: random.Random, ctx: Context) -> None."""

    def register(fn):
        FAMILIES[name] = fn
        return fn

    return register


class InvalidAccepted(AssertionError):
    pass


class WrongResult(AssertionError):
    pass


class WrongExceptionType(AssertionError):
    """An allowed exception type, but not the one the docs name (e.g. ValueError for SerializationError)."""


# Generator parts written to reach the defects of issues 28 and 29 (all fixed; each has a regression
# test): MPSGRAD_FUZZ_SKIP="part,part" (or "known" for all of them) leaves parts out of a run, to
# bisect a failure, without changing any other case of the seed (docs/verification.md).
KNOWN_DEFECT_PARTS = {
    "edges.int32_window": "(a) convolution-family windows at and beyond +-2**31 (offsets, clip, kernel offsets)",
    "edges.huge_window": "(a) pooling / spatial / LCN windows up to 2**20",
    "edges.range_starts": "(a) CNNConcatenation.range_starts overflow",
    "edges.spatial_mean_origin": "(a) NNReductionSpatialMean.clip_rect_source origin near -2**63",
    "runtime.callback_waits": "(b) a host callback waiting on its own command buffer",
    "runtime.gradient_returning": "(b) returning encode forms of gradient kernels",
    "batch_normalization.batch": "(b) CNNBatchNormalization dropping images 1..N-1 of a batch",
    "distributed.bad_arguments": "(b) mpsgrad.distributed raising RuntimeError for wrong arguments",
    "serialization.normalization": "(b) hostile normalization blobs raising ValueError, not SerializationError",
    "graph.filter_sizes": "(b) graph pooling (and upsampling, LRN) nodes validating their sizes late",
    "loss.wide_labels": "(c) losses with labels wider than the source",
    "padding.policies": "(c) padding policies",
}


def skipped_parts() -> set:
    parts = {p.strip() for p in os.environ.get("MPSGRAD_FUZZ_SKIP", "").split(",") if p.strip()}
    if "known" in parts:
        parts |= set(KNOWN_DEFECT_PARTS)
    return parts


SKIPPED = skipped_parts()


class _PersistentKernel:
    """A kernel class whose instances allocate the images of their returning encodes persistently."""

    def __init__(self, cls, module):
        self._cls, self._module = cls, module

    def __call__(self, *args, **kwargs):
        kernel = self._cls(*args, **kwargs)
        kernel.destination_image_allocator = self._module.ImageAllocator.persistent()
        return kernel

    def __getattr__(self, name):  # static methods (from_bytes, ...) and attributes of the class
        return getattr(self._cls, name)


class PersistentResults:
    """The mpsgrad module as the families see it (Context.m): the same, except that every concrete
    kernel class makes kernels with the persistent destination_image_allocator. The families check
    results after their command buffer completed, and temporary images (the kernels' default, as in
    MPS) cannot be read then (docs/user_guide.md "Reading results"): without this every such check
    would end in an allowed ValueError instead of comparing values."""

    def __init__(self, module):
        self._module = module
        self.module = module  # the real module, for the kernels' default (temporary) results
        self._kernels = {}

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if (isinstance(value, type) and issubclass(value, self._module.Kernel)
                and hasattr(value, "destination_image_allocator")):
            return self._kernels.setdefault(name, _PersistentKernel(value, self._module))
        return value


@dataclass
class Context:
    m: object                 # the mpsgrad module (a PersistentResults in the driver)
    device: object
    queue: object
    invalid: List[str] = field(default_factory=list)   # definitely invalid arguments of the current call
    calls: int = 0                                     # calls started (start_call) in this case
    step: str = ""                                     # the family running

    def reach(self, r: random.Random, part: str, p: float) -> bool:
        """True with probability p, unless `part` is skipped (MPSGRAD_FUZZ_SKIP); the draw is always
        made, so skipping a part leaves every other case of a seed unchanged."""
        return r.random() < p and part not in SKIPPED

    def rejects(self, label: str, fn, *args, expected=None, **kwargs):
        """Calls fn, which a documented rule says must fail: returning normally is InvalidAccepted; an
        allowed exception other than `expected` (a class) is WrongExceptionType. Returns the exception."""
        self.calls += 1
        m = self.m
        allowed = (ValueError, TypeError, IndexError, MemoryError, m.CommandBufferError)
        try:
            fn(*args, **kwargs)
        except allowed as e:
            if expected is not None and not isinstance(e, expected):
                names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
                raise WrongExceptionType(f"{label}: raised {type(e).__name__} ({e}), documented: {names}")
            return e
        raise InvalidAccepted(f"{label} accepted")

    def bad(self, r: random.Random, good, bad_values, p: float = 0.15, what: str = "argument"):
        """Returns `good`, or with probability p one of `bad_values` (noted as definitely invalid)."""
        if r.random() < p:
            value = r.choice(bad_values)
            self.invalid.append(f"{what}={value!r}")
            return value
        return good

    def start_call(self):
        self.calls += 1
        self.invalid = []

    def expect_rejected_if_invalid(self, label: str):
        """Called after a call returned normally: it must not have had a definitely invalid argument."""
        if self.invalid:
            raise InvalidAccepted(f"{label} accepted invalid argument(s): {', '.join(self.invalid)}")


WRONG_TYPES = ["x", 1.5, None, [1], object()]
HUGE_INTS = [2**31, 2**32, 2**40, 2**62, 2**63, 2**64 - 1, 2**64, -(2**63) - 1]
# Values at the documented edges: int32 (offsets, clip rectangles, kernel offsets are narrowed to int32:
# outside it is a ValueError, inside it must work or be refused, never wrap) and int64.
INT32_EDGES = [2**31 - 1, 2**31 - 2, -(2**31), -(2**31) + 1, 2**30, -(2**30)]
INT32_OUTSIDE = [2**31, -(2**31) - 1, 2**32, 2**32 + 1]
INT64_EDGES = [2**63 - 1, -(2**63), 2**62, -(2**62)]
INT64_OUTSIDE = [2**63, -(2**63) - 1, 2**64 - 1, 2**64]
SPECIAL_FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 1e38, -1e38, 1e-45]


def check_close(actual, expected, what: str, tol: float = 1e-4):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise WrongResult(f"{what}: shape {actual.shape} != reference {expected.shape}")
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    err = float(np.max(np.abs(actual - expected))) / scale if expected.size else 0.0
    if not err <= tol:
        raise WrongResult(f"{what}: relative error {err:.3g} > {tol}")


def random_array(r: random.Random, *shape) -> np.ndarray:
    gen = np.random.default_rng(r.getrandbits(32))
    return gen.standard_normal(shape).astype(np.float32)


def poison(r: random.Random, array: np.ndarray, p: float = 0.1) -> np.ndarray:
    """With probability p, one element of a copy of `array` set to NaN, +inf or -inf."""
    if array.size and r.random() < p:
        array = array.copy()
        array.flat[r.randrange(array.size)] = r.choice([np.nan, np.inf, -np.inf])
    return array


def check_finite(actual, what: str):
    """Results that the docs say are finite for finite inputs must be."""
    if not np.all(np.isfinite(np.asarray(actual, np.float64))):
        raise WrongResult(f"{what}: non-finite value for finite inputs")


def check_nan_where(actual, expected, what: str):
    """NaN/inf propagate as the reference says: the non-finite pattern matches and the rest is close."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise WrongResult(f"{what}: shape {actual.shape} != reference {expected.shape}")
    if not np.array_equal(np.isnan(actual), np.isnan(expected)):
        raise WrongResult(f"{what}: NaN at {int(np.isnan(actual).sum())} places, reference "
                          f"{int(np.isnan(expected).sum())}")
    finite = np.isfinite(expected)
    if not np.array_equal(actual[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)]):
        raise WrongResult(f"{what}: infinities differ from the reference")
    check_close(np.where(finite, actual, 0), np.where(finite, expected, 0), what)


def same_bytes(a: bytes, b: bytes, what: str):
    if a != b:
        raise WrongResult(f"{what}: {len(a)} bytes differ from {len(b)} bytes")


def small_image(r: random.Random, ctx: "Context", h=None, w=None, c=None, n: int = 1):
    """(array (n, h, w, c), Image) with random sizes up to 5x5x8 unless given."""
    h = h or r.randint(1, 5)
    w = w or r.randint(1, 5)
    c = c or r.randint(1, 8)
    a = random_array(r, n, h, w, c)
    return a, ctx.m.Image.from_numpy(a if n > 1 else a[0], ctx.device)


def image_format(r: random.Random, m):
    """FLOAT16 for about a third of the images (docs/float16.md), UNORM8 and UNORM16 for about a
    twelfth each (docs/storage_formats.md), else FLOAT32."""
    x = r.random()
    f = m.ImageFeatureChannelFormat
    return f.FLOAT16 if x < 0.3 else f.UNORM8 if x < 0.38 else f.UNORM16 if x < 0.46 else f.FLOAT32


def unorm_maximum(fmt, m):
    """255 for UNORM8, 65535 for UNORM16, None for the float formats."""
    return {m.ImageFeatureChannelFormat.UNORM8: 255, m.ImageFeatureChannelFormat.UNORM16: 65535}.get(fmt)


def as_stored(array: np.ndarray, fmt, m) -> np.ndarray:
    """The values an image of format `fmt` holds after writing `array` (half rounding for FLOAT16;
    for UNORM, clamping to [0, 1] and rounding to the nearest code, ties to even, NaN to 0)."""
    if fmt == m.ImageFeatureChannelFormat.FLOAT16:
        return np.asarray(array, np.float32).astype(np.float16).astype(np.float32)
    maximum = unorm_maximum(fmt, m)
    if maximum:
        v = np.asarray(array, np.float32)
        with np.errstate(invalid="ignore"):
            codes = np.rint(np.where(np.isnan(v), 0, np.clip(v, 0, 1)).astype(np.float32) * np.float32(maximum))
        return codes.astype(np.float32) / np.float32(maximum)
    return array


def values_of(array: np.ndarray, fmt, m) -> np.ndarray:
    """The values an array read from an image of format `fmt` stands for (UNORM: codes / maximum)."""
    maximum = unorm_maximum(fmt, m)
    return np.asarray(array).astype(np.float32) / np.float32(maximum) if maximum else array


def format_tol(fmt, m, tol: float = 1e-4) -> float:
    """check_close's tolerance for a result stored in `fmt` against a reference passed through
    as_stored: FLOAT16_TOL, one UNORM code (the float32 kernel and the float64 reference may round
    to neighbouring codes), else `tol`."""
    if fmt == m.ImageFeatureChannelFormat.FLOAT16:
        return FLOAT16_TOL
    maximum = unorm_maximum(fmt, m)
    return max(tol, 1.01 / maximum) if maximum else tol


# One rounding of the result to half (2**-11 relative) plus the rounding of the inputs the reference
# already sees: 4e-3 of the largest value leaves room for both.
FLOAT16_TOL = 4e-3


def forward_and_gradient_into(ctx: Context, forward, gradient, x_arr, g_arr, offset):
    """Encodes forward (ZERO edges, `offset`) into a destination of g_arr's size through
    result_state, then gradient's returning form; runs them. Returns (Y, dX, state)."""
    m = ctx.m
    ho, wo, c = g_arr.shape
    forward.edge_mode = m.ImageEdgeMode.ZERO
    forward.offset = (offset[0], offset[1], 0)
    x = m.Image.from_numpy(x_arr, ctx.device)
    y = m.Image(ctx.device, m.ImageDescriptor(wo, ho, c))
    ctx.start_call()
    state = forward.result_state(x, None, y)
    cb = ctx.queue.command_buffer()
    forward.encode(cb, x, state, y)
    dx = gradient.encode(cb, m.Image.from_numpy(g_arr, ctx.device), x, state)
    run(ctx, cb)
    return y, dx, state


def run(ctx: Context, cb):
    cb.commit()
    cb.wait_until_completed()
