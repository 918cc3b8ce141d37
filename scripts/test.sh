#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test.
#   ./scripts/test.sh            full suite (unit, dist, interop), then the unit
#                                tests again under ASan+UBSan
#   TRIDENT_SKIP_SANITIZE=1      skip the sanitizer pass
#   TRIDENT_SKIP_MPICH=1         skip the MPICH pass
# Build output goes to build/ (Release, warnings as errors), build-mpich/ (the same against MPICH)
# and build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)
log_dir=build/logs
source scripts/lib.sh

echo "==> dependencies"
./scripts/install_deps.sh --tests
if [[ -x scripts/python_env.sh ]]; then
  # Interop tests use the peers' Python packages; they skip cleanly if this fails.
  # It runs before configuring: the build's Parquet reader is Arrow's, from this
  # venv's pyarrow (cmake/TridentParquet.cmake; without it, built without Parquet).
  ./scripts/python_env.sh || echo "test.sh: Python environment unavailable; interop tests will skip"
fi

echo "==> build (Release)"
mkdir -p "$log_dir"
quiet "$log_dir/configure.log" cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_WERROR=ON
quiet "$log_dir/build.log" ninja -C build -j "$jobs"

echo "==> tests"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

echo "==> trident as a library: install, examples against the package, add_subdirectory"
./scripts/package_check.sh build

echo "==> the Python package: a wheel against the build, pip install into a new venv, pytest, examples, mypy"
./scripts/python_check.sh build

if [[ -z "${TRIDENT_SKIP_MPICH:-}" ]]; then
  # trident builds against any MPI-3 library (cmake/TridentMpi.cmake). The same build against MPICH,
  # whose compilations the compiler cache already holds (only the MPI module differs), runs the
  # distributed tests under Hydra's mpiexec: every `dist` test but the few that use Open MPI's own
  # flags or messages (label open_mpi), and trident launch's own tests.
  echo "==> the distributed tests against MPICH (Hydra's mpiexec)"
  mkdir -p build-mpich/logs
  quiet build-mpich/logs/configure.log cmake -S . -B build-mpich -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTRIDENT_WERROR=ON -DTRIDENT_MPI=mpich -DTRIDENT_BENCH=OFF
  quiet build-mpich/logs/build.log ninja -C build-mpich -j "$jobs"
  ctest --test-dir build-mpich --output-on-failure -j "$jobs" --timeout 600 -L dist -LE open_mpi
  ctest --test-dir build-mpich --output-on-failure -j "$jobs" --timeout 600 \
    -R '^(cli\.launch_command|cli\.signal_setup|MpiFamily\..*|Hostfile\..*|Launcher\..*)$'
fi

if [[ -z "${TRIDENT_SKIP_SANITIZE:-}" ]]; then
  echo "==> unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  mkdir -p build-asan/logs
  # Host code only: the CUDA runtime's own allocations would read as leaks (the gpu tests run in the Release pass).
  quiet build-asan/logs/configure.log cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DTRIDENT_SANITIZE=ON -DTRIDENT_BENCH=OFF -DTRIDENT_NATIVE=ON -DTRIDENT_CUDA=OFF
  quiet build-asan/logs/build.log ninja -C build-asan -j "$jobs"
  # The host block cache is off so AddressSanitizer sees every use after free.
  TRIDENT_HOST_CACHE_MB=0 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit --timeout 900
fi
