#!/usr/bin/env bash
# Crash safety of checkpoints: the training process is killed (SIGKILL) at
# every durable step of its checkpoint writes — after the temporary directory
# is made, after a safetensors header, after each tensor, after each file is
# renamed into place, after meta.json, after the directory rename, after
# `latest`, while pruning — through the TRIDENT_CHECKPOINT_CRASH_AT hook
# (checkpoint/safetensors.h). After every kill: `latest`, when present, names
# a checkpoint whose files all verify, and `--resume` finishes the run with
# exactly the losses of the uninterrupted run. Then the same over a finished
# run's directory: a resume from an earlier checkpoint re-saves the very step
# `latest` names (the old copy is moved aside while the new one is renamed in),
# and after every kill a complete checkpoint of that step is still found.
#   crash_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
tiny_corpus_run "$trident" crash

common=(--set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 --set model.max_seq_len=16
  --set train.seq_len=16 "${tiny_data[@]}" --set train.micro_batch_size=2
  --set train.steps=6 --set train.log_interval=1 --set train.eval_interval=0 --set checkpoint.interval=2
  --set checkpoint.keep=1)
losses() { grep -oE "^step +[0-9]+/6 \| loss [0-9.]+" "$1"; }

"$trident" train --run-dir "$work/ref" "${common[@]}" > "$work/ref.log" 2>&1 || fail "reference: $(cat "$work/ref.log")"
TRIDENT_CHECKPOINT_CRASH_AT=-1 "$trident" train --run-dir "$work/count" "${common[@]}" > "$work/count.log" 2>&1 \
  || fail "counting run: $(tail "$work/count.log")"
points=$(grep -c "crash_point" "$work/count.log")
[ "$points" -gt 20 ] || fail "only $points crash points in three checkpoint saves: $(grep crash_point "$work/count.log")"

for n in $(seq 1 "$points"); do
  rm -rf "$work/run"
  { (TRIDENT_CHECKPOINT_CRASH_AT=$n exec "$trident" train --run-dir "$work/run" "${common[@]}" > "$work/crash.log" 2>&1); } 2>/dev/null
  rc=$?
  [ "$rc" -eq 137 ] || fail "crash point $n: expected SIGKILL (137), got exit $rc: $(tail -5 "$work/crash.log")"
  where=$(grep -o "crash_point $n (.*)" "$work/crash.log")
  ckpt="$work/run/checkpoints"
  if [ -f "$ckpt/latest" ]; then
    named="$ckpt/$(cat "$ckpt/latest")"
    [ -f "$named/meta.json" ] || fail "$where: latest names '$named', which has no meta.json"
    # The named checkpoint loads and verifies (generate reads every file through its checksum).
    "$trident" generate --checkpoint "$named" --prompt "line" --max-new-tokens 1 --greedy > /dev/null 2>"$work/gen.err" \
      || fail "$where: the checkpoint latest names does not load: $(cat "$work/gen.err")"
  fi
  "$trident" train --run-dir "$work/run" "${common[@]}" --set checkpoint.resume=auto > "$work/resume.log" 2>&1 \
    || fail "$where: resume failed: $(tail -5 "$work/resume.log")"
  # Steps redone after the resume print the uninterrupted run's losses.
  while read -r line; do
    step=$(echo "$line" | grep -oE "^step +[0-9]+")
    grep -qF "$line" "$work/ref.log" || fail "$where: after resume '$line' differs from '$(grep "^$step/" "$work/ref.log")'"
  done < <(losses "$work/resume.log")
  grep -qE "^step +6/6|resumed from .* at step 6 " "$work/resume.log" || fail "$where: the resumed run did not reach step 6"
done

# Re-committing the step latest names: a finished run (checkpoints of steps 3 and 6) resumed from step 3
# redoes steps 4-6 and saves step 6 again, only there (checkpoint.interval=0).
final=("${common[@]}" --set checkpoint.interval=0)
"$trident" train --run-dir "$work/base" "${common[@]}" --set checkpoint.interval=3 --set checkpoint.keep=2 \
  > "$work/base.log" 2>&1 || fail "base run: $(tail "$work/base.log")"
[ -f "$work/base/checkpoints/step_00000003/meta.json" ] && [ "$(cat "$work/base/checkpoints/latest")" = step_00000006 ] \
  || fail "base run: no checkpoints of steps 3 and 6: $(ls "$work/base/checkpoints")"
redo() { echo --set "checkpoint.resume=\"$1/checkpoints/step_00000003\""; }
rm -rf "$work/count" && cp -a "$work/base" "$work/count"
TRIDENT_CHECKPOINT_CRASH_AT=-1 "$trident" train --run-dir "$work/count" "${final[@]}" $(redo "$work/count") \
  > "$work/count.log" 2>&1 || fail "counting run: $(tail "$work/count.log")"
again=$(grep -c "crash_point" "$work/count.log")
for n in $(seq 1 "$again"); do
  rm -rf "$work/run" && cp -a "$work/base" "$work/run"
  { (TRIDENT_CHECKPOINT_CRASH_AT=$n exec "$trident" train --run-dir "$work/run" "${final[@]}" $(redo "$work/run") \
    > "$work/crash.log" 2>&1); } 2>/dev/null
  rc=$?
  [ "$rc" -eq 137 ] || fail "re-commit, crash point $n: expected SIGKILL (137), got exit $rc"
  where="re-commit, $(grep -o "crash_point $n (.*)" "$work/crash.log")"
  "$trident" train --run-dir "$work/run" "${final[@]}" --resume > "$work/resume.log" 2>&1 \
    || fail "$where: resume failed: $(tail -5 "$work/resume.log")"
  grep -qE "resumed from .*step_00000006(\.tmp|\.replaced)? at step 6 " "$work/resume.log" \
    || fail "$where: no complete step-6 checkpoint was found: $(grep -E "resumed|skipping" "$work/resume.log")"
done
echo "ok: killed at each of $points crash points of three saves and $again of a re-commit of the latest step;" \
  "a valid checkpoint always remained, and every resume matched the uninterrupted run"
