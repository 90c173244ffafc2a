# Sourced by .ci/run: the Metal backend compiled and executed on Linux (docs/metal.md).
#  1. the harness's own tests, including its planted faults, under ASan + UBSan;
#  2. the project built with -DMPSGRAD_METAL_EMULATION=ON (clang 16): ctest runs the backend-op
#     tests against the CPU backend and the address-space check of every metal/*.metal file;
#  3. the whole pytest suite on Device("metal") and Device("cpu") with that build's extension.

emulation_harness_tests() {
    cmake -S tests/metal_emulation -B build/ci-emu-harness -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 \
        -DMPSGRAD_EMU_SANITIZE=ON >/dev/null
    cmake --build build/ci-emu-harness
    ctest --test-dir build/ci-emu-harness --output-on-failure -j2 | tail -n 5
}

emulation_build() {
    cmake -S . -B build/ci-metal -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-16 \
        -DMPSGRAD_METAL_EMULATION=ON -DMPSGRAD_TESTS=ON -DMPSGRAD_PYTHON=ON \
        -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
    cmake --build build/ci-metal
}

emulation_ctest() {
    ctest --test-dir build/ci-metal --output-on-failure -j2 | tail -n 5
}

emulation_pytest() {
    # The package from the source tree plus the emulation build's extension module.
    rm -rf build/ci-metal/pkg && mkdir -p build/ci-metal/pkg
    cp -r python/mpsgrad build/ci-metal/pkg/
    cp build/ci-metal/_mpsgrad*.so build/ci-metal/pkg/mpsgrad/
    PYTHONPATH="$root/build/ci-metal/pkg" MPSGRAD_TEST_DEVICES=metal,cpu python3 -m pytest tests/python -q
}

stage "metal emulation: harness tests (ASan+UBSan)" emulation_harness_tests
stage "metal emulation: build" emulation_build
stage "metal emulation: ctest (backend ops, address-space check)" emulation_ctest
stage "metal emulation: pytest on metal and cpu" emulation_pytest
