#!/usr/bin/env bash
# check.sh BIN_DIR WORK_DIR [PREFIX]: example 2 on 4 ranks (tp 2 × dp 2) and on 1; each run checks itself
# against the single-process model (1e-5) and exits non-zero on failure.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 BIN_DIR [WORK_DIR PREFIX]" >&2; exit 2; }
for n in 4 1; do
  ${MPIRUN:-mpirun --oversubscribe --bind-to none} -x TRIDENT_NUM_THREADS=1 -n "$n" "$1/libai_custom"
done
