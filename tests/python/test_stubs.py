"""The type stubs (python/mpsgrad/_mpsgrad.pyi) cover every public name of the extension.

Regenerate them after changing the bindings (MPSGRAD_STUBGEN=1 leaves out the package's guards on
__new__/__init__ of the bound classes, so the stubs show the bound signatures):
    MPSGRAD_STUBGEN=1 pybind11-stubgen mpsgrad._mpsgrad -o python
"""
import pathlib
import re

import mpsgrad
from mpsgrad import _mpsgrad


def _stub_text():
    here = pathlib.Path(mpsgrad.__file__).parent / "_mpsgrad.pyi"
    if not here.exists():  # running against an installed wheel: fall back to the source tree
        here = pathlib.Path(__file__).resolve().parents[2] / "python" / "mpsgrad" / "_mpsgrad.pyi"
    return here.read_text()


def test_every_public_name_is_in_the_stubs():
    text = _stub_text()
    declared = set(re.findall(r"^(?:class|def)\s+(\w+)", text, flags=re.M))
    declared |= set(re.findall(r"^(\w+)\s*:", text, flags=re.M))
    public = {name for name in dir(_mpsgrad) if not name.startswith("_")}
    missing = sorted(public - declared)
    assert not missing, f"names missing from _mpsgrad.pyi (regenerate the stubs): {missing}"


def test_every_public_method_of_the_kernels_is_in_the_stubs():
    text = _stub_text()
    for cls_name in ("CNNConvolution", "CNNConvolutionGradient", "CNNKernel", "CNNGradientKernel", "Image"):
        cls = getattr(_mpsgrad, cls_name)
        match = re.search(rf"^class {cls_name}\b[^\n]*:\n(.*?)(?=^class |\Z)", text, flags=re.M | re.S)
        assert match, f"class {cls_name} is missing from _mpsgrad.pyi"
        body = match.group(1)
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member) and not isinstance(member, property):
                continue
            assert re.search(rf"\b{name}\b", body), f"{cls_name}.{name} is missing from _mpsgrad.pyi"
