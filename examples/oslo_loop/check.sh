#!/usr/bin/env bash
# check.sh BIN_DIR WORK_DIR [PREFIX]: example 1 end to end. Makes a random tiny GPT-2 with transformers
# (WORK_DIR/hf), trains it on 8 ranks (dp 2 × tp 2 × pp 2) with BIN_DIR/oslo_loop, which saves
# WORK_DIR/out/sharded and WORK_DIR/out/merged, then loads the merged save in transformers and compares
# logits. Exits 77 (skipped) without the interop Python environment, non-zero on failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 2 ]] || { echo "usage: $0 BIN_DIR WORK_DIR [PREFIX]" >&2; exit 2; }
program=$(realpath "$1/oslo_loop")
work=$2
if ! python=$("$here/../../scripts/python_env.sh" 2>/dev/null | tail -n 1) || [[ ! -x $python ]]; then
  echo "SKIP: the interop Python environment (scripts/python_env.sh) is unavailable: no transformers"
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/hf" "$work/out"
"$python" "$here/check_transformers.py" make "$work/hf"
${MPIRUN:-mpirun --oversubscribe --bind-to none} -x TRIDENT_NUM_THREADS=1 -n 8 "$program" "$work/hf" "$work/out"
"$python" "$here/check_transformers.py" check "$work/out"
