# Sourced by .ci/run: the Metal backend compiled and executed on Linux (docs/metal.md).
#  1. the harness's own tests, including its planted faults, under ASan + UBSan;
#  2. the project built with -DMPSGRAD_METAL_EMULATION=ON (clang 16): ctest runs the backend-op
#     tests against the CPU backend and the address-space check of every metal/*.metal file;
#  3. the whole pytest suite on Device("metal") and Device("cpu") with that build's extension;
#  4. coverage: that build instruments the translated kernels (-DMPSGRAD_METAL_COVERAGE=ON), the
#     ctest and pytest runs write profiles and the kernel variants they dispatch, and
#     metal_coverage.py prints "metal line coverage" and "kernel variants exercised", failing below
#     95 % of the .metal lines or below every variant the host can request;
#  5. planted kernel bugs (coverage/planted_bugs.py): each is translated into that build in turn
#     and the C++ tests that must catch it have to fail (lane 31 dropped from a simd_sum, a max
#     taken from one lane only).
#  6. the MSL-subset check and the race detector with random thread order.
# ASan + UBSan with exact buffers runs in .ci/sanitizers.sh (one clang build serves both the C++
# tests and the Python suite there).

emulation_harness_tests() {
    # libclang (PyPI) for the MSL-subset checker and its planted-violation tests.
    python3 -m pip install -q libclang==18.1.1
    cmake -S tests/metal_emulation -B build/ci-emu-harness -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 \
        -DMPSGRAD_EMU_SANITIZE=ON >/dev/null
    cmake --build build/ci-emu-harness
    ctest --test-dir build/ci-emu-harness --output-on-failure -j2 | tail -n 5
}

# The bindings and the C++ tests at -O0 and no link-time optimization: the kernels and the library
# keep -O3, the glue around them only has to compile quickly (CMakeLists.txt, MPSGRAD_UNOPTIMIZED_GLUE).
emulation_build() {
    cmake -S . -B build/ci-metal -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-16 \
        -DMPSGRAD_METAL_EMULATION=ON -DMPSGRAD_TESTS=ON -DMPSGRAD_PYTHON=ON -DMPSGRAD_METAL_COVERAGE=ON \
        -DMPSGRAD_UNOPTIMIZED_GLUE=ON -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
        -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
    cmake --build build/ci-metal
}

# Where the test processes of the coverage build leave their profiles and variant logs.
coverage_dir="$root/build/ci-metal/coverage"
# The same runs are also the race check: the detector and seeded random thread/lane order are on
# for every Metal test of the ctest and pytest suites (docs/metal.md, "Races"; the seed is printed).
race_seed=${MTLEMU_RANDOM_ORDER:-$((RANDOM * 32768 + RANDOM + 1))}
echo "random thread/lane order seed: $race_seed (MTLEMU_RANDOM_ORDER=$race_seed repeats this run)"
export_coverage_env() {
    export LLVM_PROFILE_FILE="$coverage_dir/%4m.profraw" MTLEMU_VARIANT_LOG="$coverage_dir/variants.log"
    export MTLEMU_RACECHECK=1 MTLEMU_RANDOM_ORDER=$race_seed
}

emulation_ctest() {
    rm -rf "$coverage_dir" && mkdir -p "$coverage_dir"
    (export_coverage_env && ctest --test-dir build/ci-metal --output-on-failure -j2 | tail -n 5)
}

# Left out here, run in the README and sanitizer stages: the files and tests that never create a
# Metal device (malformed serialized bytes, the benchmark smoke run, the CPU comparison script, the
# data-parallel workers), which take about a third of the CPU suite's time and test nothing of the
# emulation build. Both devices: the CPU half costs little (a Metal-only run took 173 s at stop 24,
# the run on both 165-177 s at stop 23), and it runs the CPU backend as clang -O3 builds it.
emulation_pytest() {
    # The package from the source tree plus the emulation build's extension module.
    rm -rf build/ci-metal/pkg && mkdir -p build/ci-metal/pkg
    cp -r python/mpsgrad build/ci-metal/pkg/
    cp build/ci-metal/_mpsgrad*.so build/ci-metal/pkg/mpsgrad/
    (export_coverage_env &&
        PYTHONPATH="$root/build/ci-metal/pkg" MPSGRAD_TEST_DEVICES=metal,cpu MPSGRAD_POISON_UNSPECIFIED_BUFFERS=1 \
            python3 -m pytest tests/python -q --ignore=tests/python/test_serialization_format.py \
                --ignore=tests/python/test_benchmarks.py --ignore=tests/python/test_distributed.py \
                --deselect=tests/python/test_examples.py::test_compare_pytorch_prints_both_runs)
}

emulation_coverage() {
    python3 tests/metal_emulation/coverage/metal_coverage.py --build build/ci-metal --profiles "$coverage_dir" \
        --variant-log "$coverage_dir/variants.log" --min-lines 95
}

emulation_msl_subset_check() {
    # Every kernel and every shared header through clang's AST: no double, recursion, function
    # pointers, goto, VLAs, exceptions, C-style vector casts, bit-casting vector conversions.
    python3 tests/metal_emulation/mslcheck/msl_subset_check.py --clang clang++-16 metal/*.metal metal/*.h
}

stage "metal emulation: harness tests (ASan+UBSan)" emulation_harness_tests
stage "metal emulation: MSL-subset check (libclang AST)" emulation_msl_subset_check
stage "metal emulation: build" emulation_build
stage "metal emulation: ctest (backend ops, address-space check; race check on)" emulation_ctest
stage "metal emulation: pytest on metal and cpu (race check on)" emulation_pytest
stage "metal emulation: .metal line coverage and kernel variants" emulation_coverage
stage "metal emulation: planted kernel bugs are caught" \
    python3 tests/metal_emulation/coverage/planted_bugs.py --build build/ci-metal
