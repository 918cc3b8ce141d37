#!/usr/bin/env bash
# The long waits before and between steps honour SIGTERM/SIGINT within seconds (issue 48, item 8; the
# evaluation's are cli.signal_wait's): each is made long by the test hook TRIDENT_TEST_SLOW_WAIT
# (core/interrupt.h), which prints a line once the run is inside the wait, and the signal is sent then.
#   1. building the dataset's index cache: exit 75 within 10 s, one line saying so, no cache entry file
#      and no run directory left;
#   2. initialising the model's weights: the same, on one process and on 2 ranks;
#   3. writing a checkpoint: the write finishes whole, then the run stops (exit 75 within 10 s);
#   4. loading that checkpoint for a resume: exit 75 within 10 s, the checkpoint as it was; a resume then
#      continues from it.
#   signal_setup_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus_run "$trident" signal_setup 'pkill -KILL -f "$work" 2>/dev/null'

args=(train --run-dir "$work/run" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16
      --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 "${tiny_data[@]}"
      --set train.log_interval=1 --set train.eval_interval=0)

# stop_in WAIT SIGNAL LOG ARGS...: runs trident ARGS with WAIT slowed by 30 s (2 s for a checkpoint's write,
# which is not cut short) and sends SIGNAL once the run says it is inside the wait (signal_when).
stop_in() {
  local wait=$1 sig=$2 log=$3 delay=30000
  shift 3
  [[ $wait == checkpoint_write ]] && delay=2000
  TRIDENT_TEST_SLOW_WAIT=$wait:$delay signal_when "$sig" "$log" "grep -q TRIDENT_TEST_SLOW_WAIT '$log'" "$trident" "$@"
}

# set_up_stop WAIT SIGNAL WHAT: a stop inside a wait of the set-up of a fresh run.
set_up_stop() {
  local wait=$1 sig=$2 what=$3 log=$work/$1.log
  stop_in "$wait" "$sig" "$log" "${args[@]}" --set train.steps=2
  [[ $rc -eq 75 ]] || fail "SIG$sig while $what: exit $rc (expected 75): $(tail -3 "$log")"
  [[ $(grep -c "stopped by signal" "$log") -eq 1 ]] && grep -q "^trident: stopped by signal while $what, before the \
run's first step: nothing to save (exit status 75" "$log" || fail "SIG$sig while $what: not one line saying so: $(cat "$log")"
  [[ ! -e $work/run ]] || fail "SIG$sig while $what left the run directory: $(ls -R "$work/run")"
  echo "ok: SIG$sig while $what stopped the run in $secs s, with one line and nothing left"
}

# 1. The index cache (data.paths' directory/index-cache): abandoned with no entry file written.
set_up_stop index_cache TERM "building the dataset's index cache"
left=$(find "$work/index-cache" -type f ! -name '*-lock' ! -name '*.token_range')
[[ -z $left ]] || fail "the abandoned index build left $left"
echo "ok: the abandoned index build left no cache entry file"

# 2. The model's initialisation.
set_up_stop model_init INT "initialising the model's weights"

# 2b. The same under `trident launch -n 2`, which passes the signal to every rank: the ranks agree, and one
# line says so (mpirun's parts skip in a sanitizer build: tiny_corpus.sh).
if sanitizer_build "$trident" || ! command -v mpirun >/dev/null; then
  echo "skipped: 2 ranks (a sanitizer build, or no mpirun)"
else
  stop_in model_init INT "$work/init2.log" launch -n 2 -- "$trident" "${args[@]}" --set train.steps=2
  [[ $rc -eq 75 && $(grep -c "stopped by signal" "$work/init2.log") -eq 1 ]] \
    && grep -q "^trident: stopped by signal while initialising the model's weights" "$work/init2.log" \
    || fail "2 ranks: exit $rc, not one line saying so: $(cat "$work/init2.log")"
  rm -rf "$work/run"  # its flight/ directory: the notes of a multi-rank start (docs: flight_recorder.h)
  echo "ok: SIGINT to trident launch -n 2 while initialising the model's weights stopped both ranks in $secs s"
fi

# 3. A checkpoint's write (after step 1 of 3): finished whole, then the run stops.
stop_in checkpoint_write INT "$work/write.log" "${args[@]}" --set train.steps=3 --set checkpoint.interval=1
[[ $rc -eq 75 ]] || fail "SIGINT during a checkpoint's write: exit $rc: $(tail -3 "$work/write.log")"
grep -q "stopped by signal while the checkpoint of step 1 was written; the checkpoint holds step 1" "$work/write.log" \
  || fail "no message for the checkpoint's write: $(tail -3 "$work/write.log")"
[[ $(cat "$work/run/checkpoints/latest") == step_00000001 && -f $work/run/checkpoints/step_00000001/meta.json ]] \
  || fail "the checkpoint of step 1 is not whole: $(ls -R "$work/run/checkpoints")"
echo "ok: SIGINT during the checkpoint's write let it finish and stopped the run in $secs s"

# 4. The load of that checkpoint for a resume: nothing written, the checkpoint as it was.
stop_in checkpoint_load TERM "$work/load.log" "${args[@]}" --set train.steps=3 --resume
[[ $rc -eq 75 ]] || fail "SIGTERM during the resume's load: exit $rc: $(tail -3 "$work/load.log")"
grep -q "^trident: stopped by signal while loading the checkpoint to resume from" "$work/load.log" \
  || fail "no message for the resume's load: $(cat "$work/load.log")"
[[ $(cat "$work/run/checkpoints/latest") == step_00000001 ]] || fail "the resume's stop moved latest"
echo "ok: SIGTERM during the resume's load stopped the run in $secs s"
"$trident" "${args[@]}" --set train.steps=2 --resume > "$work/resume.log" 2>&1 \
  || fail "resume: $(tail -3 "$work/resume.log")"
grep -q "^step .*2/2" "$work/resume.log" || fail "the resume did not reach step 2: $(tail -3 "$work/resume.log")"
echo "ok: --resume continued from step 1"
