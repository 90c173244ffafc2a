# Sourced by .ci/run: one build of the project with AddressSanitizer + UndefinedBehaviorSanitizer
# (clang 16, the Metal emulation on, docs/verification.md "Robustness and fuzzing") serves two runs:
#  1. the C++ suite (every backend op on the CPU and on the emulated Metal device) with exactly
#     sized MTLBuffers, so an overrun in a .metal kernel is reported at its .metal line;
#  2. the Python suite, the API fuzz test included, against the same build's extension. Python
#     itself is not instrumented, so the ASan runtime is preloaded and leak detection is off (the
#     interpreter's own allocations would be reported at exit).
# Debug info is line tables only: enough for file:line in every report, and much faster to build.
# No link-time optimization: pybind11 adds -flto to the extension by default, and clang's full-LTO
# link of the sanitized module ran single-threaded for minutes; defining
# CMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF tells pybind11 to leave it out.
# The bindings and the C++ tests compile at -O0 (MPSGRAD_UNOPTIMIZED_GLUE): at -O1 with both
# sanitizers, optimizing the pybind11 code was over half of this build's compile time.
# The race detector is off here: it runs in the coverage build (.ci/metal_emulation.sh).

sanitizer_build() {
    cmake -S . -B build/ci-asan -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++-16 \
        -DMPSGRAD_METAL_EMULATION=ON -DMPSGRAD_TESTS=ON -DMPSGRAD_PYTHON=ON -DMPSGRAD_METAL_RACECHECK=OFF \
        -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DMPSGRAD_UNOPTIMIZED_GLUE=ON \
        -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
        -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
        -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
        -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
    cmake --build build/ci-asan
    rm -rf build/ci-asan/pkg && mkdir -p build/ci-asan/pkg
    cp -r python/mpsgrad build/ci-asan/pkg/
    cp build/ci-asan/_mpsgrad*.so build/ci-asan/pkg/mpsgrad/
}

sanitizer_options() {
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    export ASAN_SYMBOLIZER_PATH
    ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer-16)"
}

sanitizer_ctest() {
    (sanitizer_options && MPSGRAD_METAL_EXACT_BUFFERS=1 \
        ctest --test-dir build/ci-asan --output-on-failure -j2 | tail -n 3)
}

# Runs "$@" with the sanitized extension first on the path and clang's ASan runtime preloaded
# (libstdc++ too: the python binary does not link it, and ASan's __cxa_throw interceptor must find
# the real one when it starts, or the first C++ exception aborts).
with_sanitizers() {
    (sanitizer_options &&
        LD_PRELOAD="$(clang++-16 -print-runtime-dir)/libclang_rt.asan-x86_64.so $(gcc -print-file-name=libstdc++.so)" \
        MPSGRAD_POISON_UNSPECIFIED_BUFFERS=1 PYTHONPATH="$root/build/ci-asan/pkg" "$@")
}

sanitizer_pytest() {
    # The CPU device (the emulated Metal device's Python runs are in the coverage build's stage).
    with_sanitizers env MPSGRAD_TEST_DEVICES=cpu python3 -m pytest tests/python -q -x
}

stage "sanitizers: build with ASan+UBSan (clang, Metal emulation, extension)" sanitizer_build
stage "sanitizers: ctest with exact Metal buffers under ASan+UBSan" sanitizer_ctest
stage "sanitizers: pytest (incl. the API fuzz test) under ASan+UBSan" sanitizer_pytest
