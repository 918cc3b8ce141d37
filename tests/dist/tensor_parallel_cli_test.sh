#!/usr/bin/env bash
# End to end through the trident command with tensor and sequence parallelism:
# `trident launch -n 4` trains with tp=2 × dp=2, sequence parallel and ZeRO-1;
# the checkpoint (tensor-parallel pieces in global coordinates) then generates
# the same greedy text on one process and tensor-parallel on 2 and 4 ranks, and
# `trident eval` gives the same loss on one process and on 2 ranks; train.exit_duration_minutes stops
# all ranks after the same step.
# A tensor-parallel size that does not divide the heads is a clear error.
#   tensor_parallel_cli_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
export OMPI_MCA_btl=self,vader
tiny_corpus_run "$trident" tp

common=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
  --set train.seq_len=32 "${tiny_data[@]}")
timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/run" "${common[@]}" \
  --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=12 --set train.log_interval=4 \
  --set train.eval_interval=6 --set train.eval_steps=2 --set dist.tensor_parallel_size=2 \
  --set dist.sequence_parallel=true --set dist.zero_stage=1 --set model.dropout=0.1 \
  > "$work/train.log" 2>&1 || fail "training: $(tail -20 "$work/train.log")"
grep -q "dp=2 × tp=2 × pp=1 (4 ranks)" "$work/train.log" || fail "layout not reported: $(head -5 "$work/train.log")"
grep -q "^step     12/12" "$work/train.log" || fail "no step 12: $(cat "$work/train.log")"

# train.exit_duration_minutes on 4 ranks: each rank's clock passes 0.0001 minutes during setup, and they
# agree to stop after the same step, with one checkpoint.
timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/timed" "${common[@]}" \
  --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=50 \
  --set dist.tensor_parallel_size=2 --set train.exit_duration_minutes=0.0001 > "$work/timed.log" 2>&1 \
  || fail "timed training: $(tail -20 "$work/timed.log")"
grep -q "stopped after step 1: train.exit_duration_minutes=0.0001 has passed" "$work/timed.log" \
  || fail "no exit-duration stop: $(tail -5 "$work/timed.log")"
[[ $(cat "$work/timed/checkpoints/latest") == step_00000001 ]] || fail "timed run: $(ls "$work/timed/checkpoints")"

gen=(generate --checkpoint "$work/run" --prompt "line 7 of" --max-new-tokens 12 --greedy)
one=$("$trident" "${gen[@]}" 2>&1) || fail "generate on one process: $one"
two=$(timeout 120 "$trident" launch -n 2 -- "$trident" "${gen[@]}" 2>&1) || fail "generate with tp=2: $two"
four=$(timeout 120 "$trident" launch -n 4 -- "$trident" "${gen[@]}" 2>&1) || fail "generate with tp=4: $four"
[ "$two" = "$one" ] || fail "tp=2 generated '$two', one process '$one'"
[ "$four" = "$one" ] || fail "tp=4 generated '$four', one process '$one'"

# eval: the same loss on one process and tensor-parallel over 2 ranks (to 1e-4: TP re-sums the
# GEMMs), on the dataset's documents and on a text file; a window longer than the context is an error.
ev=(eval --checkpoint "$work/run" --data "$work/c" --seq-len 16 --max-tokens 600)
e1=$("$trident" "${ev[@]}" 2>&1) || fail "eval on one process: $e1"
e2=$(timeout 120 "$trident" launch -n 2 -- "$trident" "${ev[@]}" 2>&1) || fail "eval with tp=2: $e2"
echo "$e1" | grep -q "^eval: 599 tokens of $work/c predicted in 38 window(s) of up to 16: loss [0-9.]* | perplexity" \
  || fail "eval output: $e1"
loss_of() { sed -n 's/.*: loss \([0-9.]*\) .*/\1/p' <<<"$1"; }
awk -v a="$(loss_of "$e1")" -v b="$(loss_of "$e2")" 'BEGIN { d = a - b; exit !(a > 0 && d < 1e-4 && -d < 1e-4) }' \
  || fail "eval: tp=2 gave '$e2', one process '$e1'"
eb=$("$trident" "${ev[@]}" --precision bf16 2>&1) || fail "eval in bf16: $eb"
awk -v a="$(loss_of "$e1")" -v b="$(loss_of "$eb")" 'BEGIN { d = a - b; exit !(d < 0.02 && -d < 0.02) }' \
  || fail "eval: bf16 gave '$eb', fp32 '$e1'"
gb=$("$trident" "${gen[@]}" --precision bf16 2>&1) || fail "generate in bf16: $gb"
et=$("$trident" eval --checkpoint "$work/run" --text "$work/c.txt" --max-tokens 100 --batch-size 3 2>&1) \
  || fail "eval of a text file: $et"
echo "$et" | grep -q "^eval: 99 tokens of $work/c.txt predicted in 4 window(s) of up to 32: loss" || fail "eval: $et"
long=$("$trident" eval --checkpoint "$work/run" --text "$work/c.txt" --seq-len 64 2>&1) && fail "--seq-len 64 passed"
echo "$long" | grep -q "^trident: error: --seq-len 64 exceeds the model's context of 32 tokens$" \
  || fail "unclear error for --seq-len 64: $long"

# 8 ranks cannot split 4 heads.
bad=$(timeout 120 "$trident" launch -n 8 -- "$trident" "${gen[@]}" 2>&1) && fail "tp=8 over 4 heads succeeded"
echo "$bad" | grep -q "tensor_parallel_size=8 must divide the number of attention heads n_head=4" \
  || fail "unclear error for tp=8: $bad"
echo "ok: $(grep '^step     12/12' "$work/train.log" | cut -c1-60) ... greedy on 1, 2, 4 ranks: $one"
