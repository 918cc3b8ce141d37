#!/usr/bin/env bash
# run.sh LIBAI_CUSTOM: example 2 on 4 ranks (tp 2 × dp 2) and on 1; each run checks itself against the
# single-process model (1e-5) and exits non-zero on failure.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 LIBAI_CUSTOM" >&2; exit 2; }
for n in 4 1; do
  mpirun --allow-run-as-root --oversubscribe --bind-to none -x TRIDENT_NUM_THREADS=1 -n "$n" "$1"
done
