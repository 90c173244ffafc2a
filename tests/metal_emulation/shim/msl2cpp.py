#!/usr/bin/env python3
"""Translate a .metal compute file into C++ for the mtlemu metal_stdlib shim.

The output keeps every line of the source on the same line number (behind a
``#line 1 "file.metal"``), so compiler errors, sanitizer reports and runtime
messages name the .metal file and line. The rewrites are mechanical:

* ``kernel``/``[[kernel]]`` and the ``[[...]]`` attributes of kernel
  parameters are blanked out;
* after the closing brace of every kernel (on the same line) an entry wrapper
  and a static registrar are appended: the wrapper converts the bound buffers,
  threadgroup buffers and built-in values into the kernel's parameters, the
  registrar puts the kernel in the runtime's registry under its Metal name;
* ``template [[host_name("n")]] kernel void f<T>(...);`` instantiations are
  replaced by the entry wrapper and registrar of ``f<T>`` named ``n``;
* ``constant T x [[function_constant(i)]];`` becomes a read of the pipeline's
  constant value i wherever x is used (program-scope constants computed from
  function constants are expanded the same way);
* ``threadgroup T x[N];`` inside a function becomes a reference to per-
  threadgroup storage that the runtime poisons with 0xFF bytes;
* vector constructors ``float4(a, b.xy)`` become ``metal::vmake<float4>(...)``,
  ``static_cast<float4>(v)`` becomes ``metal::vconvert<float4>(v)``, and half
  literals ``1.5h`` become ``((half)1.5f)``.

The whole file is wrapped in an anonymous namespace, so helper functions of
different .metal files never clash at link time.

A kernel is run with fibers only if it (or a function it calls that is defined
in the file or its quoted includes) uses a barrier or a simdgroup function;
other kernels take the runtime's fast path.

Usage: msl2cpp.py IN.metal -o OUT.cpp [--display-name NAME] [-I DIR]... [--depfile FILE]
"""
import argparse
import os
import re
import sys

BUILTINS_3 = {
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "dispatch_threads_per_threadgroup", "threadgroups_per_grid",
    "threads_per_grid",
}
BUILTINS_1 = {
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
}
VECTOR = r"(?:float|half|int|uint|short|ushort|char|uchar|long|ulong|bool)[234]"
IDENT = r"[A-Za-z_]\w*"
KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype",
            "static_assert", "do", "else", "case", "new", "delete", "throw", "operator"}
SYNC_CALL = re.compile(r"\b(threadgroup_barrier|simdgroup_barrier|simd_[a-z_]+|quad_[a-z_]+)\s*\(")
CALL = re.compile(r"\b(" + IDENT + r")\s*(?:<[^;(){}]*>)?\s*\(")


class TranslationError(Exception):
    def __init__(self, line, message):
        super().__init__(message)
        self.line = line


# --------------------------------------------------------------------- scanning

def mask_source(text):
    """Return (code, mask): code has comments replaced by spaces; mask also has
    the contents of string and character literals replaced by spaces. Both
    keep every newline and every offset of the input."""
    code, mask = list(text), list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                code[k] = mask[k] = " "
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    code[k] = mask[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                mask[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(code), "".join(mask)


def match_close(s, pos):
    """Index of the bracket closing the one at s[pos]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener, closer = s[pos], pairs[s[pos]]
    depth = 0
    for i in range(pos, len(s)):
        if s[i] == opener:
            depth += 1
        elif s[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    raise TranslationError(s.count("\n", 0, pos) + 1, "unbalanced '%s'" % opener)


def split_top(s):
    """Split on commas outside (), [], {} and <>; returns (offset, text) pairs."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((start, s[start:i]))
            start = i + 1
    if s[start:].strip():
        parts.append((start, s[start:]))
    return parts


def line_of(s, pos):
    return s.count("\n", 0, pos) + 1


class Scopes:
    """The brace structure of a masked source: which braces are namespaces."""

    def __init__(self, mask):
        self.braces = []  # (open, close, kind, name)
        stack = []
        for m in re.finditer(r"[{}]", mask):
            if m.group() == "{":
                before = mask[:m.start()]
                ns = re.search(r"\bnamespace\s*(" + IDENT + r"(?:\s*::\s*" + IDENT + r")*)?\s*$", before)
                ext = re.search(r"\bextern\s*\"[^\"]*\"\s*$", before)
                if ns:
                    stack.append([m.start(), None, "namespace", (ns.group(1) or "").replace(" ", "")])
                elif ext:
                    stack.append([m.start(), None, "extern", ""])
                else:
                    stack.append([m.start(), None, "block", ""])
            elif stack:
                b = stack.pop()
                b[1] = m.start()
                self.braces.append(tuple(b))

    def enclosing(self, pos):
        return sorted((b for b in self.braces if b[0] < pos < b[1]), key=lambda b: b[0])

    def at_namespace_scope(self, pos):
        return all(b[2] in ("namespace", "extern") for b in self.enclosing(pos))


def function_bodies(mask):
    """{name: [body text, ...]} for the function definitions in a masked source."""
    out = {}
    for m in re.finditer(r"\{", mask):
        j = m.start() - 1
        while j >= 0 and mask[j].isspace():
            j -= 1
        # skip trailing qualifiers between ) and {
        tail = re.search(r"(?:\b(?:const|noexcept|override|final)\b\s*)+$", mask[:j + 1])
        if tail:
            j = tail.start() - 1
            while j >= 0 and mask[j].isspace():
                j -= 1
        if j < 0 or mask[j] != ")":
            continue
        depth, k = 0, j
        while k >= 0:
            if mask[k] == ")":
                depth += 1
            elif mask[k] == "(":
                depth -= 1
                if depth == 0:
                    break
            k -= 1
        name = re.search(r"(" + IDENT + r")\s*(?:<[^;(){}]*>)?\s*$", mask[:max(k, 0)])
        if not name or name.group(1) in KEYWORDS:
            continue
        try:
            end = match_close(mask, m.start())
        except TranslationError:
            continue
        out.setdefault(name.group(1), []).append(mask[m.start():end + 1])
    return out


def collect_includes(path, code, include_dirs, seen):
    """Quoted includes of a source, resolved and read recursively."""
    found = []
    for m in re.finditer(r'^\s*#\s*include\s*"([^"]+)"', code, re.M):
        for d in [os.path.dirname(path)] + include_dirs:
            cand = os.path.normpath(os.path.join(d, m.group(1)))
            if os.path.isfile(cand):
                if cand not in seen:
                    seen.add(cand)
                    with open(cand, encoding="utf-8") as f:
                        sub_code, sub_mask = mask_source(f.read())
                    found.append((cand, sub_mask))
                    found.extend(collect_includes(cand, sub_code, include_dirs, seen))
                break
    return found


def closure(bodies, direct):
    """Functions that (transitively) satisfy `direct(body)`."""
    calls = {f: set(m.group(1) for b in bs for m in CALL.finditer(b)) for f, bs in bodies.items()}
    marked = {f for f, bs in bodies.items() if any(direct(b) for b in bs)}
    changed = True
    while changed:
        changed = False
        for f in bodies:
            if f not in marked and calls[f] & marked:
                marked.add(f)
                changed = True
    return marked, calls


# ------------------------------------------------------------------ translation

class Edits:
    def __init__(self, text):
        self.text = text
        self.edits = []  # (start, end, replacement)

    def add(self, start, end, repl):
        self.edits.append((start, end, repl))

    def blank(self, start, end):
        self.add(start, end, re.sub(r"[^\n]", " ", self.text[start:end]))

    def covered(self, pos):
        return any(s <= pos < e for s, e, _ in self.edits)

    def apply(self):
        out, last = [], 0
        for s, e, r in sorted(self.edits):
            if s < last:
                raise TranslationError(line_of(self.text, s), "internal error: overlapping rewrites of %r" % self.text[s:e])
            lost = self.text.count("\n", s, e) - r.count("\n")
            if lost < 0:
                raise TranslationError(line_of(self.text, s), "internal error: a rewrite adds lines")
            out.append(self.text[last:s])
            out.append(r + "\n" * lost)
            last = e
        out.append(self.text[last:])
        return "".join(out)


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Kernel:
    def __init__(self, name, host_name, line):
        self.name = name              # C++ function name, possibly qualified
        self.host_name = host_name    # Metal function name
        self.line = line
        self.fptr = "&" + name        # expression for the function pointer
        self.call = name
        self.params = []              # (kind, key, param name, position)
        self.param_decls = []         # parameter declarations without attributes
        self.max_threads = 1024
        self.sync = False
        self.constants = []
        self.tg_size_expr = "0"


def translate(path, text, display, include_dirs):
    code, mask = mask_source(text)
    scopes = Scopes(mask)
    ed = Edits(code)
    lines = lambda pos: line_of(mask, pos)

    # --- half literals
    for m in re.finditer(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH]\b", mask):
        lit = m.group(1)
        if not re.search(r"[.eE]", lit):
            lit += ".0"
        ed.add(m.start(), m.end(), "((half)%sf)" % lit)

    # --- function constants
    fcs = {}  # name -> (type, index expression)
    for m in re.finditer(r"\bconstant\s+(" + IDENT + r"(?:\s*::\s*" + IDENT + r")*)\s+(" + IDENT +
                         r")\s*\[\[\s*function_constant\s*\(\s*([^)\]]+?)\s*\)\s*\]\]\s*;", mask):
        if not scopes.at_namespace_scope(m.start()):
            raise TranslationError(lines(m.start()), "function constants must be declared at program scope")
        fcs[m.group(2)] = (m.group(1), code[m.start(3):m.end(3)].strip())
        ed.blank(m.start(), m.end())
    optional = set(m.group(1) for m in re.finditer(r"\bis_function_constant_defined\s*\(\s*(" + IDENT + r")\s*\)",
                                                    mask))

    def name_re(name):
        return re.compile(r"(?<![\w.])(?<!->)(?<!::)\b" + re.escape(name) + r"\b(?!\s*::)")

    derived = {}  # name -> (type, expression text)
    if fcs:
        fc_any = re.compile(r"\b(" + "|".join(map(re.escape, fcs)) + r")\b")
        for m in re.finditer(r"\bconstant\s+(" + IDENT + r"(?:\s*::\s*" + IDENT + r")*)\s+(" + IDENT +
                             r")\s*=\s*([^;]+);", mask):
            if scopes.at_namespace_scope(m.start()) and fc_any.search(m.group(3)) and not ed.covered(m.start()):
                derived[m.group(2)] = (m.group(1), code[m.start(3):m.end(3)])
                ed.blank(m.start(), m.end())

    def expand(expr, depth=0):
        if depth > 20:
            raise TranslationError(0, "function constants defined in a cycle")
        for name, (ty, idx) in fcs.items():
            expr = name_re(name).sub(
                "(::mtlemu::msl::function_constant<%s>(%s, %s, __builtin_FILE(), __builtin_LINE()))"
                % (ty, idx, c_string(name)), expr)
        for name, (ty, e) in derived.items():
            expr = name_re(name).sub(lambda _m: "(static_cast<%s>(%s))" % (ty, expand(e, depth + 1)), expr)
        return expr

    for name in optional:
        if name not in fcs:
            raise TranslationError(0, "is_function_constant_defined(%s): no such function constant" % name)
    for m in re.finditer(r"\bis_function_constant_defined\s*\(\s*(" + IDENT + r")\s*\)", mask):
        ed.add(m.start(), m.end(), "(::mtlemu::msl::function_constant_defined(%s))" % fcs[m.group(1)][1])
    for name in list(fcs) + list(derived):
        for m in name_re(name).finditer(mask):
            if not ed.covered(m.start()):
                ed.add(m.start(), m.end(), expand(name))

    # --- threadgroup declarations inside functions
    tg_decls = []  # (position, sizeof expression)
    for m in re.finditer(r"\bthreadgroup\s+((?:const\s+)?" + IDENT + r"(?:\s*::\s*" + IDENT +
                         r")*(?:\s*<[^;{}()]*>)?)\s+(" + IDENT + r"\s*(?:\[[^\]]*\]\s*)*(?:,\s*" + IDENT +
                         r"\s*(?:\[[^\]]*\]\s*)*)*);", mask):
        if scopes.at_namespace_scope(m.start()):
            raise TranslationError(lines(m.start()), "threadgroup variables must be declared inside a kernel")
        ty = code[m.start(1):m.end(1)]
        parts = []
        for _, decl in split_top(code[m.start(2):m.end(2)]):
            dm = re.match(r"\s*(" + IDENT + r")\s*((?:\[[^\]]*\]\s*)*)$", decl)
            name, dims = dm.group(1), re.sub(r"\s+", "", dm.group(2))
            full = "%s%s" % (ty, dims)
            key = "%s:%d:%s" % (display, lines(m.start()), name)
            parts.append("auto& %s = ::mtlemu::msl::threadgroup_var<%s>(%s, __builtin_FILE(), __builtin_LINE());"
                         % (name, full, c_string(key)))
            tg_decls.append((m.start(), "sizeof(%s)" % full))
        ed.add(m.start(), m.end(), " ".join(parts))

    # --- vector conversions and constructors, half literals
    for m in re.finditer(r"\bstatic_cast\s*<\s*(?:metal\s*::\s*)?(" + VECTOR + r")\s*>\s*\(", mask):
        ed.add(m.start(), m.end(), "::metal::vconvert<%s>(" % m.group(1))
    for m in re.finditer(r"(?<![\w.])(?:::\s*)?(?:metal\s*::\s*)?(" + VECTOR + r")\s*\(", mask):
        if not ed.covered(m.start()):
            ed.add(m.start(), m.end(), "::metal::vmake<%s>(" % m.group(1))

    # --- which functions need fibers, and which read function constants
    seen = set()
    bodies = function_bodies(mask)
    included = collect_includes(path, code, include_dirs, seen)
    all_bodies = {k: list(v) for k, v in bodies.items()}
    for _, sub_mask in included:
        for k, v in function_bodies(sub_mask).items():
            all_bodies.setdefault(k, []).extend(v)
    sync_fns, calls = closure(all_bodies, lambda b: SYNC_CALL.search(b) is not None)

    # Function constants a body reads, directly, through program-scope
    # constants derived from them, or through the functions it calls.
    fc_word = re.compile(r"\b(" + "|".join(map(re.escape, list(fcs) + list(derived))) + r")\b") if fcs else None
    derived_fcs = {d: set() for d in derived}
    for _ in range(len(derived) + 1):
        for d, (_, e) in derived.items():
            for x in fc_word.findall(e):
                derived_fcs[d] |= derived_fcs[x] if x in derived else {x}

    def direct_fcs(body):
        out = set()
        if fc_word:
            for x in fc_word.findall(body):
                out |= derived_fcs[x] if x in derived else {x}
        return out

    fn_fcs = {f: set().union(*(direct_fcs(b) for b in bs)) for f, bs in all_bodies.items()}
    changed = bool(fcs)
    while changed:
        changed = False
        for f in all_bodies:
            new = set(fn_fcs[f])
            for g in calls[f]:
                new |= fn_fcs.get(g, set())
            if new != fn_fcs[f]:
                fn_fcs[f] = new
                changed = True

    def body_info(body):
        called = set(m.group(1) for m in CALL.finditer(body))
        sync = SYNC_CALL.search(body) is not None or bool(called & sync_fns)
        used = direct_fcs(body)
        for g in called:
            used |= fn_fcs.get(g, set())
        return sync, [(n, fcs[n][0], fcs[n][1], n in optional) for n in sorted(used)]

    # --- kernels
    kernels = []
    templates = {}  # template kernel name -> (info tuple)

    def parse_params(k, open_paren, close_paren, blank_attrs=True):
        inner_mask = mask[open_paren + 1:close_paren]
        for pos, (off, p) in enumerate(split_top(inner_mask)):
            start = open_paren + 1 + off
            attrs = list(re.finditer(r"\[\[(.*?)\]\]", p))
            if not attrs:
                raise TranslationError(lines(start), "kernel %s: parameter '%s' has no attribute"
                                       % (k.host_name, p.strip()))
            for a in attrs:
                if blank_attrs:
                    ed.blank(start + a.start(), start + a.end())
            decl = re.sub(r"\[\[.*?\]\]", " ", p).strip()
            pm = re.search(r"(" + IDENT + r")\s*$", decl)
            pname = pm.group(1) if pm else "?"
            spec = attrs[0].group(1).strip()
            am = re.match(r"(\w+)\s*(?:\(\s*([^)]*?)\s*\))?", spec)
            attr, arg = am.group(1), am.group(2)
            if attr == "buffer":
                k.params.append(("buffer_ref" if "&" in decl else "buffer_ptr", arg, pname, pos))
            elif attr == "threadgroup":
                if "*" not in decl:
                    raise TranslationError(lines(start), "kernel %s: [[threadgroup(n)]] parameter '%s' must be "
                                           "a pointer" % (k.host_name, pname))
                k.params.append(("threadgroup", arg, pname, pos))
            elif attr in BUILTINS_3:
                k.params.append(("builtin3", attr, pname, pos))
            elif attr in BUILTINS_1:
                k.params.append(("builtin1", BUILTINS_1[attr], pname, pos))
            else:
                raise TranslationError(lines(start), "kernel %s: parameter '%s': attribute [[%s]] is not "
                                       "supported by the Metal emulation" % (k.host_name, pname, spec))
            k.param_decls.append(decl)

    for m in re.finditer(r"(\[\[\s*kernel\s*\]\]|\bkernel\b)\s*void\s+(" + IDENT + r")\s*\(", mask):
        name = m.group(2)
        if re.search(r"\btemplate\s*\[\[\s*host_name\s*\([^\]]*\)\s*\]\]\s*$", mask[:m.start()]):
            continue  # a [[host_name]] instantiation, handled below
        open_paren = m.end() - 1
        close_paren = match_close(mask, open_paren)
        rest = re.match(r"\s*(\{|;)", mask[close_paren + 1:])
        if not rest:
            raise TranslationError(lines(m.start()), "kernel %s: cannot find its body" % name)
        ed.blank(m.start(1), m.end(1))
        k = Kernel(name, name, lines(m.start()))
        before = mask[:m.start()]
        attr = re.search(r"\[\[\s*max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)\s*\]\]\s*$", before)
        if attr:
            k.max_threads = int(attr.group(1))
            ed.blank(attr.start(), attr.end())
            before = mask[:attr.start()]
        template = re.search(r"\btemplate\s*<([^{};]*)>\s*$", before)
        parse_params(k, open_paren, close_paren)
        if rest.group(1) == ";":
            continue  # a declaration only
        body_open = close_paren + 1 + rest.start(1)
        body_close = match_close(mask, body_open)
        k.sync, k.constants = body_info(mask[body_open:body_close + 1])
        sizes = [s for pos, s in tg_decls if body_open < pos < body_close]
        k.tg_size_expr = " + ".join(sizes) if sizes else "0"
        if template:
            k.template_params = code[template.start(1):template.end(1)]
            templates[name] = k
            if sizes:
                ed.add(body_close + 1, body_close + 1,
                       " template <%s> constexpr ::std::size_t mtlemu_tg_bytes_%s() { return %s; }"
                       % (k.template_params, name, k.tg_size_expr))
            continue
        if not scopes.at_namespace_scope(m.start()):
            raise TranslationError(lines(m.start()), "kernel %s must be declared at namespace scope" % name)
        ed.add(body_close + 1, body_close + 1, " " + emit_kernel(k, display))
        kernels.append(k)

    # --- template instantiations with [[host_name("...")]]
    for m in re.finditer(r"\btemplate\s*\[\[\s*host_name\s*\(\s*\"[^\"]*\"\s*\)\s*\]\]\s*"
                         r"(?:\[\[\s*kernel\s*\]\]\s*|\bkernel\s+)?void\s+(" + IDENT + r")\s*(<[^;(]*>)?\s*\(",
                         mask):
        hn = re.search(r"\"([^\"]*)\"", code[m.start():m.end()]).group(1)
        name = m.group(1)
        if name not in templates:
            raise TranslationError(lines(m.start()), "host_name instantiation of unknown template kernel '%s'"
                                   % name)
        tk = templates[name]
        open_paren = m.end() - 1
        close_paren = match_close(mask, open_paren)
        semi = re.match(r"\s*;", mask[close_paren + 1:])
        if not semi:
            raise TranslationError(lines(m.start()), "expected ';' after the host_name instantiation")
        k = Kernel(name, hn, lines(m.start()))
        k.max_threads, k.sync, k.constants = tk.max_threads, tk.sync, tk.constants
        parse_params(k, open_paren, close_paren, blank_attrs=False)
        if m.group(2):
            args = code[m.start(2):m.end(2)]
            k.call = name + args
            k.fptr = "&" + name + args
            if tk.tg_size_expr != "0":
                k.tg_size_expr = "mtlemu_tg_bytes_%s%s()" % (name, args)
        else:
            types = []
            for decl in k.param_decls:
                types.append(re.sub(IDENT + r"\s*$", "", decl).strip())
            k.fptr = "static_cast<void (*)(%s)>(&%s)" % (", ".join(types), name)
            k.call = "(%s)" % k.fptr
            k.tg_size_expr = "0"
        end = close_paren + 1 + semi.end()
        ed.blank(m.start(), end)
        ed.add(end, end, " " + emit_kernel(k, display))
        kernels.append(k)

    body = ed.apply()
    out = ["// Generated by msl2cpp.py from %s; do not edit." % display,
           "#include <metal_stdlib>",
           "namespace {",
           "#line 1 %s" % c_string(display),
           body if body.endswith("\n") else body + "\n",
           "}  // namespace"]
    return "\n".join(out) + "\n", kernels, [p for p, _ in included]


def emit_kernel(k, display):
    """Entry wrapper, parameter tables and registrar of one kernel, on one line."""
    ident = re.sub(r"\W", "_", k.host_name)
    args = []
    for kind, key, _, _ in sorted(k.params, key=lambda p: p[3]):
        if kind == "buffer_ref":
            args.append("::mtlemu::msl::BufferRef{b[%s]}" % key)
        elif kind == "buffer_ptr":
            args.append("::mtlemu::msl::BufferPtr{b[%s]}" % key)
        elif kind == "threadgroup":
            args.append("::mtlemu::msl::BufferPtr{tg[%s]}" % key)
        elif kind == "builtin3":
            args.append("::mtlemu::msl::Builtin3{t.%s}" % key)
        else:
            args.append("::mtlemu::msl::Builtin1{t.%s}" % key)
    parts = ["static void mtlemu_entry_%s(void* const* b, void* const* tg, const ::mtlemu::rt::ThreadIds& t) "
             "{ (void)b; (void)tg; (void)t; %s(%s); }" % (ident, k.call, ", ".join(args))]
    bufs = ["{%s, ::mtlemu::msl::param_bytes<decltype(%s), %d>(), %s}" % (key, k.fptr, pos, c_string(pname))
            for kind, key, pname, pos in k.params if kind.startswith("buffer")]
    tgs = ["{%s, %s}" % (key, c_string(pname)) for kind, key, pname, _ in k.params if kind == "threadgroup"]
    consts = ["{%s, ::mtlemu::msl::data_type_of<%s>(), %s, %s}" % (idx, ty, c_string(name), "true" if opt else "false")
              for name, ty, idx, opt in k.constants]
    for label, items, ty in (("buffers", bufs, "BufferParam"), ("tgbuffers", tgs, "ThreadgroupParam"),
                             ("constants", consts, "FunctionConstantDecl")):
        if items:
            parts.append("static const ::mtlemu::rt::%s mtlemu_%s_%s[] = {%s};" % (ty, label, ident, ", ".join(items)))

    def table(label, items):
        return ("mtlemu_%s_%s, %d" % (label, ident, len(items))) if items else "nullptr, 0"
    parts.append(
        "static const ::mtlemu::rt::Registrar mtlemu_registrar_%s(::mtlemu::rt::KernelInfo{%s, %s, %d, "
        "&mtlemu_entry_%s, %s, %s, %s, %s, %s, %d});"
        % (ident, c_string(k.host_name), c_string(display), k.line, ident, "true" if k.sync else "false",
           table("buffers", bufs), table("tgbuffers", tgs), table("constants", consts),
           "static_cast<::std::size_t>(%s)" % k.tg_size_expr, k.max_threads))
    return " ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Translate a .metal file into C++ for the mtlemu shim.")
    ap.add_argument("input")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--display-name", help="file name used in #line and messages (default: the input path)")
    ap.add_argument("-I", dest="include_dirs", action="append", default=[], help="include directory")
    ap.add_argument("--depfile", help="write a Makefile-style dependency file")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    display = args.display_name or args.input
    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    try:
        out, kernels, includes = translate(args.input, text, display, args.include_dirs)
    except TranslationError as e:
        print("%s:%s: error: %s" % (display, e.line, e), file=sys.stderr)
        return 1
    old = None
    if os.path.exists(args.output):
        with open(args.output, encoding="utf-8") as f:
            old = f.read()
    if old != out:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    if args.depfile:
        deps = [args.input] + includes
        with open(args.depfile, "w", encoding="utf-8") as f:
            f.write("%s: %s\n" % (args.output.replace(" ", "\\ "), " ".join(d.replace(" ", "\\ ") for d in deps)))
    if args.verbose:
        for k in kernels:
            print("msl2cpp: %s: kernel %s (%s)" % (display, k.host_name, "fibers" if k.sync else "fast path"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
