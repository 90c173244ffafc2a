"""mpsgrad: an open implementation of Apple's MetalPerformanceShaders CNN training API.

Kernels encode into command buffers exactly as in MPS; see docs/user_guide.md and the
porting guide docs/porting.md for the mapping from Objective-C/Swift selectors.
"""
from __future__ import annotations

import enum as _enum
import os as _os

import numpy as _np

import sys as _sys

if _sys.platform.startswith("linux"):
    # The CPU backend's BLAS is OpenBLAS from the scipy-openblas32 wheel (a declared dependency).
    # Importing it loads libscipy_openblas.so into the process, so the extension finds it
    # whatever its rpath says (e.g. the wheels sit in different site-packages directories).
    try:
        import scipy_openblas32 as _scipy_openblas32  # noqa: F401
    except ImportError:  # the extension may still find the library through its rpath
        _scipy_openblas32 = None

try:
    from . import _mpsgrad
except ImportError as _error:
    if "scipy_openblas" in str(_error):
        raise ImportError(
            "mpsgrad's CPU backend needs OpenBLAS from the scipy-openblas32 package: "
            "python -m pip install scipy-openblas32") from _error
    raise
from ._mpsgrad import *  # noqa: F401,F403  (the bound classes, enums and functions)
from ._mpsgrad import CommandBufferError, Image
from .profiler import Profile, ProfileEvent, profile
from ._protocols import Handle, ImageSizeEncodingState, NNGramMatrixCallback, NNLossCallback, NNTrainableNode

__version__ = "0.1.0"


class PaddingMethod(_enum.IntFlag):
    """MPSNNPaddingMethod bits (exact values)."""

    ALIGN_CENTERED = 0
    ALIGN_TOP_LEFT = 1
    ALIGN_BOTTOM_RIGHT = 2
    ALIGN_MASK = 3
    ADD_REMAINDER_TO_TOP_LEFT = 0 << 2
    ADD_REMAINDER_TO_TOP_RIGHT = 1 << 2
    ADD_REMAINDER_TO_BOTTOM_LEFT = 2 << 2
    ADD_REMAINDER_TO_BOTTOM_RIGHT = 3 << 2
    ADD_REMAINDER_TO_MASK = 3 << 2
    SIZE_VALID_ONLY = 0
    SIZE_SAME = 1 << 4
    SIZE_FULL = 2 << 4
    SIZE_RESERVED = 3 << 4
    SIZE_MASK = 0x7F0
    CUSTOM_WHITELIST_FOR_NODE_FUSION = 1 << 13
    CUSTOM = 1 << 14
    EXCLUDE_EDGES = 1 << 15

    # The TensorFlow "SAME" policy: ADD_REMAINDER_TO_BOTTOM_RIGHT | ALIGN_CENTERED | SIZE_SAME = 28.
    TENSORFLOW_SAME = (3 << 2) | (1 << 4)


class KernelOptions(_enum.IntFlag):
    """MPSKernelOptions bits (exact values)."""

    NONE = 0
    SKIP_API_VALIDATION = 1 << 0
    ALLOW_REDUCED_PRECISION = 1 << 1
    DISABLE_INTERNAL_TILING = 1 << 2
    INSERT_DEBUG_GROUPS = 1 << 3
    VERBOSE = 1 << 4


def _image_dlpack(self, stream=None, **kwargs):
    """DLPack export (zero copy): a (number_of_images, height, width, channels) tensor of the storage's
    dtype (float32, float16 for FLOAT16, uint8 for UNORM8, uint16 for UNORM16)."""
    return self._numpy_view().__dlpack__(**kwargs)


def _image_dlpack_device(self):
    # Image storage is host-visible (unified memory on Apple GPUs), so consumers see it as CPU memory.
    return (1, 0)


def _image_from_dlpack(obj, device=None):
    """Image from any DLPack producer (NumPy, PyTorch, ...): zero copy for C-contiguous float32, float16,
    uint8 (UNORM8) or uint16 (UNORM16) (n, height, width, channels) CPU tensors with channels a multiple of 4 on the CPU device,
    otherwise a copy. 3-D (height, width, channels) input gives one image."""
    try:
        array = _np.from_dlpack(obj)
    except (AttributeError, TypeError) as e:
        raise TypeError(f"obj: expected an object supporting DLPack (__dlpack__), got {type(obj).__name__}") from e
    except (BufferError, RuntimeError, ValueError) as e:
        raise ValueError(f"obj: the DLPack tensor cannot be imported: {e}") from e
    if array.ndim == 3:
        array = array[_np.newaxis]
    if array.ndim != 4:
        raise ValueError(f"obj: expected a (height, width, channels) or (n, height, width, channels) tensor, "
                         f"got {array.ndim} dimension(s)")
    return Image._from_array_zero_copy(array, device)


def _image_array(self, dtype=None, copy=None):
    result = self.to_numpy()
    return result if dtype is None else result.astype(dtype)


Image.__dlpack__ = _image_dlpack
Image.__dlpack_device__ = _image_dlpack_device
Image.from_dlpack = staticmethod(_image_from_dlpack)
Image.__array__ = _image_array


def batch_to_numpy(batch):
    """Stack a list of images into one array (n, height, width, channels) with NumPy's type promotion of
    their dtypes (float32, float16 if every image is FLOAT16, uint8 / uint16 if every image is UNORM8 /
    UNORM16: the stored codes). UNORM codes and float values do not mix: a batch of UNORM images and
    images of another format is a TypeError (docs/storage_formats.md)."""
    arrays = [image.to_numpy() for image in batch]
    codes = {a.dtype for a in arrays if a.dtype.kind == "u"}
    if codes and len({a.dtype for a in arrays}) > 1:
        names = sorted({str(image.feature_channel_format).rsplit(".", 1)[-1] for image in batch})
        raise TypeError(f"batch: images of formats {', '.join(names)} cannot be stacked: UNORM images give their "
                        "stored codes, the others their values")
    return _np.concatenate(arrays, axis=0)


def from_dlpack(obj, device=None):
    """Same as Image.from_dlpack."""
    return _image_from_dlpack(obj, device)


# ---- guards on every bound class ----------------------------------------------------------------
# Cls.__new__(Cls) alone would leave a bound object without its C++ part (pybind11 would then read
# uninitialized memory), and pickle protocols 0 and 1 make Python build objects that way (they
# abort the process). So the bound classes construct in __new__, and pickling without support is a
# TypeError at every protocol.


def _restore_enum(cls, value):
    return cls(value)


# ---- unknown keyword arguments ------------------------------------------------------------------
# pybind11 answers an unknown keyword with "incompatible function arguments", every overload's
# signature and the repr of every argument (kilobytes for an image or a data source). Every bound
# constructor, method and function goes through _call_bound, which turns that case into one line
# naming the keyword and the accepted ones. The accepted names come from the signatures pybind11
# writes at the top of each docstring (one per overload), read once per function.

_accepted_keywords_cache = {}


def _parameter_names(text):
    """The parameter names of a signature's text after its '(' (up to the matching ')'), or None."""
    names, depth, current = [], 0, ""
    for char in text:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            if depth == 0:
                names.append(current)
                return [n.split(":")[0].split("=")[0].strip() for n in names if n.strip()]
            depth -= 1
        elif char == "," and depth == 0:
            names.append(current)
            current = ""
            continue
        current += char
    return None


def _accepted_keywords(raw, name):
    """The keyword names `raw` (a bound function) accepts over all its overloads; None for any."""
    key = id(raw)
    if key not in _accepted_keywords_cache:
        accepted = []
        for line in (getattr(raw, "__doc__", None) or "").splitlines():
            line = line.strip()
            head, _, rest = line.partition(". ")
            if head.isdigit():
                line = rest
            if not line.startswith(name + "("):
                continue
            params = _parameter_names(line[len(name) + 1:])
            if params is None or params == ["*args", "**kwargs"]:
                continue  # the "Overloaded function." header
            if any(p.startswith("**") for p in params):
                accepted = None
                break
            accepted += [p for p in params if p not in ("self", "cls") and not p.startswith("*") and p not in accepted]
        _accepted_keywords_cache[key] = (raw, accepted)  # raw kept alive so its id stays unique
    return _accepted_keywords_cache[key][1]


def _call_bound(raw, name, owner, args, kwargs):
    try:
        return raw(*args, **kwargs)
    except TypeError as error:
        if not kwargs or "incompatible" not in str(error):
            raise
        accepted = _accepted_keywords(raw, name)
        unknown = [k for k in kwargs if accepted is not None and k not in accepted]
        if not unknown:
            raise
        listed = ", ".join(accepted) if accepted else "none"
        where = owner if name == "__init__" else f"{owner}.{name}" if owner else name
        raise TypeError(f"{where}() got an unexpected keyword argument '{unknown[0]}'; "
                        f"accepted keyword arguments: {listed}") from None


def _forget_half_built(traceback):
    """Clears the locals of the finished _call_bound frames of `traceback`: their `args` hold the
    object whose constructor raised, which has no valid C++ part (its methods, repr included, would
    read freed memory), and a traceback keeps frames alive (pytest reprs their locals)."""
    while traceback is not None:
        if traceback.tb_frame.f_code is _call_bound.__code__:
            traceback.tb_frame.clear()
        traceback = traceback.tb_next


def _wrap_method(raw, name, cls):
    def method(self, *args, **kwargs):
        return _call_bound(raw, name, type(self).__name__, (self,) + args, kwargs)
    method.__name__ = name
    method.__qualname__ = f"{cls.__name__}.{name}"
    method.__doc__ = raw.__doc__
    return method


def _wrap_classmethod(raw, name, cls):
    def method(klass, *args, **kwargs):
        return _call_bound(raw, name, klass.__name__, (klass,) + args, kwargs)
    method.__name__ = name
    method.__qualname__ = f"{cls.__name__}.{name}"
    method.__doc__ = raw.__doc__
    return method


def _wrap_function(raw, name, owner):
    def function(*args, **kwargs):
        return _call_bound(raw, name, owner, args, kwargs)
    function.__name__ = name
    function.__qualname__ = f"{owner}.{name}" if owner else name
    function.__doc__ = raw.__doc__
    function.__module__ = __name__
    return function


def _wrap_public_methods(cls):
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if type(member).__name__ == "instancemethod":
            setattr(cls, name, _wrap_method(member.__func__, name, cls))
        elif isinstance(member, staticmethod) and type(member.__func__).__name__ == "builtin_function_or_method":
            setattr(cls, name, staticmethod(_wrap_function(member.__func__, name, cls.__name__)))
        elif isinstance(member, classmethod) and type(member.__func__).__name__ == "builtin_function_or_method":
            setattr(cls, name, classmethod(_wrap_classmethod(member.__func__, name, cls)))


def _guard_class(cls):
    raw_new = cls.__new__
    raw_init = cls.__init__
    is_enum = hasattr(cls, "__members__")

    def __new__(klass, *args, **kwargs):
        obj = raw_new(klass)
        if klass is cls:
            # Direct instances are constructed here, so `Cls.__new__(Cls)` is a complete object or a
            # TypeError. Python subclasses construct through their own __init__ (pybind11 checks it).
            try:
                _call_bound(raw_init, "__init__", cls.__name__, (obj,) + args, kwargs)
            except BaseException as error:
                # The traceback keeps this frame's locals, and a bound object whose constructor
                # raised has no valid C++ part (its methods would read freed memory): let it go.
                del obj
                _forget_half_built(error.__traceback__)
                raise
            if is_enum and int(obj) not in {int(v) for v in cls.__members__.values()}:
                raise ValueError(f"{cls.__name__}: {int(obj)} is not one of its values "
                                 f"{sorted(int(v) for v in cls.__members__.values())}")
        return obj

    def __init__(self, *args, **kwargs):
        if not _mpsgrad._is_initialized(self):
            try:
                _call_bound(raw_init, "__init__", type(self).__name__, (self,) + args, kwargs)
            except BaseException as error:
                del self  # as in __new__: no traceback keeps the half-built object
                _forget_half_built(error.__traceback__)
                raise

    def __reduce_ex__(self, protocol):
        if is_enum:
            return _restore_enum, (type(self), int(self))
        if type(self).__reduce__ is not object.__reduce__:
            return self.__reduce__()  # the class's own pickle support
        if protocol < 2:
            raise TypeError(f"cannot pickle '{type(self).__qualname__}' object")
        return object.__reduce_ex__(self, protocol)

    __init__.__doc__ = raw_init.__doc__
    cls.__new__ = __new__
    cls.__init__ = __init__
    if "__reduce_ex__" not in cls.__dict__:
        cls.__reduce_ex__ = __reduce_ex__


# MPSGRAD_STUBGEN=1 is for regenerating the type stubs only (they show the bound signatures, not
# these wrappers); see tests/python/test_stubs.py.
if not _os.environ.get("MPSGRAD_STUBGEN"):
    for _value in list(vars(_mpsgrad).values()):
        if isinstance(_value, type) and type(_value).__name__ == "pybind11_type":
            _guard_class(_value)
            _wrap_public_methods(_value)
    for _name, _value in list(vars(_mpsgrad).items()):
        if not _name.startswith("_") and type(_value).__name__ == "builtin_function_or_method":
            globals()[_name] = _wrap_function(_value, _name, "")
    del _name, _value
