"""The kernel variants the Metal backend can request: every (kernel, function-constant values)
pipeline the host encoders in cpp/mpsgrad/backend/metal/*.cpp may build.

Which constants a kernel reads comes from msl2cpp.py's own parse of its .metal file (the same
list the translation registers and the fake device records). Their values come from DOMAINS, and
the combinations the host can never ask for are removed by UNREACHABLE, which restates the
encoders' rules (keep the two in sync; a variant dispatched at run time that this module does not
list is reported as an error by metal_coverage.py, so a host change that widens the space cannot
go unnoticed).
"""
import itertools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "shim"))
import msl2cpp  # noqa: E402

BOOL = (0, 1)
NEURON_TYPES = tuple(range(16))      # metal/common_params.h: kNeuronCount
ARITHMETIC_OPS = tuple(range(4))     # metal/arithmetic_params.h: ArithmeticOpCode
COMPARISONS = tuple(range(6))        # CompareTypeCode
CLAMP_MODES = tuple(range(3))        # ArithmeticClampStateCode
POOLING_MODES = tuple(range(3))      # metal/pooling_params.h: PoolingModeCode (max, average, L2)
UPSAMPLING_MODES = tuple(range(2))   # metal/upsampling_params.h: UpsamplingModeCode
NORMALIZATION_KINDS = tuple(range(3))  # metal/normalization_params.h: NormalizationKindCode

# Values per (file stem, constant name); unlisted constants are bools.
DOMAINS = {
    ("convolution", "kNeuronType"): NEURON_TYPES,
    ("neuron", "kNeuronType"): NEURON_TYPES,
    ("arithmetic", "kStateMode"): CLAMP_MODES,
    ("pooling", "kPoolingMode"): POOLING_MODES,
    ("upsampling", "kUpsamplingMode"): UPSAMPLING_MODES,
    ("normalization", "kNormalizationKind"): NORMALIZATION_KINDS,
}


def _arithmetic_op_domain(kernel):
    return COMPARISONS if kernel == "compare_forward" else ARITHMETIC_OPS


def _unreachable(kernel, v):
    """True for combinations no host encoder requests (see the encoder named)."""
    if kernel == "compare_forward":
        # metal_arithmetic.cpp encodeCompareForward: no clamp state.
        return v.get("kStateMode", 0) != 0 or v.get("kAlignedState", 0) != 0
    if kernel == "arithmetic_forward":
        return v["kAlignedState"] and v["kStateMode"] == 0
    if kernel.startswith("arithmetic_gradient"):
        op, second = v["kOp"], v["kForSecondary"]
        need_x = op in (2, 3) and second          # multiply/divide, gradient for the secondary
        need_y = (op == 2 and not second) or op == 3
        return ((v["kAlignedPrimary"] and not need_x) or (v["kAlignedSecondary"] and not need_y)
                or (v["kAlignedState"] and v["kStateMode"] == 0))
    if kernel == "pooling_gradient":
        # metal_pooling.cpp encodePoolingGradient: average pooling binds no source, so its
        # kAlignedSource is always false (max and L2 set it from the source's alignment).
        return v["kPoolingMode"] == 1 and v["kAlignedSource"] != 0
    # pooling_forward, upsampling_*, dropout_apply: every mode and every alignment mix is
    # reachable (each binding's flag depends on its own offset; the encoders share only the
    # channel count's multiple-of-4 test between bindings). The batch normalization kernels read
    # no function constants: one variant each (metal_batch_normalization.cpp passes none); so do
    # the group normalization kernels (metal_group_normalization.cpp, instance normalization too)
    # and the YOLO loss kernels yolo_prepare / yolo_finish (metal_yolo_loss.cpp; dispatched by
    # tests/cpp/test_metal_variants_yolo_loss.cpp).
    return False


def kernel_constants(metal_dir):
    """{kernel: (file stem, [constant names])} from msl2cpp's parse of metal_dir/*.metal."""
    out = {}
    for name in sorted(os.listdir(metal_dir)):
        if not name.endswith(".metal"):
            continue
        path = os.path.join(metal_dir, name)
        with open(path, encoding="utf-8") as f:
            _, kernels, _ = msl2cpp.translate(path, f.read(), "metal/" + name, [metal_dir])
        for k in kernels:
            out[k.host_name] = (name[:-len(".metal")], [c[0] for c in k.constants])
    return out


def variant_key(kernel, values):
    """The text form the fake device logs: kernel TAB name=value,... (constants sorted by name,
    which is msl2cpp's order)."""
    return kernel + "\t" + ",".join("%s=%d" % (n, values[n]) for n in sorted(values))


def all_variants(metal_dir):
    """Every variant key the host can request."""
    keys = set()
    for kernel, (stem, names) in kernel_constants(metal_dir).items():
        domains = []
        for n in names:
            if n == "kOp":
                domains.append(_arithmetic_op_domain(kernel))
            else:
                domains.append(DOMAINS.get((stem, n), BOOL))
        for combo in itertools.product(*domains):
            values = dict(zip(names, combo))
            if not _unreachable(kernel, values):
                keys.add(variant_key(kernel, values))
    return keys
