#!/usr/bin/env bash
# A long evaluation honours SIGTERM/SIGINT within seconds, as a step does (issue 48, item 8): under
# Slurm's --signal=TERM@60 a long validation set must not cost the checkpoint.
#   1. during the evaluation at step 0 (before any step): exit 75 within 10 s, nothing saved, said so in
#      one line;
#   2. during the evaluation after a step: exit 75 within 10 s with the checkpoint of that step, which a
#      --resume continues from.
#   signal_wait_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus_run "$trident" signal_wait 'pkill -KILL -f "$work" 2>/dev/null'

# eval_steps: far more validation batches than a few seconds hold (the validation stream repeats).
args=(train --run-dir "$work/run" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16
      --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 "${tiny_data[@]}"
      --set train.log_interval=1 --set train.eval_steps=200000)

# 1. The evaluation at step 0: the header is printed before it starts.
signal_when INT "$work/eval0.log" 'grep -q "^trident: " "$work/eval0.log"' "$trident" "${args[@]}" --set train.steps=5 \
  --set train.eval_interval=5
[[ $rc -eq 75 ]] || fail "SIGINT during the step-0 evaluation: exit $rc (expected 75): $(tail -3 "$work/eval0.log")"
grep -q "stopped by signal during the evaluation at step 0, before any training step: nothing to save" \
  "$work/eval0.log" || fail "no message for the step-0 evaluation: $(tail -3 "$work/eval0.log")"
[[ $(grep -cE "stopped by signal|interrupted" "$work/eval0.log") -eq 1 ]] \
  || fail "the stop before any step is not one line: $(cat "$work/eval0.log")"
[[ ! -e $work/run/checkpoints/latest ]] || fail "a checkpoint was written before any step"
echo "ok: SIGINT during the evaluation at step 0 stopped the run in $secs s"

# 2. The evaluation after step 2 of a run resumed from step 1 (no step-0 evaluation).
rm -rf "$work/run"
"$trident" "${args[@]}" --set train.steps=1 --set train.eval_interval=0 > "$work/first.log" 2>&1 \
  || fail "the first step: $(tail -3 "$work/first.log")"
signal_when TERM "$work/eval2.log" "grep -q '\"step\": *2' \"$work/run/metrics.jsonl\"" "$trident" "${args[@]}" \
  --set train.steps=4 --set train.eval_interval=2 --resume
[[ $rc -eq 75 ]] || fail "SIGTERM during the evaluation after step 2: exit $rc: $(tail -3 "$work/eval2.log")"
grep -q "stopped by signal during the evaluation after step 2; the checkpoint holds step 2" "$work/eval2.log" \
  || fail "no message for the evaluation after step 2: $(tail -3 "$work/eval2.log")"
[[ $(cat "$work/run/checkpoints/latest") == step_00000002 ]] || fail "the newest checkpoint is not step 2"
echo "ok: SIGTERM during the evaluation after step 2 saved step 2 and stopped in $secs s"
"$trident" "${args[@]}" --set train.steps=3 --set train.eval_interval=0 --resume > "$work/resume.log" 2>&1 \
  || fail "resume: $(tail -3 "$work/resume.log")"
grep -q "^step .*3/3" "$work/resume.log" || fail "the resume did not reach step 3: $(tail -3 "$work/resume.log")"
echo "ok: --resume continued from step 2"
