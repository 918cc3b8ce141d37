#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment the interop tests run in,
# outside the repository, and installs scripts/requirements-interop.txt into it.
#   ${TRIDENT_VENV:-$HOME/.cache/trident/venv}
# Idempotent and quiet: nothing is downloaded when the installed packages
# already match the requirements file. Prints the venv's python on success.
# Exit status: 0 ready, 1 failed (no python3/venv, or PyPI unreachable).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${TRIDENT_VENV:-$HOME/.cache/trident/venv}
requirements=scripts/requirements-interop.txt
stamp=$venv/.trident-requirements

command -v python3 >/dev/null 2>&1 || { echo "python_env: python3 not found" >&2; exit 1; }

if [[ ! -x $venv/bin/python ]]; then
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "python_env: cannot create a venv at $venv (is python3-venv installed?)" >&2
    rm -rf "$venv"
    exit 1
  fi
fi

# Reinstall only when the requirements changed since the last successful install.
if [[ -f $stamp ]] && cmp -s "$stamp" "$requirements"; then
  echo "$venv/bin/python"
  exit 0
fi

log=$(mktemp /tmp/trident-pip.XXXXXX.log)
if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements" >"$log" 2>&1; then
  echo "python_env: pip install -r $requirements failed; log follows" >&2
  tail -n 20 "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
cp "$requirements" "$stamp"
echo "$venv/bin/python"
