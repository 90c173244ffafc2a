#!/usr/bin/env python3
"""Address-space check of .metal files with clang's address_space attributes.

Each file is rewritten (line for line, behind ``#line 1 "file.metal"``) and
compiled as C++17 with ``-fsyntax-only`` against declarations-only MSL headers
(include/metal_stdlib) in which ``device`` and ``threadgroup`` are clang's
``__attribute__((address_space(1)))`` and ``(3)``, ``thread`` is the default
address space and ``constant`` is ``const``. An unqualified pointer is then a
thread pointer, as in MSL, and clang reports what Apple's compiler reports:
device or threadgroup pointers passed where a thread pointer is expected,
device and threadgroup pointers mixed, and writes to constant memory. The file
must compile cleanly: every diagnostic (error or warning) fails the check.

Not checked: `constant` as an address space of its own (it is only `const`, so
a constant pointer passed as a `thread const` pointer goes through). Rejected
although legal MSL: copying a struct from or to device or threadgroup memory
(clang gives the implicit copy members of a struct no address space); copy the
members instead. No project kernel copies structs across address spaces.

Rewrites: [[attributes]] are removed; ``constant T x [[function_constant(i)]];``
gets an initializer; template kernels become plain function templates and
their ``[[host_name]]`` instantiations explicit instantiations;
``threadgroup T x[N];`` becomes a reference to threadgroup storage; vector
constructors become ``metal::vmake<floatN>(...)``; half literals ``1.5h``
become ``((half)1.5f)``.

Usage:
    msl_aspcheck.py [--clang CLANG] [-I DIR]... FILE.metal...
    msl_aspcheck.py --expect-errors FILE.metal   # every line marked
        "// expect-error" must be reported, and nothing else
Exit status 0 when every file passes (or, with --expect-errors, fails exactly
as marked).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "shim"))
import msl2cpp  # noqa: E402  (shared scanning helpers)

IDENT = msl2cpp.IDENT
VECTOR = msl2cpp.VECTOR
CLANG_FLAGS = [
    "-x", "c++", "-std=c++17", "-nostdinc++",
    "-fsyntax-only", "-ferror-limit=0", "-Wall", "-Wno-unused-variable", "-Wno-unused-function",
    "-Wno-unused-parameter", "-Wno-unused-but-set-variable",
]
MARKER = re.compile(r"//\s*expect-error\b")


def rewrite(path, text, display):
    code, mask = msl2cpp.mask_source(text)
    ed = msl2cpp.Edits(code)

    # function constants: declarations need an initializer in __constant
    for m in re.finditer(r"\bconstant\s+(" + IDENT + r"(?:\s*::\s*" + IDENT + r")*)\s+(" + IDENT +
                         r")\s*\[\[\s*function_constant\s*\([^)\]]*\)\s*\]\]\s*;", mask):
        ed.add(m.start(), m.end(), "constant %s %s = %s();" % (m.group(1), m.group(2), m.group(1)))

    # [[host_name]] instantiations of template kernels -> explicit instantiations
    for m in re.finditer(r"\btemplate\s*\[\[\s*host_name\s*\(\s*\"[^\"]*\"\s*\)\s*\]\]\s*"
                         r"(\[\[\s*kernel\s*\]\]\s*|\bkernel\s+)?void\b", mask):
        ed.add(m.start(), m.end(), "template void")  # parameter attributes are removed below

    # kernels: template kernels lose `kernel`, [[kernel]] becomes kernel
    for m in re.finditer(r"(\[\[\s*kernel\s*\]\]|\bkernel\b)(\s*void\s+" + IDENT + r"\s*\()", mask):
        if ed.covered(m.start()):
            continue
        if re.search(r"\btemplate\s*<[^{};]*>\s*(?:\[\[[^\]]*\]\]\s*)*$", mask[:m.start()]):
            ed.blank(m.start(1), m.end(1))
        elif m.group(1).startswith("[["):
            ed.add(m.start(1), m.end(1), "kernel")

    # threadgroup variables -> references to threadgroup storage
    for m in re.finditer(r"\bthreadgroup\s+((?:const\s+)?" + IDENT + r"(?:\s*::\s*" + IDENT +
                         r")*(?:\s*<[^;{}()]*>)?)\s+(" + IDENT + r"\s*(?:\[[^\]]*\]\s*)*(?:,\s*" + IDENT +
                         r"\s*(?:\[[^\]]*\]\s*)*)*);", mask):
        ty = code[m.start(1):m.end(1)]
        parts = []
        for _, decl in msl2cpp.split_top(code[m.start(2):m.end(2)]):
            dm = re.match(r"\s*(" + IDENT + r")\s*((?:\[[^\]]*\]\s*)*)$", decl)
            parts.append("auto& %s = ::metal::mtlchk_local<%s%s>();" % (dm.group(1), ty, dm.group(2).strip()))
        ed.add(m.start(), m.end(), " ".join(parts))

    # remaining attributes
    for m in re.finditer(r"\[\[.*?\]\]", mask):
        if not ed.covered(m.start()):
            ed.blank(m.start(), m.end())

    # half literals
    for m in re.finditer(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH]\b", mask):
        lit = m.group(1) if re.search(r"[.eE]", m.group(1)) else m.group(1) + ".0"
        ed.add(m.start(), m.end(), "((half)%sf)" % lit)

    # vector constructors and conversions
    for m in re.finditer(r"\bstatic_cast\s*<\s*(?:metal\s*::\s*)?(" + VECTOR + r")\s*>\s*\(", mask):
        ed.add(m.start(), m.end(), "::metal::vconvert<%s>(" % m.group(1))
    for m in re.finditer(r"(?<![\w.])(?:::\s*)?(?:metal\s*::\s*)?(" + VECTOR + r")\s*\(", mask):
        if not ed.covered(m.start()):
            ed.add(m.start(), m.end(), "::metal::vmake<%s>(" % m.group(1))

    body = ed.apply()
    return ("#include <metal_stdlib>\n"
            "namespace metal { template <class T> threadgroup T& mtlchk_local(); }\n"
            "#line 1 %s\n" % msl2cpp.c_string(display)) + body


DIAG = re.compile(r"^(?P<loc>[^\s:][^:]*:\d+:\d+): (?P<kind>error|warning|note|fatal error): (?P<msg>.*)$")
def diagnostics(output):
    """Split clang output into groups: a diagnostic and the notes/source lines after it."""
    groups, current = [], None
    for line in output.splitlines():
        m = DIAG.match(line)
        if m and m.group("kind") != "note":
            current = {"kind": m.group("kind"), "loc": m.group("loc"), "msg": m.group("msg"), "lines": [line],
                       "notes": []}
            groups.append(current)
        elif current is not None:
            current["lines"].append(line)
            if m:
                current["notes"].append(m.group("msg"))
    return groups


def check_file(path, args):
    display = os.path.relpath(path, args.display_root) if args.display_root else path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        out = rewrite(path, text, display)
    except msl2cpp.TranslationError as e:
        print("%s:%s: error: %s" % (display, e.line, e), file=sys.stderr)
        return False, ""
    with tempfile.TemporaryDirectory(prefix="mtlemu-asp-") as tmp:
        src = os.path.join(tmp, os.path.basename(path) + ".cpp")
        with open(src, "w", encoding="utf-8") as f:
            f.write(out)
        cmd = [args.clang] + CLANG_FLAGS + ["-I", os.path.join(HERE, "include"),
                                            "-I", os.path.dirname(os.path.abspath(path))]
        for d in args.include_dirs:
            cmd += ["-I", d]
        cmd.append(src)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    groups = diagnostics(r.stdout)  # every diagnostic counts
    output = "".join(line + "\n" for g in groups for line in g["lines"])
    errors = [g for g in groups if g["kind"] in ("error", "fatal error")]
    if not args.expect_errors and groups:
        errors = groups  # a warning fails the check too
    if r.returncode != 0 and not diagnostics(r.stdout):
        output = r.stdout  # clang failed without a diagnostic we can parse (bad flags, missing file)
        errors = [None]
    if not args.expect_errors:
        if output.strip():
            sys.stdout.write(output)
        return not errors, display

    # --expect-errors: compare the reported error lines with the marked lines
    expected = {i + 1 for i, line in enumerate(text.splitlines()) if MARKER.search(line)}
    reported = set()
    pattern = re.compile(r"^" + re.escape(display) + r":(\d+):\d+: error:", re.M)
    for m in pattern.finditer(output):
        reported.add(int(m.group(1)))
    ok = bool(errors) and bool(expected)
    for line in sorted(expected - reported):
        print("%s:%d: expected an address-space error here, clang reported none" % (display, line))
        ok = False
    for line in sorted(reported - expected):
        print("%s:%d: unexpected error (not marked expect-error)" % (display, line))
        ok = False
    other = [l for l in output.splitlines() if ": error:" in l and not l.startswith(display + ":")]
    for l in other:
        print("unexpected error outside the file: " + l)
        ok = False
    if not ok:
        sys.stdout.write(output)
    else:
        print("%s: all %d marked errors reported" % (display, len(expected)))
    return ok, display


def main(argv=None):
    ap = argparse.ArgumentParser(description="Address-space check of .metal files (clang address_space attributes).")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--clang", default=os.environ.get("MTLEMU_CLANG", "clang++-16"))
    ap.add_argument("-I", dest="include_dirs", action="append", default=[])
    ap.add_argument("--display-root", help="name files relative to this directory in messages")
    ap.add_argument("--expect-errors", action="store_true",
                    help="the files must fail exactly on the lines marked '// expect-error'")
    ap.add_argument("--print", action="store_true", help="print the rewritten source instead of checking")
    args = ap.parse_args(argv)

    if args.print:
        for path in args.files:
            with open(path, encoding="utf-8") as f:
                sys.stdout.write(rewrite(path, f.read(), path))
        return 0
    failed = []
    for path in args.files:
        ok, display = check_file(path, args)
        if not ok:
            failed.append(display or path)
    n = len(args.files)
    if failed:
        print("address-space check: %d of %d files failed: %s" % (len(failed), n, ", ".join(failed)))
        return 1
    print("address-space check: %d file%s passed" % (n, "" if n == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
