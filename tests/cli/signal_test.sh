#!/usr/bin/env bash
# SIGINT (and SIGTERM) finish the current step, save a checkpoint atomically
# and exit 75 (EX_TEMPFAIL: the run did not finish, so a Slurm afterok chain
# does not take it for done); `trident train --resume` continues from it to the
# end, and so does a job Slurm requeued (SLURM_RESTART_COUNT > 0) without --resume.
#   signal_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus_run "$trident" signal 'pkill -KILL -f "$work" 2>/dev/null'

args=(train --run-dir "$work/run" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16
      --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 --set train.steps=100000
      "${tiny_data[@]}" --set train.eval_interval=0 --set train.log_interval=1)

for sig in INT TERM; do
  rm -rf "$work/run"
  "$trident" "${args[@]}" > "$work/$sig.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do [[ -s $work/run/metrics.jsonl ]] && break; sleep 0.1; done
  kill -$sig $pid
  wait $pid
  rc=$?
  [[ $rc -eq 75 ]] || fail "SIG$sig: exit code $rc (expected 75): $(tail -5 "$work/$sig.log")"
  grep -q "stopped by signal after step" "$work/$sig.log" || fail "SIG$sig: no stop message"
  ckpt=$(cat "$work/run/checkpoints/latest")
  [[ -f $work/run/checkpoints/$ckpt/meta.json ]] || fail "SIG$sig: no complete checkpoint"
  step=${ckpt#step_}
  step=$((10#$step))
  echo "ok: SIG$sig stopped after step $step with checkpoint $ckpt"
done

# Resume the last one and run 3 more steps.
"$trident" "${args[@]/train.steps=100000/train.steps=$((step + 3))}" --resume > "$work/resume.log" 2>&1 \
  || fail "resume: $(tail -5 "$work/resume.log")"
grep -q "resumed from .*$ckpt at step $step" "$work/resume.log" || fail "resume message: $(head -3 "$work/resume.log")"
grep -q "^step .*$((step + 3))/$((step + 3))" "$work/resume.log" || fail "resume did not reach step $((step + 3))"
echo "ok: --resume continued from step $step to $((step + 3))"

# export and generate on the run directory take the newest checkpoint that verifies: a damaged
# newest one is skipped with a warning, not used.
newest=$(cat "$work/run/checkpoints/latest")
[[ $newest != "$ckpt" ]] || fail "the resumed run saved no checkpoint of its own"
printf '\x55' | dd of="$work/run/checkpoints/$newest/shard-00000.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
"$trident" export --checkpoint "$work/run" --output "$work/hf" > "$work/export.log" 2>&1 \
  || fail "export: $(tail -5 "$work/export.log")"
grep -q "warning: skipping .*$newest.*corrupted" "$work/export.log" || fail "export warning: $(cat "$work/export.log")"
grep -q "^exported .*$ckpt " "$work/export.log" || fail "export used the wrong checkpoint: $(cat "$work/export.log")"
"$trident" generate --checkpoint "$work/run" --prompt "the" --max-new-tokens 40 --ignore-eos > "$work/generate.log" 2>&1 \
  || fail "generate: $(tail -5 "$work/generate.log")"
grep -q "warning: skipping .*$newest" "$work/generate.log" || fail "generate warning: $(cat "$work/generate.log")"
echo "ok: export and generate skipped the damaged $newest for $ckpt"
# 40 new tokens do not fit the model's 16-token context: generation says why it stopped early
# (--ignore-eos: a briefly trained model may otherwise draw end-of-document first).
grep -q "(stopped after [0-9]* new tokens: the model's context is 16 tokens)" "$work/generate.log" \
  || fail "generate did not say it ran out of context: $(cat "$work/generate.log")"
echo "ok: generate stops at the context and says so"

# A requeued Slurm job (SLURM_RESTART_COUNT=1) runs the same command again, without --resume: it resumes
# from the newest checkpoint that verifies (the damaged one skipped) and finishes with exit status 0.
SLURM_RESTART_COUNT=1 "$trident" "${args[@]/train.steps=100000/train.steps=$((step + 5))}" > "$work/requeue.log" 2>&1 \
  || fail "requeue: exit $?: $(tail -5 "$work/requeue.log")"
grep -q "Slurm requeued this job (SLURM_RESTART_COUNT=1)" "$work/requeue.log" || fail "requeue message: $(head -5 "$work/requeue.log")"
grep -q "resumed from .*$ckpt at step $step" "$work/requeue.log" || fail "requeue did not resume: $(head -8 "$work/requeue.log")"
grep -q "^step .*$((step + 5))/$((step + 5))" "$work/requeue.log" || fail "requeue did not reach step $((step + 5))"
echo "ok: a requeued job resumed from step $step without --resume"
