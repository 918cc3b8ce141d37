#!/usr/bin/env bash
# Table-driven bad-input tests: each row runs one command and checks that it
# ends with the expected exit status, within a time limit, printing exactly one
# clear line on stderr (bad input must not lose data, hang or answer wrong).
#
#   bad_input_test.sh TRIDENT_BINARY SRC_DIR TABLE.tsv
#
# TABLE.tsv: one row per line; blank lines and lines starting with '#' are
# skipped. Five fields separated by a single TAB (the last one may contain
# anything, tabs included):
#
#   name <TAB> exit_status <TAB> max_seconds <TAB> stderr_regex <TAB> bash command
#
#   name          a word ([A-Za-z0-9_.-]), unique in the table
#   exit_status   the exact exit status expected (0..255)
#   max_seconds   the command is killed (TERM, then KILL 5 s later) when it runs
#                 longer, and the row fails
#   stderr_regex  an extended regular expression (grep -E) that the command's
#                 stderr must match; stderr must be exactly one non-empty line.
#                 A lone '-' instead means stderr must be empty.
#   bash command  run with `bash -c` in a fresh empty scratch directory, in a
#                 session of its own (setsid), with these exported:
#                   T    the trident binary (absolute path)
#                   W    the fixture directory, shared by the table's rows (do
#                        not modify it; copy what you change into the scratch
#                        directory)
#                   SRC  the source tree
#                 Setup steps inside a command send their own output to
#                 /dev/null, so that stderr is the checked step's alone.
#
# The fixture directory W, built once per table:
#   W/c.txt        400 lines of text
#   W/tok.json     300-token byte-level BPE with the special token <|endoftext|>
#   W/c.bin/.idx   c.txt preprocessed with tok.json (--append-eod)
#   W/cfg.toml     configs/tiny_gpt.toml pointed at W/c and W/tok.json, shrunk so
#                  that its 4 training steps take about a second (2 layers,
#                  d_model 16, seq_len 16, split 90,10,0, checkpoint every 2
#                  steps, no progress line); `$T train $W/cfg.toml` writes
#                  runs/default in the scratch directory
#
# Rows that run `$T launch` (mpirun and its ranks) are skipped when TRIDENT_BINARY
# is a sanitizer build (sanitizer_build in tiny_corpus.sh): Open MPI's own
# allocations would read as leaks, and the multi-rank tests (label dist) run in the
# Release pass only, as these do.
#
# Each row prints one `ok` or `FAIL` line (with the reason, stderr and the tail
# of stdout on failure). A row also fails when processes it started are still
# running after it ended (leaked ranks). Exits non-zero when any row fails.
set -uo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: bad_input_test.sh TRIDENT_BINARY SRC_DIR TABLE.tsv" >&2
  exit 2
fi
T=$(realpath "$1")
SRC=$(realpath "$2")
table=$(realpath "$3")
export T SRC
export TRIDENT_NUM_THREADS=${TRIDENT_NUM_THREADS:-1}

root=$(mktemp -d /tmp/trident-bad-input.XXXXXX)
W=$root/fixture
export W
mkdir -p "$W"

# Processes whose working directory is under DIR (a row's leftovers: mpirun's
# ranks run in the directory mpirun was started in).
procs_under() {
  local dir=$1 p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    [[ $cwd == "$dir" || $cwd == "$dir"/* ]] && echo "${p#/proc/}"
  done
}
kill_under() {
  local pid
  for pid in $(procs_under "$1"); do kill -KILL "$pid" 2>/dev/null; done
}
cleanup() {
  kill_under "$root"
  rm -rf "$root"
}
trap cleanup EXIT

# --- the fixture ---------------------------------------------------------------
source "$SRC/tests/cli/tiny_corpus.sh"
(make_tiny_corpus "$T" "$W") || { echo "FAIL: fixture: make_tiny_corpus"; exit 1; }
sed -e 's/^n_head = .*/n_head = 2/' \
    -e 's/^d_model = .*/d_model = 16/' \
    -e 's/^max_seq_len = .*/max_seq_len = 16/' \
    -e "s|^tokenizer = .*|tokenizer = \"$W/tok.json\"|" \
    -e "s|^paths = .*|paths = [\"$W/c\"]|" \
    -e '/^valid_paths = /d' \
    -e 's/^split = .*/split = "90,10,0"/' \
    -e 's/^seq_len = .*/seq_len = 16/' \
    -e 's/^micro_batch_size = .*/micro_batch_size = 2/' \
    -e 's/^steps = .*/steps = 4\npeak_gflops = 1/' \
    -e 's/^log_interval = .*/log_interval = 1/' \
    -e 's/^eval_interval = .*/eval_interval = 2/' \
    -e 's/^eval_steps = .*/eval_steps = 1/' \
    -e 's/^warmup_steps = .*/warmup_steps = 1/' \
    "$SRC/configs/tiny_gpt.toml" > "$W/cfg.toml"
printf '\n[checkpoint]\ninterval = 2\n\n[log]\nprogress = "off"\n' >> "$W/cfg.toml"
(cd "$root" && "$T" train "$W/cfg.toml" --run-dir "$root/fixture-check" >/dev/null 2>"$root/fixture-check.err") \
  || { echo "FAIL: fixture: $W/cfg.toml does not train: $(cat "$root/fixture-check.err")"; exit 1; }
rm -rf "$root/fixture-check" "$root/fixture-check.err"

# --- the rows ----------------------------------------------------------------
sanitized=""
if sanitizer_build "$T"; then sanitized=1; fi
failures=0
rows=0
declare -A seen=()
lineno=0
while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  [[ -z ${line//[[:space:]]/} || $line == \#* ]] && continue
  rows=$((rows + 1))
  IFS=$'\t' read -r name want max regex cmd <<<"$line"
  where="$(basename "$table"):$lineno"
  if [[ -z ${cmd:-} || ! $name =~ ^[A-Za-z0-9_.-]+$ || ! $want =~ ^[0-9]+$ || ! $max =~ ^[0-9]+$ ]]; then
    echo "FAIL $where: malformed row (want name<TAB>status<TAB>seconds<TAB>regex<TAB>command): $line"
    failures=$((failures + 1))
    continue
  fi
  if [[ -n ${seen[$name]:-} ]]; then
    echo "FAIL $name ($where): duplicate row name (also line ${seen[$name]})"
    failures=$((failures + 1))
    continue
  fi
  seen[$name]=$lineno
  if [[ -n $sanitized && $cmd == *'$T launch'* ]]; then
    echo "skip $name: runs mpirun (sanitizer build)"
    continue
  fi
  dir=$root/rows/$name
  mkdir -p "$dir/scratch"
  start_ms=$(($(date +%s%N) / 1000000))
  # setsid: the row's processes form a group of their own, which timeout
  # signals as a whole (TERM at max_seconds, KILL 5 s later).
  (cd "$dir/scratch" && exec setsid -w timeout -k 5 "$max" bash -c "$cmd") >"$dir/stdout" 2>"$dir/stderr" </dev/null
  rc=$?
  elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
  elapsed=$(printf '%d.%d' $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)))
  # Give ranks a moment to go, then anything left is a leak.
  leaked=""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    leaked=$(procs_under "$dir")
    [[ -z $leaked ]] && break
    sleep 0.2
  done
  if [[ -n $leaked ]]; then
    leaked_cmds=$(for p in $leaked; do tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null; echo; done | head -3)
    kill_under "$dir"
  fi

  reason=""
  stderr_lines=$(grep -c . "$dir/stderr")
  if [[ $rc -eq 124 || $rc -eq 137 ]] && ((elapsed_ms >= max * 1000)); then
    reason="timed out after ${max}s (killed)"
  elif [[ $rc -ne $want ]]; then
    reason="exit status $rc, expected $want"
  elif [[ $regex == "-" && $stderr_lines -ne 0 ]]; then
    reason="expected no stderr, got $stderr_lines line(s)"
  elif [[ $regex != "-" && $stderr_lines -ne 1 ]]; then
    reason="expected one line on stderr, got $stderr_lines"
  elif [[ $regex != "-" ]] && ! grep -Eq -- "$regex" "$dir/stderr"; then
    reason="stderr does not match /$regex/"
  elif [[ -n $leaked ]]; then
    reason="left processes running: $leaked_cmds"
  fi
  if [[ -z $reason ]]; then
    printf 'ok   %s (%ss): %s\n' "$name" "$elapsed" "$(grep . "$dir/stderr" || true)"
  else
    failures=$((failures + 1))
    printf 'FAIL %s (%s, %ss): %s\n' "$name" "$where" "$elapsed" "$reason"
    echo "  command: $cmd"
    if [[ $stderr_lines -gt 40 ]]; then echo "  (stderr: the last 40 of $stderr_lines lines)"; fi
    grep . "$dir/stderr" | tail -n 40 | sed 's/^/  stderr| /'
    tail -n 5 "$dir/stdout" | sed 's/^/  stdout| /'
  fi
done <"$table"

if [[ $rows -eq 0 ]]; then
  echo "FAIL: $table has no rows"
  exit 1
fi
echo "$((rows - failures))/$rows rows passed"
[[ $failures -eq 0 ]]
