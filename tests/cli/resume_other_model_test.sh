#!/usr/bin/env bash
# A checkpoint of another model is never resumed, and never rotated away.
#   resume_other_model_test.sh TRIDENT_BINARY
# 1. A 4-layer run saves step 5; `--resume` with n_layer=2 (and checkpoint.keep=1) must fail with one
#    line naming the key and both values, and leave the 4-layer checkpoint in place.
# 2. The same model resumes (under another layout too, with mpirun: dp=2), so the check only
#    refuses what differs.
# 3. A fresh 2-layer run into the same directory with checkpoint.keep=1 rotates its own checkpoints
#    but keeps the other model's last one.
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/tiny_corpus.sh"
# Multi-rank parts need mpirun, and not a sanitizer build (see sanitizer_build in tiny_corpus.sh).
sanitized=""
sanitizer_build "$trident" && sanitized=1
tiny_corpus_run "$trident" resume-model
cd "$work" || exit 1

args=(train --run-dir "$work/run" --set model.n_head=2 --set model.d_model=16
      --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 "${tiny_data[@]}"
      --set train.eval_interval=0 --set train.log_interval=1
      --set train.global_batch_size=4 --set checkpoint.interval=2)

"$trident" "${args[@]}" --set model.n_layer=4 --set train.steps=5 > first.log 2>&1 || fail "4-layer run: $(tail -3 first.log)"
[[ -d run/checkpoints/step_00000005 ]] || fail "the 4-layer run saved no step_00000005"

# 1. Another model size: refused, naming both values; nothing deleted.
"$trident" "${args[@]}" --set model.n_layer=2 --set train.steps=8 --set checkpoint.keep=1 --resume \
  > other.log 2> other.err
rc=$?
[[ $rc -eq 1 ]] || fail "resuming a 4-layer checkpoint with n_layer=2 exited $rc (expected 1): $(tail -3 other.log)"
[[ $(grep -c . other.err) -eq 1 ]] || fail "expected one line on stderr, got: $(cat other.err)"
grep -q "model.n_layer: checkpoint step_00000005 has 4, the configuration has 2" other.err \
  || fail "the error does not name the key and both values: $(cat other.err)"
[[ -f run/checkpoints/step_00000005/meta.json ]] || fail "the 4-layer checkpoint was deleted"
echo "ok: a 4-layer checkpoint is not resumed as a 2-layer model: $(cat other.err)"

# Other sizes too (the vocabulary, the width).
"$trident" "${args[@]}" --set model.n_layer=4 --set model.vocab_size=320 --set train.steps=8 --resume \
  > /dev/null 2> vocab.err && fail "resuming with another vocab_size succeeded"
grep -q "model.vocab_size: checkpoint step_00000005 has 300, the configuration has 320" vocab.err \
  || fail "vocab_size error: $(cat vocab.err)"
echo "ok: $(cat vocab.err)"

# 2. The same model resumes; under another layout as well when MPI is there.
if command -v mpirun > /dev/null && [[ -z $sanitized ]]; then
  "$trident" launch -n 2 -- "$trident" "${args[@]}" --set model.n_layer=4 --set train.steps=6 --resume \
    > layout.log 2>&1 || fail "resuming the same model under dp=2: $(tail -5 layout.log)"
  grep -q "resumed from .*step_00000005 at step 5" layout.log || fail "no resume under dp=2: $(head -5 layout.log)"
  echo "ok: the same model resumes under dp=2"
fi
"$trident" "${args[@]}" --set model.n_layer=4 --set train.steps=7 --resume > same.log 2>&1 \
  || fail "resuming the same model: $(tail -3 same.log)"
grep -q "resumed from .*at step [56]" same.log || fail "no resume: $(head -5 same.log)"
echo "ok: the same model resumes"
newest4=$(cat run/checkpoints/latest)

# 3. A new (not resumed) 2-layer run in the same directory would replace the 4-layer checkpoints of the
#    same steps: refused, naming the difference; nothing is deleted.
before=$(ls run/checkpoints)
"$trident" "${args[@]}" --set model.n_layer=2 --set train.steps=4 --set checkpoint.keep=1 > fresh.log 2> fresh.err
rc=$?
[[ $rc -eq 1 ]] || fail "a new 2-layer run over the 4-layer checkpoints exited $rc (expected 1)"
grep -q "model.n_layer: checkpoint step_0000000[0-9] has 4, the configuration has 2: .* holds another model's checkpoints" \
  fresh.err || fail "the new run's refusal: $(cat fresh.err)"
[[ $(ls run/checkpoints) == "$before" && -f run/checkpoints/$newest4/meta.json ]] \
  || fail "a refused run changed the checkpoints: $(ls run/checkpoints)"
echo "ok: a new run of another model over them is refused: $(cat fresh.err)"

# 4. Rotation counts only the current model's checkpoints: a 2-layer run resumed with checkpoint.keep=1 in a
#    directory that also holds a 4-layer checkpoint keeps that one.
two=()
for a in "${args[@]}"; do [[ $a == "$work/run" ]] && two+=("$work/two") || two+=("$a"); done
"$trident" "${two[@]}" --set model.n_layer=2 --set train.steps=4 > two.log 2>&1 \
  || fail "2-layer run: $(tail -3 two.log)"
cp -r "run/checkpoints/$newest4" "two/checkpoints/step_00000001"
sed -i 's/"step": [0-9]*$/"step": 1/' "two/checkpoints/step_00000001/meta.json"
"$trident" "${two[@]}" --set model.n_layer=2 --set train.steps=8 --set checkpoint.keep=1 --resume \
  > two-resume.log 2>&1 || fail "2-layer resume: $(tail -3 two-resume.log)"
[[ -d two/checkpoints/step_00000001 ]] || fail "rotation (keep=1) deleted the other model's only checkpoint"
[[ -f two/checkpoints/step_00000008/meta.json && ! -d two/checkpoints/step_00000006 ]] \
  || fail "rotation did not keep just the newest of the run's own: $(ls two/checkpoints)"
echo "ok: rotation (keep=1) kept the other model's checkpoint and only the newest of its own"
