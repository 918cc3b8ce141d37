# Sourced by the shell tests: fail(), sanitizer_build TRIDENT, make_tiny_corpus
# TRIDENT DIR, which writes DIR/c.txt, a 300-token byte-level BPE DIR/tok.json and
# the Megatron dataset DIR/c.{bin,idx} with the trident command's own tokenizer and
# preprocess, the two steps that start most tests, work_dir and tiny_corpus_run, and losses LOG.
fail() { echo "FAIL: $*" >&2; exit 1; }

# Whether TRIDENT is a sanitizer build (it links libasan or libubsan). The tests skip
# their mpirun parts there: LeakSanitizer reports Open MPI's own unfreed allocations
# when a rank exits normally, and with abort_on_error=1 (scripts/test.sh) the rank
# aborts, so a clean multi-rank run exits non-zero. The multi-rank parts run in the
# Release pass. ldd's output is read whole: `ldd | grep -q` under `set -o pipefail`
# misses (46 of 200 tries, measured) when grep exits at the libasan line and ldd, still
# writing, dies of SIGPIPE.
sanitizer_build() {
  local libs
  libs=$(ldd "$1" 2>/dev/null) || return 1
  [[ $libs == *libasan* || $libs == *libubsan* ]]
}

make_tiny_corpus() {
  local trident=$1 dir=$2
  for i in $(seq 1 400); do echo "line $i of the test corpus, with words that repeat and repeat again."; done \
    > "$dir/c.txt"
  "$trident" tokenizer train --input "$dir/c.txt" --vocab-size 300 --special-token '<|endoftext|>' \
    --output "$dir/tok.json" >/dev/null 2>&1 || fail "tokenizer train"
  "$trident" preprocess --input "$dir/c.txt" --tokenizer "$dir/tok.json" --output-prefix "$dir/c" --append-eod \
    --quiet || fail "preprocess"
}

# work_dir NAME [CLEANUP]: sets work to a fresh directory /tmp/trident-NAME.XXXXXX, which the EXIT
# trap removes after running CLEANUP (the test's own shell code, expanded when the trap runs, so the
# variables it reads must be set before the test can exit).
work_dir() {
  work=$(mktemp -d "/tmp/trident-$1.XXXXXX")
  # shellcheck disable=SC2064 # $work stays quoted for the trap; CLEANUP is code
  trap "${2:+$2; }rm -rf \"\$work\"" EXIT
}

# tiny_corpus_run TRIDENT NAME [CLEANUP]: the start of a test that trains on the tiny corpus: work_dir
# NAME [CLEANUP], make_tiny_corpus TRIDENT "$work", one CPU thread per process (TRIDENT_NUM_THREADS=1,
# exported: trident launch passes it on to every rank), and sets tiny_data to the --set options that
# train on the corpus with a plain log (no progress bar) and a given FLOP rate (train.peak_gflops=1:
# no second spent measuring this machine's matmul peak).
tiny_corpus_run() {
  work_dir "$2" "${3:-}"
  export TRIDENT_NUM_THREADS=1
  make_tiny_corpus "$1" "$work"
  # shellcheck disable=SC2034,SC2054 # read by the tests; the commas are TOML's
  tiny_data=(--set "data.tokenizer=$work/tok.json" --set "data.paths=[\"$work/c\"]" --set data.split=\"90,10,0\"
    --set log.progress=off --set train.peak_gflops=1)
}

# signal_when SIG LOG WHEN COMMAND...: runs COMMAND in the background (its output to LOG), waits (20 s at
# most) until WHEN (shell code) holds and half a second more, sends SIG, and sets rc (COMMAND's exit status) and
# secs (from the signal to the exit); fails when COMMAND never gets there or takes more than 10 s to stop.
# The tests of signals during long waits (issue 48, item 8).
signal_when() {
  local sig=$1 log=$2 when=$3 pid start
  shift 3
  "$@" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do eval "$when" && break; sleep 0.1; done
  eval "$when" || fail "SIG$sig: the run never got to the wait: $(tail -3 "$log")"
  sleep 0.5  # well into it
  start=$(date +%s.%N)
  kill -"$sig" $pid
  wait $pid
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  awk -v s="$secs" 'BEGIN { exit !(s <= 10) }' || fail "SIG$sig: the run took $secs s to stop"
}

# losses LOG: the loss and validation loss lines of a training log, to the printed digits (tokens/s and
# timings differ between runs).
losses() { grep -oE "^(step +[0-9]+/[0-9]+ \| loss [0-9.]+|eval at step [0-9]+: val loss [0-9.]+)" "$1"; }
