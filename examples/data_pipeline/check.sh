#!/usr/bin/env bash
# check.sh BIN_DIR WORK_DIR [PREFIX]: 2 data-parallel ranks for 300 steps (2.4 passes over the blend);
# the program asserts the blend, the ranks' slices and the endless stream (exit 0 = OK).
set -euo pipefail
${MPIRUN:-mpirun} -n 2 "$1/data_pipeline" "$2" 300
