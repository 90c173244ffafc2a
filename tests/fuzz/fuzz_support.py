"""The registry of operation families and the context an operation runs in, shared by the fuzz
test's family modules (tests/fuzz/families_*.py) and its driver (tests/fuzz/api_fuzz.py).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np


# ---------------------------------------------------------------------------------------------
# the registry and the context an operation runs in

FAMILIES: Dict[str, Callable] = {}


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


@dataclass
class Context:
    m: object                 # the mpsgrad module
    device: object
    queue: object
    invalid: List[str] = field(default_factory=list)   # definitely invalid arguments of the current call

    def bad(self, r: random.Random, good, bad_values, p: float = 0.15, what: str = "argument"):
        """Returns `good`, or with probability p one of `bad_values` (noted as definitely invalid)."""
        if r.random() < p:
            value = r.choice(bad_values)
            self.invalid.append(f"{what}={value!r}")
            return value
        return good

    def start_call(self):
        self.invalid = []

    def expect_rejected_if_invalid(self, label: str):
        """Called after a call returned normally: it must not have had a definitely invalid argument."""
        if self.invalid:
            raise InvalidAccepted(f"{label} accepted invalid argument(s): {', '.join(self.invalid)}")


WRONG_TYPES = ["x", 1.5, None, [1], object()]
HUGE_INTS = [2**31, 2**32, 2**40, 2**62, 2**63, 2**64 - 1, 2**64, -(2**63) - 1]


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


def image_format(r: random.Random, m):
    """FLOAT16 for about a third of the images (docs/float16.md), else FLOAT32."""
    return m.ImageFeatureChannelFormat.FLOAT16 if r.random() < 0.3 else m.ImageFeatureChannelFormat.FLOAT32


def as_stored(array: np.ndarray, fmt, m) -> np.ndarray:
    """The values an image of format `fmt` holds after writing `array` (half rounding for FLOAT16)."""
    if fmt == m.ImageFeatureChannelFormat.FLOAT16:
        return np.asarray(array, np.float32).astype(np.float16).astype(np.float32)
    return array


# One rounding of the result to half (2**-11 relative) plus the rounding of the inputs the reference
# already sees: 4e-3 of the largest value leaves room for both.
FLOAT16_TOL = 4e-3


def run(ctx: Context, cb):
    cb.commit()
    cb.wait_until_completed()
