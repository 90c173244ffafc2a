#!/usr/bin/env python3
"""Unit tests of metal_coverage.py's mapping and kernel_variants.py's rules (no build needed)."""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_variants  # noqa: E402
import metal_coverage  # noqa: E402


class Mapping(unittest.TestCase):
    def test_translated_lines_move_back_to_the_metal_source_and_headers_keep_theirs(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "metal"))
            os.makedirs(os.path.join(root, "build", "k.msl"))
            with open(os.path.join(root, "metal", "k.metal"), "w") as f:
                f.write("line1\nline2\nline3\n")
            with open(os.path.join(root, "metal", "h.h"), "w") as f:
                f.write("a\nb\n")
            gen = os.path.join(root, "build", "k.msl", "metal_k_metal.cpp")
            with open(gen, "w") as f:
                f.write('// generated\n#include <metal_stdlib>\nnamespace {\n#line 1 "metal/k.metal"\n'
                        "line1\nline2\nline3\n}  // namespace\n")
            generated = metal_coverage.generated_map(os.path.join(root, "build"))
            self.assertEqual(generated, {os.path.realpath(gen): ("metal/k.metal", 4)})
            lcov = "\n".join([
                "SF:" + gen, "DA:5,3", "DA:6,0", "DA:7,1", "DA:8,9", "end_of_record",   # 8: the closing namespace
                "SF:" + os.path.join(root, "metal", "h.h"), "DA:2,4", "end_of_record",
                "SF:/usr/include/c++/cmath", "DA:10,1", "end_of_record",
                "SF:" + gen, "DA:6,2", "end_of_record",                                  # another binary
            ])
            counts = metal_coverage.map_lcov(lcov, generated, root)
            self.assertEqual(dict(counts), {"metal/k.metal": {1: 3, 2: 2, 3: 1}, "metal/h.h": {2: 4}})


class Variants(unittest.TestCase):
    def test_rules_remove_only_unreachable_combinations(self):
        self.assertTrue(kernel_variants._unreachable("arithmetic_forward", {"kAlignedState": 1, "kStateMode": 0}))
        self.assertFalse(kernel_variants._unreachable("arithmetic_forward", {"kAlignedState": 1, "kStateMode": 2}))
        add_primary = {"kOp": 0, "kForSecondary": 0, "kAlignedPrimary": 0, "kAlignedSecondary": 1,
                       "kAlignedState": 0, "kStateMode": 0}
        self.assertTrue(kernel_variants._unreachable("arithmetic_gradient_direct", add_primary))
        divide_secondary = dict(add_primary, kOp=3, kForSecondary=1, kAlignedPrimary=1)
        self.assertFalse(kernel_variants._unreachable("arithmetic_gradient_reduce", divide_secondary))

    def test_the_space_of_the_project_kernels(self):
        keys = kernel_variants.all_variants(os.path.join(HERE, "..", "..", "..", "metal"))
        self.assertIn("fill_floats\tkAlignedDestination=0", keys)
        per_kernel = {}
        for k in keys:
            name = k.split("\t")[0]
            per_kernel[name] = per_kernel.get(name, 0) + 1
        self.assertEqual(per_kernel["convolution_forward"], 16 * 16)   # neuron types x 4 aligned flags
        self.assertEqual(per_kernel["compare_forward"], 6 * 8)
        self.assertEqual(per_kernel["pooling_forward"], 3 * 4)          # max/average/L2 x 2 aligned flags
        self.assertEqual(per_kernel["pooling_gradient"], 2 * 8 + 4)     # average reads no source
        self.assertNotIn("pooling_gradient\tkAlignedDestination=0,kAlignedGradient=0,kAlignedSource=1,"
                         "kPoolingMode=1", keys)
        self.assertEqual(per_kernel["upsampling_forward"], 2 * 4)
        self.assertEqual(per_kernel["upsampling_gradient"], 2 * 4)
        self.assertEqual(per_kernel["dropout_apply"], 4)
        for name in ("batch_normalization_statistics", "batch_normalization_forward",
                     "batch_normalization_statistics_gradient", "batch_normalization_gradient",
                     "group_normalization_forward", "group_normalization_gradient"):
            self.assertEqual(per_kernel[name], 1)                       # no function constants
            self.assertIn(name + "\t", keys)


if __name__ == "__main__":
    unittest.main()
