#!/usr/bin/env python3
"""Line coverage of metal/*.metal (and the headers they include) and the kernel variants run, from
a coverage build of the Metal emulation (-DMPSGRAD_METAL_COVERAGE=ON).

In that build the translated kernels carry clang's source-based coverage; every test process
writes a .profraw (LLVM_PROFILE_FILE) and appends the variants it dispatched to
MTLEMU_VARIANT_LOG. This script merges the profiles, asks llvm-cov for per-line counts of the
translated C++ and maps them back to the .metal lines: msl2cpp.py keeps every source line on its
line behind a `#line 1 "metal/x.metal"` directive (clang's coverage ignores #line, so the offset
of that directive is subtracted here), and the shared headers are reported under their own paths.

Prints
    metal line coverage: NN.N% (covered/executable lines)
    kernel variants exercised: A/B
with the uncovered lines and missing variants, and exits non-zero below --min-lines percent or
when any variant the host can request (kernel_variants.py) was not dispatched.

Usage: metal_coverage.py --build BUILD --profiles DIR --variant-log FILE [--binary BIN]...
                         [--source-root ROOT] [--min-lines 95]
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_variants  # noqa: E402

LINE_DIRECTIVE = re.compile(r'^#line 1 "([^"]+)"\s*$')


def tool(name):
    for candidate in (name + "-16", name):
        for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/lib/llvm-16/bin"]:
            path = os.path.join(d, candidate)
            if os.access(path, os.X_OK):
                return path
    sys.exit("metal_coverage: %s not found (apt-get install llvm-16)" % name)


def generated_map(build):
    """{generated .cpp: (display name, offset)}: source line = generated line - offset."""
    out = {}
    for path in glob.glob(os.path.join(build, "**", "*.msl", "*.cpp"), recursive=True):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = LINE_DIRECTIVE.match(line)
                if m:
                    out[os.path.realpath(path)] = (m.group(1), number)
                    break
    return out


def line_counts(build, profiles, binaries, source_root):
    """{display file: {line: count}} for the .metal files and the headers under metal/."""
    raws = glob.glob(os.path.join(profiles, "*.profraw"))
    if not raws:
        sys.exit("metal_coverage: no .profraw files in %s (was the build configured with "
                 "-DMPSGRAD_METAL_COVERAGE=ON and LLVM_PROFILE_FILE set for the tests?)" % profiles)
    merged = os.path.join(profiles, "merged.profdata")
    subprocess.run([tool("llvm-profdata"), "merge", "-sparse", "-o", merged] + raws, check=True)
    args = [tool("llvm-cov"), "export", "-format=lcov", "-instr-profile", merged, binaries[0]]
    for b in binaries[1:]:
        args += ["-object", b]
    lcov = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return map_lcov(lcov, generated_map(build), source_root)


def map_lcov(lcov, generated, source_root):
    """{display file: {source line: count}} from llvm-cov's lcov export: records of a translated
    file (`generated`, see generated_map) moved back to their .metal lines, records of headers in
    source_root/metal kept under their own names, everything else dropped."""
    metal_dir = os.path.realpath(os.path.join(source_root, "metal"))
    counts = collections.defaultdict(dict)
    current = None
    for line in lcov.splitlines():
        if line.startswith("SF:"):
            path = os.path.realpath(line[3:])
            if path in generated:
                current = generated[path]
            elif os.path.dirname(path) == metal_dir:
                current = ("metal/" + os.path.basename(path), 0)
            else:
                current = None
        elif line.startswith("DA:") and current:
            number, count = line[3:].split(",")[:2]
            source_line = int(number) - current[1]
            if source_line >= 1:
                table = counts[current[0]]
                table[source_line] = table.get(source_line, 0) + int(count)
    # Lines past the end of a .metal file are the translation's closing namespace.
    for name in list(counts):
        path = os.path.join(source_root, name)
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        counts[name] = {k: v for k, v in counts[name].items() if k <= n}
    return counts


def ranges(numbers):
    out, start, prev = [], None, None
    for n in sorted(numbers):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append((start, prev))
            start = prev = n
    if start is not None:
        out.append((start, prev))
    return ", ".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in out)


def report_lines(counts, min_lines):
    total = covered = 0
    print("metal line coverage per file (executable lines per llvm-cov):")
    for name in sorted(counts):
        table = counts[name]
        hit = sum(1 for c in table.values() if c > 0)
        total += len(table)
        covered += hit
        missed = [n for n, c in table.items() if c == 0]
        print("  %-28s %4d/%-4d %s" % (name, hit, len(table), ("uncovered: " + ranges(missed)) if missed else ""))
    percent = 100.0 * covered / total if total else 0.0
    print("metal line coverage: %.1f%% (%d/%d lines)" % (percent, covered, total))
    return percent >= min_lines


def report_variants(metal_dir, logs):
    expected = kernel_variants.all_variants(metal_dir)
    seen = set()
    for log in logs:
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                seen.update(line.rstrip("\n") for line in f if line.strip())
    unknown = sorted(seen - expected)
    missing = sorted(expected - seen)
    print("kernel variants exercised: %d/%d" % (len(expected & seen), len(expected)))
    if missing:
        per_kernel = collections.Counter(k.split("\t")[0] for k in missing)
        print("  missing per kernel: " + ", ".join("%s %d" % kv for kv in sorted(per_kernel.items())))
        for key in missing[:20]:
            print("    " + key.replace("\t", " "))
    if unknown:
        print("  dispatched but not in kernel_variants.py (update its rules):")
        for key in unknown[:20]:
            print("    " + key.replace("\t", " "))
    return not missing and not unknown


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, help="the coverage build directory")
    ap.add_argument("--profiles", required=True, help="directory of the tests' .profraw files")
    ap.add_argument("--variant-log", action="append", default=[], help="MTLEMU_VARIANT_LOG file(s)")
    ap.add_argument("--binary", action="append", default=[], help="instrumented binaries (test executable, "
                    "Python extension); default: the build's mpsgrad_tests and _mpsgrad*.so")
    ap.add_argument("--source-root", default=os.path.join(HERE, "..", "..", ".."))
    ap.add_argument("--min-lines", type=float, default=95.0)
    args = ap.parse_args(argv)
    binaries = args.binary or sorted(glob.glob(os.path.join(args.build, "tests", "cpp", "mpsgrad_tests")) +
                                     glob.glob(os.path.join(args.build, "_mpsgrad*.so")))
    if not binaries:
        sys.exit("metal_coverage: no instrumented binaries in %s" % args.build)
    counts = line_counts(args.build, args.profiles, binaries, args.source_root)
    lines_ok = report_lines(counts, args.min_lines)
    variants_ok = report_variants(os.path.join(args.source_root, "metal"), args.variant_log)
    if not lines_ok:
        print("metal_coverage: line coverage is below %.1f%%" % args.min_lines)
    if not variants_ok:
        print("metal_coverage: not every kernel variant the host can request was exercised")
    return 0 if lines_ok and variants_ok else 1


if __name__ == "__main__":
    sys.exit(main())
