#!/usr/bin/env python3
"""Unit tests of the .metal -> C++ generator (shim/msl2cpp.py)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "shim"))
import msl2cpp  # noqa: E402


def translate(source, name="k.metal"):
    out, kernels, _ = msl2cpp.translate(name, source, name, [])
    return out, {k.host_name: k for k in kernels}


def body_lines(out):
    """The translated source lines, numbered like the .metal file."""
    lines = out.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("#line 1 ")) + 1
    return lines[start:]


class Translation(unittest.TestCase):
    def test_lines_stay_in_place(self):
        src = ("#include <metal_stdlib>\n"
               "using namespace metal;\n"
               "kernel void k(device float* y [[buffer(0)]],\n"
               "              uint gid [[thread_position_in_grid]])\n"
               "{\n"
               "    /* a comment\n"
               "       over two lines */\n"
               "    y[gid] = float4(1.0h, 2.0f, 3, 4).x;\n"
               "}\n")
        out, kernels = translate(src)
        lines = body_lines(out)
        self.assertIn("y[gid] = ::metal::vmake<float4>(((half)1.0f), 2.0f, 3, 4).x;", lines[7])
        self.assertTrue(lines[8].startswith("} static void mtlemu_entry_k("))
        self.assertEqual(kernels["k"].line, 3)
        self.assertFalse(kernels["k"].sync)

    def test_parameters_and_builtins(self):
        src = ("kernel void k(constant P& p [[buffer(0)]], device const float4* x [[ buffer(3) ]],\n"
               "              threadgroup float* s [[threadgroup(1)]], ushort2 lid [[thread_position_in_threadgroup]],\n"
               "              uint lane [[thread_index_in_simdgroup]], uint w [[thread_execution_width]]) {}\n")
        out, kernels = translate(src)
        self.assertEqual([(p[0], p[1]) for p in kernels["k"].params],
                         [("buffer_ref", "0"), ("buffer_ptr", "3"), ("threadgroup", "1"),
                          ("builtin3", "thread_position_in_threadgroup"), ("builtin1", "thread_index_in_simdgroup"),
                          ("builtin1", "threads_per_simdgroup")])
        self.assertIn("::mtlemu::msl::BufferRef{b[0]}", out)
        self.assertIn("::mtlemu::msl::BufferPtr{tg[1]}", out)
        self.assertNotIn("[[", "\n".join(body_lines(out)[:3]).split("static void")[0])

    def test_unsupported_attribute_is_an_error_with_its_line(self):
        src = "\n\nkernel void k(texture2d<float> t [[texture(0)]]) {}\n"
        with self.assertRaises(msl2cpp.TranslationError) as e:
            translate(src)
        self.assertEqual(e.exception.line, 3)
        self.assertIn("[[texture(0)]]", str(e.exception))

    def test_parameter_without_attribute_is_an_error(self):
        with self.assertRaises(msl2cpp.TranslationError):
            translate("kernel void k(device float* y) {}\n")

    def test_sync_is_found_through_helpers(self):
        src = ("void wait_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }\n"
               "void helper() { wait_all(); }\n"
               "float reduce(float v) { return simd_sum(v); }\n"
               "kernel void a(device float* y [[buffer(0)]]) { helper(); }\n"
               "kernel void b(device float* y [[buffer(0)]]) { y[0] = reduce(y[0]); }\n"
               "kernel void c(device float* y [[buffer(0)]]) { y[0] = 1.0f; } // threadgroup_barrier( in a comment\n")
        _, kernels = translate(src)
        self.assertTrue(kernels["a"].sync)
        self.assertTrue(kernels["b"].sync)
        self.assertFalse(kernels["c"].sync)

    def test_function_constants(self):
        src = ("constant bool kA [[function_constant(0)]];\n"
               "constant float kB [[function_constant(1)]];\n"
               "constant bool kNotA = !kA;\n"
               "float f(float v) { return kA ? v * kB : v; }\n"
               "kernel void k(device float* y [[buffer(0)]]) {\n"
               "    if (kNotA && is_function_constant_defined(kB)) y[0] = f(y[0]);\n"
               "    y[1] = p.kA;\n"
               "}\n"
               "kernel void unrelated(device float* y [[buffer(0)]]) { y[0] = 0; }\n")
        out, kernels = translate(src)
        lines = body_lines(out)
        self.assertEqual(lines[0].strip(), "")
        self.assertIn("function_constant<bool>(0, \"kA\"", lines[3])
        self.assertIn("static_cast<bool>(!(::mtlemu::msl::function_constant<bool>(0", lines[5])
        self.assertIn("function_constant_defined(1)", lines[5])
        self.assertIn("y[1] = p.kA;", lines[6])  # members of the same name are left alone
        self.assertEqual([(c[0], c[3]) for c in kernels["k"].constants], [("kA", False), ("kB", True)])
        self.assertEqual(kernels["unrelated"].constants, [])

    def test_threadgroup_declarations(self):
        src = ("kernel void k(device float* y [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {\n"
               "    threadgroup float tile[16][17], row[4];\n"
               "    threadgroup atomic_uint counter;\n"
               "    threadgroup float* p = tile[0];\n"
               "}\n")
        out, kernels = translate(src)
        lines = body_lines(out)
        self.assertIn("auto& tile = ::mtlemu::msl::threadgroup_var<float[16][17]>(", lines[1])
        self.assertIn("auto& row = ::mtlemu::msl::threadgroup_var<float[4]>(", lines[1])
        self.assertIn("threadgroup_var<atomic_uint>(", lines[2])
        self.assertIn("threadgroup float* p = tile[0];", lines[3])
        self.assertEqual(kernels["k"].tg_size_expr, "sizeof(float[16][17]) + sizeof(float[4]) + sizeof(atomic_uint)")

    def test_template_kernels_with_host_names(self):
        src = ("template <typename T>\n"
               "kernel void add(device T* a [[buffer(0)]], uint i [[thread_position_in_grid]]) { a[i] += T(1); }\n"
               "template [[host_name(\"add_f\")]] kernel void add<float>(device float* a [[buffer(0)]],\n"
               "    uint i [[thread_position_in_grid]]);\n"
               "template [[host_name(\"add_i\")]] kernel void add(device int* a [[buffer(0)]], uint i [[thread_position_in_grid]]);\n")
        out, kernels = translate(src)
        self.assertEqual(sorted(kernels), ["add_f", "add_i"])
        self.assertEqual(kernels["add_f"].call, "add<float>")
        self.assertIn("static_cast<void (*)(device int*, uint)>(&add)", kernels["add_i"].fptr)
        lines = body_lines(out)
        self.assertIn("mtlemu_entry_add_f", lines[3])  # after the instantiation, on its last line
        self.assertIn("mtlemu_entry_add_i", lines[4])

    def test_kernels_in_namespaces_and_max_threads(self):
        src = ("namespace outer {\n"
               "[[max_total_threads_per_threadgroup(128)]]\n"
               "kernel void k(device float* y [[buffer(0)]]) {}\n"
               "}\n")
        out, kernels = translate(src)
        self.assertEqual(kernels["k"].max_threads, 128)
        self.assertIn("128});", out)

    def test_declarations_are_not_constructor_calls(self):
        out, _ = translate("float4 scale(float4 v) { float4 r(2.0f); return v * r; }\n")
        self.assertIn("float4 scale(float4 v) { float4 r(2.0f);", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
