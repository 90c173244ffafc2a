# Sourced by .ci/run: the Python extension built with AddressSanitizer + UndefinedBehaviorSanitizer
# (gcc), then the Python suite and the API fuzz test run against it (docs/verification.md,
# "Robustness and fuzzing"). Python itself is not instrumented, so libasan is preloaded and leak
# detection is off (the interpreter's own allocations would be reported at exit).
# Debug info is line tables only (-g1): enough for file:line in every report, and it builds
# much faster than full -g. Link-time optimization is off: pybind11_add_module turns it on for
# every build type but Debug, and under the sanitizers the LTO link alone took 270 s.

sanitizer_build() {
    cmake -S . -B build/ci-asan -G Ninja -DCMAKE_BUILD_TYPE=None -DMPSGRAD_TESTS=OFF -DMPSGRAD_PYTHON=ON \
        -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
        -DCMAKE_CXX_FLAGS="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
        -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
        -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
    cmake --build build/ci-asan --target _mpsgrad
    rm -rf build/ci-asan/pkg && mkdir -p build/ci-asan/pkg
    cp -r python/mpsgrad build/ci-asan/pkg/
    cp build/ci-asan/_mpsgrad*.so build/ci-asan/pkg/mpsgrad/
}

# Runs "$@" with the sanitized extension first on the path and the ASan runtime preloaded
# (libstdc++ too: the python binary does not link it, and ASan's __cxa_throw interceptor must find
# the real one when it starts, or the first C++ exception aborts).
with_sanitizers() {
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        MPSGRAD_POISON_UNSPECIFIED_BUFFERS=1 PYTHONPATH="$root/build/ci-asan/pkg" "$@"
}

sanitizer_pytest() {
    with_sanitizers python3 -m pytest tests/python -q -x
}

stage "sanitizers: build the extension with ASan+UBSan (gcc)" sanitizer_build
stage "sanitizers: pytest (incl. the API fuzz test) under ASan+UBSan" sanitizer_pytest
