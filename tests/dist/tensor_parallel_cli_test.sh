#!/usr/bin/env bash
# End to end through the trident command with tensor and sequence parallelism:
# `trident launch -n 4` trains with tp=2 × dp=2, sequence parallel and ZeRO-1;
# the checkpoint (tensor-parallel pieces in global coordinates) then generates
# the same greedy text on one process and tensor-parallel on 2 and 4 ranks.
# A tensor-parallel size that does not divide the heads is a clear error.
#   tensor_parallel_cli_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
work=$(mktemp -d /tmp/trident-tp.XXXXXX)
trap 'rm -rf "$work"' EXIT
export TRIDENT_NUM_THREADS=1 OMPI_MCA_btl=self,vader

make_tiny_corpus "$trident" "$work"
common=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
  --set train.seq_len=32 --set "data.tokenizer=$work/tok.json" --set "data.paths=[\"$work/c\"]"
  --set data.split=\"90,10,0\" --set log.progress=off --set train.peak_gflops=1)
timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/run" "${common[@]}" \
  --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=12 --set train.log_interval=4 \
  --set train.eval_interval=6 --set train.eval_steps=2 --set dist.tensor_parallel_size=2 \
  --set dist.sequence_parallel=true --set dist.zero_stage=1 --set model.dropout=0.1 \
  > "$work/train.log" 2>&1 || fail "training: $(tail -20 "$work/train.log")"
grep -q "dp=2 × tp=2 × pp=1 (4 ranks)" "$work/train.log" || fail "layout not reported: $(head -5 "$work/train.log")"
grep -q "^step     12/12" "$work/train.log" || fail "no step 12: $(cat "$work/train.log")"

gen=(generate --checkpoint "$work/run" --prompt "line 7 of" --max-new-tokens 12 --greedy)
one=$("$trident" "${gen[@]}" 2>&1) || fail "generate on one process: $one"
two=$(timeout 120 "$trident" launch -n 2 -- "$trident" "${gen[@]}" 2>&1) || fail "generate with tp=2: $two"
four=$(timeout 120 "$trident" launch -n 4 -- "$trident" "${gen[@]}" 2>&1) || fail "generate with tp=4: $four"
[ "$two" = "$one" ] || fail "tp=2 generated '$two', one process '$one'"
[ "$four" = "$one" ] || fail "tp=4 generated '$four', one process '$one'"

# 8 ranks cannot split 4 heads.
bad=$(timeout 120 "$trident" launch -n 8 -- "$trident" "${gen[@]}" 2>&1) && fail "tp=8 over 4 heads succeeded"
echo "$bad" | grep -q "tensor_parallel_size=8 must divide the number of attention heads n_head=4" \
  || fail "unclear error for tp=8: $bad"
echo "ok: $(grep '^step     12/12' "$work/train.log" | cut -c1-60) ... greedy on 1, 2, 4 ranks: $one"
