#!/usr/bin/env bash
# check.sh BIN_DIR WORK_DIR [PREFIX]: runs the example; it asserts its own result (exit 0 = OK).
set -euo pipefail
"$1/simple" "$2"
