#!/usr/bin/env bash
# trident as a library, checked from the outside (docs/guide/library.md):
#   1. `cmake --install` of an existing build into a temporary prefix;
#   2. examples/ configured as a separate CMake project against that prefix alone (find_package(trident
#      CONFIG)), built, and every example run through its check.sh (under mpirun where it needs ranks);
#   3. examples/simple and data_pipeline built again from trident.pc alone (pkg-config --static), and run;
#   4. a component the build lacks is refused by name (find_package(trident COMPONENTS cuda) on a CPU build);
#   5. a project that adds trident with add_subdirectory gets no test and no benchmark targets.
#   scripts/package_check.sh [BUILD_DIR]        default build/ (already built: scripts/test.sh builds it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
build=$(realpath "${1:-build}")
work=$(mktemp -d /tmp/trident-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "package_check: $*" >&2; exit 1; }

echo "==> install into a temporary prefix"
quiet "$work/install.log" cmake --install "$build" --prefix "$work/prefix"

echo "==> examples against the installed package"
launcher=()
[[ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]] || { command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); }
# With trident's own warnings as errors: a program that uses the public API as the examples do (designated
# initialisers of the options structs, say) must compile cleanly under a user's strict flags too.
strict="-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter -Wconversion -Wno-sign-conversion -Werror"
quiet "$work/examples-configure.log" cmake -S examples -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_FLAGS="$strict" "${launcher[@]}"
quiet "$work/examples-build.log" ninja -C "$work/examples"
# Built from the package, not the source tree: no include path or library may point into this checkout.
if grep -q -- "$PWD/src" "$work/examples/compile_commands.json"; then
  fail "an example was compiled against the source tree ($PWD/src); see $work/examples/compile_commands.json"
fi
mpirun=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
export MPIRUN="${mpirun[*]}" TRIDENT_NUM_THREADS=1
for check in examples/*/check.sh; do
  name=$(basename "$(dirname "$check")")
  echo "--> $name"
  status=0
  bash "$check" "$work/examples/$name" "$work/run-$name" "$work/prefix" || status=$?
  case $status in
    0) ;;
    77) echo "skipped: $name (its check.sh found something it needs missing, e.g. the Python venv)" ;;
    *) fail "example $name failed (exit $status)" ;;
  esac
done

echo "==> examples/simple and examples/data_pipeline (one rank) from pkg-config"
for name in simple data_pipeline; do
  PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" quiet "$work/pkgconfig-$name.log" bash -c \
    "c++ -O1 examples/$name/$name.cpp -o '$work/$name-pc' \$(pkg-config --static --cflags --libs trident)"
done
quiet "$work/simple-pc.log" "$work/simple-pc" "$work/run-simple-pc"
# data_pipeline reaches the data module's Parquet reader: the run-time path to pyarrow's libraries must hold.
quiet "$work/data_pipeline-pc.log" "$work/data_pipeline-pc" "$work/run-data_pipeline-pc" 300

echo "==> components: an optional part this build lacks is refused by name"
built=$(sed -n 's/^set(trident_COMPONENTS_BUILT "\(.*\)")$/\1/p' "$work/prefix/lib/cmake/trident/trident-config.cmake")
for component in cuda nccl parquet; do
  [[ ";$built;" == *";$component;"* ]] && continue
  if cmake -S tests/package/component -B "$work/component-$component" -DCMAKE_PREFIX_PATH="$work/prefix" \
       -DTRIDENT_COMPONENT="$component" > "$work/component-$component.log" 2>&1; then
    fail "find_package(trident COMPONENTS $component) succeeded on a build without $component"
  fi
  grep -q "built without '$component'" "$work/component-$component.log" \
    || fail "find_package(trident COMPONENTS $component) failed without naming it: $(tail -5 "$work/component-$component.log")"
  echo "refused: $component (this build has: ${built:-no optional part})"
done

echo "==> add_subdirectory(trident) builds no tests or benchmarks"
quiet "$work/subdir.log" cmake -S tests/package/add_subdirectory -B "$work/subdir" -G Ninja -DTRIDENT_SOURCE_DIR="$PWD" \
  -DTRIDENT_CUDA=OFF
if ninja -C "$work/subdir" -t targets all | grep -E "^(bin/)?[A-Za-z0-9_]+_(test|bench)\b|gtest" | head -3 | grep -q .; then
  fail "add_subdirectory(trident) defined test or benchmark targets: $(ninja -C "$work/subdir" -t targets all | grep -E '_(test|bench)' | head -3)"
fi
tests=$(ctest --test-dir "$work/subdir" -N | sed -n 's/^Total Tests: //p')
[[ "$tests" == "0" ]] || fail "add_subdirectory(trident) registered $tests tests"
echo "package_check: OK"
