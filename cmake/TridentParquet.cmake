# Parquet input for `trident preprocess`, read with Apache Arrow's C++ Parquet
# reader. Debian 12 packages no Arrow, but the pyarrow wheel ships Arrow's C++
# headers and shared libraries (include/, libarrow.so.N, libparquet.so.N), and
# scripts/python_env.sh installs a pinned pyarrow into the project's venv
# (scripts/requirements-interop.txt). This file finds that install and makes
# two imported targets of it: trident_pyarrow::arrow and trident_pyarrow::parquet.
#
#   TRIDENT_WITH_PARQUET  AUTO (default): build the Parquet reader when pyarrow
#                         is found and usable, else build without it and say why;
#                         ON: fail when it is not; OFF: never.
#   PYARROW_ROOT          the pyarrow package directory (the one holding include/
#                         and libarrow.so.N); default: asked of TRIDENT_PYTHON.
#   TRIDENT_PYTHON        the Python to ask (`import pyarrow`); default: the venv
#                         scripts/python_env.sh makes ($TRIDENT_VENV, else
#                         ~/.cache/trident/venv), else python3 on PATH.
#
# Sets TRIDENT_PARQUET (ON/OFF) and, when ON, TRIDENT_PARQUET_VERSION and
# TRIDENT_PARQUET_LIBRARY_DIR. The libraries are linked by their versioned
# names (the wheel has no unversioned libarrow.so) and found at run time
# through the build tree's RPATH, which CMake sets to their directory: the
# binaries run without LD_LIBRARY_PATH, as long as that venv stays where it is.
#
# The wheel is built with the manylinux_2_28 toolchain (GCC 14, the C++11 string
# ABI, libstdc++ symbols up to GCC 8's): Debian 12's g++ 12 compiles its headers
# and links its libraries; a small test program, compiled and linked here,
# proves it for the compiler in use before the reader is built.

set(TRIDENT_WITH_PARQUET AUTO CACHE STRING "Parquet input for preprocess, via pyarrow's Arrow C++ libraries: AUTO, ON or OFF")
set_property(CACHE TRIDENT_WITH_PARQUET PROPERTY STRINGS AUTO ON OFF)
set(PYARROW_ROOT "" CACHE PATH "The pyarrow package directory (include/, libarrow.so.N); default: asked of TRIDENT_PYTHON")
set(TRIDENT_PYTHON "" CACHE FILEPATH "The Python whose pyarrow provides Arrow C++ (default: the interop venv, else python3)")

set(TRIDENT_PARQUET OFF)
string(TOUPPER "${TRIDENT_WITH_PARQUET}" _trident_parquet_mode)
if(NOT _trident_parquet_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TRIDENT_WITH_PARQUET must be AUTO, ON or OFF, got '${TRIDENT_WITH_PARQUET}'")
endif()

# trident_parquet_unavailable(REASON): not built; fatal when it was required.
macro(trident_parquet_unavailable reason)
  set(_trident_parquet_hint "run ./scripts/python_env.sh (it installs pyarrow into ~/.cache/trident/venv) and configure again, or set PYARROW_ROOT")
  if(_trident_parquet_mode STREQUAL "ON")
    message(FATAL_ERROR "TRIDENT_WITH_PARQUET=ON: ${reason}; ${_trident_parquet_hint}")
  endif()
  message(STATUS "Parquet input: not built (${reason}; ${_trident_parquet_hint})")
endmacro()

function(trident_find_pyarrow)
  set(root "${PYARROW_ROOT}")
  set(version "")
  if(NOT root)
    set(python "${TRIDENT_PYTHON}")
    if(NOT python)
      if(DEFINED ENV{TRIDENT_VENV} AND NOT "$ENV{TRIDENT_VENV}" STREQUAL "")
        set(venv "$ENV{TRIDENT_VENV}")
      else()
        set(venv "$ENV{HOME}/.cache/trident/venv")
      endif()
      if(EXISTS "${venv}/bin/python")
        set(python "${venv}/bin/python")
      else()
        find_program(_trident_python3 python3)
        set(python "${_trident_python3}")
        unset(_trident_python3 CACHE)
      endif()
    endif()
    if(NOT python)
      set(_pyarrow_error "no Python to ask for pyarrow (no venv at ~/.cache/trident/venv, no python3)" PARENT_SCOPE)
      return()
    endif()
    execute_process(
      COMMAND "${python}" -c "import pyarrow, os; print(os.path.dirname(pyarrow.__file__)); print(pyarrow.__version__)"
      OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      set(_pyarrow_error "${python} has no pyarrow" PARENT_SCOPE)
      return()
    endif()
    string(REPLACE "\n" ";" out "${out}")
    list(GET out 0 root)
    list(GET out 1 version)
  endif()
  if(NOT EXISTS "${root}/include/arrow/api.h" OR NOT EXISTS "${root}/include/parquet/arrow/reader.h")
    set(_pyarrow_error "${root} has no Arrow C++ headers (include/arrow/api.h, include/parquet/arrow/reader.h)" PARENT_SCOPE)
    return()
  endif()
  # The versioned shared libraries: libarrow.so.2600 (not .so.2600.1.0, which the wheel does not have).
  foreach(lib arrow parquet)
    file(GLOB candidates "${root}/lib${lib}.so.*")
    list(FILTER candidates INCLUDE REGEX "/lib${lib}\\.so\\.[0-9]+$")
    list(LENGTH candidates n)
    if(NOT n EQUAL 1)
      set(_pyarrow_error "${root} has ${n} lib${lib}.so.N files (expected one)" PARENT_SCOPE)
      return()
    endif()
    set(_pyarrow_${lib} "${candidates}" PARENT_SCOPE)
  endforeach()
  if(NOT version)
    file(STRINGS "${root}/include/arrow/util/config.h" vline REGEX "#define ARROW_VERSION_STRING")
    string(REGEX REPLACE ".*\"(.*)\".*" "\\1" version "${vline}")
  endif()
  set(_pyarrow_root "${root}" PARENT_SCOPE)
  set(_pyarrow_version "${version}" PARENT_SCOPE)
endfunction()

if(_trident_parquet_mode STREQUAL "OFF")
  message(STATUS "Parquet input: not built (TRIDENT_WITH_PARQUET=OFF)")
else()
  set(_pyarrow_error "")
  trident_find_pyarrow()
  if(_pyarrow_error)
    trident_parquet_unavailable("${_pyarrow_error}")
  else()
    # Compile and link a small reader with this compiler, as the real one will be.
    set(_probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/trident_parquet_probe")
    file(WRITE "${_probe_dir}/probe.cpp" [=[
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/properties.h>
int main(int argc, char** argv) {
  if (argc < 2) return 0;
  auto file = arrow::io::ReadableFile::Open(argv[1]);
  if (!file.ok()) return 1;
  parquet::ReaderProperties props;
  props.enable_buffered_stream();
  parquet::arrow::FileReaderBuilder builder;
  if (!builder.Open(*file, props).ok()) return 1;
  auto reader = builder.Build();
  if (!reader.ok()) return 1;
  auto batches = (*reader)->GetRecordBatchReader(std::vector<int>{0}, std::vector<int>{0});
  return batches.ok() && arrow::GetBuildInfo().version_string.empty() ? 1 : 0;
}
]=])
    try_compile(_pyarrow_works "${_probe_dir}/build"
      SOURCES "${_probe_dir}/probe.cpp"
      CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${_pyarrow_root}/include"
      LINK_LIBRARIES "${_pyarrow_parquet}" "${_pyarrow_arrow}"
      CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON NO_CACHE
      OUTPUT_VARIABLE _probe_output)
    if(NOT _pyarrow_works)
      file(WRITE "${_probe_dir}/output.log" "${_probe_output}")
      trident_parquet_unavailable("pyarrow ${_pyarrow_version} at ${_pyarrow_root} does not compile or link with ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} (log: ${_probe_dir}/output.log)")
    else()
      set(TRIDENT_PARQUET ON)
      set(TRIDENT_PARQUET_VERSION "${_pyarrow_version}")
      set(TRIDENT_PARQUET_LIBRARY_DIR "${_pyarrow_root}")
      add_library(trident_pyarrow::arrow SHARED IMPORTED)
      set_target_properties(trident_pyarrow::arrow PROPERTIES
        IMPORTED_LOCATION "${_pyarrow_arrow}"
        INTERFACE_INCLUDE_DIRECTORIES "${_pyarrow_root}/include")
      add_library(trident_pyarrow::parquet SHARED IMPORTED)
      set_target_properties(trident_pyarrow::parquet PROPERTIES
        IMPORTED_LOCATION "${_pyarrow_parquet}"
        INTERFACE_LINK_LIBRARIES trident_pyarrow::arrow)
      message(STATUS "Parquet input: built with Arrow ${_pyarrow_version} from pyarrow at ${_pyarrow_root}")
    endif()
  endif()
endif()
