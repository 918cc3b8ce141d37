#!/usr/bin/env bash
# trident launch passes COMMAND to the MPI library's launcher whole and in order, with or
# without the `--` separator (checked with --dry-run, which prints the launcher's line); its
# hostfiles in either family's format, TRIDENT_MPIEXEC, and a missing launcher.
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

# The launcher is the linked MPI library's: Open MPI's mpirun or Hydra's mpiexec (MPICH).
family=open_mpi
"$trident" info | grep -q '^mpi: .*MPICH' && family=mpich
line=$("$trident" launch --dry-run -n 2 -- trident info) || fail "trident launch --dry-run: exit code $?"
case $family in
  open_mpi) [[ $line == */mpirun\ -np\ 2\ * || $line == */mpirun.openmpi\ -np\ 2\ * ]] ;;
  mpich) [[ $line == */mpiexec.hydra\ -n\ 2\ * ]] ;;
esac || fail "$family: not its launcher: $line"
echo "ok: $family's launcher: ${line%% *}"

# --hostfile: a file in the launcher's own format goes to it as given; one in the other family's format
# is converted (a copy, removed when launch ends). The TRIDENT_* variables set here reach every rank
# (a rank on another host, started through ssh, would not have them): -x each for mpirun, Hydra passes the
# whole environment.
hosts=$(mktemp /tmp/trident-hostfile.XXXXXX)
other=$(mktemp /tmp/trident-hostfile.XXXXXX)
trap 'rm -f "$hosts" "$other"' EXIT
if [[ $family == open_mpi ]]; then
  printf 'node1 slots=2  # the first host\nnode2 slots=2\n' > "$hosts"
  printf 'node1:2\nnode2:2\n' > "$other"
  flag=--hostfile
else
  printf 'node1:2  # the first host\nnode2:2\n' > "$hosts"
  printf 'node1 slots=2\nnode2 slots=2\n' > "$other"
  flag=-f
fi
line=$(TRIDENT_NUM_THREADS=1 TRIDENT_MATMUL_BACKEND=naive "$trident" launch --dry-run --hostfile "$hosts" -n 4 -- trident info) \
  || fail "trident launch --dry-run --hostfile: exit code $?"
[[ $line == *" $flag $hosts "* ]] || fail "--hostfile not passed to the launcher as $flag: $line"
if [[ $family == open_mpi ]]; then
  [[ $line == *" -x TRIDENT_MATMUL_BACKEND "* && $line == *" -x TRIDENT_NUM_THREADS "* ]] \
    || fail "TRIDENT_* variables not passed on: $line"
fi
[[ $line == *" --oversubscribe "* ]] && fail "--oversubscribe with a hostfile (its slots decide): $line"
line=$("$trident" launch --dry-run --hostfile "$other" -n 4 -- trident info) || fail "the other format: exit code $?"
[[ $line == *" $flag /tmp/trident-hostfile."* && $line != *" $flag $other "* ]] \
  || fail "a hostfile in the other family's format was not converted: $line"
"$trident" launch --help | grep -q -- "--hostfile FILE .*hostfile" || fail "--hostfile not in trident launch --help"
echo "ok: --hostfile in either format and the TRIDENT_* variables reach the launcher"

# A hostfile line neither family reads is refused before anything starts, naming the file and the line.
printf 'node1 slots=two\n' > "$other"
out=$("$trident" launch --dry-run --hostfile "$other" -n 2 -- trident info 2>&1) && fail "a bad slot count was accepted"
[[ $out == *"--hostfile '$other' line 1: 'slots=two' is not a slot count"* ]] || fail "bad slot count message: $out"
echo "ok: a bad hostfile line is refused: $out"

# TRIDENT_MPIEXEC names the launcher program; none of the family's on PATH is one clear error.
line=$(TRIDENT_MPIEXEC=/opt/mpi/bin/mpiexec "$trident" launch --dry-run -n 2 -- trident info) \
  || fail "TRIDENT_MPIEXEC: exit code $?"
[[ $line == "/opt/mpi/bin/mpiexec "* ]] || fail "TRIDENT_MPIEXEC not used: $line"
out=$(PATH=/nonexistent "$trident" launch --dry-run -n 2 -- trident info 2>&1) && fail "no launcher on PATH was accepted"
[[ $out == *"but no launcher of it is on PATH"*"not found"*"TRIDENT_MPIEXEC"* ]] || fail "no launcher message: $out"
echo "ok: TRIDENT_MPIEXEC, and no launcher on PATH: $out"

# The other library's launcher under this family's name (Debian's alternatives point mpirun and mpiexec
# at one of the installed libraries) is passed over, and named when it is all there is.
foreign=$([[ $family == open_mpi ]] && command -v mpiexec.hydra || command -v mpirun.openmpi)
if [[ -n $foreign ]]; then
  bin=$(mktemp -d /tmp/trident-launch-bin.XXXXXX)
  trap 'rm -rf "$hosts" "$other" "$bin"' EXIT
  ln -s "$foreign" "$bin/mpirun"
  ln -s "$foreign" "$bin/mpiexec"
  out=$(PATH=$bin "$trident" launch --dry-run -n 2 -- trident info 2>&1) && fail "another library's launcher was used: $out"
  [[ $out == *"$bin/mpiexec"*"belong to another MPI library"* ]] || fail "another library's launcher message: $out"
  echo "ok: another library's launcher is passed over: $out"
fi
