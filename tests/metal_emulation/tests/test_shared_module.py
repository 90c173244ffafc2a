#!/usr/bin/env python3
"""The emulation inside a dlopen'ed shared module (as in a Python extension),
driven through ctypes, including the C test hooks."""
import ctypes
import sys
import unittest

MODULE = sys.argv.pop(1) if len(sys.argv) > 1 else None


class SharedModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = ctypes.CDLL(MODULE)
        cls.lib.emu_module_saxpy.restype = ctypes.c_int
        cls.lib.emu_module_saxpy.argtypes = [ctypes.c_float, ctypes.POINTER(ctypes.c_float),
                                             ctypes.POINTER(ctypes.c_float), ctypes.c_int]
        cls.lib.emu_module_last_error.restype = ctypes.c_char_p
        cls.lib.mtlemu_trace_count.restype = ctypes.c_size_t
        cls.lib.mtlemu_trace_count.argtypes = [ctypes.c_char_p]

    def saxpy(self, a, x, y):
        n = len(x)
        bx = (ctypes.c_float * n)(*x)
        by = (ctypes.c_float * n)(*y)
        status = self.lib.emu_module_saxpy(a, bx, by, n)
        return status, list(by)

    def test_kernels_run_inside_the_module(self):
        status, y = self.saxpy(2.0, [1.0] * 100, [0.5] * 100)
        self.assertEqual(status, 4)  # MTLCommandBufferStatusCompleted
        self.assertEqual(y, [2.5] * 100)
        self.assertGreaterEqual(self.lib.mtlemu_trace_count(b"-[MTLFakeCommandBuffer commit]"), 1)

    def test_failure_injection_through_the_c_hooks(self):
        self.lib.mtlemu_fail_next_command_buffer(b"injected from Python")
        status, y = self.saxpy(2.0, [1.0] * 8, [0.0] * 8)
        self.assertEqual(status, 5)  # MTLCommandBufferStatusError
        self.assertEqual(self.lib.emu_module_last_error(), b"injected from Python")
        self.assertEqual(y, [0.0] * 8)


if __name__ == "__main__":
    unittest.main(verbosity=2)
