#!/usr/bin/env bash
# run_python.sh SCRIPT ARGS...: runs an interop test script in the interop venv
# (created/updated by scripts/python_env.sh). Exits 77 — CTest's "skipped" —
# with the reason when the venv or its packages cannot be had, unless
# TRIDENT_REQUIRE_OPTIONAL=1 (as in the fresh-root check), where that fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if ! python=$("$root/scripts/python_env.sh" 2>/tmp/trident-python-env.$$.log | tail -n 1) || [[ ! -x $python ]]; then
  echo "SKIP: the interop Python environment is unavailable (no python3-venv or no access to PyPI):"
  cat /tmp/trident-python-env.$$.log
  rm -f /tmp/trident-python-env.$$.log
  [[ ${TRIDENT_REQUIRE_OPTIONAL:-0} == 1 ]] && { echo "FAIL: TRIDENT_REQUIRE_OPTIONAL=1 forbids skipping"; exit 1; }
  exit 77
fi
rm -f /tmp/trident-python-env.$$.log
exec "$python" "$@"
