#!/usr/bin/env python3
"""Plants realistic bugs in the project's Metal kernels, one at a time, and checks that the tests
report each of them.

Each bug is a one-line change of a metal/*.metal file that the tests of shapes too small or data
too uniform used to let through (issue 9). The mutated file is translated by msl2cpp.py straight
into the build's generated source of that kernel file (the source tree is never modified), the
C++ test binary is rebuilt and run with the tests that must catch the bug, and the original
translation is put back afterwards, whatever happens.

Usage: planted_bugs.py --build BUILD [--source-root ROOT]
"""
import argparse
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "shim"))
import msl2cpp  # noqa: E402

# (file, original line, planted line, gtest filter that must fail, what it models)
BUGS = [
    ("metal/neuron_prelu.metal",
     "    const float4 s = simd_sum(partial);",
     "    const float4 s = simd_sum(lane == 31 ? float4(0.0f) : partial);",
     "MetalVariants.PReLUSlopeGradient*",
     "lane 31 dropped from PReLU's slope-gradient simd_sum"),
    ("metal/softmax.metal",
     "    mx = simd_max(mx);",
     "    mx = simd_broadcast(mx, 0);",
     "MetalVariants.SoftmaxDominantLogitOnEveryLane",
     "softmax's max taken from lane 0 only"),
]


def generated_path(build, display):
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in display)
    found = glob.glob(os.path.join(build, "**", "*.msl", stem + ".cpp"), recursive=True)
    if len(found) != 1:
        sys.exit("planted_bugs: cannot find the translation of %s in %s" % (display, build))
    return found[0]


def translate(path, text, display, out):
    code, _, _ = msl2cpp.translate(path, text, display, [os.path.dirname(path)])
    with open(out, "w", encoding="utf-8") as f:
        f.write(code)


def build_tests(build):
    r = subprocess.run(["cmake", "--build", build, "--target", "mpsgrad_tests"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("planted_bugs: build failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])


def run_tests(build, gtest_filter):
    binary = os.path.join(build, "tests", "cpp", "mpsgrad_tests")
    # Mutants must not count as coverage (nor leave default.profraw in the working directory).
    env = dict(os.environ, LLVM_PROFILE_FILE=os.devnull)
    env.pop("MTLEMU_VARIANT_LOG", None)
    return subprocess.run([binary, "--gtest_filter=" + gtest_filter], capture_output=True, text=True, env=env)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source-root", default=os.path.join(HERE, "..", "..", ".."))
    args = ap.parse_args(argv)
    missed = []
    for display, original, planted, gtest_filter, what in BUGS:
        path = os.path.join(args.source_root, display)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.count(original + "\n") != 1:
            sys.exit("planted_bugs: %s no longer contains exactly one line %r; update BUGS" % (display, original))
        out = generated_path(args.build, display)
        try:
            translate(path, text.replace(original + "\n", planted + "\n"), display, out)
            build_tests(args.build)
            # The tests must pass on the real kernels and fail on the planted one.
            r = run_tests(args.build, gtest_filter)
            caught = r.returncode != 0 and "Failure" in r.stdout
        finally:
            translate(path, text, display, out)
        print("planted bug %-8s %s (%s: %s)" % ("caught:" if caught else "MISSED:", what, display, gtest_filter))
        if not caught:
            missed.append(what)
    build_tests(args.build)
    for _, _, _, gtest_filter, what in BUGS:
        r = run_tests(args.build, gtest_filter)
        if r.returncode != 0:
            sys.exit("planted_bugs: %s fails on the real kernels:\n%s" % (gtest_filter, r.stdout[-3000:]))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
