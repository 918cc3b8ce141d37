#!/usr/bin/env bash
# The Python package's check (part of the test command; docs/guide/python.md):
#   1. the build installed into build/python/prefix, and the wheel built from this checkout against it
#      (pyproject.toml with trident_ROOT: only the bindings compile; build/python/ keeps that build);
#   2. the wheel installed into a new virtual environment: `import trident`, its version, `python -m trident`;
#   3. the wheel installed into the project's venv (scripts/python_env.sh: numpy, torch, pytest, mypy), where
#      the pytest suite (python/tests) runs, then the examples (examples/python, one under mpirun), and
#      mypy --strict checks the examples against the package's stubs, and the package itself.
#   scripts/python_check.sh [BUILD_DIR]     (default: build)
# Skipped (exit 0, saying so) when the project's venv is unavailable, as the interop tests are.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
build=${1:-build}
root=$PWD

if ! python=$(./scripts/python_env.sh); then
  echo "python_check: SKIPPED: the project's Python environment is unavailable (scripts/python_env.sh)"
  exit 0
fi
work=$(mktemp -d /tmp/trident-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
export TRIDENT_NUM_THREADS=1 OMPI_MCA_btl=self,vader
logs=$build/logs
mkdir -p "$logs"

echo "==> the wheel, against the build's installed libraries"
prefix=$root/$build/python/prefix
quiet "$logs/python-install.log" cmake --install "$build" --prefix "$prefix"
quiet "$logs/python-wheel.log" "$python" -m pip wheel . --no-build-isolation --no-deps -w "$work/wheel" \
  --config-settings="cmake.define.trident_ROOT=$prefix" --config-settings="build-dir=$build/python/wheel"
wheel=$(ls "$work"/wheel/trident-*.whl)

echo "==> pip install into a new venv"
python3 -m venv "$work/fresh"
quiet "$logs/python-fresh.log" "$work/fresh/bin/python" -m pip install --disable-pip-version-check "$wheel"
version=$(cd "$work" && "$work/fresh/bin/python" -c "import trident; print(trident.__version__)")
command=$(cd "$work" && "$work/fresh/bin/python" -m trident --version)
[[ $command == "trident $version" ]] || { echo "python_check: python -m trident --version said '$command'" >&2; exit 1; }
echo "import trident: $version; python -m trident: $command"

echo "==> pytest (python/tests), the examples and mypy, in the project's venv"
quiet "$logs/python-project.log" "$python" -m pip install --disable-pip-version-check --force-reinstall --no-deps "$wheel"
(cd "$work" && "$python" -m pytest -q -p no:cacheprovider "$root/python/tests")
bash examples/python/check_examples.sh "$python" "$work/examples"
"$python" -m mypy --strict --no-incremental examples/python
(cd "$work" && "$python" -m mypy --strict --no-incremental -p trident)  # the package itself, stubs included
