# MetalBackend.cmake -- the Metal backend (cpp/mpsgrad/backend/metal) and its kernels (metal/*.metal).
#
# Included by the top-level CMakeLists.txt when MPSGRAD_METAL or MPSGRAD_METAL_EMULATION is ON.
# Adds the backend's sources to mpsgrad_core and defines MPSGRAD_HAS_METAL on it (PUBLIC), then:
#
#   Apple (MPSGRAD_METAL):   metal-cpp from Apple's published archive (pinned URL and SHA-256) or
#                            -DMETAL_CPP_DIR=<extracted metal-cpp> for offline builds; the kernels
#                            compiled by `xcrun -sdk macosx metal` into mpsgrad.metallib, installed
#                            next to the Python extension (the backend looks for it there).
#   Linux (MPSGRAD_METAL_EMULATION): the harness of tests/metal_emulation: metal-cpp from the
#                            pymetal-cpp sdist plus stub headers, the mock Objective-C runtime and
#                            fake MTLDevice, the kernels translated to C++ and linked into every
#                            consumer of mpsgrad_core, and the address-space check of every kernel
#                            file as a ctest. Defines MPSGRAD_METAL_EMULATION (PUBLIC) for tests.

include_guard(GLOBAL)

set(MPSGRAD_METAL_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../metal")
get_filename_component(MPSGRAD_METAL_SOURCE_DIR "${MPSGRAD_METAL_SOURCE_DIR}" ABSOLUTE)
file(GLOB MPSGRAD_METAL_KERNEL_FILES CONFIGURE_DEPENDS "${MPSGRAD_METAL_SOURCE_DIR}/*.metal")
file(GLOB MPSGRAD_METAL_KERNEL_HEADERS CONFIGURE_DEPENDS "${MPSGRAD_METAL_SOURCE_DIR}/*.h")
file(GLOB MPSGRAD_METAL_BACKEND_SOURCES CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_LIST_DIR}/../cpp/mpsgrad/backend/metal/*.cpp")

target_sources(mpsgrad_core PRIVATE ${MPSGRAD_METAL_BACKEND_SOURCES})
target_compile_definitions(mpsgrad_core PUBLIC MPSGRAD_HAS_METAL=1)

if(MPSGRAD_METAL_EMULATION)
  # ------------------------------------------------------------------ Linux emulation build
  include("${CMAKE_CURRENT_LIST_DIR}/../tests/metal_emulation/MetalEmulation.cmake")

  target_compile_definitions(mpsgrad_core PUBLIC MPSGRAD_METAL_EMULATION=1)
  # The mock provides objc_msgSend, MTLCreateSystemDefaultDevice and the test hooks; it brings
  # metal-cpp's include directories and -fblocks with it.
  target_link_libraries(mpsgrad_core PUBLIC mpsgrad_metal_mock)

  # The translated kernels register themselves from static initialisers that nothing references,
  # so a static archive would drop them: their objects go onto the link line of every consumer
  # of mpsgrad_core (the tests, the Python extension) instead of into libmpsgrad_core.a.
  mpsgrad_add_emulated_metal_kernels(mpsgrad_metal_kernels
    ${MPSGRAD_METAL_KERNEL_FILES}
    INCLUDE_DIRECTORIES "${MPSGRAD_METAL_SOURCE_DIR}"
    DISPLAY_ROOT "${CMAKE_SOURCE_DIR}")
  add_dependencies(mpsgrad_core mpsgrad_metal_kernels)
  target_link_libraries(mpsgrad_core INTERFACE "$<TARGET_OBJECTS:mpsgrad_metal_kernels>")

  # The emulation's mpsgrad.metallib: the list of the kernels built (tests/metal_emulation/mock/
  # make_metallib.py), which the fake device checks against the kernels linked into the process.
  # The backend finds it in the build tree through the same lookup as on Apple platforms.
  set(MPSGRAD_METALLIB "${CMAKE_CURRENT_BINARY_DIR}/mpsgrad.metallib")
  add_custom_command(
    OUTPUT "${MPSGRAD_METALLIB}"
    COMMAND "${Python3_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/../tests/metal_emulation/mock/make_metallib.py"
            -o "${MPSGRAD_METALLIB}" -I "${MPSGRAD_METAL_SOURCE_DIR}" --display-root "${CMAKE_SOURCE_DIR}"
            ${MPSGRAD_METAL_KERNEL_FILES}
    DEPENDS ${MPSGRAD_METAL_KERNEL_FILES} ${MPSGRAD_METAL_KERNEL_HEADERS}
            "${CMAKE_CURRENT_LIST_DIR}/../tests/metal_emulation/mock/make_metallib.py"
            "${CMAKE_CURRENT_LIST_DIR}/../tests/metal_emulation/shim/msl2cpp.py"
    COMMENT "Writing the emulation's mpsgrad.metallib (kernel list)"
    VERBATIM)
  add_custom_target(mpsgrad_metallib ALL DEPENDS "${MPSGRAD_METALLIB}")
  add_dependencies(mpsgrad_core mpsgrad_metallib)
  target_compile_definitions(mpsgrad_core PRIVATE MPSGRAD_METALLIB_BUILD_PATH="${MPSGRAD_METALLIB}")

  # Coverage build mode (tests/metal_emulation/coverage/README.md): the translated kernels, and only
  # they, are compiled with clang's source-based coverage; every binary that links them writes
  # $LLVM_PROFILE_FILE at exit, which metal_coverage.py maps back to metal/*.metal lines.
  option(MPSGRAD_METAL_COVERAGE "Instrument the emulated Metal kernels for line coverage" OFF)
  if(MPSGRAD_METAL_COVERAGE)
    target_compile_options(mpsgrad_metal_kernels PRIVATE -fprofile-instr-generate -fcoverage-mapping)
    target_link_options(mpsgrad_core INTERFACE -fprofile-instr-generate)
  endif()

  if(MPSGRAD_TESTS)
    enable_testing()
    mpsgrad_add_metal_address_space_check(metal_address_space
      ${MPSGRAD_METAL_KERNEL_FILES}
      INCLUDE_DIRECTORIES "${MPSGRAD_METAL_SOURCE_DIR}")
  endif()

elseif(APPLE)
  # ------------------------------------------------------------------------- Apple build
  # metal-cpp: Apple's archive for the macOS 15 / iOS 18 SDKs (it builds against newer SDKs too).
  set(METAL_CPP_DIR "" CACHE PATH "Extracted Apple metal-cpp (the folder with Foundation/ and Metal/); empty: download")
  if(METAL_CPP_DIR)
    set(_metal_cpp_dir "${METAL_CPP_DIR}")
  else()
    include(FetchContent)
    FetchContent_Declare(mpsgrad_metal_cpp
      URL "https://developer.apple.com/metal/cpp/files/metal-cpp_macOS15_iOS18.zip"
      URL_HASH SHA256=0433df1e0ab13c2b0becbd78665071e3fa28381e9714a3fce28a497892b8a184
      DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
    FetchContent_MakeAvailable(mpsgrad_metal_cpp)  # headers only: no CMakeLists.txt to add
    set(_metal_cpp_dir "${mpsgrad_metal_cpp_SOURCE_DIR}")
  endif()
  if(NOT EXISTS "${_metal_cpp_dir}/Metal/Metal.hpp")
    message(FATAL_ERROR "metal-cpp not found in ${_metal_cpp_dir} (expected Metal/Metal.hpp)")
  endif()
  target_include_directories(mpsgrad_core SYSTEM PRIVATE "${_metal_cpp_dir}")
  # CoreGraphics: without it, MTLCreateSystemDefaultDevice returns nil in command-line processes.
  target_link_libraries(mpsgrad_core PUBLIC "-framework Metal" "-framework Foundation" "-framework CoreGraphics")

  # The kernel library. Metal compiles with fast math by default; the kernels are built without it
  # so that NaN/inf handling and the transcendental functions of neuron_math.h behave as on the
  # CPU backend (the tests compare the two, and against PyTorch, with tight tolerances).
  find_program(MPSGRAD_XCRUN xcrun REQUIRED)
  set(_metal_flags -fno-fast-math -Wall)
  if(CMAKE_OSX_DEPLOYMENT_TARGET)
    list(APPEND _metal_flags "-mmacosx-version-min=${CMAKE_OSX_DEPLOYMENT_TARGET}")
  endif()
  set(_air_files)
  foreach(_metal IN LISTS MPSGRAD_METAL_KERNEL_FILES)
    get_filename_component(_stem "${_metal}" NAME_WE)
    set(_air "${CMAKE_CURRENT_BINARY_DIR}/metal/${_stem}.air")
    add_custom_command(
      OUTPUT "${_air}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/metal"
      COMMAND "${MPSGRAD_XCRUN}" -sdk macosx metal ${_metal_flags} -c "${_metal}" -o "${_air}"
      DEPENDS "${_metal}" ${MPSGRAD_METAL_KERNEL_HEADERS}
      COMMENT "Compiling ${_stem}.metal"
      VERBATIM)
    list(APPEND _air_files "${_air}")
  endforeach()
  set(MPSGRAD_METALLIB "${CMAKE_CURRENT_BINARY_DIR}/mpsgrad.metallib")
  add_custom_command(
    OUTPUT "${MPSGRAD_METALLIB}"
    COMMAND "${MPSGRAD_XCRUN}" -sdk macosx metallib ${_air_files} -o "${MPSGRAD_METALLIB}"
    DEPENDS ${_air_files}
    COMMENT "Linking mpsgrad.metallib"
    VERBATIM)
  add_custom_target(mpsgrad_metallib ALL DEPENDS "${MPSGRAD_METALLIB}")
  add_dependencies(mpsgrad_core mpsgrad_metallib)
  # Uninstalled binaries (the C++ tests) find the library in the build tree.
  target_compile_definitions(mpsgrad_core PRIVATE MPSGRAD_METALLIB_BUILD_PATH="${MPSGRAD_METALLIB}")
  if(MPSGRAD_PYTHON)
    install(FILES "${MPSGRAD_METALLIB}" DESTINATION mpsgrad)
  endif()

else()
  message(FATAL_ERROR "MPSGRAD_METAL needs an Apple platform; on Linux use -DMPSGRAD_METAL_EMULATION=ON "
                      "(clang 16) to build the Metal backend against the emulation harness.")
endif()
