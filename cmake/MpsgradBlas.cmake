# The BLAS the CPU backend's GEMM-shaped work runs on (DESIGN.md: never a hand-rolled GEMM).
#
#   Apple:  Accelerate (cblas_sgemm), always present.
#   Linux:  OpenBLAS from the `scipy-openblas32` PyPI wheel, the BLAS NumPy and SciPy build
#           against (runtime-dispatched kernels for every x86-64 and arm64 generation). Its
#           symbols carry a `scipy_` prefix. pyproject.toml lists it as a build and a runtime
#           dependency, so `pip install .` provides it; for a plain CMake build install it with
#           `pip install scipy-openblas32`, or point MPSGRAD_OPENBLAS_ROOT at an unpacked copy
#           of the package directory (the one holding include/ and lib/).
#
# It is required: without it the configure step stops with a message saying how to get it.
# Defines the imported target mpsgrad::blas, with MPSGRAD_BLAS_ACCELERATE or
# MPSGRAD_BLAS_SCIPY_OPENBLAS in its compile definitions (read by backend/cpu/blas.cpp).

if(TARGET mpsgrad::blas)
  return()
endif()

if(APPLE)
  find_library(MPSGRAD_ACCELERATE_FRAMEWORK Accelerate REQUIRED)
  add_library(mpsgrad::blas INTERFACE IMPORTED)
  set_target_properties(mpsgrad::blas PROPERTIES
    INTERFACE_LINK_LIBRARIES "${MPSGRAD_ACCELERATE_FRAMEWORK}"
    INTERFACE_COMPILE_DEFINITIONS "MPSGRAD_BLAS_ACCELERATE;ACCELERATE_NEW_LAPACK")
  message(STATUS "mpsgrad BLAS: Accelerate")
  return()
endif()

set(MPSGRAD_OPENBLAS_ROOT "" CACHE PATH
    "Directory of the scipy_openblas32 Python package (holding include/ and lib/); empty: ask Python")

set(_mpsgrad_openblas_root "${MPSGRAD_OPENBLAS_ROOT}")
if(NOT _mpsgrad_openblas_root)
  # The interpreter the extension is built for (scikit-build-core sets Python_EXECUTABLE),
  # else any python3 on the path.
  if(NOT Python_EXECUTABLE)
    find_package(Python 3.9 COMPONENTS Interpreter)
  endif()
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
              "import os, scipy_openblas32 as s; print(os.path.dirname(s.get_lib_dir()), end='')"
      OUTPUT_VARIABLE _mpsgrad_openblas_root
      ERROR_QUIET
      RESULT_VARIABLE _mpsgrad_openblas_status)
    if(NOT _mpsgrad_openblas_status EQUAL 0)
      set(_mpsgrad_openblas_root "")
    endif()
  endif()
endif()

if(_mpsgrad_openblas_root)
  find_path(MPSGRAD_OPENBLAS_INCLUDE_DIR cblas.h PATHS "${_mpsgrad_openblas_root}/include" NO_DEFAULT_PATH)
  find_library(MPSGRAD_OPENBLAS_LIBRARY scipy_openblas PATHS "${_mpsgrad_openblas_root}/lib" NO_DEFAULT_PATH)
endif()

if(NOT MPSGRAD_OPENBLAS_INCLUDE_DIR OR NOT MPSGRAD_OPENBLAS_LIBRARY)
  message(FATAL_ERROR
    "mpsgrad needs OpenBLAS from the scipy-openblas32 Python package for its CPU backend, and "
    "did not find it (looked in '${_mpsgrad_openblas_root}', Python: '${Python_EXECUTABLE}').\n"
    "Install it into the Python you build with:  python3 -m pip install scipy-openblas32\n"
    "or pass -DMPSGRAD_OPENBLAS_ROOT=<site-packages>/scipy_openblas32 (`pip install .` does this for you).")
endif()

add_library(mpsgrad::blas SHARED IMPORTED)
set_target_properties(mpsgrad::blas PROPERTIES
  IMPORTED_LOCATION "${MPSGRAD_OPENBLAS_LIBRARY}"
  IMPORTED_SONAME "libscipy_openblas.so"
  INTERFACE_INCLUDE_DIRECTORIES "${MPSGRAD_OPENBLAS_INCLUDE_DIR}"
  INTERFACE_COMPILE_DEFINITIONS "MPSGRAD_BLAS_SCIPY_OPENBLAS")
message(STATUS "mpsgrad BLAS: scipy-openblas32 (${MPSGRAD_OPENBLAS_LIBRARY})")
