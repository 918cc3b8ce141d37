#!/usr/bin/env bash
# trident launch passes COMMAND to mpirun whole and in order, with or without
# the `--` separator (checked with --dry-run, which prints the mpirun line).
#   launch_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_tail() {  # expect_tail EXPECTED_TAIL ARGS...: the printed line ends with EXPECTED_TAIL
  local want=$1
  shift
  local line
  line=$("$trident" launch --dry-run "$@") || fail "exit code $? from: trident launch --dry-run $*"
  [[ $line == *" $want" ]] || fail "trident launch --dry-run $*: printed '$line', expected it to end with '$want'"
  echo "ok: $*"
}

expect_tail "train cfg.toml --resume --set a=b --set c=d --run-dir r" \
  -n 2 -- trident train cfg.toml --resume --set a=b --set c=d --run-dir r
expect_tail "train cfg.toml --resume --set a=b --set c=d --run-dir r" \
  -n 2 trident train cfg.toml --resume --set a=b --set c=d --run-dir r
expect_tail "echo -n 5" -n 2 echo -n 5
expect_tail "generate --checkpoint r --prompt hi --dry-run" -n 2 -- trident generate --checkpoint r --prompt hi --dry-run
"$trident" launch -n 2 --dry-run >/dev/null 2>&1 && fail "no command: expected a non-zero exit"
echo "ok: no command is an error"
