#!/usr/bin/env bash
# One training per run directory.
#   run_dir_lock_test.sh TRIDENT_BINARY
# 1. A second training started 0.3 s after a first on the same --run-dir is refused with one line
#    naming the holder's pid and host; the first goes on and its config.toml is its own.
# 2. After SIGKILL of the holder (no cleanup at all), a new training takes the directory.
# 3. Under mpirun (2 ranks) the refusal ends every rank, without hanging, and prints once.
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/tiny_corpus.sh"
holder=""
# Multi-rank parts need mpirun, and not a sanitizer build (see sanitizer_build in tiny_corpus.sh).
sanitized=""
sanitizer_build "$trident" && sanitized=1
tiny_corpus_run "$trident" run-lock '[[ -n $holder ]] && kill -KILL $holder 2>/dev/null'
cd "$work" || exit 1

args=(train --run-dir "$work/run" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16
      --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 "${tiny_data[@]}"
      --set train.eval_interval=0 --set train.log_interval=1 --set checkpoint.interval=5)

# 1. Two trainings with different seeds, 0.3 s apart.
"$trident" "${args[@]}" --set train.seed=1 --set train.steps=100000000 > first.log 2>&1 &
holder=$!
sleep 0.3
for _ in $(seq 1 100); do [[ -s run/train.lock ]] && break; sleep 0.1; done
start=$(date +%s)
"$trident" "${args[@]}" --set train.seed=2 --set train.steps=3 > second.log 2> second.err
rc=$?
[[ $rc -eq 1 ]] || fail "the second training exited $rc (expected 1): $(tail -3 second.log) $(cat second.err)"
[[ $(grep -c . second.err) -eq 1 ]] || fail "expected one line on stderr, got: $(cat second.err)"
grep -q "run directory '$work/run' is in use by another training: pid $holder on host $(hostname) " second.err \
  || fail "the refusal does not name the holder (pid $holder on $(hostname)): $(cat second.err)"
kill -0 $holder 2>/dev/null || fail "the first training died: $(tail -3 first.log)"
# (The first writes config.toml once its resume decision is made, a moment after it takes the lock.)
for _ in $(seq 1 100); do [[ -s run/config.toml ]] && break; sleep 0.1; done
grep -q "^seed = 1$" run/config.toml || fail "run/config.toml is not the first training's: $(grep seed run/config.toml)"
echo "ok: refused: $(cat second.err)"

# 3. A multi-rank job on the same directory: refused once, every rank gone, quickly.
if command -v mpirun > /dev/null && [[ -z $sanitized ]]; then
  timeout 60 "$trident" launch -n 2 -- "$trident" "${args[@]}" --set train.seed=3 --set train.steps=3 \
    > mpi.log 2> mpi.err
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "the 2-rank training exited $rc (124: it hung): $(cat mpi.err)"
  [[ $(grep -c "is in use by another training" mpi.err) -eq 1 ]] \
    || fail "the 2-rank refusal is not printed once: $(cat mpi.err)"
  grep -q "pid $holder on host" mpi.err || fail "the 2-rank refusal does not name the holder: $(cat mpi.err)"
  echo "ok: 2 ranks refused once: $(grep "in use" mpi.err)"
fi

# 2. SIGKILL of the holder: the kernel releases the lock, a new training takes the directory.
kill -KILL $holder
wait $holder 2>/dev/null
holder=""
# (Its checkpoints elsewhere: a new run over the killed one's checkpoints would be refused.)
"$trident" "${args[@]}" --set train.seed=4 --set train.steps=3 --set "checkpoint.dir=\"$work/third\"" > third.log 2> third.err \
  || fail "a training after the holder's SIGKILL failed: $(cat third.err)"
grep -q "^seed = 4$" run/config.toml || fail "run/config.toml is not the new training's"
echo "ok: after SIGKILL of the holder a new training ran"
