#!/usr/bin/env python3
"""MSL-subset check on clang's AST (libclang, from the PyPI package `libclang`).

Each .metal file is translated with msl2cpp.py exactly as the emulation build does, parsed by
libclang against the emulation's metal_stdlib shim, and every declaration, statement and
expression that comes from the .metal file or from the headers next to it (shared headers such
as image_indexing.h, vector_access.h, neuron_math.h, *_params.h) is checked. A header given on
the command line is checked through a one-line .metal file that includes it. Rejected, with
file:line:

  * `double` (Metal has no double precision),
  * recursion (direct or through other functions of the checked files),
  * C-style casts from a vector type, e.g. `(float4)i` with `int4 i` (MSL converts the values,
    clang's ext vectors reinterpret the bits),
  * in the headers (which msl2cpp does not rewrite), `float4(i)` and `static_cast<float4>(i)`
    from a vector of another element kind (bit-cast by clang, value conversion in MSL),
  * function pointers (and references to functions), `goto`, variable-length arrays,
    `throw` and `try`.

A file that does not compile is an error too (every diagnostic of error severity is printed).

Usage: msl_subset_check.py [--clang clang++-16] [-I dir]... [--display-root DIR]
                           [--expect-errors] file.metal|file.h...
With --expect-errors, every line marked `// expect-error` must be reported, and nothing else.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(os.path.dirname(HERE), "shim")
sys.path.insert(0, SHIM)
import msl2cpp  # noqa: E402

try:
    import clang.cindex as ci
except ImportError:  # pragma: no cover - reported to the user
    ci = None

K = None  # clang.cindex.CursorKind, set in main()
T = None  # clang.cindex.TypeKind


def resource_dir(clang):
    out = subprocess.run([clang, "-print-resource-dir"], stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return out.stdout.strip()


# ------------------------------------------------------------------------ type predicates

def canon(t):
    return t.get_canonical()


def is_vector(t):
    return kind_of(canon(t)) in (T.VECTOR, T.EXTVECTOR)


def element_kind(t):
    """'float' or 'int' for the elements of a vector type."""
    e = canon(t).element_type
    floating = kind_of(canon(e)) in (T.FLOAT, T.HALF, T.DOUBLE, T.LONGDOUBLE) or canon(e).spelling == "_Float16"
    return "float" if floating else "int"


def name(t):
    """MSL's name of a vector type (int4, not `int __attribute__((ext_vector_type(4)))`)."""
    if "__attribute__" in t.spelling and is_vector(t):
        c = canon(t)
        elem = {"_Float16": "half", "unsigned int": "uint", "unsigned short": "ushort", "unsigned char": "uchar",
                "signed char": "char", "unsigned long": "ulong"}.get(canon(c.element_type).spelling,
                                                                   canon(c.element_type).spelling)
        return "%s%d" % (elem, c.element_count)
    return t.spelling


def kind_of(c):
    """c.kind, or None for a kind the Python bindings do not know (libclang 18's bindings lack
    _Float16, MSL's half: not a double, a pointer or an array)."""
    try:
        return c.kind
    except ValueError:
        return None


def mentions(t, pred, depth=0):
    """Whether type t, through pointers, references, arrays and vectors, satisfies pred."""
    if depth > 8 or t is None:
        return False
    c = canon(t)
    if pred(c):
        return True
    if kind_of(c) in (T.POINTER, T.LVALUEREFERENCE, T.RVALUEREFERENCE):
        return mentions(c.get_pointee(), pred, depth + 1)
    if kind_of(c) in (T.CONSTANTARRAY, T.INCOMPLETEARRAY, T.VARIABLEARRAY, T.DEPENDENTSIZEDARRAY,
                      T.VECTOR, T.EXTVECTOR):
        return mentions(c.element_type, pred, depth + 1)
    return False


def is_double(c):
    return kind_of(c) in (T.DOUBLE, T.LONGDOUBLE)


def is_function_pointer(c):
    if kind_of(c) == T.MEMBERPOINTER:
        return True
    if kind_of(c) in (T.POINTER, T.LVALUEREFERENCE, T.RVALUEREFERENCE):
        return kind_of(canon(c.get_pointee())) in (T.FUNCTIONPROTO, T.FUNCTIONNOPROTO)
    return False


# ------------------------------------------------------------------------------- checker

DECLS = None
FUNCTIONS = None


class Checker:
    def __init__(self, checked_files, line_of):
        self.checked = checked_files      # real paths of the files whose code is checked
        self.line_of = line_of            # (path, line) -> (display file, line)
        self.errors = []                  # (display file, line, message)
        self.calls = {}                   # function USR -> set of called USRs
        self.defs = {}                    # function USR -> (display file, line, name)

    def ours(self, cursor):
        f = cursor.location.file
        return f is not None and os.path.realpath(f.name) in self.checked

    def error(self, cursor, message):
        loc = cursor.location
        self.errors.append(self.line_of(os.path.realpath(loc.file.name), loc.line) + (message,))

    def visit(self, cursor, function=None):
        for c in cursor.get_children():
            if c.kind == K.NAMESPACE or c.kind == K.LINKAGE_SPEC:
                self.visit(c, function)
                continue
            if not self.ours(c):
                continue
            if (c.spelling or "").startswith("mtlemu_"):
                continue  # the entry wrappers and registrars msl2cpp appends
            self.check(c, function)
            inner = function
            if c.kind in FUNCTIONS and c.is_definition():
                inner = c.get_usr()
                self.defs[inner] = self.line_of(os.path.realpath(c.location.file.name), c.location.line) + (
                    c.spelling,)
                self.calls.setdefault(inner, set())
            self.visit(c, inner)

    def check(self, c, function):
        k = c.kind
        if k in DECLS:
            t = c.result_type if k in FUNCTIONS else (
                c.underlying_typedef_type if k in (K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL) else c.type)
            if mentions(t, is_double):
                self.error(c, "'%s' has type %s: Metal has no double precision" % (c.spelling, t.spelling))
            if k not in FUNCTIONS and mentions(t, is_function_pointer):
                self.error(c, "'%s' has type %s: Metal has no function pointers" % (c.spelling, t.spelling))
            if k == K.VAR_DECL and kind_of(canon(c.type)) == T.VARIABLEARRAY:
                self.error(c, "'%s' is a variable-length array: Metal has none" % c.spelling)
        elif k == K.CSTYLE_CAST_EXPR:
            src = self.operand_type(c)
            if mentions(c.type, is_double):
                self.error(c, "cast to %s: Metal has no double precision" % c.type.spelling)
            elif src is not None and is_vector(src) and canon(src).spelling != canon(c.type).spelling:
                self.error(c, "C-style cast from %s to %s: MSL converts the values, the emulation would "
                              "reinterpret the bits; write %s(...) or static_cast<%s>(...)"
                           % (name(src), name(c.type), name(c.type), name(c.type)))
        elif k in (K.CXX_FUNCTIONAL_CAST_EXPR, K.CXX_STATIC_CAST_EXPR):
            src = self.operand_type(c)
            if mentions(c.type, is_double):
                self.error(c, "cast to %s: Metal has no double precision" % c.type.spelling)
            elif (src is not None and is_vector(src) and is_vector(c.type)
                  and element_kind(src) != element_kind(c.type)):
                self.error(c, "vector conversion from %s to %s outside a .metal file: clang reinterprets the "
                              "bits (MSL converts the values); convert element by element"
                           % (name(src), name(c.type)))
        elif k in (K.GOTO_STMT, K.INDIRECT_GOTO_STMT):
            self.error(c, "goto: not allowed in Metal")
        elif k in (K.CXX_THROW_EXPR, K.CXX_TRY_STMT, K.CXX_CATCH_STMT):
            self.error(c, "exceptions (throw/try/catch): not allowed in Metal")
        elif k == K.UNARY_OPERATOR and self.takes_function_address(c):
            self.error(c, "taking the address of a function: Metal has no function pointers")
        elif k == K.CALL_EXPR and function is not None:
            ref = c.referenced
            if ref is not None and ref.kind in FUNCTIONS:
                self.calls[function].add(ref.get_usr())

    @staticmethod
    def operand_type(cast):
        kids = [x for x in cast.get_children() if x.kind not in (K.TYPE_REF, K.TEMPLATE_REF, K.NAMESPACE_REF)]
        return kids[-1].type if kids else None

    @staticmethod
    def takes_function_address(c):
        toks = [t.spelling for t in c.get_tokens()]
        if not toks or toks[0] != "&":
            return False
        kids = list(c.get_children())
        return bool(kids) and kids[0].referenced is not None and kids[0].referenced.kind in FUNCTIONS \
            and kids[0].kind == K.DECL_REF_EXPR

    def recursion(self):
        """Functions of the checked files that can call themselves."""
        graph = {f: {g for g in calls if g in self.defs} for f, calls in self.calls.items()}
        reported = set()
        for start in graph:
            stack, seen = [start], set()
            while stack:
                f = stack.pop()
                for g in graph.get(f, ()):
                    if g == start and start not in reported:
                        reported.add(start)
                        file, line, name = self.defs[start]
                        self.errors.append((file, line, "function '%s' is recursive: Metal does not allow "
                                                        "recursion" % name))
                    if g not in seen:
                        seen.add(g)
                        stack.append(g)


# ---------------------------------------------------------------------------- one file

def check_file(path, args, resdir, covered):
    """Returns a list of (display file, line, message); adds the headers the file includes to
    `covered` (their code was checked with it)."""
    path = os.path.abspath(path)
    root = os.path.abspath(args.display_root or os.getcwd())
    disp = lambda p: os.path.relpath(p, root)  # noqa: E731
    src_dir = os.path.dirname(path)
    with tempfile.TemporaryDirectory(prefix="mslcheck") as tmp:
        if path.endswith(".metal"):
            metal = path
            with open(path, encoding="utf-8") as f:
                text = f.read()
        else:  # a header: checked through a .metal file that includes it
            metal = os.path.join(src_dir, "__mslcheck_%s.metal" % os.path.basename(path))
            text = '#include <metal_stdlib>\n#include "%s"\n' % os.path.basename(path)
        try:
            out, _, _ = msl2cpp.translate(metal, text, disp(metal), args.include_dirs)
        except msl2cpp.TranslationError as e:
            return [(disp(path), e.line, "msl2cpp: %s" % e)]
        cpp = os.path.join(tmp, "translated.cpp")
        with open(cpp, "w", encoding="utf-8") as f:
            f.write(out)
        offset = out.split("\n").index('#line 1 "%s"' % disp(metal).replace("\\", "\\\\")) + 1

        checked = {os.path.realpath(cpp)}
        for d in [src_dir] + args.include_dirs:
            for name in os.listdir(d):
                if name.endswith((".h", ".hpp", ".metal")):
                    checked.add(os.path.realpath(os.path.join(d, name)))

        def line_of(p, line):
            if p == os.path.realpath(cpp):
                return disp(metal), line - offset
            return disp(p), line

        flags = ["-x", "c++", "-std=c++17", "-resource-dir", resdir, "-I", os.path.join(SHIM, "include"),
                 "-I", src_dir] + sum((["-I", d] for d in args.include_dirs), [])
        tu = ci.Index.create().parse(cpp, args=flags)
        covered.update(os.path.realpath(inc.include.name) for inc in tu.get_includes())
        errors = []
        for d in tu.diagnostics:
            if d.severity >= ci.Diagnostic.Error:
                loc = d.location
                where = line_of(os.path.realpath(loc.file.name), loc.line) if loc.file else (disp(path), 0)
                errors.append(where + ("does not compile: %s" % d.spelling,))
        checker = Checker(checked, line_of)
        checker.visit(tu.cursor)
        checker.recursion()
        return errors + checker.errors


def main(argv=None):
    global K, T, DECLS, FUNCTIONS
    ap = argparse.ArgumentParser(description="Reject what MSL rejects or the emulation would mistranslate.")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--clang", default="clang++-16", help="clang whose resource directory (builtin headers) to use")
    ap.add_argument("-I", dest="include_dirs", action="append", default=[])
    ap.add_argument("--display-root", help="name files relative to this directory (default: the current one)")
    ap.add_argument("--expect-errors", action="store_true",
                    help="pass when exactly the lines marked '// expect-error' are reported")
    args = ap.parse_args(argv)
    if ci is None:
        print("msl_subset_check: the Python package 'libclang' is missing (pip install libclang)", file=sys.stderr)
        return 2
    K, T = ci.CursorKind, ci.TypeKind
    FUNCTIONS = {K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE, K.CONSTRUCTOR, K.DESTRUCTOR,
                 K.CONVERSION_FUNCTION}
    DECLS = FUNCTIONS | {K.VAR_DECL, K.PARM_DECL, K.FIELD_DECL, K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL}
    args.include_dirs = [os.path.abspath(d) for d in args.include_dirs]
    resdir = resource_dir(args.clang)

    found, covered = set(), set()
    # .metal files first: a header they include was checked with them and is not parsed again
    for path in sorted(args.files, key=lambda p: not p.endswith(".metal")):
        if os.path.realpath(path) in covered:
            continue
        for file, line, message in sorted(set(check_file(path, args, resdir, covered))):
            found.add((file, line))
            print("%s:%d: error: %s" % (file, line, message))
    if not args.expect_errors:
        print("msl_subset_check: %d file(s), %d error(s)" % (len(args.files), len(found)))
        return 1 if found else 0

    root = os.path.abspath(args.display_root or os.getcwd())
    expected = set()
    marked = list(args.files)
    for path in args.files:  # and the headers they include from their directory
        with open(path, encoding="utf-8") as f:
            for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', f.read(), re.M):
                cand = os.path.join(os.path.dirname(os.path.abspath(path)), inc)
                if os.path.isfile(cand) and cand not in marked:
                    marked.append(cand)
    for path in marked:
        with open(path, encoding="utf-8") as f:
            for i, text in enumerate(f, 1):
                if re.search(r"//\s*expect-error", text):
                    expected.add((os.path.relpath(os.path.abspath(path), root), i))
    missing, unexpected = expected - found, found - expected
    for file, line in sorted(missing):
        print("%s:%d: not reported although marked expect-error" % (file, line))
    for file, line in sorted(unexpected):
        print("%s:%d: reported but not marked expect-error" % (file, line))
    print("msl_subset_check: %d expected error line(s), %d missing, %d unexpected"
          % (len(expected), len(missing), len(unexpected)))
    return 1 if missing or unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
