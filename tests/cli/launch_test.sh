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

# --hostfile goes to mpirun as given, and the TRIDENT_* variables set here are passed to every
# rank (a rank on another host, started through ssh, would not have them).
hosts=$(mktemp /tmp/trident-hostfile.XXXXXX)
trap 'rm -f "$hosts"' EXIT
printf 'node1 slots=2  # the first host\nnode2 slots=2\n' > "$hosts"
line=$(TRIDENT_NUM_THREADS=1 TRIDENT_MATMUL_BACKEND=naive "$trident" launch --dry-run --hostfile "$hosts" -n 4 -- trident info) \
  || fail "trident launch --dry-run --hostfile: exit code $?"
[[ $line == *" --hostfile $hosts "* ]] || fail "--hostfile not passed to mpirun: $line"
[[ $line == *" -x TRIDENT_MATMUL_BACKEND "* && $line == *" -x TRIDENT_NUM_THREADS "* ]] \
  || fail "TRIDENT_* variables not passed on: $line"
[[ $line == *" --oversubscribe "* ]] && fail "--oversubscribe with a hostfile (its slots decide): $line"
"$trident" launch --help | grep -q -- "--hostfile FILE .*hostfile" || fail "--hostfile not in trident launch --help"
echo "ok: --hostfile and the TRIDENT_* variables reach mpirun"
