# MetalEmulation.cmake -- build and test Metal host code and .metal kernels on Linux.
#
# include() this file (the top-level project does so when MPSGRAD_METAL_EMULATION=ON).
# It provides:
#
#   MPSGRAD_METAL_CPP_INCLUDE_DIR   Apple's metal-cpp headers (Foundation/, Metal/, QuartzCore/),
#                                   from -DMETAL_CPP_DIR=... or fetched from the PyPI sdist
#                                   pymetal-cpp==0.1.5 into <build>/_deps/metal-cpp (cached).
#   mpsgrad_metal_cpp               INTERFACE target: the Linux stub headers + metal-cpp include
#                                   dirs, -fblocks, and the Blocks runtime. Link it to compile
#                                   metal-cpp host code.
#   mpsgrad_metal_mock              STATIC library (position-independent, so it can go into a
#                                   Python extension module): the mock Objective-C runtime, the
#                                   fake Metal device, the kernel runtime and the test hooks
#                                   (#include "mtlemu/mtlemu.h"). Links mpsgrad_metal_cpp.
#   mpsgrad_add_emulated_metal_kernels(<target> [INCLUDE_DIRECTORIES dir...] [DISPLAY_ROOT dir]
#                                      [RUNTIME <mock target>] file.metal...)
#                                   Translates the .metal files at build time (msl2cpp.py) and
#                                   compiles them into the OBJECT library <target>. Link <target>
#                                   straight into the final executable or module, so that the
#                                   kernels' self-registration is not dropped by the linker.
#                                   Messages and debug info name each file relative to
#                                   DISPLAY_ROOT (default: CMAKE_SOURCE_DIR). RUNTIME replaces
#                                   mpsgrad_metal_mock (e.g. by a sanitizer build of its sources,
#                                   MPSGRAD_METAL_MOCK_SOURCES).
#   mpsgrad_add_metal_address_space_check(<test-name> [INCLUDE_DIRECTORIES dir...]
#                                         [EXPECT_ERRORS] file.metal...)
#                                   Adds one ctest that runs the address-space check
#                                   (aspcheck/msl_aspcheck.py) on every file.
#
# Requirements: clang (14 or newer; 16 tested) as the C++ compiler, on x86-64 Linux; Python 3;
# libBlocksRuntime (Debian: libblocksruntime-dev). ASan/UBSan builds need libclang-rt-16-dev.

include_guard(GLOBAL)

set(MPSGRAD_METAL_EMULATION_DIR "${CMAKE_CURRENT_LIST_DIR}")

# ---------------------------------------------------------------------------- requirements
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR
    "The Metal emulation needs clang as the C++ compiler (found ${CMAKE_CXX_COMPILER_ID}): "
    "metal-cpp uses Apple blocks (-fblocks) and the kernel shim uses clang's ext_vector_type. "
    "Configure with -DCMAKE_CXX_COMPILER=clang++-16 (Debian: apt-get install clang-16).")
endif()
if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 14)
  message(FATAL_ERROR "The Metal emulation needs clang 14 or newer (found ${CMAKE_CXX_COMPILER_VERSION}).")
endif()
if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  message(FATAL_ERROR
    "The Metal emulation runs on x86-64 Linux only (its objc_msgSend is x86-64 System V assembly); "
    "this is ${CMAKE_SYSTEM_NAME}/${CMAKE_SYSTEM_PROCESSOR}.")
endif()

find_package(Python3 COMPONENTS Interpreter REQUIRED)
find_package(Threads REQUIRED)

find_path(MPSGRAD_BLOCKS_INCLUDE_DIR Block.h)
find_library(MPSGRAD_BLOCKS_RUNTIME_LIBRARY NAMES BlocksRuntime)
if(NOT MPSGRAD_BLOCKS_INCLUDE_DIR OR NOT MPSGRAD_BLOCKS_RUNTIME_LIBRARY)
  message(FATAL_ERROR
    "The Metal emulation needs the Blocks runtime (Block.h and libBlocksRuntime); "
    "Debian: apt-get install libblocksruntime-dev")
endif()

# -------------------------------------------------------------------------------- metal-cpp
set(METAL_CPP_DIR "" CACHE PATH
  "Extracted Apple metal-cpp (the folder with Foundation/ and Metal/); empty: fetch pymetal-cpp from PyPI")
if(NOT MPSGRAD_METAL_CPP_INCLUDE_DIR OR NOT EXISTS "${MPSGRAD_METAL_CPP_INCLUDE_DIR}/Metal/Metal.hpp"
   OR NOT "${METAL_CPP_DIR}" STREQUAL "${_MPSGRAD_METAL_CPP_FROM}")
  set(_fetch_args --dest "${CMAKE_BINARY_DIR}/_deps/metal-cpp")
  if(METAL_CPP_DIR)
    list(APPEND _fetch_args --metal-cpp-dir "${METAL_CPP_DIR}")
  endif()
  message(STATUS "Metal emulation: locating metal-cpp")
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" "${MPSGRAD_METAL_EMULATION_DIR}/fetch_metal_cpp.py" ${_fetch_args}
    RESULT_VARIABLE _fetch_result
    OUTPUT_VARIABLE _fetch_output
    ERROR_VARIABLE _fetch_error
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _fetch_result EQUAL 0)
    message(FATAL_ERROR "Could not get the metal-cpp headers:\n${_fetch_error}\n"
      "Pass -DMETAL_CPP_DIR=<extracted metal-cpp> to build offline.")
  endif()
  string(REGEX REPLACE ".*\n" "" _fetch_output "${_fetch_output}")  # the last line is the path
  set(MPSGRAD_METAL_CPP_INCLUDE_DIR "${_fetch_output}" CACHE INTERNAL "metal-cpp include directory")
  set(_MPSGRAD_METAL_CPP_FROM "${METAL_CPP_DIR}" CACHE INTERNAL "METAL_CPP_DIR the include dir came from")
endif()
message(STATUS "Metal emulation: metal-cpp in ${MPSGRAD_METAL_CPP_INCLUDE_DIR}")

if(NOT TARGET mpsgrad_metal_cpp)
  add_library(mpsgrad_metal_cpp INTERFACE)
  target_include_directories(mpsgrad_metal_cpp SYSTEM INTERFACE
    "${MPSGRAD_METAL_EMULATION_DIR}/stubs"
    "${MPSGRAD_METAL_CPP_INCLUDE_DIR}"
    "${MPSGRAD_BLOCKS_INCLUDE_DIR}")
  target_compile_options(mpsgrad_metal_cpp INTERFACE -fblocks)
  target_compile_features(mpsgrad_metal_cpp INTERFACE cxx_std_17)
  target_link_libraries(mpsgrad_metal_cpp INTERFACE "${MPSGRAD_BLOCKS_RUNTIME_LIBRARY}" ${CMAKE_DL_LIBS})
endif()

# ---------------------------------------------------------------------- mock runtime library
set(MPSGRAD_METAL_MOCK_SOURCES
  "${MPSGRAD_METAL_EMULATION_DIR}/mock/src/objc_runtime.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/mock/src/foundation.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/mock/src/metal_device.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/mock/src/metal_commands.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/mock/src/device_config.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/shim/runtime/kernel_runtime.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/shim/runtime/race_detector.cpp"
  "${MPSGRAD_METAL_EMULATION_DIR}/shim/runtime/random_order.cpp")

# Code that runs on kernel fibers (kernels, the kernel runtime) is compiled
# without AddressSanitizer's use-after-return instrumentation: its "fake
# stacks" would be created and destroyed for every GPU thread (no effect
# without -fsanitize=address).
set(MPSGRAD_METAL_FIBER_COMPILE_OPTIONS -fsanitize-address-use-after-return=never -Wno-unused-command-line-argument)

# Translated kernels call the race detector (shim/runtime/race_detector.cpp) on every load and
# store; it does nothing unless MTLEMU_RACECHECK=1. Line tables name the .metal lines of a race.
option(MPSGRAD_METAL_RACECHECK "Instrument emulated kernels for the race detector" ON)
set(MPSGRAD_METAL_KERNEL_INSTRUMENTATION)
if(MPSGRAD_METAL_RACECHECK)
  set(MPSGRAD_METAL_KERNEL_INSTRUMENTATION -fsanitize-coverage=edge,trace-loads,trace-stores -gline-tables-only)
  # pybind11 strips Release extension modules (when CMAKE_STRIP is set); the race detector needs
  # the kernels' line tables to name .metal lines.
  set(CMAKE_STRIP "")
endif()

if(NOT TARGET mpsgrad_metal_mock)
  add_library(mpsgrad_metal_mock STATIC ${MPSGRAD_METAL_MOCK_SOURCES})
  set_target_properties(mpsgrad_metal_mock PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(mpsgrad_metal_mock
    PUBLIC "${MPSGRAD_METAL_EMULATION_DIR}/mock/include" "${MPSGRAD_METAL_EMULATION_DIR}/shim/include"
    PRIVATE "${MPSGRAD_METAL_EMULATION_DIR}/mock/src")
  target_link_libraries(mpsgrad_metal_mock PUBLIC mpsgrad_metal_cpp Threads::Threads)
  target_compile_options(mpsgrad_metal_mock PRIVATE -Wall -Wextra ${MPSGRAD_METAL_FIBER_COMPILE_OPTIONS})
endif()

# ------------------------------------------------------------------------- emulated kernels
function(mpsgrad_add_emulated_metal_kernels target)
  cmake_parse_arguments(ARG "" "DISPLAY_ROOT;RUNTIME" "INCLUDE_DIRECTORIES" ${ARGN})
  if(NOT ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "mpsgrad_add_emulated_metal_kernels(${target}): no .metal files given")
  endif()
  if(NOT ARG_RUNTIME)
    set(ARG_RUNTIME mpsgrad_metal_mock)
  endif()
  if(NOT ARG_DISPLAY_ROOT)
    set(ARG_DISPLAY_ROOT "${CMAKE_SOURCE_DIR}")
  endif()
  set(_generator "${MPSGRAD_METAL_EMULATION_DIR}/shim/msl2cpp.py")
  set(_outputs)
  set(_include_dirs ${ARG_INCLUDE_DIRECTORIES})
  foreach(_file IN LISTS ARG_UNPARSED_ARGUMENTS)
    get_filename_component(_abs "${_file}" ABSOLUTE)
    get_filename_component(_dir "${_abs}" DIRECTORY)
    file(RELATIVE_PATH _display "${ARG_DISPLAY_ROOT}" "${_abs}")
    string(REGEX REPLACE "[^A-Za-z0-9_]" "_" _stem "${_display}")
    set(_out "${CMAKE_CURRENT_BINARY_DIR}/${target}.msl/${_stem}.cpp")
    set(_incs "-I" "${_dir}")
    foreach(_inc IN LISTS ARG_INCLUDE_DIRECTORIES)
      get_filename_component(_inc "${_inc}" ABSOLUTE)
      list(APPEND _incs "-I" "${_inc}")
    endforeach()
    # The generator reads the file and its quoted includes (to see which kernels
    # need fibers); depend on the headers next to it and in the include dirs.
    file(GLOB _headers CONFIGURE_DEPENDS "${_dir}/*.h" "${_dir}/*.hpp")
    foreach(_inc IN LISTS ARG_INCLUDE_DIRECTORIES)
      file(GLOB _more CONFIGURE_DEPENDS "${_inc}/*.h" "${_inc}/*.hpp")
      list(APPEND _headers ${_more})
    endforeach()
    add_custom_command(
      OUTPUT "${_out}"
      COMMAND "${Python3_EXECUTABLE}" "${_generator}" "${_abs}" -o "${_out}" --display-name "${_display}" ${_incs}
      DEPENDS "${_abs}" "${_generator}" ${_headers}
      COMMENT "Translating ${_display} for the Metal emulation"
      VERBATIM)
    list(APPEND _outputs "${_out}")
    list(APPEND _include_dirs "${_dir}")
  endforeach()
  list(REMOVE_DUPLICATES _include_dirs)
  add_library(${target} OBJECT ${_outputs})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE ${_include_dirs})
  target_link_libraries(${target} PUBLIC ${ARG_RUNTIME})
  # Kernel code is MSL, not our C++: silence what MSL style trips in C++. The
  # #line names are relative to DISPLAY_ROOT; make debug info (sanitizer
  # reports, debuggers) resolve them there.
  target_compile_options(${target} PRIVATE "-fdebug-compilation-dir=${ARG_DISPLAY_ROOT}"
    ${MPSGRAD_METAL_FIBER_COMPILE_OPTIONS} ${MPSGRAD_METAL_KERNEL_INSTRUMENTATION}
    -Wno-unused-function -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable
    -Wno-unknown-attributes -Wno-duplicate-decl-specifier -Wno-unused-value)
endfunction()

# ----------------------------------------------------------------------- address-space check
function(mpsgrad_add_metal_address_space_check name)
  cmake_parse_arguments(ARG "EXPECT_ERRORS" "" "INCLUDE_DIRECTORIES" ${ARGN})
  if(NOT ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "mpsgrad_add_metal_address_space_check(${name}): no .metal files given")
  endif()
  set(_args --clang "${CMAKE_CXX_COMPILER}" --display-root "${CMAKE_SOURCE_DIR}")
  if(ARG_EXPECT_ERRORS)
    list(APPEND _args --expect-errors)
  endif()
  foreach(_inc IN LISTS ARG_INCLUDE_DIRECTORIES)
    get_filename_component(_inc "${_inc}" ABSOLUTE)
    list(APPEND _args -I "${_inc}")
  endforeach()
  set(_files)
  foreach(_file IN LISTS ARG_UNPARSED_ARGUMENTS)
    get_filename_component(_abs "${_file}" ABSOLUTE)
    list(APPEND _files "${_abs}")
  endforeach()
  add_test(NAME ${name}
    COMMAND "${Python3_EXECUTABLE}" "${MPSGRAD_METAL_EMULATION_DIR}/aspcheck/msl_aspcheck.py" ${_args} ${_files})
endfunction()
