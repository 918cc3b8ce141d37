# Every dependency comes from the system's packages (scripts/install_deps.sh).
include(GNUInstallDirs)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(dnnl REQUIRED)
include(${CMAKE_CURRENT_LIST_DIR}/TridentMpi.cmake)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# ICU: Unicode normalization (NFC) for tokenizers such as Qwen2's (data/tokenizer/normalizer.cpp).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# libzip: PyTorch's zip checkpoints, pytorch_model.bin (checkpoint/torch_file.h).
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)
# TensorBoard event files (train/log/tensorboard.h): protobuf messages compiled by protoc at build time, and
# Boost.CRC (header-only) for TFRecord's CRC32C.
find_package(Protobuf REQUIRED)
find_package(Boost REQUIRED)
# Cairo: trident plot's figures (PNG and SVG; plot/figure.cpp).
pkg_check_modules(CAIRO REQUIRED IMPORTED_TARGET cairo)
if(TRIDENT_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TRIDENT_BENCH)
  find_package(benchmark REQUIRED)
endif()
if(TRIDENT_CUDA)
  # Ampere and Hopper (A100, H100/H200); set before enable_language, which would pick its own default.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # Debian 12's CMake 3.25.1 FindCUDAToolkit marks CUDA::nvToolsExt deprecated
  # without checking that the target exists; CUDA 12.9+ ships no libnvToolsExt,
  # so configuring fails ("set_property could not find TARGET
  # CUDA::nvToolsExt"; fixed in CMake 3.25.2). The deprecation step runs only
  # for projects requiring CMake >= 3.25, so hide that from this one call.
  if(CMAKE_VERSION VERSION_LESS 3.25.2)
    set(trident_min_cmake ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${trident_min_cmake})
  else()
    find_package(CUDAToolkit REQUIRED)
  endif()
  # Kernel files are C++17: nvcc cannot parse fmt in C++20 mode (kernels/cuda/common.cuh).
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # NCCL is a package of its own (libnccl-dev), not part of the toolkit: without
  # it the CUDA backend still builds and trains on one GPU; several GPU ranks
  # need it (a clear error at startup says so).
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(TRIDENT_NCCL ON)
  else()
    set(TRIDENT_NCCL OFF)
    message(STATUS "NCCL not found (nccl.h and libnccl): multi-GPU training is not built")
  endif()
endif()

# trident_module(NAME SOURCES... [DEPS targets...] [PRIVATE_DEPS targets...])
# One CMake library per folder under src/trident (docs/conventions.md#modules-and-their-dependency-order). DEPS are the
# trident modules (and third-party libraries) whose types appear in this
# module's public headers; PRIVATE_DEPS are implementation details (oneDNN,
# OpenBLAS, PCRE2...) that never leak to consumers. A module can only use what
# it names here, which keeps the dependency graph one-way.
#
# Each module is also installed and exported as trident::NAME (cmake/TridentPackage.cmake): its headers are
# found under src/ in the build tree and under include/ once installed. The warning flags (trident_options)
# are for trident's own sources only and are not exported.
function(trident_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(trident_${name} STATIC ${ARG_SOURCES})
  add_library(trident::${name} ALIAS trident_${name})
  target_include_directories(trident_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(trident_${name} PUBLIC ${ARG_DEPS} PRIVATE $<BUILD_INTERFACE:trident_options> ${ARG_PRIVATE_DEPS})
  target_compile_features(trident_${name} PUBLIC cxx_std_20)  # the headers are C++20: so are their users
  set_target_properties(trident_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY TRIDENT_MODULES ${name})
endfunction()
